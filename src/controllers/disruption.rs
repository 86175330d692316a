//! The disruption controller: the async shell around [`crate::disruption::evaluate`].
//!
//! Every ten seconds (at once after acting) it snapshots the cluster, asks the pure engine what
//! to disrupt and carries out one command at a time, as upstream's queue does: launch the
//! replacements and wait until they are Initialized, taint the candidates
//! `karpenter.sh/disrupted:NoSchedule`, wait the validation delay and check the command still
//! holds, then delete the candidates' NodeClaims (termination drains them). A failed or stale
//! command is rolled back: the taint comes off and unused replacements are deleted.
//!
//! Nothing is remembered between passes but what is on the objects. A node carrying the
//! disruption taint while its NodeClaim is not being deleted belongs to no command (commands
//! run to completion inside one pass), so every pass — the first one after a restart included —
//! takes that taint off. Expiration commands are forceful: their NodeClaims are deleted at once.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use crate::apis::NodeClaim;
use crate::apis::conditions;
use crate::cluster::Cluster;
use crate::controllers::{Context, Error};
use crate::disruption::state::State;
use crate::disruption::{self, Command, Method, validation};
use crate::lifecycle::{INITIALIZED, termination};
use crate::scheduling::resources::Resources;
use crate::scheduling::scheduler::{self, Input, Placement};

/// How often the engine runs when it has nothing to do (upstream's polling period).
pub const POLL: Duration = Duration::from_secs(10);
/// How long a command waits between tainting its candidates and deleting them, for pods,
/// annotations and PDBs to catch up (upstream's `commandValidationDelay`).
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);
/// How long replacements may take to initialize before the command is rolled back.
pub const REPLACEMENT_TIMEOUT: Duration = Duration::from_secs(600);
/// How long publishing one event may take.
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs until the task is dropped.
pub async fn run(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    let mut reported = HashMap::new();
    loop {
        let acted = match once(&ctx, &mut reported).await {
            Ok(acted) => acted,
            Err(e) => {
                tracing::warn!(controller = "disruption", error = %e, "disruption pass failed; will retry");
                false
            }
        };
        // After acting, give the caches a moment to show what was done before deciding again.
        tokio::time::sleep(if acted { Duration::from_secs(1) } else { POLL }).await;
    }
}

/// The engine's state of the cluster now, with the instance types the provider offers, and the
/// nodes nominated for pending pods.
async fn current_state(ctx: &Context) -> (Cluster, State, BTreeSet<String>) {
    let cluster = ctx.state.snapshot();
    let types = crate::provisioning::instance_types(ctx, &cluster).await;
    let prepared = crate::simulate::prepare(&cluster, &types, &ctx.options);
    let nominated = nominated(&prepared.input);
    let state = State::from_cluster(
        &cluster,
        prepared.input.nodepools,
        ctx.options.scheduler,
        ctx.clock.now(),
    );
    (cluster, state, nominated)
}

/// Nodes the provisioner's simulation places pending pods on. kube-scheduler is about to bind
/// those pods there (typically to a node that just came up for them), so such a node is not
/// empty or underused, only early — upstream calls it nominated and leaves it alone.
pub fn nominated(input: &Input) -> BTreeSet<String> {
    if input.pods.is_empty() {
        return BTreeSet::new();
    }
    scheduler::solve(input)
        .placements
        .iter()
        .filter_map(|p| match p {
            Some(Placement::Existing(n)) => input.existing.get(*n).map(|e| e.name.to_string()),
            _ => None,
        })
        .collect()
}

/// The NodeClaim of the Node named `node`, by node name or provider ID.
fn claim_of<'a>(cluster: &'a Cluster, node: &str) -> Option<&'a NodeClaim> {
    let provider_id = cluster
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))
        .and_then(|n| n.spec.as_ref()?.provider_id.clone());
    cluster.nodeclaims.iter().find(|c| {
        let status = c.status.as_ref();
        status.and_then(|s| s.node_name.as_deref()) == Some(node)
            || (provider_id.is_some() && status.and_then(|s| s.provider_id.clone()) == provider_id)
    })
}

