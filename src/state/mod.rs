//! The controller's view of the cluster: one reflector (watch + in-memory store) per kind the
//! core reads, and [`ClusterState::snapshot`], which hands the pure core the same [`Snapshot`]
//! that `simulate` builds from manifests — one model, one code path.
//!
//! Objects are stored trimmed to the fields the controllers read (see [`trim`]), which keeps
//! memory proportional to what the scheduler needs, and a snapshot shares them (`Arc`s) rather
//! than copying them, so taking one is cheap and several may be alive at once.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector::store::Writer};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::apis::conditions::{self, Condition};
use crate::apis::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use crate::snapshot::{ClusterPod, Snapshot};
use changes::{Changes, Publisher};
use pods::{PodStore, PodWriter};

pub mod changes;
pub mod lenient;
pub mod nominations;
pub mod pods;
pub mod registration_health;
pub mod trim;

/// Reflected stores of every kind the core reads.
#[derive(Clone)]
pub struct ClusterState {
    /// Nodes.
    pub nodes: Store<Node>,
    /// Pods in all namespaces, in the form the core reads (see [`ClusterPod`]), in a store of
    /// their own ([`pods`]).
    pub pods: PodStore,
    /// NodeClaims.
    pub nodeclaims: Store<NodeClaim>,
    /// NodePools.
    pub nodepools: Store<NodePool>,
    /// EC2NodeClasses.
    pub nodeclasses: Store<EC2NodeClass>,
    /// DaemonSets (their pods' overhead goes on every new node).
    pub daemonsets: Store<DaemonSet>,
    /// PodDisruptionBudgets, as served (`policy/v1`, or `policy/v1beta1` on older clusters).
    pub pdbs: Store<DynamicObject>,
    /// PersistentVolumes.
    pub pvs: Store<PersistentVolume>,
    /// PersistentVolumeClaims.
    pub pvcs: Store<PersistentVolumeClaim>,
    /// StorageClasses.
    pub storage_classes: Store<StorageClass>,
    /// CSINodes.
    pub csi_nodes: Store<CSINode>,
    /// NodeOverlays, watched only with the `NodeOverlay` gate on ([`ClusterState::watch_node_overlays`]):
    /// a cluster without the gate need not have the CRD, and a watch of a kind the API server
    /// does not serve would keep the caches from ever syncing.
    pub node_overlays: Option<Store<NodeOverlay>>,
    /// Woken when a pod becomes unschedulable or a NodePool changes, so the provisioner can
    /// start a batch.
    pub changed: Arc<Notify>,
    /// Nodes as [`Self::nodes`] takes them in (the NodeClaim lifecycle follows its Nodes).
    pub node_changes: Changes<Node>,
    /// NodeClaims as [`Self::nodeclaims`] takes them in (NodePool and EC2NodeClass status
    /// count them).
    pub nodeclaim_changes: Changes<NodeClaim>,
    /// EC2NodeClasses as [`Self::nodeclasses`] takes them in (a NodePool's readiness follows
    /// its class).
    pub nodeclass_changes: Changes<EC2NodeClass>,
}

/// Wakes the provisioner for events whose object passes the filter.
type Trigger<K> = Option<(Arc<Notify>, Box<dyn FnMut(&K) -> bool + Send>)>;

/// A filter for [`Trigger`] that passes an object when it is new, its spec changed (its
/// `metadata.generation` moved) or its `Ready` condition changed: that is when NodePools,
/// EC2NodeClasses and NodeOverlays change what can be provisioned. The rest of their status,
/// which the controller itself keeps writing as NodeClaims come and go, does not, and must not
/// keep opening provisioning rounds.
fn usability_changed<K: Resource + 'static>(
    conditions: fn(&K) -> &[Condition],
) -> Box<dyn FnMut(&K) -> bool + Send> {
    let mut seen: HashMap<String, (Option<i64>, bool)> = HashMap::new();
    Box::new(move |object: &K| {
        let meta = object.meta();
        let uid = meta.uid.clone().unwrap_or_default();
        let now = (
            meta.generation,
            conditions::is_true(conditions(object), conditions::READY),
        );
        seen.insert(uid, now) != Some(now)
    })
}

