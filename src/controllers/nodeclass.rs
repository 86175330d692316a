//! EC2NodeClass status: what its selectors resolve to in the cloud (subnets, security groups,
//! AMIs, instance profile) and whether it is ready to launch with, refreshed every
//! [`crate::cloudprovider::CloudProvider::resolution_period`]; the finalizer that keeps a class
//! while NodeClaims still use it and then deletes what the cloud provider made for it (launch
//! templates, the instance profile for `spec.role`); and the garbage collection
//! ([`collect_garbage`]) of what classes that went without their finalizer left behind.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::apis::conditions::{self, FALSE, READY, TRUE};
use crate::apis::ec2nodeclass::NodeClassCondition;
use crate::apis::hash;
use crate::apis::{EC2NodeClass, NodeClaim, labels};
use crate::cloudprovider::{CloudError, NodeClassesInUse, ResolveError};
use crate::runtime::panics::guarded_pass;
use crate::runtime::untyped;
use crate::runtime::{Context, Error};

/// Runs the EC2NodeClass controller until the stream ends. Classes are watched untyped and read
/// one at a time, so one the controller cannot read is reported while the others are served.
pub async fn run(ctx: Arc<Context>) {
    let claims = ctx.state.nodeclaim_changes.subscribe().map(|claim| {
        untyped::trigger::<EC2NodeClass>("nodeclass", &claim.spec.node_class_ref.name)
    });
    let reconciles = untyped::controller::<EC2NodeClass>("nodeclass", &ctx)
        .reconcile_on(claims)
        .run(
            |c, ctx| {
                crate::metrics::in_controller(
                    "nodeclass",
                    untyped::reconcile(
                        "nodeclass",
                        c,
                        ctx,
                        reconcile,
                        untyped::report::<EC2NodeClass>,
                    ),
                )
            },
            error_policy,
            ctx,
        );
    untyped::drive("nodeclass", reconciles).await;
}

fn error_policy(class: Arc<DynamicObject>, error: &Error, _ctx: Arc<Context>) -> Action {
    crate::runtime::retry_later("nodeclass", &class.name_any(), error)
}

/// One reconcile of an EC2NodeClass: finalizer, hash, status. Public so the in-memory controller
/// tests can drive it.
pub async fn reconcile(class: Arc<EC2NodeClass>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<EC2NodeClass> = Api::all(ctx.client.clone());
    let name = class.name_any();
    let has_finalizer = class
        .finalizers()
        .iter()
        .any(|f| f == labels::AWS_TERMINATION_FINALIZER);
    if class.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        let users: Vec<String> = ctx
            .state
            .nodeclaims
            .state()
            .iter()
            .filter(|c| c.spec.node_class_ref.name == name)
            .map(|c| c.name_any())
            .collect();
        if !users.is_empty() {
            publish(
                &ctx,
                &class,
                EventType::Normal,
                "WaitingOnNodeClaimTermination",
                &format!("Waiting on NodeClaim termination for {}", users.join(", ")),
            )
            .await;
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
        ctx.provider.delete_nodeclass_resources(&class).await?;
        let finalizers: Vec<String> = class
            .finalizers()
            .iter()
            .filter(|f| *f != labels::AWS_TERMINATION_FINALIZER)
            .cloned()
            .collect();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers, "resourceVersion": class.resource_version()}})),
        )
        .await?;
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        let mut finalizers = class.finalizers().to_vec();
        finalizers.push(labels::AWS_TERMINATION_FINALIZER.into());
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "finalizers": finalizers,
                "resourceVersion": class.resource_version(),
            }})),
        )
        .await?;
    }
    let hash = class.static_hash();
    if class.annotations().get(labels::EC2NODECLASS_HASH) != Some(&hash) {
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                labels::EC2NODECLASS_HASH: hash,
                labels::EC2NODECLASS_HASH_VERSION: hash::NODECLASS_HASH_VERSION,
            }}})),
        )
        .await?;
    }
    let now = ctx.clock.now();
    let before = class.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let parts = [
        NodeClassCondition::SubnetsReady,
        NodeClassCondition::SecurityGroupsReady,
        NodeClassCondition::AMIsReady,
        NodeClassCondition::InstanceProfileReady,
        NodeClassCondition::ValidationSucceeded,
    ]
    .map(NodeClassCondition::type_);
    match ctx.provider.resolve(&class).await {
        Ok(resolved) => {
            status.subnets = resolved.subnets;
            status.security_groups = resolved.security_groups;
            status.amis = resolved.amis;
            status.instance_profile = resolved.instance_profile;
            status.capacity_reservations = resolved.capacity_reservations;
            for p in parts {
                conditions::set(&mut status.conditions, p, TRUE, "", "", now);
            }
            // As upstream: with the `ReservedCapacity` gate on, every class reports it (True
            // with no reservations selected, too); with it off, none does.
            let reservations = NodeClassCondition::CapacityReservationsReady.type_();
            if ctx.provider.resolves_capacity_reservations() {
                conditions::set(&mut status.conditions, reservations, TRUE, "", "", now);
            } else {
                status.conditions.retain(|c| c.type_ != reservations);
            }
            // As upstream: reported while the class selects a placement group, removed after.
            let placement = NodeClassCondition::PlacementGroupReady.type_();
            if class.spec.placement_group_selector.is_some() {
                conditions::set(&mut status.conditions, placement, TRUE, "", "", now);
            } else {
                status.conditions.retain(|c| c.type_ != placement);
            }
            conditions::set(&mut status.conditions, READY, TRUE, "", "", now);
        }
        Err(ResolveError {
            error: CloudError::Transient(msg),
            ..
        }) => return Err(CloudError::Transient(msg).into()),
        Err(e) => {
            let part = e.condition.type_();
            let msg = e.error.to_string();
            conditions::set(&mut status.conditions, part, FALSE, e.reason, &msg, now);
            let changed = conditions::set(
                &mut status.conditions,
                READY,
                FALSE,
                "UnhealthyDependents",
                &format!("{part}=False: {msg}"),
                now,
            );
            if changed {
                publish(&ctx, &class, EventType::Warning, e.reason, &msg).await;
                tracing::warn!(controller = "nodeclass", ec2nodeclass = %name, error = %msg, "ec2nodeclass not ready");
            }
        }
    }
    if status != before {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
    }
    Ok(Action::requeue(ctx.provider.resolution_period()))
}

