//! Gradual rollout of a new latest revision (Knative `pkg/reconciler/route/traffic/rollout.go`,
//! driven as `pkg/reconciler/route/reconcile_resources.go` `reconcileRollout` drives it).
//!
//! When a route has a rollout duration (`serving.knative.dev/rollout-duration` on the Route,
//! else `config-network.rollout-duration`), a `latestRevision: true` target whose
//! configuration gets a new latest ready revision does not move at once: the new revision
//! takes 1% first, then the rest in equal steps over the duration, the oldest revisions
//! drained first. The state is a [`Rollout`], kept (as Knative keeps it) as JSON in the
//! `networking.knative.dev/rollout` annotation of the route's KIngress; each reconcile steps
//! it from the previous state and the reconciler comes back at the next step's time.
//!
//! Pure functions over Unix times in nanoseconds, as Knative's; the table tests port the
//! cases of Knative's `rollout_test.go`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use wisp_api::serving::TrafficTarget;

const SECOND: i64 = 1_000_000_000;

/// The rollout state of a route: one entry per (tag, configuration) with a
/// `latestRevision` target, sorted by tag, then configuration name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollout {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configurations: Vec<ConfigurationRollout>,
}

/// The rollout of one configuration's latest revision under one tag ("" = the main
/// traffic).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigurationRollout {
    pub configuration_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tag: String,
    /// The configuration's whole share of the tag's traffic; the revisions' sum to it.
    pub percent: i64,
    /// Oldest first; the last is the newest. One when no rollout is in flight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<RevisionRollout>,
    #[serde(default)]
    pub step_params: RolloutParams,
}

/// Timing and size of the steps, in Unix nanoseconds and percent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutParams {
    /// When the rollout started (Knative spells it `starttime`).
    #[serde(default, rename = "starttime", skip_serializing_if = "is_zero")]
    pub start_time: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub next_step_time: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step_duration: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub step_size: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// One revision and its share of the route's traffic (not of the configuration's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRollout {
    pub revision_name: String,
    pub percent: i64,
}

impl ConfigurationRollout {
    /// No rollout in flight: zero or one revision.
    pub fn done(&self) -> bool {
        self.revisions.len() < 2
    }

    /// `computeProperties`: the step count, size and interval, once the first 1% has
    /// moved (`min_step_secs` is how long that took, at least 1s).
    fn compute_properties(&mut self, now: i64, min_step_secs: f64, duration_secs: f64) {
        // The first 1% already took `min_step_secs` of the duration.
        let duration_secs = (duration_secs - min_step_secs).max(1.0);
        let mut num_steps = (duration_secs / min_step_secs).max(1.0);
        // Steps are at least 1%; 1% has already moved.
        let rem_percent = (self.percent - 1) as f64;
        if rem_percent < num_steps {
            num_steps = rem_percent;
        }
        // Equal steps, rounded to the nearest (rounding down would double the duration:
        // 1.9 → 1).
        let step_size = (rem_percent / num_steps).round();
        let step_duration = duration_secs / num_steps * SECOND as f64;
        self.step_params.step_duration = step_duration as i64;
        self.step_params.step_size = step_size as i64;
        self.step_params.next_step_time = (now as f64 + step_duration) as i64;
    }
}

impl Rollout {
    /// Knative's `BuildRollout`: the state the traffic asks for, with no rollout (every
    /// `latestRevision` target with a share at 100% of its revision). `traffic` is the
    /// resolved traffic, whose latest targets name their configuration.
    pub fn build(traffic: &[TrafficTarget]) -> Rollout {
        let mut configurations = Vec::new();
        for (tag, targets) in targets_by_tag(traffic) {
            for t in targets {
                let percent = t.percent.unwrap_or(0);
                if t.latest_revision != Some(true) || percent == 0 {
                    continue;
                }
                configurations.push(ConfigurationRollout {
                    configuration_name: t.configuration_name.clone(),
                    tag: tag.clone(),
                    percent,
                    revisions: vec![RevisionRollout {
                        revision_name: t.revision_name.clone(),
                        percent,
                    }],
                    step_params: RolloutParams::default(),
                });
            }
        }
        let mut r = Rollout { configurations };
        r.sort();
        r
    }

