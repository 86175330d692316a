//! An in-memory Kubernetes API server, as a tower `Service` a `kube::Client` runs on: the
//! controllers' requests are answered from a map of JSON objects, without a control plane, in
//! microseconds and deterministically.
//!
//! Modelled as far as the shells rely on it: GET, LIST (field selectors `a.b=v`), POST
//! (`generateName`, uid, resourceVersion, creationTimestamp from the fake clock), JSON merge
//! PATCH of the object or its `status` subresource with the optimistic `resourceVersion` check,
//! DELETE with finalizers (a `deletionTimestamp` until the last finalizer goes) and UID
//! preconditions, and the Eviction subresource, which refuses (429) while a PodDisruptionBudget
//! that selects the pod allows no disruption. Pods are deleted at once (there is no kubelet to
//! wait for). Anything else is answered 405 or 415, so a shell that starts relying on more
//! fails its test loudly instead of passing against an approximation.
//!
//! Every write is also applied to the reflector stores of a [`ClusterState`], as an
//! instantaneous watch would, so the reconcilers' caches always show the API server's state.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll};

use chrono::SecondsFormat;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_rs::apis::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use karpenter_rs::clock::{Clock, FakeClock};
use karpenter_rs::snapshot::ClusterPod;
use karpenter_rs::state::ClusterState;
use karpenter_rs::state::pods::PodWriter;
use karpenter_rs::state::trim;
use kube::Resource;
use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Where an object lives: its API (`api/v1`, `apis/<group>/<version>`), resource (plural),
/// namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    api: String,
    resource: String,
    namespace: Option<String>,
    name: String,
}

/// A request path taken apart.
struct Target {
    api: String,
    resource: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl Target {
    /// Parses `/api/v1[/namespaces/<ns>]/<resource>[/<name>[/<subresource>]]` and its
    /// `/apis/<group>/<version>/…` form.
    fn parse(path: &str) -> Option<Self> {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (api, rest) = match parts.as_slice() {
            ["api", version, rest @ ..] => (format!("api/{version}"), rest),
            ["apis", group, version, rest @ ..] => (format!("apis/{group}/{version}"), rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_string()), rest),
            _ => (None, rest),
        };
        let (resource, name, subresource) = match rest {
            [resource] => (resource, None, None),
            [resource, name] => (resource, Some(name), None),
            [resource, name, sub] => (resource, Some(name), Some(sub)),
            _ => return None,
        };
        Some(Self {
            api,
            resource: (*resource).to_string(),
            namespace,
            name: name.map(|n| (*n).to_string()),
            subresource: subresource.map(|s| (*s).to_string()),
        })
    }

    fn key(&self, name: &str) -> Key {
        Key {
            api: self.api.clone(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            name: name.to_string(),
        }
    }
}

/// Applies one object's change to a reflector store.
trait Reflect: Send {
    fn reflect(&mut self, object: &Value, deleted: bool);
}

/// A store's writer, with what the controller's watch does to each object as it arrives
/// (`state::trim`): the reconcilers read objects in the form `run` keeps them, so code that
/// reads a field the cache drops fails here too.
struct Trimmed<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    writer: Writer<K>,
    trim: Box<dyn FnMut(&mut K) + Send>,
}

impl<K> Trimmed<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn by(mut self, trim: impl FnMut(&mut K) + Send + 'static) -> Self {
        self.trim = Box::new(trim);
        self
    }
}

impl<K> Reflect for Trimmed<K>
where
    K: Resource + Clone + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    /// An object that does not read as its kind leaves the store, as the controller's lenient
    /// watch (`state::lenient`) leaves it out.
    fn reflect(&mut self, object: &Value, deleted: bool) {
        let mut typed = match typed::<K>(object) {
            Ok(typed) => typed,
            Err(meta) => {
                let stale =
                    self.writer.as_reader().state().into_iter().find(|k| {
                        k.meta().name == meta.name && k.meta().namespace == meta.namespace
                    });
                if let Some(stale) = stale {
                    self.writer
                        .apply_watcher_event(&Event::Delete((*stale).clone()));
                }
                return;
            }
        };
        (self.trim)(&mut typed);
        self.writer.apply_watcher_event(&if deleted {
            Event::Delete(typed)
        } else {
            Event::Apply(typed)
        });
    }
}

