//! NodePool status: how many nodes and how much capacity the pool has (what `limits` are checked
//! against and what dashboards show), whether the pool is valid and its node class ready, and
//! the hash annotations drift detection compares NodeClaims with.
//!
//! An invalid NodePool is reported in its conditions and events and otherwise left alone: it
//! never crashes the controller and never causes capacity to be deleted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, future, stream};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::apis::conditions::READY;
use crate::apis::conditions::{self, FALSE, TRUE};
use crate::apis::hash;
use crate::apis::nodeclaim::Operator;
use crate::apis::nodepool::NodePoolStatus;
use crate::apis::nodepool::condition::{
    NODE_CLASS_READY, NODE_REGISTRATION_HEALTHY, VALIDATION_SUCCEEDED,
};
use crate::apis::{EC2NodeClass, NodeClaim, NodePool, labels};
use crate::metrics::METRICS;
use crate::runtime::untyped;
use crate::runtime::{Context, Error};
use crate::scheduling::resources::{Resources, parse_quantity};

/// `ValidationSucceeded=False`'s reason, as upstream's.
const VALIDATION_FAILED: &str = "NodePoolValidationFailed";
/// The event an invalid pool gets.
const FAILED_VALIDATION_EVENT: &str = "FailedValidation";
/// `Ready=False`'s reason when a condition it depends on is false.
const UNHEALTHY_DEPENDENTS: &str = "UnhealthyDependents";
/// `Ready=False`'s message when the pool is invalid.
const READY_NOT_VALID: &str = "ValidationSucceeded=False";

/// Runs the NodePool controller until the stream ends. NodePools are watched untyped and read
/// one at a time, so one the controller cannot read is reported while the others are served.
pub async fn run(ctx: Arc<Context>) {
    let pools = ctx.state.nodepools.clone();
    let claims = ctx.state.nodeclaim_changes.subscribe().filter_map(|claim| {
        future::ready(
            claim
                .labels()
                .get(labels::NODEPOOL)
                .map(|p| untyped::trigger::<NodePool>("nodepool", p)),
        )
    });
    let classes = ctx
        .state
        .nodeclass_changes
        .subscribe()
        .flat_map(move |class| {
            let name = class.name_any();
            stream::iter(
                pools
                    .state()
                    .iter()
                    .filter(|p| p.spec.template.spec.node_class_ref.name == name)
                    .map(|p| untyped::trigger::<NodePool>("nodepool", &p.name_any()))
                    .collect::<Vec<_>>(),
            )
        });
    let reconciles = untyped::controller::<NodePool>("nodepool", &ctx)
        .reconcile_on(claims)
        .reconcile_on(classes)
        .run(
            |p, ctx| untyped::reconcile("nodepool", p, ctx, reconcile, unreadable),
            error_policy,
            ctx,
        );
    untyped::drive("nodepool", reconciles).await;
}

fn error_policy(pool: Arc<DynamicObject>, error: &Error, _ctx: Arc<Context>) -> Action {
    crate::runtime::retry_later("nodepool", &pool.name_any(), error)
}

/// `status.resources` (capacity summed over the pool's launched NodeClaims, plus `nodes`) and
/// `status.nodes`.
pub fn pool_usage(
    pool: &str,
    claims: &[Arc<NodeClaim>],
) -> (
    BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    i64,
) {
    let mut total = Resources::default();
    let mut nodes = 0;
    for c in claims {
        if c.labels().get(labels::NODEPOOL).map(String::as_str) != Some(pool) {
            continue;
        }
        let Some(capacity) = c.status.as_ref().and_then(|s| s.capacity.as_ref()) else {
            continue;
        };
        if let Ok(r) = Resources::from_list(capacity) {
            total.add(&r);
        }
        nodes += 1;
    }
    let mut list = total.to_list();
    list.insert(
        "nodes".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity(nodes.to_string()),
    );
    (list, nodes)
}

/// The capacity types Karpenter can launch, the only values a `karpenter.sh/capacity-type`
/// requirement can usefully allow.
const CAPACITY_TYPES: &[&str] = &["on-demand", "spot", "reserved"];

