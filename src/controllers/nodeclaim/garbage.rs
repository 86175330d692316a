//! Garbage collection between the cluster and the cloud, in both directions: a NodeClaim whose
//! instance is gone (terminated outside Karpenter, or reclaimed) is deleted so its pods are
//! planned again, and an instance no NodeClaim accounts for (a launch whose NodeClaim was lost,
//! say in a crash between the two writes) is terminated so it does not bill forever, its Node
//! deleted with it, as upstream's AWS garbage collection does.
//!
//! Nodes get the same treatment: a Node that is Karpenter's (it carries the
//! `karpenter.sh/termination` finalizer, added at registration) but whose NodeClaim is gone —
//! its finalizer stripped by hand, say — is deleted, as Kubernetes' garbage collector would
//! through its NodeClaim owner reference, and once its instance is terminated (it has no
//! NodeClaim, so the instance collection above terminates it) the finalizer comes off. Upstream
//! leaves such a Node stuck terminating with an error; nothing is left to wait for here.
//! Nodes Karpenter never registered are left alone.
//!
//! An instance or a Node is collected only once the API server confirms no NodeClaim accounts
//! for it, read untyped ([`Claimed`]): the cache may lag behind a NodeClaim just created, and
//! leaves out one the controller cannot read, which still owns its instance.
//!
//! [`orphaned_instances`], [`vanished_claims`] and [`orphaned_nodes`] are pure; [`run`] is the
//! loop.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};

use crate::apis::NodeClaim;
use crate::apis::conditions;
use crate::cloudprovider::{CloudError, Instance, InstanceState};
use crate::runtime::Context;
use crate::runtime::panics::guarded_pass;

use super::termination;
use crate::apis::nodeclaim::condition::LAUNCHED;

/// Instances younger than this are left alone: their NodeClaim may not be visible yet.
pub const INSTANCE_GRACE: chrono::Duration = chrono::Duration::seconds(30);
/// NodeClaims launched less than this long ago are not checked: the cloud's view may lag.
pub const CLAIM_GRACE: chrono::Duration = chrono::Duration::minutes(1);

/// What the NodeClaims account for: their names and their instances' provider IDs.
#[derive(Debug, Default)]
pub struct Claimed {
    names: HashSet<String>,
    ids: HashSet<String>,
}

impl Claimed {
    /// What `claims` account for.
    pub fn of(claims: &[Arc<NodeClaim>]) -> Self {
        Self {
            names: claims.iter().map(|c| c.name_any()).collect(),
            ids: claims
                .iter()
                .filter_map(|c| crate::snapshot::joins::claim_provider_id(c))
                .map(str::to_string)
                .collect(),
        }
    }

    /// What the NodeClaims the API server holds account for, read untyped: one the controller
    /// cannot read (and so does not cache) still owns its instance and its Node, which must
    /// not be collected as orphans.
    async fn listed(ctx: &Context) -> Result<Self, crate::runtime::Error> {
        let api: Api<DynamicObject> = Api::all_with(
            ctx.client.clone(),
            &crate::runtime::untyped::resource::<NodeClaim>(),
        );
        let claims = api.list(&ListParams::default()).await?.items;
        Ok(Self {
            names: claims.iter().map(|c| c.name_any()).collect(),
            ids: claims
                .iter()
                .filter_map(|c| c.data.get("status")?.get("providerID")?.as_str())
                .filter(|id| !id.is_empty())
                .map(str::to_string)
                .collect(),
        })
    }
}

/// Instances (provider IDs) to terminate: running, older than [`INSTANCE_GRACE`], and claimed
/// by no NodeClaim, neither by the NodeClaim tag nor by provider ID.
pub fn orphaned_instances(
    instances: &[Instance],
    claimed: &Claimed,
    now: DateTime<Utc>,
) -> Vec<String> {
    instances
        .iter()
        .filter(|i| !i.state.is_terminating())
        .filter(|i| now - i.launch_time >= INSTANCE_GRACE)
        .filter(|i| !claimed.ids.contains(&i.provider_id))
        .filter(|i| {
            i.nodeclaim
                .as_ref()
                .is_none_or(|n| !claimed.names.contains(n))
        })
        .map(|i| i.provider_id.clone())
        .collect()
}

/// NodeClaims worth asking the cloud about: launched at least [`CLAIM_GRACE`] ago and not
/// already being deleted, with their provider IDs.
pub fn vanished_claims(claims: &[Arc<NodeClaim>], now: DateTime<Utc>) -> Vec<(String, String)> {
    claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| {
            let status = c.status.as_ref()?;
            let launched = conditions::find(&status.conditions, LAUNCHED)
                .filter(|l| l.status == conditions::TRUE)?;
            (now - launched.last_transition_time >= CLAIM_GRACE)
                .then(|| (c.name_any(), status.provider_id.clone()))
                .and_then(|(n, id)| Some((n, id?)))
        })
        .collect()
}

