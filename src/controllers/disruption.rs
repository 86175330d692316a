//! The disruption controller: the async shell around [`crate::disruption::evaluate_with`].
//!
//! Every poll period (at once after acting) it snapshots the cluster, asks the pure engine what
//! to disrupt and carries out one command at a time, as upstream's queue does: launch the
//! replacements and wait until they are Initialized, taint the candidates
//! `karpenter.sh/disrupted:NoSchedule` (recording the reason in their `DisruptionReason`
//! condition), wait the validation delay and check the command still holds — candidates,
//! budgets and a fresh scheduling simulation — then delete the candidates' NodeClaims
//! (termination drains them). A failed or stale command is rolled back: the taint and the
//! condition come off and unused replacements are deleted.
//!
//! Nothing is remembered between passes but what is on the objects. Replacements carry
//! [`COMMAND_ANNOTATION`], naming the command (method, reason, candidates) they were launched
//! for; commands run to completion inside one pass, so a replacement still carrying it at the
//! start of a pass belongs to a command whose controller died: the pass finishes that command
//! (re-validating it first) or rolls it back, then takes the disruption taint off every node no
//! command holds. Expiration commands are forceful: their NodeClaims are deleted at once.
//!
//! Metrics as upstream's: `karpenter_voluntary_disruption_*`,
//! `karpenter_nodepools_allowed_disruptions` and `_nodes_consuming_budgets`,
//! `karpenter_nodeclaims_disrupted_total`, `karpenter_pods_disruption_initiated_total` and the
//! Balanced policy's `karpenter_consolidation_*`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::apis::conditions;
use crate::apis::nodeclaim::condition::{DISRUPTION_REASON, INITIALIZED};
use crate::apis::nodepool::DisruptionReason;
use crate::apis::{NodeClaim, NodePool, labels};
use crate::controllers::nodeclaim::termination;
use crate::controllers::pod_annotations::InvalidAnnotations;
use crate::disruption::state::State;
use crate::disruption::{self, Command, Method, budgets, validation};
use crate::metrics::METRICS;
use crate::runtime::panics::guarded_pass;
use crate::runtime::{Context, Error};
use crate::scheduling::resources::Resources;
use crate::scheduling::scheduler::{self, Input, Placement};
use crate::snapshot::Snapshot;

/// Annotation on a replacement NodeClaim: the command it was launched for, as JSON
/// ([`CommandMarker`]). Removed once the command completed.
pub const COMMAND_ANNOTATION: &str = "karpenter-rs.sh/disruption-command";
/// How long publishing one event may take.
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a replacement NodeClaim records about its command, so a restarted controller can finish
/// or roll the command back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandMarker {
    /// The method that decided it.
    pub method: Method,
    /// Its reason (`Underutilized`, `Empty`, or the drift reason).
    pub reason: String,
    /// The Nodes it disrupts.
    pub candidates: Vec<String>,
    /// How many pods each candidate had to move when it was decided.
    pub pods_before: BTreeMap<String, usize>,
}

impl CommandMarker {
    fn command(&self) -> Command {
        Command {
            method: self.method,
            reason: self.reason.clone(),
            candidates: self.candidates.clone(),
            replacements: Vec::new(),
            savings: 0.0,
        }
    }
}

/// Runs until the task is dropped.
pub async fn run(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    let mut reported = BlockedEvents::default();
    let mut invalid = InvalidAnnotations::default();
    loop {
        let pass = async {
            invalid.report(&ctx).await;
            once(&ctx, &mut reported).await
        };
        // A pass that panics is dropped where it stood: a command it had not finished validating
        // is never carried out, and the next pass resumes or rolls back what it left.
        let acted = match guarded_pass("disruption", &ctx, pass).await {
            Some(Ok(acted)) => acted,
            Some(Err(e)) => {
                tracing::warn!(controller = "disruption", error = %e, "disruption pass failed; will retry");
                false
            }
            None => false,
        };
        // After acting, give the caches a moment to show what was done before deciding again.
        let poll = ctx.intervals.disruption_poll;
        tokio::time::sleep(if acted {
            poll.min(Duration::from_secs(1))
        } else {
            poll
        })
        .await;
    }
}