/// An object of the fake API read as its kind, or, when it does not read as one, its metadata:
/// what names the cached object it replaces, which leaves the cache.
fn typed<K: DeserializeOwned>(object: &Value) -> Result<K, Box<ObjectMeta>> {
    serde_json::from_value(object.clone())
        .map_err(|_| serde_json::from_value(object["metadata"].clone()).unwrap_or_default())
}

/// The pod cache's writer, with what the controller's pod watch does to each pod as it arrives
/// (trimmed, spec shared, converted: `state::trim::SharedSpecs`), as [`Trimmed`] for the
/// other kinds.
struct TrimmedPods {
    writer: PodWriter,
    specs: trim::SharedSpecs,
}

impl Reflect for TrimmedPods {
    /// A pod that does not read as one leaves the cache, as with [`Trimmed`].
    fn reflect(&mut self, object: &Value, deleted: bool) {
        let mut pod = match typed::<ClusterPod>(object) {
            Ok(pod) => pod,
            Err(metadata) => {
                self.writer.apply(Event::Delete(ClusterPod {
                    metadata: *metadata,
                    ..ClusterPod::default()
                }));
                return;
            }
        };
        self.specs.trim(&mut pod);
        self.writer.apply(if deleted {
            Event::Delete(pod)
        } else {
            Event::Apply(pod)
        });
    }
}

/// A new store marked synced (listed, empty), and its writer.
fn synced_store<K>(dyntype: K::DynamicType) -> (reflector::Store<K>, Trimmed<K>)
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let mut writer = Writer::new(dyntype);
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitDone);
    let reader = writer.as_reader();
    (
        reader,
        Trimmed {
            writer,
            trim: Box::new(|_| {}),
        },
    )
}

struct Inner {
    objects: BTreeMap<Key, Value>,
    /// The store each watched resource (API, plural) is reflected into.
    stores: HashMap<(String, String), Box<dyn Reflect>>,
    revision: u64,
    uids: u64,
    /// Writes answered so far, by method and resource (`POST events`, `PATCH nodeclaims`), so
    /// tests can hold the controllers to writing only what changed.
    writes: BTreeMap<(String, String), usize>,
    /// Writes to fail once each, as (method, resource, text the request body contains).
    failing: Vec<(String, String, String)>,
    /// LISTs answered so far, by resource, so tests can hold the controllers to reading their
    /// caches.
    lists: BTreeMap<String, usize>,
    /// Resources whose watch is behind: the changes their stores have not been given yet, in
    /// order (see [`FakeApi::stall_watch`]).
    stalled: HashMap<String, Vec<(Key, Value, bool)>>,
}

impl Inner {
    fn reflect(&mut self, key: &Key, object: &Value, deleted: bool) {
        if let Some(held) = self.stalled.get_mut(&key.resource) {
            held.push((key.clone(), object.clone(), deleted));
            return;
        }
        if let Some(store) = self
            .stores
            .get_mut(&(key.api.clone(), key.resource.clone()))
        {
            store.reflect(object, deleted);
        }
    }

    fn next_revision(&mut self) -> String {
        self.revision += 1;
        self.revision.to_string()
    }
}

/// The in-memory API server. Cloning shares the objects.
#[derive(Clone)]
pub struct FakeApi {
    inner: Arc<Mutex<Inner>>,
    clock: Arc<FakeClock>,
}

/// A response body.
type Body = Full<Bytes>;

fn respond(code: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().expect("header"));
    response
}

/// A `Status` failure as the API server sends it, which kube turns into `Error::Api`.
fn failure(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    respond(
        code,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "reason": reason, "message": message, "code": code.as_u16(),
        }),
    )
}

