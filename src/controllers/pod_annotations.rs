//! Pods whose `karpenter.sh/do-not-disrupt` value Karpenter cannot honour (`"garbage"`, a
//! duration beyond Go's range such as `"999999999999h"`, `"0s"`). Anyone who may create a pod
//! may write this annotation, so a bad value must neither crash nor silently protect or expose
//! a node: the disruption engine ignores it, as upstream does, and the pod gets upstream's
//! `InvalidDoNotDisruptAnnotation` warning event, once per pod and value, so its owner learns
//! the protection they asked for is not in force.

use std::collections::HashSet;

use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use crate::apis::labels;
use crate::disruption::candidates::invalid_do_not_disrupt;
use crate::runtime::Context;
use crate::snapshot::ClusterPod;

/// Upstream's event reason.
pub const INVALID_DO_NOT_DISRUPT: &str = "InvalidDoNotDisruptAnnotation";

/// The pods bound to a node (only those can hold one up) whose annotation is invalid, with why.
pub fn invalid<'a>(
    pods: impl IntoIterator<Item = &'a ClusterPod>,
) -> Vec<(&'a ClusterPod, String, String)> {
    pods.into_iter()
        .filter(|p| p.node_name().is_some())
        .filter_map(|p| {
            let value = p.annotations().get(labels::DO_NOT_DISRUPT)?;
            let why = invalid_do_not_disrupt(value)?;
            Some((p, value.clone(), why))
        })
        .collect()
}

/// The (pod UID, value) pairs already reported, so a pass reports only what is new.
#[derive(Debug, Default)]
pub struct InvalidAnnotations {
    reported: HashSet<(String, String)>,
}

impl InvalidAnnotations {
    /// Publishes an event for every newly seen invalid value; forgets pods that are gone or
    /// fixed, so a value set again is reported again.
    pub async fn report(&mut self, ctx: &Context) {
        let pods = ctx.state.pods.state();
        let bad = invalid(pods.iter().map(AsRef::as_ref));
        let current: HashSet<(String, String)> = bad
            .iter()
            .map(|(p, value, _)| (p.uid().unwrap_or_default(), value.clone()))
            .collect();
        self.reported.retain(|k| current.contains(k));
        for (pod, value, why) in bad {
            let key = (pod.uid().unwrap_or_default(), value.clone());
            if self.reported.contains(&key) {
                continue;
            }
            let note = format!(
                "Invalid karpenter.sh/do-not-disrupt annotation value {value:?}, ignoring annotation: {why}"
            );
            tracing::warn!(controller = "disruption", pod = %format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()), value = %value, reason = %why, "invalid do-not-disrupt annotation; ignoring it");
            let event = Event {
                type_: EventType::Warning,
                reason: INVALID_DO_NOT_DISRUPT.into(),
                note: Some(note.chars().take(1000).collect()),
                action: "Disrupting".into(),
                secondary: None,
            };
            match ctx.recorder.publish(&event, &pod.object_ref(&())).await {
                Ok(()) => {
                    self.reported.insert(key);
                }
                Err(e) => tracing::debug!(error = %e, "could not record event; retrying next pass"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, value: &str, node: Option<&str>) -> ClusterPod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "annotations": {labels::DO_NOT_DISRUPT: value}},
            "spec": {"containers": [], "nodeName": node},
        }))
        .expect("pod")
    }

    #[test]
    fn only_values_karpenter_cannot_honour_on_bound_pods_are_invalid() {
        let pods = [
            pod("true", "true", Some("n")),
            pod("duration", "90m", Some("n")),
            pod("fraction", "1.5h", Some("n")),
            pod("garbage", "garbage", Some("n")),
            pod("huge", "999999999999h", Some("n")),
            pod("zero", "0s", Some("n")),
            pod("false", "false", Some("n")),
            pod("pending", "garbage", None),
        ];
        let found = invalid(&pods);
        let names: Vec<String> = found.iter().map(|(p, _, _)| p.name_any()).collect();
        assert_eq!(names, ["garbage", "huge", "zero", "false"]);
        let huge = &found[1].2;
        assert!(
            huge.contains("longer than 2562047h47m16.854775807s"),
            "{huge}"
        );
        assert!(found.iter().all(|(_, _, why)| why.contains("\"true\"")));
    }
}
