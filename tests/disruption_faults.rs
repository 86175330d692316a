//! Fault injection over the running controller: the real `controllers::*` and `lifecycle::*`
//! tasks (provisioner, NodeClaim lifecycle and termination, disruption, disruption status,
//! garbage collection, NodePool/EC2NodeClass status, the stand-in kubelet) run in this process
//! against the real control plane (`KARPENTER_RS_TEST_KUBECONFIG`, as
//! `tests/disruption_control_plane.rs`), for thousands of seeded steps while:
//!
//! - the controller "process" is killed at random points (every task aborted mid-flight) and
//!   restarted from a fresh `ClusterState`; the simulated EC2 lives on, as EC2 does;
//! - the controller's API writes fail at random: a tower layer in its kube clients answers
//!   500, 409 or 429 without forwarding, refuses the connection, or forwards the write and
//!   loses the response;
//! - the cloud runs out of capacity (whole instance types, or some zones) and throttles;
//! - the workload changes between steps: Deployments scale, NodePool templates change (drift),
//!   a terminationGracePeriod comes and goes, a PodDisruptionBudget comes and goes,
//!   do-not-disrupt pods come and go, and now and then a user strips a NodeClaim's finalizer
//!   and deletes it.
//!
//! What is checked is observed independently of the code under test: the fault layer sees every
//! eviction, pod deletion and NodeClaim creation the controller sends (with the pod's and
//! NodeClaim's state read just before, and the outcome); a wrapper around the cloud sees every
//! instance termination (with the Node's pods read just before); and after every step the
//! harness lists NodeClaims, Nodes, pods and instances from the API server and the cloud:
//!
//! - no instance without a NodeClaim beyond the garbage-collection grace period;
//! - no NodeClaim stuck: bounded time to launch, register and initialize, and to finish
//!   terminating while nothing (a do-not-disrupt pod, a PDB allowing no disruption) holds it;
//! - no pod evicted in breach of do-not-disrupt, no pod deleted (bypassing its PDB) before its
//!   node's terminationGracePeriod deadline, no instance terminated while pods the drain must
//!   move are still on its node before that deadline (PDBs themselves are enforced by the
//!   Eviction API, which the drain must go through);
//! - never more nodes of a NodePool disrupting than its budget allows;
//! - no runaway launches: a NodeClaim is created only while the NodeClaims in flight (not yet
//!   hosting pods) are fewer than the pending pods of its pool need, plus one.
//!
//! Each seed ends with a settle phase (faults off, capacity back) in which everything must
//! converge. The totals (steps, kills, faults, evictions, violations) are printed at the end.
//!
//! The controller's clock is the wall clock: the API server stamps creation and deletion times
//! with its own, and a clock running ahead of it would make every fresh object look old
//! (consolidateAfter, terminationGracePeriod). The run is kept short instead by short poll
//! periods and validation delay (`Context::intervals`) and second-scale consolidateAfter and
//! terminationGracePeriod.

#[path = "k8s/harness.rs"]
mod k8s;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use http_body_util::BodyExt;
use hyper::body::Bytes;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use karpenter_rs::apis::{EC2NodeClass, NodeClaim, NodePool};
use karpenter_rs::catalog::Catalog;
use karpenter_rs::clock::{Clock, SystemClock};
use karpenter_rs::cloudprovider::simulated::SimulatedProvider;
use karpenter_rs::cloudprovider::{
    CloudError, CloudProvider, Instance, InstanceState, Launched, NodeClassResolution,
};
use karpenter_rs::controllers;
use karpenter_rs::controllers::disruption::COMMAND_ANNOTATION;
use karpenter_rs::controllers::nodeclaim::garbage::INSTANCE_GRACE;
use karpenter_rs::controllers::provisioning::BatchWindow;
use karpenter_rs::runtime::{Context, Intervals};
use karpenter_rs::scheduling::instance_type::{CapacityType, InstanceType};
use karpenter_rs::snapshot::EngineOptions;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::client::{ClientBuilder, DynBody};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinSet;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Resp = hyper::Response<Box<DynBody>>;

/// Seeds of the runs; each runs [`CHAOS_STEPS`] steps plus its settle phase.
const SEEDS: [u64; 3] = [0x5eed_0001, 0x5eed_0002, 0x5eed_0003];
/// Steps with faults and workload changes per seed.
const CHAOS_STEPS: usize = 680;
/// Most steps the settle phase may take before the run counts as stuck. Settling includes
/// rolling every node the last template change drifted, one at a time in pool `a`: on a quiet
/// machine that takes 20-320 steps, and a loaded one stretches each step's controller work, so
/// the bound is generous; a controller that stops converging still fails it.
const SETTLE_STEPS: usize = 1200;
/// Wall time between two steps' observations.
const STEP: Duration = Duration::from_millis(100);
/// How long after scaling a pool's Deployment the runaway check leaves the pool alone: a
/// provisioning round that started before the scale (or before the ReplicaSet controller
/// deleted the pods) creates NodeClaims for pods that are gone by then, and on a loaded machine
/// its creations come seconds later.
const SCALE_QUIET: Duration = Duration::from_secs(15);
/// Share of the controller's API writes that fail, in percent.
const FAULT_PERCENT: u64 = 10;
/// The workload's namespace.
const NS: &str = "cp-test-faults";
/// Budgets: pool `a` may disrupt one node at a time, pool `b` two.
const BUDGETS: [(&str, usize); 2] = [("a", 1), ("b", 2)];
/// terminationGracePeriod the harness sets on pool `a` now and then.
const TGP_SECONDS: i64 = 8;
/// Longest a NodeClaim may take to launch, to register, and to initialize.
const PHASE_BOUND: Duration = Duration::from_secs(75);
/// Longest a deleting NodeClaim may take while nothing legitimately holds its drain.
const UNBLOCKED_TERMINATION_BOUND: Duration = Duration::from_secs(90);
/// Slack after the garbage-collection grace period before an orphan instance is a violation.
const ORPHAN_SLACK: chrono::Duration = chrono::Duration::seconds(75);

