//! Node termination, as upstream drains: taint the Node `karpenter.sh/disrupted:NoSchedule`,
//! evict its pods group by group (non-critical before critical, non-DaemonSet before DaemonSet)
//! through the Eviction API so PodDisruptionBudgets are honoured, wait for the volumes of the
//! drained pods to detach, and only then let the instance go; once the cloud reports it
//! terminated the Node and the NodeClaim lose their finalizers.
//!
//! A NodeClaim's `terminationGracePeriod` bounds how long this may take: the deadline
//! (deletion time + grace period) is written to `karpenter.sh/nodeclaim-termination-timestamp`
//! when deletion starts; pods are deleted early enough to finish by it (PDBs and do-not-disrupt
//! no longer count), the wait for volume detachment ends at it, and at the deadline the node is
//! terminated whatever is left.
//!
//! [`drain_step`], [`termination_deadline`] and [`blocking_attachments`] are pure (pods, volume
//! attachments and time in, what to do out); the async [`terminate`] carries the steps out and
//! records them in the NodeClaim's `Drained`, `VolumesDetached` and `InstanceTerminating`
//! conditions. Everything it needs after a crash is on the objects: the taint, the annotation,
//! the conditions, the pods' deletion timestamps.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec, Taint as K8sTaint};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::apis::NodeClaim;
use crate::apis::conditions::{self, Condition, FALSE, TRUE, UNKNOWN};
use crate::apis::nodeclaim::condition::{
    DISRUPTION_REASON, DRAINED, INSTANCE_TERMINATING, VOLUMES_DETACHED,
};
use crate::apis::{duration, labels};
use crate::cloudprovider::{CloudError, InstanceState};
use crate::metrics::METRICS;
use crate::runtime::{Context, Error};
use crate::snapshot::ClusterPod;

use super::node_of;

/// The `reason` of `karpenter_pods_drained_total` for NodeClaims deleted without a disruption
/// reason (by a user, garbage collection or liveness), as upstream labels them.
const FORCEFUL_TERMINATION: &str = "Forceful Termination";

/// Priority classes upstream drains last: the cluster cannot run without these pods.
const CRITICAL_PRIORITY_CLASSES: &[&str] = &["system-cluster-critical", "system-node-critical"];
/// Pods still terminating this long after their deletion timestamp no longer hold the drain up
/// (a kubelet that will never confirm them must not block termination forever).
const STUCK_TERMINATING: Duration = Duration::from_secs(60);
/// Annotation that marks a static (mirror) pod, which the API cannot evict.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The disruption taint: new pods stay off a node that is going away.
pub fn disrupted_taint() -> K8sTaint {
    K8sTaint {
        key: labels::DISRUPTED_TAINT_KEY.into(),
        value: None,
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

/// Whether the node carries the disruption taint.
pub fn has_disrupted_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY))
}

fn timestamp(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), 0)
}

/// When the NodeClaim's termination must be complete: its deletion time plus its
/// `terminationGracePeriod`, or `None` when it has none (or is not being deleted).
pub fn termination_deadline(claim: &NodeClaim) -> Option<DateTime<Utc>> {
    let deleted = claim
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(timestamp)?;
    let grace = claim.spec.termination_grace_period.as_ref()?.get();
    Some(duration::saturating_add(deleted, grace))
}

/// The deadline as recorded on the NodeClaim, falling back to computing it, so a deadline once
/// written survives a changed spec.
pub fn recorded_deadline(claim: &NodeClaim) -> Option<DateTime<Utc>> {
    claim
        .annotations()
        .get(labels::NODECLAIM_TERMINATION_TIMESTAMP)
        .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc))
        .or_else(|| termination_deadline(claim))
}

/// A pod as the drain sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct DrainPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Runs at `system-cluster-critical` / `system-node-critical` priority.
    pub critical: bool,
    /// Owned by a DaemonSet.
    pub daemon: bool,
    /// Carries `karpenter.sh/do-not-disrupt: "true"`.
    pub do_not_disrupt: bool,
    /// `terminationGracePeriodSeconds` (30 when unset, as the API server defaults it).
    pub grace_seconds: i64,
    /// When the pod is being deleted, the time it is due to be gone.
    pub deleting: Option<DateTime<Utc>>,
}

impl DrainPod {
    /// The drain's view of a pod, or `None` for pods the drain leaves alone: finished pods,
    /// mirror pods (the kubelet owns them) and pods that tolerate the disruption taint (they
    /// asked to stay to the end).
    pub fn from_pod(pod: &Pod) -> Option<Self> {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        Self::from_parts(
            &pod.metadata,
            pod.metadata.annotations.as_ref(),
            pod.spec.as_ref()?,
            phase,
        )
    }

