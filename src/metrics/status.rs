//! The `operator_<kind>_*` status-condition families (and their deprecated aggregate twins),
//! which upstream's status controller reports for NodeClaims, NodePools, Nodes and
//! EC2NodeClasses so that alerts can fire on conditions stuck False or Unknown and on slow
//! terminations.
//!
//! [`StatusTracker`] is pure: each observation takes every object's conditions at a time and
//! returns the gauges to publish and the transitions and terminations to count since the last
//! observation.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;

use super::cluster_state::{Label, Series};
use crate::apis::conditions::Condition;
use crate::apis::{EC2NodeClass, NodeClaim, NodePool, labels};

/// The kinds with status families, with their API group (the `group` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatusKind {
    /// `karpenter.sh` NodeClaims.
    NodeClaim,
    /// `karpenter.sh` NodePools.
    NodePool,
    /// Core Nodes.
    Node,
    /// `karpenter.k8s.aws` EC2NodeClasses.
    EC2NodeClass,
}

impl StatusKind {
    /// The `group` label value.
    pub fn group(self) -> &'static str {
        match self {
            Self::NodeClaim | Self::NodePool => "karpenter.sh",
            Self::Node => "",
            Self::EC2NodeClass => "karpenter.k8s.aws",
        }
    }

    /// The `kind` label of the deprecated aggregate families.
    pub fn kind(self) -> &'static str {
        match self {
            Self::NodeClaim => "NodeClaim",
            Self::NodePool => "NodePool",
            Self::Node => "Node",
            Self::EC2NodeClass => "EC2NodeClass",
        }
    }
}

/// One status condition as the families need it.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedCondition {
    /// Condition type, e.g. `Ready`.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The condition's reason.
    pub reason: String,
    /// When the status last changed.
    pub last_transition: DateTime<Utc>,
}

/// One object's conditions.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusObject {
    /// The object's kind.
    pub kind: StatusKind,
    /// Its namespace ("" for cluster-scoped kinds).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID, which tells a re-created object from the old one.
    pub uid: String,
    /// Values of the kind's extra labels (NodeClaim: node class, NodePool; Node: those and
    /// initialized), in the family's order.
    pub extra_labels: Vec<String>,
    /// Its conditions.
    pub conditions: Vec<ObservedCondition>,
    /// When its deletion was requested, if it was.
    pub deleting_since: Option<DateTime<Utc>>,
}

fn time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(t.0.as_millisecond())
}

fn label(labels: Option<&std::collections::BTreeMap<String, String>>, key: &str) -> String {
    labels.and_then(|l| l.get(key)).cloned().unwrap_or_default()
}

fn from_karpenter(
    kind: StatusKind,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    conditions: &[Condition],
    extra_labels: Vec<String>,
) -> StatusObject {
    StatusObject {
        kind,
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        extra_labels,
        conditions: conditions
            .iter()
            .map(|c| ObservedCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                last_transition: c.last_transition_time,
            })
            .collect(),
        deleting_since: meta.deletion_timestamp.as_ref().and_then(time),
    }
}

impl StatusObject {
    /// A NodeClaim's conditions, with its node class and NodePool labels.
    pub fn from_nodeclaim(claim: &NodeClaim) -> Self {
        let labels = claim.metadata.labels.as_ref();
        from_karpenter(
            StatusKind::NodeClaim,
            &claim.metadata,
            claim.status.as_ref().map_or(&[][..], |s| &s.conditions),
            vec![
                label(labels, labels::EC2NODECLASS),
                label(labels, labels::NODEPOOL),
            ],
        )
    }

    /// A NodePool's conditions.
    pub fn from_nodepool(pool: &NodePool) -> Self {
        from_karpenter(
            StatusKind::NodePool,
            &pool.metadata,
            pool.status.as_ref().map_or(&[][..], |s| &s.conditions),
            Vec::new(),
        )
    }

    /// An EC2NodeClass's conditions.
    pub fn from_nodeclass(class: &EC2NodeClass) -> Self {
        from_karpenter(
            StatusKind::EC2NodeClass,
            &class.metadata,
            class.status.as_ref().map_or(&[][..], |s| &s.conditions),
            Vec::new(),
        )
    }

