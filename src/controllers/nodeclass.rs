//! EC2NodeClass status: what its selectors resolve to in the cloud (subnets, security groups,
//! AMIs, instance profile) and whether it is ready to launch with, refreshed every five
//! minutes; and the finalizer that keeps a class while NodeClaims still use it.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::apis::conditions::{self, FALSE, READY, TRUE};
use crate::apis::ec2nodeclass::NodeClassCondition;
use crate::apis::hash;
use crate::apis::{EC2NodeClass, NodeClaim, labels};
use crate::cloudprovider::{CloudError, ResolveError};
use crate::runtime::untyped;
use crate::runtime::{Context, Error};

/// Runs the EC2NodeClass controller until the stream ends. Classes are watched untyped and read
/// one at a time, so one the controller cannot read is reported while the others are served.
pub async fn run(ctx: Arc<Context>) {
    untyped::controller::<EC2NodeClass>(&ctx)
        .watches(
            Api::<NodeClaim>::all(ctx.client.clone()),
            watcher::Config::default(),
            |claim: NodeClaim| {
                Some(untyped::object_ref::<EC2NodeClass>(
                    &claim.spec.node_class_ref.name,
                ))
            },
        )
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
        )
        .for_each(|_| async {})
        .await;
}

fn error_policy(class: Arc<DynamicObject>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(controller = "nodeclass", ec2nodeclass = %class.name_any(), error = %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(class: Arc<EC2NodeClass>, ctx: Arc<Context>) -> Result<Action, Error> {
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
            // Reported only for classes that select reservations (or once did and failed).
            let reservations = NodeClassCondition::CapacityReservationsReady.type_();
            if !class.spec.capacity_reservation_selector_terms.is_empty()
                || conditions::find(&status.conditions, reservations).is_some()
            {
                conditions::set(&mut status.conditions, reservations, TRUE, "", "", now);
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
    Ok(Action::requeue(Duration::from_secs(300)))
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