fn not_found(key: &Key) -> Response<Body> {
    failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{} {:?} not found", key.resource, key.name),
    )
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(target) = target else {
        return;
    };
    for (k, v) in patch {
        if v.is_null() {
            target.remove(k);
        } else {
            merge(target.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Decodes a percent-encoded query value.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `object` passes a field selector of `path=value` terms (`=` or `==`).
fn fields_match(object: &Value, selector: &str) -> Result<bool, String> {
    for term in selector.split(',').filter(|t| !t.is_empty()) {
        let (path, wanted) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .filter(|(p, _)| !p.ends_with('!'))
            .ok_or_else(|| format!("field selector {term:?} is not modelled"))?;
        let pointer = format!("/{}", path.replace('.', "/"));
        let found = object
            .pointer(&pointer)
            .and_then(Value::as_str)
            .unwrap_or("");
        if found != wanted {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether a label selector (`matchLabels`, `matchExpressions` with `In`, `NotIn`, `Exists`,
/// `DoesNotExist`) selects these labels.
fn selects(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let by_label = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    let by_expression = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|exprs| {
            exprs.iter().all(|e| {
                let key = e.get("key").and_then(Value::as_str).unwrap_or("");
                let values: Vec<&str> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|v| v.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match e.get("operator").and_then(Value::as_str) {
                    Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                    Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
                    Some("Exists") => label(key).is_some(),
                    Some("DoesNotExist") => label(key).is_none(),
                    _ => false,
                }
            })
        });
    by_label && by_expression
}

impl FakeApi {
    /// An empty API server stamping times from `clock`, and the cluster state its writes are
    /// reflected into.
    pub fn new(clock: Arc<FakeClock>) -> (Self, ClusterState) {
        let mut stores: HashMap<(String, String), Box<dyn Reflect>> = HashMap::new();
        let mut add = |api: &str, resource: &str, writer: Box<dyn Reflect>| {
            stores.insert((api.to_string(), resource.to_string()), writer);
        };
        let (nodes, w) = synced_store::<Node>(());
        add("api/v1", "nodes", Box::new(w.by(trim::node)));
        let mut pod_writer = PodWriter::default();
        pod_writer.apply(Event::Init);
        pod_writer.apply(Event::InitDone);
        let pods = pod_writer.reader();
        add(
            "api/v1",
            "pods",
            Box::new(TrimmedPods {
                writer: pod_writer,
                specs: trim::SharedSpecs::default(),
            }),
        );
        let (pvs, w) = synced_store::<PersistentVolume>(());
        add("api/v1", "persistentvolumes", Box::new(w));
        let (pvcs, w) = synced_store::<PersistentVolumeClaim>(());
        add("api/v1", "persistentvolumeclaims", Box::new(w));
        let (nodeclaims, w) = synced_store::<NodeClaim>(());
        add("apis/karpenter.sh/v1", "nodeclaims", Box::new(w));
        let (nodepools, w) = synced_store::<NodePool>(());
        add("apis/karpenter.sh/v1", "nodepools", Box::new(w));
        let (nodeclasses, w) = synced_store::<EC2NodeClass>(());
        add("apis/karpenter.k8s.aws/v1", "ec2nodeclasses", Box::new(w));
        let (node_overlays, w) = synced_store::<NodeOverlay>(());
        add("apis/karpenter.sh/v1alpha1", "nodeoverlays", Box::new(w));
        let (daemonsets, w) = synced_store::<DaemonSet>(());
        add("apis/apps/v1", "daemonsets", Box::new(w));
        let (storage_classes, w) = synced_store::<StorageClass>(());
        add("apis/storage.k8s.io/v1", "storageclasses", Box::new(w));
        let (csi_nodes, w) = synced_store::<CSINode>(());
        add("apis/storage.k8s.io/v1", "csinodes", Box::new(w));
        let pdb = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("policy", "v1", "PodDisruptionBudget"),
            "poddisruptionbudgets",
        );
        let (pdbs, w) = synced_store::<DynamicObject>(pdb);
        add("apis/policy/v1", "poddisruptionbudgets", Box::new(w));
        let state = ClusterState {
            nodes,
            pods,
            nodeclaims,
            nodepools,
            nodeclasses,
            daemonsets,
            pdbs,
            pvs,
            pvcs,
            storage_classes,
            csi_nodes,
            node_overlays: Some(node_overlays),
            changed: Arc::new(Notify::new()),
            node_changes: Default::default(),
            nodeclaim_changes: Default::default(),
            nodeclass_changes: Default::default(),
        };
        let api = Self {
            inner: Arc::new(Mutex::new(Inner {
                objects: BTreeMap::new(),
                stores,
                revision: 0,
                uids: 0,
                writes: BTreeMap::new(),
                failing: Vec::new(),
                lists: BTreeMap::new(),
                stalled: HashMap::new(),
            })),
            clock,
        };
        (api, state)
    }

    /// How many `method` requests (`POST`, `PATCH`, `DELETE`) on `resource` (the plural, e.g.
    /// `events`) were answered so far.
    pub fn writes(&self, method: &str, resource: &str) -> usize {
        self.lock()
            .writes
            .get(&(method.to_string(), resource.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// How many LISTs of `resource` (the plural, e.g. `pods`) were answered so far.
    pub fn lists(&self, resource: &str) -> usize {
        self.lock().lists.get(resource).copied().unwrap_or(0)
    }

    /// Holds back the changes to `resource` from the controller's cache, as a watch that has
    /// fallen behind the API server does, until [`FakeApi::resume_watch`].
    pub fn stall_watch(&self, resource: &str) {
        self.lock().stalled.entry(resource.to_string()).or_default();
    }

    /// Delivers the changes [`FakeApi::stall_watch`] held back, in order.
    pub fn resume_watch(&self, resource: &str) {
        let mut inner = self.lock();
        for (key, object, deleted) in inner.stalled.remove(resource).unwrap_or_default() {
            inner.reflect(&key, &object, deleted);
        }
    }

    /// Makes the next `method` request on `resource` whose body contains `text` fail with a 500
    /// (once), as an API server or a connection may at any write.
    pub fn fail_once(&self, method: &str, resource: &str, text: &str) {
        self.lock()
            .failing
            .push((method.to_string(), resource.to_string(), text.to_string()));
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> String {
        self.clock.now().to_rfc3339_opts(SecondsFormat::Secs, true)
    }

    /// Answers one request.
    fn handle(&self, method: &Method, path: &str, query: &str, body: &[u8]) -> Response<Body> {
        let Some(target) = Target::parse(path) else {
            return failure(StatusCode::NOT_FOUND, "NotFound", path);
        };
        if *method != Method::GET {
            let mut inner = self.lock();
            *inner
                .writes
                .entry((method.to_string(), target.resource.clone()))
                .or_default() += 1;
            let text = String::from_utf8_lossy(body);
            if let Some(i) = inner.failing.iter().position(|(m, r, t)| {
                m == method.as_str() && *r == target.resource && text.contains(t.as_str())
            }) {
                inner.failing.remove(i);
                return failure(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "injected failure",
                );
            }
        }
        let body: Value = if body.is_empty() {
            Value::Null
        } else {
            match serde_json::from_slice(body) {
                Ok(v) => v,
                Err(e) => return failure(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()),
            }
        };
        let params: HashMap<String, String> = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), decode(v)))
            .collect();
        match (
            method,
            target.name.as_deref(),
            target.subresource.as_deref(),
        ) {
            (&Method::GET, None, None) if params.get("watch").is_none_or(|w| w != "true") => {
                self.list(&target, &params)
            }
            (&Method::GET, Some(name), None) => self.get(&target.key(name)),
            (&Method::POST, None, None) => self.create(&target, body),
            (&Method::POST, Some(name), Some("eviction")) => self.evict(&target.key(name), &body),
            (&Method::PATCH, Some(name), sub @ (None | Some("status"))) => {
                self.patch(&target.key(name), sub.is_some(), &body)
            }
            (&Method::DELETE, Some(name), None) => self.delete(&target.key(name), &body),
            _ => failure(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                &format!("{method} {path}?{query} is not modelled by the fake API server"),
            ),
        }
    }

    fn get(&self, key: &Key) -> Response<Body> {
        match self.lock().objects.get(key) {
            Some(o) => respond(StatusCode::OK, o),
            None => not_found(key),
        }
    }

    fn list(&self, target: &Target, params: &HashMap<String, String>) -> Response<Body> {
        if params.contains_key("labelSelector") {
            return failure(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "label selectors are not modelled by the fake API server",
            );
        }
        let mut inner = self.lock();
        *inner.lists.entry(target.resource.clone()).or_default() += 1;
        let mut items = Vec::new();
        for (key, object) in &inner.objects {
            if key.api != target.api
                || key.resource != target.resource
                || (target.namespace.is_some() && key.namespace != target.namespace)
            {
                continue;
            }
            match params.get("fieldSelector").map(|s| fields_match(object, s)) {
                Some(Err(why)) => return failure(StatusCode::BAD_REQUEST, "BadRequest", &why),
                Some(Ok(false)) => continue,
                Some(Ok(true)) | None => items.push(object.clone()),
            }
        }
        respond(
            StatusCode::OK,
            &json!({
                "apiVersion": target.api.trim_start_matches("api/").trim_start_matches("apis/"),
                "kind": "List",
                "metadata": {"resourceVersion": inner.revision.to_string()},
                "items": items,
            }),
        )
    }

    fn create(&self, target: &Target, mut object: Value) -> Response<Body> {
        let now = self.now();
        let mut inner = self.lock();
        let meta = &object["metadata"];
        let name = match (meta.get("name"), meta.get("generateName")) {
            (Some(Value::String(n)), _) => n.clone(),
            (_, Some(Value::String(prefix))) => format!("{prefix}{:05}", inner.uids + 1),
            _ => {
                return failure(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    "metadata.name or metadata.generateName is required",
                );
            }
        };
        let key = target.key(&name);
        if inner.objects.contains_key(&key) {
            return failure(
                StatusCode::CONFLICT,
                "AlreadyExists",
                &format!("{} {name:?} already exists", key.resource),
            );
        }
        inner.uids += 1;
        let uid = format!("00000000-0000-0000-0000-{:012}", inner.uids);
        let revision = inner.next_revision();
        let meta = &mut object["metadata"];
        meta["name"] = json!(name);
        meta["uid"] = json!(uid);
        meta["resourceVersion"] = json!(revision);
        if meta.get("creationTimestamp").is_none_or(Value::is_null) {
            meta["creationTimestamp"] = json!(now);
        }
        if let Some(ns) = &key.namespace {
            meta["namespace"] = json!(ns);
        }
        inner.reflect(&key, &object, false);
        inner.objects.insert(key, object.clone());
        respond(StatusCode::CREATED, &object)
    }

    fn patch(&self, key: &Key, status: bool, patch: &Value) -> Response<Body> {
        let mut inner = self.lock();
        let Some(mut object) = inner.objects.get(key).cloned() else {
            return not_found(key);
        };
        if let Some(wanted) = patch.pointer("/metadata/resourceVersion")
            && object.pointer("/metadata/resourceVersion") != Some(wanted)
        {
            return failure(
                StatusCode::CONFLICT,
                "Conflict",
                &format!(
                    "the object has been modified; please apply your changes to the latest version ({} {})",
                    key.resource, key.name
                ),
            );
        }
        // The status subresource takes only the status; the object itself takes all but it.
        let mut patch = patch.clone();
        if let Value::Object(fields) = &mut patch {
            if status {
                fields.retain(|k, _| k == "status");
            } else {
                fields.remove("status");
            }
        }
        merge(&mut object, &patch);
        object["metadata"]["resourceVersion"] = json!(inner.next_revision());
        self.store(&mut inner, key, object)
    }

    /// Stores a changed object, or lets it go once it is being deleted and has no finalizer
    /// left.
    fn store(&self, inner: &mut Inner, key: &Key, object: Value) -> Response<Body> {
        let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
        let finalized = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if deleting && finalized {
            inner.objects.remove(key);
            inner.reflect(key, &object, true);
        } else {
            inner.reflect(key, &object, false);
            inner.objects.insert(key.clone(), object.clone());
        }
        respond(StatusCode::OK, &object)
    }

    fn delete(&self, key: &Key, options: &Value) -> Response<Body> {
        let now = self.now();
        let mut inner = self.lock();
        let Some(mut object) = inner.objects.get(key).cloned() else {
            return not_found(key);
        };
        if let Some(uid) = options.pointer("/preconditions/uid")
            && object.pointer("/metadata/uid") != Some(uid)
        {
            return failure(
                StatusCode::CONFLICT,
                "Conflict",
                "Precondition failed: UID in precondition does not match the object's",
            );
        }
        if object.pointer("/metadata/deletionTimestamp").is_none() {
            object["metadata"]["deletionTimestamp"] = json!(now);
            object["metadata"]["resourceVersion"] = json!(inner.next_revision());
        }
        self.store(&mut inner, key, object)
    }

    /// The Eviction API: refused with 429 while a PodDisruptionBudget selecting the pod allows
    /// no disruption; otherwise the pod is deleted and the budget's allowance goes down by one,
    /// as the disruption controller would recompute it.
    fn evict(&self, key: &Key, eviction: &Value) -> Response<Body> {
        let mut inner = self.lock();
        let Some(pod) = inner.objects.get(key).cloned() else {
            return not_found(key);
        };
        if let Some(uid) = eviction.pointer("/deleteOptions/preconditions/uid")
            && pod.pointer("/metadata/uid") != Some(uid)
        {
            return failure(StatusCode::CONFLICT, "Conflict", "UID precondition failed");
        }
        let labels = pod.pointer("/metadata/labels").cloned().unwrap_or_default();
        let budgets: Vec<Key> = inner
            .objects
            .iter()
            .filter(|(k, pdb)| {
                k.resource == "poddisruptionbudgets"
                    && k.namespace == key.namespace
                    && pdb
                        .pointer("/spec/selector")
                        .is_some_and(|s| selects(s, &labels))
            })
            .map(|(k, _)| k.clone())
            .collect();
        let allowed = |inner: &Inner, k: &Key| {
            inner.objects[k]
                .pointer("/status/disruptionsAllowed")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        if let Some(blocking) = budgets.iter().find(|k| allowed(&inner, k) < 1) {
            return failure(
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                &format!(
                    "Cannot evict pod as it would violate the pod's disruption budget {}",
                    blocking.name
                ),
            );
        }
        for k in &budgets {
            let left = allowed(&inner, k) - 1;
            let mut pdb = inner.objects[k].clone();
            pdb["status"]["disruptionsAllowed"] = json!(left);
            pdb["metadata"]["resourceVersion"] = json!(inner.next_revision());
            inner.reflect(k, &pdb, false);
            inner.objects.insert(k.clone(), pdb);
        }
        inner.objects.remove(key);
        inner.reflect(key, &pod, true);
        respond(
            StatusCode::CREATED,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        )
    }
}

impl tower_service::Service<Request<kube::client::Body>> for FakeApi {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let api = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = match body.collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    return Ok(failure(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        &e.to_string(),
                    ));
                }
            };
            let content_type = parts
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if parts.method == Method::PATCH && content_type != "application/merge-patch+json" {
                return Ok(failure(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    &format!("{content_type} patches are not modelled by the fake API server"),
                ));
            }
            Ok(api.handle(
                &parts.method,
                parts.uri.path(),
                parts.uri.query().unwrap_or_default(),
                &body,
            ))
        })
    }
}
