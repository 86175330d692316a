//! Carrying out one command, in upstream's order: wait the validation delay (emptiness and
//! consolidation; drift waits only for its NodeClaims to show `Drifted=True`) and re-validate,
//! taint and mark the candidates and launch the replacements ([`execute`]); then, in the queue
//! beside the next passes, wait until they are Initialized and delete the candidates' NodeClaims
//! ([`complete`]; expiration deletes them at once). A command that no longer holds is dropped
//! before anything is paid for; one whose replacements fail is rolled back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;

use crate::apis::conditions;
use crate::apis::nodeclaim::condition::{DISRUPTION_REASON, DRIFTED, INITIALIZED};
use crate::apis::{NodeClaim, labels};
use crate::controllers::nodeclaim::termination;
use crate::disruption::state::State;
use crate::disruption::validation::{self, Stage};
use crate::disruption::{Command, Method};
use crate::metrics::METRICS;
use crate::runtime::{Context, Error};
use crate::snapshot::Snapshot;
use crate::snapshot::disruption_input::{Unbound, disruption_state};

use super::events::{count_disrupted, event_on};
use super::queue::Queue;
use super::resume::{COMMAND_ANNOTATION, CommandMarker, clear_markers};
use super::{claim_of, current_state, decision_label, queue_failure};

/// Records why a candidate is being disrupted on its NodeClaim (upstream's `DisruptionReason`
/// condition), which the drain reports in `karpenter_pods_drained_total`.
pub(super) async fn mark_reason(ctx: &Context, claim: &str, reason: &str) -> Result<(), Error> {
    let now = ctx.clock.now();
    termination::update_conditions(ctx, claim, |c| {
        conditions::set(c, DISRUPTION_REASON, conditions::TRUE, reason, "", now)
    })
    .await
}

/// The budget reason name a method's NodeClaims record (`Expired` for expiration).
pub(super) fn recorded_reason(method: Method) -> String {
    method
        .budget_reason()
        .map_or_else(|| "Expired".to_string(), |r| r.to_string())
}

/// What carrying out a command needs of the view it was decided on, taken before that view is
/// dropped: the command waits (the validation delay, its replacements) and looks again at a
/// fresh view, so it does not hold the old one meanwhile.
pub(super) struct Planned<'a> {
    /// The command.
    pub(super) cmd: &'a Command,
    /// The reschedulable pods on each candidate (by node name) when decided: what validation
    /// compares against and the disruption counts report.
    pods_before: BTreeMap<String, usize>,
    /// Whether every candidate had a NodeClaim.
    claimed: bool,
}

impl<'a> Planned<'a> {
    pub(super) fn new(cluster: &Snapshot, state: &State, cmd: &'a Command) -> Self {
        Self {
            cmd,
            pods_before: validation::pods_to_move(state, cmd),
            claimed: cmd
                .candidates
                .iter()
                .all(|n| claim_of(cluster, n).is_some()),
        }
    }
}

/// Expiration: delete the NodeClaims now; no replacements first, no budgets, no do-not-disrupt
/// (termination still honours PDBs until the terminationGracePeriod).
pub(super) async fn expire(ctx: &Context, plan: &Planned<'_>) -> Result<bool, Error> {
    let cmd = plan.cmd;
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let cluster = ctx.state.snapshot();
    for node in &cmd.candidates {
        let Some(claim) = claim_of(&cluster, node) else {
            continue;
        };
        tracing::info!(controller = "disruption", nodeclaim = %claim.name_any(), node = %node, "deleting expired nodeclaim");
        event_on(
            ctx,
            &cluster,
            node,
            EventType::Normal,
            "DisruptionTerminating",
            "Disrupting Node: Expired",
        )
        .await;
        mark_reason(ctx, &claim.name_any(), &recorded_reason(cmd.method)).await?;
        delete_claim(&api, &claim.name_any()).await?;
        let pods = plan.pods_before.get(node).copied().unwrap_or(0);
        count_disrupted(&cluster, cmd.method, claim, pods);
    }
    Ok(true)
}