/// One pass: clear stale taints, evaluate, carry out the commands. Returns whether it acted.
async fn once(ctx: &Context, reported: &mut HashMap<String, String>) -> Result<bool, Error> {
    let (cluster, state, nominated) = current_state(ctx).await;
    untaint_orphans(ctx, &cluster).await?;
    let now = ctx.clock.now();
    let decision = disruption::evaluate(&state, now, ctx.options.disruption);
    report_blocked(ctx, &cluster, &decision.blocked, reported).await;
    let mut acted = false;
    for cmd in &decision.commands {
        let early: Vec<&String> = cmd
            .candidates
            .iter()
            .filter(|c| nominated.contains(*c))
            .collect();
        if cmd.method != Method::Expiration && !early.is_empty() {
            tracing::debug!(controller = "disruption", nodes = ?early, "candidates are nominated for pending pods; not disrupting them now");
            continue;
        }
        let result = if cmd.method == Method::Expiration {
            expire(ctx, &cluster, cmd).await
        } else {
            execute(ctx, &cluster, &state, cmd).await
        };
        match result {
            Ok(done) => acted |= done,
            Err(e) => {
                tracing::warn!(controller = "disruption", command = ?cmd.candidates, error = %e, "disruption command failed")
            }
        }
    }
    Ok(acted)
}

/// Takes the disruption taint off nodes no command holds: their NodeClaim (and the Node) are not
/// being deleted, so the command that tainted them was abandoned (or its controller crashed).
/// Nodes without a NodeClaim are not Karpenter's to untaint.
async fn untaint_orphans(ctx: &Context, cluster: &Cluster) -> Result<(), Error> {
    for node in &cluster.nodes {
        if !termination::has_disrupted_taint(node) || node.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = node.name_any();
        let Some(claim) = claim_of(cluster, &name) else {
            continue;
        };
        // Termination may have tainted the node a moment ago for a deletion this snapshot does
        // not show yet: ask the API server before undoing it.
        let api: Api<NodeClaim> = Api::all(ctx.client.clone());
        let deleting = api
            .get_opt(&claim.name_any())
            .await?
            .is_none_or(|c| c.metadata.deletion_timestamp.is_some());
        if !deleting {
            tracing::info!(controller = "disruption", node = %name, "removing the disruption taint of an abandoned command");
            termination::untaint_node(ctx, node).await?;
        }
    }
    Ok(())
}

async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let e = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Disrupting".into(),
        secondary: None,
    };
    // Events are informational: a slow events API (its requests are retried on 429/503) must
    // not hold a command up.
    match tokio::time::timeout(
        EVENT_TIMEOUT,
        ctx.recorder.publish(&e, &obj.object_ref(&())),
    )
    .await
    {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::debug!(error = %err, "could not record event"),
        Err(_) => tracing::warn!(reason, "recording an event timed out"),
    }
}

/// An event on a candidate's Node and NodeClaim.
async fn event_on(
    ctx: &Context,
    cluster: &Cluster,
    node: &str,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    if let Some(n) = cluster
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))
    {
        publish(ctx, n, type_, reason, note).await;
    }
    if let Some(c) = claim_of(cluster, node) {
        publish(ctx, c, type_, reason, note).await;
    }
}

/// Blocked reasons worth an event: something a user set (do-not-disrupt, a PDB, a budget)
/// stands in the way of a disruption that would otherwise happen.
fn worth_reporting(reason: &str) -> bool {
    ["protected", "budget", "PodDisruptionBudget"]
        .iter()
        .any(|k| reason.contains(k))
}

/// `DisruptionBlocked` events, once per node and reason.
async fn report_blocked(
    ctx: &Context,
    cluster: &Cluster,
    blocked: &[disruption::Blocked],
    reported: &mut HashMap<String, String>,
) {
    reported.retain(|node, _| blocked.iter().any(|b| &b.node == node));
    for b in blocked.iter().filter(|b| worth_reporting(&b.reason)) {
        if reported.get(&b.node) == Some(&b.reason) {
            continue;
        }
        reported.insert(b.node.clone(), b.reason.clone());
        event_on(
            ctx,
            cluster,
            &b.node,
            EventType::Normal,
            "DisruptionBlocked",
            &format!("Cannot disrupt Node: {}", b.reason),
        )
        .await;
    }
}

