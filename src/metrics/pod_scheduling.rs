//! When the provisioner first saw each pending pod, when it first decided about it, and when it
//! first found it a place: the points in memory upstream's `karpenter_pods_provisioning_*`
//! families and `karpenter_pods_scheduling_decision_duration_seconds` measure from (not the
//! pod's creation, which may predate Karpenter's view, or a restart).
//!
//! The provisioner writes (see [`PodSchedulingTimes::ack`] and [`PodSchedulingTimes::decide`]),
//! the metrics controller reads and forgets pods that started, finished or went away. Time is
//! passed in; nothing here reads the clock.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

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
    pods: Mutex<HashMap<PodKey, Times>>,
}

/// The key a pod is known by here, its `namespace/name`: the converted pod's own names, shared
/// with the pod cache, so keeping and looking up 20,000 pods allocates no key per pod (a
/// `String` per pod was 2.5 MB of the map at 20,000 pods, and as much again per pass).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodKey {
    namespace: Arc<str>,
    name: Arc<str>,
}

impl PodKey {
    /// The key of `namespace/name`, copying both.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        }
    }

    /// The key of a scheduler pod (sharing its names).
    pub fn of(pod: &crate::scheduling::pod::Pod) -> Self {
        Self {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
        }
    }

    /// The key of a cached pod: its converted pod's names, or (for a pod that cannot be
    /// converted, which is rare) copies of its metadata's.
    pub fn of_cached(pod: &crate::snapshot::ClusterPod) -> Self {
        match pod.scheduling_pod() {
            Ok(p) => Self::of(p),
            Err(_) => Self::new(
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.metadata.name.as_deref().unwrap_or_default(),
            ),
        }
    }

    /// The namespace and the name.
    pub fn parts(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Seconds from `from` to `to`, never negative (conditions carry whole seconds).
pub fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds().max(0) as f64 / 1000.0
}

impl PodSchedulingTimes {
    fn lock(&self) -> MutexGuard<'_, HashMap<PodKey, Times>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that a provisioning round is about to schedule `pods` (keys); a pod seen before
    /// keeps its first time.
    pub fn ack<'a>(&self, pods: impl IntoIterator<Item = &'a PodKey>, now: DateTime<Utc>) {
        let mut map = self.lock();
        for key in pods {
            let t = map.entry(key.clone()).or_default();
            t.acked.get_or_insert(now);
        }
    }

    /// Records a round's decisions: `placed` got a place (a new NodeClaim or existing
    /// capacity), `failed` none. Returns, for each pod decided for the first time, the seconds
    /// since it was first seen (`karpenter_pods_scheduling_decision_duration_seconds`).
    pub fn decide<'a>(
        &self,
        placed: impl IntoIterator<Item = &'a PodKey>,
        failed: impl IntoIterator<Item = &'a PodKey>,
        now: DateTime<Utc>,
    ) -> Vec<f64> {
        let mut map = self.lock();
        let mut first = Vec::new();
        let mut mark = |key: &PodKey, schedulable: bool| {
            let t = map.entry(key.clone()).or_default();
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
    pub fn get(&self, key: &PodKey) -> Times {
        self.lock().get(key).copied().unwrap_or_default()
    }

    /// Forgets `done` pods (started or finished), and pods not in `present` that were first
    /// seen before `before` (deleted; a pod acknowledged since `present` was listed is kept).
    pub fn forget(&self, done: &HashSet<PodKey>, present: &HashSet<PodKey>, before: DateTime<Utc>) {
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

    fn key(name: &str) -> PodKey {
        PodKey::new("ns", name)
    }

    fn at(seconds: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + seconds, 0)
            .single()
            .expect("valid time")
    }

    #[test]
    fn the_first_decision_is_timed_from_the_first_sighting_and_only_once() {
        let times = PodSchedulingTimes::default();
        times.ack([&key("a"), &key("b")], at(0));
        times.ack([&key("a")], at(5));
        assert_eq!(
            times.get(&key("a")).acked,
            Some(at(0)),
            "the first sighting stays"
        );
        assert_eq!(
            times.decide([&key("a")], [&key("b")], at(3)),
            vec![3.0, 3.0]
        );
        assert_eq!(times.get(&key("a")).schedulable, Some(at(3)));
        assert_eq!(times.get(&key("b")).schedulable, None);
        // Later rounds decide again without timing again; a place found later starts then, and
        // a place lost is forgotten.
        assert!(times.decide([&key("b")], [&key("a")], at(9)).is_empty());
        assert_eq!(times.get(&key("b")).schedulable, Some(at(9)));
        assert_eq!(times.get(&key("a")).schedulable, None);
        assert_eq!(times.get(&key("a")).decided, Some(at(3)));
    }

    #[test]
    fn done_and_deleted_pods_are_forgotten_but_fresh_ones_kept() {
        let times = PodSchedulingTimes::default();
        times.ack([&key("started"), &key("gone"), &key("pending")], at(0));
        times.ack([&key("new")], at(10));
        let done = HashSet::from([key("started")]);
        let present = HashSet::from([key("started"), key("pending")]);
        times.forget(&done, &present, at(10));
        assert_eq!(times.get(&key("started")), Times::default());
        assert_eq!(times.get(&key("pending")).acked, Some(at(0)));
        assert_eq!(times.get(&key("new")).acked, Some(at(10)));
        assert_eq!(times.get(&key("gone")), Times::default());
    }
}