/// The engine's state of the cluster now, with the instance types the provider offers, and the
/// nodes nominated for pending pods.
async fn current_state(ctx: &Context) -> (Snapshot, State, BTreeSet<String>) {
    let cluster = ctx.state.snapshot();
    let types = crate::controllers::provisioning::instance_types(ctx, &cluster).await;
    let prepared = crate::snapshot::scheduling_input::prepare(&cluster, &types, &ctx.options);
    let nominated = nominated(&prepared.input);
    let state = crate::snapshot::disruption_input::disruption_state(
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

/// The NodeClaim of the Node named `node`.
fn claim_of<'a>(cluster: &'a Snapshot, node: &str) -> Option<&'a NodeClaim> {
    let node = cluster
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))?;
    crate::snapshot::joins::claim_of(&cluster.nodeclaims, node)
}

/// `karpenter_nodepools_allowed_disruptions` (the tightest active budget's node count, as
/// upstream reports it) and `karpenter_nodepools_nodes_consuming_budgets`, per pool and reason.
fn report_budgets(state: &State, now: DateTime<Utc>) {
    for pool in &state.nodepools {
        let name = pool.name_any();
        let (total, disrupting) = state
            .nodes
            .iter()
            .filter(|n| n.nodepool.as_deref() == Some(name.as_str()))
            .fold((0u32, 0u32), |(t, d), n| {
                (t + 1, d + u32::from(n.disrupting))
            });
        for reason in DisruptionReason::ALL {
            let a = budgets::allowance(pool, reason, total, disrupting, now);
            let reason = reason.to_string();
            // No active budget limits the reason: upstream reports MaxInt32.
            let limit = if a.limit == u32::MAX {
                f64::from(i32::MAX)
            } else {
                f64::from(a.limit)
            };
            METRICS
                .nodepools_allowed_disruptions
                .with_label_values(&[&name, &reason])
                .set(limit);
            METRICS
                .nodepools_nodes_consuming_budgets
                .with_label_values(&[&name, &reason])
                .set(f64::from(disrupting));
        }
    }
}

/// Evaluates the engine, timing each voluntary method, and reports the evaluation metrics.
fn decide(ctx: &Context, state: &State, now: DateTime<Utc>) -> disruption::Decision {
    let decision = disruption::evaluate_with(
        state,
        now,
        ctx.options.disruption,
        &mut |method, compute| {
            let start = Instant::now();
            let found = compute();
            METRICS
                .voluntary_disruption_decision_evaluation_duration_seconds
                .with_label_values(&[method.reason_label(), method.consolidation_type()])
                .observe(start.elapsed().as_secs_f64());
            found
        },
    );
    for (method, count) in &decision.eligible {
        METRICS
            .voluntary_disruption_eligible_nodes
            .with_label_values(&[method.reason_label()])
            .set(*count as f64);
    }
    for m in &decision.scored {
        let verdict = if m.approved { "approved" } else { "rejected" };
        let labels = [verdict, m.nodepool.as_str(), "Balanced"];
        METRICS
            .consolidation_score
            .with_label_values(&labels)
            .observe(m.score);
        METRICS
            .consolidation_moves_total
            .with_label_values(&labels)
            .inc();
    }
    decision
}

/// One pass: finish or roll back commands a dead controller left, clear stale taints,
/// evaluate, carry out the commands. Returns whether it acted.
///
/// `reported` remembers the `DisruptionBlocked` events sent, so that a node's reason is reported
/// once (and a changing one at most every [`BLOCKED_EVENT_INTERVAL`]).
pub async fn once(ctx: &Context, reported: &mut BlockedEvents) -> Result<bool, Error> {
    let (cluster, state, nominated) = current_state(ctx).await;
    let now = ctx.clock.now();
    report_budgets(&state, now);
    if resume_commands(ctx, &cluster).await? {
        return Ok(true);
    }
    untaint_orphans(ctx, &cluster).await?;
    let decision = decide(ctx, &state, now);
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
            expire(ctx, &cluster, &state, cmd).await
        } else {
            execute(ctx, &cluster, &state, cmd).await
        };
        match result {
            Ok(done) => acted |= done,
            Err(e) => {
                queue_failure(cmd);
                tracing::warn!(controller = "disruption", command = ?cmd.candidates, error = %e, "disruption command failed")
            }
        }
    }
    Ok(acted)
}

