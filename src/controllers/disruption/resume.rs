//! Commands a controller died in the middle of: a replacement NodeClaim still carrying
//! [`COMMAND_ANNOTATION`] at the start of a pass belongs to one, which the pass finishes
//! (re-validating its candidates first) or rolls back; then the disruption taint comes off every
//! node no command holds.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::apis::NodeClaim;
use crate::apis::conditions;
use crate::apis::nodeclaim::condition::DISRUPTION_REASON;
use crate::controllers::nodeclaim::termination;
use crate::disruption::{Command, Method};
use crate::runtime::{Context, Error};
use crate::snapshot::Snapshot;

use super::command::{abandon, complete, rollback, taint_candidates};
use super::{claim_of, engine_state, prepare, queue_failure};
use crate::disruption::validation::{Stage, validate};
use crate::metrics::METRICS;

/// Annotation on a replacement NodeClaim: the command it was launched for, as JSON
/// ([`CommandMarker`]). Removed once the command completed.
pub const COMMAND_ANNOTATION: &str = "karpenter-rs.sh/disruption-command";

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
    pub(super) fn command(&self) -> Command {
        Command {
            method: self.method,
            reason: self.reason.clone(),
            candidates: self.candidates.clone(),
            replacements: Vec::new(),
            savings: 0.0,
        }
    }
}

/// Commands whose replacements still carry [`COMMAND_ANNOTATION`]: their controller died (or
/// could not clear the marker). Each is finished after a fresh validation, or rolled back.
/// Returns whether there was any. Public so the in-memory controller tests can drive the resume
/// and the rollback without the polling loop.
pub async fn resume_commands(ctx: &Context, cluster: &Snapshot) -> Result<bool, Error> {
    let left = left_behind(cluster);
    if left.is_empty() {
        return Ok(false);
    }
    resume(ctx, cluster, left).await?;
    Ok(true)
}

/// The commands an earlier run left: each marker still on a replacement not being deleted, with
/// the replacements carrying it.
pub(super) fn left_behind(cluster: &Snapshot) -> BTreeMap<String, Vec<String>> {
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
    commands
}

/// Finishes or rolls back each command [`left_behind`] found.
pub(super) async fn resume(
    ctx: &Context,
    cluster: &Snapshot,
    commands: BTreeMap<String, Vec<String>>,
) -> Result<(), Error> {
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
            if let Err(e) = finish(ctx, &cmd, &live, &marker.pods_before).await {
                // Only a replacing command leaves a marker to resume.
                queue_failure(&cmd, "replace");
                tracing::warn!(controller = "disruption", command = ?cmd.candidates, error = %e, "resumed disruption command failed");
            }
        }
    }
    Ok(())
}

/// Finishes a resumed command whose replacements exist: its candidates must still qualify and
/// fit the budgets (the launch it asked for is not re-planned: it happened), then they are
/// tainted (again, if the earlier run had) and [`complete`] waits for the replacements and
/// deletes them. Returns as [`complete`] does.
async fn finish(
    ctx: &Context,
    cmd: &Command,
    live: &[String],
    pods_before: &BTreeMap<String, usize>,
) -> Result<bool, Error> {
    let cluster = ctx.state.snapshot();
    // At this stage neither nominations nor the plan are checked: the replacements exist.
    let prepared = prepare(ctx, &cluster).await;
    let state = engine_state(ctx, &cluster, prepared);
    let validated = validate(&state, cmd, pods_before, ctx.clock.now(), Stage::Launched);
    drop(state);
    if let Err(why) = validated {
        METRICS
            .voluntary_disruption_failed_validations_total
            .with_label_values(&[cmd.method.consolidation_type()])
            .inc();
        return Ok(abandon(ctx, &cluster, cmd, live, &why).await);
    }
    taint_candidates(ctx, &cluster, cmd).await?;
    // The wait for the replacements is long: it does not hold this view.
    drop(cluster);
    complete(ctx, cmd, live).await
}

/// Removes the command marker from replacements whose command is over.
pub(super) async fn clear_markers(api: &Api<NodeClaim>, names: &[String]) -> Result<(), Error> {
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
/// not Karpenter's to untaint, nor are the candidates of commands `in_flight`.
pub(super) async fn untaint_orphans(
    ctx: &Context,
    cluster: &Snapshot,
    in_flight: &BTreeSet<String>,
) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for node in &cluster.nodes {
        if node.metadata.deletion_timestamp.is_some() || in_flight.contains(&node.name_any()) {
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
}
