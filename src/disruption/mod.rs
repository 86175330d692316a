//! The disruption engine: pure decisions over a cluster state and an injected clock.
//!
//! Each evaluation runs upstream Karpenter's methods in order — expiration (forceful, outside
//! budgets), then emptiness, drift, multi-node and single-node consolidation, of which only the
//! first that finds something acts — and returns commands (what to delete, what to launch
//! instead, what it saves) plus, for every node left alone, the reason. Drift may return several
//! commands, as many as its budget allows, each decided on the state the ones before leave.

pub mod budgets;
pub mod candidates;
pub mod drift;
pub mod repair;
pub mod state;
pub mod validation;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::apis::labels;
use crate::apis::nodepool::{ConsolidationPolicy, DisruptionReason};
use crate::scheduling::instance_type::CapacityType;
use crate::scheduling::requirements::{Requirement, Requirements};
use crate::scheduling::resources::Resources;
use crate::scheduling::scheduler::{self, Placement, PlannedNodeClaim, cheapest_offering};
use crate::scheduling::static_capacity;

use candidates::Candidate;
use drift::DriftVerdict;
use state::State;

/// Upstream's cap on candidates in one multi-node consolidation.
pub const MAX_MULTI_NODE_CANDIDATES: usize = 100;
/// Spot-to-spot consolidation needs at least this many cheaper instance types.
pub const MIN_SPOT_TO_SPOT_TYPES: usize = 15;

/// Engine settings.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The `SpotToSpotConsolidation` feature gate (default off, as upstream).
    pub spot_to_spot: bool,
    /// The most new nodes one consolidation may launch (`CONSOLIDATION_REPLACEMENTS`): 1, as
    /// upstream, unless set higher. Above 1 a consolidation's candidates are also simulated with
    /// new nodes sized by cost, as the provisioner sizes NodeClaims ([`Sizing::ByCost`]), and
    /// the command that saves more wins: several nodes that together cost less (three half-used
    /// 48xlarge nodes for two) or upstream's one.
    pub replacements: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            spot_to_spot: false,
            replacements: 1,
        }
    }
}

/// The method that produced a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Method {
    /// `expireAfter` reached: forceful, outside budgets and do-not-disrupt.
    Expiration,
    /// No workload pods left.
    Emptiness,
    /// The node no longer matches its NodePool or node class.
    Drift,
    /// Several nodes replaced by at most one (or [`Options::replacements`]).
    MultiNodeConsolidation,
    /// One node deleted or replaced by a cheaper one.
    SingleNodeConsolidation,
}

/// A node to launch in place of disrupted ones.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replacement {
    /// NodePool.
    pub node_pool: String,
    /// Cheapest option.
    pub instance_type: String,
    /// Its capacity type.
    pub capacity_type: String,
    /// Its hourly price.
    pub price: f64,
    /// All options, cheapest first.
    pub instance_type_options: Vec<String>,
    /// The candidates' pods it takes (`namespace/name`); the simulation put the others on
    /// existing nodes.
    pub pods: Vec<String>,
    /// What it must fit: the requests of the pods the simulation put on it (the candidates'
    /// pods it takes, never pods placed beside them: see `scheduler::Options::apart_from`) and
    /// the DaemonSet overhead, as a provisioned NodeClaim's `spec.resources.requests`. The
    /// candidates' pods alone would both miss the overhead and count pods that go elsewhere: a
    /// replacement sized for half of ten nodes' pods fits none of its options with all of them.
    #[serde(skip)]
    pub requests: Resources,
    /// The requirements the simulation gave it (the zone a topology spread chose, say): launched
    /// without them, it may come up where its pods may not go, and they wait for a node of their
    /// own.
    #[serde(skip)]
    pub requirements: Requirements,
    /// How the simulation that asked for it sized new nodes: validation simulates the same way.
    #[serde(skip)]
    pub sizing: Sizing,
}

/// How a rescheduling simulation sizes the new nodes it asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sizing {
    /// Every instance type that fits, as upstream (`scheduler::Options::every_fitting_type`):
    /// the candidates' pods that fit no remaining node share one new node where they can.
    #[default]
    EveryFittingType,
    /// By cost, as the provisioner sizes NodeClaims: the pods may be split over several new
    /// nodes that together cost less than one. Only with [`Options::replacements`] above 1.
    ByCost,
}

/// One decision.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Command {
    /// How it was found.
    pub method: Method,
    /// `Expired`, `Empty`, `Drifted` or `Underutilized` (with the drift reason for drift).
    pub reason: String,
    /// Nodes to disrupt.
    pub candidates: Vec<String>,
    /// Nodes to launch first.
    pub replacements: Vec<Replacement>,
    /// Hourly savings (negative when a replacement costs more, e.g. drift to a pricier type).
    pub savings: f64,
}

impl Method {
    /// The voluntary methods, in the order each evaluation tries them (expiration is forceful
    /// and always runs first).
    pub const VOLUNTARY: [Method; 4] = [
        Method::Emptiness,
        Method::Drift,
        Method::MultiNodeConsolidation,
        Method::SingleNodeConsolidation,
    ];

    /// The budget reason a voluntary method's commands count against (`None` for expiration,
    /// which budgets do not limit).
    pub fn budget_reason(self) -> Option<DisruptionReason> {
        match self {
            Method::Expiration => None,
            Method::Emptiness => Some(DisruptionReason::Empty),
            Method::Drift => Some(DisruptionReason::Drifted),
            Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
                Some(DisruptionReason::Underutilized)
            }
        }
    }

    /// Upstream's `reason` metric label: the disruption reason, lower-cased.
    pub fn reason_label(self) -> &'static str {
        match self {
            Method::Expiration => "expired",
            Method::Emptiness => "empty",
            Method::Drift => "drifted",
            Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => "underutilized",
        }
    }

    /// Whether a command waits the validation delay before it is re-validated and carried out.
    /// Upstream waits it (`consolidationTTL`) for emptiness and consolidation, whose commands
    /// rest on pods staying put and are dropped when they move. It takes a drifted node as soon
    /// as its NodeClaim shows `Drifted=True`, so drift waits only for that (see the disruption
    /// controller): a 15 s wait per non-empty drifted node, one at a time, made a drift roll of
    /// 180 nodes take over an hour (`benches/scale.rs`).
    pub fn waits_validation_delay(self) -> bool {
        match self {
            Method::Emptiness
            | Method::MultiNodeConsolidation
            | Method::SingleNodeConsolidation => true,
            Method::Expiration | Method::Drift => false,
        }
    }

    /// Upstream's `consolidation_type` metric label.
    pub fn consolidation_type(self) -> &'static str {
        match self {
            Method::Emptiness => "empty",
            Method::MultiNodeConsolidation => "multi",
            Method::SingleNodeConsolidation => "single",
            Method::Expiration | Method::Drift => "",
        }
    }
}

