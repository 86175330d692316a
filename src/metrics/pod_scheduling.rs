//! When the provisioner first saw each pending pod, when it first decided about it, and when it
//! first found it a place: the points in memory upstream's `karpenter_pods_provisioning_*`
//! families and `karpenter_pods_scheduling_decision_duration_seconds` measure from (not the
//! pod's creation, which may predate Karpenter's view, or a restart).
//!
//! The provisioner writes (see [`PodSchedulingTimes::ack`] and [`PodSchedulingTimes::decide`]),
//! the metrics controller reads and forgets pods that started, finished or went away. Time is
//! passed in; nothing here reads the clock.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};

/// What the provisioner knows about one pod's scheduling (all `None`: never seen pending).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Times {
    /// The first provisioning round that saw it pending.
    pub acked: Option<DateTime<Utc>>,
    /// The first round that decided about it (a place, or none).
    pub decided: Option<DateTime<Utc>>,
    /// The first round of the current streak that found it a place; cleared when a later round
    /// finds none, as upstream's.
    pub schedulable: Option<DateTime<Utc>>,
}

/// The [`Times`] of pods by `namespace/name`, shared by the provisioner and the metrics
/// controller.
#[derive(Debug, Default)]
pub struct PodSchedulingTimes {
    pods: Mutex<HashMap<String, Times>>,
}

/// The key a pod is known by here: `namespace/name`, as the provisioner names pods.
pub fn pod_key(pod: &crate::snapshot::ClusterPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Seconds from `from` to `to`, never negative (conditions carry whole seconds).
pub fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds().max(0) as f64 / 1000.0
}

impl PodSchedulingTimes {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Times>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that a provisioning round is about to schedule `pods` (keys); a pod seen before
    /// keeps its first time.
    pub fn ack<'a>(&self, pods: impl IntoIterator<Item = &'a str>, now: DateTime<Utc>) {
        let mut map = self.lock();
        for key in pods {
            let t = map.entry(key.to_string()).or_default();
            t.acked.get_or_insert(now);
        }
    }

    /// Records a round's decisions: `placed` got a place (a new NodeClaim or existing
    /// capacity), `failed` none. Returns, for each pod decided for the first time, the seconds
    /// since it was first seen (`karpenter_pods_scheduling_decision_duration_seconds`).
    pub fn decide<'a>(
        &self,
        placed: impl IntoIterator<Item = &'a str>,
        failed: impl IntoIterator<Item = &'a str>,
        now: DateTime<Utc>,
    ) -> Vec<f64> {
        let mut map = self.lock();
        let mut first = Vec::new();
        let mut mark = |key: &str, schedulable: bool| {
            let t = map.entry(key.to_string()).or_default();
            if t.decided.is_none() {
                t.decided = Some(now);
                if let Some(acked) = t.acked {
                    first.push(seconds_between(acked, now));
                }
            }
            if schedulable {
                t.schedulable.get_or_insert(now);
            } else {
                t.schedulable = None;
            }
        };
        for key in placed {
            mark(key, true);
        }
        for key in failed {
            mark(key, false);
        }
        first
    }

    /// The pod's times.
    pub fn get(&self, key: &str) -> Times {
        self.lock().get(key).copied().unwrap_or_default()
    }

    /// Forgets `done` pods (started or finished), and pods not in `present` that were first
    /// seen before `before` (deleted; a pod acknowledged since `present` was listed is kept).
    pub fn forget(&self, done: &HashSet<String>, present: &HashSet<String>, before: DateTime<Utc>) {
        self.lock().retain(|key, t| {
            !done.contains(key)
                && (present.contains(key) || t.acked.is_none_or(|acked| acked >= before))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(seconds: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + seconds, 0)
            .single()
            .expect("valid time")
    }

    #[test]
    fn the_first_decision_is_timed_from_the_first_sighting_and_only_once() {
        let times = PodSchedulingTimes::default();
        times.ack(["ns/a", "ns/b"], at(0));
        times.ack(["ns/a"], at(5));
        assert_eq!(
            times.get("ns/a").acked,
            Some(at(0)),
            "the first sighting stays"
        );
        assert_eq!(times.decide(["ns/a"], ["ns/b"], at(3)), vec![3.0, 3.0]);
        assert_eq!(times.get("ns/a").schedulable, Some(at(3)));
        assert_eq!(times.get("ns/b").schedulable, None);
        // Later rounds decide again without timing again; a place found later starts then, and
        // a place lost is forgotten.
        assert!(times.decide(["ns/b"], ["ns/a"], at(9)).is_empty());
        assert_eq!(times.get("ns/b").schedulable, Some(at(9)));
        assert_eq!(times.get("ns/a").schedulable, None);
        assert_eq!(times.get("ns/a").decided, Some(at(3)));
    }

    #[test]
    fn done_and_deleted_pods_are_forgotten_but_fresh_ones_kept() {
        let times = PodSchedulingTimes::default();
        times.ack(["ns/started", "ns/gone", "ns/pending"], at(0));
        times.ack(["ns/new"], at(10));
        let done = HashSet::from(["ns/started".to_string()]);
        let present = HashSet::from(["ns/started".to_string(), "ns/pending".to_string()]);
        times.forget(&done, &present, at(10));
        assert_eq!(times.get("ns/started"), Times::default());
        assert_eq!(times.get("ns/pending").acked, Some(at(0)));
        assert_eq!(times.get("ns/new").acked, Some(at(10)));
        assert_eq!(times.get("ns/gone"), Times::default());
    }
}
