//! Node repair (upstream's `node.health` controller, behind the `NodeRepair` gate): a Node whose
//! condition has matched one of the cloud provider's repair policies for longer than its
//! toleration has its NodeClaim deleted forcefully — the `karpenter.sh/nodeclaim-termination-timestamp`
//! annotation set to now, so the drain waits on no PodDisruptionBudget and no `do-not-disrupt`
//! pod, as upstream's does — and the provisioner launches a replacement for its pods. Disruption
//! budgets and `karpenter.sh/do-not-disrupt` do not hold repair back either: a broken Node serves
//! nothing they protect.
//!
//! Safety: when more than 20% of a NodePool's Nodes (of the cluster's, for a NodeClaim of no
//! NodePool) are unhealthy at once, nothing in it is repaired and a `NodeRepairBlocked` Warning
//! event says why (at most every 15 minutes per object, upstream's dedupe window).
//!
//! The decision is `disruption::repair` (pure); this module reads the cache, acts and counts
//! `karpenter_nodeclaims_disrupted_total{reason="unhealthy"}` and
//! `karpenter_nodeclaims_unhealthy_disrupted_total`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::apis::{NodeClaim, labels};
use crate::disruption::repair::{self, ALLOWED_UNHEALTHY_PERCENT, Health, Unhealthy, Verdict};
use crate::metrics::METRICS;
use crate::runtime::panics::guarded_pass;
use crate::runtime::{Context, Error};
use crate::snapshot::joins;

/// Between passes over the Nodes. Tolerations are counted in minutes; this is the slack.
pub const POLL: Duration = Duration::from_secs(10);
/// How often the same object gets another `NodeRepairBlocked` event (upstream's dedupe window).
const BLOCKED_EVENT_EVERY: chrono::Duration = chrono::Duration::minutes(15);
/// How long publishing one event may take.
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);
/// The event reason when the safety threshold holds repair back.
pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";
/// The `karpenter_nodeclaims_disrupted_total` reason of a repair.
pub const UNHEALTHY_REASON: &str = "unhealthy";

/// Node repair, with what it remembers between passes: when it last published a
/// `NodeRepairBlocked` event about each object.
#[derive(Debug, Default)]
pub struct NodeRepair {
    blocked_events: Mutex<HashMap<(String, String), DateTime<Utc>>>,
}

/// Runs until the task is dropped.
pub async fn run(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    let repair = NodeRepair::default();
    loop {
        tokio::time::sleep(POLL).await;
        if let Some(Err(e)) = guarded_pass("node.health", &ctx, repair.pass(&ctx)).await {
            tracing::warn!(controller = "node.health", error = %e, "node repair pass failed");
        }
    }
}

fn conditions(node: &Node) -> &[NodeCondition] {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[])
}

impl NodeRepair {
    /// One pass over the cached Nodes: repairs those past their toleration, reports those the
    /// safety threshold holds back; nothing with the `NodeRepair` gate off. Public so the in-memory controller tests can drive it
    /// without the polling loop.
    pub async fn pass(&self, ctx: &Context) -> Result<(), Error> {
        let policies = ctx.provider.repair_policies();
        if !ctx.options.node_repair || policies.is_empty() {
            return Ok(());
        }
        let now = ctx.clock.now();
        let nodes = ctx.state.nodes.state();
        let claims = ctx.state.nodeclaims.state();
        let mut cluster = Health::default();
        let mut pools: HashMap<&str, Health> = HashMap::new();
        for node in &nodes {
            cluster.count(conditions(node), policies);
            if let Some(pool) = node.labels().get(labels::NODEPOOL) {
                pools
                    .entry(pool.as_str())
                    .or_default()
                    .count(conditions(node), policies);
            }
        }
        for node in &nodes {
            let Some(claim) = joins::claim_of(claims.iter(), node) else {
                continue;
            };
            let pool = claim.labels().get(labels::NODEPOOL).map(String::as_str);
            let health = match pool {
                Some(p) => pools.get(p).copied().unwrap_or_default(),
                None => cluster,
            };
            match repair::decide(conditions(node), policies, health, now) {
                Verdict::Healthy | Verdict::Tolerated { .. } => {}
                Verdict::Blocked { unhealthy, health } => {
                    self.blocked(ctx, node, claim, pool, unhealthy, health, now)
                        .await;
                }
                Verdict::Repair { unhealthy } => {
                    replace(ctx, node, claim, unhealthy, now).await?;
                }
            }
        }
        Ok(())
    }

