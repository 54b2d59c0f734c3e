use super::{Case, Tally, check};

pub(super) fn cases() -> Vec<Case> {
    vec![]
}

pub(super) fn tally() -> Tally {
    check("revision", cases())
}

#[test]
fn revision_conformance() {
    tally();
}
