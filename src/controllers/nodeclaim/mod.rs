//! A NodeClaim's life, as upstream runs it: launch through the cloud provider, register the Node
//! that joins with the same provider ID (labels, taints, owner, finalizer; the
//! `karpenter.sh/unregistered` taint removed), mark it initialized once Ready with its startup
//! taints gone, name the instance after its Node ([`tagging`]), give up on claims that never
//! launch or register, and on deletion drain the Node
//! ([`termination`]), terminate the instance and wait for it before letting the NodeClaim go.
//!
//! Every step reads what it needs from the objects themselves (provider ID, conditions, taints)
//! and from the cloud, so a restarted controller continues where the last one stopped; launches
//! are idempotent per NodeClaim in the provider.

pub mod disruption;
pub mod garbage;
pub mod liveness;
pub mod registration_health;
pub mod tagging;
pub mod termination;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::{Node, Taint as K8sTaint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::apis::conditions::READY;
use crate::apis::conditions::{self, FALSE, TRUE};
use crate::apis::labels;
use crate::apis::nodeclaim::condition::{INITIALIZED, LAUNCHED, REGISTERED};
use crate::apis::nodeclaim::{NodeClaimStatus, Taint};
use crate::apis::{EC2NodeClass, NodeClaim};
use crate::metrics::METRICS;
use crate::runtime::untyped;
use crate::runtime::{Context, Error};
use crate::snapshot::{self, joins, taints};

pub use liveness::{LAUNCH_TIMEOUT, REGISTRATION_TIMEOUT};

/// Runs the NodeClaim lifecycle controller until the stream ends. NodeClaims are watched
/// untyped and read one at a time, so one the controller cannot read is reported while the
/// others are served.
pub async fn run(ctx: Arc<Context>) {
    let store = ctx.state.nodeclaims.clone();
    let nodes = ctx.state.node_changes.subscribe().filter_map(move |node| {
        future::ready(
            claim_of_node(&store, &node)
                .map(|name| untyped::trigger::<NodeClaim>("nodeclaim.lifecycle", &name)),
        )
    });
    let reconciles = untyped::controller::<NodeClaim>("nodeclaim.lifecycle", &ctx)
        .reconcile_on(nodes)
        .run(
            |c, ctx| {
                crate::metrics::in_controller(
                    "nodeclaim.lifecycle",
                    untyped::reconcile(
                        "nodeclaim.lifecycle",
                        c,
                        ctx,
                        reconcile,
                        untyped::report::<NodeClaim>,
                    ),
                )
            },
            error_policy,
            ctx,
        );
    untyped::drive("nodeclaim.lifecycle", reconciles).await;
}

/// The NodeClaim a Node belongs to.
pub fn claim_of_node(
    store: &kube::runtime::reflector::Store<NodeClaim>,
    node: &Node,
) -> Option<String> {
    joins::claim_of(&store.state(), node).map(|c| c.name_any())
}

fn error_policy(claim: Arc<DynamicObject>, error: &Error, _ctx: Arc<Context>) -> Action {
    crate::runtime::retry_later("nodeclaim.lifecycle", &claim.name_any(), error)
}

/// The claim's Node, once it joined.
pub(super) fn node_of(ctx: &Context, claim: &NodeClaim) -> Option<Arc<Node>> {
    joins::node_of(&ctx.state.nodes.state(), claim).cloned()
}

/// One reconcile of a NodeClaim: finalizer, launch, registration, initialization, the liveness
/// timeouts, or termination once it is being deleted. Public so the in-memory controller tests
/// can drive it step by step against a fake API server and clock.
pub async fn reconcile(claim: Arc<NodeClaim>, ctx: Arc<Context>) -> Result<Action, Error> {
    let now = ctx.clock.now();
    if claim.metadata.deletion_timestamp.is_some() {
        return termination::terminate(&claim, &ctx).await;
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let name = claim.name_any();
    if !claim
        .finalizers()
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        let mut finalizers = claim.finalizers().to_vec();
        finalizers.push(labels::TERMINATION_FINALIZER.into());
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers, "resourceVersion": claim.resource_version()}})),
        )
        .await?;
        return Ok(Action::requeue(Duration::ZERO));
    }
    let mut status = claim.status.clone().unwrap_or_default();
    if status.provider_id.is_none() {
        return launch(&claim, &ctx, status, now).await;
    }
    if let Some(node) = node_of(&ctx, &claim) {
        if node.metadata.deletion_timestamp.is_some() {
            // The Node is being deleted: the NodeClaim goes with it, as upstream's node
            // termination does.
            api.delete(&name, &DeleteParams::default()).await?;
            return Ok(Action::await_change());
        }
        // Register once; and again if a writer with a stale copy of the Node (the node
        // lifecycle controller patches taints from its cache) brought the unregistered taint back.
        let unregistered = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == labels::UNREGISTERED_TAINT_KEY));
        let newly_registered = !conditions::is_true(&status.conditions, REGISTERED);
        if newly_registered || unregistered {
            register(&claim, &node, &ctx).await?;
            status.node_name = node.metadata.name.clone();
            conditions::set(&mut status.conditions, REGISTERED, TRUE, "", "", now);
        }
        let (initialized, why) = initialization(&claim, &node);
        let mut changed = false;
        if initialized {
            if !conditions::is_true(&status.conditions, INITIALIZED) {
                mark_initialized(&node, &ctx).await?;
            }
            changed |= conditions::set(&mut status.conditions, INITIALIZED, TRUE, "", "", now);
            changed |= conditions::set(&mut status.conditions, READY, TRUE, "", "", now);
        } else {
            changed |= conditions::set(
                &mut status.conditions,
                INITIALIZED,
                FALSE,
                "NotInitialized",
                &why,
                now,
            );
            changed |= conditions::set(
                &mut status.conditions,
                READY,
                FALSE,
                "NotInitialized",
                &why,
                now,
            );
        }
        if changed
            || claim.status.as_ref().and_then(|s| s.node_name.as_ref()) != status.node_name.as_ref()
        {
            write_status(&api, &claim, &status).await?;
        }
        // Counted once the registration is written: a write that lost a race is retried, and
        // must not count the same registration twice.
        if newly_registered {
            registration_health::record(&ctx, &claim, true).await;
        }
        let mut tag_retry = None;
        if let Some(node_name) = tagging::pending(&claim, status.node_name.as_deref()) {
            match tagging::tag(&claim, node_name, &ctx).await {
                Ok(paced) => tag_retry = paced,
                Err(e) => {
                    tracing::warn!(controller = "nodeclaim.lifecycle", nodeclaim = %name, error = %e, "could not tag the instance; retrying later");
                    tag_retry = Some(tagging::RETRY);
                }
            }
        }
        let recheck = Duration::from_secs(5);
        return Ok(match (initialized, tag_retry) {
            (false, retry) => Action::requeue(retry.map_or(recheck, |r| r.min(recheck))),
            (true, Some(retry)) => Action::requeue(retry),
            (true, None) => Action::await_change(),
        });
    }
    // Launched, no Node yet: wait for registration, within the timeout.
    let launched_at = conditions::find(&status.conditions, LAUNCHED)
        .map(|c| c.last_transition_time)
        .unwrap_or(now);
    let recheck = match liveness::registration(launched_at, now) {
        liveness::Registration::Wait(recheck) => recheck,
        liveness::Registration::TimedOut => {
            tracing::warn!(controller = "nodeclaim.lifecycle", nodeclaim = %name, "node did not register in time; deleting");
            event(
                &ctx,
                &claim,
                EventType::Warning,
                "RegistrationTimeout",
                "Node did not register within 15m; deleting the NodeClaim",
            )
            .await;
            api.delete(&name, &DeleteParams::default()).await?;
            count_disrupted(&claim, "registration_timeout");
            registration_health::record(&ctx, &claim, false).await;
            return Ok(Action::await_change());
        }
    };
    let mut changed = conditions::set(
        &mut status.conditions,
        REGISTERED,
        FALSE,
        "NodeNotFound",
        "Node not registered with cluster",
        now,
    );
    changed |= conditions::set(
        &mut status.conditions,
        READY,
        FALSE,
        "NodeNotFound",
        "Node not registered with cluster",
        now,
    );
    if changed {
        write_status(&api, &claim, &status).await?;
    }
    Ok(Action::requeue(recheck))
}

