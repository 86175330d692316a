//! `karpenter-rs run`: the kube-rs shells around the pure core. Watches feed
//! [`ClusterState`]; the provisioner, static NodePools, the NodeClaim lifecycle, the NodePool and EC2NodeClass
//! status controllers, the disruption controller (with NodeClaim disruption status and garbage
//! collection) and (with the simulated cloud) a stand-in kubelet act on it; one replica at a
//! time, chosen by a Lease.

pub mod capacity_blocks;
pub mod disruption;
pub mod interruption;
pub mod kubelet;
pub mod leader;
pub mod metrics;
pub mod node_repair;
pub mod nodeclaim;
pub mod nodeclass;
pub mod nodeoverlay;
pub mod nodepool;
pub mod pod_annotations;
pub mod provisioning;
pub mod static_pools;

use std::sync::Arc;

use kube::Client;

use crate::clock::Clock;
use crate::cloudprovider::CloudProvider;
use crate::cloudprovider::simulated::SimulatedProvider;
use crate::runtime::Context;
use crate::snapshot::EngineOptions;
use crate::state::ClusterState;

/// What `run` needs beyond the cloud provider.
pub struct RunConfig {
    /// Region the controller works in (names simulated nodes).
    pub region: String,
    /// Lease namespace and name, or `None` when leader election is disabled.
    pub leader_election: Option<(String, String)>,
    /// This replica's identity in the Lease.
    pub identity: String,
    /// Provisioning batch windows.
    pub batch: crate::controllers::provisioning::BatchWindow,
    /// Scheduler and disruption options.
    pub options: EngineOptions,
    /// The client evictions go through (see [`Context::eviction_client`]).
    pub eviction_client: Client,
    /// Publish the per-node and per-pod metrics (off with
    /// `DISABLE_CLUSTER_STATE_OBSERVABILITY`).
    pub observe_cluster_state: bool,
}

/// Runs the controllers until SIGTERM / Ctrl-C (`Ok`), or until leadership is lost or a
/// controller fails (`Err`, so the process exits non-zero and restarts as a follower, as
/// upstream's does).
///
/// `readiness` (`/readyz`) follows the caches this replica works from: a standby holds none, so
/// it is ready (a rollout's new pod turns ready while the old one leads); a leader is not ready
/// from the moment it wins until every cache has synced.
pub async fn run(
    client: Client,
    provider: Arc<dyn CloudProvider>,
    simulated: Option<Arc<SimulatedProvider>>,
    clock: Arc<dyn Clock>,
    config: RunConfig,
    readiness: crate::operator::http::Readiness,
) -> anyhow::Result<()> {
    let elector = config
        .leader_election
        .as_ref()
        .map(|(ns, name)| leader::LeaderElector::new(client.clone(), ns, name, &config.identity));
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    if let Some(e) = &elector {
        readiness.set(true);
        tokio::select! {
            _ = e.acquire() => {}
            _ = &mut shutdown => return Ok(()),
        }
        readiness.set(false);
    }
    // Leading from here on. The lease is renewed concurrently with everything below, the cache
    // sync included (a sync longer than the lease must not let another replica take over while
    // this one is about to act), and losing it stops everything at once.
    let lost = async {
        match &elector {
            Some(e) => e.keep().await,
            None => std::future::pending().await,
        }
    };
    let work = lead(client, provider, simulated, clock, config, &readiness);
    let result = tokio::select! {
        _ = &mut shutdown => {
            tracing::info!("shutting down");
            Ok(())
        }
        _ = lost => Err(anyhow::anyhow!("leader election lost")),
        failed = work => Err(failed),
    };
    // Leaving the select dropped `work` and with it the controllers' JoinSet, which aborts them.
    readiness.set(false);
    if let (Some(e), Ok(())) = (&elector, &result) {
        e.release().await;
    }
    result
}