/// Deletes a NodeClaim. A failed request whose deletion nonetheless happened (the response was
/// lost) counts as done: the NodeClaim is read back before an error is reported.
pub(super) async fn delete_claim(api: &Api<NodeClaim>, name: &str) -> Result<(), Error> {
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

/// Starts the voluntary commands of one pass (all of one method; several only for drift):
/// wait the validation delay where the method waits one, take one fresh view, then re-validate
/// each command on it and [`start`] those that hold, each judged on the view the ones before it
/// leave ([`State::start`]), as the engine decided them. Returns whether any started.
pub(super) async fn execute(ctx: &Arc<Context>, plans: &[&Planned<'_>], queue: &mut Queue) -> bool {
    let plans: Vec<&Planned<'_>> = plans
        .iter()
        .copied()
        .filter(|plan| {
            if !plan.claimed {
                tracing::warn!(controller = "disruption", command = ?plan.cmd.candidates, "a candidate has no NodeClaim; skipping the command");
            }
            plan.claimed
        })
        .collect();
    let Some(first) = plans.first() else {
        return false;
    };
    if first.cmd.method.waits_validation_delay() {
        tokio::time::sleep(ctx.intervals.validation_delay).await;
    } else if first.cmd.method == Method::Drift {
        wait_drift_shown(ctx, plans.iter().flat_map(|p| &p.cmd.candidates)).await;
    }
    let (fresh_cluster, mut fresh) = current_state(ctx).await;
    queue.mark(&mut fresh);
    let mut acted = false;
    for plan in plans {
        match start(ctx, plan, &fresh_cluster, &mut fresh, queue).await {
            Ok(started) => acted |= started,
            Err(e) => super::report_failure(plan.cmd, &e),
        }
    }
    acted
}

/// Starts one voluntary command if it still holds on `fresh` (the state of `fresh_cluster` with
/// the pass's earlier commands started): taint the candidates, launch the replacements, then
/// hand it to `queue`, which [`complete`]s it beside the next passes. A started command is
/// started on `fresh` too ([`State::start`], with its pods where validation moved them), so the
/// next command of the pass is validated on the view it leaves, as the engine decided them.
/// Returns whether it started.
async fn start(
    ctx: &Arc<Context>,
    plan: &Planned<'_>,
    fresh_cluster: &Snapshot,
    fresh: &mut State,
    queue: &mut Queue,
) -> Result<bool, Error> {
    let validated = validation::validate(
        fresh,
        plan.cmd,
        &plan.pods_before,
        ctx.clock.now(),
        Stage::Decided,
    );
    let validated = match validated {
        Ok(validated) => validated,
        Err(why) => {
            METRICS
                .voluntary_disruption_failed_validations_total
                .with_label_values(&[plan.cmd.method.consolidation_type()])
                .inc();
            // Nothing was tainted or launched yet: there is nothing to undo.
            report_dropped(ctx, fresh_cluster, plan.cmd, &why).await;
            return Ok(false);
        }
    };
    if let Some(replanned) = &validated.replanned {
        let types = |c: &Command| {
            c.replacements
                .iter()
                .map(|r| r.instance_type.clone())
                .collect::<Vec<_>>()
        };
        tracing::info!(
            controller = "disruption",
            candidates = ?plan.cmd.candidates,
            planned = ?types(plan.cmd),
            now = ?types(replanned),
            "the drifted node's pods changed since the decision; launching what they need now"
        );
    }
    let cmd = validated.replanned.as_ref().unwrap_or(plan.cmd);
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
            claim_of(fresh_cluster, n)?
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
    // Tainted before the replacements launch, so no pod lands on a candidate meanwhile.
    taint_candidates(ctx, fresh_cluster, cmd).await?;
    let marker = serde_json::to_string(&CommandMarker {
        method: cmd.method,
        reason: cmd.reason.clone(),
        candidates: cmd.candidates.clone(),
        pods_before: plan.pods_before.clone(),
    })
    .unwrap_or_default();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut launched = Vec::new();
    for r in &cmd.replacements {
        let Some(pool) = fresh_cluster
            .nodepools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&r.node_pool))
        else {
            rollback(ctx, cmd, &launched).await;
            return Ok(false);
        };
        let mut claim = crate::controllers::provisioning::replacement_nodeclaim(
            pool,
            fresh_cluster.nodeclass_of(pool),
            r,
            r.requests.clone(),
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
                // pass finishes or rolls back its command.
                rollback(ctx, cmd, &launched).await;
                return Err(e.into());
            }
        }
    }
    if !launched.is_empty() {
        for node in &cmd.candidates {
            event_on(
                ctx,
                fresh_cluster,
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
    queue.start(ctx, cmd.clone(), launched.clone(), marker);
    fresh.start(cmd, &validated.moves, |k| {
        launched.get(k).cloned().unwrap_or_default()
    });
    Ok(true)
}

/// Taints the candidates `karpenter.sh/disrupted:NoSchedule` and records the reason on their
/// NodeClaims; undoes it all if one fails.
pub(super) async fn taint_candidates(
    ctx: &Context,
    cluster: &Snapshot,
    cmd: &Command,
) -> Result<(), Error> {
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
            rollback(ctx, cmd, &[]).await;
            return Err(e);
        }
    }
    Ok(())
}