/// Counts a NodeClaim the lifecycle gave up on in `karpenter_nodeclaims_disrupted_total`, with
/// upstream's reasons (`launch_timeout`, `registration_timeout`, `insufficient_capacity`).
fn count_disrupted(claim: &NodeClaim, reason: &str) {
    let label = |k: &str| claim.labels().get(k).cloned().unwrap_or_default();
    METRICS
        .nodeclaims_disrupted_total
        .with_label_values(&[
            reason,
            &label(labels::NODEPOOL),
            &label(labels::CAPACITY_TYPE),
            "",
            "",
        ])
        .inc();
}

/// Writes the status computed from `seen`, only if the NodeClaim has not changed since: other
/// controllers write conditions and `lastPodEventTime` too, and a stale full status must not
/// undo them (a conflict retries the reconcile on a fresh copy).
async fn write_status(
    api: &Api<NodeClaim>,
    seen: &NodeClaim,
    status: &NodeClaimStatus,
) -> Result<(), Error> {
    api.patch_status(
        &seen.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"resourceVersion": seen.resource_version()},
            "status": status,
        })),
    )
    .await?;
    Ok(())
}

async fn event(ctx: &Context, obj: &NodeClaim, type_: EventType, reason: &str, note: &str) {
    let e = Event {
        type_,
        reason: reason.into(),
        note: Some(note.into()),
        action: reason.into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&e, &obj.object_ref(&())).await {
        tracing::debug!(error = %err, "could not record event");
    }
}