/// A small seeded generator (xorshift64*), so a failing run replays its decisions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

async fn config() -> Config {
    let kc = Kubeconfig::read_from(k8s::kubeconfig_path()).expect("readable kubeconfig");
    Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("valid kubeconfig")
}

// ------------------------------------------------------------------------------------------
// What the harness observed, shared by the fault layer, the cloud wrapper and the steps.

/// Counters and violations, with the step they happened at.
#[derive(Default)]
struct Ledger {
    step: usize,
    faults: BTreeMap<&'static str, usize>,
    evictions: BTreeMap<String, usize>,
    pod_deletions: usize,
    protected_deletions: usize,
    claims_created: usize,
    replacements_created: usize,
    instances_terminated: usize,
    violations: Vec<String>,
}

impl Ledger {
    fn violation(&mut self, what: String) {
        let at = self.step;
        self.violations.push(format!("step {at}: {what}"));
    }
}

/// The harness's view of the run, shared with the fault layer and the cloud wrapper.
struct Observer {
    /// A client without faults, for the harness's own reads and writes.
    client: Client,
    clock: Arc<dyn Clock>,
    enabled: AtomicBool,
    rng: Mutex<Rng>,
    ledger: Mutex<Ledger>,
    /// Provider IDs of instances whose NodeClaim a "user" removed by force: their pods may go
    /// without a drain.
    forced: Mutex<HashSet<String>>,
    /// Pods one node of each pool holds (1-CPU pods on the largest type).
    pods_per_node: usize,
    /// Until when the runaway check leaves a pool alone: the harness just removed pods the
    /// provisioner may already be planning for.
    quiet_until: Mutex<HashMap<String, Instant>>,
}

impl Observer {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn violation(&self, what: String) {
        eprintln!("VIOLATION: {what}");
        self.ledger().violation(what);
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }
}

/// What a pod looked like just before the controller asked to remove it.
struct PodBefore {
    do_not_disrupt: bool,
    grace: i64,
    node: Option<String>,
    /// The terminationGracePeriod deadline of the pod's node's NodeClaim, if any.
    deadline: Option<DateTime<Utc>>,
}

async fn claims(client: &Client) -> Vec<NodeClaim> {
    Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn deadline_of(claim: &NodeClaim) -> Option<DateTime<Utc>> {
    claim
        .annotations()
        .get("karpenter.sh/nodeclaim-termination-timestamp")
        .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc))
}

fn claim_of_node<'a>(claims: &'a [NodeClaim], node: &str) -> Option<&'a NodeClaim> {
    claims
        .iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
}

async fn pod_before(obs: &Observer, ns: &str, name: &str) -> Option<PodBefore> {
    let pod = Api::<Pod>::namespaced(obs.client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let deadline = match &node {
        Some(n) => claim_of_node(&claims(&obs.client).await, n).and_then(deadline_of),
        None => None,
    };
    Some(PodBefore {
        do_not_disrupt: pod
            .annotations()
            .get("karpenter.sh/do-not-disrupt")
            .is_some_and(|v| v == "true"),
        grace: pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30),
        node,
        deadline,
    })
}

fn pool_of_pod(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .node_selector
        .as_ref()?
        .get("pool")
        .cloned()
}

fn initialized(claim: &NodeClaim) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Initialized" && c.status == "True")
    })
}

/// Checks a NodeClaim creation against the pending pods of its pool, read just before.
async fn check_creation(obs: &Observer, body: &[u8]) {
    let Ok(claim) = serde_json::from_slice::<NodeClaim>(body) else {
        return;
    };
    if claim.annotations().contains_key(COMMAND_ANNOTATION) {
        obs.ledger().replacements_created += 1;
        return;
    }
    obs.ledger().claims_created += 1;
    let Some(pool) = claim.labels().get("karpenter.sh/nodepool").cloned() else {
        return;
    };
    let quiet = obs
        .quiet_until
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&pool)
        .is_some_and(|until| Instant::now() < *until);
    if quiet {
        return;
    }
    let pods = Api::<Pod>::namespaced(obs.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let pending = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
        .filter(|p| pool_of_pod(p).as_deref() == Some(pool.as_str()))
        .count();
    let need = pending.div_ceil(obs.pods_per_node);
    let hosting: HashSet<&str> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.as_deref())
        .collect();
    let all = claims(&obs.client).await;
    let in_flight = all
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| !c.annotations().contains_key(COMMAND_ANNOTATION))
        .filter(|c| c.labels().get("karpenter.sh/nodepool") == Some(&pool))
        .filter(|c| !initialized(c))
        .filter(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_none_or(|n| !hosting.contains(n))
        })
        .map(|c| {
            let launched = c
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Launched"))
                .map_or_else(|| "-".to_string(), |c| format!("{} {}", c.status, c.reason));
            format!("{} (Launched: {launched})", c.name_any())
        })
        .collect::<Vec<_>>();
    if in_flight.len() > need {
        obs.violation(format!(
            "runaway launch: a NodeClaim for pool {pool} created while {} are in flight ({}) and {pending} pending pods need {need}",
            in_flight.len(),
            in_flight.join(", ")
        ));
    }
}

