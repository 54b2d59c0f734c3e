//! `config-gc`: its keys, defaults and checks, after Knative's `pkg/gc/config.go`.

use super::*;

pub(super) fn gc(d: &Data) -> Result<GcConfig, ConfigError> {
    let mut c = GcConfig::default();
    for (key, target) in [
        ("retain-since-create-time", &mut c.retain_since_create_time),
        (
            "retain-since-last-active-time",
            &mut c.retain_since_last_active_time,
        ),
    ] {
        let Some((k, v)) = d.get(&[key]) else {
            continue;
        };
        *target = if v.eq_ignore_ascii_case("disabled") {
            None
        } else {
            let dur = GoDuration::parse(v).map_err(|e| d.unparsable(k, e))?;
            if dur.0 < 0 {
                return Err(d.invalid(k, format!("{k} = {dur}, must be non-negative")));
            }
            Some(dur)
        };
    }
    for (key, target) in [
        ("min-non-active-revisions", &mut c.min_non_active_revisions),
        ("max-non-active-revisions", &mut c.max_non_active_revisions),
    ] {
        let Some((k, v)) = d.get(&[key]) else {
            continue;
        };
        *target = if v.eq_ignore_ascii_case("disabled") {
            None
        } else {
            let n: i64 = v.parse().map_err(|_| {
                d.invalid(
                    k,
                    format!("failed to parse {v:?}: expected an integer or \"disabled\""),
                )
            })?;
            if n < 0 {
                return Err(d.invalid(k, format!("{k} = {n}, must be non-negative")));
            }
            Some(n)
        };
    }
    if let (Some(min), Some(max)) = (c.min_non_active_revisions, c.max_non_active_revisions)
        && min > max
    {
        return Err(d.invalid(
            "min-non-active-revisions",
            format!("min-non-active-revisions ({min}) must be <= max-non-active-revisions ({max})"),
        ));
    }
    Ok(c)
}