fn nodeclass_of(ctx: &Context, claim: &NodeClaim) -> Option<Arc<EC2NodeClass>> {
    let r = &claim.spec.node_class_ref;
    ctx.state.nodeclasses.get(&ObjectRef::new(&r.name))
}

async fn launch(
    claim: &NodeClaim,
    ctx: &Context,
    mut status: NodeClaimStatus,
    now: DateTime<Utc>,
) -> Result<Action, Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let name = claim.name_any();
    let created = claim
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
        .unwrap_or(now);
    let class_name = &claim.spec.node_class_ref.name;
    let error = match nodeclass_of(ctx, claim) {
        None => None,
        Some(nodeclass) => match ctx.provider.create(claim, &nodeclass).await {
            Ok(launched) => return record_launch(claim, ctx, status, now, launched).await,
            Err(e) => Some(e),
        },
    };
    let failure = match &error {
        None => liveness::LaunchFailure::NodeClassNotFound(class_name),
        Some(e) => liveness::LaunchFailure::Cloud(e),
    };
    match liveness::after_launch_failure(failure, created, now) {
        liveness::LaunchDecision::Replan { message } => {
            tracing::warn!(controller = "nodeclaim.lifecycle", nodeclaim = %name, error = %message, "insufficient capacity; deleting nodeclaim so pods are planned again");
            event(
                ctx,
                claim,
                EventType::Warning,
                "InsufficientCapacityError",
                &format!("NodeClaim {name} event: {message}"),
            )
            .await;
            api.delete(&name, &DeleteParams::default()).await?;
            count_disrupted(claim, "insufficient_capacity");
            Ok(Action::await_change())
        }
        liveness::LaunchDecision::Retry {
            status: condition,
            reason,
            message,
            event: publish,
            retry,
        } => {
            tracing::warn!(controller = "nodeclaim.lifecycle", nodeclaim = %name, reason, error = %message, retry_in = ?retry, "launch failed; will retry until the launch timeout");
            let a = conditions::set(
                &mut status.conditions,
                LAUNCHED,
                condition,
                reason,
                &message,
                now,
            );
            let b = conditions::set(
                &mut status.conditions,
                READY,
                condition,
                reason,
                &message,
                now,
            );
            if a || b {
                write_status(&api, claim, &status).await?;
                if publish {
                    event(ctx, claim, EventType::Warning, reason, &message).await;
                }
            }
            Ok(Action::requeue(retry))
        }
        liveness::LaunchDecision::GiveUp { message } => {
            tracing::warn!(controller = "nodeclaim.lifecycle", nodeclaim = %name, error = %message, "nodeclaim did not launch within the launch timeout; deleting");
            event(
                ctx,
                claim,
                EventType::Warning,
                "LaunchTimeout",
                &format!("NodeClaim did not launch within 5m: {message}"),
            )
            .await;
            api.delete(&name, &DeleteParams::default()).await?;
            count_disrupted(claim, "launch_timeout");
            registration_health::record(ctx, claim, false).await;
            Ok(Action::await_change())
        }
    }
}