/// Checks an accepted eviction or pod deletion against what the pod was just before.
fn check_removal(obs: &Observer, evict: bool, ns: &str, name: &str, before: &PodBefore) {
    let now = obs.now();
    if evict {
        if before.do_not_disrupt {
            obs.violation(format!(
                "pod {ns}/{name} with karpenter.sh/do-not-disrupt was evicted (node {:?})",
                before.node
            ));
        }
        return;
    }
    obs.ledger().pod_deletions += 1;
    if before.do_not_disrupt {
        obs.ledger().protected_deletions += 1;
    }
    match before.deadline {
        Some(d) if now >= d - chrono::Duration::seconds(before.grace) => {}
        Some(d) => obs.violation(format!(
            "pod {ns}/{name} deleted {}s before its node's terminationGracePeriod allows (deadline {d})",
            (d - chrono::Duration::seconds(before.grace) - now).num_seconds()
        )),
        None => obs.violation(format!(
            "pod {ns}/{name} on {:?} deleted directly (bypassing PDBs and do-not-disrupt) without a terminationGracePeriod",
            before.node
        )),
    }
}

// ------------------------------------------------------------------------------------------
// The fault layer in the controller's kube clients.

#[derive(Clone)]
struct FaultLayer(Arc<Observer>);

impl<S> tower_layer::Layer<S> for FaultLayer {
    type Service = FaultService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FaultService {
            inner,
            obs: self.0.clone(),
        }
    }
}

struct FaultService<S> {
    inner: S,
    obs: Arc<Observer>,
}

/// What a request is, for the checks.
enum Watched {
    Evict(String, String),
    DeletePod(String, String),
    CreateClaim,
    Other,
}

fn classify(method: &hyper::Method, path: &str) -> Watched {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        (&hyper::Method::POST, ["api", "v1", "namespaces", ns, "pods", name, "eviction"]) => {
            Watched::Evict(ns.to_string(), name.to_string())
        }
        (&hyper::Method::DELETE, ["api", "v1", "namespaces", ns, "pods", name]) => {
            Watched::DeletePod(ns.to_string(), name.to_string())
        }
        (&hyper::Method::POST, ["apis", "karpenter.sh", "v1", "nodeclaims"]) => {
            Watched::CreateClaim
        }
        _ => Watched::Other,
    }
}

/// An API error response as the API server writes it.
fn status_response(code: u16, reason: &str) -> Resp {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("injected fault ({reason})"), "reason": reason, "code": code,
    });
    let body: Box<DynBody> = Box::new(
        http_body_util::Full::new(Bytes::from(body.to_string()))
            .map_err(|never: std::convert::Infallible| -> BoxError { match never {} }),
    );
    let mut resp = hyper::Response::new(body);
    *resp.status_mut() = hyper::StatusCode::from_u16(code).unwrap_or(hyper::StatusCode::OK);
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// The fault a write meets, if any.
#[derive(Clone, Copy)]
enum Fault {
    ServerError,
    Conflict,
    TooManyRequests,
    Refused,
    LostResponse,
}

impl<S> tower_service::Service<hyper::Request<kube::client::Body>> for FaultService<S>
where
    S: tower_service::Service<
            hyper::Request<kube::client::Body>,
            Response = Resp,
            Error = BoxError,
        >,
    S::Future: Send + 'static,
{
    type Response = Resp;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Resp, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: hyper::Request<kube::client::Body>) -> Self::Future {
        let obs = self.obs.clone();
        let method = req.method().clone();
        let watched = classify(&method, req.uri().path());
        let mutating = !matches!(method, hyper::Method::GET | hyper::Method::HEAD);
        let fault = if mutating && obs.enabled.load(Ordering::Relaxed) {
            let mut rng = obs.rng.lock().unwrap_or_else(|e| e.into_inner());
            rng.chance(FAULT_PERCENT).then(|| match rng.below(5) {
                0 => Fault::ServerError,
                1 => Fault::Conflict,
                2 => Fault::TooManyRequests,
                3 => Fault::Refused,
                _ => Fault::LostResponse,
            })
        } else {
            None
        };
        let body = match watched {
            Watched::CreateClaim => req.body().try_clone(),
            _ => None,
        };
        let forward = !matches!(
            fault,
            Some(Fault::ServerError | Fault::Conflict | Fault::TooManyRequests | Fault::Refused)
        );
        // The inner future sends nothing until polled: a request not forwarded is never sent.
        let sent = forward.then(|| self.inner.call(req));
        Box::pin(async move {
            let before = match &watched {
                Watched::Evict(ns, name) | Watched::DeletePod(ns, name) if forward => {
                    pod_before(&obs, ns, name).await
                }
                _ => None,
            };
            if let (Watched::CreateClaim, Some(body), true) = (&watched, body, forward)
                && let Ok(collected) = body.collect().await
            {
                check_creation(&obs, &collected.to_bytes()).await;
            }
            if let Some(f) = fault {
                let kind = match f {
                    Fault::ServerError => "500",
                    Fault::Conflict => "409",
                    Fault::TooManyRequests => "429",
                    Fault::Refused => "connection refused",
                    Fault::LostResponse => "response lost",
                };
                *obs.ledger().faults.entry(kind).or_default() += 1;
            }
            let response = match (sent, fault) {
                (_, Some(Fault::ServerError)) => Ok(status_response(500, "InternalError")),
                (_, Some(Fault::Conflict)) => Ok(status_response(409, "Conflict")),
                (_, Some(Fault::TooManyRequests)) => Ok(status_response(429, "TooManyRequests")),
                (_, Some(Fault::Refused)) | (None, _) => {
                    Err::<Resp, BoxError>("injected fault: connection refused".into())
                }
                (Some(sent), _) => sent.await,
            };
            // Record what reached the API server and was accepted.
            let accepted = match (&response, fault) {
                (Ok(r), _) => r.status().is_success(),
                (Err(_), Some(Fault::LostResponse)) => true,
                _ => false,
            };
            if forward
                && let (Watched::Evict(ns, name) | Watched::DeletePod(ns, name), Some(b)) =
                    (&watched, &before)
            {
                let evict = matches!(watched, Watched::Evict(..));
                if evict {
                    let code = match &response {
                        Ok(r) => r.status().as_u16().to_string(),
                        Err(_) => "lost".into(),
                    };
                    *obs.ledger().evictions.entry(code).or_default() += 1;
                }
                if accepted {
                    check_removal(&obs, evict, ns, name, b);
                }
            }
            match (response, fault) {
                (Ok(_), Some(Fault::LostResponse)) => {
                    Err("injected fault: the response was lost".into())
                }
                (r, _) => r,
            }
        })
    }
}

