//! Turns unschedulable pods into NodeClaims: wait for a batch of pod events to settle (idle and
//! max windows, as upstream's batcher), snapshot the cluster, run the same scheduler `simulate`
//! runs, and create one NodeClaim per planned node.
//!
//! [`plan`] is pure (snapshot and instance types in, NodeClaim objects out) so tests and
//! `simulate` exercise exactly what the controller creates; [`Provisioner`] is the async shell.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use tokio::sync::Notify;

use crate::apis::hash;
use crate::apis::labels;
use crate::apis::nodeclaim::{NodeClaimSpec, Operator, ResourceRequirements};
use crate::apis::{EC2NodeClass, NodeClaim, NodePool};
use crate::controllers::nodepool::runtime_validate;
use crate::metrics::METRICS;
use crate::metrics::cluster_state::Series;
use crate::metrics::pod_scheduling::PodKey;
use crate::runtime::Context;
use crate::runtime::panics::guarded_pass;
use crate::scheduling::instance_type::InstanceType;
use crate::scheduling::requirements::{Requirement, Requirements};
use crate::scheduling::scheduler;
use crate::snapshot::EngineOptions;
use crate::snapshot::scheduling_input;
use crate::snapshot::{ClusterPod, Snapshot};

/// How long the provisioner waits for more pod events before it plans (`BATCH_IDLE_DURATION`),
/// and the longest a batch may grow (`BATCH_MAX_DURATION`).
#[derive(Clone, Copy, Debug)]
pub struct BatchWindow {
    /// Plan once no new event arrived for this long.
    pub idle: Duration,
    /// Plan at the latest this long after the first event.
    pub max: Duration,
}

impl Default for BatchWindow {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(1),
            max: Duration::from_secs(10),
        }
    }
}

/// What one provisioning round decided.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// NodeClaims to create (named by `generateName`).
    pub nodeclaims: Vec<NodeClaim>,
    /// Pods (`namespace/name`) no NodePool can serve, with the reason.
    pub unschedulable: Vec<(String, String)>,
    /// Pods (`namespace/name`) left out before scheduling because they cannot be read as a
    /// scheduler input (an invalid requirement, an unknown volume, ...); upstream's ignored
    /// pods. They are in `unschedulable` too, with the reason.
    pub ignored: Vec<String>,
    /// Pods the scheduler placed (on a new NodeClaim or on existing capacity).
    pub placed: Vec<PodKey>,
    /// The pods the scheduler considered, by effective zone (see [`effective_zones`]).
    pub pods_by_zone: BTreeMap<String, usize>,
    /// The UIDs of the pods planned onto each of `nodeclaims` (same order).
    pub pods_of: Vec<Vec<Arc<str>>>,
    /// Pods (UID) planned onto existing capacity, with its name (a Node's, or an in-flight
    /// NodeClaim's).
    pub on_existing: Vec<(Arc<str>, Arc<str>)>,
}