/// Writes a launch to the NodeClaim: the cloud's labels under the NodeClaim's own and its
/// annotations, then the provider ID, image, capacity and `Launched=True`.
async fn record_launch(
    claim: &NodeClaim,
    ctx: &Context,
    mut status: NodeClaimStatus,
    now: DateTime<Utc>,
    launched: crate::cloudprovider::Launched,
) -> Result<Action, Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let name = claim.name_any();
    let mut new_labels = launched.labels.clone();
    new_labels.extend(claim.labels().clone());
    let labelled = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "labels": new_labels,
                "annotations": launched.annotations,
            }})),
        )
        .await?;
    status.provider_id = Some(launched.provider_id.clone());
    status.image_id = launched.image_id.clone();
    status.capacity = Some(launched.capacity.to_list());
    status.allocatable = Some(launched.allocatable.to_list());
    conditions::set(&mut status.conditions, LAUNCHED, TRUE, "", "", now);
    conditions::set(
        &mut status.conditions,
        READY,
        FALSE,
        "NodeNotFound",
        "Node not registered with cluster",
        now,
    );
    write_status(&api, &labelled, &status).await?;
    tracing::info!(
        controller = "nodeclaim.lifecycle",
        nodeclaim = %name,
        provider_id = %launched.provider_id,
        instance_type = %launched.instance_type,
        zone = %launched.zone,
        capacity_type = launched.capacity_type.label(),
        "launched nodeclaim"
    );
    Ok(Action::requeue(Duration::from_secs(5)))
}

fn k8s_taint(t: &Taint) -> K8sTaint {
    K8sTaint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: t.effect.as_str().into(),
        time_added: None,
    }
}

/// The Node's taints once registered: the unregistered taint removed, the NodeClaim's taints and
/// startup taints added (unless the node asks not to sync them).
pub fn registered_taints(claim: &NodeClaim, node: &Node) -> Vec<K8sTaint> {
    let mut taints: Vec<K8sTaint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != labels::UNREGISTERED_TAINT_KEY)
        .collect();
    let sync = node
        .labels()
        .get(labels::DO_NOT_SYNC_TAINTS)
        .is_none_or(|v| v != "true");
    if sync {
        for t in claim.spec.taints.iter().chain(&claim.spec.startup_taints) {
            let t = k8s_taint(t);
            if !taints
                .iter()
                .any(|x| x.key == t.key && x.effect == t.effect)
            {
                taints.push(t);
            }
        }
    }
    taints
}

/// The Node's labels and annotations once registered: its own, overwritten by the NodeClaim's
/// (the NodeClaim's win, as upstream's registration syncs them: a label the NodePool sets is what
/// the node must carry, whatever the machine reported), plus `karpenter.sh/registered=true`.
pub fn registered_metadata(
    claim: &NodeClaim,
    node: &Node,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut node_labels = node.labels().clone();
    node_labels.extend(claim.labels().clone());
    node_labels.insert(labels::REGISTERED.into(), "true".into());
    let mut annotations = node.annotations().clone();
    annotations.extend(claim.annotations().clone());
    (node_labels, annotations)
}

async fn register(claim: &NodeClaim, node: &Node, ctx: &Context) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    // The cached Node is often a step behind (the kubelet and the node controller write it
    // too); read it fresh so the conditional write below usually succeeds.
    let node = &nodes.get(&node.name_any()).await?;
    let (node_labels, node_annotations) = registered_metadata(claim, node);
    let first = !node.labels().contains_key(labels::REGISTERED);
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == labels::UNREGISTERED_TAINT_KEY));
    if first && !tainted {
        event(
            ctx,
            claim,
            EventType::Warning,
            "UnregisteredTaintMissing",
            &format!(
                "Node {} joined without the {} taint, so pods may have been scheduled to it before Karpenter synced its labels and taints",
                node.name_any(),
                labels::UNREGISTERED_TAINT_KEY
            ),
        )
        .await;
    }
    let mut finalizers = node.finalizers().to_vec();
    if !finalizers
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        finalizers.push(labels::TERMINATION_FINALIZER.into());
    }
    let mut owners = node.owner_references().to_vec();
    if !owners.iter().any(|o| o.kind == "NodeClaim") {
        owners.push(OwnerReference {
            api_version: NodeClaim::api_version(&()).into_owned(),
            kind: NodeClaim::kind(&()).into_owned(),
            name: claim.name_any(),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            block_owner_deletion: Some(true),
            controller: None,
        });
    }
    nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {
                    "labels": node_labels,
                    "annotations": node_annotations,
                    "finalizers": finalizers,
                    "ownerReferences": owners,
                    "resourceVersion": node.resource_version(),
                },
                "spec": {"taints": registered_taints(claim, node)},
            })),
        )
        .await?;
    // Once per Node: a reconcile that writes an already registered Node again (its NodeClaim's
    // status update had failed) does not count it again.
    if first {
        METRICS
            .nodes_created_total
            .with_label_values(&[
                claim
                    .labels()
                    .get(labels::NODEPOOL)
                    .map(String::as_str)
                    .unwrap_or_default(),
                claim
                    .labels()
                    .get(labels::ZONE)
                    .map(String::as_str)
                    .unwrap_or_default(),
            ])
            .inc();
    }
    tracing::info!(controller = "nodeclaim.lifecycle", nodeclaim = %claim.name_any(), node = %node.name_any(), "registered nodeclaim");
    Ok(())
}