// ------------------------------------------------------------------------------------------
// The cloud, seen from outside: every instance termination is checked against its Node's pods.

struct WatchedCloud {
    inner: Arc<SimulatedProvider>,
    obs: Arc<Observer>,
}

/// Pods the drain must move before the instance goes: not DaemonSet pods, not finished, not
/// already being deleted, not tolerating the disruption taint.
fn must_move(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let tolerates = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|t| {
            t.iter().any(|t| {
                t.operator.as_deref() == Some("Exists")
                    && t.key
                        .as_deref()
                        .is_none_or(|k| k == "karpenter.sh/disrupted")
            })
        });
    !matches!(phase, Some("Succeeded" | "Failed"))
        && pod.metadata.deletion_timestamp.is_none()
        && !pod.owner_references().iter().any(|o| o.kind == "DaemonSet")
        && !tolerates
}

impl WatchedCloud {
    async fn check_termination(&self, provider_id: &str) {
        let obs = &self.obs;
        obs.ledger().instances_terminated += 1;
        let forced = obs
            .forced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(provider_id);
        if forced {
            return;
        }
        let nodes = Api::<Node>::all(obs.client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let Some(node) = nodes
            .iter()
            .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
        else {
            return;
        };
        let name = node.name_any();
        let pods = Api::<Pod>::all(obs.client.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let left: Vec<String> = pods
            .iter()
            .filter(|p| must_move(p))
            .map(|p| p.name_any())
            .collect();
        if left.is_empty() {
            return;
        }
        let deadline = claim_of_node(&claims(&obs.client).await, &name).and_then(deadline_of);
        if deadline.is_none_or(|d| obs.now() < d) {
            obs.violation(format!(
                "instance {provider_id} (node {name}) terminated with pods still to drain: {left:?} (deadline {deadline:?})"
            ));
        }
    }
}

#[async_trait]
impl CloudProvider for WatchedCloud {
    fn name(&self) -> &'static str {
        "simulated"
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> Result<Launched, CloudError> {
        self.inner.create(claim, nodeclass).await
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        let alive = self
            .inner
            .instances()
            .iter()
            .any(|i| i.provider_id == provider_id && !i.state.is_terminating());
        if alive {
            self.check_termination(provider_id).await;
        }
        self.inner.delete(provider_id).await
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.inner.get(provider_id).await
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.inner.list().await
    }

    async fn instance_types(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Arc<Vec<InstanceType>>, CloudError> {
        self.inner.instance_types(nodeclass).await
    }

    async fn resolve(&self, nodeclass: &EC2NodeClass) -> NodeClassResolution {
        self.inner.resolve(nodeclass).await
    }
}

// ------------------------------------------------------------------------------------------
// The controller process: every task on one JoinSet, aborted as a kill would.

struct Process {
    tasks: JoinSet<()>,
}

impl Process {
    async fn start(obs: &Arc<Observer>, cloud: &Arc<SimulatedProvider>) -> Self {
        let config = config().await;
        let faulty = |retry: bool| {
            let mut c = config.clone();
            c.default_retry = retry;
            ClientBuilder::try_from(c)
                .expect("client stack")
                .with_layer(&FaultLayer(obs.clone()))
                .build()
        };
        let client = faulty(true);
        let eviction_client = faulty(false);
        let (state, mut tasks) = karpenter_rs::state::ClusterState::start(&client).await;
        state.wait_synced().await;
        karpenter_rs::controllers::kubelet::adopt_instances(cloud, &state.nodeclaims.state());
        let provider: Arc<dyn CloudProvider> = Arc::new(WatchedCloud {
            inner: cloud.clone(),
            obs: obs.clone(),
        });
        let mut ctx = Context::new(
            client,
            eviction_client,
            state,
            provider,
            Some(cloud.clone()),
            obs.clock.clone(),
            EngineOptions::default(),
        );
        ctx.intervals = Intervals {
            disruption_poll: Duration::from_millis(500),
            validation_delay: Duration::from_secs(1),
            replacement_timeout: Duration::from_secs(60),
            disruption_status: Duration::from_millis(500),
            garbage_collection: Duration::from_secs(1),
        };
        let ctx = Arc::new(ctx);
        controllers::spawn_controllers(
            &ctx,
            &mut tasks,
            BatchWindow {
                idle: Duration::from_millis(300),
                max: Duration::from_secs(2),
            },
            "us-east-1",
            false,
        );
        Self { tasks }
    }

    /// Kills the process: every task stops at its next await, mid-command or mid-write.
    async fn kill(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

// ------------------------------------------------------------------------------------------
// The cluster the harness drives.

async fn strip_and_delete<K>(api: Api<K>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let Ok(list) = api.list(&ListParams::default()).await else {
        return;
    };
    for o in list.items {
        let name = o.name_any();
        let _ = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
}

/// Removes everything a test left: Karpenter objects and Nodes (finalizers stripped) and the
/// test namespaces, waiting until they are gone.
async fn reset(client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces
        .list(&ListParams::default())
        .await
        .expect("namespaces")
        .items
    {
        if ns.name_any().starts_with("cp-test-") {
            let _ = namespaces
                .delete(&ns.name_any(), &DeleteParams::default())
                .await;
        }
    }
    k8s::wait_for("the cluster to come clean", || async {
        strip_and_delete(Api::<NodeClaim>::all(client.clone())).await;
        strip_and_delete(Api::<Node>::all(client.clone())).await;
        strip_and_delete(Api::<NodePool>::all(client.clone())).await;
        strip_and_delete(Api::<EC2NodeClass>::all(client.clone())).await;
        let left = claims(client).await.len()
            + Api::<Node>::all(client.clone())
                .list(&ListParams::default())
                .await
                .map(|l| l.items.len())
                .unwrap_or(1)
            + namespaces
                .list(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .filter(|n| n.name_any().starts_with("cp-test-"))
                        .count()
                })
                .unwrap_or(1);
        (left == 0).then_some(())
    })
    .await;
}

async fn setup(client: &Client) {
    let ns = k8s::namespace(client, "faults").await;
    assert_eq!(ns, NS);
    let class: EC2NodeClass = serde_json::from_value(nodeclass_json()).expect("nodeclass");
    Api::<EC2NodeClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create EC2NodeClass");
    let pools: Api<NodePool> = Api::all(client.clone());
    for (name, budget) in BUDGETS {
        let (policy, types) = if name == "a" {
            ("WhenEmptyOrUnderutilized", json!(["m5.large", "m5.xlarge"]))
        } else {
            ("WhenEmpty", json!(["m5.xlarge"]))
        };
        let pool: NodePool = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {
                "disruption": {"consolidationPolicy": policy, "consolidateAfter": "5s",
                               "budgets": [{"nodes": budget.to_string()}]},
                "template": {
                    "metadata": {"labels": {"pool": name, "gen": "0"}},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "expireAfter": "Never",
                        "terminationGracePeriod": if name == "a" { json!(format!("{TGP_SECONDS}s")) } else { Value::Null },
                        "requirements": [
                            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        ],
                    },
                },
            },
        }))
        .expect("nodepool");
        pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("create NodePool");
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    for (name, pool, replicas, annotations) in [
        ("web", "a", 4, json!({})),
        (
            "dnd",
            "a",
            0,
            json!({"karpenter.sh/do-not-disrupt": "true"}),
        ),
        ("batch", "b", 3, json!({})),
    ] {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}, "annotations": annotations},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "nodeSelector": {"pool": pool},
                        "containers": [{
                            "name": "pause",
                            "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                            "resources": {"requests": {"cpu": "1"}},
                        }],
                    },
                },
            },
        }))
        .expect("deployment");
        deployments
            .create(&PostParams::default(), &d)
            .await
            .expect("create Deployment");
    }
}