/// Plans NodeClaims for the pending pods of a snapshot, given the instance types each node
/// class offers (by EC2NodeClass name).
pub fn plan(
    cluster: &Snapshot,
    types: &HashMap<String, Arc<Vec<InstanceType>>>,
    options: &EngineOptions,
) -> Plan {
    let prepared = scheduling_input::prepare(cluster, types, options);
    let input = &prepared.input;
    let outcome = scheduler::solve(input);
    let mut out = Plan {
        pods_by_zone: effective_zones(input),
        ..Plan::default()
    };
    let mut pods_of = vec![Vec::new(); outcome.nodeclaims.len()];
    for (pod, placement) in input.pods.iter().zip(&outcome.placements) {
        let uid = Arc::clone(&pod.uid);
        match placement {
            Some(scheduler::Placement::NodeClaim(c)) => {
                if let Some(pods) = pods_of.get_mut(*c) {
                    pods.push(uid);
                }
            }
            Some(scheduler::Placement::Existing(n)) => {
                if let Some(node) = input.existing.get(*n) {
                    out.on_existing.push((uid, Arc::clone(&node.name)));
                }
            }
            None => {}
        }
    }
    for (planned, pods) in outcome.nodeclaims.iter().zip(pods_of) {
        let template = &input.nodepools[planned.nodepool];
        let Some(pool) = cluster
            .nodepools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&*template.name))
        else {
            continue;
        };
        let options: Vec<&str> = planned
            .instance_types
            .iter()
            .map(|&t| &*template.instance_types[t as usize].name)
            .collect();
        out.nodeclaims.push(nodeclaim_for(
            pool,
            cluster.nodeclass_of(pool),
            planned,
            &options,
        ));
        out.pods_of.push(pods);
    }
    for u in prepared.invalid_pods {
        out.ignored.push(u.pod.clone());
        out.unschedulable.push((u.pod, u.reason));
    }
    let mut failed = vec![false; input.pods.len()];
    for (i, reason) in outcome.errors {
        if let Some(f) = failed.get_mut(i) {
            *f = true;
        }
        out.unschedulable
            .push((input.pods[i].key(), reason.to_string()));
    }
    out.placed = input
        .pods
        .iter()
        .zip(failed)
        .filter(|(_, failed)| !failed)
        .map(|(p, _)| PodKey::of(p))
        .collect();
    out
}

/// Counts the pods of a scheduler input by effective zone
/// (`karpenter_scheduler_pending_pods_by_effective_zone_count`): the zones the round's NodePools
/// offer that a pod's requirements allow (its nodeSelector with any of its required node-affinity
/// terms, which carry its volumes' zones) — the zone itself when exactly one is left, `flexible`
/// when several are, `none` when none is, as upstream labels them.
fn effective_zones(input: &scheduler::Input) -> BTreeMap<String, usize> {
    let offered: BTreeSet<&str> = input
        .nodepools
        .iter()
        .flat_map(|pool| pool.instance_types.iter())
        .flat_map(|t| t.offerings.iter().map(|o| &*o.zone))
        .collect();
    let mut out = BTreeMap::new();
    for pod in &input.pods {
        let terms: Vec<Requirements> = if pod.required_terms.is_empty() {
            vec![Requirements::for_pod(&pod.node_selector, &[])]
        } else {
            pod.required_terms
                .iter()
                .map(|term| Requirements::for_pod(&pod.node_selector, &[term.as_slice()]))
                .collect()
        };
        let mut allowed = offered.iter().filter(|zone| {
            terms
                .iter()
                .any(|r| r.get(labels::ZONE).is_none_or(|z| z.has(zone)))
        });
        let zone = match (allowed.next(), allowed.next()) {
            (None, _) => "none",
            (Some(one), None) => one,
            (Some(_), Some(_)) => "flexible",
        };
        *out.entry(zone.to_string()).or_default() += 1;
    }
    out
}

/// Removes from a snapshot the NodePools the provisioner must not launch from, and returns each
/// with the reason: invalid pools ([`runtime_validate`]; upstream provisions only from ready
/// pools) and pools whose EC2NodeClass is being deleted (its finalizer waits for the class's
/// NodeClaims to go, so new ones would hold it forever).
pub fn drop_unusable_pools(cluster: &mut Snapshot) -> Vec<(String, String)> {
    let terminating: HashSet<String> = cluster
        .nodeclasses
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_some())
        .map(|c| c.name_any())
        .collect();
    let mut dropped = Vec::new();
    cluster.nodepools.retain(|pool| {
        let why = match runtime_validate(pool) {
            Err(e) => Some(e),
            Ok(()) => {
                let class = &pool.spec.template.spec.node_class_ref.name;
                terminating
                    .contains(class)
                    .then(|| format!("its EC2NodeClass {class:?} is being deleted"))
            }
        };
        match why {
            Some(why) => {
                dropped.push((pool.name_any(), why));
                false
            }
            None => true,
        }
    });
    dropped
}

