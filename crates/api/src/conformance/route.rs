use super::{Case, Tally, check};

pub(super) fn cases() -> Vec<Case> {
    vec![]
}

pub(super) fn tally() -> Tally {
    check("route", cases())
}

#[test]
fn route_conformance() {
    tally();
}