/// Every reason a NodePool cannot be used, or `Ok`: the API server's rules once more (a pool
/// stored before a rule existed is not checked again on upgrade) and upstream's runtime checks
/// the CRD cannot express — a taint key and effect repeated across `taints` and `startupTaints`
/// (a Node cannot carry both, so such nodes could never register), and a
/// `karpenter.sh/capacity-type` requirement none of whose values can be launched (or fewer than
/// its `minValues`). An invalid pool gets `ValidationSucceeded=False` and is not used to
/// provision.
pub fn runtime_validate(pool: &NodePool) -> Result<(), String> {
    let mut problems: Vec<String> = Vec::new();
    if let Err(e) = pool.validate() {
        problems.extend(e.problems.iter().map(ToString::to_string));
    }
    let spec = &pool.spec.template.spec;
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (field, taints) in [
        ("taints", &spec.taints),
        ("startupTaints", &spec.startup_taints),
    ] {
        for t in taints {
            let pair = (t.key.as_str(), t.effect.as_str());
            if seen.contains(&pair) {
                problems.push(format!(
                    "spec.template.spec.{field}: taint {}:{} appears more than once across taints and startupTaints; keep one",
                    pair.0, pair.1
                ));
            } else {
                seen.push(pair);
            }
        }
    }
    for (resource, quantity) in pool.spec.limits.iter().flatten() {
        if let Err(e) = parse_quantity(resource, &quantity.0) {
            problems.push(format!(
                "spec.limits.{resource}: {e}; give a whole amount such as \"100\" or \"1000Gi\""
            ));
        }
    }
    for r in &spec.requirements {
        if r.key != labels::CAPACITY_TYPE || r.operator != Operator::In {
            continue;
        }
        let known = r
            .values
            .iter()
            .filter(|v| CAPACITY_TYPES.contains(&v.as_str()))
            .count();
        let needed = r.min_values.unwrap_or(1).max(1);
        if (known as i64) < needed {
            problems.push(format!(
                "spec.template.spec.requirements: {} In {:?} allows {known} capacity type(s) Karpenter can launch, {needed} needed; use {}",
                r.key,
                r.values,
                CAPACITY_TYPES.join(", ")
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "NodePool {} is invalid: {}",
            pool.name_any(),
            problems.join("; ")
        ))
    }
}

/// One reconcile of a NodePool: hash, usage, conditions. Public so the in-memory controller tests
/// can drive it.
pub async fn reconcile(pool: Arc<NodePool>, ctx: Arc<Context>) -> Result<Action, Error> {
    if pool.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    let name = pool.name_any();
    let now = ctx.clock.now();

    let hash = pool.static_hash();
    // The stamped object is the newest there is: the status below starts from it, and its
    // version makes the status write conditional.
    let pool = if pool.annotations().get(labels::NODEPOOL_HASH) != Some(&hash)
        || pool
            .annotations()
            .get(labels::NODEPOOL_HASH_VERSION)
            .map(String::as_str)
            != Some(hash::NODEPOOL_HASH_VERSION)
    {
        Arc::new(
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    labels::NODEPOOL_HASH: hash,
                    labels::NODEPOOL_HASH_VERSION: hash::NODEPOOL_HASH_VERSION,
                }}})),
            )
            .await?,
        )
    } else {
        pool
    };

    let mut status: NodePoolStatus = pool.status.clone().unwrap_or_default();
    let before = status.clone();
    let (resources, nodes) = pool_usage(&name, &ctx.state.nodeclaims.state());
    for (resource, amount) in &resources {
        if let Ok(r) = Resources::from_list(&BTreeMap::from([(resource.clone(), amount.clone())])) {
            METRICS
                .nodepools_usage
                .with_label_values(&[resource, &name])
                .set(r.get(resource) as f64 / if resource == "cpu" { 1000.0 } else { 1.0 });
        }
    }
    if let Some(limits) = pool.spec.limits.as_ref()
        && let Ok(l) = Resources::from_list(limits)
    {
        for (resource, amount) in l.iter() {
            METRICS
                .nodepools_limit
                .with_label_values(&[resource, &name])
                .set(amount as f64 / if resource == "cpu" { 1000.0 } else { 1.0 });
        }
    }
    status.resources = Some(resources);
    status.nodes = Some(nodes);

    let validation = runtime_validate(&pool);
    match &validation {
        Ok(()) => {
            conditions::set(
                &mut status.conditions,
                VALIDATION_SUCCEEDED,
                TRUE,
                "",
                "",
                now,
            );
        }
        Err(msg) => {
            if conditions::set(
                &mut status.conditions,
                VALIDATION_SUCCEEDED,
                FALSE,
                VALIDATION_FAILED,
                msg,
                now,
            ) {
                publish(&ctx, &pool.object_ref(&()), FAILED_VALIDATION_EVENT, msg).await;
                tracing::warn!(controller = "nodepool", nodepool = %name, error = %msg, "invalid nodepool");
            }
        }
    }
    let class = ctx.state.nodeclasses.get(&ObjectRef::new(
        &pool.spec.template.spec.node_class_ref.name,
    ));
    let (class_ready, class_reason, class_message) = match &class {
        None => (
            false,
            "NodeClassNotFound",
            format!(
                "EC2NodeClass {:?} not found",
                pool.spec.template.spec.node_class_ref.name
            ),
        ),
        Some(c) => {
            status.node_class_observed_generation = c.metadata.generation;
            if c.metadata.deletion_timestamp.is_some() {
                (
                    false,
                    "NodeClassTerminating",
                    format!("EC2NodeClass {:?} is being deleted", c.name_any()),
                )
            } else if c
                .status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.conditions, READY))
            {
                (true, "", String::new())
            } else {
                (
                    false,
                    "NodeClassNotReady",
                    format!("EC2NodeClass {:?} is not ready", c.name_any()),
                )
            }
        }
    };
    if let Some(c) = &class {
        reset_registration_health(&ctx, &pool, &mut status, &before, c, now);
    }
    if class_ready {
        conditions::set(&mut status.conditions, NODE_CLASS_READY, TRUE, "", "", now);
    } else if conditions::set(
        &mut status.conditions,
        NODE_CLASS_READY,
        FALSE,
        class_reason,
        &class_message,
        now,
    ) {
        publish(&ctx, &pool.object_ref(&()), class_reason, &class_message).await;
        tracing::warn!(controller = "nodepool", nodepool = %name, reason = class_reason, message = %class_message, "nodepool cannot launch");
    }
    if validation.is_ok() && class_ready {
        conditions::set(&mut status.conditions, READY, TRUE, "", "", now);
    } else {
        let msg = if validation.is_err() {
            READY_NOT_VALID
        } else {
            "NodeClassReady=False"
        };
        conditions::set(
            &mut status.conditions,
            READY,
            FALSE,
            UNHEALTHY_DEPENDENTS,
            msg,
            now,
        );
    }
    if status != before {
        // Conditional on the version read: the conditions list is replaced whole, and the NodeClaim
        // lifecycle writes `NodeRegistrationHealthy` into it too (`nodeclaim::registration_health`,
        // conditional the same way). A copy older than that write must not put the old
        // condition back; the next reconcile starts from the newer object.
        let patch = json!({
            "metadata": {"resourceVersion": pool.resource_version()},
            "status": status,
        });
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// Whether `NodeRegistrationHealthy` in `status` (as read) no longer speaks for the pool: it is
/// missing, was written for another generation of the NodePool, or the EC2NodeClass changed
/// since.
fn registration_health_stale(
    status: &NodePoolStatus,
    pool_generation: Option<i64>,
    class_generation: Option<i64>,
) -> bool {
    conditions::find(&status.conditions, NODE_REGISTRATION_HEALTHY)
        .is_none_or(|c| c.observed_generation != pool_generation)
        || status.node_class_observed_generation != class_generation
}

/// Resets `NodeRegistrationHealthy` to `Unknown`, and the pool's recent registration outcomes
/// with it, when the condition is missing or the NodePool or its EC2NodeClass changed since it
/// was written (upstream's `nodepool.registrationhealth`): outcomes from before a fix say nothing
/// of the pool now.
fn reset_registration_health(
    ctx: &Context,
    pool: &NodePool,
    status: &mut NodePoolStatus,
    before: &NodePoolStatus,
    class: &EC2NodeClass,
    now: chrono::DateTime<chrono::Utc>,
) {
    let generation = pool.metadata.generation;
    if !registration_health_stale(before, generation, class.metadata.generation) {
        return;
    }
    conditions::set(
        &mut status.conditions,
        NODE_REGISTRATION_HEALTHY,
        conditions::UNKNOWN,
        "AwaitingReconciliation",
        "object is awaiting reconciliation",
        now,
    );
    if let Some(c) = status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == NODE_REGISTRATION_HEALTHY)
    {
        c.observed_generation = generation;
    }
    if let Some(uid) = pool.metadata.uid.as_deref() {
        ctx.registration_health.reset(uid);
    }
}