/// A move the `Balanced` consolidation policy scored, for the `karpenter_consolidation_*`
/// metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoredMove {
    /// The NodePool whose policy scored it.
    pub nodepool: String,
    /// Savings share over disruption share.
    pub score: f64,
    /// Whether the score reached the threshold.
    pub approved: bool,
}

/// Why emptiness and consolidation leave a static pool's nodes alone: the pool keeps
/// `spec.replicas` nodes whatever the pods ask for.
const STATIC_POOL: &str =
    "its NodePool is static (spec.replicas): emptiness and consolidation do not apply";

/// The drift reason of a drifted candidate, as commands and explanations name it.
fn drift_reason(c: &Candidate) -> String {
    match &c.drift {
        DriftVerdict::Drifted(r, _) => r.as_str().to_string(),
        _ => String::new(),
    }
}

/// What kind of thing keeps a node from being disrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Cause {
    /// Not Karpenter's to disrupt, its NodePool is gone, or it is being disrupted already.
    NotCandidate,
    /// Not Ready yet, or startup taints remain.
    NotInitialized,
    /// A `karpenter.sh/do-not-disrupt` annotation (node or pod) or a PodDisruptionBudget.
    Protected,
    /// The NodePool's disruption budget for the reason is used up.
    Budget,
    /// `consolidateAfter` has not elapsed since the last pod change, or is `Never`.
    ConsolidateAfter,
    /// The NodePool's consolidation policy (`WhenEmpty`) rules it out.
    Policy,
    /// Disrupting it would not work (its pods fit nowhere) or not pay.
    NotWorthIt,
    /// Nothing applies: not expired, drifted, empty, nor worth consolidating.
    Nothing,
}

impl Cause {
    /// Whether something a user set (do-not-disrupt, a PodDisruptionBudget, a disruption
    /// budget) stands in the way: the causes `run` reports in `DisruptionBlocked` events.
    pub fn set_by_user(self) -> bool {
        matches!(self, Cause::Protected | Cause::Budget)
    }
}

/// Why a node was left alone.
#[derive(Clone, Debug, Serialize)]
pub struct Blocked {
    /// Node name.
    pub node: String,
    /// The kind of reason.
    pub cause: Cause,
    /// The reason, naming the pod, PodDisruptionBudget or budget that blocks it.
    pub reason: String,
}

/// Why each node was left alone so far in one evaluation, by node index.
#[derive(Default)]
struct Reasons(BTreeMap<usize, (Cause, String)>);

impl Reasons {
    /// Records the reason, replacing an earlier one (a later method knows better).
    fn set(&mut self, node: usize, cause: Cause, reason: String) {
        self.0.insert(node, (cause, reason));
    }

    /// Records the reason unless one is recorded already.
    fn first(&mut self, node: usize, cause: Cause, reason: impl FnOnce() -> String) {
        self.0.entry(node).or_insert_with(|| (cause, reason()));
    }
}

/// The engine's answer for one evaluation.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Decision {
    /// Commands to carry out.
    pub commands: Vec<Command>,
    /// Every node not in a command, with the reason.
    pub blocked: Vec<Blocked>,
    /// How many candidates each voluntary method could act on (the
    /// `karpenter_voluntary_disruption_eligible_nodes` gauge).
    #[serde(skip)]
    pub eligible: Vec<(Method, usize)>,
    /// Moves the `Balanced` policy scored.
    #[serde(skip)]
    pub scored: Vec<ScoredMove>,
}

/// The outcome of simulating pods' rescheduling without some nodes.
enum Reschedule {
    /// Everything fits on the remaining nodes.
    Delete,
    /// Everything fits with exactly one new node.
    Replace(Box<NewNode>),
    /// Everything fits with several new nodes. Only drift launches them all (upstream's drift
    /// launches every NodeClaim its simulation needs); consolidation at most
    /// [`Options::replacements`] (upstream: one).
    ReplaceMany(Vec<NewNode>),
    /// Not possible, with the reason.
    No(String),
}

/// A new node a rescheduling needs.
struct NewNode {
    /// The simulation's NodeClaim; its `instance_types` are the options that fit.
    claim: PlannedNodeClaim,
    /// How the simulation sized it.
    sizing: Sizing,
    /// The candidates' pods it takes (`namespace/name`).
    takes: Vec<String>,
}

/// Where a simulation put the candidates' pods that go to existing nodes: (position among the
/// pods given, or index into `State::pods` where the caller names pods by index, and index into
/// `State::nodes`).
pub type Moves = Vec<(usize, usize)>;

/// Simulates `pods` rescheduling on the nodes of `state` but `excluded`: the one simulation both
/// the decision and its re-validation make, so a command is re-checked by the rule that chose it.
/// The pods of nodes already being disrupted and the pending pods are placed beside them, as
/// upstream's simulation does, so the candidates' pods are not planned into room those need;
/// only what the candidates' own pods need decides (the provisioner launches the rest). Also
/// returns where the pods that go to existing nodes go: what a later command of the same pass
/// must count as taken ([`State::start`]).
fn reschedule_placed(
    state: &State,
    excluded: &[usize],
    pods: Vec<crate::scheduling::pod::Pod>,
    sizing: Sizing,
) -> (Reschedule, Moves) {
    if pods.is_empty() {
        return (Reschedule::Delete, Vec::new());
    }
    let own = pods.len();
    let mut all = pods;
    all.extend(state.displaced_pods(excluded));
    let mut input = state.scheduler_input(excluded, all);
    // A replacement is sized for the candidates' pods alone: the others go to nodes of their
    // own (their command's replacement, the provisioner's), and the room a replacement kept for
    // them would stay empty.
    input.options.apart_from = Some(own);
    input.options.every_fitting_type = sizing == Sizing::EveryFittingType;
    let outcome = scheduler::solve(&input);
    if let Some((i, reason)) = outcome.errors.iter().find(|(i, _)| *i < own) {
        return (
            Reschedule::No(format!(
                "pod {} could not be rescheduled: {reason}",
                input.pods[*i].key()
            )),
            Vec::new(),
        );
    }
    // A node not initialized yet may never be: the candidates' pods do not count on it (the
    // displaced pods may; they are moving anyway).
    let early = outcome.placements[..own].iter().find_map(|p| match p {
        Some(Placement::Existing(k)) => input.existing.get(*k).filter(|e| !e.initialized),
        _ => None,
    });
    if let Some(node) = early {
        return (
            Reschedule::No(format!(
                "its pods would go to node {}, which is not initialized yet",
                node.name
            )),
            Vec::new(),
        );
    }
    let moves = outcome.placements[..own]
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match p {
            Some(Placement::Existing(k)) => {
                let name = &input.existing.get(*k)?.name;
                let n = state.nodes.iter().position(|n| n.name == *name)?;
                Some((i, n))
            }
            _ => None,
        })
        .collect();
    let mut needed: Vec<NewNode> = outcome
        .nodeclaims
        .into_iter()
        .filter(|c| c.pods.iter().any(|&p| (p as usize) < own))
        .map(|claim| {
            let takes = claim
                .pods
                .iter()
                .filter(|&&p| (p as usize) < own)
                .map(|&p| input.pods[p as usize].key())
                .collect();
            NewNode {
                claim,
                sizing,
                takes,
            }
        })
        .collect();
    let decided = if needed.len() > 1 {
        Reschedule::ReplaceMany(needed)
    } else {
        match needed.pop() {
            Some(new) => Reschedule::Replace(Box::new(new)),
            None => Reschedule::Delete,
        }
    };
    (decided, moves)
}