    /// The state stored in the KIngress annotation; None when it does not parse or does
    /// not add up (Knative's `deserializeRollout`: a hand-edited or corrupt state is
    /// dropped, the rollout then completes at once).
    pub fn parse(s: &str) -> Option<Rollout> {
        let r: Rollout = serde_json::from_str(s).ok()?;
        r.validate().then_some(r)
    }

    /// The annotation's value.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    fn sort(&mut self) {
        self.configurations.sort_by(|a, b| {
            (a.tag.as_str(), a.configuration_name.as_str())
                .cmp(&(b.tag.as_str(), b.configuration_name.as_str()))
        });
    }

    /// The rollouts of one tag.
    pub fn by_tag<'a>(&'a self, tag: &'a str) -> impl Iterator<Item = &'a ConfigurationRollout> {
        self.configurations.iter().filter(move |c| c.tag == tag)
    }

    /// The rollout of (tag, configuration).
    pub fn find(&self, tag: &str, configuration: &str) -> Option<&ConfigurationRollout> {
        self.configurations
            .iter()
            .find(|c| c.tag == tag && c.configuration_name == configuration)
    }

    /// Every configuration's rollout is complete.
    pub fn done(&self) -> bool {
        self.configurations.iter().all(ConfigurationRollout::done)
    }

    /// Knative's `Validate`: no share over 100%, step no larger than the share, and the
    /// revisions summing to the configuration's share.
    pub fn validate(&self) -> bool {
        self.configurations.iter().all(|c| {
            c.percent <= 100
                && c.step_params.step_size >= 0
                && c.step_params.step_size <= c.percent
                && c.revisions.iter().map(|r| r.percent).sum::<i64>() == c.percent
        })
    }

    /// `ObserveReady`: rollouts that started but have no steps yet get them, the first
    /// 1% having taken `now - start` (at least 1s).
    pub fn observe_ready(&mut self, now: i64, duration_secs: f64) {
        for c in &mut self.configurations {
            if c.step_params.step_duration == 0 && c.step_params.start_time > 0 {
                let took = (now - c.step_params.start_time) as f64 / SECOND as f64;
                let min_step_secs = took.ceil().max(1.0);
                c.compute_properties(now, min_step_secs, duration_secs);
            }
        }
    }

    /// Knative's `Step`: merges the wanted state (`self`, from [`Rollout::build`]) with the
    /// previous one into the traffic shape to publish now, and the Unix time (ns) of the
    /// next step (0: none scheduled). Without a previous state the wanted one is returned.
    pub fn step(self, prev: Option<Rollout>, now: i64) -> (Rollout, i64) {
        let Some(prev) = prev.filter(|p| !p.configurations.is_empty()) else {
            return (self, 0);
        };
        let group = |r: Rollout| {
            let mut m: BTreeMap<String, Vec<ConfigurationRollout>> = BTreeMap::new();
            for c in r.configurations {
                m.entry(c.tag.clone()).or_default().push(c);
            }
            m
        };
        let mut prev_by_tag = group(prev);
        let mut out = Vec::new();
        let mut next = i64::MAX;
        for (tag, cur) in group(self) {
            let Some(mut prevs) = prev_by_tag.remove(&tag) else {
                // A new tag: nothing to roll from.
                out.extend(cur.into_iter().take(1));
                continue;
            };
            // An intersection of two lists sorted by configuration name.
            let mut cur = cur.into_iter().peekable();
            let mut j = 0;
            while let Some(c) = cur.peek() {
                if j >= prevs.len() {
                    // Configurations added by this update.
                    out.extend(cur.next());
                } else if c.configuration_name == prevs[j].configuration_name {
                    let c = cur.next().unwrap_or_default();
                    match c.percent {
                        p if p > 1 => {
                            let sc = step_config(c, &mut prevs[j], now);
                            let nst = sc.step_params.next_step_time;
                            if nst > 0 && nst < next {
                                next = nst;
                            }
                            out.push(sc);
                        }
                        // A 1% A/B target has nothing to step.
                        1 => out.push(c),
                        // 0%: no rollout at all.
                        _ => {}
                    }
                    j += 1;
                } else if c.configuration_name < prevs[j].configuration_name {
                    // A new configuration: kept if it gets traffic.
                    let c = cur.next().unwrap_or_default();
                    if c.percent != 0 {
                        out.push(c);
                    }
                } else {
                    // A configuration this update removed.
                    j += 1;
                }
            }
        }
        let mut r = Rollout {
            configurations: out,
        };
        r.sort();
        (r, if next == i64::MAX { 0 } else { next })
    }
}

