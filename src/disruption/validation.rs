//! Re-validation of a command after the validation delay (upstream's 15 s), before anything is
//! tainted or launched: between the decision and now, pods may have arrived, a `do-not-disrupt`
//! annotation or a PDB may now protect a candidate, the drift may have been reverted, other
//! disruptions may have used the budget, or capacity the pods were to move to may be gone. The
//! command goes ahead only if every candidate would still be chosen for the same reason, the
//! budgets still allow it, and a fresh scheduling simulation without the candidates still asks
//! for what the command launches (nothing, or one node among the same instance types), as
//! upstream's validation does. Validating before the launch, not after, means a command that
//! no longer holds costs nothing: no replacement is paid for and then thrown away. Drift is the
//! exception on the plan (upstream does not re-validate it): a drifted node goes either way, so
//! where its pods now need other replacements it is replaced by those rather than dropped.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::apis::labels;

use super::budgets;
use super::candidates::candidates;
use super::drift::DriftVerdict;
use super::state::State;
use super::{
    Command, Method, Moves, NewNode, Replacement, Reschedule, Sizing, replacement, reschedule_on,
};

/// Where the command stands when it is validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Decided, nothing done yet: the plan is checked too.
    Decided,
    /// Its replacements were launched by an earlier run (the controller is resuming it): they
    /// exist, so the plan that asked for them is not re-simulated; the candidates still are.
    Launched,
}

/// How a command that still holds goes ahead.
#[derive(Debug, Default)]
pub struct Validated {
    /// Where the fresh simulation puts the candidates' pods that go to existing nodes, for
    /// [`State::start`]: a later command of the same pass is validated on the view this one
    /// leaves, as the engine decided it.
    pub moves: Moves,
    /// A drift command with its replacements as the fresh simulation asks for them (and its
    /// savings accordingly), to start instead of the planned one, whose replacements no longer
    /// hold its pods.
    pub replanned: Option<Command>,
}

/// Checks `cmd` against a fresh `state`. Candidates carrying the disruption taint (a resumed
/// command put it on them) are judged as if they did not. `pods_before` holds, per candidate,
/// how many pods had to move when the command was decided: a consolidation whose candidate
/// gained pods is stale. Returns how the command goes ahead, or why it must be abandoned.
pub fn validate(
    state: &State,
    cmd: &Command,
    pods_before: &BTreeMap<String, usize>,
    now: DateTime<Utc>,
    stage: Stage,
) -> Result<Validated, String> {
    let mut fresh = state.clone();
    for node in fresh
        .nodes
        .iter_mut()
        .filter(|n| cmd.candidates.iter().any(|c| c.as_str() == n.name.as_ref()))
    {
        node.taints.retain(|t| t.key != labels::DISRUPTED_TAINT_KEY);
        node.disrupting = false;
    }
    let (cands, blocked) = candidates(&fresh, now);
    // A nominated candidate waits, unless the command is forceful or already paid for.
    let nominated = if cmd.method == Method::Expiration || stage == Stage::Launched {
        Default::default()
    } else {
        fresh.nominated()
    };
    for name in &cmd.candidates {
        let Some(index) = fresh.nodes.iter().position(|n| n.name.as_ref() == name) else {
            return Err(format!("node {name} is gone"));
        };
        let Some(c) = cands.iter().find(|c| c.node == index) else {
            let why = blocked
                .iter()
                .find(|(i, _, _)| *i == index)
                .map_or("it is no longer a candidate", |(_, _, w)| w.as_str());
            return Err(format!("node {name}: {why}"));
        };
        if nominated.contains(&index) {
            return Err(format!("node {name}: {}", super::NOMINATED));
        }
        let ok = match cmd.method {
            Method::Expiration => true,
            Method::Emptiness => {
                if let Some(p) = &c.protected {
                    return Err(format!("node {name} is protected: {p}"));
                }
                c.pods.is_empty() && c.consolidatable
            }
            Method::Drift => {
                if let Some(p) = c.protected.as_ref().filter(|_| !c.has_tgp) {
                    return Err(format!("node {name} is protected: {p}"));
                }
                matches!(c.drift, DriftVerdict::Drifted(..))
            }
            Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
                if let Some(p) = &c.protected {
                    return Err(format!("node {name} is protected: {p}"));
                }
                c.consolidatable && c.pods.len() <= pods_before.get(name).copied().unwrap_or(0)
            }
        };
        if !ok {
            return Err(format!(
                "node {name} no longer qualifies for {:?} ({} pods now)",
                cmd.method,
                c.pods.len()
            ));
        }
    }
    if let Some(reason) = cmd.method.budget_reason() {
        within_budgets(&fresh, cmd, reason, now)?;
    }
    if stage == Stage::Decided && cmd.method != Method::Expiration && !static_drift(&fresh, cmd) {
        return same_plan(&fresh, cmd);
    }
    Ok(Validated::default())
}