/// [`reschedule_placed`] of the pods `indices` (into `State::pods`) off the nodes `excluded`, with
/// where those that go to existing nodes go: (index into `State::pods`, into `State::nodes`).
fn reschedule_on(
    state: &State,
    excluded: &[usize],
    indices: Vec<usize>,
    sizing: Sizing,
) -> (Reschedule, Moves) {
    let pods = indices.iter().map(|&p| state.pods[p].pod.clone()).collect();
    let (decided, moves) = reschedule_placed(state, excluded, pods, sizing);
    let moves = moves.into_iter().map(|(i, n)| (indices[i], n)).collect();
    (decided, moves)
}

/// The replacement `new` asks for, launched as one of `options` (a subset of its claim's).
fn replacement(state: &State, new: &NewNode, options: &[u32]) -> Replacement {
    let claim = &new.claim;
    let pool = &state.templates[claim.nodepool];
    let first = options.first().map(|&t| &pool.instance_types[t as usize]);
    let offering = first.and_then(|it| scheduler::launch_offering(it, &claim.requirements));
    Replacement {
        node_pool: pool.name.to_string(),
        instance_type: first.map(|it| it.name.to_string()).unwrap_or_default(),
        capacity_type: offering
            .map(|o| o.capacity_type.label().to_string())
            .unwrap_or_default(),
        price: offering.map_or(0.0, |o| o.price),
        instance_type_options: options
            .iter()
            .map(|&t| pool.instance_types[t as usize].name.to_string())
            .collect(),
        pods: new.takes.clone(),
        requests: claim.requests.clone(),
        requirements: claim.requirements.clone(),
        sizing: new.sizing,
    }
}

/// Why a nominated node (see [`State::nominated`]) is no candidate.
pub const NOMINATED: &str = "pods waiting for room are about to be scheduled to it (nominated); it is left alone until they are";

struct Engine<'a> {
    state: &'a State,
    now: DateTime<Utc>,
    options: Options,
    scored: RefCell<Vec<ScoredMove>>,
}

/// Evaluates disruption once.
pub fn evaluate(state: &State, now: DateTime<Utc>, options: Options) -> Decision {
    evaluate_with(state, now, options, &mut |_, method| method())
}

/// A wrapper around each voluntary method's computation (see [`evaluate_with`]): it gets the
/// method and the computation, and must return what the computation returns.
pub type Around<'a> = dyn FnMut(Method, &mut dyn FnMut() -> Vec<Command>) -> Vec<Command> + 'a;

/// Evaluates disruption once, handing each voluntary method's computation to `around`, which
/// must call it and return its result: the controller times each method there (upstream's
/// `karpenter_voluntary_disruption_decision_evaluation_duration_seconds`) while the engine
/// itself never reads a clock.
pub fn evaluate_with(
    state: &State,
    now: DateTime<Utc>,
    options: Options,
    around: &mut Around<'_>,
) -> Decision {
    Engine::new(state, now, options).run(around)
}

impl<'a> Engine<'a> {
    fn new(state: &'a State, now: DateTime<Utc>, options: Options) -> Self {
        Self {
            state,
            now,
            options,
            scored: RefCell::new(Vec::new()),
        }
    }

    fn name(&self, c: &Candidate) -> String {
        self.state.nodes[c.node].name.to_string()
    }

    fn pool_counts(&self, pool: &str) -> (u32, u32) {
        let nodes = self
            .state
            .nodes
            .iter()
            .filter(|n| n.nodepool.as_deref() == Some(pool));
        let (total, disrupting) =
            nodes.fold((0, 0), |(t, d), n| (t + 1, d + u32::from(n.disrupting)));
        (total, disrupting)
    }

    fn allowance(&self, pool: &str, reason: DisruptionReason, taken: u32) -> budgets::Allowance {
        let (total, disrupting) = self.pool_counts(pool);
        match self.state.nodepool(pool) {
            Some(p) => budgets::allowance(p, reason, total, disrupting + taken, self.now),
            None => budgets::Allowance {
                limit: 0,
                disrupting,
                remaining: 0,
                explanation: vec![format!("NodePool {pool} is missing")],
            },
        }
    }

    fn reschedule(&self, nodes: &[&Candidate], sizing: Sizing) -> Reschedule {
        let excluded: Vec<usize> = nodes.iter().map(|c| c.node).collect();
        let pods = nodes.iter().flat_map(|c| c.pods.iter().copied()).collect();
        reschedule_on(self.state, &excluded, pods, sizing).0
    }

    fn pod_names(&self, nodes: &[&Candidate]) -> Vec<String> {
        nodes
            .iter()
            .flat_map(|c| c.pods.iter().map(|&p| self.state.pods[p].pod.key()))
            .collect()
    }

    /// Consolidation of `nodes` (delete, or replace with cheaper nodes: one, or with
    /// [`Options::replacements`] above 1 up to that many), or why not. Upstream's simulation
    /// decides first; allowed several replacements, the candidates are simulated again with new
    /// nodes sized by cost, and the command that saves more wins (upstream's on a tie).
    fn consolidate(&self, nodes: &[&Candidate], method: Method) -> Result<Command, String> {
        let upstream = self.consolidate_sized(nodes, method, Sizing::EveryFittingType);
        let deletes = upstream
            .as_ref()
            .is_ok_and(|cmd| cmd.replacements.is_empty());
        if self.options.replacements <= 1 || deletes {
            return upstream;
        }
        let by_cost = self.consolidate_sized(nodes, method, Sizing::ByCost);
        match (upstream, by_cost) {
            (Ok(a), Ok(b)) => Ok(if b.savings > a.savings { b } else { a }),
            (Ok(a), Err(_)) => Ok(a),
            (Err(_), Ok(b)) => Ok(b),
            (Err(a), Err(_)) => Err(a),
        }
    }