    /// A Node's conditions (as the kubelet reports them), with its node class, NodePool and
    /// initialized labels.
    pub fn from_node(node: &Node) -> Self {
        let labels = node.metadata.labels.as_ref();
        Self {
            kind: StatusKind::Node,
            namespace: String::new(),
            name: node.metadata.name.clone().unwrap_or_default(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
            extra_labels: vec![
                label(labels, labels::EC2NODECLASS),
                label(labels, labels::NODEPOOL),
                label(labels, labels::INITIALIZED),
            ],
            conditions: node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    Some(ObservedCondition {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone().unwrap_or_default(),
                        last_transition: time(c.last_transition_time.as_ref()?)?,
                    })
                })
                .collect(),
            deleting_since: node.metadata.deletion_timestamp.as_ref().and_then(time),
        }
    }
}

/// The gauges of one kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KindGauges {
    /// `status_condition_count`: namespace, name, group, type, status, reason, extras → 1.
    pub condition_count: Vec<Series>,
    /// `status_condition_current_status_seconds`: same labels → seconds in the status.
    pub current_status_seconds: Vec<Series>,
    /// `termination_current_time_seconds`: namespace, name, group → seconds terminating.
    pub termination_current_time_seconds: Vec<Series>,
}

/// A condition that changed status between two observations.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    /// The object's kind.
    pub kind: StatusKind,
    /// Condition type.
    pub type_: String,
    /// The status it left.
    pub from_status: String,
    /// The status it has now.
    pub to_status: String,
    /// The reason it has now.
    pub reason: String,
    /// Seconds it spent in `from_status`.
    pub seconds_in_previous: f64,
}

/// What one observation found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusUpdate {
    /// Gauges per kind (every kind present, empty when there are no objects).
    pub gauges: HashMap<StatusKind, KindGauges>,
    /// Status changes since the last observation.
    pub transitions: Vec<Transition>,
    /// Objects whose deletion finished since the last observation, with how long it took.
    pub terminated: Vec<(StatusKind, f64)>,
}

/// An object's identity across observations: its kind and UID.
type ObjectKey = (StatusKind, String);

/// A condition's status and when it got it, by condition type.
type ConditionStates = HashMap<String, (String, DateTime<Utc>)>;

/// Remembers the conditions and deletions of the last observation.
#[derive(Debug, Default)]
pub struct StatusTracker {
    /// (kind, uid) → condition type → (status, last transition).
    conditions: HashMap<ObjectKey, ConditionStates>,
    /// (kind, uid) → deletion requested at.
    deleting: HashMap<ObjectKey, DateTime<Utc>>,
}

fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    ((to - from).num_milliseconds() as f64 / 1000.0).max(0.0)
}