/// Whether `cmd` replaces drifted nodes of static NodePools. Their replacement is built from the
/// pool's template, not for their pods (as upstream's static drift), so whether those pods fit
/// elsewhere does not decide it: any that do not go back to provisioning.
fn static_drift(fresh: &State, cmd: &Command) -> bool {
    cmd.method == Method::Drift
        && cmd.candidates.iter().all(|name| {
            fresh
                .nodes
                .iter()
                .find(|n| n.name.as_ref() == name)
                .and_then(|n| fresh.nodepool(n.nodepool.as_deref()?))
                .is_some_and(|p| p.spec.replicas.is_some())
        })
}

/// The budgets of the candidates' NodePools still allow them all, counting every other node
/// that is disrupting now.
fn within_budgets(
    fresh: &State,
    cmd: &Command,
    reason: crate::apis::nodepool::DisruptionReason,
    now: DateTime<Utc>,
) -> Result<(), String> {
    let mut per_pool: BTreeMap<&str, u32> = BTreeMap::new();
    for name in &cmd.candidates {
        let pool = fresh
            .nodes
            .iter()
            .find(|n| n.name.as_ref() == name)
            .and_then(|n| n.nodepool.as_deref())
            .ok_or_else(|| format!("node {name} has no NodePool any more"))?;
        *per_pool.entry(pool).or_default() += 1;
    }
    for (pool, wanted) in per_pool {
        let nodepool = fresh
            .nodepool(pool)
            .ok_or_else(|| format!("NodePool {pool} is gone"))?;
        let in_pool = fresh
            .nodes
            .iter()
            .filter(|n| n.nodepool.as_deref() == Some(pool));
        let (total, disrupting) =
            in_pool.fold((0, 0), |(t, d), n| (t + 1, d + u32::from(n.disrupting)));
        let allowance = budgets::allowance(nodepool, reason, total, disrupting, now);
        if allowance.remaining < wanted {
            return Err(format!(
                "the disruption budget for {reason} of NodePool {pool} now allows {} more, the command needs {wanted}: {}",
                allowance.remaining,
                allowance.explanation.join("; ")
            ));
        }
    }
    Ok(())
}

