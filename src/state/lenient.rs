//! Watching Karpenter's own kinds (NodePool, NodeClaim, EC2NodeClass, NodeOverlay) when some object of them
//! cannot be read. The API server checks a CRD field only against its schema, so it stores
//! values the controller cannot use — an `expireAfter: 9999999999h` matches the duration
//! pattern but is beyond Go's range, and is rejected where it is read. Listed as a typed kind,
//! one such object would fail the whole list: no NodePool at all, caches that never sync, a
//! controller that never starts. Watched as untyped objects and read one by one, the unreadable
//! object is left out (and reported by its status controller, see [`decode`]) while every other
//! object is cached as usual.

use std::fmt::Debug;

use futures::{Stream, StreamExt};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// Reads an untyped object as `K`; the error names the field that cannot be read (such as
/// `spec.template.spec.expireAfter`) and why, which is what the user has to fix.
pub fn decode<K: DeserializeOwned>(object: &DynamicObject) -> Result<K, String> {
    let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })
}

/// A reflected watch of `K` that leaves out the objects it cannot read: at a (re)list they are
/// skipped, and an update that makes a cached object unreadable removes it from the cache, so
/// nothing acts on a version that is no longer the object's.
fn watch<K>(
    client: Client,
    writer: Writer<K>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let cached = writer.as_reader();
    watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(move |event| {
            let typed = event.map(|e| typed_event(e, &cached));
            async move {
                match typed {
                    Ok(Some(e)) => Some(Ok(e)),
                    Ok(None) => None,
                    Err(e) => Some(Err(e)),
                }
            }
        })
        .modify(super::trim::metadata::<K>)
        .reflect(writer)
}

/// The typed event for an untyped one: an unreadable object is skipped, or, when an older
/// version of it is cached, turned into that version's deletion.
fn typed_event<K>(event: Event<DynamicObject>, cached: &Store<K>) -> Option<Event<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned,
{
    let unreadable = |o: &DynamicObject, why: String| -> Option<K> {
        tracing::warn!(kind = %K::kind(&()), name = %o.name_any(), error = %why, "cannot read this object; leaving it out until it is fixed");
        let mut key = ObjectRef::<K>::new(&o.name_any());
        if let Some(ns) = o.namespace() {
            key = key.within(&ns);
        }
        cached.get(&key).map(|k| (*k).clone())
    };
    match event {
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
        Event::InitApply(o) => match decode(&o) {
            Ok(k) => Some(Event::InitApply(k)),
            Err(why) => {
                unreadable(&o, why);
                None
            }
        },
        Event::Apply(o) => match decode(&o) {
            Ok(k) => Some(Event::Apply(k)),
            Err(why) => unreadable(&o, why).map(Event::Delete),
        },
        Event::Delete(o) => match decode(&o) {
            Ok(k) => Some(Event::Delete(k)),
            Err(why) => unreadable(&o, why).map(Event::Delete),
        },
    }
}

/// A new store of `K` and the reflected, lenient watch that fills it.
pub fn store<K>(
    client: Client,
) -> (
    Store<K>,
    impl Stream<Item = Result<Event<K>, watcher::Error>>,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    (reader, watch(client, writer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::NodePool;
    use serde_json::json;

    fn pool(name: &str, expire_after: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
                "expireAfter": expire_after,
            }}},
        }))
        .expect("an untyped NodePool")
    }

    #[test]
    fn an_unreadable_field_is_named_with_the_fix() {
        assert!(decode::<NodePool>(&pool("ok", "720h")).is_ok());
        let why = decode::<NodePool>(&pool("bad", "9999999999h")).expect_err("beyond Go's range");
        assert!(why.starts_with("spec.template.spec.expireAfter: "), "{why}");
        assert!(why.contains("\"9999999999h\""), "{why}");
        assert!(why.contains("shorten it"), "{why}");
    }

    #[test]
    fn unreadable_objects_are_left_out_and_a_cached_version_is_removed() {
        let (reader, mut writer) = reflector::store::<NodePool>();
        let mut apply = |e: Option<Event<NodePool>>| {
            if let Some(e) = e {
                writer.apply_watcher_event(&e);
            }
        };
        apply(typed_event(Event::Init, &reader));
        apply(typed_event(Event::InitApply(pool("good", "720h")), &reader));
        apply(typed_event(
            Event::InitApply(pool("bad", "9999999999h")),
            &reader,
        ));
        apply(typed_event(Event::InitDone, &reader));
        let names = |r: &Store<NodePool>| {
            let mut n: Vec<String> = r.state().iter().map(|p| p.name_any()).collect();
            n.sort();
            n
        };
        assert_eq!(names(&reader), ["good"]);
        assert!(typed_event(Event::Apply(pool("bad", "9999999999h")), &reader).is_none());
        apply(typed_event(
            Event::Apply(pool("good", "9999999999h")),
            &reader,
        ));
        assert!(
            names(&reader).is_empty(),
            "the readable version is gone too"
        );
        apply(typed_event(Event::Apply(pool("bad", "720h")), &reader));
        assert_eq!(names(&reader), ["bad"], "a fixed object comes back");
    }
}