    /// [`DrainPod::from_pod`] for a pod from the controller's cache, whose annotations are
    /// read through [`ClusterPod::annotations`]: the cache keeps them with the converted pod,
    /// not in its metadata.
    pub fn from_cached(pod: &ClusterPod) -> Option<Self> {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        Self::from_parts(&pod.metadata, Some(pod.annotations()), &pod.spec, phase)
    }

    fn from_parts(
        meta: &ObjectMeta,
        annotations: Option<&BTreeMap<String, String>>,
        spec: &PodSpec,
        phase: Option<&str>,
    ) -> Option<Self> {
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return None;
        }
        if annotations.is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION)) {
            return None;
        }
        let taint = disrupted_taint();
        let tolerates = spec.tolerations.iter().flatten().any(|t| {
            let key_matches = match t.key.as_deref() {
                None | Some("") => t.operator.as_deref() == Some("Exists"),
                Some(k) => k == taint.key,
            };
            let effect_matches = t
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == taint.effect);
            key_matches && effect_matches
        });
        if tolerates {
            return None;
        }
        Some(Self {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            critical: spec
                .priority_class_name
                .as_deref()
                .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c)),
            daemon: crate::snapshot::is_daemon_pod(meta),
            do_not_disrupt: annotations
                .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
                .is_some_and(|v| v == "true"),
            grace_seconds: spec.termination_grace_period_seconds.unwrap_or(30),
            deleting: meta.deletion_timestamp.as_ref().and_then(timestamp),
        })
    }

    /// Upstream's drain order: non-critical non-DaemonSet, non-critical DaemonSet, critical
    /// non-DaemonSet, critical DaemonSet.
    fn group(&self) -> u8 {
        u8::from(self.critical) * 2 + u8::from(self.daemon)
    }
}

/// What one drain pass should do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainStep {
    /// Pods to evict through the Eviction API (PDBs apply).
    pub evict: Vec<(String, String)>,
    /// Pods to delete directly with this grace period, so they end by the deadline.
    pub delete: Vec<(String, String, i64)>,
    /// Pods that hold the drain up without anything to do now (terminating, do-not-disrupt
    /// before the deadline, or in a later group).
    pub waiting: usize,
    /// Nothing left holds the node: terminate the instance.
    pub drained: bool,
}

/// Decides one drain pass over the pods on a node. Only the first group that still has pods is
/// acted on; with a `deadline`, pods are deleted `grace_seconds` before it (ignoring PDBs and
/// do-not-disrupt) and at the deadline the node counts as drained whatever remains.
pub fn drain_step(
    pods: &[DrainPod],
    deadline: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> DrainStep {
    let mut step = DrainStep::default();
    if deadline.is_some_and(|d| now >= d) {
        for p in pods.iter().filter(|p| p.deleting.is_none()) {
            step.delete.push((p.namespace.clone(), p.name.clone(), 0));
        }
        step.drained = true;
        return step;
    }
    let holding: Vec<&DrainPod> = pods
        .iter()
        .filter(|p| {
            p.deleting
                .is_none_or(|at| now < duration::saturating_add(at, STUCK_TERMINATING))
        })
        .collect();
    let Some(group) = holding.iter().map(|p| p.group()).min() else {
        step.drained = true;
        return step;
    };
    for p in holding {
        if p.group() != group || p.deleting.is_some() {
            step.waiting += 1;
            continue;
        }
        // A negative grace period (the API server raises it to 1) counts as none, so the delete
        // time is never after the deadline and the clamp below has a valid range.
        let grace = p.grace_seconds.max(0);
        let delete_at = deadline
            .map(|d| duration::saturating_sub(d, Duration::from_secs(grace.unsigned_abs())));
        match (deadline, delete_at) {
            (Some(d), Some(at)) if now >= at => {
                let left = (d - now).num_seconds().clamp(0, grace);
                step.delete
                    .push((p.namespace.clone(), p.name.clone(), left));
            }
            _ if p.do_not_disrupt => step.waiting += 1,
            _ => step.evict.push((p.namespace.clone(), p.name.clone())),
        }
    }
    step
}

/// Taints the node `karpenter.sh/disrupted:NoSchedule` and marks it for exclusion from external
/// load balancers; a no-op when both are there.
pub async fn taint_node(ctx: &Context, node: &Node) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let excluded = node
        .labels()
        .contains_key(labels::EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS);
    if has_disrupted_taint(node) && excluded {
        return Ok(());
    }
    // The cached Node lags behind the kubelet's writes; read it fresh for the conditional write.
    let node = &nodes.get(&node.name_any()).await?;
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if !has_disrupted_taint(node) {
        taints.push(disrupted_taint());
    }
    nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {
                    "labels": {labels::EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: "karpenter"},
                    "resourceVersion": node.resource_version(),
                },
                "spec": {"taints": taints},
            })),
        )
        .await?;
    Ok(())
}

