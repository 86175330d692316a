//! NodeClaim disruption status, as upstream's `nodeclaim/disruption` and `podevents`
//! controllers keep it: `status.lastPodEventTime` (when a pod was last bound to or removed from
//! the node), the `Consolidatable` condition (consolidateAfter has passed since then) and the
//! `Drifted` condition (with the drift reason, including the cloud provider's AMI, subnet and
//! security-group drift). Users and dashboards read these; the engine reads `lastPodEventTime`
//! and the provider's drift reasons back.
//!
//! [`PodEvents`] and [`desired`] are pure; [`run`] is the loop that writes the status.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::apis::NodeClaim;
use crate::apis::conditions::{self, Condition, FALSE, TRUE};
use crate::apis::nodeclaim::condition::{CONSOLIDATABLE, DRIFTED};
use crate::disruption::candidates::candidates;
use crate::disruption::drift::{self, DriftVerdict};
use crate::disruption::state::State;
use crate::runtime::Context;
use crate::runtime::panics::guarded_pass;
use crate::snapshot::{ClusterPod, Snapshot};

/// How often the cloud provider is asked whether a NodeClaim drifted (upstream: 5 minutes).
const PROVIDER_DRIFT_PERIOD: chrono::Duration = chrono::Duration::minutes(5);

/// Which pods each node ran at the last look, to turn watch snapshots into pod events.
#[derive(Debug, Default)]
pub struct PodEvents {
    seen: HashMap<String, BTreeSet<String>>,
}

impl PodEvents {
    /// Records the pods bound to each node now and returns the nodes whose set changed since
    /// the last call (a pod bound, finished or removed). The first call reports nothing: a
    /// restarted controller has no evidence of an event.
    pub fn observe<'a>(
        &mut self,
        pods: impl IntoIterator<Item = &'a ClusterPod>,
    ) -> BTreeSet<String> {
        let mut now: HashMap<String, BTreeSet<String>> = HashMap::new();
        for p in pods {
            let Some(node) = p.node_name().map(str::to_owned) else {
                continue;
            };
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed"))
                || p.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            now.entry(node)
                .or_default()
                .insert(p.metadata.uid.clone().unwrap_or_else(|| p.name_any()));
        }
        let mut changed = BTreeSet::new();
        for (node, before) in &self.seen {
            if now.get(node).unwrap_or(&BTreeSet::new()) != before {
                changed.insert(node.clone());
            }
        }
        for node in now.keys() {
            if !self.seen.contains_key(node) && !self.seen.is_empty() {
                changed.insert(node.clone());
            }
        }
        self.seen = now;
        // Keep nodes that became empty, so their next pod counts as an event too.
        for node in &changed {
            self.seen.entry(node.clone()).or_default();
        }
        changed
    }
}

/// The disruption conditions of one NodeClaim.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// `Drifted`: the reason and message when drifted, `None` to clear the condition.
    pub drifted: Option<(String, String)>,
    /// `Consolidatable`: whether consolidateAfter has passed (`None` to clear: the pool says
    /// `Never`).
    pub consolidatable: Option<bool>,
}

/// The conditions the engine's view implies, by NodeClaim name, for NodeClaims of initialized
/// nodes not already being disrupted (the others keep what they have).
pub fn desired(state: &State, now: DateTime<Utc>) -> BTreeMap<String, Desired> {
    let (cands, _) = candidates(state, now);
    cands
        .iter()
        .filter_map(|c| {
            let claim = state.nodes[c.node].claim.as_ref()?;
            let drifted = match &c.drift {
                DriftVerdict::Drifted(reason, message) => {
                    Some((reason.as_str().to_string(), message.clone()))
                }
                _ => None,
            };
            let consolidatable = c.consolidatable_in.map(|_| c.consolidatable);
            Some((
                claim.name.clone(),
                Desired {
                    drifted,
                    consolidatable,
                },
            ))
        })
        .collect()
}