/// Nodes to collect: carrying Karpenter's termination finalizer (so registered by it) while no
/// NodeClaim has their provider ID or is named in their owner references.
pub fn orphaned_nodes(nodes: &[Arc<Node>], claimed: &Claimed) -> Vec<Arc<Node>> {
    nodes
        .iter()
        .filter(|n| termination::has_finalizer(n.as_ref()))
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_none_or(|id| !claimed.ids.contains(id))
        })
        .filter(|n| {
            !n.owner_references()
                .iter()
                .any(|o| o.kind == "NodeClaim" && claimed.names.contains(&o.name))
        })
        .cloned()
        .collect()
}

/// Runs until the task is dropped.
pub async fn run(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    loop {
        tokio::time::sleep(ctx.intervals.garbage_collection).await;
        let pass = async {
            collect(&ctx).await;
            collect_nodes(&ctx).await
        };
        if let Some(Err(e)) = guarded_pass("nodeclaim.garbagecollection", &ctx, pass).await {
            tracing::warn!(controller = "garbagecollection", error = %e, "could not collect nodes");
        }
    }
}

/// Deletes Karpenter's Nodes whose NodeClaim is gone, and releases them once their instance
/// is terminated.
async fn collect_nodes(ctx: &Context) -> Result<(), crate::runtime::Error> {
    let cached = orphaned_nodes(
        &ctx.state.nodes.state(),
        &Claimed::of(&ctx.state.nodeclaims.state()),
    );
    if cached.is_empty() {
        return Ok(());
    }
    // The cache may lag behind a NodeClaim just created, and leaves out one it cannot read:
    // confirm with the API server.
    let claimed = Claimed::listed(ctx).await?;
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    for node in orphaned_nodes(&cached, &claimed) {
        let name = node.name_any();
        if node.metadata.deletion_timestamp.is_none() {
            tracing::info!(controller = "garbagecollection", node = %name, "the node's NodeClaim is gone; deleting the node");
            match nodes.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        let gone = match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
            None => true,
            Some(id) => match ctx.provider.get(id).await {
                Ok(i) => i.state == InstanceState::Terminated,
                Err(CloudError::NotFound(_)) => true,
                Err(e) => {
                    tracing::debug!(controller = "garbagecollection", node = %name, error = %e, "could not look the instance up");
                    false
                }
            },
        };
        if gone {
            tracing::info!(controller = "garbagecollection", node = %name, "the node's NodeClaim and instance are gone; removing its finalizer");
            let started = node
                .metadata
                .deletion_timestamp
                .as_ref()
                .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0));
            termination::release_node(&node, ctx, started).await?;
        }
    }
    Ok(())
}