    /// [`Engine::consolidate`] with one way of sizing the new nodes.
    fn consolidate_sized(
        &self,
        nodes: &[&Candidate],
        method: Method,
        sizing: Sizing,
    ) -> Result<Command, String> {
        let price: f64 = nodes.iter().map(|c| c.price).sum();
        let names = nodes.iter().map(|c| self.name(c)).collect();
        let mut news = match self.reschedule(nodes, sizing) {
            Reschedule::No(why) => return Err(why),
            Reschedule::Delete => {
                return Ok(Command {
                    method,
                    reason: DisruptionReason::Underutilized.to_string(),
                    candidates: names,
                    replacements: vec![],
                    savings: price,
                });
            }
            Reschedule::Replace(new) => vec![*new],
            Reschedule::ReplaceMany(news) => news,
        };
        let most = self.options.replacements.max(1);
        if news.len() > most {
            // Upstream's consolidation launches at most one replacement.
            return Err(if most == 1 {
                format!("its pods would need {} new nodes", news.len())
            } else {
                format!(
                    "its pods would need {} new nodes, more than the {most} a consolidation may launch (CONSOLIDATION_REPLACEMENTS)",
                    news.len()
                )
            });
        }
        let all_spot = nodes
            .iter()
            .all(|c| self.state.nodes[c.node].capacity_type == CapacityType::Spot);
        let allowed_ct = |ct: CapacityType, claim: &PlannedNodeClaim| {
            claim
                .requirements
                .get(labels::CAPACITY_TYPE)
                .is_none_or(|r| r.has(ct.label()))
        };
        // Spot nodes any of whose replacements may run on spot: upstream's spot-to-spot rules.
        let spot_to_spot = all_spot
            && news
                .iter()
                .any(|n| allowed_ct(CapacityType::Spot, &n.claim));
        if spot_to_spot {
            if !self.options.spot_to_spot {
                return Err("SpotToSpotConsolidation is disabled, so a spot node can only be deleted, not replaced by another spot node".into());
            }
            if nodes.len() > 1 {
                return Err("spot-to-spot consolidation replaces one node at a time".into());
            }
        }
        // Each replacement's options that fit, with their prices, cheapest first.
        let mut priced: Vec<Vec<(u32, f64)>> = Vec::with_capacity(news.len());
        for new in &mut news {
            let claim = &mut new.claim;
            if allowed_ct(CapacityType::Spot, claim)
                && (spot_to_spot || allowed_ct(CapacityType::OnDemand, claim))
            {
                // Spot-to-spot stays spot; otherwise cheaper options are priced as spot, and a
                // replacement never falls back to pricier on-demand.
                claim.requirements.add_requirement(Requirement::new(
                    labels::CAPACITY_TYPE,
                    crate::apis::nodeclaim::Operator::In,
                    [labels::CAPACITY_TYPE_SPOT],
                    None,
                ));
            }
            let pool = &self.state.templates[claim.nodepool];
            let mut options: Vec<(u32, f64)> = claim
                .instance_types
                .iter()
                .filter_map(|&t| {
                    cheapest_offering(&pool.instance_types[t as usize], &claim.requirements)
                        .map(|o| (t, o.price))
                })
                .collect();
            options.sort_by(|a, b| a.1.total_cmp(&b.1));
            priced.push(options);
        }
        let cheapest: f64 = priced
            .iter()
            .map(|options| options.first().map_or(f64::INFINITY, |o| o.1))
            .sum();
        if cheapest >= price {
            return Err(if news.len() == 1 {
                format!(
                    "its pods need a new node, and no instance type that fits them is cheaper than the ${price:.4}/hour it costs now"
                )
            } else {
                format!(
                    "its pods need {} new nodes, and the cheapest that hold them cost ${cheapest:.4}/hour, no less than the ${price:.4}/hour the candidates cost now",
                    news.len()
                )
            });
        }
        // What the replacements save is shared out: each keeps the options priced within its
        // share above its cheapest, so whichever each launches, together they cost less than
        // the candidates (one replacement keeps every option cheaper than them, as upstream).
        let share = (price - cheapest) / news.len() as f64;
        let mut replacements = Vec::with_capacity(news.len());
        for (new, options) in news.iter().zip(priced) {
            let floor = options.first().map_or(f64::INFINITY, |o| o.1);
            let mut cheaper: Vec<(u32, f64)> = options
                .into_iter()
                .filter(|(_, p)| *p < floor + share)
                .collect();
            if spot_to_spot && allowed_ct(CapacityType::Spot, &new.claim) {
                let pool = &self.state.templates[new.claim.nodepool];
                let current = self.state.nodes[nodes[0].node]
                    .labels
                    .get(labels::INSTANCE_TYPE);
                if cheaper.len() < MIN_SPOT_TO_SPOT_TYPES {
                    return Err(format!(
                        "spot-to-spot replacement needs at least {MIN_SPOT_TO_SPOT_TYPES} cheaper instance types, only {} exist",
                        cheaper.len()
                    ));
                }
                if news.len() == 1
                    && cheaper.iter().take(MIN_SPOT_TO_SPOT_TYPES).any(|(t, _)| {
                        Some(&pool.instance_types[*t as usize].name.to_string()) == current
                    })
                {
                    return Err(
                        "its instance type is already among the cheapest spot options".into(),
                    );
                }
                cheaper.truncate(MIN_SPOT_TO_SPOT_TYPES);
            }
            let cheaper_options: Vec<u32> = cheaper.iter().map(|(t, _)| *t).collect();
            replacements.push(replacement(self.state, new, &cheaper_options));
        }
        let launched: f64 = replacements.iter().map(|r| r.price).sum();
        Ok(Command {
            method,
            reason: DisruptionReason::Underutilized.to_string(),
            candidates: names,
            savings: price - launched,
            replacements,
        })
    }