/// Knative's `Config.Targets`: the resolved traffic grouped by traffic name ("" = all of
/// it, each tag its own), each group consolidated by revision (percents summed, the first
/// entry's fields kept; a group of one revision gets 100%).
pub fn targets_by_tag(traffic: &[TrafficTarget]) -> BTreeMap<String, Vec<TrafficTarget>> {
    let mut groups: BTreeMap<String, Vec<TrafficTarget>> = BTreeMap::new();
    for t in traffic {
        groups.entry(String::new()).or_default().push(t.clone());
        if !t.tag.is_empty() {
            groups.entry(t.tag.clone()).or_default().push(t.clone());
        }
    }
    groups
        .into_iter()
        .map(|(tag, targets)| (tag, consolidate(targets)))
        .collect()
}

fn consolidate(targets: Vec<TrafficTarget>) -> Vec<TrafficTarget> {
    let mut out: Vec<TrafficTarget> = Vec::new();
    for t in targets {
        match out.iter_mut().find(|o| o.revision_name == t.revision_name) {
            Some(o) => o.percent = Some(o.percent.unwrap_or(0) + t.percent.unwrap_or(0)),
            None => out.push(t),
        }
    }
    if let [only] = out.as_mut_slice() {
        only.percent = Some(100);
    }
    out
}

/// `adjustPercentage`: the previous rollout brought to a new share of the traffic: more
/// goes to the newest revision, less is taken from the oldest ones.
fn adjust_percentage(goal: i64, cr: &mut ConfigurationRollout) {
    let diff = goal - cr.percent;
    if goal == 0 {
        cr.revisions.clear();
    } else if diff > 0 {
        if let Some(last) = cr.revisions.last_mut() {
            last.percent += diff;
        }
    } else if diff < 0 {
        let mut diff = -diff;
        let mut i = 0;
        while diff > 0 && i < cr.revisions.len() {
            if cr.revisions[i].percent > diff {
                cr.revisions[i].percent -= diff;
                break;
            }
            diff -= cr.revisions[i].percent;
            i += 1;
        }
        cr.revisions.drain(..i);
    }
}

/// `stepRevisions`: at the step time, moves `step_size` more to the newest revision,
/// taken from the newest of the older ones first; the last step clears the parameters.
fn step_revisions(goal: &mut ConfigurationRollout, now: i64) {
    if now < goal.step_params.next_step_time || goal.revisions.len() < 2 {
        return;
    }
    let len = goal.revisions.len();
    let mut remaining = goal.step_params.step_size;
    let mut write = len - 1;
    let mut read = len as i64 - 2;
    // The step can exceed what the older revisions have left when the configuration's
    // share was lowered below it; the newest is capped at the share below.
    while remaining > 0 && read >= 0 {
        let r = &mut goal.revisions[read as usize];
        if r.percent > remaining {
            r.percent -= remaining;
            break;
        }
        remaining -= r.percent;
        write -= 1;
        read -= 1;
    }
    goal.revisions[write] = goal.revisions[len - 1].clone();
    goal.revisions[write].percent += goal.step_params.step_size;
    if goal.revisions[write].percent > goal.percent {
        goal.revisions[write].percent = goal.percent;
    }
    goal.revisions.truncate(write + 1);
    if goal.revisions.len() > 1 {
        goal.step_params.next_step_time = now + goal.step_params.step_duration;
    } else {
        // The last step: done.
        goal.step_params = RolloutParams::default();
    }
}