/// Starts a reflector for `api` into a new store, objects trimmed by `trim` as they arrive; its
/// stream is driven on `tasks`.
fn reflect<K>(
    api: Api<K>,
    tasks: &mut JoinSet<()>,
    changed: Trigger<K>,
    publish: Option<Changes<K>>,
    trim: impl FnMut(&mut K) + Send + 'static,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let kind = K::kind(&Default::default()).into_owned();
    let stream = watcher(api, writer, trim);
    tasks.spawn(async move { consume(&kind, stream, changed, publish).await });
    reader
}

/// Like [`reflect`], for Karpenter's own kinds, whose objects may hold values the API server
/// accepts and the controller cannot read (see [`lenient`]).
fn reflect_lenient<K>(
    client: &Client,
    tasks: &mut JoinSet<()>,
    changed: Trigger<K>,
    publish: Option<Changes<K>>,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, stream) = lenient::store::<K>(client.clone());
    let kind = K::kind(&()).into_owned();
    tasks.spawn(async move { consume(&kind, stream, changed, publish).await });
    reader
}

/// Like [`reflect`], for pods: trimmed, converted and their specs shared as they arrive
/// ([`trim::SharedSpecs`]), into the pod cache ([`pods`]).
fn reflect_pods(
    api: Api<ClusterPod>,
    tasks: &mut JoinSet<()>,
    changed: Trigger<Arc<ClusterPod>>,
) -> PodStore {
    let mut writer = PodWriter::default();
    let reader = writer.reader();
    let mut specs = trim::SharedSpecs::default();
    let stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(move |p| specs.trim(p))
        .map_ok(move |event| writer.apply(event));
    tasks.spawn(async move { consume("Pod", stream, changed, None).await });
    reader
}

fn watcher<K>(
    api: Api<K>,
    writer: Writer<K>,
    trim: impl FnMut(&mut K) + Send + 'static,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(trim)
        .reflect(writer)
}

/// Follows a reflected watch (each event is in the store by the time it comes out): wakes the
/// provisioner for the events `changed` wants and hands every change to `publish`'s subscribers.
async fn consume<K: Send + Sync + 'static>(
    kind: &str,
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>>,
    mut changed: Trigger<K>,
    publish: Option<Changes<K>>,
) {
    let mut stream = std::pin::pin!(stream);
    let mut publisher = publish.map(Publisher::new);
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                if let Event::Apply(o) | Event::InitApply(o) | Event::Delete(o) = &event
                    && let Some((n, wanted)) = &mut changed
                    && wanted(o)
                {
                    n.notify_one();
                }
                if let Some(p) = &mut publisher {
                    p.observe(event);
                }
            }
            Err(e) => tracing::warn!(kind, error = %e, "watch error; retrying with backoff"),
        }
    }
}

/// Which PodDisruptionBudget API the cluster serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PdbApi {
    /// `policy/v1`, served since Kubernetes 1.21 (and the only one since 1.25).
    V1,
    /// `policy/v1beta1`, on clusters older than 1.21.
    V1beta1,
}

impl PdbApi {
    fn resource(self) -> ApiResource {
        let version = match self {
            Self::V1 => "v1",
            Self::V1beta1 => "v1beta1",
        };
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("policy", version, "PodDisruptionBudget"),
            "poddisruptionbudgets",
        )
    }
}

/// Decides from the discovery of `policy/v1` which PodDisruptionBudget API to watch: `v1` when
/// it lists PodDisruptionBudgets, `v1beta1` only when the server says `policy/v1` is not there
/// (404, or served without PodDisruptionBudgets). Any other failure (a timeout, a 5xx, a 403)
/// proves nothing: falling back on it would, on a 1.25+ cluster that has no `v1beta1`, leave
/// the PodDisruptionBudget cache unsynced forever, so the caller asks again (`Err` says why).
pub fn pdb_api(discovery: Result<&APIResourceList, &kube::Error>) -> Result<PdbApi, String> {
    match discovery {
        Ok(list)
            if list
                .resources
                .iter()
                .any(|r| r.kind == "PodDisruptionBudget") =>
        {
            Ok(PdbApi::V1)
        }
        Ok(_) => Ok(PdbApi::V1beta1),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(PdbApi::V1beta1),
        Err(e) => Err(e.to_string()),
    }
}

