use super::{Case, Tally, check};

pub(super) fn cases() -> Vec<Case> {
    vec![]
}

pub(super) fn tally() -> Tally {
    check("podspec", cases())
}

#[test]
fn podspec_conformance() {
    tally();
}