    /// Reports a repair the safety threshold holds back: a log line each pass, and a Warning
    /// event on the Node, its NodeClaim and its NodePool at most every
    /// [`BLOCKED_EVENT_EVERY`].
    #[allow(clippy::too_many_arguments)]
    async fn blocked(
        &self,
        ctx: &Context,
        node: &Node,
        claim: &NodeClaim,
        pool: Option<&str>,
        unhealthy: Unhealthy,
        health: Health,
        now: DateTime<Utc>,
    ) {
        let scope = if pool.is_some() {
            "in the nodepool"
        } else {
            "in the cluster"
        };
        let note = format!(
            "more than {ALLOWED_UNHEALTHY_PERCENT}% of nodes are unhealthy {scope} ({} of {}, at most {} allowed); not repairing",
            health.unhealthy,
            health.nodes,
            health.allowed()
        );
        tracing::info!(
            controller = "node.health",
            node = %node.name_any(),
            nodeclaim = %claim.name_any(),
            nodepool = pool.unwrap_or_default(),
            condition = unhealthy.policy.condition_type,
            "{note}"
        );
        let mut targets = vec![
            (node.object_ref(&()), "Node"),
            (claim.object_ref(&()), "NodeClaim"),
        ];
        if let Some(name) = pool {
            let found = ctx
                .state
                .nodepools
                .state()
                .into_iter()
                .find(|p| p.name_any() == name);
            match found {
                Some(p) => targets.push((p.object_ref(&()), "NodePool")),
                // Upstream publishes nothing when the NodePool is gone.
                None => return,
            }
        }
        for (reference, kind) in targets {
            let key = (kind.to_string(), reference.name.clone().unwrap_or_default());
            if !self.due(key, now) {
                continue;
            }
            publish(ctx, &reference, &note).await;
        }
    }

    /// Whether the object under `key` is due another `NodeRepairBlocked` event at `now`; marks
    /// it published if so.
    fn due(&self, key: (String, String), now: DateTime<Utc>) -> bool {
        let mut published = match self.blocked_events.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        published.retain(|_, at| now - *at < BLOCKED_EVENT_EVERY);
        if published.contains_key(&key) {
            return false;
        }
        published.insert(key, now);
        true
    }
}

/// Publishes a `NodeRepairBlocked` Warning about `reference`.
async fn publish(
    ctx: &Context,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    note: &str,
) {
    let e = Event {
        type_: EventType::Warning,
        reason: NODE_REPAIR_BLOCKED.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Repairing".into(),
        secondary: None,
    };
    match tokio::time::timeout(EVENT_TIMEOUT, ctx.recorder.publish(&e, reference)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::debug!(error = %err, "could not record event"),
        Err(_) => tracing::warn!("recording an event timed out"),
    }
}

/// Deletes the NodeClaim of an unhealthy Node forcefully: its termination deadline set to now
/// (the drain then deletes what eviction would wait for), then the delete, counted once. A
/// NodeClaim already being deleted gets the deadline too, so a drain stuck on a PDB ends.
async fn replace(
    ctx: &Context,
    node: &Node,
    claim: &NodeClaim,
    unhealthy: Unhealthy,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let name = claim.name_any();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let recorded = claim
        .annotations()
        .get(labels::NODECLAIM_TERMINATION_TIMESTAMP)
        .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc));
    if recorded.is_none_or(|t| t >= now) {
        let deadline = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let patch = json!({"metadata": {"annotations": {
            labels::NODECLAIM_TERMINATION_TIMESTAMP: deadline,
        }}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    tracing::info!(
        controller = "node.health",
        node = %node.name_any(),
        nodeclaim = %name,
        condition = unhealthy.policy.condition_type,
        status = unhealthy.policy.condition_status,
        since = %unhealthy.since,
        "deleting unhealthy node"
    );
    let label = |k: &str| node.labels().get(k).cloned().unwrap_or_default();
    let (pool, capacity_type) = (label(labels::NODEPOOL), label(labels::CAPACITY_TYPE));
    METRICS
        .nodeclaims_disrupted_total
        .with_label_values(&[UNHEALTHY_REASON, &pool, &capacity_type, "", ""])
        .inc();
    let image = claim
        .status
        .as_ref()
        .and_then(|s| s.image_id.clone())
        .unwrap_or_default();
    METRICS
        .nodeclaims_unhealthy_disrupted_total
        .with_label_values(&[
            &repair::snake_case(unhealthy.policy.condition_type),
            &pool,
            &capacity_type,
            &image,
        ])
        .inc();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_event_is_due_again_after_fifteen_minutes() {
        let repair = NodeRepair::default();
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).expect("t");
        let key = || ("Node".to_string(), "a".to_string());
        assert!(repair.due(key(), t0));
        assert!(!repair.due(key(), t0 + chrono::Duration::minutes(14)));
        assert!(repair.due(("Node".into(), "b".into()), t0));
        assert!(repair.due(key(), t0 + BLOCKED_EVENT_EVERY));
    }
}