/// The PodDisruptionBudget API the server serves, asking until discovery gives an answer that
/// decides it (see [`pdb_api`]).
async fn pdb_resource(client: &Client) -> ApiResource {
    let mut delay = Duration::from_secs(1);
    loop {
        match pdb_api(client.list_api_group_resources("policy/v1").await.as_ref()) {
            Ok(PdbApi::V1) => return PdbApi::V1.resource(),
            Ok(PdbApi::V1beta1) => {
                tracing::info!(
                    "policy/v1 is not served; reading PodDisruptionBudgets from policy/v1beta1"
                );
                return PdbApi::V1beta1.resource();
            }
            Err(why) => {
                tracing::warn!(error = %why, retry_in = ?delay, "could not discover whether policy/v1 (PodDisruptionBudgets) is served; asking again");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// How often [`ClusterState::wait_synced`] names the caches it is still waiting for.
const SYNC_REPORT_PERIOD: Duration = Duration::from_secs(10);

impl ClusterState {
    /// Starts watching every kind; the returned tasks run until dropped.
    pub async fn start(client: &Client) -> (Self, JoinSet<()>) {
        let mut tasks = JoinSet::new();
        let changed = Arc::new(Notify::new());
        // Batches start on what can make pods need capacity: a pod becoming unschedulable, a
        // NodePool appearing or changing. Binding and status churn must not keep extending a
        // batch to its maximum.
        let pods: Trigger<Arc<ClusterPod>> = Some((
            changed.clone(),
            Box::new(|p: &Arc<ClusterPod>| is_provisionable(p)),
        ));
        let pools: Trigger<NodePool> = Some((
            changed.clone(),
            usability_changed(|p: &NodePool| {
                p.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
            }),
        ));
        let classes: Trigger<EC2NodeClass> = Some((
            changed.clone(),
            usability_changed(|c: &EC2NodeClass| {
                c.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
            }),
        ));
        let pdb_ar = pdb_resource(client).await;
        let pdb_writer = Writer::new(pdb_ar.clone());
        let pdbs = pdb_writer.as_reader();
        let pdb_api: Api<DynamicObject> = Api::all_with(client.clone(), &pdb_ar);
        tasks.spawn(async move {
            let stream = watcher::watcher(pdb_api, watcher::Config::default())
                .default_backoff()
                .modify(trim::metadata::<DynamicObject>)
                .reflect(pdb_writer);
            consume("PodDisruptionBudget", stream, None, None).await;
        });
        let node_changes = Changes::default();
        let nodeclaim_changes = Changes::default();
        let nodeclass_changes = Changes::default();
        let state = Self {
            nodes: reflect(
                Api::all(client.clone()),
                &mut tasks,
                None,
                Some(node_changes.clone()),
                trim::node,
            ),
            pods: reflect_pods(Api::all(client.clone()), &mut tasks, pods),
            nodeclaims: reflect_lenient(client, &mut tasks, None, Some(nodeclaim_changes.clone())),
            nodepools: reflect_lenient(client, &mut tasks, pools, None),
            nodeclasses: reflect_lenient(
                client,
                &mut tasks,
                classes,
                Some(nodeclass_changes.clone()),
            ),
            daemonsets: reflect(
                Api::all(client.clone()),
                &mut tasks,
                None,
                None,
                trim::metadata,
            ),
            pdbs,
            pvs: reflect(
                Api::all(client.clone()),
                &mut tasks,
                None,
                None,
                trim::metadata,
            ),
            pvcs: reflect(
                Api::all(client.clone()),
                &mut tasks,
                None,
                None,
                trim::metadata,
            ),
            storage_classes: reflect(
                Api::all(client.clone()),
                &mut tasks,
                None,
                None,
                trim::metadata,
            ),
            csi_nodes: reflect(
                Api::all(client.clone()),
                &mut tasks,
                None,
                None,
                trim::metadata,
            ),
            node_overlays: None,
            changed,
            node_changes,
            nodeclaim_changes,
            nodeclass_changes,
        };
        (state, tasks)
    }

    /// Starts watching NodeOverlays (the `NodeOverlay` gate is on), leniently like Karpenter's
    /// other kinds; a change wakes the provisioner, since it changes prices and capacity.
    pub fn watch_node_overlays(&mut self, client: &Client, tasks: &mut JoinSet<()>) {
        let changed: Trigger<NodeOverlay> = Some((
            self.changed.clone(),
            usability_changed(|o: &NodeOverlay| {
                o.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
            }),
        ));
        self.node_overlays = Some(reflect_lenient(client, tasks, changed, None));
    }

    /// Waits until every store holds a complete list: deciding on a partial view could launch
    /// capacity that exists already. While it waits it names, every ten seconds, the kinds not
    /// yet listed (a missing RBAC permission or CRD shows up here and in the watch errors).
    pub async fn wait_synced(&self) {
        fn ready<'a, K>(
            kind: &'static str,
            store: &'a Store<K>,
        ) -> (&'static str, futures::future::BoxFuture<'a, &'static str>)
        where
            K: Resource + Clone + Send + Sync + 'static,
            K::DynamicType: Eq + Hash + Clone + Send + Sync,
        {
            (kind, store.wait_until_ready().map(move |_| kind).boxed())
        }
        let mut stores = vec![
            ready("Node", &self.nodes),
            ("Pod", self.pods.wait_until_ready().map(|_| "Pod").boxed()),
            ready("NodeClaim", &self.nodeclaims),
            ready("NodePool", &self.nodepools),
            ready("EC2NodeClass", &self.nodeclasses),
            ready("DaemonSet", &self.daemonsets),
            ready("PodDisruptionBudget", &self.pdbs),
            ready("PersistentVolume", &self.pvs),
            ready("PersistentVolumeClaim", &self.pvcs),
            ready("StorageClass", &self.storage_classes),
            ready("CSINode", &self.csi_nodes),
        ];
        if let Some(overlays) = &self.node_overlays {
            stores.push(ready("NodeOverlay", overlays));
        }
        let mut waiting: Vec<&str> = stores.iter().map(|(kind, _)| *kind).collect();
        let mut pending: FuturesUnordered<_> = stores.into_iter().map(|(_, f)| f).collect();
        let start = tokio::time::Instant::now();
        let mut report = tokio::time::interval_at(start + SYNC_REPORT_PERIOD, SYNC_REPORT_PERIOD);
        loop {
            tokio::select! {
                done = pending.next() => match done {
                    Some(kind) => waiting.retain(|k| *k != kind),
                    None => return,
                },
                _ = report.tick() => tracing::warn!(
                    waiting_for = ?waiting,
                    after = ?start.elapsed(),
                    "caches not synced yet; the controllers start once they are (check the watch errors above: RBAC, CRDs installed, API server reachable)"
                ),
            }
        }
    }

    /// The cluster as the pure core sees it, in a stable order (by namespace and name) so the
    /// same cluster always gives the same decisions.
    pub fn snapshot(&self) -> Snapshot {
        let (pods, awaiting_scheduler) = split_awaiting_scheduler(by_name(self.pods.state()));
        Snapshot {
            nodepools: sorted(&self.nodepools),
            nodeclasses: sorted(&self.nodeclasses),
            nodeclaims: sorted(&self.nodeclaims),
            nodes: sorted(&self.nodes),
            pods,
            daemonsets: sorted(&self.daemonsets),
            pdbs: self
                .pdbs
                .state()
                .iter()
                .filter_map(|o| pdb_from_dynamic(o))
                .map(Arc::new)
                .collect(),
            persistent_volumes: sorted(&self.pvs),
            persistent_volume_claims: sorted(&self.pvcs),
            storage_classes: sorted(&self.storage_classes),
            csi_nodes: sorted(&self.csi_nodes),
            node_overlays: self.node_overlays.as_ref().map(sorted).unwrap_or_default(),
            ignored: Vec::new(),
            nominated: HashMap::new(),
            awaiting_scheduler,
        }
    }
}

/// Splits off the pods kube-scheduler has not judged yet that would otherwise wait for capacity
/// (see [`Snapshot::awaiting_scheduler`]); such pods that never will (finished, being deleted,
/// DaemonSet pods) are dropped, as the snapshot has no use for them.
fn split_awaiting_scheduler(
    pods: Vec<Arc<ClusterPod>>,
) -> (Vec<Arc<ClusterPod>>, Vec<Arc<ClusterPod>>) {
    let mut judged = Vec::with_capacity(pods.len());
    let mut awaiting = Vec::new();
    for pod in pods {
        if !awaiting_scheduler(&pod) {
            judged.push(pod);
        } else if pod.is_pending() {
            awaiting.push(pod);
        }
    }
    (judged, awaiting)
}

/// The objects of `store`, shared with it (not copied), in (namespace, name) order.
fn sorted<K: Resource + Clone>(store: &Store<K>) -> Vec<Arc<K>>
where
    K::DynamicType: Eq + Hash + Clone,
{
    by_name(store.state())
}

/// `items` in (namespace, name) order.
fn by_name<K: Resource>(mut items: Vec<Arc<K>>) -> Vec<Arc<K>> {
    items.sort_by(|a, b| {
        (a.meta().namespace.as_deref(), a.meta().name.as_deref())
            .cmp(&(b.meta().namespace.as_deref(), b.meta().name.as_deref()))
    });
    items
}

/// Reads a served PodDisruptionBudget (v1 or v1beta1) as the v1 type the core uses.
fn pdb_from_dynamic(o: &DynamicObject) -> Option<PodDisruptionBudget> {
    let mut value = serde_json::to_value(o).ok()?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), "policy/v1".into());
    }
    match serde_json::from_value(value) {
        Ok(pdb) => Some(pdb),
        Err(e) => {
            tracing::warn!(pdb = %o.name_any(), error = %e, "unreadable PodDisruptionBudget ignored");
            None
        }
    }
}

/// A pod kube-scheduler has not looked at yet (no node, no `PodScheduled` condition). Offline,
/// `simulate` treats such pods as pending; in a live cluster they are most likely about to be
/// bound to room that exists, so, like upstream, the provisioner waits for the scheduler's
/// verdict (`PodScheduled=False`, reason `Unschedulable`), and the snapshot keeps them apart.
fn awaiting_scheduler(pod: &ClusterPod) -> bool {
    let judged = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled"));
    pod.node_name().is_none() && !judged
}

/// Whether a pod is one the provisioner must find room for: kube-scheduler found no node for it
/// and it is not a DaemonSet pod, finished, or being deleted.
pub fn is_provisionable(pod: &ClusterPod) -> bool {
    !awaiting_scheduler(pod) && pod.is_pending()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
    use kube::core::Status;

    use super::*;

    fn list(kinds: &[&str]) -> APIResourceList {
        APIResourceList {
            group_version: "policy/v1".into(),
            resources: kinds
                .iter()
                .map(|k| APIResource {
                    kind: (*k).into(),
                    name: format!("{}s", k.to_lowercase()),
                    namespaced: true,
                    singular_name: String::new(),
                    verbs: vec!["list".into(), "watch".into()],
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Status::failure("boom", "Reason").with_code(code).boxed())
    }

    #[test]
    fn pdbs_fall_back_to_v1beta1_only_when_v1_is_not_served() {
        assert_eq!(
            pdb_api(Ok(&list(&["PodDisruptionBudget", "Eviction"]))),
            Ok(PdbApi::V1)
        );
        // Served, but without PodDisruptionBudgets; or not there at all (1.20's answer).
        assert_eq!(pdb_api(Ok(&list(&["Eviction"]))), Ok(PdbApi::V1beta1));
        assert_eq!(pdb_api(Err(&api_error(404))), Ok(PdbApi::V1beta1));
        // A blip proves nothing: on 1.25+ a fallback would watch an API that does not exist.
        for code in [403, 429, 500, 503] {
            let decision = pdb_api(Err(&api_error(code)));
            assert!(decision.is_err(), "{code}: {decision:?}");
        }
    }

    #[test]
    fn nodepools_open_a_round_when_new_respecified_or_ready_not_on_other_status_writes() {
        let pool = |uid: &str, generation: i64, ready: &str| {
            serde_json::from_value::<NodePool>(serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": uid, "uid": uid, "generation": generation},
                "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []}}},
                "status": {"nodes": generation, "conditions": [{"type": "Ready", "status": ready, "reason": "R", "message": "", "lastTransitionTime": "2026-11-26T00:00:00Z"}]}
            }))
            .expect("nodepool")
        };
        let mut wanted = usability_changed(|p: &NodePool| {
            p.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
        });
        assert!(wanted(&pool("a", 1, "Unknown")), "a new NodePool");
        assert!(!wanted(&pool("a", 1, "Unknown")), "its status written");
        assert!(wanted(&pool("a", 1, "True")), "it became ready");
        assert!(wanted(&pool("a", 2, "True")), "its spec changed");
        assert!(wanted(&pool("b", 2, "True")), "another NodePool");
        assert!(!wanted(&pool("a", 2, "True")));
    }
}
