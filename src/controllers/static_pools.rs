//! Static NodePools (`spec.replicas`, behind the `StaticCapacity` feature gate as upstream's):
//! each pass snapshots the cluster, asks [`static_pools::decide`] how far each static pool is from
//! its replicas, creates the missing NodeClaims from the pool's template (built by the
//! provisioner's [`static_nodeclaim`], named by `generateName`) and deletes the surplus. The
//! NodeClaim lifecycle launches and terminates them as any other; `status.nodes` is the NodePool
//! controller's count. Drift and expiration replace static nodes through the disruption queue
//! and the expiration check; consolidation never touches them.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams};

use crate::apis::{NodeClaim, NodePool, labels};
use crate::controllers::disruption::COMMAND_ANNOTATION;
use crate::controllers::provisioning::{
    create_nodeclaims, drop_unusable_pools, instance_types, static_nodeclaim, wait_until_cached,
};
use crate::runtime::Context;
use crate::runtime::panics::guarded_pass;
use crate::snapshot::static_pools;

/// The controller's name in logs and metrics.
const CONTROLLER: &str = "static.nodepool";

/// How often a pass runs. The controller polls rather than sharing the provisioner's wake-up
/// (`ClusterState::changed` wakes one waiter, and a batch it took would be lost to the
/// provisioner); a pass without static pools reads only the NodePool cache.
const PERIOD: Duration = Duration::from_secs(5);

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// NodeClaims created.
    pub created: usize,
    /// NodeClaims deleted (scale-down).
    pub deleted: usize,
}

/// Runs until the task is dropped: a pass every [`PERIOD`] while a static NodePool exists.
pub async fn run(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    loop {
        let any_static = ctx
            .state
            .nodepools
            .state()
            .iter()
            .any(|p| static_pools::is_static(p));
        if any_static && let Some(Err(e)) = guarded_pass(CONTROLLER, &ctx, once(&ctx)).await {
            tracing::error!(controller = CONTROLLER, error = %e, "static nodepool pass failed; will retry");
        }
        tokio::time::sleep(PERIOD).await;
    }
}

/// Whether a NodeClaim of `pool` is a disruption replacement whose command has not completed
/// (it carries [`COMMAND_ANNOTATION`] until then).
fn replacing(claims: &[Arc<NodeClaim>], pool: &str) -> bool {
    claims.iter().any(|c| {
        c.labels().get(labels::NODEPOOL).is_some_and(|p| p == pool)
            && c.annotations().contains_key(COMMAND_ANNOTATION)
    })
}

/// One pass over every static NodePool that is usable (valid, its EC2NodeClass not being
/// deleted) and not being deleted itself.
pub async fn once(ctx: &Context) -> anyhow::Result<Outcome> {
    let mut cluster = ctx.state.snapshot();
    drop_unusable_pools(&mut cluster);
    let pools: Vec<&NodePool> = cluster
        .nodepools
        .iter()
        .map(Arc::as_ref)
        .filter(|p| static_pools::is_static(p) && p.metadata.deletion_timestamp.is_none())
        .collect();
    if pools.is_empty() {
        return Ok(Outcome::default());
    }
    let types = instance_types(ctx, &cluster).await;
    let mut to_create: Vec<NodeClaim> = Vec::new();
    let mut to_delete: Vec<String> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    for pool in pools {
        let name = pool.name_any();
        let decision = match static_pools::decide(&cluster, pool) {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                problems.push(e);
                continue;
            }
            None => continue,
        };
        if decision.held_by_limit > 0 {
            tracing::info!(controller = CONTROLLER, nodepool = %name, held = decision.held_by_limit, "nodepool node limit reached");
        }
        if decision.create > 0 {
            let class = cluster.nodeclass_of(pool);
            let offered = class
                .and_then(|c| types.get(&c.name_any()))
                .cloned()
                .unwrap_or_default();
            match static_nodeclaim(pool, class, &offered) {
                Some(claim) => to_create.extend(std::iter::repeat_n(claim, decision.create)),
                None => problems.push(format!(
                    "NodePool {name:?}: no instance type its EC2NodeClass offers fits spec.template.spec.requirements; widen the requirements or check the EC2NodeClass"
                )),
            }
        }
        if !decision.delete.is_empty() && replacing(&cluster.nodeclaims, &name) {
            // A drift replacement stands beside the node it replaces until the disruption
            // command deletes that node: the pool is one over on purpose.
            tracing::debug!(controller = CONTROLLER, nodepool = %name, "a disruption replacement is in flight; not scaling down");
            continue;
        }
        if !decision.delete.is_empty() {
            tracing::info!(controller = CONTROLLER, nodepool = %name, nodeclaims = ?decision.delete, "deprovisioning nodeclaims to satisfy replica count");
        }
        to_delete.extend(decision.delete);
    }
    let (created, failed) = create_nodeclaims(ctx, CONTROLLER, &to_create).await;
    if let Some(e) = failed {
        problems.push(format!("creating a static NodeClaim: {e}"));
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut deleted = 0;
    for name in &to_delete {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => deleted += 1,
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => problems.push(format!("deleting NodeClaim {name:?}: {e}")),
        }
    }
    wait_until_cached(ctx, &created).await;
    match problems.is_empty() {
        true => Ok(Outcome {
            created: created.iter().flatten().count(),
            deleted,
        }),
        false => Err(anyhow::anyhow!(problems.join("; "))),
    }
}
