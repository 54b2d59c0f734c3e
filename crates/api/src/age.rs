//! Ages as Kubernetes prints them (`k8s.io/apimachinery/pkg/util/duration.HumanDuration`),
//! for the CLI's tables and the API server's `date` Table cells alike.

use chrono::{DateTime, TimeDelta, Utc};

/// Kubernetes `k8s.io/apimachinery/pkg/util/duration.HumanDuration`: a short, rounded-down
/// age such as `45s`, `2m5s`, `15m`, `3h20m`, `2d4h` or `3y12d`.
pub fn human_duration(d: TimeDelta) -> String {
    let seconds = d.num_milliseconds() / 1000; // truncates toward zero, like Go's int(d.Seconds())
    if seconds < -1 {
        return "<invalid>".into();
    } else if seconds < 0 {
        return "0s".into();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        return format!("{hours}h{m}m");
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        return format!("{}d{}h", hours / 24, h);
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        return format!("{}y{}d", hours / 24 / 365, dy);
    }
    format!("{}y", hours / 24 / 365)
}

/// Parses an RFC 3339 timestamp as the API writes it.
pub fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// kubectl's `translateTimestampSince`: the age of a timestamp, `<unknown>` when absent.
pub fn age(timestamp: Option<&str>, now: DateTime<Utc>) -> String {
    match timestamp.and_then(parse_time) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_duration_matches_kubernetes() {
        let cases: &[(i64, &str)] = &[
            (-5_000, "<invalid>"),
            (-2_000, "<invalid>"),
            (-1_500, "0s"),
            (-1_000, "0s"),
            (-999, "0s"),
            (0, "0s"),
            (1_000, "1s"),
            (59_000, "59s"),
            (60_000, "60s"),
            (119_999, "119s"),
            (120_000, "2m"),
            (125_000, "2m5s"),
            (9 * 60_000 + 59_000, "9m59s"),
            (10 * 60_000, "10m"),
            (10 * 60_000 + 30_000, "10m"),
            (179 * 60_000, "179m"),
            (3 * 3_600_000, "3h"),
            (3 * 3_600_000 + 20 * 60_000, "3h20m"),
            (7 * 3_600_000 + 59 * 60_000, "7h59m"),
            (8 * 3_600_000, "8h"),
            (47 * 3_600_000 + 59 * 60_000, "47h"),
            (48 * 3_600_000, "2d"),
            (52 * 3_600_000, "2d4h"),
            (7 * 86_400_000 + 23 * 3_600_000, "7d23h"),
            (8 * 86_400_000, "8d"),
            (729 * 86_400_000, "729d"),
            (730 * 86_400_000, "2y"),
            (742 * 86_400_000, "2y12d"),
            (8 * 365 * 86_400_000, "8y"),
            (20 * 365 * 86_400_000 + 5 * 86_400_000, "20y"),
        ];
        for &(ms, want) in cases {
            assert_eq!(human_duration(TimeDelta::milliseconds(ms)), want, "{ms}ms");
        }
    }

    #[test]
    fn age_of_missing_or_bad_timestamp_is_unknown() {
        let now = parse_time("2024-05-01T12:00:00Z").unwrap();
        assert_eq!(age(None, now), "<unknown>");
        assert_eq!(age(Some("yesterday"), now), "<unknown>");
        assert_eq!(age(Some("2024-05-01T11:57:55Z"), now), "2m5s");
        assert_eq!(age(Some("2024-05-01T14:00:00+02:00"), now), "0s");
    }
}