/// The rest of a validated command whose candidates are tainted and whose replacements exist:
/// wait for the replacements to initialize, delete the candidates and clear the replacements'
/// marker. Rolls back if a replacement does not come up. Returns whether the command is over
/// with no marker left behind (the candidates deleted and the markers cleared, or a rollback
/// that cleared them); after an error or `false` a marker may remain, which the next pass
/// resumes or rolls back from.
pub(super) async fn complete(
    ctx: &Context,
    cmd: &Command,
    launched: &[String],
) -> Result<bool, Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    if let Err(why) = wait_initialized(ctx, launched).await {
        // Only a replacing command gets here (a resumed one without its planned replacements).
        queue_failure(cmd, "replace");
        return Ok(abandon(ctx, &ctx.state.snapshot(), cmd, launched, &why).await);
    }
    tracing::info!(controller = "disruption", candidates = ?cmd.candidates, "replacements initialized; deleting candidates");
    let cluster = ctx.state.snapshot();
    // Only the pods on the candidates are counted: no instance types, no scheduling.
    let moving = validation::pods_to_move(
        &disruption_state(
            &cluster,
            Vec::new(),
            ctx.options.scheduler,
            Unbound::LeftOut,
            ctx.clock.now(),
        ),
        cmd,
    );
    for node in &cmd.candidates {
        let Some(claim) = claim_of(&cluster, node) else {
            continue;
        };
        event_on(
            ctx,
            &cluster,
            node,
            EventType::Normal,
            "DisruptionTerminating",
            &format!("Disrupting Node: {}/{:?}", cmd.reason, cmd.method),
        )
        .await;
        // A failed deletion leaves the command to the next pass, which resumes it from the
        // replacements' marker and deletes what is left, or, when a deletion that seemed to
        // fail did happen, finds the command complete. Rolling back here would throw away
        // replacements that are up, and with them the capacity a deleted candidate's pods need.
        delete_claim(&api, &claim.name_any()).await?;
        let pods = moving.get(node).copied().unwrap_or(0);
        count_disrupted(&cluster, cmd.method, claim, pods);
    }
    clear_markers(&api, launched).await?;
    Ok(true)
}

/// Gives up on a command: an event saying why, then [`rollback`], whose result it returns.
pub(super) async fn abandon(
    ctx: &Context,
    cluster: &Snapshot,
    cmd: &Command,
    launched: &[String],
    why: &str,
) -> bool {
    report_dropped(ctx, cluster, cmd, why).await;
    rollback(ctx, cmd, launched).await
}

/// Logs why a command is dropped and tells its candidates (`DisruptionBlocked`).
async fn report_dropped(ctx: &Context, cluster: &Snapshot, cmd: &Command, why: &str) {
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
}