/// Whether the Node is initialized (Ready, startup taints gone, requested extended resources
/// registered), and if not, why.
pub fn initialization(claim: &NodeClaim, node: &Node) -> (bool, String) {
    if !snapshot::is_node_ready(node) {
        return (false, "Node not ready".into());
    }
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    if let Some(t) = taints.into_iter().flatten().find(|t| {
        claim
            .spec
            .startup_taints
            .iter()
            .any(|s| s.key == t.key && s.effect.as_str() == t.effect)
            || taints::is_ephemeral(&t.key, &t.effect)
    }) {
        return (false, format!("StartupTaint {:?} still exists", t.key));
    }
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let requested = claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref());
    for (resource, _) in requested.into_iter().flatten() {
        if resource.contains('/')
            && allocatable
                .and_then(|a| a.get(resource))
                .is_none_or(|q| q.0 == "0")
        {
            return (
                false,
                format!("Resource {resource:?} was requested but not registered"),
            );
        }
    }
    (true, String::new())
}

async fn mark_initialized(node: &Node, ctx: &Context) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {labels::INITIALIZED: "true"}}})),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {
                "name": "default-abcde",
                "labels": {
                    "karpenter.sh/nodepool": "default",
                    "team": "payments",
                    "node.kubernetes.io/instance-type": "m5.xlarge",
                },
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
            },
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
        }))
        .expect("claim")
    }

    fn node() -> Node {
        serde_json::from_value(json!({
            "metadata": {
                "name": "ip-10-0-0-1.ec2.internal",
                "labels": {
                    "team": "whatever-the-kubelet-said",
                    "kubernetes.io/hostname": "ip-10-0-0-1.ec2.internal",
                    "node.kubernetes.io/instance-type": "m5.xlarge",
                },
                "annotations": {"karpenter.sh/do-not-disrupt": "false", "node.alpha.kubernetes.io/ttl": "0"},
            },
        }))
        .expect("node")
    }

    #[test]
    fn the_nodeclaims_labels_and_annotations_win_over_the_nodes() {
        let (l, a) = registered_metadata(&claim(), &node());
        assert_eq!(l["team"], "payments", "the NodeClaim's label wins");
        assert_eq!(l["karpenter.sh/nodepool"], "default");
        assert_eq!(l["kubernetes.io/hostname"], "ip-10-0-0-1.ec2.internal");
        assert_eq!(l[labels::REGISTERED], "true");
        assert_eq!(a["karpenter.sh/do-not-disrupt"], "true");
        assert_eq!(
            a["node.alpha.kubernetes.io/ttl"], "0",
            "the Node's own stay"
        );
    }

    #[test]
    fn initialization_waits_for_node_readiness_controller_taints() {
        let mut node = node();
        node.status = Some(
            serde_json::from_value(json!({
                "conditions": [{"type": "Ready", "status": "True"}],
            }))
            .expect("status"),
        );
        let with_taints = |taints: serde_json::Value| -> Node {
            let mut n = node.clone();
            n.spec = Some(serde_json::from_value(json!({"taints": taints})).expect("spec"));
            n
        };
        let (initialized, why) = initialization(
            &claim(),
            &with_taints(
                json!([{"key": "readiness.k8s.io/network-ready", "value": "pending", "effect": "NoSchedule"}]),
            ),
        );
        assert!(!initialized);
        assert_eq!(
            why,
            r#"StartupTaint "readiness.k8s.io/network-ready" still exists"#
        );
        let (initialized, why) = initialization(
            &claim(),
            &with_taints(json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}])),
        );
        assert!(initialized, "{why}");
    }
}