/// The NodeClaim for a disruption replacement: the requirements the engine's simulation gave it
/// (the pool's template narrowed as its pods need, a zone say), its instance-type options and
/// capacity type, sized for the pods it will take (a
/// static pool's for none, as [`static_nodeclaim`]), built exactly as a provisioned one (so it
/// is not drifted the moment it launches).
pub(crate) fn replacement_nodeclaim(
    pool: &NodePool,
    nodeclass: Option<&EC2NodeClass>,
    replacement: &crate::disruption::Replacement,
    requests: crate::scheduling::resources::Resources,
) -> NodeClaim {
    // The simulation's requirements: the template's, narrowed as its pods needed.
    let mut requirements = replacement.requirements.clone();
    if !replacement.capacity_type.is_empty() {
        requirements.add_requirement(Requirement::new(
            labels::CAPACITY_TYPE,
            Operator::In,
            [replacement.capacity_type.as_str()],
            None,
        ));
    }
    let requests = match pool.spec.replicas {
        Some(_) => crate::scheduling::resources::Resources::default(),
        None => requests,
    };
    let planned = scheduler::PlannedNodeClaim {
        nodepool: 0,
        hostname: Arc::from(""),
        requirements,
        instance_types: Vec::new(),
        pods: Vec::new(),
        requests,
        min_values_relaxed: false,
    };
    let options: Vec<&str> = replacement
        .instance_type_options
        .iter()
        .map(String::as_str)
        .collect();
    nodeclaim_for(pool, nodeclass, &planned, &options)
}

/// The NodeClaim a static NodePool adds: its template with every requirement, no pods, and
/// every instance type those requirements allow, cheapest first (upstream's static NodeClaim);
/// `None` when no instance type of the node class fits the template.
pub(crate) fn static_nodeclaim(
    pool: &NodePool,
    nodeclass: Option<&EC2NodeClass>,
    types: &[InstanceType],
) -> Option<NodeClaim> {
    let requirements = scheduling_input::template_requirements(pool);
    let options: Vec<&str> = crate::scheduling::static_capacity::options(types, &requirements)
        .into_iter()
        .map(|it| &*it.name)
        .collect();
    if options.is_empty() {
        return None;
    }
    let planned = scheduler::PlannedNodeClaim {
        nodepool: 0,
        hostname: Arc::from(""),
        requirements,
        instance_types: Vec::new(),
        pods: Vec::new(),
        requests: crate::scheduling::resources::Resources::default(),
        min_values_relaxed: false,
    };
    Some(nodeclaim_for(pool, nodeclass, &planned, &options))
}

/// Instance types per EC2NodeClass name, as the cloud provider offers them now; node classes
/// whose types cannot be read are left out (and logged), so one broken class stops nothing else.
pub(crate) async fn instance_types(
    ctx: &Context,
    cluster: &Snapshot,
) -> HashMap<String, Arc<Vec<InstanceType>>> {
    let mut types = HashMap::new();
    for class in &cluster.nodeclasses {
        let name = class.name_any();
        match ctx.provider.instance_types(class).await {
            Ok(t) => {
                types.insert(name, t);
            }
            Err(e) => {
                tracing::warn!(ec2nodeclass = %name, error = %e, "instance types unavailable")
            }
        }
    }
    types
}

