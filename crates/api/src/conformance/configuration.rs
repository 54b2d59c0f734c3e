use super::{Case, Tally, check};

pub(super) fn cases() -> Vec<Case> {
    vec![]
}

pub(super) fn tally() -> Tally {
    check("configuration", cases())
}

#[test]
fn configuration_conformance() {
    tally();
}
