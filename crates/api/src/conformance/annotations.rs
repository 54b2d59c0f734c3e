use super::{Case, Tally, check};

pub(super) fn cases() -> Vec<Case> {
    vec![]
}

pub(super) fn tally() -> Tally {
    check("annotations", cases())
}

#[test]
fn annotations_conformance() {
    tally();
}