/// Applies `want` (and a new lastPodEventTime) to a NodeClaim's conditions; returns whether
/// anything changed.
fn apply(conds: &mut Vec<Condition>, want: &Desired, now: DateTime<Utc>) -> bool {
    let mut changed = false;
    match &want.drifted {
        Some((reason, message)) => {
            changed |= conditions::set(conds, DRIFTED, TRUE, reason, message, now);
        }
        None => {
            let before = conds.len();
            conds.retain(|c| c.type_ != DRIFTED);
            changed |= conds.len() != before;
        }
    }
    match want.consolidatable {
        Some(true) => changed |= conditions::set(conds, CONSOLIDATABLE, TRUE, "", "", now),
        Some(false) => {
            changed |= conditions::set(
                conds,
                CONSOLIDATABLE,
                FALSE,
                "NotConsolidatable",
                "consolidateAfter has not passed since the last pod event",
                now,
            )
        }
        None => {
            let before = conds.len();
            conds.retain(|c| c.type_ != CONSOLIDATABLE);
            changed |= conds.len() != before;
        }
    }
    changed
}

/// Runs until the task is dropped.
pub async fn run(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    let mut events = PodEvents::default();
    let mut asked: HashMap<String, DateTime<Utc>> = HashMap::new();
    let mut provider_drift: HashMap<String, (String, String)> = HashMap::new();
    loop {
        let pass = async {
            let now = ctx.clock.now();
            let cluster = ctx.state.snapshot();
            let changed_nodes = events.observe(ctx.state.pods.state().iter().map(Arc::as_ref));
            ask_provider(&ctx, &cluster, now, &mut asked, &mut provider_drift).await;
            let state = crate::snapshot::disruption_input::disruption_state(
                &cluster,
                Vec::new(),
                ctx.options.scheduler,
                crate::snapshot::disruption_input::Unbound::LeftOut,
                now,
            );
            let want = desired(&state, now);
            for claim in &cluster.nodeclaims {
                if claim.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                if let Err(e) = update(
                    &ctx,
                    claim,
                    want.get(&claim.name_any()),
                    provider_drift.get(&claim.name_any()),
                    &changed_nodes,
                    now,
                )
                .await
                {
                    tracing::debug!(controller = "nodeclaim.disruption", nodeclaim = %claim.name_any(), error = %e, "status update failed; retrying");
                }
            }
            asked.retain(|name, _| cluster.nodeclaims.iter().any(|c| &c.name_any() == name));
            provider_drift.retain(|name, _| asked.contains_key(name));
        };
        guarded_pass("nodeclaim.disruption", &ctx, pass).await;
        tokio::time::sleep(ctx.intervals.disruption_status).await;
    }
}