fn nodeclass_json() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-test",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
        }
    })
}

fn pdb_api(client: &Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("policy", "v1beta1", "PodDisruptionBudget"),
        "poddisruptionbudgets",
    );
    Api::namespaced_with(client.clone(), NS, &ar)
}

// ------------------------------------------------------------------------------------------
// One seed's run.

/// A NodeClaim's lifecycle phase as the harness sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Created,
    Launched,
    Registered,
    Initialized,
    Deleting,
}

fn phase(claim: &NodeClaim) -> Phase {
    let cond = |t: &str| {
        claim.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == t && c.status == "True")
        })
    };
    if claim.metadata.deletion_timestamp.is_some() {
        Phase::Deleting
    } else if cond("Initialized") {
        Phase::Initialized
    } else if cond("Registered") {
        Phase::Registered
    } else if claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_ref())
        .is_some()
    {
        Phase::Launched
    } else {
        Phase::Created
    }
}

/// How long each NodeClaim has been in its phase (and, deleting, how long unblocked).
struct Tracked {
    phase: Phase,
    since: Instant,
    unblocked: Duration,
    reported: bool,
}

/// What one step saw.
struct Snapshot {
    claims: Vec<NodeClaim>,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    pdb_allows: Option<i64>,
}

struct Run {
    seed: u64,
    rng: Rng,
    obs: Arc<Observer>,
    cloud: Arc<SimulatedProvider>,
    process: Option<Process>,
    tracked: HashMap<String, Tracked>,
    steps: usize,
    kills: usize,
    actions: BTreeMap<&'static str, usize>,
    most_disrupting: BTreeMap<String, usize>,
    exhausted: Vec<(String, String, CapacityType)>,
    zones: Vec<String>,
    /// Steps at which do-not-disrupt pods were running, and at which one ran on a node being
    /// deleted (the situations the do-not-disrupt checks need).
    dnd_steps: usize,
    dnd_draining_steps: usize,
    /// When each instance without a NodeClaim was first seen so.
    orphaned: HashMap<String, Instant>,
    last_step: Instant,
}

impl Run {
    async fn observe(&self) -> Snapshot {
        let client = &self.obs.client;
        let pdb = pdb_api(client).get_opt("web").await.ok().flatten();
        Snapshot {
            claims: claims(client).await,
            nodes: Api::<Node>::all(client.clone())
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default(),
            pods: Api::<Pod>::namespaced(client.clone(), NS)
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default(),
            pdb_allows: pdb.and_then(|p| p.data.get("status")?.get("disruptionsAllowed")?.as_i64()),
        }
    }

