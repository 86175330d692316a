//! Re-validation of a command after the validation delay (upstream's 15 s): between the decision
//! and the deletion, pods may have arrived, a `do-not-disrupt` annotation or a PDB may now
//! protect a candidate, the drift may have been reverted, other disruptions may have used the
//! budget, or capacity the pods were to move to may be gone. The command goes ahead only if
//! every candidate would still be chosen for the same reason, the budgets still allow it, and
//! a fresh scheduling simulation still places the candidates' pods on the nodes that remain
//! (the command's replacements included) without launching anything.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::apis::labels;
use crate::scheduling::scheduler;

use super::budgets;
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
    if let Some(reason) = cmd.method.budget_reason() {
        within_budgets(&fresh, cmd, reason, now)?;
    }
    if cmd.method != Method::Expiration {
        pods_still_fit(&fresh, cmd)?;
    }
    Ok(())
}

/// The budgets of the candidates' NodePools still allow them all, counting every other node
/// that is disrupting now.
fn within_budgets(
    fresh: &State,
    cmd: &Command,
    reason: crate::apis::nodepool::DisruptionReason,
    now: DateTime<Utc>,
) -> Result<(), String> {
    let mut per_pool: BTreeMap<&str, u32> = BTreeMap::new();
    for name in &cmd.candidates {
        let pool = fresh
            .nodes
            .iter()
            .find(|n| n.name.as_ref() == name)
            .and_then(|n| n.nodepool.as_deref())
            .ok_or_else(|| format!("node {name} has no NodePool any more"))?;
        *per_pool.entry(pool).or_default() += 1;
    }
    for (pool, wanted) in per_pool {
        let nodepool = fresh
            .nodepool(pool)
            .ok_or_else(|| format!("NodePool {pool} is gone"))?;
        let in_pool = fresh
            .nodes
            .iter()
            .filter(|n| n.nodepool.as_deref() == Some(pool));
        let (total, disrupting) =
            in_pool.fold((0, 0), |(t, d), n| (t + 1, d + u32::from(n.disrupting)));
        let allowance = budgets::allowance(nodepool, reason, total, disrupting, now);
        if allowance.remaining < wanted {
            return Err(format!(
                "the disruption budget for {reason} of NodePool {pool} now allows {} more, the command needs {wanted}: {}",
                allowance.remaining,
                allowance.explanation.join("; ")
            ));
        }
    }
    Ok(())
}

/// The candidates' pods still fit on the nodes that stay, without new capacity: by now the
/// command's replacements are up and count as existing nodes.
fn pods_still_fit(fresh: &State, cmd: &Command) -> Result<(), String> {
    let excluded: Vec<usize> = fresh
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| cmd.candidates.iter().any(|c| c.as_str() == n.name.as_ref()))
        .map(|(i, _)| i)
        .collect();
    let pods: Vec<_> = fresh
        .pods
        .iter()
        .filter(|p| p.node.is_some_and(|n| excluded.contains(&n)) && p.reschedulable())
        .map(|p| p.pod.clone())
        .collect();
    if pods.is_empty() {
        return Ok(());
    }
    let input = fresh.scheduler_input(&excluded, pods);
    let outcome = scheduler::solve(&input);
    if let Some((i, why)) = outcome.errors.first() {
        return Err(format!(
            "pod {} no longer fits anywhere: {why}",
            input.pods[*i].key()
        ));
    }
    if !outcome.nodeclaims.is_empty() {
        return Err(format!(
            "the candidates' pods no longer fit on the remaining nodes (they would need {} new node(s))",
            outcome.nodeclaims.len()
        ));
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
    use crate::snapshot::Snapshot;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z")
            .expect("t")
            .with_timezone(&Utc)
    }

    /// Node `name` of pool `p` with 4 CPUs, optionally tainted `karpenter.sh/disrupted`.
    fn node(name: &str, tainted: bool) -> serde_json::Value {
        let taints = if tainted {
            json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        json!({
            "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"karpenter.sh/nodepool": "p", "karpenter.sh/initialized": "true"}},
            "spec": {"providerID": format!("aws:///us-east-1a/i-{name}"), "taints": taints},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })
    }

    /// One node of pool `p` (consolidateAfter 0s, budget `budget`), tainted by the command
    /// itself, plus `others` (each tainted if its flag says so) and the given pods bound to n1.
    fn state_with(pods: Vec<serde_json::Value>, others: &[(&str, bool)], budget: &str) -> State {
        let pool = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
                               "budgets": [{"nodes": budget}]},
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                    "requirements": [],
                }},
            },
        });
        let mut nodes = vec![node("n1", true)];
        nodes.extend(others.iter().map(|(n, t)| node(n, *t)));
        let cluster = Snapshot {
            nodepools: vec![serde_json::from_value(pool).expect("pool")],
            nodes: nodes
                .into_iter()
                .map(|n| serde_json::from_value(n).expect("node"))
                .collect(),
            pods: pods
                .into_iter()
                .map(|p| serde_json::from_value::<Pod>(p).expect("pod").into())
                .collect(),
            ..Snapshot::default()
        };
        crate::snapshot::disruption_input::disruption_state(
            &cluster,
            Vec::new(),
            Default::default(),
            now(),
        )
    }

    /// n1 with the given pods and a second, untainted node with room for them.
    fn state(pods: Vec<serde_json::Value>) -> State {
        state_with(pods, &[("n2", false)], "10")
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
    fn a_budget_used_up_meanwhile_aborts() {
        let cmd = command(Method::Emptiness);
        let s = state_with(vec![], &[("n2", true), ("n3", false)], "1");
        let err = validate(&s, &cmd, &pods_to_move(&s, &cmd), now()).expect_err("budget");
        assert!(err.contains("budget for Empty"), "{err}");
        let s = state_with(vec![], &[("n2", false), ("n3", false)], "1");
        assert_eq!(validate(&s, &cmd, &pods_to_move(&s, &cmd), now()), Ok(()));
    }

    #[test]
    fn pods_that_no_longer_fit_abort_consolidation() {
        let cmd = command(Method::SingleNodeConsolidation);
        // The only other node is being disrupted too: nowhere for the pod to go.
        let s = state_with(vec![pod("p", json!({}))], &[("n2", true)], "10");
        let err = validate(&s, &cmd, &pods_to_move(&s, &cmd), now()).expect_err("no room");
        assert!(err.contains("no longer fits"), "{err}");
        let s = state_with(vec![pod("p", json!({}))], &[("n2", false)], "10");
        assert_eq!(validate(&s, &cmd, &pods_to_move(&s, &cmd), now()), Ok(()));
    }

    #[test]
    fn a_vanished_node_aborts() {
        let s = state(vec![]);
        let mut cmd = command(Method::Emptiness);
        cmd.candidates = vec!["elsewhere".into()];
        assert!(validate(&s, &cmd, &BTreeMap::new(), now()).is_err());
    }
}