    /// Whether `method` could act on the candidate at all (before budgets and simulations).
    fn eligible(&self, c: &Candidate, method: Method) -> bool {
        match method {
            Method::Expiration => c.expires.is_some_and(|at| at <= self.now),
            Method::Emptiness => c.pods.is_empty() && c.consolidatable && !c.is_static,
            Method::Drift => matches!(c.drift, DriftVerdict::Drifted(..)),
            Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
                !c.pods.is_empty()
                    && c.consolidatable
                    && !c.is_static
                    && c.policy != ConsolidationPolicy::WhenEmpty
            }
        }
    }

    fn run(&self, around: &mut Around<'_>) -> Decision {
        let (cands, not_candidates) = candidates::candidates(self.state, self.now);
        let mut decision = Decision::default();
        let mut used: Vec<usize> = Vec::new();
        let mut why = Reasons::default();
        for (n, cause, reason) in not_candidates {
            why.set(n, cause, reason);
        }

        // Expiration: forceful, no budgets, no do-not-disrupt.
        for c in &cands {
            if c.expires.is_some_and(|at| at <= self.now) {
                let mut cmd = Command {
                    method: Method::Expiration,
                    reason: "Expired".into(),
                    candidates: vec![self.name(c)],
                    replacements: vec![],
                    savings: c.price,
                };
                let news = match self.reschedule(&[c], Sizing::EveryFittingType) {
                    Reschedule::Replace(new) => vec![*new],
                    Reschedule::ReplaceMany(news) => news,
                    Reschedule::Delete | Reschedule::No(_) => Vec::new(),
                };
                for new in &news {
                    let r = replacement(self.state, new, &new.claim.instance_types);
                    cmd.savings -= r.price;
                    cmd.replacements.push(r);
                }
                decision.commands.push(cmd);
                used.push(c.node);
            }
        }
        // Expiration does not wait for a nominated node; the voluntary methods leave it alone.
        // Finding the nominated nodes solves every waiting pod: not worth it when no method
        // could act on any candidate (a burst of 20,000 pending pods onto new nodes).
        let open = cands
            .iter()
            .filter(|c| !used.contains(&c.node))
            .any(|c| Method::VOLUNTARY.iter().any(|&m| self.eligible(c, m)));
        let nominated = if open {
            self.state.nominated()
        } else {
            BTreeSet::new()
        };
        let mut live: Vec<&Candidate> = Vec::new();
        for c in cands.iter().filter(|c| !used.contains(&c.node)) {
            if nominated.contains(&c.node) {
                why.set(c.node, Cause::NotCandidate, NOMINATED.to_string());
            } else {
                live.push(c);
            }
        }

        decision.eligible = Method::VOLUNTARY
            .iter()
            .map(|&m| (m, live.iter().filter(|c| self.eligible(c, m)).count()))
            .collect();
        let mut voluntary = Vec::new();
        for method in Method::VOLUNTARY {
            let mut compute = || match method {
                Method::Emptiness => self.emptiness(&live, &mut why).into_iter().collect(),
                Method::Drift => self.drift(&live, &mut why),
                Method::MultiNodeConsolidation => self
                    .multi_node(&live, &mut why)
                    .filter(|cmd| self.outsaves_single_node(cmd, &live))
                    .into_iter()
                    .collect(),
                Method::SingleNodeConsolidation => {
                    self.single_node(&live, &mut why).into_iter().collect()
                }
                Method::Expiration => Vec::new(),
            };
            voluntary = around(method, &mut compute);
            if !voluntary.is_empty() {
                break;
            }
        }
        for cmd in voluntary {
            for name in &cmd.candidates {
                if let Some(i) = self
                    .state
                    .nodes
                    .iter()
                    .position(|n| n.name.as_ref() == name)
                {
                    used.push(i);
                }
            }
            decision.commands.push(cmd);
        }
        for (i, node) in self.state.nodes.iter().enumerate() {
            if used.contains(&i) {
                continue;
            }
            let (cause, reason) = why.0.remove(&i).unwrap_or_else(|| {
                (Cause::Nothing, "nothing to do: not expired, not drifted, not empty, and consolidation would not save money".into())
            });
            decision.blocked.push(Blocked {
                node: node.name.to_string(),
                cause,
                reason,
            });
        }
        decision.scored = self.scored.take();
        decision
    }

    fn emptiness(&self, live: &[&Candidate], why: &mut Reasons) -> Option<Command> {
        let mut taken: BTreeMap<&str, u32> = BTreeMap::new();
        let mut chosen: Vec<&Candidate> = Vec::new();
        for c in live.iter().filter(|c| c.pods.is_empty()) {
            if c.is_static {
                why.set(c.node, Cause::Policy, format!("empty, but {STATIC_POOL}"));
                continue;
            }
            if let Some(p) = &c.protected {
                why.set(
                    c.node,
                    Cause::Protected,
                    format!("empty, but protected: {p}"),
                );
                continue;
            }
            if !c.consolidatable {
                why.set(
                    c.node,
                    Cause::ConsolidateAfter,
                    match c.consolidatable_in {
                        Some(s) => {
                            format!("empty, but consolidateAfter has not elapsed ({s}s left)")
                        }
                        None => "empty, but its NodePool has consolidateAfter: Never".into(),
                    },
                );
                continue;
            }
            let n = taken.entry(c.nodepool.as_str()).or_default();
            let allowance = self.allowance(&c.nodepool, DisruptionReason::Empty, *n);
            if allowance.remaining == 0 {
                why.set(
                    c.node,
                    Cause::Budget,
                    format!(
                        "empty, but the disruption budget for Empty is used up: {}",
                        allowance.explanation.join("; ")
                    ),
                );
                continue;
            }
            *n += 1;
            chosen.push(c);
        }
        (!chosen.is_empty()).then(|| Command {
            method: Method::Emptiness,
            reason: DisruptionReason::Empty.to_string(),
            savings: chosen.iter().map(|c| c.price).sum(),
            candidates: chosen.iter().map(|c| self.name(c)).collect(),
            replacements: vec![],
        })
    }

    fn drift(&self, live: &[&Candidate], why: &mut Reasons) -> Vec<Command> {
        let mut drifted: Vec<&Candidate> = Vec::new();
        for c in live {
            if let DriftVerdict::Drifted(_, _) = &c.drift {
                if let Some(p) = c.protected.as_ref().filter(|_| !c.has_tgp) {
                    why.set(c.node, Cause::Protected, format!("drifted, but protected: {p} (set terminationGracePeriod on the NodePool to bound this)"));
                    continue;
                }
                drifted.push(c);
            }
        }
        // Oldest drift first: the controller's Drifted time, else the node's age.
        drifted.sort_by_key(|c| {
            let n = &self.state.nodes[c.node];
            n.claim
                .as_ref()
                .and_then(|cl| cl.drifted_since)
                .unwrap_or(n.created)
        });
        let (statics, drifted): (Vec<&Candidate>, Vec<&Candidate>) =
            drifted.into_iter().partition(|c| c.is_static);
        if let Some(cmd) = self.static_drift(&statics, why) {
            return vec![cmd];
        }
        let reason_of = drift_reason;
        // Empty drifted nodes go together, within budget.
        let mut taken: BTreeMap<&str, u32> = BTreeMap::new();
        let mut empty = Vec::new();
        for c in drifted.iter().filter(|c| c.pods.is_empty()) {
            let n = taken.entry(c.nodepool.as_str()).or_default();
            if self
                .allowance(&c.nodepool, DisruptionReason::Drifted, *n)
                .remaining
                == 0
            {
                why.set(
                    c.node,
                    Cause::Budget,
                    format!(
                        "drifted ({}), but the disruption budget for Drifted is used up",
                        reason_of(c)
                    ),
                );
                continue;
            }
            *n += 1;
            empty.push(*c);
        }
        if !empty.is_empty() {
            return vec![Command {
                method: Method::Drift,
                reason: reason_of(empty[0]),
                savings: empty.iter().map(|c| c.price).sum(),
                candidates: empty.iter().map(|c| self.name(c)).collect(),
                replacements: vec![],
            }];
        }
        // The others one command each, oldest first, as many as the budget allows. Each is
        // decided on the state the ones before it leave (their candidates disrupting, their
        // replacements on their way), as the next pass would see it: one command per pass made
        // a 437-node roll take two hours with each pass's evaluation taking seconds.
        let mut commands: Vec<Command> = Vec::new();
        let mut moved: Vec<Moves> = Vec::new();
        // Nodes an earlier command of the pass plans pods onto stay for a later pass: taken now,
        // those pods would find them tainted and wait for a replacement instead of moving.
        let mut destinations: BTreeSet<usize> = BTreeSet::new();
        let mut working: Option<State> = None;
        let mut started = 0;
        for c in drifted.iter().filter(|c| !c.pods.is_empty()) {
            let n = taken.get(c.nodepool.as_str()).copied().unwrap_or(0);
            let allowance = self.allowance(&c.nodepool, DisruptionReason::Drifted, n);
            if allowance.remaining == 0 {
                why.set(
                    c.node,
                    Cause::Budget,
                    format!(
                        "drifted ({}), but the disruption budget for Drifted is used up: {}",
                        reason_of(c),
                        allowance.explanation.join("; ")
                    ),
                );
                continue;
            }
            if destinations.contains(&c.node) {
                why.set(
                    c.node,
                    Cause::NotCandidate,
                    format!(
                        "drifted ({}), but pods of a node drifting in the same pass are planned onto it; it goes in a later pass",
                        reason_of(c)
                    ),
                );
                continue;
            }
            if commands.len() > started {
                let w = working.get_or_insert_with(|| self.state.clone());
                for (cmd, moves) in commands[started..].iter().zip(&moved[started..]) {
                    w.start(cmd, moves, |k| {
                        format!("{}-replacement-{k}", cmd.candidates.join("-"))
                    });
                }
                started = commands.len();
            }
            let state = working.as_ref().unwrap_or(self.state);
            let (decided, moves) =
                reschedule_on(state, &[c.node], c.pods.clone(), Sizing::EveryFittingType);
            let cmd = match decided {
                Reschedule::No(reason) => {
                    why.set(
                        c.node,
                        Cause::NotWorthIt,
                        format!("drifted ({}), but {reason}", reason_of(c)),
                    );
                    continue;
                }
                Reschedule::Delete => Command {
                    method: Method::Drift,
                    reason: reason_of(c),
                    candidates: vec![self.name(c)],
                    replacements: vec![],
                    savings: c.price,
                },
                Reschedule::Replace(new) => self.drift_replace(c, &[*new]),
                Reschedule::ReplaceMany(news) => self.drift_replace(c, &news),
            };
            *taken.entry(c.nodepool.as_str()).or_default() += 1;
            destinations.extend(moves.iter().map(|&(_, n)| n));
            commands.push(cmd);
            moved.push(moves);
        }
        commands
    }

    /// Drifted node `c` replaced by `news`, launched first.
    fn drift_replace(&self, c: &Candidate, news: &[NewNode]) -> Command {
        let replacements: Vec<Replacement> = news
            .iter()
            .map(|new| replacement(self.state, new, &new.claim.instance_types))
            .collect();
        Command {
            method: Method::Drift,
            reason: drift_reason(c),
            candidates: vec![self.name(c)],
            savings: c.price - replacements.iter().map(|r| r.price).sum::<f64>(),
            replacements,
        }
    }

    /// A drifted static node is replaced before it goes, so its pool keeps `spec.replicas`
    /// (upstream's static drift): one node per pass, within the Drifted budget, not while the
    /// pool is above its replicas (the scale-down goes first), and not when a replacement would
    /// exceed `limits.nodes`. The replacement is the pool's template with every instance type it
    /// allows, cheapest first, as the static NodePool controller creates them.
    fn static_drift(&self, drifted: &[&Candidate], why: &mut Reasons) -> Option<Command> {
        for c in drifted {
            let reason = drift_reason(c);
            let Some(pool) = self.state.nodepool(&c.nodepool) else {
                continue;
            };
            let members: Vec<&state::StateNode> = self
                .state
                .nodes
                .iter()
                .filter(|n| n.nodepool.as_deref() == Some(c.nodepool.as_str()))
                .collect();
            let active = members.iter().filter(|n| !n.disrupting).count();
            let replicas = usize::try_from(pool.spec.replicas.unwrap_or(0)).unwrap_or(0);
            if active > replicas {
                why.set(c.node, Cause::NotWorthIt, format!("drifted ({reason}), but its static NodePool is above spec.replicas ({active} of {replicas}) and scales down first"));
                continue;
            }
            let allowance = self.allowance(&c.nodepool, DisruptionReason::Drifted, 0);
            if allowance.remaining == 0 {
                why.set(
                    c.node,
                    Cause::Budget,
                    format!(
                        "drifted ({reason}), but the disruption budget for Drifted is used up: {}",
                        allowance.explanation.join("; ")
                    ),
                );
                continue;
            }
            let at_limit = match static_capacity::nodes_limit(pool) {
                Ok(limit) => {
                    limit.is_some_and(|l| i64::try_from(members.len()).unwrap_or(i64::MAX) >= l)
                }
                Err(e) => {
                    why.set(
                        c.node,
                        Cause::NotWorthIt,
                        format!("drifted ({reason}), but {e}"),
                    );
                    continue;
                }
            };
            if at_limit {
                why.set(c.node, Cause::Budget, format!("drifted ({reason}), but its static NodePool is at its node limit (spec.limits.nodes) and cannot stage a replacement"));
                continue;
            }
            let template = self
                .state
                .static_templates
                .iter()
                .find(|t| *t.name == *c.nodepool);
            let options = template
                .map(|t| static_capacity::options(&t.instance_types, &t.requirements))
                .unwrap_or_default();
            let (Some(template), Some(first)) = (template, options.first()) else {
                why.set(c.node, Cause::NotWorthIt, format!("drifted ({reason}), but no instance type fits its static NodePool's requirements, so no replacement can be staged"));
                continue;
            };
            let offering = scheduler::launch_offering(first, &template.requirements);
            let price = offering.map_or(0.0, |o| o.price);
            return Some(Command {
                method: Method::Drift,
                reason,
                candidates: vec![self.name(c)],
                savings: c.price - price,
                replacements: vec![Replacement {
                    node_pool: c.nodepool.clone(),
                    instance_type: first.name.to_string(),
                    capacity_type: offering
                        .map(|o| o.capacity_type.label().to_string())
                        .unwrap_or_default(),
                    price,
                    instance_type_options: options.iter().map(|it| it.name.to_string()).collect(),
                    pods: self.pod_names(&[c]),
                    // A static NodeClaim asks for no resources: its pool sets its count.
                    requests: Resources::default(),
                    requirements: template.requirements.clone(),
                    sizing: Sizing::EveryFittingType,
                }],
            });
        }
        None
    }

    /// Candidates consolidation may consider, cheapest to disrupt first, within budgets.
    fn consolidation_candidates<'c>(
        &self,
        live: &[&'c Candidate],
        why: &mut Reasons,
    ) -> Vec<&'c Candidate> {
        let mut out: Vec<&Candidate> = Vec::new();
        let mut taken: BTreeMap<&str, u32> = BTreeMap::new();
        let mut sorted: Vec<&Candidate> = live
            .iter()
            .copied()
            .filter(|c| !c.pods.is_empty())
            .collect();
        sorted.sort_by(|a, b| a.cost.total_cmp(&b.cost).then(a.node.cmp(&b.node)));
        for c in sorted {
            if c.is_static {
                why.first(c.node, Cause::Policy, || STATIC_POOL.into());
                continue;
            }
            if c.policy == ConsolidationPolicy::WhenEmpty {
                why.first(c.node, Cause::Policy, || {
                    "its NodePool only consolidates empty nodes (WhenEmpty)".into()
                });
                continue;
            }
            if let Some(p) = &c.protected {
                why.first(c.node, Cause::Protected, || format!("protected: {p}"));
                continue;
            }
            if !c.consolidatable {
                why.first(c.node, Cause::ConsolidateAfter, || {
                    match c.consolidatable_in {
                        Some(s) => format!(
                            "consolidateAfter has not elapsed since the last pod change ({s}s left)"
                        ),
                        None => "its NodePool has consolidateAfter: Never".into(),
                    }
                });
                continue;
            }
            let n = taken.entry(c.nodepool.as_str()).or_default();
            let allowance = self.allowance(&c.nodepool, DisruptionReason::Underutilized, *n);
            if allowance.remaining == 0 {
                why.first(c.node, Cause::Budget, || {
                    format!(
                        "the disruption budget for Underutilized is used up: {}",
                        allowance.explanation.join("; ")
                    )
                });
                continue;
            }
            *n += 1;
            out.push(c);
        }
        out
    }

    /// The `Balanced` policy's check: a move is worth its disruption only if the fraction of the
    /// pool's cost it saves is at least half the fraction of the pool's disruption cost it causes
    /// (upstream's k = 2, with a base cost of 1 per node).
    fn balanced_ok(
        &self,
        nodes: &[&Candidate],
        savings: f64,
        live: &[&Candidate],
    ) -> Result<(), String> {
        let Some(pool) = nodes
            .iter()
            .find(|c| c.policy == ConsolidationPolicy::Balanced)
            .map(|c| c.nodepool.as_str())
        else {
            return Ok(());
        };
        let in_pool = |n: &&state::StateNode| n.nodepool.as_deref() == Some(pool);
        let pool_cost: f64 = self
            .state
            .nodes
            .iter()
            .filter(in_pool)
            .filter_map(|n| n.price)
            .sum();
        let known: f64 = live
            .iter()
            .filter(|c| c.nodepool == pool)
            .map(|c| 1.0 + c.cost)
            .sum();
        let unknown = self.state.nodes.iter().filter(in_pool).count()
            - live.iter().filter(|c| c.nodepool == pool).count();
        let pool_disruption = known + unknown as f64;
        let disruption: f64 = nodes.iter().map(|c| 1.0 + c.cost).sum();
        if pool_cost <= 0.0 || pool_disruption <= 0.0 {
            return Ok(());
        }
        let score = (savings / pool_cost) / (disruption / pool_disruption);
        self.scored.borrow_mut().push(ScoredMove {
            nodepool: pool.to_string(),
            score,
            approved: score >= 0.5,
        });
        if score >= 0.5 {
            Ok(())
        } else {
            Err(format!(
                "the Balanced policy needs a score of at least 0.5, this move scores {score:.2} (saves {:.1}% of the pool's cost for {:.1}% of its disruption)",
                100.0 * savings / pool_cost,
                100.0 * disruption / pool_disruption
            ))
        }
    }

    fn multi_node(&self, live: &[&Candidate], why: &mut Reasons) -> Option<Command> {
        let mut cands = self.consolidation_candidates(live, why);
        if cands.len() < 2 {
            return None;
        }
        // Upstream orders multi-node candidates by price per unit of disruption, best first.
        cands.sort_by(|a, b| {
            let ratio = |c: &Candidate| c.price / c.cost.max(f64::MIN_POSITIVE);
            ratio(b).total_cmp(&ratio(a))
        });
        cands.truncate(MAX_MULTI_NODE_CANDIDATES);
        // Binary search for the largest prefix that consolidates.
        let (mut lo, mut hi) = (2usize, cands.len());
        let mut best = None;
        while lo <= hi {
            let mid = (lo + hi) / 2;
            match self
                .consolidate(&cands[..mid], Method::MultiNodeConsolidation)
                .and_then(|cmd| {
                    self.balanced_ok(&cands[..mid], cmd.savings, live)
                        .map(|()| cmd)
                }) {
                Ok(cmd) if cmd.savings > 0.0 => {
                    best = Some(cmd);
                    lo = mid + 1;
                }
                _ => hi = mid - 1,
            }
        }
        best
    }

    /// Whether multi-node consolidation's `cmd` goes ahead of single-node consolidation: always
    /// with one replacement at most, as upstream; with several (`Options::replacements`) only
    /// when it saves more than the command single-node consolidation would find, which it would
    /// otherwise preempt. Measured on `benches/gen-cost.py`'s web pods on a c/m/r pool at
    /// `maxPods: 110`: three nodes replaced by three others saved $0.07/h where one node
    /// replaced by a c6a.16xlarge saved $0.32/h.
    fn outsaves_single_node(&self, cmd: &Command, live: &[&Candidate]) -> bool {
        cmd.replacements.len() <= 1
            || self
                .single_node(live, &mut Reasons::default())
                .is_none_or(|single| cmd.savings > single.savings)
    }

    fn single_node(&self, live: &[&Candidate], why: &mut Reasons) -> Option<Command> {
        for c in self.consolidation_candidates(live, why) {
            match self
                .consolidate(&[c], Method::SingleNodeConsolidation)
                .and_then(|cmd| self.balanced_ok(&[c], cmd.savings, live).map(|()| cmd))
            {
                Ok(cmd) if cmd.savings > 0.0 => return Some(cmd),
                Ok(_) => {
                    why.set(
                        c.node,
                        Cause::NotWorthIt,
                        "consolidating it would not save money".into(),
                    );
                }
                Err(reason) => {
                    why.set(
                        c.node,
                        Cause::NotWorthIt,
                        format!("cannot consolidate: {reason}"),
                    );
                }
            }
        }
        None
    }
}