    /// What a kubelet would report: bound pods run and are Ready (the PDB counts them).
    async fn start_pods(&self, snap: &Snapshot) {
        let api: Api<Pod> = Api::namespaced(self.obs.client.clone(), NS);
        for p in &snap.pods {
            let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if !bound || running || p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let _ = api
                .patch_status(
                    &p.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True"}],
                    }})),
                )
                .await;
        }
    }

    /// The invariants over one step's observations.
    fn check(&mut self, snap: &Snapshot) {
        let now = self.obs.now();
        let elapsed = self.last_step.elapsed();
        self.last_step = Instant::now();
        // Orphan instances.
        let names: HashSet<String> = snap.claims.iter().map(|c| c.name_any()).collect();
        let ids: HashSet<&str> = snap
            .claims
            .iter()
            .filter_map(|c| c.status.as_ref()?.provider_id.as_deref())
            .collect();
        let mut orphans = HashSet::new();
        for i in self.cloud.instances() {
            if i.state.is_terminating()
                || ids.contains(i.provider_id.as_str())
                || i.nodeclaim.as_ref().is_some_and(|n| names.contains(n))
            {
                continue;
            }
            orphans.insert(i.provider_id.clone());
            let since = *self
                .orphaned
                .entry(i.provider_id.clone())
                .or_insert_with(Instant::now);
            // Garbage collection waits for the grace period after launch, then a period.
            let allowed = (INSTANCE_GRACE - (now - i.launch_time)).max(chrono::Duration::zero())
                + ORPHAN_SLACK;
            if since.elapsed() > allowed.to_std().unwrap_or_default() {
                self.obs.violation(format!(
                    "instance {} ({:?}) has had no NodeClaim for {:?}",
                    i.provider_id,
                    i.nodeclaim,
                    since.elapsed()
                ));
                self.orphaned.insert(i.provider_id.clone(), Instant::now());
            }
        }
        self.orphaned.retain(|id, _| orphans.contains(id));
        // Budgets.
        for (pool, budget) in BUDGETS {
            let disrupting =
                snap.nodes
                    .iter()
                    .filter(|n| {
                        n.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some(pool)
                    })
                    .filter(|n| {
                        let id = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
                        let forced = id.is_some_and(|id| {
                            self.obs
                                .forced
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .contains(id)
                        });
                        let claim = snap.claims.iter().find(|c| {
                            c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == id
                        });
                        let Some(claim) = claim else { return false };
                        let tainted = n
                            .spec
                            .as_ref()
                            .and_then(|s| s.taints.as_ref())
                            .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"));
                        !forced
                            && !claim.annotations().contains_key(COMMAND_ANNOTATION)
                            && (claim.metadata.deletion_timestamp.is_some() || tainted)
                    })
                    .count();
            let most = self.most_disrupting.entry(pool.to_string()).or_default();
            *most = (*most).max(disrupting);
            if disrupting > budget {
                self.obs.violation(format!(
                    "pool {pool} has {disrupting} nodes disrupting; its budget allows {budget}"
                ));
            }
        }
        // Stuck NodeClaims.
        let mut seen = HashSet::new();
        for claim in &snap.claims {
            let name = claim.name_any();
            seen.insert(name.clone());
            let p = phase(claim);
            let t = self.tracked.entry(name.clone()).or_insert(Tracked {
                phase: p,
                since: Instant::now(),
                unblocked: Duration::ZERO,
                reported: false,
            });
            if t.phase != p {
                *t = Tracked {
                    phase: p,
                    since: Instant::now(),
                    unblocked: Duration::ZERO,
                    reported: false,
                };
            }
            let stuck = match p {
                Phase::Initialized => false,
                Phase::Created | Phase::Launched | Phase::Registered => {
                    t.since.elapsed() > PHASE_BOUND
                }
                Phase::Deleting => {
                    if !held(claim, snap, now) {
                        t.unblocked += elapsed;
                    }
                    t.unblocked > UNBLOCKED_TERMINATION_BOUND
                }
            };
            if stuck && !t.reported {
                t.reported = true;
                let message = format!(
                    "NodeClaim {name} stuck in {p:?} for {:?} (unblocked {:?})",
                    t.since.elapsed(),
                    t.unblocked
                );
                self.obs.violation(message);
            }
        }
        self.tracked.retain(|n, _| seen.contains(n));
        let dnd_nodes: Vec<&str> = snap
            .pods
            .iter()
            .filter(|p| p.labels().get("app").map(String::as_str) == Some("dnd"))
            .filter_map(|p| p.spec.as_ref()?.node_name.as_deref())
            .collect();
        if !dnd_nodes.is_empty() {
            self.dnd_steps += 1;
        }
        if snap.claims.iter().any(|c| {
            c.metadata.deletion_timestamp.is_some()
                && c.status
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| dnd_nodes.contains(&n))
        }) {
            self.dnd_draining_steps += 1;
        }
    }

    async fn act(&mut self, snap: &Snapshot) {
        let client = self.obs.client.clone();
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
        let pools: Api<NodePool> = Api::all(client.clone());
        let roll = self.rng.below(100);
        let action: &'static str = match roll {
            0..=29 => {
                // do-not-disrupt pods change least often: they must outlive a drain's deadline.
                let (name, max, pool) = match self.rng.below(5) {
                    0 | 1 => ("web", 8, "a"),
                    2 | 3 => ("batch", 9, "b"),
                    _ => ("dnd", 2, "a"),
                };
                self.obs
                    .quiet_until
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(pool.to_string(), Instant::now() + SCALE_QUIET);
                let replicas = self.rng.below(max + 1) as i64;
                let _ = deployments
                    .patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                    )
                    .await;
                "scale"
            }
            30..=39 => {
                let pool = if self.rng.chance(50) { "a" } else { "b" };
                let generation = self.rng.below(1000).to_string();
                let _ = pools
                    .patch(
                        pool,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"gen": generation}}}}})),
                    )
                    .await;
                "drift"
            }
            40..=47 => {
                // Mostly a grace period (so drift may take do-not-disrupt and PDB-held nodes,
                // whose drain then ends at the deadline), sometimes none.
                let tgp = match self.rng.below(10) {
                    0..=4 => json!(format!("{TGP_SECONDS}s")),
                    5..=7 => json!(format!("{}s", TGP_SECONDS + 4)),
                    _ => Value::Null,
                };
                let _ = pools
                    .patch(
                        "a",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"template": {"spec": {"terminationGracePeriod": tgp}}}})),
                    )
                    .await;
                "terminationGracePeriod"
            }
            48..=59 => {
                let api = pdb_api(&client);
                if snap.pdb_allows.is_some() || self.rng.chance(30) {
                    let _ = api.delete("web", &DeleteParams::default()).await;
                } else {
                    let pdb: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
                        "metadata": {"name": "web", "namespace": NS},
                        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
                    }))
                    .expect("pdb");
                    let _ = api.create(&PostParams::default(), &pdb).await;
                }
                "pdb"
            }
            60..=71 => {
                let zones: Vec<String> = self
                    .cloud_zones()
                    .into_iter()
                    .take(1 + self.rng.below(3) as usize)
                    .collect();
                if !self.exhausted.is_empty() && self.rng.chance(60) {
                    for key in self.exhausted.drain(..) {
                        self.cloud.restore(&key);
                    }
                } else {
                    // A whole type (replacements to it fail and roll back), or some zones of
                    // the other (launches move elsewhere).
                    let it = if self.rng.chance(50) {
                        "m5.large"
                    } else {
                        "m5.xlarge"
                    };
                    let all = it == "m5.large";
                    for z in self.cloud_zones() {
                        if all || zones.contains(&z) {
                            let key = (it.to_string(), z, CapacityType::OnDemand);
                            self.cloud.exhaust(key.clone());
                            self.exhausted.push(key);
                        }
                    }
                }
                "capacity"
            }
            72..=81 => {
                self.cloud.throttle(1 + self.rng.below(4) as u32);
                "throttle"
            }
            82..=93 => {
                if let Some(p) = self.process.take() {
                    p.kill().await;
                }
                self.kills += 1;
                self.process = Some(Process::start(&self.obs, &self.cloud).await);
                "kill"
            }
            _ => {
                // A user removes a NodeClaim by force: finalizer stripped, then deleted.
                let live: Vec<&NodeClaim> = snap
                    .claims
                    .iter()
                    .filter(|c| phase(c) == Phase::Initialized)
                    .collect();
                if live.is_empty() {
                    return;
                }
                let victim = live[self.rng.below(live.len() as u64) as usize];
                if let Some(id) = victim.status.as_ref().and_then(|s| s.provider_id.clone()) {
                    self.obs
                        .forced
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id);
                }
                let api: Api<NodeClaim> = Api::all(client.clone());
                let _ = api
                    .patch(
                        &victim.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
                let _ = api
                    .delete(&victim.name_any(), &DeleteParams::default())
                    .await;
                "force-delete NodeClaim"
            }
        };
        *self.actions.entry(action).or_default() += 1;
    }

    fn cloud_zones(&self) -> Vec<String> {
        self.zones.clone()
    }

    async fn step(&mut self) -> Snapshot {
        tokio::time::sleep(STEP).await;
        self.steps += 1;
        self.obs.ledger().step = self.steps;
        let snap = self.observe().await;
        self.check(&snap);
        self.start_pods(&snap).await;
        snap
    }

    /// What keeps the run from having converged (nothing once it has): a pod not bound, a
    /// NodeClaim not initialized (or still under a disruption command, or deleting while
    /// nothing legitimately holds its drain), an orphan instance, a Node without its NodeClaim.
    fn unsettled(&self, snap: &Snapshot) -> Vec<String> {
        let now = self.obs.now();
        let mut why = Vec::new();
        for p in &snap.pods {
            if p.metadata.deletion_timestamp.is_none()
                && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()
            {
                why.push(format!("pod {} pending", p.name_any()));
            }
        }
        for c in &snap.claims {
            let state = match phase(c) {
                Phase::Initialized => c
                    .annotations()
                    .get(COMMAND_ANNOTATION)
                    .map(|cmd| format!("under command {cmd}")),
                Phase::Deleting => (!held(c, snap, now)).then(|| "deleting, not held".to_string()),
                other => Some(format!("{other:?}")),
            };
            if let Some(state) = state {
                why.push(format!("NodeClaim {} {state}", c.name_any()));
            }
        }
        for i in self.cloud.instances() {
            let owned = snap.claims.iter().any(|c| {
                c.status.as_ref().and_then(|s| s.provider_id.as_deref())
                    == Some(i.provider_id.as_str())
                    || Some(c.name_any()) == i.nodeclaim
            });
            if i.state == InstanceState::Running && !owned {
                why.push(format!("instance {} orphaned", i.provider_id));
            }
        }
        // Nodes whose NodeClaim a user removed by force are collected too.
        for n in &snap.nodes {
            let id = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            if !snap
                .claims
                .iter()
                .any(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == id)
            {
                why.push(format!("node {} without NodeClaim", n.name_any()));
            }
        }
        why
    }
}

