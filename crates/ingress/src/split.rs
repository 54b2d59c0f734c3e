//! The traffic split: a weighted random pick of one revision target by percent.

use rand::Rng;
use wisp_api::routing::RevisionTarget;

/// Picks a target with probability proportional to its percent (None when empty or all
/// zero). `roll` is a uniform random number; see [`pick`].
pub fn pick_with(targets: &[RevisionTarget], roll: u32) -> Option<&RevisionTarget> {
    if let [only] = targets {
        return Some(only);
    }
    let total: u32 = targets.iter().map(|t| t.percent).sum();
    if total == 0 {
        return None;
    }
    let mut x = roll % total;
    for t in targets {
        if x < t.percent {
            return Some(t);
        }
        x -= t.percent;
    }
    None
}

/// [`pick_with`] with the thread-local RNG.
pub fn pick(targets: &[RevisionTarget]) -> Option<&RevisionTarget> {
    if let [only] = targets {
        return Some(only);
    }
    pick_with(targets, rand::rng().random())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rev: &str, percent: u32) -> RevisionTarget {
        RevisionTarget {
            namespace: "default".into(),
            revision: rev.into(),
            percent,
        }
    }

    #[test]
    fn eighty_twenty_within_two_percent() {
        let targets = [t("a", 80), t("b", 20)];
        let n = 10_000;
        let a = (0..n)
            .filter(|_| pick(&targets).unwrap().revision == "a")
            .count();
        let share = a as f64 / n as f64;
        assert!((0.78..=0.82).contains(&share), "share of a: {share}");
    }

    #[test]
    fn exact_by_roll() {
        let targets = [t("a", 80), t("b", 15), t("c", 5)];
        let name = |r| pick_with(&targets, r).unwrap().revision.as_str();
        assert_eq!(name(0), "a");
        assert_eq!(name(79), "a");
        assert_eq!(name(80), "b");
        assert_eq!(name(94), "b");
        assert_eq!(name(95), "c");
        assert_eq!(name(99), "c");
        assert_eq!(name(100), "a");
        // Every roll in one period lands in proportion.
        let mut counts = [0; 3];
        for r in 0..100 {
            counts[(name(r).as_bytes()[0] - b'a') as usize] += 1;
        }
        assert_eq!(counts, [80, 15, 5]);
    }

    #[test]
    fn degenerate() {
        assert!(pick(&[]).is_none());
        assert!(pick(&[t("a", 0), t("b", 0)]).is_none());
        // A lone target takes everything whatever its percent says.
        assert_eq!(pick(&[t("a", 0)]).unwrap().revision, "a");
        // Zero-percent targets are never picked.
        let targets = [t("a", 0), t("b", 100)];
        assert!((0..1000).all(|_| pick(&targets).unwrap().revision == "b"));
    }
}
