//! Re-validation of a disruption command before it runs (`disruption::validation`): pods that
//! arrived, protections, budgets and room elsewhere, on states built from snapshots the way `run`
//! builds them.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use karpenter_rs::disruption::state::State;
use karpenter_rs::disruption::validation::{Stage, pods_to_move, validate};
use karpenter_rs::disruption::{Command, Method};
use karpenter_rs::snapshot::Snapshot;
use karpenter_rs::snapshot::disruption_input::{Unbound, disruption_state};

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
        nodepools: vec![Arc::new(serde_json::from_value(pool).expect("pool"))],
        nodes: nodes
            .into_iter()
            .map(|n| Arc::new(serde_json::from_value(n).expect("node")))
            .collect(),
        pods: pods
            .into_iter()
            .map(|p| Arc::new(serde_json::from_value::<Pod>(p).expect("pod").into()))
            .collect(),
        ..Snapshot::default()
    };
    disruption_state(
        &cluster,
        Vec::new(),
        Default::default(),
        Unbound::LeftOut,
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
    assert_eq!(
        validate(&s, &cmd, &pods_to_move(&s, &cmd), now(), Stage::Decided).map(|v| v.moves),
        Ok(vec![])
    );
}

#[test]
fn a_pod_that_arrived_aborts_emptiness_and_consolidation() {
    let empty = state(vec![]);
    let s = state(vec![pod("late", json!({}))]);
    let cmd = command(Method::Emptiness);
    let err =
        validate(&s, &cmd, &pods_to_move(&empty, &cmd), now(), Stage::Decided).expect_err("stale");
    assert!(err.contains("no longer qualifies"), "{err}");
    let cmd = command(Method::SingleNodeConsolidation);
    assert!(validate(&s, &cmd, &pods_to_move(&empty, &cmd), now(), Stage::Decided).is_err());
    assert_eq!(
        validate(&s, &cmd, &pods_to_move(&s, &cmd), now(), Stage::Decided).map(|v| v.moves),
        Ok(vec![(0, 1)]),
    );
}

#[test]
fn do_not_disrupt_aborts_graceful_methods() {
    let s = state(vec![pod(
        "precious",
        json!({"karpenter.sh/do-not-disrupt": "true"}),
    )]);
    let cmd = command(Method::SingleNodeConsolidation);
    let err =
        validate(&s, &cmd, &pods_to_move(&s, &cmd), now(), Stage::Decided).expect_err("protected");
    assert!(err.contains("do-not-disrupt"), "{err}");
}

#[test]
fn a_budget_used_up_meanwhile_aborts() {
    let cmd = command(Method::Emptiness);
    let s = state_with(vec![], &[("n2", true), ("n3", false)], "1");
    let err =
        validate(&s, &cmd, &pods_to_move(&s, &cmd), now(), Stage::Decided).expect_err("budget");
    assert!(err.contains("budget for Empty"), "{err}");
    let s = state_with(vec![], &[("n2", false), ("n3", false)], "1");
    assert_eq!(
        validate(&s, &cmd, &pods_to_move(&s, &cmd), now(), Stage::Decided).map(|v| v.moves),
        Ok(vec![])
    );
}

#[test]
fn pods_that_no_longer_fit_abort_consolidation() {
    let cmd = command(Method::SingleNodeConsolidation);
    // The only other node is being disrupted too: nowhere for the pod to go.
    let s = state_with(vec![pod("p", json!({}))], &[("n2", true)], "10");
    let err =
        validate(&s, &cmd, &pods_to_move(&s, &cmd), now(), Stage::Decided).expect_err("no room");
    assert!(err.contains("no longer fit"), "{err}");
    let s = state_with(vec![pod("p", json!({}))], &[("n2", false)], "10");
    assert_eq!(
        validate(&s, &cmd, &pods_to_move(&s, &cmd), now(), Stage::Decided).map(|v| v.moves),
        Ok(vec![(0, 1)]),
    );
}

#[test]
fn a_vanished_node_aborts() {
    let s = state(vec![]);
    let mut cmd = command(Method::Emptiness);
    cmd.candidates = vec!["elsewhere".into()];
    assert!(validate(&s, &cmd, &BTreeMap::new(), now(), Stage::Decided).is_err());
}

#[test]
fn a_static_nodes_drift_goes_ahead_where_its_pods_fit_nowhere_else() {
    // n1 drifted (the cloud provider says so); its pod has no room elsewhere (n2 is disrupted).
    let drifted = |replicas: Option<i64>| {
        let mut s = state_with(vec![pod("p", json!({}))], &[("n2", true)], "10");
        s.nodes[0].claim = Some(karpenter_rs::disruption::state::ClaimFacts {
            name: "n1".into(),
            provider_drift: Some("AMIDrift".into()),
            ..Default::default()
        });
        s.nodepools[0].spec.replicas = replicas;
        s
    };
    let cmd = Command {
        reason: "AMIDrift".into(),
        ..command(Method::Drift)
    };
    let dynamic = drifted(None);
    let err = validate(
        &dynamic,
        &cmd,
        &pods_to_move(&dynamic, &cmd),
        now(),
        Stage::Decided,
    )
    .expect_err("no room");
    assert!(err.contains("no longer fit"), "{err}");
    let fixed = drifted(Some(2));
    assert_eq!(
        validate(
            &fixed,
            &cmd,
            &pods_to_move(&fixed, &cmd),
            now(),
            Stage::Decided
        )
        .map(|v| v.moves),
        Ok(vec![])
    );
}

/// The controllers' engine state leaves out the pods no node holds (the provisioner places
/// them), yet a PDB without a status still counts them as expected and not healthy: with
/// `maxUnavailable: 1`, two pods running and one pending, no eviction is allowed, as when the
/// state lists every pod.
#[test]
fn pods_left_out_of_the_state_still_count_against_a_pdb() {
    let labelled = |name: &str, node: Option<&str>| {
        json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"app": "a"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": if node.is_some() { "Running" } else { "Pending" }},
        })
    };
    let pdb = json!({
        "metadata": {"name": "a", "namespace": "ns"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "a"}}},
    });
    let cluster = Snapshot {
        nodes: vec![Arc::new(
            serde_json::from_value(node("n1", false)).expect("node"),
        )],
        pods: [
            labelled("a1", Some("n1")),
            labelled("a2", Some("n1")),
            labelled("a3", None),
        ]
        .into_iter()
        .map(|p| Arc::new(serde_json::from_value::<Pod>(p).expect("pod").into()))
        .collect(),
        pdbs: vec![Arc::new(serde_json::from_value(pdb).expect("pdb"))],
        ..Snapshot::default()
    };
    let of = |unbound| disruption_state(&cluster, Vec::new(), Default::default(), unbound, now());
    let (listed, left_out) = (of(Unbound::Listed), of(Unbound::LeftOut));
    assert_eq!((listed.pods.len(), left_out.pods.len()), (3, 2));
    let allowed = |s: &State| s.pdbs.iter().map(|p| p.allowed).collect::<Vec<_>>();
    assert_eq!(allowed(&listed), [0]);
    assert_eq!(allowed(&left_out), [0], "the pending pod is unavailable");
}