/// Whether something legitimately holds a deleting NodeClaim's drain: before its deadline (or
/// without one), a do-not-disrupt pod on its node, or a PDB-covered pod while the PDB allows
/// no disruption.
fn held(claim: &NodeClaim, snap: &Snapshot, now: DateTime<Utc>) -> bool {
    if deadline_of(claim).is_some_and(|d| now >= d) {
        return false;
    }
    let Some(node) = claim.status.as_ref().and_then(|s| s.node_name.as_deref()) else {
        return false;
    };
    snap.pods.iter().any(|p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
            && must_move(p)
            && (p
                .annotations()
                .get("karpenter.sh/do-not-disrupt")
                .map(String::as_str)
                == Some("true")
                || (p.labels().get("app").map(String::as_str) == Some("web")
                    && snap.pdb_allows == Some(0)))
    })
}

/// Runs one seed; returns its figures.
async fn run_seed(client: &Client, seed: u64) -> (Run, usize) {
    reset(client).await;
    setup(client).await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let cloud = Arc::new(SimulatedProvider::new(catalog, clock.clone()));
    let class: EC2NodeClass = serde_json::from_value(nodeclass_json()).expect("nodeclass");
    let largest = cloud
        .instance_types(&class)
        .await
        .expect("types")
        .iter()
        .find(|t| t.name.as_ref() == "m5.xlarge")
        .map(|t| t.allocatable.get("cpu"))
        .expect("m5.xlarge");
    let obs = Arc::new(Observer {
        client: client.clone(),
        clock,
        enabled: AtomicBool::new(true),
        rng: Mutex::new(Rng(seed ^ 0x9e37_79b9_7f4a_7c15)),
        ledger: Mutex::new(Ledger::default()),
        forced: Mutex::new(HashSet::new()),
        pods_per_node: (largest / 1000) as usize,
        quiet_until: Mutex::new(HashMap::new()),
    });
    let process = Process::start(&obs, &cloud).await;
    let mut run = Run {
        seed,
        rng: Rng(seed),
        obs: obs.clone(),
        cloud: cloud.clone(),
        process: Some(process),
        tracked: HashMap::new(),
        steps: 0,
        kills: 0,
        actions: BTreeMap::new(),
        most_disrupting: BTreeMap::new(),
        exhausted: Vec::new(),
        zones: Catalog::bundled("us-east-1")
            .expect("catalog")
            .zones
            .iter()
            .map(|(z, _)| z.to_string())
            .collect(),
        orphaned: HashMap::new(),
        dnd_steps: 0,
        dnd_draining_steps: 0,
        last_step: Instant::now(),
    };
    let mut snap = run.step().await;
    for _ in 0..CHAOS_STEPS {
        if run.rng.chance(25) {
            run.act(&snap).await;
        }
        snap = run.step().await;
    }
    // Settle: faults off, capacity back; everything must converge.
    tracing::info!(seed = %format!("{seed:#x}"), step = run.steps, "harness: settle phase starts (faults off, capacity back)");
    obs.enabled.store(false, Ordering::Relaxed);
    for key in run.exhausted.drain(..) {
        cloud.restore(&key);
    }
    let mut settled_after = None;
    let mut unsettled = Vec::new();
    for i in 0..SETTLE_STEPS {
        snap = run.step().await;
        unsettled = run.unsettled(&snap);
        if unsettled.is_empty() {
            settled_after = Some(i);
            break;
        }
    }
    if settled_after.is_none() {
        obs.violation(format!(
            "seed {seed:#x}: did not settle within {SETTLE_STEPS} steps: {}",
            unsettled.join("; ")
        ));
    }
    if let Some(p) = run.process.take() {
        p.kill().await;
    }
    (run, settled_after.unwrap_or(SETTLE_STEPS))
}