/// Removes the disruption taint (a disruption that was rolled back).
pub async fn untaint_node(ctx: &Context, node: &Node) -> Result<(), Error> {
    if !has_disrupted_taint(node) {
        return Ok(());
    }
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node = &nodes.get(&node.name_any()).await?;
    let taints: Vec<K8sTaint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != labels::DISRUPTED_TAINT_KEY)
        .collect();
    nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"resourceVersion": node.resource_version()},
                "spec": {"taints": taints},
            })),
        )
        .await?;
    Ok(())
}

/// Records the termination deadline on the NodeClaim when it has a grace period and the
/// annotation is missing. Returns whether it wrote.
pub async fn record_deadline(ctx: &Context, claim: &NodeClaim) -> Result<bool, Error> {
    if claim
        .annotations()
        .contains_key(labels::NODECLAIM_TERMINATION_TIMESTAMP)
    {
        return Ok(false);
    }
    let Some(deadline) = termination_deadline(claim) else {
        return Ok(false);
    };
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    api.patch(
        &claim.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            labels::NODECLAIM_TERMINATION_TIMESTAMP: deadline.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }}})),
    )
    .await?;
    Ok(true)
}

/// The pods on a node as one drain pass reads them: what [`drain_step`] decides over, and each
/// pod's UID for the preconditions of its eviction or deletion.
struct OnNode {
    pods: Vec<DrainPod>,
    uids: HashMap<(String, String), String>,
}

impl OnNode {
    fn new<'a>(pods: impl Iterator<Item = (&'a ObjectMeta, Option<DrainPod>)>) -> Self {
        let mut on_node = Self {
            pods: Vec::new(),
            uids: HashMap::new(),
        };
        for (meta, pod) in pods {
            let Some(pod) = pod else { continue };
            if let Some(uid) = &meta.uid {
                on_node
                    .uids
                    .insert((pod.namespace.clone(), pod.name.clone()), uid.clone());
            }
            on_node.pods.push(pod);
        }
        on_node
    }

    /// From the pod cache: what every pass but the last acts on. Upstream's drain reads its
    /// informer cache too; a pod the cache has not seen yet is caught by [`OnNode::listed`].
    fn cached(ctx: &Context, node: &str) -> Self {
        let pods = cached_pods_on(ctx, node);
        Self::new(pods.iter().map(|p| (&p.metadata, DrainPod::from_cached(p))))
    }

    /// From the API server, read once before a node is declared drained: a pod bound just
    /// before the taint and not in the cache yet must not go down with the instance. Listing
    /// on every pass instead decodes every draining node's whole pods each second (16 MB at
    /// 20,000 pods with a tenth of the fleet draining).
    async fn listed(ctx: &Context, node: &str) -> Result<Self, Error> {
        let api: Api<Pod> = Api::all(ctx.client.clone());
        let pods = api
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await?
            .items;
        Ok(Self::new(
            pods.iter().map(|p| (&p.metadata, DrainPod::from_pod(p))),
        ))
    }
}

/// The cached pods bound to `node`.
fn cached_pods_on(ctx: &Context, node: &str) -> Vec<Arc<ClusterPod>> {
    let mut pods = ctx.state.pods.state();
    pods.retain(|p| p.node_name() == Some(node));
    pods
}

