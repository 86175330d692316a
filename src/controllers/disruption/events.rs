//! What the disruption controller tells people and dashboards: events on the Nodes and
//! NodeClaims it acts on or is blocked from acting on (rate-limited), and the
//! `karpenter_nodeclaims_disrupted_total` / `karpenter_pods_disruption_initiated_total` counts.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use crate::apis::{NodeClaim, labels};
use crate::disruption::{self, Method};
use crate::metrics::METRICS;
use crate::runtime::Context;
use crate::snapshot::Snapshot;

use super::claim_of;

/// How long publishing one event may take.
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let e = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Disrupting".into(),
        secondary: None,
    };
    // Events are informational: a slow events API (its requests are retried on 429/503) must
    // not hold a command up.
    match tokio::time::timeout(
        EVENT_TIMEOUT,
        ctx.recorder.publish(&e, &obj.object_ref(&())),
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::debug!(error = %err, reason, "could not record event"),
        Err(_) => tracing::warn!(reason, "recording an event timed out"),
    }
}

/// An event on a candidate's Node and NodeClaim.
pub(super) async fn event_on(
    ctx: &Context,
    cluster: &Snapshot,
    node: &str,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    if let Some(n) = cluster
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))
    {
        publish(ctx, n.as_ref(), type_, reason, note).await;
    }
    if let Some(c) = claim_of(cluster, node) {
        publish(ctx, c, type_, reason, note).await;
    }
}

/// How often a node's `DisruptionBlocked` event may be sent again when its reason changes (a
/// budget's arithmetic changes with every disruption in flight).
pub const BLOCKED_EVENT_INTERVAL: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

/// The `DisruptionBlocked` events sent, by node: the reason and when.
#[derive(Default)]
pub struct BlockedEvents(HashMap<String, (String, DateTime<Utc>)>);

/// `DisruptionBlocked` events on the Node and NodeClaim, with the engine's reason verbatim (it
/// names the pod, PodDisruptionBudget or budget): once per node and reason, rate-limited.
pub(super) async fn report_blocked(
    ctx: &Context,
    cluster: &Snapshot,
    blocked: &[disruption::Blocked],
    reported: &mut BlockedEvents,
) {
    let now = ctx.clock.now();
    let reported = &mut reported.0;
    reported.retain(|node, _| blocked.iter().any(|b| &b.node == node));
    // Only what a user set (do-not-disrupt, a PDB, a budget) is worth an event: it stands in the
    // way of a disruption that would otherwise happen.
    for b in blocked.iter().filter(|b| b.cause.set_by_user()) {
        if let Some((reason, at)) = reported.get(&b.node)
            && (reason == &b.reason || now - *at < BLOCKED_EVENT_INTERVAL)
        {
            continue;
        }
        reported.insert(b.node.clone(), (b.reason.clone(), now));
        event_on(
            ctx,
            cluster,
            &b.node,
            EventType::Normal,
            "DisruptionBlocked",
            &format!("Cannot disrupt Node: {}", b.reason),
        )
        .await;
    }
}

/// Upstream's `termination_mode` label: how the NodeClaim's drain may end.
pub(super) fn termination_mode(claim: &NodeClaim) -> &'static str {
    match claim
        .spec
        .termination_grace_period
        .as_ref()
        .map(|d| d.get())
    {
        None => "graceful",
        Some(d) if d.is_zero() => "forceful",
        Some(_) => "eventual",
    }
}

/// `karpenter_nodeclaims_disrupted_total` and `karpenter_pods_disruption_initiated_total` for a
/// candidate whose NodeClaim was just deleted, `pods` the reschedulable pods it held.
pub(super) fn count_disrupted(cluster: &Snapshot, method: Method, claim: &NodeClaim, pods: usize) {
    let pool_name = claim
        .labels()
        .get(labels::NODEPOOL)
        .cloned()
        .unwrap_or_default();
    let policy = cluster
        .nodepools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(pool_name.as_str()))
        .map(|p| format!("{:?}", p.spec.disruption.consolidation_policy))
        .unwrap_or_default();
    let capacity_type = claim
        .labels()
        .get(labels::CAPACITY_TYPE)
        .cloned()
        .unwrap_or_default();
    let labels = [
        method.reason_label(),
        pool_name.as_str(),
        capacity_type.as_str(),
        policy.as_str(),
        termination_mode(claim),
    ];
    METRICS
        .nodeclaims_disrupted_total
        .with_label_values(&labels)
        .inc();
    METRICS
        .pods_disruption_initiated_total
        .with_label_values(&labels)
        .inc_by(pods as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    #[test]
    fn termination_mode_follows_the_grace_period() {
        let claim = |tgp: Option<&str>| -> NodeClaim {
            let mut v = json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                         "requirements": []},
            });
            if let Some(t) = tgp {
                v["spec"]["terminationGracePeriod"] = json!(t);
            }
            serde_json::from_value(v).expect("claim")
        };
        assert_eq!(termination_mode(&claim(None)), "graceful");
        assert_eq!(termination_mode(&claim(Some("0s"))), "forceful");
        assert_eq!(termination_mode(&claim(Some("1h"))), "eventual");
    }
}