#[test]
fn the_controller_stays_safe_under_kills_api_faults_and_capacity_shortages() {
    if let Ok(path) = std::env::var("KARPENTER_RS_FAULTS_LOG") {
        let file = std::fs::File::create(path).expect("log file");
        let _ = tracing_subscriber::fmt()
            .with_writer(Mutex::new(file))
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .try_init();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = Client::try_from(config().await).expect("client");
        let started = Instant::now();
        let mut totals = Ledger::default();
        let (mut steps, mut kills) = (0, 0);
        let mut actions: BTreeMap<&'static str, usize> = BTreeMap::new();
        for seed in SEEDS {
            let seed_start = Instant::now();
            let (run, settle) = run_seed(&client, seed).await;
            let ledger = std::mem::take(&mut *run.obs.ledger());
            println!(
                "seed {:#x}: {} steps ({} to settle) in {:?}, {} kills, do-not-disrupt pods running at {} steps \
                 (on a deleting node at {}), actions {:?}, faults {:?}, evictions {:?}, \
                 {} pods deleted at a terminationGracePeriod deadline ({} do-not-disrupt), {} NodeClaims \
                 provisioned, {} replacements, {} instances terminated, most nodes disrupting at once {:?}, \
                 violations {}",
                run.seed,
                run.steps,
                settle,
                seed_start.elapsed(),
                run.kills,
                run.dnd_steps,
                run.dnd_draining_steps,
                run.actions,
                ledger.faults,
                ledger.evictions,
                ledger.pod_deletions,
                ledger.protected_deletions,
                ledger.claims_created,
                ledger.replacements_created,
                ledger.instances_terminated,
                run.most_disrupting,
                ledger.violations.len()
            );
            steps += run.steps;
            kills += run.kills;
            for (k, v) in run.actions {
                *actions.entry(k).or_default() += v;
            }
            for (k, v) in ledger.faults {
                *totals.faults.entry(k).or_default() += v;
            }
            for (k, v) in ledger.evictions {
                *totals.evictions.entry(k).or_default() += v;
            }
            totals.pod_deletions += ledger.pod_deletions;
            totals.protected_deletions += ledger.protected_deletions;
            totals.claims_created += ledger.claims_created;
            totals.replacements_created += ledger.replacements_created;
            totals.instances_terminated += ledger.instances_terminated;
            totals.violations.extend(ledger.violations);
        }
        reset(&client).await;
        let faults: usize = totals.faults.values().sum();
        println!(
            "fault injection: steps={steps} kills={kills} faults={faults} {:?} actions={actions:?} \
             evictions={:?} tgp_deletions={} (do-not-disrupt {}) nodeclaims={} replacements={} \
             instances_terminated={} violations={} in {:?}",
            totals.faults,
            totals.evictions,
            totals.pod_deletions,
            totals.protected_deletions,
            totals.claims_created,
            totals.replacements_created,
            totals.instances_terminated,
            totals.violations.len(),
            started.elapsed()
        );
        assert!(steps >= 2000, "only {steps} steps");
        assert!(kills > 0 && faults > 0, "the run injected nothing");
        assert!(
            totals.violations.is_empty(),
            "{} violations:\n{}",
            totals.violations.len(),
            totals.violations.join("\n")
        );
    });
}