/// Undoes a command that will not complete: the candidates not being deleted lose the
/// disruption taint and their `DisruptionReason`, replacements no pod has moved to yet are
/// deleted and the others lose their marker. Failures are logged; the next pass clears whatever
/// is left behind (taints and conditions of nodes no command holds, markers of commands no
/// controller runs). Returns whether no replacement still carries the marker: each was deleted
/// or lost it.
pub(super) async fn rollback(ctx: &Context, cmd: &Command, launched: &[String]) -> bool {
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
    let mut cleared = true;
    for name in launched {
        let node_name = ctx
            .state
            .nodeclaims
            .get(&ObjectRef::new(name))
            .and_then(|c| c.status.as_ref()?.node_name.clone());
        let used = node_name.is_some_and(|n| {
            ctx.state.pods.state().iter().any(|p| {
                p.node_name() == Some(n.as_str()) && !crate::snapshot::is_daemon_pod(&p.metadata)
            })
        });
        if used {
            keep.push(name.clone());
            continue;
        }
        if let Err(e) = delete_claim(&api, name).await {
            tracing::warn!(controller = "disruption", nodeclaim = %name, error = %e, "could not delete an unused replacement");
            cleared = false;
        }
    }
    if let Err(e) = clear_markers(&api, &keep).await {
        tracing::warn!(controller = "disruption", error = %e, "could not clear the marker of kept replacements");
        cleared = false;
    }
    cleared
}

/// Waits until the NodeClaim of every candidate of the pass's drift commands shows
/// `Drifted=True`, at most the validation delay. Upstream takes a node for drift only once its
/// NodeClaim says so; the engine detects drift itself (so `simulate` and `explain` see it) and
/// the status loop writes the condition within seconds, so this is usually a few seconds, and
/// users see why a node goes before it goes. A drift the status loop does not write waits the
/// full delay, as every command did before.
async fn wait_drift_shown<'a>(ctx: &Context, candidates: impl Iterator<Item = &'a String>) {
    let candidates: Vec<&String> = candidates.collect();
    let start = tokio::time::Instant::now();
    while start.elapsed() < ctx.intervals.validation_delay {
        let claims = ctx.state.nodeclaims.state();
        let shown = candidates.iter().all(|node| {
            claims.iter().any(|c| {
                c.status.as_ref().is_some_and(|s| {
                    s.node_name.as_deref() == Some(node.as_str())
                        && conditions::is_true(&s.conditions, DRIFTED)
                })
            })
        });
        if shown {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Whether the cache shows the replacement Initialized, and its Node too (initialized label, no
/// unregistered taint): the two watches deliver independently, and a Node still showing its
/// registration taint would make the validation's simulation find no room on it.
pub(super) fn replacement_ready(ctx: &Context, claim: &NodeClaim) -> bool {
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

/// How long a replacement may be missing from the cache before the API is asked whether it
/// still exists. The watch shows a new NodeClaim within moments, and one that cannot launch is
/// deleted about as fast (insufficient capacity), often before the cache ever showed it; waiting
/// for it to initialize would hold the command's candidates tainted, and its budget, for the
/// whole replacement timeout. (Upstream gives up on a replacement that is gone after 5 s too.)
const MISSING_GRACE: Duration = Duration::from_secs(5);

/// Waits until every replacement NodeClaim is Initialized; fails if one is deleted or gone (it
/// could not launch) or the timeout passes.
pub(super) async fn wait_initialized(ctx: &Context, names: &[String]) -> Result<(), String> {
    let start = tokio::time::Instant::now();
    let timeout = ctx.intervals.replacement_timeout;
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    loop {
        let mut pending = None;
        for name in names {
            match ctx.state.nodeclaims.get(&ObjectRef::new(name)) {
                Some(c) if c.metadata.deletion_timestamp.is_some() => {
                    return Err(format!("replacement NodeClaim {name} is being deleted"));
                }
                Some(c) => {
                    seen.insert(name);
                    if !replacement_ready(ctx, &c) {
                        pending = Some(name);
                    }
                }
                None if seen.contains(name.as_str())
                    || (start.elapsed() > MISSING_GRACE && gone(ctx, name).await) =>
                {
                    return Err(format!(
                        "replacement NodeClaim {name} is gone (it could not launch)"
                    ));
                }
                None => pending = Some(name),
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

/// Whether the API server no longer has NodeClaim `name` (an error reading it is no answer).
async fn gone(ctx: &Context, name: &str) -> bool {
    matches!(
        Api::<NodeClaim>::all(ctx.client.clone())
            .get_opt(name)
            .await,
        Ok(None)
    )
}
