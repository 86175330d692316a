//! Re-validation of a command after the validation delay (upstream's 15 s): between the decision
//! and the deletion, pods may have arrived, a `do-not-disrupt` annotation or a PDB may now
//! protect a candidate, or the drift may have been reverted. The command goes ahead only if
//! every candidate would still be chosen for the same reason.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::apis::labels;

use super::candidates::candidates;
use super::drift::DriftVerdict;
use super::state::State;
use super::{Command, Method};

/// Checks `cmd` against a fresh `state`. The candidates carry the disruption taint the command
/// itself put on them, which is ignored here. `pods_before` holds, per candidate, how many pods
/// had to move when the command was decided: a consolidation whose candidate gained pods is
/// stale. Returns why the command must be abandoned.
pub fn validate(
    state: &State,
    cmd: &Command,
    pods_before: &BTreeMap<String, usize>,
    now: DateTime<Utc>,
) -> Result<(), String> {
    let mut fresh = state.clone();
    for node in fresh
        .nodes
        .iter_mut()
        .filter(|n| cmd.candidates.iter().any(|c| c.as_str() == n.name.as_ref()))
    {
        node.taints.retain(|t| t.key != labels::DISRUPTED_TAINT_KEY);
        node.disrupting = false;
    }
    let (cands, blocked) = candidates(&fresh, now);
    for name in &cmd.candidates {
        let Some(index) = fresh.nodes.iter().position(|n| n.name.as_ref() == name) else {
            return Err(format!("node {name} is gone"));
        };
        let Some(c) = cands.iter().find(|c| c.node == index) else {
            let why = blocked
                .iter()
                .find(|(i, _)| *i == index)
                .map_or("it is no longer a candidate", |(_, w)| w.as_str());
            return Err(format!("node {name}: {why}"));
        };
        let ok = match cmd.method {
            Method::Expiration => true,
            Method::Emptiness => {
                if let Some(p) = &c.protected {
                    return Err(format!("node {name} is protected: {p}"));
                }
                c.pods.is_empty() && c.consolidatable
            }
            Method::Drift => {
                if let Some(p) = c.protected.as_ref().filter(|_| !c.has_tgp) {
                    return Err(format!("node {name} is protected: {p}"));
                }
                matches!(c.drift, DriftVerdict::Drifted(..))
            }
            Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
                if let Some(p) = &c.protected {
                    return Err(format!("node {name} is protected: {p}"));
                }
                c.consolidatable && c.pods.len() <= pods_before.get(name).copied().unwrap_or(0)
            }
        };
        if !ok {
            return Err(format!(
                "node {name} no longer qualifies for {:?} ({} pods now)",
                cmd.method,
                c.pods.len()
            ));
        }
    }
    Ok(())
}

/// How many pods each of the command's candidates must move, recorded when the command is
/// decided for [`validate`].
pub fn pods_to_move(state: &State, cmd: &Command) -> BTreeMap<String, usize> {
    cmd.candidates
        .iter()
        .filter_map(|name| {
            let i = state.nodes.iter().position(|n| n.name.as_ref() == name)?;
            Some((
                name.clone(),
                state.pods_on(i).filter(|p| p.reschedulable()).count(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z")
            .expect("t")
            .with_timezone(&Utc)
    }

    /// One empty node of pool `p` (consolidateAfter 0s), tainted by the command itself, plus the
    /// given pods bound to it.
    fn state(pods: Vec<serde_json::Value>) -> State {
        let pool = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"},
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                    "requirements": [],
                }},
            },
        });
        let node = json!({
            "metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"karpenter.sh/nodepool": "p", "karpenter.sh/initialized": "true"}},
            "spec": {"providerID": "aws:///us-east-1a/i-1",
                     "taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        });
        let cluster = Cluster {
            nodepools: vec![serde_json::from_value(pool).expect("pool")],
            nodes: vec![serde_json::from_value(node).expect("node")],
            pods: pods
                .into_iter()
                .map(|p| serde_json::from_value::<Pod>(p).expect("pod").into())
                .collect(),
            ..Cluster::default()
        };
        State::from_cluster(&cluster, Vec::new(), Default::default(), now())
    }

    fn pod(name: &str, annotations: serde_json::Value) -> serde_json::Value {
        json!({
            "metadata": {"name": name, "namespace": "ns", "annotations": annotations,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"},
        })
    }

    fn command(method: Method) -> Command {
        Command {
            method,
            reason: "Empty".into(),
            candidates: vec!["n1".into()],
            replacements: vec![],
            savings: 0.0,
        }
    }

    #[test]
    fn an_empty_node_still_empty_passes_despite_its_own_taint() {
        let s = state(vec![]);
        assert!(s.nodes[0].disrupting, "the taint marks it disrupting");
        let cmd = command(Method::Emptiness);
        assert_eq!(validate(&s, &cmd, &pods_to_move(&s, &cmd), now()), Ok(()));
    }

    #[test]
    fn a_pod_that_arrived_aborts_emptiness_and_consolidation() {
        let empty = state(vec![]);
        let s = state(vec![pod("late", json!({}))]);
        let cmd = command(Method::Emptiness);
        let err = validate(&s, &cmd, &pods_to_move(&empty, &cmd), now()).expect_err("stale");
        assert!(err.contains("no longer qualifies"), "{err}");
        let cmd = command(Method::SingleNodeConsolidation);
        assert!(validate(&s, &cmd, &pods_to_move(&empty, &cmd), now()).is_err());
        assert_eq!(validate(&s, &cmd, &pods_to_move(&s, &cmd), now()), Ok(()));
    }

    #[test]
    fn do_not_disrupt_aborts_graceful_methods() {
        let s = state(vec![pod(
            "precious",
            json!({"karpenter.sh/do-not-disrupt": "true"}),
        )]);
        let cmd = command(Method::SingleNodeConsolidation);
        let err = validate(&s, &cmd, &pods_to_move(&s, &cmd), now()).expect_err("protected");
        assert!(err.contains("do-not-disrupt"), "{err}");
    }

    #[test]
    fn a_vanished_node_aborts() {
        let s = state(vec![]);
        let mut cmd = command(Method::Emptiness);
        cmd.candidates = vec!["elsewhere".into()];
        assert!(validate(&s, &cmd, &BTreeMap::new(), now()).is_err());
    }
}