/// The NodeClaim upstream would create for a planned node: the pool's template, the planned
/// requirements narrowed to the chosen instance types, the pods' requests, the pool hash, and
/// the pool as owner (so deleting a NodePool deletes its NodeClaims).
fn nodeclaim_for(
    pool: &NodePool,
    nodeclass: Option<&EC2NodeClass>,
    planned: &scheduler::PlannedNodeClaim,
    instance_types: &[&str],
) -> NodeClaim {
    let template = &pool.spec.template;
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let mut requirements = planned.requirements.clone();
    let min_values = requirements
        .get(labels::INSTANCE_TYPE)
        .and_then(Requirement::min_values);
    requirements.add_requirement(Requirement::new(
        labels::INSTANCE_TYPE,
        Operator::In,
        instance_types.iter().copied(),
        min_values,
    ));
    let mut node_labels = template.metadata.labels.clone();
    node_labels.extend(requirements.nodeclaim_labels());
    node_labels.insert(labels::NODEPOOL.into(), pool_name.clone());
    let mut annotations = template.metadata.annotations.clone();
    annotations.insert(labels::NODEPOOL_HASH.into(), pool.static_hash());
    annotations.insert(
        labels::NODEPOOL_HASH_VERSION.into(),
        hash::NODEPOOL_HASH_VERSION.into(),
    );
    if let Some(class) = nodeclass {
        annotations.insert(labels::EC2NODECLASS_HASH.into(), class.static_hash());
        annotations.insert(
            labels::EC2NODECLASS_HASH_VERSION.into(),
            hash::NODECLASS_HASH_VERSION.into(),
        );
    }
    if planned.min_values_relaxed {
        annotations.insert(labels::NODECLAIM_MIN_VALUES_RELAXED.into(), "true".into());
    }
    let owner = OwnerReference {
        api_version: NodePool::api_version(&()).into_owned(),
        kind: NodePool::kind(&()).into_owned(),
        name: pool_name.clone(),
        uid: pool.metadata.uid.clone().unwrap_or_default(),
        block_owner_deletion: Some(true),
        controller: None,
    };
    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{pool_name}-")),
            labels: Some(node_labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            finalizers: Some(vec![labels::TERMINATION_FINALIZER.into()]),
            ..Default::default()
        },
        spec: NodeClaimSpec {
            taints: template.spec.taints.clone(),
            startup_taints: template.spec.startup_taints.clone(),
            requirements: requirements
                .to_node_selector_requirements()
                .into_iter()
                .filter(|r| r.key != labels::HOSTNAME)
                .collect(),
            resources: Some(ResourceRequirements {
                requests: Some(planned.requests.to_list()),
            }),
            node_class_ref: template.spec.node_class_ref.clone(),
            termination_grace_period: template.spec.termination_grace_period.clone(),
            expire_after: template.spec.expire_after.clone(),
        },
        status: None,
    }
}

/// Creates NodeClaims (named by `generateName`), all at once within [`CREATE_CONCURRENCY`],
/// logging and counting each; returns each one's name (in `claims`' order, `None` where the
/// creation failed) and the first failure.
pub(crate) async fn create_nodeclaims(
    ctx: &Context,
    controller: &'static str,
    claims: &[NodeClaim],
) -> (Vec<Option<String>>, Option<kube::Error>) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let results: Vec<Result<NodeClaim, kube::Error>> =
        futures::stream::iter(claims.iter().cloned())
            .map(|claim| {
                let api = api.clone();
                async move { api.create(&PostParams::default(), &claim).await }
            })
            .buffered(CREATE_CONCURRENCY)
            .collect()
            .await;
    let mut created = Vec::with_capacity(results.len());
    let mut failed = None;
    for result in results {
        match result {
            Ok(made) => {
                let name = made.name_any();
                tracing::info!(
                    controller,
                    nodeclaim = %name,
                    nodepool = %made.labels().get(labels::NODEPOOL).cloned().unwrap_or_default(),
                    requests = ?made.spec.resources.as_ref().and_then(|r| r.requests.as_ref()),
                    "created nodeclaim"
                );
                crate::metrics::count_nodeclaim_created("provisioned", &made);
                created.push(Some(name));
            }
            Err(e) => {
                tracing::warn!(controller, error = %e, "could not create nodeclaim");
                created.push(None);
                if failed.is_none() {
                    failed = Some(e);
                }
            }
        }
    }
    (created, failed)
}