/// A NodePool the controller cannot read (a value the CRD pattern admits but Karpenter cannot
/// use, such as an `expireAfter` beyond Go's range): `ValidationSucceeded=False` and
/// `Ready=False` naming the field and the fix, and a `FailedValidation` event when that is new.
/// It is in no cache, so nothing provisions from it or disrupts for it until it is fixed.
async fn unreadable(
    object: Arc<DynamicObject>,
    why: String,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if object.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = object.name_any();
    let now = ctx.clock.now();
    let mut current: Vec<conditions::Condition> = object
        .data
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    let msg = format!("NodePool {name} is invalid: {why}");
    let invalid = conditions::set(
        &mut current,
        VALIDATION_SUCCEEDED,
        FALSE,
        VALIDATION_FAILED,
        &msg,
        now,
    );
    let unready = conditions::set(
        &mut current,
        READY,
        FALSE,
        UNHEALTHY_DEPENDENTS,
        READY_NOT_VALID,
        now,
    );
    if invalid {
        let resource = untyped::resource::<NodePool>();
        publish(
            &ctx,
            &object.object_ref(&resource),
            FAILED_VALIDATION_EVENT,
            &msg,
        )
        .await;
    }
    if invalid || unready {
        Api::<DynamicObject>::all_with(ctx.client.clone(), &untyped::resource::<NodePool>())
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": current}})),
            )
            .await?;
    }
    Ok(Action::await_change())
}