/// One drain pass over `node`: taint it, evict or delete what [`drain_step`] says. Returns
/// `None` once the node is drained, else how long to wait before the next pass. `confirmed`:
/// the NodeClaim already records the node as drained, so no fresh list is needed to say so
/// again.
pub async fn drain(
    ctx: &Context,
    claim: &NodeClaim,
    node: &Node,
    confirmed: bool,
) -> Result<Option<Duration>, Error> {
    taint_node(ctx, node).await?;
    let now = ctx.clock.now();
    let name = node.name_any();
    let deadline = recorded_deadline(claim);
    let mut on_node = OnNode::cached(ctx, &name);
    let mut step = drain_step(&on_node.pods, deadline, now);
    if step.drained && !confirmed {
        on_node = OnNode::listed(ctx, &name).await?;
        step = drain_step(&on_node.pods, deadline, now);
    }
    let uids = on_node.uids;
    for (ns, name, grace) in &step.delete {
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
        let params = DeleteParams {
            grace_period_seconds: u32::try_from(*grace).ok(),
            preconditions: uids
                .get(&(ns.clone(), name.clone()))
                .map(|uid| Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {
                tracing::info!(controller = "node.termination", node = %node.name_any(), pod = %format!("{ns}/{name}"), grace_seconds = grace, "deleted pod to meet the terminationGracePeriod");
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if step.drained {
        return Ok(None);
    }
    let reason = drain_reason(claim);
    let mut wait = Duration::from_secs(1);
    for (ns, name) in &step.evict {
        let key = (ns.clone(), name.clone());
        if !ctx.evictions.ready(&key, now) {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(ctx.eviction_client.clone(), ns);
        // The UID precondition: a pod recreated under the same name is not the one to evict.
        let params = EvictParams {
            delete_options: Some(DeleteParams {
                preconditions: uids.get(&key).map(|uid| Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            }),
            post_options: Default::default(),
        };
        match api.evict(name, &params).await {
            Ok(_) => {
                ctx.evictions.forget(&key);
                METRICS
                    .pods_eviction_requests_total
                    .with_label_values(&["200"])
                    .inc();
                METRICS
                    .pods_drained_total
                    .with_label_values(&[reason.as_str()])
                    .inc();
                tracing::info!(controller = "node.termination", node = %node.name_any(), pod = %format!("{ns}/{name}"), "evicted pod");
            }
            Err(kube::Error::Api(e)) => {
                METRICS
                    .pods_eviction_requests_total
                    .with_label_values(&[&e.code.to_string()])
                    .inc();
                match e.code {
                    // Gone already, or a different pod by now.
                    404 | 409 => ctx.evictions.forget(&key),
                    429 => {
                        let delay = ctx.evictions.refused(key, now);
                        tracing::info!(controller = "node.termination", node = %node.name_any(), pod = %format!("{ns}/{name}"), retry_in = ?delay, "eviction refused by a PodDisruptionBudget; retrying");
                        wait = wait.max(delay);
                    }
                    _ => return Err(kube::Error::Api(e).into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    if step.evict.is_empty() && step.delete.is_empty() {
        wait = Duration::from_secs(2);
    }
    Ok(Some(wait))
}

/// The `reason` of `karpenter_pods_drained_total`: the NodeClaim's `DisruptionReason`, else
/// upstream's label for a deletion no disruption method made.
fn drain_reason(claim: &NodeClaim) -> String {
    claim
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, DISRUPTION_REASON))
        .filter(|c| c.status == TRUE)
        .map_or_else(|| FORCEFUL_TERMINATION.to_string(), |c| c.reason.clone())
}

/// Whether the object still carries Karpenter's termination finalizer: without it there is
/// nothing left for termination to do.
pub fn has_finalizer<K: Resource>(obj: &K) -> bool {
    obj.meta()
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == labels::TERMINATION_FINALIZER)
}

/// The VolumeAttachments (by name) that still hold the node's termination: those on `node` for
/// a PersistentVolume, except the volumes of pods the drain leaves running (`kept_volumes`:
/// pods tolerating the disruption taint, mirror pods, pods stuck terminating), as upstream
/// waits only for the volumes of drained pods.
pub fn blocking_attachments(
    attachments: &[VolumeAttachment],
    node: &str,
    kept_volumes: &HashSet<String>,
) -> Vec<String> {
    attachments
        .iter()
        .filter(|va| va.spec.node_name == node)
        .filter(|va| {
            va.spec
                .source
                .persistent_volume_name
                .as_ref()
                .is_some_and(|pv| !kept_volumes.contains(pv))
        })
        .map(|va| va.name_any())
        .collect()
}

/// The PersistentVolumes of the pods on the node the drain does not evict.
fn kept_volumes(ctx: &Context, pods: &[Arc<ClusterPod>], now: DateTime<Utc>) -> HashSet<String> {
    let mut out = HashSet::new();
    for pod in pods {
        let stuck = pod
            .metadata
            .deletion_timestamp
            .as_ref()
            .and_then(timestamp)
            .is_some_and(|at| now >= duration::saturating_add(at, STUCK_TERMINATING));
        if DrainPod::from_cached(pod).is_some() && !stuck {
            continue;
        }
        let ns = pod.namespace().unwrap_or_default();
        for v in pod.spec.volumes.iter().flatten() {
            let Some(pvc) = &v.persistent_volume_claim else {
                continue;
            };
            if let Some(pv) = ctx
                .state
                .pvcs
                .get(&ObjectRef::new(&pvc.claim_name).within(&ns))
                .and_then(|c| c.spec.as_ref()?.volume_name.clone())
            {
                out.insert(pv);
            }
        }
    }
    out
}

/// The VolumeAttachments still holding the node (see [`blocking_attachments`]).
async fn pending_attachments(ctx: &Context, node: &Node) -> Result<Vec<String>, Error> {
    let api: Api<VolumeAttachment> = Api::all(ctx.client.clone());
    let attachments = api.list(&ListParams::default()).await?.items;
    let name = node.name_any();
    if !attachments.iter().any(|va| va.spec.node_name == name) {
        return Ok(Vec::new());
    }
    let pods = cached_pods_on(ctx, &name);
    let kept = kept_volumes(ctx, &pods, ctx.clock.now());
    Ok(blocking_attachments(&attachments, &name, &kept))
}

/// Brings the NodeClaim's conditions up to date with `change` (which says whether it changed
/// anything), on a fresh read and conditional on its version, so no other controller's
/// conditions are lost; retried on a conflict. A NodeClaim that is gone needs nothing.
pub async fn update_conditions(
    ctx: &Context,
    name: &str,
    change: impl Fn(&mut Vec<Condition>) -> bool,
) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut attempt = 0;
    loop {
        let Some(claim) = api.get_opt(name).await? else {
            return Ok(());
        };
        let mut conds = claim
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        if !change(&mut conds) {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"resourceVersion": claim.resource_version()},
            "status": {"conditions": conds},
        });
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 3 => attempt += 1,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

fn seconds_since(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<f64> {
    t.map(|t| (now - t).num_milliseconds().max(0) as f64 / 1000.0)
}

async fn node_event(ctx: &Context, node: &Node, reason: &str, note: &str) {
    let e = Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Terminating".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&e, &node.object_ref(&())).await {
        tracing::debug!(error = %err, "could not record event");
    }
}

/// Deletion of a NodeClaim: record the terminationGracePeriod deadline, drain the Node, wait
/// for the drained pods' volumes to detach, terminate the instance and wait until the cloud
/// reports it gone, then let the Node and the NodeClaim go. Each step is read back from the
/// objects and the cloud, so it resumes anywhere.
pub async fn terminate(claim: &NodeClaim, ctx: &Context) -> Result<Action, Error> {
    let name = claim.name_any();
    if !has_finalizer(claim) {
        return Ok(Action::await_change());
    }
    if record_deadline(ctx, claim).await? {
        return Ok(Action::requeue(Duration::ZERO));
    }
    let now = ctx.clock.now();
    let deadline = recorded_deadline(claim);
    let past_deadline = deadline.is_some_and(|d| now >= d);
    let node = node_of(ctx, claim);
    let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
    let instance = match &provider_id {
        Some(id) => match ctx.provider.get(id).await {
            Ok(instance) => Some(instance),
            Err(CloudError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        },
        None => None,
    };
    let alive = instance
        .as_ref()
        .is_some_and(|i| i.state != InstanceState::Terminated);
    let has = |type_: &str, status: &str| {
        claim
            .status
            .as_ref()
            .and_then(|s| conditions::find(&s.conditions, type_))
            .is_some_and(|c| c.status == status)
    };
    // A node whose instance is gone has nothing left to drain.
    if alive && let Some(node) = &node {
        if let Some(wait) = drain(ctx, claim, node, has(DRAINED, TRUE)).await? {
            if !has(DRAINED, UNKNOWN) {
                update_conditions(ctx, &name, |c| {
                    conditions::set(c, DRAINED, UNKNOWN, "Draining", "Draining", now)
                })
                .await?;
            }
            return Ok(Action::requeue(wait));
        }
        if !has(DRAINED, TRUE) {
            update_conditions(ctx, &name, |c| {
                conditions::set(c, DRAINED, TRUE, "", "", now)
            })
            .await?;
            let pool = node
                .labels()
                .get(labels::NODEPOOL)
                .cloned()
                .unwrap_or_default();
            METRICS
                .nodes_drained_total
                .with_label_values(&[&pool])
                .inc();
        }
        let pending = pending_attachments(ctx, node).await?;
        if !pending.is_empty() && !past_deadline {
            if !has(VOLUMES_DETACHED, UNKNOWN) {
                update_conditions(ctx, &name, |c| {
                    conditions::set(
                        c,
                        VOLUMES_DETACHED,
                        UNKNOWN,
                        "AwaitingVolumeDetachment",
                        "AwaitingVolumeDetachment",
                        now,
                    )
                })
                .await?;
                node_event(
                    ctx,
                    node,
                    "AwaitingVolumeDetachment",
                    &format!(
                        "Awaiting deletion of bound VolumeAttachments ({})",
                        pending.join(", ")
                    ),
                )
                .await;
            }
            tracing::debug!(controller = "node.termination", node = %node.name_any(), attachments = ?pending, "waiting for volumes to detach");
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        let (status, reason) = if pending.is_empty() {
            (TRUE, "")
        } else {
            (FALSE, "TerminationGracePeriodElapsed")
        };
        if !has(VOLUMES_DETACHED, status) {
            update_conditions(ctx, &name, |c| {
                conditions::set(c, VOLUMES_DETACHED, status, reason, reason, now)
            })
            .await?;
        }
    }
    if let (Some(id), Some(instance)) = (&provider_id, &instance)
        && instance.state != InstanceState::Terminated
    {
        if !instance.state.is_terminating() {
            if !has(INSTANCE_TERMINATING, TRUE) {
                update_conditions(ctx, &name, |c| {
                    conditions::set(c, INSTANCE_TERMINATING, TRUE, "", "", now)
                })
                .await?;
            }
            match ctx.provider.delete(id).await {
                Ok(()) | Err(CloudError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
            tracing::info!(controller = "nodeclaim.termination", nodeclaim = %name, provider_id = %id, "terminating instance");
        }
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let pool = claim
        .labels()
        .get(labels::NODEPOOL)
        .cloned()
        .unwrap_or_default();
    // Measured now, recorded only once the finalizer is off: a pass that started from a stale
    // cache fails the patch below (resourceVersion precondition) and must not count it twice.
    let instance_terminated_after = claim
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, INSTANCE_TERMINATING))
        .filter(|c| c.status == TRUE)
        .map(|c| seconds_since(Some(c.last_transition_time), now).unwrap_or_default());
    if let Some(node) = node {
        let started = node
            .metadata
            .deletion_timestamp
            .as_ref()
            .or(claim.metadata.deletion_timestamp.as_ref())
            .and_then(timestamp);
        remove_node(&node, ctx, started).await?;
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let finalizers: Vec<String> = claim
        .finalizers()
        .iter()
        .filter(|f| *f != labels::TERMINATION_FINALIZER)
        .cloned()
        .collect();
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": finalizers, "resourceVersion": claim.resource_version()}})),
    )
    .await?;
    if let Some(secs) = instance_terminated_after {
        METRICS
            .nodeclaims_instance_termination_duration_seconds
            .with_label_values(&[&pool])
            .observe(secs);
    }
    let label = |k: &str| claim.labels().get(k).cloned().unwrap_or_default();
    METRICS
        .nodeclaims_terminated_total
        .with_label_values(&[
            &label(labels::NODEPOOL),
            &label(labels::CAPACITY_TYPE),
            &label(labels::ZONE),
        ])
        .inc();
    if let Some(secs) = seconds_since(
        claim
            .metadata
            .deletion_timestamp
            .as_ref()
            .and_then(timestamp),
        now,
    ) {
        METRICS
            .nodeclaims_termination_duration_seconds
            .with_label_values(&[&pool])
            .observe(secs);
    }
    tracing::info!(controller = "nodeclaim.termination", nodeclaim = %name, "deleted nodeclaim");
    Ok(Action::await_change())
}

/// Takes Karpenter's finalizer off a Node, reporting its termination; `started` is when its
/// termination began (`karpenter_nodes_termination_duration_seconds`).
pub async fn release_node(
    node: &Node,
    ctx: &Context,
    started: Option<DateTime<Utc>>,
) -> Result<(), Error> {
    if !has_finalizer(node) {
        return Ok(());
    }
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let finalizers: Vec<String> = node
        .finalizers()
        .iter()
        .filter(|f| *f != labels::TERMINATION_FINALIZER)
        .cloned()
        .collect();
    match nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "finalizers": finalizers,
                "resourceVersion": node.resource_version(),
            }})),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let now = ctx.clock.now();
    let label = |k: &str| node.labels().get(k).cloned().unwrap_or_default();
    let pool = label(labels::NODEPOOL);
    METRICS
        .nodes_terminated_total
        .with_label_values(&[&pool, &label(labels::ZONE)])
        .inc();
    if let Some(secs) = seconds_since(started, now) {
        METRICS
            .nodes_termination_duration_seconds
            .observe(&[&pool], secs)
            .unwrap_or_else(|e| tracing::debug!(error = %e, "termination duration not recorded"));
    }
    if let Some(secs) = seconds_since(
        node.metadata
            .creation_timestamp
            .as_ref()
            .and_then(timestamp),
        now,
    ) {
        METRICS
            .nodes_lifetime_duration_seconds
            .with_label_values(&[&pool])
            .observe(secs);
    }
    Ok(())
}

/// Removes the Node once its instance is gone: the finalizer comes off (read fresh, so a
/// conditional write does not fail on a stale copy) and the object is deleted.
async fn remove_node(
    node: &Node,
    ctx: &Context,
    started: Option<DateTime<Utc>>,
) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let name = node.name_any();
    let Some(fresh) = nodes.get_opt(&name).await? else {
        return Ok(());
    };
    release_node(&fresh, ctx, started).await?;
    match nodes.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> DrainPod {
        DrainPod {
            namespace: "default".into(),
            name: name.into(),
            critical: false,
            daemon: false,
            do_not_disrupt: false,
            grace_seconds: 30,
            deleting: None,
        }
    }

    /// The drain reads cached pods as the cache keeps them: trimmed, their labels and
    /// annotations moved to the converted pod. A do-not-disrupt, mirror, critical or DaemonSet
    /// pod must read the same from the cache as from the API server.
    #[test]
    fn a_cached_pod_reads_as_the_api_servers() {
        let pods = [
            json!({"metadata": {"name": "dnd", "namespace": "default", "uid": "u1",
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r",
                    "uid": "rs", "controller": true}]},
                "spec": {"nodeName": "n", "terminationGracePeriodSeconds": 45,
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                "status": {"phase": "Running"}}),
            json!({"metadata": {"name": "static", "namespace": "kube-system",
                "annotations": {MIRROR_POD_ANNOTATION: "x"}},
                "spec": {"nodeName": "n", "containers": [{"name": "c"}]}}),
            json!({"metadata": {"name": "agent", "namespace": "kube-system",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d",
                    "uid": "ds", "controller": true}]},
                "spec": {"nodeName": "n", "priorityClassName": "system-node-critical",
                    "containers": [{"name": "c"}]}}),
        ];
        let mut shared = crate::state::trim::SharedSpecs::default();
        for value in pods {
            let pod: Pod = serde_json::from_value(value).expect("pod");
            let mut cached = ClusterPod::from(pod.clone());
            shared.trim(&mut cached);
            assert_eq!(
                DrainPod::from_cached(&cached),
                DrainPod::from_pod(&pod),
                "{}",
                pod.name_any()
            );
        }
    }

    fn names(v: &[(String, String)]) -> Vec<&str> {
        v.iter().map(|(_, n)| n.as_str()).collect()
    }

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).expect("time")
    }

    #[test]
    fn groups_drain_in_upstreams_order() {
        let mut pods = vec![
            DrainPod {
                critical: true,
                daemon: true,
                ..pod("crit-ds")
            },
            DrainPod {
                critical: true,
                ..pod("crit")
            },
            DrainPod {
                daemon: true,
                ..pod("ds")
            },
            pod("app"),
        ];
        let mut order = Vec::new();
        while !pods.is_empty() {
            let step = drain_step(&pods, None, t(0));
            assert!(!step.drained);
            assert_eq!(step.evict.len(), 1, "one group at a time: {step:?}");
            assert_eq!(step.waiting, pods.len() - 1);
            order.push(step.evict[0].1.clone());
            pods.retain(|p| p.name != step.evict[0].1);
        }
        assert_eq!(order, ["app", "ds", "crit", "crit-ds"]);
        assert!(drain_step(&pods, None, t(0)).drained);
    }

    #[test]
    fn terminating_pods_hold_their_group_until_stuck() {
        let pods = vec![
            DrainPod {
                deleting: Some(t(0)),
                ..pod("going")
            },
            DrainPod {
                daemon: true,
                ..pod("ds")
            },
        ];
        let step = drain_step(&pods, None, t(30));
        assert!(step.evict.is_empty() && !step.drained);
        assert_eq!(step.waiting, 2);
        let later = drain_step(&pods, None, t(61));
        assert_eq!(
            names(&later.evict),
            ["ds"],
            "stuck for over a minute: bypassed"
        );
    }

    #[test]
    fn do_not_disrupt_waits_for_the_deadline_then_is_deleted_in_time() {
        let pods = vec![
            DrainPod {
                do_not_disrupt: true,
                grace_seconds: 10,
                ..pod("precious")
            },
            pod("app"),
        ];
        let none = drain_step(&pods, None, t(0));
        assert_eq!(names(&none.evict), ["app"]);
        assert_eq!(none.waiting, 1, "without a deadline it waits forever");
        let deadline = Some(t(100));
        let early = drain_step(&pods, deadline, t(50));
        assert_eq!(names(&early.evict), ["app"]);
        assert!(early.delete.is_empty());
        // 30 s grace: due at 70; 10 s grace: due at 90.
        let at_75 = drain_step(&pods, deadline, t(75));
        assert_eq!(at_75.delete, [("default".into(), "app".into(), 25)]);
        assert_eq!(at_75.waiting, 1);
        let at_95 = drain_step(&pods, deadline, t(95));
        assert_eq!(
            at_95.delete,
            [
                ("default".into(), "precious".into(), 5),
                ("default".into(), "app".into(), 5)
            ]
        );
        assert!(!at_95.drained);
    }

    #[test]
    fn the_deadline_forces_completion() {
        let pods = vec![
            pod("app"),
            DrainPod {
                deleting: Some(t(0)),
                ..pod("going")
            },
        ];
        let step = drain_step(&pods, Some(t(10)), t(10));
        assert!(step.drained);
        assert_eq!(step.delete, [("default".into(), "app".into(), 0)]);
    }

    #[test]
    fn absurd_pod_grace_periods_neither_panic_nor_move_the_deletion_past_the_deadline() {
        let deadline = Some(t(100));
        let pods = |grace_seconds| {
            vec![DrainPod {
                do_not_disrupt: true,
                grace_seconds,
                ..pod("p")
            }]
        };
        // Longer than time itself: deleted at once, with what is left before the deadline.
        let huge = drain_step(&pods(i64::MAX), deadline, t(0));
        assert_eq!(huge.delete, [("default".into(), "p".into(), 100)]);
        // Negative counts as none: deleted at the deadline, not before, and with no grace.
        let negative = drain_step(&pods(-5), deadline, t(99));
        assert!(
            negative.delete.is_empty() && negative.waiting == 1,
            "{negative:?}"
        );
        let at = drain_step(&pods(-5), deadline, t(100));
        assert_eq!(at.delete, [("default".into(), "p".into(), 0)]);
    }

    #[test]
    fn mirror_finished_and_tolerating_pods_are_left_alone() {
        let base: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]},
            "spec": {"containers": [], "priorityClassName": "system-node-critical"},
        }))
        .expect("pod");
        let p = DrainPod::from_pod(&base).expect("drainable");
        assert!(p.critical && p.daemon && p.grace_seconds == 30);
        let mut mirror = base.clone();
        mirror.metadata.annotations =
            Some([(MIRROR_POD_ANNOTATION.to_string(), "x".to_string())].into());
        assert!(DrainPod::from_pod(&mirror).is_none());
        let mut done = base.clone();
        done.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).expect("s"));
        assert!(DrainPod::from_pod(&done).is_none());
        for toleration in [
            json!({"operator": "Exists"}),
            json!({"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"}),
        ] {
            let mut tolerant = base.clone();
            if let Some(s) = tolerant.spec.as_mut() {
                s.tolerations = Some(vec![serde_json::from_value(toleration).expect("t")]);
            }
            assert!(DrainPod::from_pod(&tolerant).is_none());
        }
        let mut other = base;
        if let Some(s) = other.spec.as_mut() {
            s.tolerations = Some(vec![
                serde_json::from_value(json!({"key": "other", "operator": "Exists"})).expect("t"),
            ]);
        }
        assert!(DrainPod::from_pod(&other).is_some());
    }

    #[test]
    fn only_attachments_of_drained_pods_volumes_hold_the_node() {
        let va = |name: &str, node: &str, pv: Option<&str>| -> VolumeAttachment {
            let mut source = json!({});
            if let Some(pv) = pv {
                source["persistentVolumeName"] = json!(pv);
            }
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": source},
            }))
            .expect("va")
        };
        let attachments = vec![
            va("drained", "n1", Some("pv-1")),
            va("kept", "n1", Some("pv-agent")),
            va("inline", "n1", None),
            va("elsewhere", "n2", Some("pv-2")),
        ];
        let kept = HashSet::from(["pv-agent".to_string()]);
        assert_eq!(blocking_attachments(&attachments, "n1", &kept), ["drained"]);
        assert!(blocking_attachments(&attachments, "n3", &kept).is_empty());
    }

    #[test]
    fn the_deadline_is_deletion_plus_grace_and_the_annotation_wins() {
        let mut claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                     "requirements": [], "terminationGracePeriod": "10m"},
        }))
        .expect("claim");
        let expected = DateTime::parse_from_rfc3339("2026-01-01T00:10:00Z").expect("t");
        assert_eq!(
            termination_deadline(&claim),
            Some(expected.with_timezone(&Utc))
        );
        claim.metadata.annotations = Some(
            [(
                labels::NODECLAIM_TERMINATION_TIMESTAMP.to_string(),
                "2026-01-01T00:05:00Z".to_string(),
            )]
            .into(),
        );
        let recorded = DateTime::parse_from_rfc3339("2026-01-01T00:05:00Z").expect("t");
        assert_eq!(
            recorded_deadline(&claim),
            Some(recorded.with_timezone(&Utc))
        );
        claim.spec.termination_grace_period = None;
        claim.metadata.annotations = None;
        assert_eq!(termination_deadline(&claim), None);
        // The longest grace Go allows is a deadline about 292 years out, not "now".
        claim.spec.termination_grace_period = Some("2562047h".parse().expect("in range"));
        let far = DateTime::parse_from_rfc3339("2318-04-12T23:00:00Z").expect("t");
        assert_eq!(termination_deadline(&claim), Some(far.with_timezone(&Utc)));
    }
}