/// Asks the cloud provider, at most every five minutes per NodeClaim, whether launched
/// NodeClaims drifted in ways only it can see: the cloud reports what the instance runs with
/// (image, subnet, security groups, capacity reservation, placement group) and [`drift::instance_drift`] judges it, as the engine
/// judges what the snapshot shows.
async fn ask_provider(
    ctx: &Context,
    cluster: &Snapshot,
    now: DateTime<Utc>,
    asked: &mut HashMap<String, DateTime<Utc>>,
    found: &mut HashMap<String, (String, String)>,
) {
    for claim in &cluster.nodeclaims {
        let name = claim.name_any();
        let Some(provider_id) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) else {
            continue;
        };
        if asked
            .get(&name)
            .is_some_and(|at| now - *at < PROVIDER_DRIFT_PERIOD)
        {
            continue;
        }
        let Some(class) = cluster.nodeclass(&claim.spec.node_class_ref.name) else {
            continue;
        };
        asked.insert(name.clone(), now);
        match ctx.provider.get(provider_id).await {
            Ok(instance) => {
                let observed = drift::Observed {
                    image_id: instance.image_id.as_deref(),
                    subnet_id: instance.subnet_id.as_deref(),
                    security_groups: instance.security_groups.as_deref(),
                    capacity_reservation_id: instance.capacity_reservation_id.as_deref(),
                    placement_group: instance.placement_group.as_ref().map(|g| {
                        drift::ObservedPlacementGroup {
                            id: g.id.as_deref(),
                            name: g.name.as_deref(),
                        }
                    }),
                };
                match drift::instance_drift(class, &observed) {
                    Some((reason, why)) => {
                        found.insert(name, (reason.as_str().to_string(), why));
                    }
                    None => {
                        found.remove(&name);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(nodeclaim = %name, error = %e, "drift check failed");
            }
        }
    }
}

async fn update(
    ctx: &Context,
    claim: &NodeClaim,
    want: Option<&Desired>,
    provider_drift: Option<&(String, String)>,
    changed_nodes: &BTreeSet<String>,
    now: DateTime<Utc>,
) -> Result<(), kube::Error> {
    let status = claim.status.clone().unwrap_or_default();
    let mut conds = status.conditions.clone();
    let mut changed = false;
    if let Some(want) = want {
        let mut want = want.clone();
        if want.drifted.is_none()
            && let Some(drifted) = provider_drift
        {
            want.drifted = Some(drifted.clone());
        }
        changed |= apply(&mut conds, &want, now);
    }
    // As upstream's podevents controller: a pod event within ten seconds of the recorded one is
    // not written, so binding churn costs one status write per node per ten seconds.
    let pod_event = status
        .node_name
        .as_ref()
        .is_some_and(|n| changed_nodes.contains(n))
        && status
            .last_pod_event_time
            .is_none_or(|at| now - at >= chrono::Duration::seconds(10));
    if !changed && !pod_event {
        return Ok(());
    }
    // Conditional on the version read: the lifecycle controller writes these conditions too,
    // and a stale list must not overwrite its newer one.
    let mut patch = json!({
        "metadata": {"resourceVersion": claim.resource_version()},
        "status": {"conditions": conds},
    });
    if pod_event {
        patch["status"]["lastPodEventTime"] = json!(now);
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    api.patch_status(
        &claim.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, node: &str) -> ClusterPod {
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"containers": [], "nodeName": node},
        }))
        .expect("pod")
    }

    #[test]
    fn pod_events_are_binds_and_removals_after_the_first_look() {
        let mut ev = PodEvents::default();
        assert!(
            ev.observe(&[pod("a", "n1")]).is_empty(),
            "first look: no evidence"
        );
        assert!(ev.observe(&[pod("a", "n1")]).is_empty());
        let changed = ev.observe(&[pod("a", "n1"), pod("b", "n2")]);
        assert_eq!(changed.into_iter().collect::<Vec<_>>(), ["n2"]);
        let changed = ev.observe(&[pod("b", "n2")]);
        assert_eq!(changed.into_iter().collect::<Vec<_>>(), ["n1"], "removal");
        assert!(ev.observe(&[pod("b", "n2")]).is_empty());
        let changed = ev.observe(&[pod("b", "n2"), pod("c", "n1")]);
        assert_eq!(
            changed.into_iter().collect::<Vec<_>>(),
            ["n1"],
            "emptied node refilled"
        );
        let mut done = pod("c", "n1");
        done.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).expect("s"));
        let changed = ev.observe(&[pod("b", "n2"), done]);
        assert_eq!(changed.into_iter().collect::<Vec<_>>(), ["n1"], "finished");
    }

    #[test]
    fn conditions_follow_the_desired_state() {
        let t0 = DateTime::from_timestamp(1_000, 0).expect("t");
        let mut conds = Vec::new();
        let drifted = Desired {
            drifted: Some(("NodePoolDrifted".into(), "changed".into())),
            consolidatable: Some(false),
        };
        assert!(apply(&mut conds, &drifted, t0));
        assert!(!apply(&mut conds, &drifted, t0), "idempotent");
        assert!(conditions::is_true(&conds, DRIFTED));
        assert_eq!(
            conditions::find(&conds, DRIFTED).map(|c| c.reason.as_str()),
            Some("NodePoolDrifted")
        );
        assert!(!conditions::is_true(&conds, CONSOLIDATABLE));
        let clean = Desired {
            drifted: None,
            consolidatable: Some(true),
        };
        assert!(apply(&mut conds, &clean, t0));
        assert!(conditions::find(&conds, DRIFTED).is_none());
        assert!(conditions::is_true(&conds, CONSOLIDATABLE));
        let never = Desired {
            drifted: None,
            consolidatable: None,
        };
        assert!(apply(&mut conds, &never, t0));
        assert!(conds.is_empty());
    }
}