async fn publish(ctx: &Context, pool: &ObjectReference, reason: &str, note: &str) {
    let e = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Validate".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&e, pool).await {
        tracing::debug!(error = %err, "could not record event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(extra: serde_json::Value) -> NodePool {
        let mut spec = json!({
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "p"},
            "spec": {"template": {"spec": spec}},
        }))
        .expect("pool")
    }

    #[test]
    fn registration_health_is_stale_when_missing_or_the_pool_or_its_class_changed() {
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("t");
        let mut status = NodePoolStatus {
            node_class_observed_generation: Some(3),
            ..NodePoolStatus::default()
        };
        assert!(
            registration_health_stale(&status, Some(2), Some(3)),
            "missing"
        );
        conditions::set(
            &mut status.conditions,
            NODE_REGISTRATION_HEALTHY,
            TRUE,
            "",
            "",
            now,
        );
        status.conditions[0].observed_generation = Some(2);
        assert!(!registration_health_stale(&status, Some(2), Some(3)));
        assert!(
            registration_health_stale(&status, Some(4), Some(3)),
            "pool changed"
        );
        assert!(
            registration_health_stale(&status, Some(2), Some(5)),
            "class changed"
        );
    }

    #[test]
    fn a_plain_pool_is_valid() {
        assert_eq!(runtime_validate(&pool(json!({}))), Ok(()));
        let pool = pool(json!({
            "taints": [{"key": "gpu", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "gpu", "effect": "NoExecute"}],
        }));
        assert_eq!(runtime_validate(&pool), Ok(()));
    }

    #[test]
    fn repeated_taints_pass_the_crd_but_not_runtime_validation() {
        let pool = pool(json!({
            "taints": [{"key": "example.com/team", "value": "a", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "example.com/team", "value": "b", "effect": "NoSchedule"}],
        }));
        assert!(pool.validate().is_ok(), "the CRD allows it");
        let err = runtime_validate(&pool).expect_err("invalid");
        assert!(
            err.contains("spec.template.spec.startupTaints: taint example.com/team:NoSchedule appears more than once"),
            "{err}"
        );
    }

    #[test]
    fn a_capacity_type_nothing_can_launch_passes_the_crd_but_not_runtime_validation() {
        let typo = pool(json!({"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demnad"]},
        ]}));
        assert!(typo.validate().is_ok(), "the CRD allows it");
        let err = runtime_validate(&typo).expect_err("invalid");
        assert!(
            err.contains("karpenter.sh/capacity-type In [\"on-demnad\"] allows 0 capacity type(s)"),
            "{err}"
        );
        assert!(err.contains("use on-demand, spot, reserved"), "{err}");
        let min_values = pool(json!({"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "spto"], "minValues": 2},
        ]}));
        assert!(runtime_validate(&min_values).is_err());
        let one_typo = pool(json!({"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "spto"]},
        ]}));
        assert_eq!(
            runtime_validate(&one_typo),
            Ok(()),
            "one launchable value is enough"
        );
    }
}