/// Waits (up to ten seconds) until the cache holds the NodeClaims just created, so the next
/// round counts them instead of creating them again.
pub(crate) async fn wait_until_cached(ctx: &Context, created: &[Option<String>]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !created.iter().flatten().all(|n| {
        ctx.state
            .nodeclaims
            .get(&kube::runtime::reflector::ObjectRef::new(n))
            .is_some()
    }) && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long a `FailedScheduling` event about a pod stands before the provisioner repeats it
/// (upstream's dedupe timeout for the event). Every round plans every pending pod again; without
/// this, a thousand pods no NodePool can serve cost a thousand event writes per round.
const FAILED_SCHEDULING_DEDUPE: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// Records a round in the pod scheduling times: every pending pod but the ignored ones was seen
/// at `seen` (when the round started); the scheduler placed some and not the others. The first
/// decision about a pod is timed in `karpenter_pods_scheduling_decision_duration_seconds`.
fn record_decisions(ctx: &Context, pending: &[PodKey], plan: &Plan, seen: DateTime<Utc>) {
    let ignored: HashSet<(&str, &str)> = plan
        .ignored
        .iter()
        .filter_map(|key| key.split_once('/'))
        .collect();
    let placed: HashSet<&PodKey> = plan.placed.iter().collect();
    let considered = pending.iter().filter(|p| !ignored.contains(&p.parts()));
    ctx.pod_scheduling.ack(considered.clone(), seen);
    let failed = considered.filter(|p| !placed.contains(p));
    for seconds in ctx
        .pod_scheduling
        .decide(placed.iter().copied(), failed, ctx.clock.now())
    {
        METRICS
            .pods_scheduling_decision_duration_seconds
            .observe(seconds);
    }
}

/// Where a round planned its pods, as (pod UID, capacity name) nominations: on the NodeClaims
/// it created (`created`, in the plan's order; `None` for one whose create failed) and on
/// existing capacity.
fn placements<'a>(
    plan: &'a Plan,
    created: &'a [Option<String>],
) -> impl Iterator<Item = (Arc<str>, Arc<str>)> + 'a {
    let on_new = created
        .iter()
        .zip(&plan.pods_of)
        .filter_map(|(name, pods)| Some((Arc::<str>::from(name.as_deref()?), pods)))
        .flat_map(|(name, pods)| {
            pods.iter()
                .map(move |uid| (Arc::clone(uid), Arc::clone(&name)))
        });
    on_new.chain(plan.on_existing.iter().cloned())
}

/// Identifies scheduling rounds in `karpenter_scheduler_queue_depth` and
/// `_unfinished_work_seconds` (upstream's `scheduling_id`).
static ROUNDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A provisioning round's scheduling simulation while it runs: its pods in
/// `karpenter_scheduler_queue_depth` and the seconds it has taken so far in
/// `karpenter_scheduler_unfinished_work_seconds` (refreshed every second from another task, since
/// the simulation holds its thread), both removed when the round ends. The solver does not report
/// progress, so the depth is the round's pods until it ends.
struct Round {
    id: String,
    ticker: tokio::task::JoinHandle<()>,
}

impl Round {
    fn start(pods: usize) -> Self {
        let id = ROUNDS
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_string();
        let labels = ["provisioner", id.as_str()];
        METRICS
            .scheduler_queue_depth
            .with_label_values(&labels)
            .set(pods as f64);
        let unfinished = METRICS
            .scheduler_unfinished_work_seconds
            .with_label_values(&labels);
        unfinished.set(0.0);
        let started = std::time::Instant::now();
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                unfinished.set(started.elapsed().as_secs_f64());
            }
        });
        Self { id, ticker }
    }
}

impl Drop for Round {
    fn drop(&mut self) {
        self.ticker.abort();
        let labels = ["provisioner", self.id.as_str()];
        // Present since `start`; nothing else removes them.
        let _ = METRICS.scheduler_queue_depth.remove_label_values(&labels);
        let _ = METRICS
            .scheduler_unfinished_work_seconds
            .remove_label_values(&labels);
    }
}