/// Expiration: delete the NodeClaims now; no replacements first, no budgets, no do-not-disrupt
/// (termination still honours PDBs until the terminationGracePeriod).
async fn expire(ctx: &Context, cluster: &Cluster, cmd: &Command) -> Result<bool, Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for node in &cmd.candidates {
        let Some(claim) = claim_of(cluster, node) else {
            continue;
        };
        tracing::info!(controller = "disruption", nodeclaim = %claim.name_any(), node = %node, "deleting expired nodeclaim");
        event_on(
            ctx,
            cluster,
            node,
            EventType::Normal,
            "DisruptionTerminating",
            "Disrupting Node: Expired",
        )
        .await;
        delete_claim(&api, &claim.name_any()).await?;
    }
    Ok(true)
}

async fn delete_claim(api: &Api<NodeClaim>, name: &str) -> Result<(), Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Requests of the pods (by `namespace/name`) a replacement takes.
fn requests_of(state: &State, pods: &[String]) -> Resources {
    let mut total = Resources::default();
    for p in state.pods.iter().filter(|p| pods.contains(&p.pod.key())) {
        total.add(&p.pod.requests);
    }
    total
}

/// Carries out one voluntary command. Returns whether the candidates were deleted.
async fn execute(
    ctx: &Context,
    cluster: &Cluster,
    state: &State,
    cmd: &Command,
) -> Result<bool, Error> {
    let claims: Vec<&NodeClaim> = cmd
        .candidates
        .iter()
        .filter_map(|n| claim_of(cluster, n))
        .collect();
    if claims.len() != cmd.candidates.len() {
        tracing::warn!(controller = "disruption", command = ?cmd.candidates, "a candidate has no NodeClaim; skipping the command");
        return Ok(false);
    }
    let pods_before = validation::pods_to_move(state, cmd);
    tracing::info!(
        controller = "disruption",
        method = ?cmd.method,
        reason = %cmd.reason,
        candidates = ?cmd.candidates,
        replacements = cmd.replacements.len(),
        savings = cmd.savings,
        "disrupting"
    );
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut launched = Vec::new();
    for r in &cmd.replacements {
        let Some(pool) = cluster
            .nodepools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&r.node_pool))
        else {
            rollback(ctx, cmd, &launched).await;
            return Ok(false);
        };
        let claim = crate::provisioning::replacement_nodeclaim(
            pool,
            cluster.nodeclass_of(pool),
            r,
            requests_of(state, &r.pods),
        );
        match api.create(&PostParams::default(), &claim).await {
            Ok(made) => {
                tracing::info!(controller = "disruption", nodeclaim = %made.name_any(), nodepool = %r.node_pool, instance_types = ?r.instance_type_options, "launched replacement");
                crate::metrics::count_nodeclaim_created(
                    &crate::metrics::disruption_reason_label(&cmd.reason),
                    &made,
                );
                launched.push(made.name_any());
            }
            Err(e) => {
                rollback(ctx, cmd, &launched).await;
                return Err(e.into());
            }
        }
    }
    if !launched.is_empty() {
        for node in &cmd.candidates {
            event_on(
                ctx,
                cluster,
                node,
                EventType::Normal,
                "DisruptionLaunching",
                &format!(
                    "Launching NodeClaim: {} ({})",
                    cmd.reason,
                    launched.join(", ")
                ),
            )
            .await;
        }
    }
    if let Err(why) = wait_initialized(ctx, &launched).await {
        abandon(ctx, cluster, cmd, &launched, &why).await;
        return Ok(false);
    }
    tracing::info!(controller = "disruption", candidates = ?cmd.candidates, "replacements initialized; tainting candidates");
    for node in &cmd.candidates {
        let current = ctx.state.nodes.get(&ObjectRef::<Node>::new(node));
        let tainted = match current {
            Some(n) => termination::taint_node(ctx, &n).await,
            None => Ok(()),
        };
        if let Err(e) = tainted {
            rollback(ctx, cmd, &launched).await;
            return Err(e);
        }
    }
    tokio::time::sleep(VALIDATION_DELAY).await;
    let (_, fresh, nominated) = current_state(ctx).await;
    let validated = match cmd.candidates.iter().find(|c| nominated.contains(*c)) {
        Some(c) => Err(format!("node {c} is nominated for pending pods")),
        None => validation::validate(&fresh, cmd, &pods_before, ctx.clock.now()),
    };
    if let Err(why) = validated {
        abandon(ctx, cluster, cmd, &launched, &why).await;
        return Ok(false);
    }
    tracing::info!(controller = "disruption", candidates = ?cmd.candidates, "command still valid; deleting candidates");
    for (node, claim) in cmd.candidates.iter().zip(&claims) {
        event_on(
            ctx,
            cluster,
            node,
            EventType::Normal,
            "DisruptionTerminating",
            &format!("Disrupting Node: {}/{:?}", cmd.reason, cmd.method),
        )
        .await;
        if let Err(e) = delete_claim(&api, &claim.name_any()).await {
            rollback(ctx, cmd, &launched).await;
            return Err(e);
        }
    }
    Ok(true)
}

