//! The disruption controller: the async shell around [`crate::disruption::evaluate_with`].
//!
//! Every poll period (at once after acting) it snapshots the cluster, asks the pure engine what
//! to disrupt and starts the commands, in upstream's order: wait the validation delay (drift:
//! until its NodeClaims show `Drifted=True`) and check the command still holds on a fresh
//! snapshot — candidates, budgets and a scheduling simulation that must still ask for what the
//! command launches — then taint the candidates `karpenter.sh/disrupted:NoSchedule` (recording
//! the reason in their `DisruptionReason` condition) and launch the replacements. The rest runs
//! beside the next passes, in the [`Queue`] (upstream's orchestration queue): wait until the
//! replacements are Initialized, then delete the candidates' NodeClaims (termination drains
//! them). A command in flight counts against its budget, so a drift roll keeps as many nodes
//! moving as the budget allows. Validating first means a command that no longer holds costs
//! nothing; one whose replacements do not come up is rolled back: the taint and the condition
//! come off and unused replacements are deleted.
//!
//! Nothing is remembered across restarts but what is on the objects. Replacements carry
//! [`COMMAND_ANNOTATION`], naming the command (method, reason, candidates) they were launched
//! for, until it ends; a replacement carrying the marker of no command in this controller's queue
//! belongs to a command whose controller died: the pass finishes that command (re-checking its
//! candidates first) or rolls it back, then takes the disruption taint off every node no command
//! holds. Expiration commands are forceful: their NodeClaims are deleted at once.
//!
//! The pass (decide, report budgets, pick the command) is here; starting a command is in
//! `command`, the commands in flight in `queue`, resuming or rolling back a dead controller's
//! command in `resume`, and the events and disruption counts in `events`.
//!
//! Metrics as upstream's: `karpenter_voluntary_disruption_*`,
//! `karpenter_nodepools_allowed_disruptions` and `_nodes_consuming_budgets`,
//! `karpenter_nodeclaims_disrupted_total`, `karpenter_pods_disruption_initiated_total` and the
//! Balanced policy's `karpenter_consolidation_*`.

mod command;
mod events;
mod queue;
mod resume;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use kube::ResourceExt;

use crate::apis::NodeClaim;
use crate::apis::nodepool::DisruptionReason;
use crate::controllers::pod_annotations::InvalidAnnotations;
use crate::disruption::state::State;
use crate::disruption::{self, Command, Method, budgets};
use crate::metrics::METRICS;
use crate::runtime::panics::guarded_pass;
use crate::runtime::{Context, Error};
use crate::snapshot::Snapshot;
use crate::snapshot::disruption_input;
use crate::snapshot::scheduling_input::Prepared;

pub use events::{BLOCKED_EVENT_INTERVAL, BlockedEvents};
pub use queue::Queue;
pub use resume::{COMMAND_ANNOTATION, CommandMarker, resume_commands};

use command::{Planned, execute, expire};
use events::report_blocked;
use resume::untaint_orphans;