/// NodeClaim creations in flight at once: enough to keep the client's QPS budget busy at a
/// round-trip of tens of milliseconds, few enough not to queue hundreds of requests behind it.
const CREATE_CONCURRENCY: usize = 32;

/// The provisioning loop of the running controller.
pub struct Provisioner {
    ctx: Arc<Context>,
    window: BatchWindow,
    /// When a `FailedScheduling` event was last published, by pod UID; entries older than
    /// [`FAILED_SCHEDULING_DEDUPE`] are dropped.
    reported: Mutex<HashMap<String, DateTime<Utc>>>,
    /// The task publishing the last round's `FailedScheduling` events. Rounds do not wait for
    /// it: thousands of pods no NodePool serves are thousands of event writes, which would hold
    /// the next round (and the NodeClaims it creates) back for as long as the QPS budget takes.
    /// One such task at a time; a round that finds it still busy leaves its pods due.
    reporting: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Provisioner {
    /// A provisioner acting through `ctx`.
    pub fn new(ctx: Arc<Context>, window: BatchWindow) -> Self {
        Self {
            ctx,
            window,
            reported: Mutex::default(),
            reporting: Mutex::default(),
        }
    }

    /// Runs until the task is dropped: batch, plan, create, repeat. Rounds also start every
    /// ten seconds while pods are pending, so pods whose NodeClaim failed get another one.
    pub async fn run(self) {
        self.ctx.state.wait_synced().await;
        // The round-duration series exists (empty) from the start, so the first round is an
        // increase `rate()` sees: pods that all fit in one round would otherwise leave the
        // scheduling-duration panels empty (a series first scraped at 1 never rises).
        let _ = METRICS
            .scheduler_scheduling_duration_seconds
            .with_label_values(&["provisioner"]);
        let changed = self.ctx.state.changed.clone();
        loop {
            wait_for_batch(&changed, self.window).await;
            let round = guarded_pass("provisioner", &self.ctx, self.provision_once()).await;
            if let Some(Err(e)) = round {
                tracing::error!(controller = "provisioner", error = %e, "provisioning failed; will retry");
            }
        }
    }

    /// One round: snapshot, plan, create NodeClaims, report unschedulable pods. Returns the
    /// number of NodeClaims created.
    pub async fn provision_once(&self) -> anyhow::Result<usize> {
        let ctx = &self.ctx;
        let mut cluster = ctx.state.snapshot();
        for (pool, why) in drop_unusable_pools(&mut cluster) {
            tracing::debug!(controller = "provisioner", nodepool = %pool, reason = %why, "not provisioning from nodepool");
        }
        ctx.nominations.apply(&mut cluster, ctx.clock.now());
        if cluster.pending_pods().is_empty() {
            METRICS
                .scheduler_unschedulable_pods_count
                .with_label_values(&["provisioner"])
                .set(0.0);
            METRICS.scheduler_ignored_pods_count.set(0.0);
            publish_zones(&BTreeMap::new());
            return Ok(0);
        }
        let types = instance_types(ctx, &cluster).await;
        let pending: Vec<PodKey> = cluster
            .pending_pods()
            .iter()
            .map(|p| PodKey::of_cached(p))
            .collect();
        let seen = ctx.clock.now();
        let started = std::time::Instant::now();
        let plan = {
            let _round = Round::start(pending.len());
            plan(&cluster, &types, &ctx.options)
        };
        let took = started.elapsed();
        METRICS
            .scheduler_scheduling_duration_seconds
            .with_label_values(&["provisioner"])
            .observe(took.as_secs_f64());
        if !plan.nodeclaims.is_empty() {
            tracing::info!(
                controller = "provisioner",
                nodeclaims = plan.nodeclaims.len(),
                pods = pending.len(),
                duration = ?took,
                "computed new nodeclaim(s) to fit pod(s)"
            );
        }
        METRICS
            .scheduler_unschedulable_pods_count
            .with_label_values(&["provisioner"])
            .set(plan.unschedulable.len() as f64);
        METRICS
            .scheduler_ignored_pods_count
            .set(plan.ignored.len() as f64);
        record_decisions(ctx, &pending, &plan, seen);
        publish_zones(&plan.pods_by_zone);
        // NodeClaims first, all at once (the client's QPS limit paces them): capacity is what
        // the pods wait for; the events about pods no NodePool can serve come after.
        let (created, failed) = create_nodeclaims(ctx, "provisioner", &plan.nodeclaims).await;
        ctx.nominations.remember(placements(&plan, &created), seen);
        self.report_unschedulable(&cluster, &plan.unschedulable);
        // The next round must see these NodeClaims as in-flight capacity, or it would plan the
        // same pods again.
        wait_until_cached(ctx, &created).await;
        match failed {
            Some(e) => Err(anyhow::anyhow!(
                "created {} of {} nodeclaims; the first failure: {e}",
                created.iter().flatten().count(),
                plan.nodeclaims.len()
            )),
            None => Ok(created.len()),
        }
    }

    /// The unschedulable pods of a round whose `FailedScheduling` event is due: not published
    /// within [`FAILED_SCHEDULING_DEDUPE`]. Marks them published.
    fn not_reported_lately<'a>(
        &self,
        cluster: &'a Snapshot,
        unschedulable: &'a [(String, String)],
    ) -> Vec<(&'a ClusterPod, &'a str)> {
        let now = self.ctx.clock.now();
        let by_key: HashMap<(&str, &str), &ClusterPod> = cluster
            .pods
            .iter()
            .filter_map(|p| {
                Some((
                    (
                        p.metadata.namespace.as_deref()?,
                        p.metadata.name.as_deref()?,
                    ),
                    p.as_ref(),
                ))
            })
            .collect();
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        reported.retain(|_, at| now - *at < FAILED_SCHEDULING_DEDUPE);
        unschedulable
            .iter()
            .filter_map(|(key, reason)| {
                let pod = *by_key.get(&key.split_once('/')?)?;
                let uid = pod.metadata.uid.clone().unwrap_or_else(|| key.clone());
                if reported.contains_key(&uid) {
                    return None;
                }
                reported.insert(uid, now);
                Some((pod, reason.as_str()))
            })
            .collect()
    }

