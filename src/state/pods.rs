//! The pod cache. kube-rs' reflector store keys every object by an `ObjectRef` (the object's
//! name, namespace, UID and resourceVersion, copied again) and stores a clone of each object it
//! is handed while the original goes on down the watch stream. Pods are the one kind there are
//! tens of thousands of: at 20,000 pods the keys, the table of them and the clones took ~9 of
//! the ~18 MB the pod cache held (benches/README.md, session 41's heap profile). This store
//! keeps the very pod the watch delivered, indexed by its own namespace and name, and hands the
//! stream the same `Arc` on.

use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, PoisonError, RwLock};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use kube::runtime::watcher::Event;
use tokio::sync::watch;

use crate::snapshot::ClusterPod;

/// A pod's identity in the cache, as the API server's: namespace and name.
fn key(pod: &ClusterPod) -> (&str, &str) {
    (
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// Pods by namespace and name, with no copy of either.
#[derive(Default)]
struct Table(HashTable<Arc<ClusterPod>>);

impl Table {
    /// Adds `pod`, or replaces the pod of the same namespace and name.
    fn upsert(&mut self, hasher: &RandomState, pod: Arc<ClusterPod>) {
        let hash = hasher.hash_one(key(&pod));
        match self
            .0
            .entry(hash, |p| key(p) == key(&pod), |p| hasher.hash_one(key(p)))
        {
            Entry::Occupied(mut held) => *held.get_mut() = pod,
            Entry::Vacant(free) => {
                free.insert(pod);
            }
        }
    }

    /// Drops the pod of `pod`'s namespace and name, if held.
    fn remove(&mut self, hasher: &RandomState, pod: &ClusterPod) {
        let hash = hasher.hash_one(key(pod));
        if let Ok(held) = self.0.find_entry(hash, |p| key(p) == key(pod)) {
            held.remove();
        }
    }
}

/// What the reading and the writing side share.
struct Shared {
    hasher: RandomState,
    table: RwLock<Table>,
}

/// The reading side of the pod cache, cheap to clone: what the controllers, the snapshots and
/// the metrics read.
#[derive(Clone)]
pub struct PodStore {
    shared: Arc<Shared>,
    /// `true` once the first complete list is in.
    ready: watch::Receiver<bool>,
}

impl PodStore {
    /// Every cached pod, shared with the cache (not copied), in no particular order.
    pub fn state(&self) -> Vec<Arc<ClusterPod>> {
        let table = self
            .shared
            .table
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        table.0.iter().cloned().collect()
    }

    /// Waits until the cache holds a complete list of the cluster's pods.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.clone();
        // An error means the writer is gone, which only happens when the controller stops:
        // nothing will make the cache ready then, and the waiter must not hang on it.
        let _ = ready.wait_for(|ready| *ready).await;
    }
}

/// The writing side of the pod cache, driven by the pod watch (or, in tests, by a fake API).
pub struct PodWriter {
    shared: Arc<Shared>,
    ready: watch::Sender<bool>,
    /// The pods of a list in progress (after [`Event::Init`]), which replace the cache's at
    /// [`Event::InitDone`]; the cache serves the previous list until then.
    listing: Option<Table>,
}

impl Default for PodWriter {
    fn default() -> Self {
        Self {
            shared: Arc::new(Shared {
                hasher: RandomState::new(),
                table: RwLock::new(Table::default()),
            }),
            ready: watch::Sender::new(false),
            listing: None,
        }
    }
}

impl PodWriter {
    /// A reading side of this cache.
    pub fn reader(&self) -> PodStore {
        PodStore {
            shared: Arc::clone(&self.shared),
            ready: self.ready.subscribe(),
        }
    }

    /// Applies one watch event, the pod moved into the cache, and hands the event on with the
    /// cached pod.
    pub fn apply(&mut self, event: Event<ClusterPod>) -> Event<Arc<ClusterPod>> {
        let hasher = &self.shared.hasher;
        match event {
            Event::Apply(pod) => {
                let pod = Arc::new(pod);
                self.write().upsert(hasher, Arc::clone(&pod));
                Event::Apply(pod)
            }
            Event::Delete(pod) => {
                self.write().remove(hasher, &pod);
                Event::Delete(Arc::new(pod))
            }
            Event::Init => {
                self.listing = Some(Table::default());
                Event::Init
            }
            Event::InitApply(pod) => {
                let pod = Arc::new(pod);
                self.listing
                    .get_or_insert_with(Table::default)
                    .upsert(hasher, Arc::clone(&pod));
                Event::InitApply(pod)
            }
            Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                *self.write() = listed;
                self.ready.send_replace(true);
                Event::InitDone
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.shared
            .table
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;

    use super::*;

    fn pod(namespace: &str, name: &str, node: Option<&str>) -> ClusterPod {
        let mut pod = ClusterPod::from(Pod {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        });
        pod.bound_to = node.map(String::from);
        pod
    }

    fn names(store: &PodStore) -> Vec<String> {
        let mut names: Vec<String> = store.state().iter().map(|p| p.key()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_pod_is_kept_once_per_namespace_and_name_and_replaced_by_its_next_version() {
        let mut writer = PodWriter::default();
        let store = writer.reader();
        writer.apply(Event::Apply(pod("a", "web", None)));
        writer.apply(Event::Apply(pod("b", "web", None)));
        writer.apply(Event::Apply(pod("a", "web", Some("node-1"))));
        assert_eq!(names(&store), ["a/web", "b/web"]);
        let a = store.state().into_iter().find(|p| p.key() == "a/web");
        assert_eq!(
            a.and_then(|p| p.bound_to.clone()).as_deref(),
            Some("node-1")
        );
        writer.apply(Event::Delete(pod("a", "web", Some("node-1"))));
        assert_eq!(names(&store), ["b/web"]);
    }

    #[test]
    fn the_stream_gets_the_very_pod_the_cache_holds() {
        let mut writer = PodWriter::default();
        let store = writer.reader();
        let Event::Apply(handed_on) = writer.apply(Event::Apply(pod("a", "web", None))) else {
            panic!("an applied pod is handed on as applied");
        };
        assert!(Arc::ptr_eq(&handed_on, &store.state()[0]));
    }

    #[tokio::test]
    async fn a_relist_replaces_the_cache_when_it_is_complete_and_makes_it_ready() {
        let mut writer = PodWriter::default();
        let store = writer.reader();
        writer.apply(Event::Init);
        writer.apply(Event::InitApply(pod("a", "old", None)));
        assert!(store.state().is_empty(), "a list in progress is not served");
        assert!(!*store.ready.borrow());
        writer.apply(Event::InitDone);
        store.wait_until_ready().await;
        assert_eq!(names(&store), ["a/old"]);
        // A watch restart lists again: pods deleted meanwhile go with the new list.
        writer.apply(Event::Init);
        writer.apply(Event::InitApply(pod("a", "new", None)));
        assert_eq!(
            names(&store),
            ["a/old"],
            "the previous list is served until the new one is complete"
        );
        writer.apply(Event::InitDone);
        assert_eq!(names(&store), ["a/new"]);
    }
}