/// Gives up on a command: an event saying why, then [`rollback`].
async fn abandon(ctx: &Context, cluster: &Cluster, cmd: &Command, launched: &[String], why: &str) {
    tracing::info!(controller = "disruption", command = ?cmd.candidates, reason = %why, "abandoning disruption command");
    for node in &cmd.candidates {
        event_on(
            ctx,
            cluster,
            node,
            EventType::Normal,
            "DisruptionBlocked",
            &format!("Cannot disrupt Node: {why}"),
        )
        .await;
    }
    rollback(ctx, cmd, launched).await;
}

/// Undoes a command that will not complete: the candidates lose the disruption taint, and
/// replacements no pod has moved to yet are deleted. Failures are logged; the next pass clears
/// any taint left behind.
async fn rollback(ctx: &Context, cmd: &Command, launched: &[String]) {
    for node in &cmd.candidates {
        if let Some(n) = ctx.state.nodes.get(&ObjectRef::<Node>::new(node))
            && let Err(e) = termination::untaint_node(ctx, &n).await
        {
            tracing::warn!(controller = "disruption", node = %node, error = %e, "could not remove the disruption taint");
        }
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for name in launched {
        let node_name = ctx
            .state
            .nodeclaims
            .get(&ObjectRef::new(name))
            .and_then(|c| c.status.as_ref()?.node_name.clone());
        let used = node_name.is_some_and(|n| {
            ctx.state.pods.state().iter().any(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(n.as_str())
                    && !p.owner_references().iter().any(|o| o.kind == "DaemonSet")
            })
        });
        if used {
            continue;
        }
        if let Err(e) = delete_claim(&api, name).await {
            tracing::warn!(controller = "disruption", nodeclaim = %name, error = %e, "could not delete an unused replacement");
        }
    }
}

/// Waits until every replacement NodeClaim is Initialized; fails if one is deleted (it could
/// not launch) or the timeout passes.
async fn wait_initialized(ctx: &Context, names: &[String]) -> Result<(), String> {
    let start = tokio::time::Instant::now();
    loop {
        let mut pending = None;
        for name in names {
            match ctx.state.nodeclaims.get(&ObjectRef::new(name)) {
                Some(c) if c.metadata.deletion_timestamp.is_some() => {
                    return Err(format!("replacement NodeClaim {name} is being deleted"));
                }
                Some(c)
                    if c.status
                        .as_ref()
                        .is_some_and(|s| conditions::is_true(&s.conditions, INITIALIZED)) => {}
                _ => pending = Some(name),
            }
        }
        let Some(name) = pending else {
            return Ok(());
        };
        if start.elapsed() > REPLACEMENT_TIMEOUT {
            return Err(format!(
                "replacement NodeClaim {name} did not initialize within {REPLACEMENT_TIMEOUT:?}"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