/// What the leader does: sync the caches, then run every controller; returns only if one of
/// them stops (a panic), which is an error.
async fn lead(
    client: Client,
    provider: Arc<dyn CloudProvider>,
    simulated: Option<Arc<SimulatedProvider>>,
    clock: Arc<dyn Clock>,
    config: RunConfig,
    readiness: &crate::operator::http::Readiness,
) -> anyhow::Error {
    let started = tokio::time::Instant::now();
    let (mut state, mut tasks) = ClusterState::start(&client).await;
    if config.options.node_overlay {
        state.watch_node_overlays(&client, &mut tasks);
    }
    state.wait_synced().await;
    tracing::info!(after = ?started.elapsed(), "caches synced");
    crate::metrics::METRICS.cluster_state_synced.set(1.0);
    readiness.set(true);
    if let Some(cloud) = &simulated {
        kubelet::adopt_instances(cloud, &state.nodeclaims.state());
    }
    let ctx = Arc::new(Context::new(
        client,
        config.eviction_client,
        state,
        provider.clone(),
        simulated.clone(),
        clock,
        config.options,
    ));
    tracing::info!(cloud_provider = provider.name(), "starting controllers");
    spawn_controllers(
        &ctx,
        &mut tasks,
        config.batch,
        &config.region,
        config.observe_cluster_state,
    );
    // Controllers and watches run until aborted; one that returns has nothing more to do (the
    // interruption consumer without a queue). A panic inside a reconcile or a pass is caught
    // where it happens (`runtime::panics`) and costs only that object a backoff; one that still
    // ends a task (the watch machinery around the reconciles) leaves the controller without
    // part of its job, which a restart fixes.
    loop {
        match tasks.join_next().await {
            Some(Err(e)) if e.is_panic() => {
                tracing::error!(error = %e, "a controller panicked; exiting so the pod restarts");
                return anyhow::anyhow!("a controller panicked: {e}");
            }
            Some(_) => {}
            None => std::future::pending::<()>().await,
        }
    }
}

/// Starts every controller of a leader on `tasks`: the provisioner, the NodeClaim lifecycle,
/// disruption, NodeClaim disruption status, garbage collection, the NodePool and EC2NodeClass
/// status controllers (and the collection of gone EC2NodeClasses' cloud resources), the capacity-block expiration drain, static NodePools (with the `StaticCapacity` gate), node repair (with the `NodeRepair` gate), NodeOverlay status (with the `NodeOverlay` gate), the metrics controller, the stand-in kubelet (simulated cloud) and the
/// interruption consumer (which ends at once for a cloud without interruption notices). Each task runs under its controller's name, which the
/// cloud-provider metrics carry. Aborting `tasks` stops them all, as a process kill would; a
/// fresh [`Context`] restarts them.
pub fn spawn_controllers(
    ctx: &Arc<Context>,
    tasks: &mut tokio::task::JoinSet<()>,
    batch: crate::controllers::provisioning::BatchWindow,
    region: &str,
    observe_cluster_state: bool,
) {
    use crate::metrics::in_controller;
    tasks.spawn(in_controller(
        "provisioner",
        crate::controllers::provisioning::Provisioner::new(ctx.clone(), batch).run(),
    ));
    tasks.spawn(in_controller(
        "nodeclaim.lifecycle",
        crate::controllers::nodeclaim::run(ctx.clone()),
    ));
    tasks.spawn(in_controller("disruption", disruption::run(ctx.clone())));
    tasks.spawn(in_controller(
        "nodeclaim.disruption",
        nodeclaim::disruption::run(ctx.clone()),
    ));
    tasks.spawn(in_controller(
        "nodeclaim.garbagecollection",
        crate::controllers::nodeclaim::garbage::run(ctx.clone()),
    ));
    tasks.spawn(in_controller("nodepool", nodepool::run(ctx.clone())));
    if ctx.options.static_capacity {
        tasks.spawn(in_controller(
            "static.nodepool",
            static_pools::run(ctx.clone()),
        ));
    }
    tasks.spawn(in_controller("nodeclass", nodeclass::run(ctx.clone())));
    tasks.spawn(in_controller(
        "nodeclass.garbagecollection",
        nodeclass::collect_garbage(ctx.clone()),
    ));
    tasks.spawn(in_controller(
        "capacityreservation.expiration",
        capacity_blocks::run(ctx.clone()),
    ));
    if ctx.options.node_repair {
        tasks.spawn(in_controller("node.health", node_repair::run(ctx.clone())));
    }
    if ctx.options.node_overlay {
        tasks.spawn(in_controller(
            "nodeoverlay.status",
            nodeoverlay::run(ctx.clone()),
        ));
    }
    tasks.spawn(in_controller(
        "metrics",
        metrics::run(ctx.clone(), observe_cluster_state),
    ));
    if let Some(cloud) = ctx.simulated.clone() {
        tasks.spawn(in_controller(
            "kubelet",
            kubelet::run(ctx.clone(), cloud, region.to_string()),
        ));
    }
    tasks.spawn(in_controller(
        "interruption",
        interruption::run(ctx.clone()),
    ));
    tasks.spawn(in_controller(
        "interruption.instancestatus",
        interruption::run_instance_health(ctx.clone()),
    ));
}

/// Resolves on SIGTERM (what Kubernetes sends) or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