/// Everything the engine considered for one node, for `simulate --explain`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// Node name.
    pub node: String,
    /// Facts: NodePool, instance type, price, age, pods.
    pub facts: Vec<String>,
    /// Budget arithmetic per reason.
    pub budgets: Vec<String>,
    /// What protects it, if anything.
    pub protection: Option<String>,
    /// Drift, expiry and consolidatability.
    pub status: Vec<String>,
    /// What removing it would take: delete, or which replacement at what price, and what that
    /// saves.
    pub if_removed: String,
    /// The decision: the command it is in, or why it is left alone.
    pub decision: String,
    /// When left alone: the kind of reason.
    pub cause: Option<Cause>,
    /// When left alone for something that can be changed: what to change.
    pub fix: Option<String>,
}

impl Cause {
    /// What would lift a block of this kind, for the node's `reason` (which names the pod,
    /// PodDisruptionBudget or budget).
    pub fn fix(self, reason: &str) -> Option<String> {
        match self {
            Cause::Protected if reason.contains("PodDisruptionBudget") => Some(
                "wait until the PodDisruptionBudget allows a disruption (more replicas ready), or loosen its minAvailable/maxUnavailable".into(),
            ),
            Cause::Protected => Some(
                "remove the karpenter.sh/do-not-disrupt annotation, or let its duration run out; drift and expiration still proceed once the NodePool sets terminationGracePeriod".into(),
            ),
            Cause::Budget if reason.contains("spec.limits.nodes") => Some(
                "raise the NodePool's spec.limits.nodes above spec.replicas so a replacement can be staged".into(),
            ),
            Cause::Budget => Some(
                "wait for the disruptions in flight to finish, or raise the NodePool's spec.disruption.budgets for this reason (or widen its schedule)".into(),
            ),
            Cause::ConsolidateAfter => Some(
                "wait for consolidateAfter to elapse without pod changes on the node, or lower the NodePool's spec.disruption.consolidateAfter".into(),
            ),
            Cause::Policy if reason.contains(STATIC_POOL) => Some(
                "lower the static NodePool's spec.replicas (kubectl scale nodepool NAME --replicas N) to remove nodes".into(),
            ),
            Cause::Policy => Some(
                "set the NodePool's spec.disruption.consolidationPolicy to WhenEmptyOrUnderutilized".into(),
            ),
            Cause::NotInitialized => Some(
                "the node must become Ready and lose its startup taints first".into(),
            ),
            Cause::NotCandidate | Cause::NotWorthIt | Cause::Nothing => None,
        }
    }
}