    /// Waits until the last round's `FailedScheduling` events are published (or their task
    /// failed): what a caller that reads the events right after a round needs.
    pub async fn events_published(&self) {
        let task = self
            .reporting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Publishes the `FailedScheduling` events that are due in a task of their own, unless the
    /// previous round's are still being published (then they stay due for a later round).
    fn report_unschedulable(&self, cluster: &Snapshot, unschedulable: &[(String, String)]) {
        let mut reporting = self.reporting.lock().unwrap_or_else(|e| e.into_inner());
        if reporting.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let due: Vec<(ObjectReference, String, String)> = self
            .not_reported_lately(cluster, unschedulable)
            .into_iter()
            .map(|(pod, reason)| (pod.object_ref(&()), pod_key(pod), reason.to_string()))
            .collect();
        if due.is_empty() {
            return;
        }
        let ctx = self.ctx.clone();
        *reporting = Some(tokio::spawn(async move {
            for (reference, key, reason) in due {
                publish_unschedulable(&ctx, &reference, &key, &reason).await;
            }
        }));
    }
}

/// `namespace/name` of a cached pod.
fn pod_key(pod: &ClusterPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Logs why a pod could not be scheduled and publishes it as the pod's `FailedScheduling` event.
async fn publish_unschedulable(
    ctx: &Context,
    reference: &ObjectReference,
    pod_key: &str,
    reason: &str,
) {
    tracing::info!(controller = "provisioner", pod = %pod_key, reason, "could not schedule pod");
    let event = Event {
        type_: EventType::Warning,
        reason: "FailedScheduling".into(),
        note: Some(truncate(&format!("Failed to schedule pod, {reason}"), 1000)),
        action: "Provisioning".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, reference).await {
        tracing::warn!(pod = %pod_key, error = %e, "could not record event");
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Waits for a batch: the first change, then until no change arrived for `idle` or `max` has
/// passed since the first. A ten-second tick starts a batch too, so pending pods are retried.
pub async fn wait_for_batch(changed: &Notify, window: BatchWindow) {
    let _ = tokio::time::timeout(Duration::from_secs(10), changed.notified()).await;
    let start = tokio::time::Instant::now();
    loop {
        let elapsed = start.elapsed();
        if elapsed >= window.max {
            return;
        }
        let wait = window.idle.min(window.max - elapsed);
        if tokio::time::timeout(wait, changed.notified())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Sets `karpenter_scheduler_pending_pods_by_effective_zone_count` to a round's counts.
fn publish_zones(by_zone: &BTreeMap<String, usize>) {
    let series: Vec<Series> = by_zone
        .iter()
        .map(|(zone, n)| Series::new(["provisioner", zone.as_str()], *n as f64))
        .collect();
    METRICS
        .scheduler_pending_pods_by_effective_zone_count
        .publish(series);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_round_shows_its_pods_and_time_while_it_runs_and_nothing_after() {
        let round = Round::start(7);
        let id = round.id.clone();
        // No other round has this ID: its series are this round's.
        let depth = METRICS
            .scheduler_queue_depth
            .with_label_values(&["provisioner", &id]);
        assert_eq!(depth.get(), 7.0);
        assert_eq!(
            METRICS
                .scheduler_unfinished_work_seconds
                .with_label_values(&["provisioner", &id])
                .get(),
            0.0
        );
        drop(round);
        let text = crate::metrics::encode();
        assert!(
            !text.contains(&format!("scheduling_id=\"{id}\"")),
            "the round's series are gone: {text}"
        );
    }

    fn pool(name: &str, class: &str, taints: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class},
                "requirements": [],
                "taints": taints,
            }}},
        }))
        .expect("pool")
    }

    fn class(name: &str, deleting: bool) -> EC2NodeClass {
        let mut class: EC2NodeClass = serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": name},
            "spec": {
                "role": "r",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                "securityGroupSelectorTerms": [{"tags": {"k": "v"}}],
            },
        }))
        .expect("class");
        if deleting {
            class.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).expect("time"),
                ));
        }
        class
    }

    #[test]
    fn invalid_pools_and_pools_of_a_deleted_class_are_not_provisioned_from() {
        let twice = json!([
            {"key": "a", "effect": "NoSchedule"},
            {"key": "a", "effect": "NoSchedule"},
        ]);
        let mut cluster = Snapshot {
            nodepools: vec![
                Arc::new(pool("good", "default", json!([]))),
                Arc::new(pool("invalid", "default", twice)),
                Arc::new(pool("leaving", "old", json!([]))),
            ],
            nodeclasses: vec![
                Arc::new(class("default", false)),
                Arc::new(class("old", true)),
            ],
            ..Snapshot::default()
        };
        let dropped = drop_unusable_pools(&mut cluster);
        let kept: Vec<String> = cluster.nodepools.iter().map(|p| p.name_any()).collect();
        assert_eq!(kept, ["good"]);
        assert_eq!(dropped.len(), 2);
        assert_eq!(dropped[0].0, "invalid");
        assert!(
            dropped[0].1.contains("appears more than once"),
            "{}",
            dropped[0].1
        );
        assert_eq!(
            dropped[1],
            (
                "leaving".into(),
                "its EC2NodeClass \"old\" is being deleted".into()
            )
        );
    }
}
