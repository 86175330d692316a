//! kube-rs controllers of Karpenter's own kinds (NodePool, NodeClaim, EC2NodeClass) that keep
//! working when one object of the kind cannot be read. A typed controller lists its kind as a
//! whole, so one object the API server accepted but the controller cannot read (a duration the
//! CRD pattern admits beyond Go's range) would stop it for every object. These controllers
//! watch untyped objects and read each one as it is reconciled: a readable object gets the
//! controller's reconcile, an unreadable one its report (see [`crate::state::lenient`]).

use std::future::Future;
use std::sync::Arc;

use futures::{Stream, StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::panics::{guarded_object, object_key};
use super::{Context, Error};
use crate::metrics::workqueue::WORKQUEUES;
use crate::state::lenient::decode;

/// The API resource of `K`, which the untyped controller and its object references carry.
pub fn resource<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// The controller `name` of every object of `K`, watched untyped. Each watch event of an object
/// is added to the controller's work queue ([`crate::metrics::workqueue`]), which starts empty.
pub fn controller<K: Resource<DynamicType = ()>>(
    name: &'static str,
    ctx: &Context,
) -> Controller<DynamicObject> {
    let resource = resource::<K>();
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
    // What `Controller::new_with` builds, with the queue's adds seen on the way.
    let writer = reflector::store::Writer::new(resource.clone());
    let reader = writer.as_reader();
    WORKQUEUES.restart(name);
    let kind = K::kind(&()).to_string();
    let objects = reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
        .applied_objects()
        .inspect_ok(move |object| WORKQUEUES.add(name, &object_key(&kind, object)));
    Controller::for_stream_with(objects, reader, resource)
}

/// The reference a watch mapper of `controller` returns to have it reconcile the
/// cluster-scoped object `name` of `K`, added to its work queue.
pub fn trigger<K: Resource<DynamicType = ()>>(
    controller: &'static str,
    name: &str,
) -> ObjectRef<DynamicObject> {
    WORKQUEUES.add(controller, &format!("{}/{name}", K::kind(&())));
    ObjectRef::new_with(name, resource::<K>())
}

/// Drives `controller`'s reconciles to the end. A trigger for an object that is gone by the
/// time its turn comes leaves the work queue unreconciled.
pub async fn drive(
    controller: &'static str,
    results: impl Stream<
        Item = Result<(ObjectRef<DynamicObject>, Action), controller::Error<Error, watcher::Error>>,
    >,
) {
    results
        .for_each(|result| {
            if let Err(controller::Error::ObjectNotFound(gone)) = result {
                let key = match &gone.namespace {
                    Some(ns) => format!("{}/{ns}/{}", gone.dyntype.kind, gone.name),
                    None => format!("{}/{}", gone.dyntype.kind, gone.name),
                };
                WORKQUEUES.gone(controller, &key);
            }
            std::future::ready(())
        })
        .await;
}

/// One reconcile of `object` as a `K`, with a panic caught ([`guarded_object`]): `reconcile`
/// when it can be read, otherwise `unreadable` with the field and the reason, which should
/// report them where the user looks (a condition, an event).
pub async fn reconcile<K, F, Fut, U, UFut>(
    controller: &'static str,
    object: Arc<DynamicObject>,
    ctx: Arc<Context>,
    reconcile: F,
    unreadable: U,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>>,
    U: FnOnce(Arc<DynamicObject>, String, Arc<Context>) -> UFut,
    UFut: Future<Output = Result<Action, Error>>,
{
    let key = object_key(&K::kind(&()), object.as_ref());
    match decode::<K>(&object) {
        Ok(typed) => {
            guarded_object(
                controller,
                &key,
                &ctx,
                reconcile(Arc::new(typed), ctx.clone()),
            )
            .await
        }
        Err(why) => {
            tracing::warn!(controller, object = %key, error = %why, "cannot read this object; reporting it and leaving it alone");
            guarded_object(
                controller,
                &key,
                &ctx,
                unreadable(object.clone(), why, ctx.clone()),
            )
            .await
        }
    }
}

/// The report of an object of `K` that cannot be read, for kinds without a validation
/// condition: a `FailedValidation` warning event naming the field and the fix (the recorder
/// folds repeats into one series). The object is left alone until it changes.
pub async fn report<K: Resource<DynamicType = ()>>(
    object: Arc<DynamicObject>,
    why: String,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let event = Event {
        type_: EventType::Warning,
        reason: "FailedValidation".into(),
        note: Some(
            format!(
                "{} {} cannot be read: {why}",
                K::kind(&()),
                object.name_any()
            )
            .chars()
            .take(1000)
            .collect(),
        ),
        action: "Validate".into(),
        secondary: None,
    };
    if let Err(e) = ctx
        .recorder
        .publish(&event, &object.object_ref(&resource::<K>()))
        .await
    {
        tracing::debug!(error = %e, "could not record event");
    }
    Ok(Action::await_change())
}
