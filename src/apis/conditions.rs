//! Status conditions in the `metav1.Condition` shape that `kubectl wait --for=condition=Ready`,
//! dashboards and the `operator_*_status_condition_*` metrics read.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The condition every Karpenter kind carries: the object is usable.
pub const READY: &str = "Ready";

/// Condition status values.
pub const TRUE: &str = "True";
/// The condition does not hold.
pub const FALSE: &str = "False";
/// Not known yet.
pub const UNKNOWN: &str = "Unknown";

/// One observation about an object, as `metav1.Condition`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type in CamelCase, e.g. `Ready`.
    #[schemars(length(max = 316), pattern(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"))]
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[schemars(extend("enum" = ["True", "False", "Unknown"]))]
    pub status: String,
    /// The `.metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When the status last changed.
    pub last_transition_time: DateTime<Utc>,
    /// Machine-readable CamelCase reason for the last transition.
    #[schemars(
        length(min = 1, max = 1024),
        pattern(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    )]
    pub reason: String,
    /// Human-readable details.
    #[schemars(length(max = 32768))]
    pub message: String,
}

/// Finds a condition by type in a status' condition list.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of this type is `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == TRUE)
}

/// Sets a condition, keeping its `lastTransitionTime` unless the status changes, as
/// `kubectl wait` and alerting on "how long has this been false" expect. Returns whether
/// anything changed, so controllers write only when needed.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> bool {
    let reason = if reason.is_empty() { type_ } else { reason };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == status && c.reason == reason && c.message == message => false,
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status.into();
            c.reason = reason.into();
            c.message = message.into();
            true
        }
        None => {
            conditions.push(Condition {
                type_: type_.into(),
                status: status.into(),
                observed_generation: None,
                last_transition_time: now,
                reason: reason.into(),
                message: message.into(),
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_the_status_changes() {
        let t0 = DateTime::from_timestamp(1_000, 0).expect("time");
        let t1 = DateTime::from_timestamp(2_000, 0).expect("time");
        let mut list = Vec::new();
        assert!(set(&mut list, "Ready", FALSE, "Waiting", "not yet", t0));
        assert!(!set(&mut list, "Ready", FALSE, "Waiting", "not yet", t1));
        assert!(set(&mut list, "Ready", FALSE, "Other", "still not", t1));
        assert_eq!(list[0].last_transition_time, t0);
        assert!(set(&mut list, "Ready", TRUE, "", "", t1));
        assert_eq!(list[0].last_transition_time, t1);
        assert_eq!(list[0].reason, "Ready");
        assert!(is_true(&list, "Ready"));
    }
}