impl StatusTracker {
    /// Observes every object of the tracked kinds at `now`.
    pub fn observe(&mut self, objects: &[StatusObject], now: DateTime<Utc>) -> StatusUpdate {
        let mut update = StatusUpdate::default();
        for kind in [
            StatusKind::NodeClaim,
            StatusKind::NodePool,
            StatusKind::Node,
            StatusKind::EC2NodeClass,
        ] {
            update.gauges.insert(kind, KindGauges::default());
        }
        let mut conditions = HashMap::new();
        let mut deleting = HashMap::new();
        for o in objects {
            let key = (o.kind, o.uid.clone());
            let gauges = update.gauges.entry(o.kind).or_default();
            let previous = self.conditions.get(&key);
            let mut now_conditions = HashMap::new();
            for c in &o.conditions {
                let mut labels = vec![
                    o.namespace.clone(),
                    o.name.clone(),
                    o.kind.group().to_string(),
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                ];
                labels.extend(o.extra_labels.iter().cloned());
                let labels: Vec<Label> = labels.into_iter().map(Label::from).collect();
                gauges.condition_count.push(Series {
                    labels: labels.clone(),
                    value: 1.0,
                });
                gauges.current_status_seconds.push(Series {
                    labels,
                    value: seconds(c.last_transition, now),
                });
                if let Some((before, since)) = previous.and_then(|p| p.get(&c.type_))
                    && *before != c.status
                {
                    update.transitions.push(Transition {
                        kind: o.kind,
                        type_: c.type_.clone(),
                        from_status: before.clone(),
                        to_status: c.status.clone(),
                        reason: c.reason.clone(),
                        seconds_in_previous: seconds(*since, c.last_transition),
                    });
                }
                now_conditions.insert(c.type_.clone(), (c.status.clone(), c.last_transition));
            }
            conditions.insert(key.clone(), now_conditions);
            if let Some(since) = o.deleting_since {
                gauges.termination_current_time_seconds.push(Series::new(
                    [o.namespace.as_str(), o.name.as_str(), o.kind.group()],
                    seconds(since, now),
                ));
                deleting.insert(key, since);
            }
        }
        for ((kind, uid), since) in &self.deleting {
            if !conditions.contains_key(&(*kind, uid.clone())) {
                update.terminated.push((*kind, seconds(*since, now)));
            }
        }
        self.conditions = conditions;
        self.deleting = deleting;
        update
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0)
            .single()
            .expect("valid time")
    }

    fn claim(ready: &str, since: i64, deleting: Option<i64>) -> StatusObject {
        StatusObject {
            kind: StatusKind::NodeClaim,
            namespace: String::new(),
            name: "default-abc".into(),
            uid: "u1".into(),
            extra_labels: vec!["default".into(), "default".into()],
            conditions: vec![ObservedCondition {
                type_: "Ready".into(),
                status: ready.into(),
                reason: if ready == "True" { "Ready" } else { "NotReady" }.into(),
                last_transition: at(since),
            }],
            deleting_since: deleting.map(at),
        }
    }

    #[test]
    fn gauges_count_conditions_and_their_age() {
        let mut tracker = StatusTracker::default();
        let update = tracker.observe(&[claim("False", 0, None)], at(30));
        let g = &update.gauges[&StatusKind::NodeClaim];
        let labels: Vec<Label> = [
            "",
            "default-abc",
            "karpenter.sh",
            "Ready",
            "False",
            "NotReady",
            "default",
            "default",
        ]
        .iter()
        .map(|s| Label::from(*s))
        .collect();
        assert_eq!(
            g.condition_count,
            [Series {
                labels: labels.clone(),
                value: 1.0
            }]
        );
        assert_eq!(
            g.current_status_seconds,
            [Series {
                labels,
                value: 30.0
            }]
        );
        assert!(update.transitions.is_empty(), "nothing seen before");
        assert!(
            update.gauges[&StatusKind::NodePool]
                .condition_count
                .is_empty()
        );
    }

    #[test]
    fn a_status_change_is_one_transition_with_the_time_spent_before() {
        let mut tracker = StatusTracker::default();
        tracker.observe(&[claim("False", 0, None)], at(5));
        let update = tracker.observe(&[claim("True", 42, None)], at(50));
        assert_eq!(
            update.transitions,
            [Transition {
                kind: StatusKind::NodeClaim,
                type_: "Ready".into(),
                from_status: "False".into(),
                to_status: "True".into(),
                reason: "Ready".into(),
                seconds_in_previous: 42.0,
            }]
        );
        let again = tracker.observe(&[claim("True", 42, None)], at(60));
        assert!(again.transitions.is_empty());
    }

    #[test]
    fn terminations_are_timed_until_the_object_is_gone() {
        let mut tracker = StatusTracker::default();
        let update = tracker.observe(&[claim("True", 0, Some(100))], at(110));
        assert_eq!(
            update.gauges[&StatusKind::NodeClaim].termination_current_time_seconds,
            [Series {
                labels: vec!["".into(), "default-abc".into(), "karpenter.sh".into()],
                value: 10.0
            }]
        );
        assert!(update.terminated.is_empty());
        let gone = tracker.observe(&[], at(130));
        assert_eq!(gone.terminated, [(StatusKind::NodeClaim, 30.0)]);
        assert!(tracker.observe(&[], at(140)).terminated.is_empty());
    }
}