/// One collection of NodeClaims whose instance is gone and of instances no NodeClaim accounts
/// for. Public so the in-memory controller tests can drive it without the polling loop.
pub async fn collect(ctx: &Context) {
    let now = ctx.clock.now();
    let claims = ctx.state.nodeclaims.state();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for (name, id) in vanished_claims(&claims, now) {
        let gone = match ctx.provider.get(&id).await {
            Ok(i) => i.state == InstanceState::Terminated,
            Err(CloudError::NotFound(_)) => true,
            Err(e) => {
                tracing::debug!(controller = "garbagecollection", nodeclaim = %name, error = %e, "could not look the instance up");
                false
            }
        };
        if gone {
            tracing::info!(controller = "garbagecollection", nodeclaim = %name, provider_id = %id, "instance is gone; deleting nodeclaim");
            if let Err(e) = api.delete(&name, &DeleteParams::default()).await {
                tracing::warn!(controller = "garbagecollection", nodeclaim = %name, error = %e, "could not delete nodeclaim");
            }
        }
    }
    let instances = match ctx.provider.list().await {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(controller = "garbagecollection", error = %e, "could not list instances");
            return;
        }
    };
    // Read the claims again: one created since the first read must not lose its instance.
    let orphans = orphaned_instances(&instances, &Claimed::of(&ctx.state.nodeclaims.state()), now);
    if orphans.is_empty() {
        return;
    }
    // Confirm with the API server, which also holds the NodeClaims the cache leaves out
    // because they cannot be read: their instances are not orphans.
    let claimed = match Claimed::listed(ctx).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(controller = "garbagecollection", error = %e, "could not list nodeclaims; terminating no instance this pass");
            return;
        }
    };
    let orphans: Vec<String> = orphaned_instances(&instances, &claimed, now)
        .into_iter()
        .filter(|id| orphans.contains(id))
        .collect();
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    for id in orphans {
        tracing::info!(controller = "garbagecollection", provider_id = %id, "terminating an instance no NodeClaim owns");
        match ctx.provider.delete(&id).await {
            Ok(()) | Err(CloudError::NotFound(_)) => {}
            Err(e) => {
                tracing::warn!(controller = "garbagecollection", provider_id = %id, error = %e, "could not terminate instance");
                continue;
            }
        }
        // Its Node, if it registered one, goes too (termination releases it: the instance is
        // gone).
        let node = ctx.state.nodes.state().into_iter().find(|n| {
            crate::snapshot::joins::node_provider_id(n) == Some(id.as_str())
                && n.metadata.deletion_timestamp.is_none()
        });
        if let Some(node) = node
            && let Err(e) = nodes
                .delete(&node.name_any(), &DeleteParams::default())
                .await
        {
            tracing::debug!(controller = "garbagecollection", node = %node.name_any(), error = %e, "could not delete the node of a collected instance");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::instance_type::CapacityType;
    use serde_json::json;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).expect("t")
    }

    fn instance(id: &str, claim: Option<&str>, launched: i64, state: InstanceState) -> Instance {
        Instance {
            provider_id: id.into(),
            nodeclaim: claim.map(Into::into),
            nodepool: None,
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
            image_id: None,
            subnet_id: None,
            security_groups: None,
            placement_group: None,
            capacity_reservation_id: None,
            state,
            launch_time: t(launched),
        }
    }

    fn claim(
        name: &str,
        id: Option<&str>,
        launched_at: Option<i64>,
        deleting: bool,
    ) -> Arc<NodeClaim> {
        let mut v = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                     "requirements": []},
            "status": {"conditions": []},
        });
        if let Some(id) = id {
            v["status"]["providerID"] = json!(id);
        }
        if let Some(at) = launched_at {
            v["status"]["conditions"] = json!([{"type": "Launched", "status": "True",
                "lastTransitionTime": t(at), "reason": "Launched", "message": ""}]);
        }
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(serde_json::from_value(v).expect("claim"))
    }

    #[test]
    fn only_old_unclaimed_running_instances_are_orphans() {
        let claims = vec![
            claim("a", Some("id-a"), Some(0), false),
            claim("b", None, None, false),
        ];
        let instances = vec![
            instance("id-a", Some("a"), 0, InstanceState::Running),
            instance("id-b", Some("b"), 0, InstanceState::Pending),
            instance("id-x", Some("gone"), 0, InstanceState::Running),
            instance("id-y", None, 0, InstanceState::Running),
            instance("id-young", Some("gone"), 90, InstanceState::Running),
            instance("id-dying", Some("gone"), 0, InstanceState::ShuttingDown),
        ];
        assert_eq!(
            orphaned_instances(&instances, &Claimed::of(&claims), t(100)),
            ["id-x", "id-y"]
        );
    }

    fn node(name: &str, id: &str, finalizer: bool, owner: Option<&str>) -> Arc<Node> {
        let mut v = json!({"metadata": {"name": name}, "spec": {"providerID": id}});
        if finalizer {
            v["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
        }
        if let Some(o) = owner {
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim", "name": o, "uid": "u"}]);
        }
        Arc::new(serde_json::from_value(v).expect("node"))
    }

    #[test]
    fn only_karpenters_nodes_without_a_nodeclaim_are_collected() {
        let claims = vec![
            claim("a", Some("id-a"), Some(0), false),
            claim("b", None, None, false),
        ];
        let nodes = vec![
            node("has-claim", "id-a", true, Some("a")),
            node("owner-still-there", "id-b", true, Some("b")),
            node("orphan", "id-x", true, Some("gone")),
            node("orphan-no-owner", "id-y", true, None),
            node("not-ours", "id-z", false, None),
        ];
        let names: Vec<String> = orphaned_nodes(&nodes, &Claimed::of(&claims))
            .iter()
            .map(|n| n.name_any())
            .collect();
        assert_eq!(names, ["orphan", "orphan-no-owner"]);
    }

    #[test]
    fn claims_are_checked_a_minute_after_launch() {
        let claims = vec![
            claim("old", Some("id-old"), Some(0), false),
            claim("new", Some("id-new"), Some(30), false),
            claim("unlaunched", None, None, false),
            claim("deleting", Some("id-d"), Some(0), true),
        ];
        assert_eq!(
            vanished_claims(&claims, t(70)),
            [("old".to_string(), "id-old".to_string())]
        );
    }
}
