//! Status conditions in the `metav1.Condition` shape that `kubectl wait --for=condition=Ready`,
//! dashboards and the `operator_*_status_condition_*` metrics read.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