/// Explains the engine's reasoning for one node; `None` when no node has that name.
pub fn explain(
    state: &State,
    now: DateTime<Utc>,
    options: Options,
    node: &str,
) -> Option<Explanation> {
    let n = state.nodes.iter().position(|x| x.name.as_ref() == node)?;
    let engine = Engine::new(state, now, options);
    let decision = engine.run(&mut |_, method| method());
    let (cands, _) = candidates::candidates(state, now);
    let c = cands.iter().find(|c| c.node == n);
    let sn = &state.nodes[n];
    let mut facts = vec![
        format!("NodePool: {}", sn.nodepool.as_deref().unwrap_or("(none)")),
        format!(
            "instance type: {} ({}, {}), ${:.4}/hour",
            sn.labels
                .get(labels::INSTANCE_TYPE)
                .map(String::as_str)
                .unwrap_or("?"),
            sn.capacity_type.label(),
            sn.labels
                .get(labels::ZONE)
                .map(String::as_str)
                .unwrap_or("?"),
            sn.price.unwrap_or(0.0)
        ),
        format!("age: {}s", (now - sn.created).num_seconds().max(0)),
    ];
    let pods: Vec<String> = state
        .pods_on(n)
        .map(|p| {
            format!(
                "{}{}",
                p.pod.key(),
                if p.reschedulable() {
                    ""
                } else {
                    " (DaemonSet/mirror/finished: not moved)"
                }
            )
        })
        .collect();
    facts.push(format!(
        "pods ({}): {}",
        pods.len(),
        if pods.is_empty() {
            "none".into()
        } else {
            pods.join(", ")
        }
    ));
    let budgets = sn
        .nodepool
        .as_deref()
        .map(|pool| {
            DisruptionReason::ALL
                .iter()
                .map(|r| {
                    let a = engine.allowance(pool, *r, 0);
                    format!(
                        "{r}: {} (remaining {})",
                        a.explanation.join("; "),
                        a.remaining
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut status = Vec::new();
    let mut if_removed = "not a disruption candidate".to_string();
    if let Some(c) = c {
        status.push(match &c.drift {
            DriftVerdict::Drifted(r, why) => {
                match sn.claim.as_ref().and_then(|c| c.drifted_since) {
                    Some(at) => format!("drifted ({}) since {at}: {why}", r.as_str()),
                    None => format!("drifted ({}): {why}", r.as_str()),
                }
            }
            DriftVerdict::Restamp => {
                "not drifted (hash stamped by another version: re-stamped, not drifted)".into()
            }
            DriftVerdict::None => "not drifted".into(),
        });
        status.push(match c.expires {
            Some(at) if at <= now => format!("expired at {at}"),
            Some(at) => format!("expires at {at}"),
            None => "never expires".into(),
        });
        status.push(match (c.consolidatable, c.consolidatable_in) {
            (true, _) => "consolidatable (consolidateAfter elapsed)".into(),
            (false, Some(s)) => format!("consolidatable in {s}s"),
            (false, None) => "never consolidatable (consolidateAfter: Never)".into(),
        });
        if_removed = match engine.reschedule(&[c], Sizing::EveryFittingType) {
            Reschedule::Delete => format!(
                "its pods fit on the other nodes: deleting it would save ${:.4}/hour",
                c.price
            ),
            Reschedule::Replace(new) => {
                let r = replacement(engine.state, &new, &new.claim.instance_types);
                let saves = c.price - r.price;
                format!(
                    "its pods need one new node: cheapest {} ({}) at ${:.4}/hour vs ${:.4}/hour now, {} ${:.4}/hour",
                    r.instance_type,
                    r.capacity_type,
                    r.price,
                    c.price,
                    if saves >= 0.0 { "saving" } else { "costing" },
                    saves.abs()
                )
            }
            Reschedule::ReplaceMany(news) => {
                let cheapest: f64 = news
                    .iter()
                    .map(|new| replacement(engine.state, new, &new.claim.instance_types).price)
                    .sum();
                let most = engine.options.replacements.max(1);
                format!(
                    "its pods need {} new nodes, the cheapest ${cheapest:.4}/hour in all vs ${:.4}/hour now: drift would launch them all, consolidation launches at most {most}",
                    news.len(),
                    c.price
                )
            }
            Reschedule::No(why) => format!("it cannot be removed: {why}"),
        };
    }
    let name = sn.name.to_string();
    let blocked = decision.blocked.iter().find(|b| b.node == name);
    let decision_text = decision
        .commands
        .iter()
        .find(|cmd| cmd.candidates.contains(&name))
        .map(|cmd| {
            format!(
                "{:?} ({}), saving ${:.4}/hour",
                cmd.method, cmd.reason, cmd.savings
            )
        })
        .or_else(|| blocked.map(|b| format!("left alone: {}", b.reason)))
        .unwrap_or_default();
    Some(Explanation {
        node: name,
        facts,
        budgets,
        protection: c.and_then(|c| c.protected.clone()),
        status,
        if_removed,
        decision: decision_text,
        cause: blocked.map(|b| b.cause),
        fix: blocked.and_then(|b| b.cause.fix(&b.reason)),
    })
}

impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "Node {}", self.node)?;
        for l in &self.facts {
            writeln!(f, "  {l}")?;
        }
        writeln!(f, "Status:")?;
        for l in &self.status {
            writeln!(f, "  {l}")?;
        }
        writeln!(
            f,
            "Protection: {}",
            self.protection.as_deref().unwrap_or("none")
        )?;
        writeln!(f, "Budgets:")?;
        for l in &self.budgets {
            writeln!(f, "  {l}")?;
        }
        writeln!(f, "If removed: {}", self.if_removed)?;
        writeln!(f, "Decision: {}", self.decision)?;
        if let Some(fix) = &self.fix {
            writeln!(f, "Fix: {fix}")?;
        }
        Ok(())
    }
}