/// How often [`collect_garbage`] looks for what gone node classes left (upstream's
/// instance-profile garbage collection runs every 30 minutes).
pub const GARBAGE_INTERVAL: Duration = Duration::from_secs(30 * 60);

/// Runs the garbage collection of gone node classes' cloud resources until the process ends.
pub async fn collect_garbage(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    loop {
        tokio::time::sleep(GARBAGE_INTERVAL).await;
        match guarded_pass("nodeclass.garbagecollection", &ctx, garbage_pass(&ctx)).await {
            Some(Err(e)) => {
                tracing::warn!(controller = "nodeclass.garbagecollection", error = %e, "could not collect node class resources");
            }
            Some(Ok(deleted)) => {
                for what in deleted {
                    tracing::info!(controller = "nodeclass.garbagecollection", deleted = %what, "deleted a resource no EC2NodeClass uses");
                }
            }
            None => {}
        }
    }
}

/// One garbage collection: what is in use is read from the API server, untyped, so that a
/// class the cache lags behind or cannot read keeps what it owns; then the cloud provider
/// deletes the rest. Public so the in-memory tests can run one.
pub async fn garbage_pass(ctx: &Context) -> Result<Vec<String>, Error> {
    let list = |resource| {
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
        async move { api.list(&ListParams::default()).await }
    };
    let classes = list(untyped::resource::<EC2NodeClass>()).await?.items;
    let claims = list(untyped::resource::<NodeClaim>()).await?.items;
    let in_use = in_use(&classes, &claims);
    Ok(ctx.provider.collect_nodeclass_resources(&in_use).await?)
}

/// What the listed classes and NodeClaims still use: every class, each class a NodeClaim names,
/// the instance profiles classes name or resolved and those NodeClaims were launched with.
pub fn in_use(classes: &[DynamicObject], claims: &[DynamicObject]) -> NodeClassesInUse {
    let text = |o: &DynamicObject, path: &[&str]| -> Option<String> {
        let mut v = &o.data;
        for key in path {
            v = v.get(key)?;
        }
        v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
    };
    NodeClassesInUse {
        nodeclasses: classes
            .iter()
            .map(|c| c.name_any())
            .chain(
                claims
                    .iter()
                    .filter_map(|c| text(c, &["spec", "nodeClassRef", "name"])),
            )
            .collect(),
        instance_profiles: classes
            .iter()
            .flat_map(|c| {
                [
                    text(c, &["spec", "instanceProfile"]),
                    text(c, &["status", "instanceProfile"]),
                ]
            })
            .chain(claims.iter().map(|c| {
                c.annotations()
                    .get(labels::INSTANCE_PROFILE_NAME)
                    .filter(|p| !p.is_empty())
                    .cloned()
            }))
            .flatten()
            .collect(),
    }
}

async fn publish(ctx: &Context, class: &EC2NodeClass, type_: EventType, reason: &str, note: &str) {
    let e = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: reason.into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&e, &class.object_ref(&())).await {
        tracing::debug!(error = %err, "could not record event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).expect("object")
    }

    #[test]
    fn classes_claims_and_named_profiles_are_in_use() {
        let classes = [
            object(json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                "metadata": {"name": "default"},
                "spec": {"role": "KarpenterNodeRole"},
                "status": {"instanceProfile": "demo_123"},
            })),
            object(json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                "metadata": {"name": "own-profile"},
                "spec": {"instanceProfile": "my-profile"},
            })),
        ];
        let claims = [object(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "old-abcde", "annotations": {labels::INSTANCE_PROFILE_NAME: "demo_456"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "deleted-class"}},
        }))];
        let used = in_use(&classes, &claims);
        assert_eq!(
            used.nodeclasses
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            ["default", "deleted-class", "own-profile"]
        );
        assert_eq!(
            used.instance_profiles
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            ["demo_123", "demo_456", "my-profile"]
        );
    }
}