/// `stepConfig`: the goal (one revision) against the previous rollout of the same
/// configuration: carries on a rollout in flight, or starts one when the goal's revision
/// is not the newest of the previous state.
fn step_config(
    goal: ConfigurationRollout,
    prev: &mut ConfigurationRollout,
    now: i64,
) -> ConfigurationRollout {
    let pc = prev.revisions.len();
    if pc > 0 {
        adjust_percentage(goal.percent, prev);
    }
    let goal_rev = goal.revisions.first().cloned().unwrap_or_default();
    let mut ret = ConfigurationRollout {
        step_params: RolloutParams::default(),
        ..goal
    };
    // Lowering the share drops revisions from the oldest end only, so the newest is still
    // the one the previous state rolled out.
    let prev_newest = prev.revisions.last().map(|r| r.revision_name.as_str());
    if pc == 0 || prev.revisions.is_empty() || Some(goal_rev.revision_name.as_str()) == prev_newest
    {
        // No new revision: carry on the rollout in flight, if any.
        if prev.revisions.len() > 1 {
            ret.revisions = prev.revisions.clone();
            ret.step_params = prev.step_params.clone();
            // Steps start once `observe_ready` has sized them.
            if ret.step_params.step_size > 0 {
                step_revisions(&mut ret, now);
            }
        }
        return ret;
    }
    // A new revision: its rollout starts now with 1%, taken from the newest revision that
    // has any (the newest drains first).
    ret.step_params.start_time = now;
    if let Some(r) = prev.revisions.iter_mut().rev().find(|r| r.percent > 0) {
        r.percent -= 1;
    }
    let mut revisions: Vec<RevisionRollout> = prev
        .revisions
        .iter()
        .filter(|r| r.percent != 0)
        .cloned()
        .collect();
    revisions.push(RevisionRollout {
        revision_name: goal_rev.revision_name,
        percent: 1,
    });
    ret.revisions = revisions;
    ret
}

/// Knative's `reconcileRollout`: the rollout to publish now and the Unix time (ns) of the
/// next step (0: none). `duration_secs` ≤ 0 turns rollouts off (the wanted state at once).
///
/// Knative sizes the steps (`ObserveReady`) when the KIngress reports the first 1% in
/// place; wisp's ingress serves a published split at once, so the steps are sized in the
/// same reconcile that starts the rollout, with the 1s minimum Knative uses.
pub fn reconcile(
    traffic: &[TrafficTarget],
    prev: Option<Rollout>,
    duration_secs: i64,
    now: i64,
) -> (Rollout, i64) {
    let cur = Rollout::build(traffic);
    if duration_secs <= 0 {
        return (cur, 0);
    }
    let (mut ro, mut next) = cur.step(prev, now);
    let to_size = ro
        .configurations
        .iter()
        .any(|c| c.step_params.step_duration == 0 && c.step_params.start_time > 0);
    if to_size {
        ro.observe_ready(now, duration_secs as f64);
        next = ro
            .configurations
            .iter()
            .map(|c| c.step_params.next_step_time)
            .filter(|t| *t > 0)
            .min()
            .unwrap_or(0);
    }
    (ro, next)
}

/// Knative's `GetRevisionTrafficTargets` with a rollout: each `latestRevision` target with
/// a rollout under its tag becomes one entry per revision of that rollout, with the
/// rollout's percents. Knative shows this only while a rollout is in flight (the caller
/// checks [`Rollout::done`]).
pub fn status_targets(traffic: &[TrafficTarget], ro: &Rollout) -> Vec<TrafficTarget> {
    let mut out = Vec::with_capacity(traffic.len() + 1);
    for t in traffic {
        let rolled = (t.latest_revision == Some(true))
            .then(|| ro.find(&t.tag, &t.configuration_name))
            .flatten();
        match rolled {
            None => out.push(t.clone()),
            Some(c) => out.extend(c.revisions.iter().map(|r| TrafficTarget {
                revision_name: r.revision_name.clone(),
                percent: Some(r.percent),
                ..t.clone()
            })),
        }
    }
    out
}

/// A traffic group's splits under its rollouts (`makeBaseIngressPath`): (revision,
/// percent) in order, 0% targets left out; a latest target whose configuration is rolling
/// out splits over the rollout's revisions.
pub fn splits<'a>(
    targets: &'a [TrafficTarget],
    ro: &'a Rollout,
    tag: &'a str,
) -> Vec<(&'a str, i64)> {
    let mut out = Vec::new();
    for t in targets {
        let percent = t.percent.unwrap_or(0);
        if percent == 0 {
            continue;
        }
        let rolled = (t.latest_revision == Some(true))
            .then(|| ro.find(tag, &t.configuration_name))
            .flatten()
            .filter(|c| !c.done());
        match rolled {
            None => out.push((t.revision_name.as_str(), percent)),
            Some(c) => out.extend(
                c.revisions
                    .iter()
                    .map(|r| (r.revision_name.as_str(), r.percent)),
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests;