/// A fresh simulation without the candidates still asks for what `cmd` launches: nothing for a
/// deletion; for replacements, as many new nodes, each matched by one of them in the same
/// NodePool whose instance types include all of that replacement's (the simulation does not
/// filter by price, so it may offer more). A consolidation whose pods now fit without its
/// replacement is re-decided rather than paid for; a drifted node is replaced even if its pods
/// now fit elsewhere or on fewer new nodes (it goes either way, and its replacements are
/// capacity), and where its replacements no longer hold its pods (it gained pods meanwhile,
/// say) it is replaced by what the fresh simulation asks for, as upstream's drift launches what
/// its simulation asks for when it acts.
fn same_plan(fresh: &State, cmd: &Command) -> Result<Validated, String> {
    let excluded: Vec<usize> = fresh
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| cmd.candidates.iter().any(|c| c.as_str() == n.name.as_ref()))
        .map(|(i, _)| i)
        .collect();
    let pods: Vec<usize> = fresh
        .pods
        .iter()
        .enumerate()
        .filter(|(_, p)| p.node.is_some_and(|n| excluded.contains(&n)) && p.reschedulable())
        .map(|(i, _)| i)
        .collect();
    // Simulated as the command was: a consolidation into replacements sized by cost is not
    // what upstream's sizing asks for.
    let sizing = cmd
        .replacements
        .first()
        .map_or(Sizing::EveryFittingType, |r| r.sizing);
    let (decided, moves) = reschedule_on(fresh, &excluded, pods, sizing);
    let needed = match decided {
        Reschedule::No(why) => return Err(format!("the candidates' pods no longer fit: {why}")),
        Reschedule::Delete => Vec::new(),
        Reschedule::Replace(new) => vec![*new],
        Reschedule::ReplaceMany(news) => news,
    };
    let planned = &cmd.replacements;
    if cmd.method == Method::Drift {
        let replanned = uncovered(fresh, &needed, planned).map(|_| {
            let replacements: Vec<Replacement> = needed
                .iter()
                .map(|new| replacement(fresh, new, &new.claim.instance_types))
                .collect();
            let price = |rs: &[Replacement]| rs.iter().map(|r| r.price).sum::<f64>();
            Command {
                savings: cmd.savings + price(planned) - price(&replacements),
                replacements,
                ..cmd.clone()
            }
        });
        return Ok(Validated { moves, replanned });
    }
    if needed.is_empty() && !planned.is_empty() {
        return Err(
            "the candidates' pods now fit on the remaining nodes without a replacement; the command is decided afresh".into(),
        );
    }
    if needed.len() < planned.len() {
        return Err(format!(
            "the candidates' pods would now need {} new nodes, the command launches {}; the command is decided afresh",
            needed.len(),
            planned.len()
        ));
    }
    match uncovered(fresh, &needed, planned) {
        Some(why) => Err(why),
        None => Ok(Validated {
            moves,
            replanned: None,
        }),
    }
}

/// Why the `planned` replacements do not hold what the fresh simulation says the candidates'
/// pods need: more new nodes than planned, or a needed node that no replacement left matches
/// (same NodePool, options among those that fit). `None` when every needed node takes one.
fn uncovered(fresh: &State, needed: &[NewNode], planned: &[Replacement]) -> Option<String> {
    if needed.len() > planned.len() {
        return Some(match planned.len() {
            0 => "the candidates' pods no longer fit on the remaining nodes (they would need a new node)".into(),
            n => format!(
                "the candidates' pods would now need {} new nodes, the command launches {n}",
                needed.len()
            ),
        });
    }
    let mut unmatched: Vec<&Replacement> = planned.iter().collect();
    for new in needed {
        let claim = &new.claim;
        let template = &fresh.templates[claim.nodepool];
        let fitting: Vec<&str> = claim
            .instance_types
            .iter()
            .map(|&t| template.instance_types[t as usize].name.as_ref())
            .collect();
        let covers = |r: &Replacement| {
            *template.name == *r.node_pool
                && r.instance_type_options
                    .iter()
                    .all(|t| fitting.contains(&t.as_str()))
        };
        let Some(k) = unmatched.iter().position(|r| covers(r)) else {
            // No replacement left covers this node: say why the first one does not.
            let first = unmatched.first();
            let missing = first.and_then(|r| {
                r.instance_type_options
                    .iter()
                    .find(|t| !fitting.contains(&t.as_str()))
            });
            return Some(match (first, missing) {
                (Some(r), _) if *template.name != *r.node_pool => format!(
                    "the candidates' pods would now go to NodePool {}, not {}",
                    template.name, r.node_pool
                ),
                (_, Some(t)) => {
                    format!(
                        "the replacement's instance type {t} no longer fits the candidates' pods"
                    )
                }
                _ => "the replacements no longer match the candidates' pods".into(),
            });
        };
        unmatched.swap_remove(k);
    }
    None
}

/// How many pods each of the command's candidates must move, recorded when the command is
/// decided for [`validate`].
pub fn pods_to_move(state: &State, cmd: &Command) -> BTreeMap<String, usize> {
    cmd.candidates
        .iter()
        .filter_map(|name| {
            let i = state.nodes.iter().position(|n| n.name.as_ref() == name)?;
            Some((
                name.clone(),
                state.pods_on(i).filter(|p| p.reschedulable()).count(),
            ))
        })
        .collect()
}