/// `delete` when a command only removes nodes, `replace` when it launches replacements.
fn decision_label(cmd: &Command) -> &'static str {
    if cmd.replacements.is_empty() {
        "delete"
    } else {
        "replace"
    }
}

fn queue_failure(cmd: &Command) {
    METRICS
        .voluntary_disruption_queue_failures_total
        .with_label_values(&[
            decision_label(cmd),
            cmd.method.reason_label(),
            cmd.method.consolidation_type(),
        ])
        .inc();
}

/// Commands whose replacements still carry [`COMMAND_ANNOTATION`]: their controller died (or
/// could not clear the marker). Each is finished after a fresh validation, or rolled back.
/// Returns whether there was any. Public so the in-memory controller tests can drive the resume
/// and the rollback without the polling loop.
pub async fn resume_commands(ctx: &Context, cluster: &Snapshot) -> Result<bool, Error> {
    let mut commands: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut live_markers: BTreeSet<String> = BTreeSet::new();
    for claim in &cluster.nodeclaims {
        if let Some(marker) = claim.annotations().get(COMMAND_ANNOTATION) {
            commands
                .entry(marker.clone())
                .or_default()
                .push(claim.name_any());
            if claim.metadata.deletion_timestamp.is_none() {
                live_markers.insert(marker.clone());
            }
        }
    }
    // Replacements being deleted keep their marker to the end; a command with no other
    // replacement left is over.
    commands.retain(|marker, _| live_markers.contains(marker));
    if commands.is_empty() {
        return Ok(false);
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for (raw, replacements) in commands {
        let Ok(marker) = serde_json::from_str::<CommandMarker>(&raw) else {
            tracing::warn!(controller = "disruption", marker = %raw, "unreadable disruption command marker; removing it");
            clear_markers(&api, &replacements).await?;
            continue;
        };
        let cmd = marker.command();
        let remaining: Vec<&String> = cmd
            .candidates
            .iter()
            .filter(|n| {
                cluster
                    .nodes
                    .iter()
                    .any(|node| node.metadata.name.as_deref() == Some(n.as_str()))
                    && claim_of(cluster, n).is_some_and(|c| c.metadata.deletion_timestamp.is_none())
            })
            .collect();
        let replacement_lost = replacements.iter().any(|r| {
            cluster
                .nodeclaims
                .iter()
                .any(|c| &c.name_any() == r && c.metadata.deletion_timestamp.is_some())
        });
        if remaining.is_empty() {
            tracing::info!(controller = "disruption", candidates = ?cmd.candidates, "a disruption command left by an earlier run had completed; clearing its marker");
            clear_markers(&api, &replacements).await?;
        } else if remaining.len() < cmd.candidates.len() || replacement_lost {
            // Half carried out, or a replacement is going: the command cannot complete as
            // decided. Undo what is left; the engine decides afresh.
            tracing::info!(controller = "disruption", candidates = ?cmd.candidates, "rolling back a disruption command an earlier run left half done");
            rollback(ctx, &cmd, &replacements).await;
        } else {
            tracing::info!(controller = "disruption", candidates = ?cmd.candidates, replacements = ?replacements, "resuming a disruption command an earlier run started");
            let live: Vec<String> = replacements
                .into_iter()
                .filter(|r| {
                    cluster
                        .nodeclaims
                        .iter()
                        .any(|c| &c.name_any() == r && c.metadata.deletion_timestamp.is_none())
                })
                .collect();
            if let Err(e) = complete(ctx, cluster, &cmd, &live, &marker.pods_before).await {
                queue_failure(&cmd);
                tracing::warn!(controller = "disruption", command = ?cmd.candidates, error = %e, "resumed disruption command failed");
            }
        }
    }
    Ok(true)
}

/// Removes the command marker from replacements whose command is over.
async fn clear_markers(api: &Api<NodeClaim>, names: &[String]) -> Result<(), Error> {
    for name in names {
        let patch = json!({"metadata": {"annotations": {COMMAND_ANNOTATION: null}}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Takes the disruption taint off nodes no command holds: their NodeClaim (and the Node) are not
/// being deleted, so the command that tainted them was abandoned (or its controller crashed);
/// their NodeClaims lose a stale `DisruptionReason` condition too. Nodes without a NodeClaim are
/// not Karpenter's to untaint.
async fn untaint_orphans(ctx: &Context, cluster: &Snapshot) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for node in &cluster.nodes {
        if node.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = node.name_any();
        let Some(claim) = claim_of(cluster, &name) else {
            continue;
        };
        let marked = claim
            .status
            .as_ref()
            .is_some_and(|s| conditions::find(&s.conditions, DISRUPTION_REASON).is_some());
        if !termination::has_disrupted_taint(node) && !marked {
            continue;
        }
        // Termination may have tainted the node a moment ago for a deletion this snapshot does
        // not show yet: ask the API server before undoing it.
        let deleting = api
            .get_opt(&claim.name_any())
            .await?
            .is_none_or(|c| c.metadata.deletion_timestamp.is_some());
        if deleting {
            continue;
        }
        if termination::has_disrupted_taint(node) {
            tracing::info!(controller = "disruption", node = %name, "removing the disruption taint of an abandoned command");
            termination::untaint_node(ctx, node).await?;
        }
        if marked {
            termination::update_conditions(ctx, &claim.name_any(), |c| {
                let before = c.len();
                c.retain(|c| c.type_ != DISRUPTION_REASON);
                c.len() != before
            })
            .await?;
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
        Ok(Err(err)) => tracing::debug!(error = %err, reason, "could not record event"),
        Err(_) => tracing::warn!(reason, "recording an event timed out"),
    }
}

/// An event on a candidate's Node and NodeClaim.
async fn event_on(
    ctx: &Context,
    cluster: &Snapshot,
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

/// How often a node's `DisruptionBlocked` event may be sent again when its reason changes (a
/// budget's arithmetic changes with every disruption in flight).
pub const BLOCKED_EVENT_INTERVAL: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

/// The `DisruptionBlocked` events sent, by node: the reason and when.
#[derive(Default)]
pub struct BlockedEvents(HashMap<String, (String, DateTime<Utc>)>);

/// `DisruptionBlocked` events on the Node and NodeClaim, with the engine's reason verbatim (it
/// names the pod, PodDisruptionBudget or budget): once per node and reason, rate-limited.
async fn report_blocked(
    ctx: &Context,
    cluster: &Snapshot,
    blocked: &[disruption::Blocked],
    reported: &mut BlockedEvents,
) {
    let now = ctx.clock.now();
    let reported = &mut reported.0;
    reported.retain(|node, _| blocked.iter().any(|b| &b.node == node));
    // Only what a user set (do-not-disrupt, a PDB, a budget) is worth an event: it stands in the
    // way of a disruption that would otherwise happen.
    for b in blocked.iter().filter(|b| b.cause.set_by_user()) {
        if let Some((reason, at)) = reported.get(&b.node)
            && (reason == &b.reason || now - *at < BLOCKED_EVENT_INTERVAL)
        {
            continue;
        }
        reported.insert(b.node.clone(), (b.reason.clone(), now));
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

/// Upstream's `termination_mode` label: how the NodeClaim's drain may end.
fn termination_mode(claim: &NodeClaim) -> &'static str {
    match claim
        .spec
        .termination_grace_period
        .as_ref()
        .map(|d| d.get())
    {
        None => "graceful",
        Some(d) if d.is_zero() => "forceful",
        Some(_) => "eventual",
    }
}

/// `karpenter_nodeclaims_disrupted_total` and `karpenter_pods_disruption_initiated_total` for a
/// candidate whose NodeClaim was just deleted.
fn count_disrupted(
    state: &State,
    cluster: &Snapshot,
    method: Method,
    node: &str,
    claim: &NodeClaim,
) {
    let pool_name = claim
        .labels()
        .get(labels::NODEPOOL)
        .cloned()
        .unwrap_or_default();
    let policy = cluster
        .nodepools
        .iter()
        .find(|p: &&NodePool| p.metadata.name.as_deref() == Some(pool_name.as_str()))
        .map(|p| format!("{:?}", p.spec.disruption.consolidation_policy))
        .unwrap_or_default();
    let capacity_type = claim
        .labels()
        .get(labels::CAPACITY_TYPE)
        .cloned()
        .unwrap_or_default();
    let labels = [
        method.reason_label(),
        pool_name.as_str(),
        capacity_type.as_str(),
        policy.as_str(),
        termination_mode(claim),
    ];
    METRICS
        .nodeclaims_disrupted_total
        .with_label_values(&labels)
        .inc();
    let pods = state
        .nodes
        .iter()
        .position(|n| n.name.as_ref() == node)
        .map_or(0, |i| {
            state.pods_on(i).filter(|p| p.reschedulable()).count()
        });
    METRICS
        .pods_disruption_initiated_total
        .with_label_values(&labels)
        .inc_by(pods as f64);
}

/// Records why a candidate is being disrupted on its NodeClaim (upstream's `DisruptionReason`
/// condition), which the drain reports in `karpenter_pods_drained_total`.
async fn mark_reason(ctx: &Context, claim: &str, reason: &str) -> Result<(), Error> {
    let now = ctx.clock.now();
    termination::update_conditions(ctx, claim, |c| {
        conditions::set(c, DISRUPTION_REASON, conditions::TRUE, reason, "", now)
    })
    .await
}

/// The budget reason name a method's NodeClaims record (`Expired` for expiration).
fn recorded_reason(method: Method) -> String {
    method
        .budget_reason()
        .map_or_else(|| "Expired".to_string(), |r| r.to_string())
}

/// Expiration: delete the NodeClaims now; no replacements first, no budgets, no do-not-disrupt
/// (termination still honours PDBs until the terminationGracePeriod).
async fn expire(
    ctx: &Context,
    cluster: &Snapshot,
    state: &State,
    cmd: &Command,
) -> Result<bool, Error> {
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
        mark_reason(ctx, &claim.name_any(), &recorded_reason(cmd.method)).await?;
        delete_claim(&api, &claim.name_any()).await?;
        count_disrupted(state, cluster, cmd.method, node, claim);
    }
    Ok(true)
}

/// Deletes a NodeClaim. A failed request whose deletion nonetheless happened (the response was
/// lost) counts as done: the NodeClaim is read back before an error is reported.
async fn delete_claim(api: &Api<NodeClaim>, name: &str) -> Result<(), Error> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => match api.get_opt(name).await {
            Ok(None) => Ok(()),
            Ok(Some(c)) if c.metadata.deletion_timestamp.is_some() => Ok(()),
            _ => Err(e.into()),
        },
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

/// Carries out one voluntary command: launch the replacements, then [`complete`]. Returns
/// whether the candidates were deleted.
async fn execute(
    ctx: &Context,
    cluster: &Snapshot,
    state: &State,
    cmd: &Command,
) -> Result<bool, Error> {
    if cmd
        .candidates
        .iter()
        .any(|n| claim_of(cluster, n).is_none())
    {
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
    METRICS
        .voluntary_disruption_decisions_total
        .with_label_values(&[
            decision_label(cmd),
            cmd.method.reason_label(),
            cmd.method.consolidation_type(),
        ])
        .inc();
    let pools: BTreeSet<String> = cmd
        .candidates
        .iter()
        .filter_map(|n| {
            claim_of(cluster, n)?
                .labels()
                .get(labels::NODEPOOL)
                .cloned()
        })
        .collect();
    for pool in &pools {
        METRICS
            .voluntary_disruption_decisions_by_nodepool_total
            .with_label_values(&[
                pool,
                decision_label(cmd),
                cmd.method.reason_label(),
                cmd.method.consolidation_type(),
            ])
            .inc();
    }
    let marker = serde_json::to_string(&CommandMarker {
        method: cmd.method,
        reason: cmd.reason.clone(),
        candidates: cmd.candidates.clone(),
        pods_before: pods_before.clone(),
    })
    .unwrap_or_default();
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
        let mut claim = crate::controllers::provisioning::replacement_nodeclaim(
            pool,
            cluster.nodeclass_of(pool),
            r,
            requests_of(state, &r.pods),
        );
        claim
            .annotations_mut()
            .insert(COMMAND_ANNOTATION.into(), marker.clone());
        match api.create(&PostParams::default(), &claim).await {
            Ok(made) => {
                tracing::info!(controller = "disruption", nodeclaim = %made.name_any(), nodepool = %r.node_pool, instance_types = ?r.instance_type_options, "launched replacement");
                crate::metrics::count_nodeclaim_created(cmd.method.reason_label(), &made);
                launched.push(made.name_any());
            }
            Err(e) => {
                // A replacement whose creation response was lost carries the marker: the next
                // pass rolls it back.
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
    complete(ctx, cluster, cmd, &launched, &pods_before).await
}

/// The rest of a command once its replacements exist: wait for them to initialize, taint the
/// candidates, wait the validation delay, re-validate, delete the candidates and clear the
/// replacements' marker. Rolls back whatever does not hold. Returns whether the candidates were
/// deleted.
async fn complete(
    ctx: &Context,
    cluster: &Snapshot,
    cmd: &Command,
    launched: &[String],
    pods_before: &BTreeMap<String, usize>,
) -> Result<bool, Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    if let Err(why) = wait_initialized(ctx, launched).await {
        queue_failure(cmd);
        abandon(ctx, cluster, cmd, launched, &why).await;
        return Ok(false);
    }
    tracing::info!(controller = "disruption", candidates = ?cmd.candidates, "replacements initialized; tainting candidates");
    let reason = recorded_reason(cmd.method);
    for node in &cmd.candidates {
        let current = ctx.state.nodes.get(&ObjectRef::<Node>::new(node));
        let mut tainted = match current {
            Some(n) => termination::taint_node(ctx, &n).await,
            None => Ok(()),
        };
        if tainted.is_ok()
            && let Some(claim) = claim_of(cluster, node)
        {
            tainted = mark_reason(ctx, &claim.name_any(), &reason).await;
        }
        if let Err(e) = tainted {
            rollback(ctx, cmd, launched).await;
            return Err(e);
        }
    }
    tokio::time::sleep(ctx.intervals.validation_delay).await;
    let (fresh_cluster, fresh, nominated) = current_state(ctx).await;
    let validated = match cmd.candidates.iter().find(|c| nominated.contains(*c)) {
        Some(c) => Err(format!("node {c} is nominated for pending pods")),
        None => validation::validate(&fresh, cmd, pods_before, ctx.clock.now()),
    };
    if let Err(why) = validated {
        METRICS
            .voluntary_disruption_failed_validations_total
            .with_label_values(&[cmd.method.consolidation_type()])
            .inc();
        abandon(ctx, cluster, cmd, launched, &why).await;
        return Ok(false);
    }
    tracing::info!(controller = "disruption", candidates = ?cmd.candidates, "command still valid; deleting candidates");
    for node in &cmd.candidates {
        let Some(claim) = claim_of(&fresh_cluster, node) else {
            continue;
        };
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
            rollback(ctx, cmd, launched).await;
            return Err(e);
        }
        count_disrupted(&fresh, &fresh_cluster, cmd.method, node, claim);
    }
    clear_markers(&api, launched).await?;
    Ok(true)
}

/// Gives up on a command: an event saying why, then [`rollback`].
async fn abandon(ctx: &Context, cluster: &Snapshot, cmd: &Command, launched: &[String], why: &str) {
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

/// Undoes a command that will not complete: the candidates not being deleted lose the
/// disruption taint and their `DisruptionReason`, replacements no pod has moved to yet are
/// deleted and the others lose their marker. Failures are logged; the next pass clears whatever
/// is left behind (taints and conditions of nodes no command holds, markers of commands no
/// controller runs).
async fn rollback(ctx: &Context, cmd: &Command, launched: &[String]) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for node in &cmd.candidates {
        let Some(n) = ctx.state.nodes.get(&ObjectRef::<Node>::new(node)) else {
            continue;
        };
        let claim = crate::controllers::nodeclaim::claim_of_node(&ctx.state.nodeclaims, &n);
        let deleting = match &claim {
            Some(name) => api
                .get_opt(name)
                .await
                .map(|c| c.is_none_or(|c| c.metadata.deletion_timestamp.is_some())),
            None => Ok(false),
        };
        match deleting {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(controller = "disruption", node = %node, error = %e, "could not read the candidate's NodeClaim; the next pass untaints it");
                continue;
            }
        }
        if let Err(e) = termination::untaint_node(ctx, &n).await {
            tracing::warn!(controller = "disruption", node = %node, error = %e, "could not remove the disruption taint");
        }
        if let Some(name) = claim
            && let Err(e) = termination::update_conditions(ctx, &name, |c| {
                let before = c.len();
                c.retain(|c| c.type_ != DISRUPTION_REASON);
                c.len() != before
            })
            .await
        {
            tracing::warn!(controller = "disruption", nodeclaim = %name, error = %e, "could not clear the disruption reason");
        }
    }
    let mut keep = Vec::new();
    for name in launched {
        let node_name = ctx
            .state
            .nodeclaims
            .get(&ObjectRef::new(name))
            .and_then(|c| c.status.as_ref()?.node_name.clone());
        let used = node_name.is_some_and(|n| {
            ctx.state.pods.state().iter().any(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(n.as_str())
                    && !crate::snapshot::is_daemon_pod(&p.metadata)
            })
        });
        if used {
            keep.push(name.clone());
            continue;
        }
        if let Err(e) = delete_claim(&api, name).await {
            tracing::warn!(controller = "disruption", nodeclaim = %name, error = %e, "could not delete an unused replacement");
        }
    }
    if let Err(e) = clear_markers(&api, &keep).await {
        tracing::warn!(controller = "disruption", error = %e, "could not clear the marker of kept replacements");
    }
}

/// Whether the cache shows the replacement Initialized, and its Node too (initialized label, no
/// unregistered taint): the two watches deliver independently, and a Node still showing its
/// registration taint would make the validation's simulation find no room on it.
fn replacement_ready(ctx: &Context, claim: &NodeClaim) -> bool {
    let status = claim.status.as_ref();
    if !status.is_some_and(|s| conditions::is_true(&s.conditions, INITIALIZED)) {
        return false;
    }
    let Some(node) = status
        .and_then(|s| s.node_name.as_deref())
        .and_then(|n| ctx.state.nodes.get(&ObjectRef::new(n)))
    else {
        return false;
    };
    node.labels().get(labels::INITIALIZED).map(String::as_str) == Some("true")
        && !node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == labels::UNREGISTERED_TAINT_KEY))
}

/// Waits until every replacement NodeClaim is Initialized; fails if one is deleted (it could
/// not launch) or the timeout passes.
async fn wait_initialized(ctx: &Context, names: &[String]) -> Result<(), String> {
    let start = tokio::time::Instant::now();
    let timeout = ctx.intervals.replacement_timeout;
    loop {
        let mut pending = None;
        for name in names {
            match ctx.state.nodeclaims.get(&ObjectRef::new(name)) {
                Some(c) if c.metadata.deletion_timestamp.is_some() => {
                    return Err(format!("replacement NodeClaim {name} is being deleted"));
                }
                Some(c) if replacement_ready(ctx, &c) => {}
                _ => pending = Some(name),
            }
        }
        let Some(name) = pending else {
            return Ok(());
        };
        if start.elapsed() > timeout {
            return Err(format!(
                "replacement NodeClaim {name} did not initialize within {timeout:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_marker_round_trips() {
        let marker = CommandMarker {
            method: Method::Drift,
            reason: "NodePoolDrifted".into(),
            candidates: vec!["n1".into(), "n2".into()],
            pods_before: BTreeMap::from([("n1".into(), 3), ("n2".into(), 0)]),
        };
        let text = serde_json::to_string(&marker).expect("json");
        assert!(text.contains("\"method\":\"Drift\""), "{text}");
        let back: CommandMarker = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, marker);
        let cmd = back.command();
        assert_eq!(cmd.candidates, marker.candidates);
        assert!(cmd.replacements.is_empty());
    }

    #[test]
    fn termination_mode_follows_the_grace_period() {
        let claim = |tgp: Option<&str>| -> NodeClaim {
            let mut v = json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                         "requirements": []},
            });
            if let Some(t) = tgp {
                v["spec"]["terminationGracePeriod"] = json!(t);
            }
            serde_json::from_value(v).expect("claim")
        };
        assert_eq!(termination_mode(&claim(None)), "graceful");
        assert_eq!(termination_mode(&claim(Some("0s"))), "forceful");
        assert_eq!(termination_mode(&claim(Some("1h"))), "eventual");
    }
}