/// Runs until the task is dropped.
pub async fn run(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    let mut reported = BlockedEvents::default();
    let mut invalid = InvalidAnnotations::default();
    let mut queue = Queue::default();
    loop {
        let pass = async {
            invalid.report(&ctx).await;
            once(&ctx, &mut reported, &mut queue).await
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

/// The engine's state of the cluster now, with the instance types the provider offers and what
/// the provisioner is dealing with.
async fn current_state(ctx: &Context) -> (Snapshot, State) {
    let cluster = ctx.state.snapshot();
    let prepared = prepare(ctx, &cluster).await;
    let state = engine_state(ctx, &cluster, prepared);
    (cluster, state)
}

/// The scheduler's input for `cluster`, with the instance types the provider offers.
async fn prepare(ctx: &Context, cluster: &Snapshot) -> Prepared {
    let types = crate::controllers::provisioning::instance_types(ctx, cluster).await;
    crate::snapshot::scheduling_input::prepare(cluster, &types, &ctx.options)
}

/// The engine's state of `cluster`, priced and templated from `prepared`, with what the
/// provisioner is dealing with.
fn engine_state(ctx: &Context, cluster: &Snapshot, prepared: Prepared) -> State {
    let Prepared {
        input,
        static_templates,
        ..
    } = prepared;
    let now = ctx.clock.now();
    let planned_onto = ctx.nominations.targets(cluster, now);
    // Pods kube-scheduler has not judged yet are about to take room too: the engine must not
    // disrupt nodes into it.
    let mut pending = input.pods;
    pending.extend(crate::snapshot::scheduling_input::awaiting_scheduler_pods(
        cluster,
    ));
    let waiting = disruption_input::waiting(cluster, &input.existing, pending, planned_onto);
    let mut state = disruption_input::disruption_state(
        cluster,
        input.nodepools,
        ctx.options.scheduler,
        disruption_input::Unbound::LeftOut,
        now,
    );
    state.static_templates = static_templates;
    state.waiting = waiting;
    state
}

/// The NodeClaim of the Node named `node`.
fn claim_of<'a>(cluster: &'a Snapshot, node: &str) -> Option<&'a NodeClaim> {
    let node = cluster
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node))?;
    crate::snapshot::joins::claim_of(&cluster.nodeclaims, node).map(Arc::as_ref)
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
/// evaluate, validate and start the commands; `queue` carries them on. Returns whether it
/// acted.
///
/// `reported` remembers the `DisruptionBlocked` events sent, so that a node's reason is reported
/// once (and a changing one at most every [`BLOCKED_EVENT_INTERVAL`]).
pub async fn once(
    ctx: &Arc<Context>,
    reported: &mut BlockedEvents,
    queue: &mut Queue,
) -> Result<bool, Error> {
    let (cluster, mut state) = current_state(ctx).await;
    queue.reap(&cluster);
    queue.mark(&mut state);
    let now = ctx.clock.now();
    report_budgets(&state, now);
    let mut left = resume::left_behind(&cluster);
    left.retain(|marker, _| !queue.holds(marker));
    if !left.is_empty() {
        // Resuming waits for replacements; the engine's state is not needed for it.
        drop(state);
        resume::resume(ctx, &cluster, left).await?;
        return Ok(true);
    }
    untaint_orphans(ctx, &cluster, &queue.candidates()).await?;
    let decision = decide(ctx, &state, now);
    report_blocked(ctx, &cluster, &decision.blocked, reported).await;
    let planned: Vec<Planned> = decision
        .commands
        .iter()
        .map(|cmd| Planned::new(&cluster, &state, cmd))
        .collect();
    // Carrying a command out waits (the validation delay, the replacements' initialization) and
    // looks again at a fresh view; the view the commands were decided on is not held meanwhile.
    drop((cluster, state));
    let (forced, voluntary): (Vec<&Planned>, Vec<&Planned>) = planned
        .iter()
        .partition(|plan| plan.cmd.method == Method::Expiration);
    let mut acted = false;
    for plan in forced {
        match expire(ctx, plan).await {
            Ok(done) => acted |= done,
            Err(e) => report_failure(plan.cmd, &e),
        }
    }
    acted |= execute(ctx, &voluntary, queue).await;
    Ok(acted)
}

/// Counts and logs a command that failed while being carried out.
fn report_failure(cmd: &Command, e: &Error) {
    queue_failure(cmd, decision_label(cmd));
    tracing::warn!(controller = "disruption", command = ?cmd.candidates, error = %e, "disruption command failed");
}

/// `delete` when a command only removes nodes, `replace` when it launches replacements.
fn decision_label(cmd: &Command) -> &'static str {
    if cmd.replacements.is_empty() {
        "delete"
    } else {
        "replace"
    }
}

/// Counts a command that failed while being carried out under `decision` (see
/// [`decision_label`]; a command resumed from its marker has lost its planned replacements, but
/// only a replacing command leaves a marker).
fn queue_failure(cmd: &Command, decision: &'static str) {
    METRICS
        .voluntary_disruption_queue_failures_total
        .with_label_values(&[
            decision,
            cmd.method.reason_label(),
            cmd.method.consolidation_type(),
        ])
        .inc();
}
