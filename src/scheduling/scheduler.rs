//! The bin-packing solver: places pending pods on existing nodes first, then on NodeClaims
//! planned in this round, and plans new NodeClaims from NodePools (highest weight first) for the
//! rest, relaxing pod preferences one at a time in upstream Karpenter's order when a pod does not
//! fit anywhere.
//!
//! Differences from upstream, on purpose:
//! * a pod joins the planned NodeClaim where it adds the least cost (the first one whose cheapest
//!   option still holds it, else the cheapest upgrade among the first [`PLACEMENT_WINDOW`] that
//!   fit, in creation order) instead of re-sorting them by pod count before every pod; with the
//!   per-class skip cursors below this makes a pod's cost independent of how many full
//!   NodeClaims precede it (upstream: O(pods × NodeClaims)). When that plan leaves a NodeClaim
//!   dearer than the blast-radius target, `plan` also solves with the NodeClaims kept ordered by
//!   load (fewest pods, as upstream, or cheapest first; `Placing`), a pod reading a bounded
//!   number of them, and when some pods force a node of their own, with those placed first and
//!   the rest by memory per CPU (`Order`); when the best plan still breaks the target, once more
//!   with each new NodeClaim's options capped at what keeps it (`Solver::contain`);
//! * a NodeClaim that receives a pod counted by a topology group on a key other than hostname is
//!   narrowed to one domain of that key, so spread counts are exact rather than deferred;
//! * a new NodeClaim grows only within the instance types that are cost-efficient for the round's
//!   typical pod (`Solver::cost_efficient`), not into whatever type still fits the pile, and into
//!   a dearer one only when the room it adds is worth its price (`Solver::worth_growing`; see
//!   `plan` for the second solve this may take);
//! * limits reserved by this round's NodeClaims are given back when a pod needs them
//!   (`Solver::reclaim_limits`).
//!
//! Performance notes: pods with identical constraints form a *class*; requirement algebra is done
//! once per (class, relaxation) and per (NodeClaim, class), never per pod; each class keeps a
//! cursor past NodeClaims and nodes that can never take it again (full for its smallest pod,
//! incompatible, or blocked by anti-affinity — all monotone), so a pod scans only live candidates.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::{Mutex, OnceLock};

use crate::apis::labels;
use crate::apis::nodeclaim::{Operator, Taint, TaintEffect};

use super::instance_type::{CapacityType, InstanceType, Offering, Reservation};
use super::patterns::{self, NodeType, Shape};
use super::pod::{HostPort, Pod};
use super::requirements::{AllowUndefined, Requirement, Requirements};
use super::resource_shape::{ResourceShapes, ratio_bucket};
use super::resources::Resources;
use super::taints::{self, Toleration};
use super::topology::{Constraint, PodTopology, Strength, Topology};
use super::type_labels;
use super::type_set::TypeSet;
use super::unschedulable::{Attempt, Failure, PodFailure, Target};

mod free_pods;

/// Upstream's cap on instance-type options per NodeClaim.
pub const MAX_INSTANCE_TYPES: usize = 600;

/// How much more per pod than the best instance type for the typical pod a new NodeClaim's
/// options may cost (see `Solver::cost_efficient`). Measured with `benches/gen-cost.py`: at 1.25
/// three narrow-pool plans were up to 6% dearer than sizing by fit alone (piles capped at
/// c8i.96xlarge ran out of memory where an m8i, 13% dearer per vCPU, would have held them); at 1.5
/// no case is dearer, while the giants that made broad pools expensive (u7in, x2iedn: several
/// times the best price per typical pod) stay out.
const COST_SLACK: f64 = 1.5;

/// The tighter bound `Solver::worth_growing` also tries (see `plan`): growing a NodeClaim only when
/// the room it adds costs at most 1.2 times the best price per typical pod. Measured with
/// `benches/gen-cost.py` (60 cases): alone it made 49 plans cheaper than [`COST_SLACK`] (web pods
/// on c/m/r at the ENI pod density: 9 c6a/c7a nodes at $68.95/h instead of 5 c8i/m8i.96xlarge at
/// $84.92) and 9 dearer (broad pools with DaemonSets, where each extra node pays the DaemonSets
/// again); 1.1 and 1.3 were no better. Neither bound wins everywhere, so both are solved.
const TIGHT_GROWTH_SLACK: f64 = 1.2;

/// The most pods a round may have for `plan` to try [`TIGHT_GROWTH_SLACK`]. Its solves open more
/// NodeClaims (6,914 against 4,000 for 20,000 diverse pods, `benches/gen-diverse-manifest.py`),
/// and although each now costs about what a [`COST_SLACK`] solve does (3,000 pods: 0.65 s for all
/// four, was 4.3 s), the four of a 20,000-pod round take 4.7 s against 2.5 s for two, for a plan
/// of $84.89/h instead of $175.19/h; 10,000 pods take 2.2 s ($41.35/h instead of $87.80/h).
/// Larger rounds keep the two [`COST_SLACK`] solves so that a provisioning round stays within
/// about 3 s.
const TIGHT_SOLVE_MAX_PODS: usize = 10_000;

/// How close to the best price per typical pod an instance type comes to count among a shape's
/// best types when a NodeClaim is sized with [`Sizing::FillByShape`] (see `Solver::cost_efficient`):
/// the cheapest of these bounds the NodeClaim's options. Many sizes of one family cost about the
/// same per pod (a 2Gi / 500m web pod costs as much on an m6a.48xlarge as on a t3a.large), and
/// the smallest keeps the blast radius small. Measured with `benches/gen-cost.py`: at 0.05 the
/// web fleet on spot keeps r6a.xlarge nodes at 5.9× the median NodeClaim, at 0.2 it costs 4% more.
const NEAR_BEST: f64 = 0.1;

/// The issue's blast-radius target: no planned NodeClaim's price above this many times the larger
/// of the plan's median NodeClaim and the cheapest type its most demanding pod alone needs. A
/// plan of [`Sizing::FillByShape`] that breaks it does not replace one that keeps it (see `plan`).
const BLAST_RADIUS: f64 = 4.0;

/// How much dearer than the best plan a plan that keeps the [`BLAST_RADIUS`] target may be and
/// still replace it when the best breaks it (see `plan`). Measured with `benches/gen-cost.py`
/// (60 cases) with every contained plan accepted: those that replaced a giant (an r8i.96xlarge,
/// x8i.64xlarge or x2idn pile 11-48x what its pods need) cost 4.7% more at most (mixed pods on a
/// broad spot pool at `maxPods: 110`: $19.83/h against $18.94/h), and three cost less; the next
/// dearest replaced no giant: web pods on a broad pool with DaemonSets, +14% to trade 37
/// t3a.2xlarge (8.0x a t3a.medium) for more t3a.medium.
const CONTAINED_PREMIUM: f64 = 0.05;

/// How many planned NodeClaims that fit a pod are compared for the least added cost (see
/// `Solver::try_claims`): a bound, so a pod's work stays independent of the number of NodeClaims.
const PLACEMENT_WINDOW: usize = 8;

/// The most pods a round may have for `plan` to try placing by load ([`Placing`]). Its three
/// solves cost as much as any other: 10,000 diverse pods (`benches/gen-diverse-manifest.py`) took
/// 3.8 s of CPU with them against 2.5 s without, for the same plan; 3,000 took 1.0 s against
/// 0.7 s.
const LOAD_SOLVE_MAX_PODS: usize = 5_000;

/// How many planned NodeClaims a pod steps over in load order (`Solver::by_load`) before it falls
/// back to the creation-order search: a bound, so a pod that many lightly loaded NodeClaims turn
/// away (topology, requirements) still costs a bounded amount of work.
const LOAD_SCAN: usize = 32;

/// How many planned NodeClaims a pod steps over in load order, in the solves that place the
/// pods forcing a node of their own first ([`Order::ForcedFirst`]), looking for one that holds it
/// at no added cost once [`PLACEMENT_WINDOW`] NodeClaims that fit would all grow. Measured on
/// `benches/gen-cost.py`'s constrained rows (100 forced NodeClaims): at [`LOAD_SCAN`] the overflow
/// of memory grew nearly every NodeClaim a step (m6a.4xlarge instead of c6a.4xlarge, $66-70/h
/// on-demand); 64 and 128 each planned some rows cheaper than the other (64: four rows, 128: the
/// rows with DaemonSets), and beyond 128 nothing changed. A bound, so a pod's work stays
/// independent of the number of NodeClaims.
const FREE_SCAN: usize = 128;

/// A NodePool ready for scheduling: its template flattened and its instance types resolved.
#[derive(Clone, Debug)]
pub struct NodePoolTemplate {
    /// NodePool name.
    pub name: Arc<str>,
    /// Higher first.
    pub weight: i32,
    /// Template requirements, template labels (as `In`) and `karpenter.sh/nodepool In [name]`.
    pub requirements: Requirements,
    /// Taints pods must tolerate.
    pub taints: Vec<Taint>,
    /// Instance types the NodePool's node class can launch, in any order.
    pub instance_types: Arc<Vec<InstanceType>>,
    /// Requests of the DaemonSet pods that would run on every node of this pool.
    pub daemon_overhead: Resources,
    /// Host ports those DaemonSet pods bind.
    pub daemon_host_ports: Vec<HostPort>,
    /// Remaining `spec.limits` (limit minus current usage) per resource; absent = unlimited.
    pub limits: Vec<(String, i64)>,
    /// Remaining nodes under a `nodes` limit.
    pub nodes_limit: Option<i64>,
    /// Work derived from `instance_types` alone, shared by every solve over this template (the
    /// disruption engine solves hundreds of times per evaluation). Give a template whose
    /// instance types change a fresh cache.
    pub cache: Arc<PoolCache>,
}

/// Memoized per-template computations: the instance types' price order, and which types
/// satisfy a given requirement set.
#[derive(Debug, Default)]
pub struct PoolCache {
    by_price: OnceLock<Arc<Vec<u32>>>,
    /// The distinct zones a pool can launch in, by the pool's requirements: a pool registers
    /// these as topology domains once, not once per offering of each of its instance types.
    zones: Mutex<HashMap<String, Arc<Vec<Arc<str>>>>>,
    /// Largest allocatable of any instance type, per resource.
    max_allocatable: OnceLock<Resources>,
    /// Whether any instance type has a capacity reservation offering.
    has_reservations: OnceLock<bool>,
    /// The zones of the instance types' available offerings, as bitmasks; `None` past 64 zones.
    zone_index: OnceLock<Option<Arc<ZoneIndex>>>,
    compatible: Mutex<HashMap<String, Arc<TypeSet>>>,
    price_order: Mutex<HashMap<String, Arc<Vec<f64>>>>,
    /// Per `price_key`, `by_price`'s positions in the order of those prices
    /// (`Solver::launch_order`).
    launch_order: Mutex<HashMap<String, Arc<Vec<u32>>>>,
}

/// The zones a pool's instance types have available offerings in, one bitmask per type over a
/// shared list of names: `Solver::claim_domains` ORs the masks of a NodeClaim's options instead
/// of comparing the zone of every offering of each (hundreds of types, a dozen offerings each),
/// which a NodeClaim opened for a zonal spread pays for on every option.
#[derive(Debug)]
struct ZoneIndex {
    names: Vec<Arc<str>>,
    /// Per instance type (as indexed in the template), bit `k` set when it has an available
    /// offering in `names[k]`.
    masks: Vec<u64>,
}

impl ZoneIndex {
    /// `None` when the types span more zones than a mask has bits.
    fn new(types: &[InstanceType]) -> Option<Self> {
        let mut names: Vec<Arc<str>> = Vec::new();
        let mut masks = Vec::with_capacity(types.len());
        for it in types {
            let mut mask = 0u64;
            for o in it.offerings.iter().filter(|o| o.available) {
                let k = match names.iter().position(|n| *n == o.zone) {
                    Some(k) => k,
                    None => {
                        names.push(o.zone.clone());
                        names.len() - 1
                    }
                };
                mask |= 1u64.checked_shl(u32::try_from(k).ok()?)?;
            }
            masks.push(mask);
        }
        Some(Self { names, masks })
    }
}

/// A node (or launched NodeClaim) that already exists.
#[derive(Clone, Debug)]
pub struct ExistingNode {
    /// Node name (the hostname domain).
    pub name: Arc<str>,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Node taints.
    pub taints: Vec<Taint>,
    /// Allocatable resources.
    pub allocatable: Resources,
    /// Requests of the pods already bound (including DaemonSet pods).
    pub requested: Resources,
    /// Pods already bound, for topology counts and anti-affinity.
    pub pods: Vec<Pod>,
    /// Whether the node is initialized; initialized nodes are tried first.
    pub initialized: bool,
    /// Volumes the node can attach per CSI driver (from its CSINode); drivers not listed are
    /// unlimited.
    pub volume_limits: BTreeMap<String, i64>,
}

/// Solver options (operator settings).
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// `PREFERENCE_POLICY=Ignore`: drop all preferences up front.
    pub ignore_preferences: bool,
    /// `MIN_VALUES_POLICY=BestEffort`: relax `minValues` instead of failing.
    pub min_values_best_effort: bool,
    /// Keep every instance type that fits as a new NodeClaim's option, as upstream, instead of
    /// only the cost-efficient ones (`Solver::cost_efficient`). The disruption engine sets it:
    /// a multi-node consolidation may launch at most one replacement (upstream's rule), and
    /// sizing that replacement by cost would split it in several and block the merge.
    pub every_fitting_type: bool,
    /// Pods from this index on (into `Input::pods`) never share a new NodeClaim with the pods
    /// before it. The disruption engine puts the candidates' pods first and the pods it places
    /// beside them after (pending ones, those of nodes already going): those may take room on
    /// existing nodes the candidates' pods would otherwise use, but a replacement is launched
    /// for the candidates' pods alone. Sized for both, it came up larger than its own pods need
    /// while the others went to nodes of their own (their command's replacement, or the
    /// provisioner's).
    pub apart_from: Option<usize>,
    /// New NodeClaims' options priced at most this (the cheapest that holds the opening pod is
    /// always kept): `repartition` plans the pods of one integer pattern (one node of an instance
    /// type) on NodeClaims no dearer than that node.
    pub max_price: Option<f64>,
}

/// Everything the solver reads.
#[derive(Clone, Debug)]
pub struct Input {
    /// NodePools, in any order (the solver orders them by weight, then name descending).
    pub nodepools: Vec<NodePoolTemplate>,
    /// Existing nodes.
    pub existing: Vec<ExistingNode>,
    /// Pending pods.
    pub pods: Vec<Pod>,
    /// Options.
    pub options: Options,
}

/// A NodeClaim the solver plans to create.
#[derive(Clone, Debug)]
pub struct PlannedNodeClaim {
    /// Index into `Input::nodepools`.
    pub nodepool: usize,
    /// Placeholder hostname used for hostname topology.
    pub hostname: Arc<str>,
    /// The NodeClaim's requirements.
    pub requirements: Requirements,
    /// Compatible instance types (indices into the NodePool's list), cheapest first, at most
    /// [`MAX_INSTANCE_TYPES`].
    pub instance_types: Vec<u32>,
    /// Pods (indices into `Input::pods`).
    pub pods: Vec<u32>,
    /// Total requests including DaemonSet overhead.
    pub requests: Resources,
    /// Whether `minValues` had to be relaxed.
    pub min_values_relaxed: bool,
}

/// Where a pod goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On an existing node (index into `Input::existing`).
    Existing(usize),
    /// On a planned NodeClaim (index into `Outcome::nodeclaims`).
    NodeClaim(usize),
}

/// The solver's result.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// NodeClaims to create.
    pub nodeclaims: Vec<PlannedNodeClaim>,
    /// Placement per pod (same order as `Input::pods`); `None` when unschedulable.
    pub placements: Vec<Option<Placement>>,
    /// Why each unschedulable pod could not be placed (pod index, reason).
    pub errors: Vec<(usize, PodFailure)>,
}

/// How far a pod's preferences have been relaxed, in upstream's order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Relaxation {
    dropped_required: u8,
    dropped_pref_affinity: u8,
    dropped_pref_anti: u8,
    dropped_pref_node: u8,
    dropped_anyway: u8,
    tolerate_prefer_no_schedule: bool,
}

impl Relaxation {
    fn ignoring_preferences(pod: &Pod) -> Self {
        let n = |len: usize| u8::try_from(len).unwrap_or(u8::MAX);
        Self {
            dropped_required: 0,
            dropped_pref_affinity: n(pod.preferred_affinity.len()),
            dropped_pref_anti: n(pod.preferred_anti_affinity.len()),
            dropped_pref_node: n(pod.preferred_terms.len()),
            dropped_anyway: n(pod
                .spread
                .iter()
                .filter(|s| s.when_unsatisfiable == super::pod::WhenUnsatisfiable::ScheduleAnyway)
                .count()),
            tolerate_prefer_no_schedule: true,
        }
    }

    /// Relaxes one more preference; false when nothing is left to relax.
    fn relax(&mut self, pod: &Pod) -> bool {
        let anyway = pod
            .spread
            .iter()
            .filter(|s| s.when_unsatisfiable == super::pod::WhenUnsatisfiable::ScheduleAnyway)
            .count();
        if pod.required_terms.len() > usize::from(self.dropped_required) + 1 {
            self.dropped_required += 1;
        } else if usize::from(self.dropped_pref_affinity) < pod.preferred_affinity.len() {
            self.dropped_pref_affinity += 1;
        } else if usize::from(self.dropped_pref_anti) < pod.preferred_anti_affinity.len() {
            self.dropped_pref_anti += 1;
        } else if usize::from(self.dropped_pref_node) < pod.preferred_terms.len() {
            self.dropped_pref_node += 1;
        } else if usize::from(self.dropped_anyway) < anyway {
            self.dropped_anyway += 1;
        } else if !self.tolerate_prefer_no_schedule {
            self.tolerate_prefer_no_schedule = true;
        } else {
            return false;
        }
        true
    }

    fn active(&self, c: &Constraint) -> bool {
        match c.strength {
            Strength::Required => true,
            Strength::PreferredAffinity(i) => i >= usize::from(self.dropped_pref_affinity),
            Strength::PreferredAntiAffinity(i) => i >= usize::from(self.dropped_pref_anti),
            Strength::ScheduleAnyway(i) => i >= usize::from(self.dropped_anyway),
        }
    }
}

/// Per pod-class facts, computed once.
struct Class {
    /// Smallest request among the class' pods, per resource: a candidate that cannot fit it can
    /// never take a pod of the class.
    min_request: Resources,
    /// Pod requirements per relaxation state.
    requirements: HashMap<Relaxation, Arc<Requirements>>,
    /// The node selector combined with each required node-affinity term (ORed; preferences
    /// excluded): the domains these allow are the universe spread minimums are taken over.
    universe: Vec<Requirements>,
}

struct Claim {
    nodepool: usize,
    hostname: Arc<str>,
    requirements: Requirements,
    options: TypeSet,
    requests: Resources,
    pods: Vec<u32>,
    host_ports: Vec<HostPort>,
    /// (class, relaxation) pairs whose requirements are already implied by `requirements`.
    admitted: Vec<(u32, Relaxation)>,
    /// Per-resource maximum allocatable over the options, kept so that a pod that leaves the
    /// options as they were does not cost a pass over them.
    max_allocatable: Resources,
    /// Per-resource maximum of `allocatable - requests` over the options.
    headroom: Resources,
    min_values_relaxed: bool,
    /// What the claim holds of its pool's remaining limits, one amount per entry of
    /// `NodePoolTemplate::limits`: the capacity of its largest option when it was created.
    reserved: Vec<i64>,
    /// Whether `options` were narrowed to the cost-efficient types when the claim was opened.
    sized_by_cost: bool,
    /// Each instance type's price under the claim's zone and capacity-type requirements (see
    /// `Solver::prices`), refreshed when they change: what a pod adds to the claim's cost is read
    /// from it (`Solver::added_cost`).
    prices: Arc<Vec<f64>>,
    /// The best price per typical pod among the types that fit the claim's first pod (see
    /// `Solver::cost_efficient`): the yardstick for growing into a dearer option
    /// (`Solver::worth_growing`). Infinite when the claim is sized as upstream sizes it.
    best_per_pod: f64,
    /// The shape of the pod that opened it (`Solver::shapes`): the typical pod it is sized for.
    shape: u32,
    /// Whether its pods are at or past `Options::apart_from` (see `Solver::apart`).
    apart: bool,
}

struct Existing<'a> {
    /// Index in `Input::existing` (the list is reordered: initialized nodes first).
    index: usize,
    /// Borrowed, not cloned: the disruption engine solves once per candidate, and copying every
    /// node's bound pods each time cost as much as the solve.
    node: &'a ExistingNode,
    /// Requests of the bound pods and of the pods placed here in this solve.
    requested: Resources,
    /// Volumes attached, per driver.
    volumes: BTreeMap<Arc<str>, Vec<Arc<str>>>,
    requirements_ok: HashMap<(u32, Relaxation), bool>,
    host_ports: Vec<HostPort>,
}

/// The first check an existing node fails for a pod (kept small: it is on the bin-packing path;
/// [`Solver::existing_failure`] adds the details for explanations).
#[derive(Clone, Copy)]
enum NodeBlocker {
    Taint,
    Labels,
    /// Too little free capacity; `never` when not even the class's smallest pod fits.
    Full {
        never: bool,
    },
    HostPort,
    Volumes,
    Topology,
}

/// How a planned NodeClaim weighs for a pod ([`Solver::weigh_claim`]).
enum Weighed {
    /// It holds the pod, or may and could not beat the best so far anyway; `free` when its
    /// cheapest option still holds it (nothing beats that).
    Fits { free: bool },
    /// As [`Verdict::Never`].
    Never,
    /// As [`Verdict::NotNow`].
    NotNow,
    /// As [`Verdict::Capped`].
    Capped,
}

/// A candidate's verdict for a pod.
enum Verdict<T> {
    Fits(T),
    /// Can never take a pod of this class again.
    Never,
    /// Not now; maybe for another pod of the class.
    NotNow,
    /// The pod fits only a dearer option that is not worth growing into
    /// (`Solver::worth_growing`): the claim should be capped at the options that are.
    Capped,
}

struct Pool {
    template: NodePoolTemplate,
    /// Instance types by cheapest available price, the order options are kept in.
    by_price: Arc<Vec<u32>>,
    /// Largest allocatable of any instance type, per resource.
    max_allocatable: Resources,
    /// Whether any instance type has a capacity reservation offering: when none has, planning
    /// onto reservations is skipped without a pass over the offerings.
    has_reservations: bool,
    zone_index: Option<Arc<ZoneIndex>>,
    /// Claims before this index have given back what they can of the pool's limits (see
    /// `Solver::reclaim_limits`).
    reclaimed_to: usize,
}

/// Why a NodePool cannot open a NodeClaim for a pod.
struct Rejection {
    reason: Failure,
    /// The pool's remaining limits are what stands in the way: an instance type that fits the
    /// pod exists, but none within the limits.
    by_limits: bool,
}

impl From<Failure> for Rejection {
    fn from(reason: Failure) -> Self {
        Self {
            reason,
            by_limits: false,
        }
    }
}

struct Solver<'a> {
    input: &'a Input,
    pools: Vec<Pool>,
    pool_order: Vec<usize>,
    existing: Vec<Existing<'a>>,
    claims: Vec<Claim>,
    topology: Topology,
    pod_topology: Vec<PodTopology>,
    class_of: Vec<u32>,
    classes: Vec<Class>,
    claim_skip: HashMap<(u32, Relaxation), SkipList>,
    existing_skip: HashMap<(u32, Relaxation), SkipList>,
    allow_well_known: AllowUndefined,
    /// The pending pods' shapes, each with the typical pod the NodeClaims opened for it are
    /// sized for (see `Solver::cost_efficient`): one for the whole round unless
    /// [`Sizing::ByShape`].
    shapes: ResourceShapes,
    /// How new NodeClaims are sized and which a pod may join.
    sizing: Sizing,
    /// The key a pod's NodeClaim skip list is kept under (with its relaxation): its class, with
    /// [`Sizing::ByShape`] its shape too, and its side of `Options::apart_from`, since a pod
    /// never joins those NodeClaims of another (`Solver::routes`).
    route_of: Vec<u32>,
    /// How `Solver::worth_growing` measures the room a larger type adds.
    yardstick: Yardstick,
    /// In which order a pod considers the planned NodeClaims.
    placing: Placing,
    /// Unless [`Placing::Window`], the planned NodeClaims by load (`Solver::load_of`), then
    /// index, each under the key it was last filed at (`Solver::loads`): kept ordered as pods
    /// arrive, so a pod reads the least loaded without a pass over every NodeClaim.
    by_load: BTreeSet<(u64, u32)>,
    /// Each planned NodeClaim's key in `by_load`.
    loads: Vec<u64>,
    /// In which order the pods are placed.
    order: Order,
    /// How much more per typical pod than the best price `Solver::worth_growing` lets the room
    /// a larger type adds cost: [`COST_SLACK`] or [`TIGHT_GROWTH_SLACK`].
    growth_slack: f64,
    /// Whether `Solver::cap_claim` took options away from a NodeClaim in this solve.
    capped: bool,
    /// Whether `Solver::worth_growing` let a NodeClaim grow at a price [`TIGHT_GROWTH_SLACK`]
    /// would have refused: if not, a solve with the tighter bound decides the same.
    close_call: Cell<bool>,
    /// The capacity reservations held by this solve's NodeClaims that may launch only into one
    /// (see `Solver::hold_reservation`).
    holds: Holds,
    /// In the contained solve of `plan`, the median NodeClaim price of the plan it may replace:
    /// a new NodeClaim's options stop at [`BLAST_RADIUS`] times the larger of it and what the
    /// opening pod needs (`Solver::contain`).
    blast_median: Option<f64>,
    /// The pods (by index; none when empty) placed after every other, in their own order:
    /// see `plan`.
    late: Vec<bool>,
}

/// The capacity reservations a solve's reserved-only NodeClaims hold, from the moment each is
/// opened until `Solver::reserve` pins it: each holds one instance of a reservation it could
/// launch into, and no reservation gives out more than it has left. Which one a NodeClaim holds
/// may change as others arrive (one that could use several moves aside for one that can use
/// only the reservation it holds), so a NodeClaim is turned away only when no way of sharing the
/// reservations out leaves one for it.
#[derive(Default)]
struct Holds {
    /// The reservations each NodeClaim (by index) could launch into, cheapest first.
    wants: HashMap<usize, Vec<Arc<str>>>,
    /// The reservation each NodeClaim holds; ordered, so that who moves aside is deterministic.
    of: BTreeMap<usize, Arc<str>>,
    /// How many NodeClaims hold each reservation.
    count: HashMap<Arc<str>, i64>,
    /// Instances each reservation has left this round.
    left: HashMap<Arc<str>, i64>,
    /// Reservations a search for room found full with holders that can use no other: holds are
    /// never given back within a solve, so these stay full, and a NodeClaim that wants only
    /// them is turned away without searching again (each pod that does not fit would).
    saturated: BTreeSet<Arc<str>>,
}

impl Holds {
    /// Gives NodeClaim `c` one of `wants` (reservation ID and instances left, cheapest first):
    /// a free one, else one whose holder can move to another it could use. False, with nothing
    /// changed, when there is none.
    fn take(&mut self, c: usize, wants: Vec<(Arc<str>, i64)>) -> bool {
        let ids: Vec<Arc<str>> = wants
            .into_iter()
            .map(|(id, left)| {
                // Pools sharing a reservation may have read different counts: the lower holds.
                let known = self.left.entry(id.clone()).or_insert(left);
                *known = (*known).min(left);
                id
            })
            .collect();
        if ids.iter().all(|r| self.saturated.contains(r)) {
            return false;
        }
        self.wants.insert(c, ids);
        let mut visited = BTreeSet::new();
        if self.place(c, &mut visited) {
            true
        } else {
            self.wants.remove(&c);
            self.saturated.append(&mut visited);
            false
        }
    }

    /// Places `c` on a free reservation it wants, or frees one by moving its holder along
    /// (an augmenting path; `visited` are the reservations already on the path).
    fn place(&mut self, c: usize, visited: &mut BTreeSet<Arc<str>>) -> bool {
        let wants = self.wants.get(&c).cloned().unwrap_or_default();
        let free = |h: &Self, r: &Arc<str>| {
            h.count.get(r).copied().unwrap_or(0) < h.left.get(r).copied().unwrap_or(0)
        };
        if let Some(r) = wants.iter().find(|r| free(self, r)) {
            self.hold(c, r.clone());
            return true;
        }
        for r in &wants {
            if !visited.insert(r.clone()) {
                continue;
            }
            let holders: Vec<usize> = self
                .of
                .iter()
                .filter(|(h, id)| **h != c && *id == r)
                .map(|(h, _)| *h)
                .collect();
            for h in holders {
                if self.place(h, visited) {
                    self.hold(c, r.clone());
                    return true;
                }
            }
        }
        false
    }

    fn hold(&mut self, c: usize, r: Arc<str>) {
        if let Some(before) = self.of.insert(c, r.clone()) {
            *self.count.entry(before).or_default() -= 1;
        }
        *self.count.entry(r).or_default() += 1;
    }
}

/// How the room a NodeClaim gains by growing into a larger type is counted, in typical pods
/// (see `Solver::worth_growing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Yardstick {
    /// What the larger type holds on top of the claim's pods, less what the smaller one does:
    /// a pile that ran out of memory first gains the CPU it already paid for when it grows into
    /// a type with more memory.
    Pile,
    /// What an empty node of the larger type holds, less what an empty node of the smaller one
    /// does: blind to the pile's shape, but it keeps piles from outgrowing types that suit the
    /// round's pods as a whole.
    EmptyNode,
}

/// Which typical pod new NodeClaims are sized for (see `Solver::cost_efficient`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sizing {
    /// The round's average pod; any pod may join any NodeClaim.
    WholeRound,
    /// The average pod of the opening pod's shape (`shape::ResourceShapes::by_ratio`), and a pod joins
    /// only NodeClaims opened for its own shape: web, batch and memory-heavy pods each get the
    /// types cheapest for them instead of sharing nodes sized for their average.
    ByShape,
    /// As [`Sizing::ByShape`], but a NodeClaim's options stop at the price of the smallest type
    /// whose price per typical pod is within [`NEAR_BEST`] of the best, and a pod also joins
    /// another shape's NodeClaim where that adds nothing to its cost: room other shapes' nodes
    /// have paid for is filled, and piles of one shape no longer grow into the largest type that
    /// is as cheap per pod (351 web pods on an m6a.48xlarge) when a small one is.
    FillByShape,
}

/// In which order a pod considers the planned NodeClaims that may take it (see
/// `Solver::try_claims`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placing {
    /// Creation order: the least added cost among the first [`PLACEMENT_WINDOW`] that fit.
    Window,
    /// Fewest pods first, as upstream tries planned NodeClaims, then least loaded (the largest
    /// share of its cheapest option's allocatable its pods take); the least added cost among the
    /// first [`PLACEMENT_WINDOW`] that fit. In creation order the first eight NodeClaims take
    /// every pod and grow into the largest types while those opened by pods that need a node of
    /// their own (hostname anti-affinity, hostname spread) run nearly empty on room already
    /// paid for.
    FewestPods,
    /// As [`Placing::FewestPods`], but the NodeClaim whose cheapest option costs least first:
    /// small NodeClaims grow a step at a time, each filled before the next grows.
    Cheapest,
}

/// In which order a solve places the pending pods (see `Solver::run`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// Largest CPU, then memory, first (upstream's queue order); among equal sizes, pods with
    /// required anti-affinity first.
    BySize,
    /// The pods that force a NodeClaim of their own (required hostname anti-affinity to their
    /// own replicas) first, then the rest by memory per CPU, least first, each then as
    /// [`Order::BySize`]; and once [`PLACEMENT_WINDOW`] NodeClaims that fit would all grow, a
    /// pod reads on up to [`FREE_SCAN`] of them for one that holds it at no added cost. Only with
    /// placing by load: the forced NodeClaims open first, the CPU-heavy pods spread over them
    /// and fill their CPU, and the memory-heavy pods come last and fill the memory left, so the
    /// round's overflow grows a few NodeClaims, whose room the pods after find. By size, the
    /// 1,000m pods built piles before the forced NodeClaims opened (creation order), or every
    /// NodeClaim took the round's mix of memory per CPU, a little more than the cheapest type
    /// holds, and nearly all grew a step (placing by load).
    ForcedFirst,
}

/// Runs the solver.
pub fn solve(input: &Input) -> Outcome {
    plan(input).1
}

/// Whether `pod` needs a node of its own among its replicas: a required anti-affinity term on
/// hostname that selects the pod itself.
fn forces_own_node(pod: &Pod) -> bool {
    pod.anti_affinity.iter().any(|term| {
        term.topology_key == labels::HOSTNAME
            && term.selects(&pod.namespace, &pod.namespace, &pod.labels)
    })
}

/// How one solve sizes, grows, places and orders: see [`STRATEGIES`].
type Strategy = (Sizing, Yardstick, f64, Placing, Order);

/// The ways `choose` solves a round: which typical pod new NodeClaims are sized for, how
/// `Solver::worth_growing` measures the room a NodeClaim gains by growing, and how much that room
/// may cost. The first is tried alone when its growth decisions leave the others nothing to
/// change. Sizing by shape is tried with one setting, the one that won on every row of
/// `benches/gen-cost.py` where it won (in one it tied with the pile at [`COST_SLACK`]): a solve
/// more per setting would cost a 3,000-pod round another fifth of its time each. It is tried
/// strictly and filling: neither alone is as cheap as the two on every row. The next three place
/// pods by load ([`Placing`]), the settings that won on `benches/gen-cost.py`'s constrained rows
/// (100 pods with hostname anti-affinity among 2,600): fewest pods first at both growth bounds,
/// cheapest NodeClaim first at [`COST_SLACK`]. The last two place those orders again with the
/// pods that force a NodeClaim of their own first ([`Order::ForcedFirst`]), in rounds that have
/// such pods: each won some of those rows, within the blast-radius target where the others
/// broke it.
const STRATEGIES: [Strategy; 11] = [
    (
        Sizing::WholeRound,
        Yardstick::Pile,
        COST_SLACK,
        Placing::Window,
        Order::BySize,
    ),
    (
        Sizing::WholeRound,
        Yardstick::EmptyNode,
        COST_SLACK,
        Placing::Window,
        Order::BySize,
    ),
    (
        Sizing::WholeRound,
        Yardstick::Pile,
        TIGHT_GROWTH_SLACK,
        Placing::Window,
        Order::BySize,
    ),
    (
        Sizing::WholeRound,
        Yardstick::EmptyNode,
        TIGHT_GROWTH_SLACK,
        Placing::Window,
        Order::BySize,
    ),
    (
        Sizing::ByShape,
        Yardstick::Pile,
        TIGHT_GROWTH_SLACK,
        Placing::Window,
        Order::BySize,
    ),
    (
        Sizing::FillByShape,
        Yardstick::Pile,
        TIGHT_GROWTH_SLACK,
        Placing::Window,
        Order::BySize,
    ),
    (
        Sizing::WholeRound,
        Yardstick::Pile,
        COST_SLACK,
        Placing::FewestPods,
        Order::BySize,
    ),
    (
        Sizing::WholeRound,
        Yardstick::Pile,
        TIGHT_GROWTH_SLACK,
        Placing::FewestPods,
        Order::BySize,
    ),
    (
        Sizing::WholeRound,
        Yardstick::Pile,
        COST_SLACK,
        Placing::Cheapest,
        Order::BySize,
    ),
    (
        Sizing::WholeRound,
        Yardstick::Pile,
        COST_SLACK,
        Placing::FewestPods,
        Order::ForcedFirst,
    ),
    (
        Sizing::WholeRound,
        Yardstick::Pile,
        COST_SLACK,
        Placing::Cheapest,
        Order::ForcedFirst,
    ),
];

/// Solves once measuring the room NodeClaims gain by growing against their piles
/// ([`Yardstick::Pile`]) at [`COST_SLACK`]; when that capped a NodeClaim's growth, or let one grow
/// at a price the tighter bound refuses, solves with every other of the [`STRATEGIES`] and keeps
/// the plan that places the most pods, then the cheapest (the earliest on a tie); rounds of more
/// than [`TIGHT_SOLVE_MAX_PODS`] pods try the first two only, and rounds whose pods are all of
/// one shape skip sizing by shape (it would size for the round's average pod). Capping is a bet
/// on the pods still to come: no strategy wins on every input (on `benches/gen-cost.py`'s cases
/// each was the cheapest on some and up to 10% dearer on others), and a solve takes
/// milliseconds, so all are tried. Without a cap or a close call the solves would be the same.
/// A plan of [`Sizing::FillByShape`] that breaks the [`BLAST_RADIUS`] target does not replace a
/// plan that keeps it, however cheaper: the other strategies' plans are compared on placed pods
/// and cost alone, as before. Placing by load is tried only while the best plan breaks that
/// target, and in rounds of at most [`LOAD_SOLVE_MAX_PODS`] pods: it exists to spread pods over
/// NodeClaims that creation order leaves nearly empty, and a round whose plan keeps the target
/// pays nothing for it. When the best plan still breaks the target (in rounds of at most
/// [`TIGHT_SOLVE_MAX_PODS`] pods), its strategy is solved once more with every new NodeClaim
/// capped at what keeps it (`Solver::contain`, from the best plan's median), and the cheapest
/// plan that keeps the target, from any solve, replaces the best unless it places fewer pods or
/// costs more than [`CONTAINED_PREMIUM`] over it: the piles no strategy split (99 batch pods on
/// an r8i.96xlarge among t3a.2xlarge nodes) are what the cheapest strategies plan, and split
/// they cost 0-5% more, or less. Then every other strategy whose plan broke the target is solved
/// capped too (from its own plan's median), and its plan, if it keeps the target, replaces a
/// choice that keeps it too when it beats it, and a choice that breaks it when it is within the
/// premium: which strategy splits its piles most cheaply is not the one that piled most cheaply,
/// nor one whose piles cost little more (sessions 42-44, benches/README.md). Those rivals are
/// capped even when the best plan keeps the target, and a capped plan that beats it replaces it:
/// a strategy whose piles broke the target may, split, be the cheapest of all.
///
/// Only one plan is held at a time: each is scored and dropped, and the winner solved again
/// unless it was the last (solves are deterministic). Holding two cost a 20,000-pod `simulate`
/// 13 MB; only the rivals' capped solves, in rounds of at most [`TIGHT_SOLVE_MAX_PODS`] pods,
/// run beside a held plan.
fn choose(input: &Input) -> (Solver<'_>, Outcome) {
    let placed = |o: &Outcome| o.placements.iter().filter(|p| p.is_some()).count();
    let solve_as = |strategy: Strategy, blast_median: Option<f64>| {
        solve_with(input, strategy, blast_median, Vec::new())
    };
    let (solver, outcome) = solve_as(STRATEGIES[0], None);
    let tight = input.pods.len() <= TIGHT_SOLVE_MAX_PODS;
    let contained =
        |solver: &Solver<'_>, outcome: &Outcome| !tight || solver.within_blast_radius(outcome);
    let retry = solver.capped || (tight && solver.close_call.get());
    if !retry && contained(&solver, &outcome) {
        return (solver, outcome);
    }
    // With one shape, sizing by shape is sizing for the round.
    let shapes = ResourceShapes::by_ratio(&input.pods).typical.len() > 1;
    let by_load = input.pods.len() <= LOAD_SOLVE_MAX_PODS;
    // Without pods that force a NodeClaim of their own, the forced-first order is the order by
    // memory per CPU alone, which only the forced NodeClaims it opens first make pay.
    let forced = input.pods.iter().any(forces_own_node);
    let tried: Vec<usize> = (1..STRATEGIES.len())
        .filter(|_| retry)
        .filter(|&k| k < 2 || (tight && (STRATEGIES[k].0 == Sizing::WholeRound || shapes)))
        .filter(|&k| by_load || STRATEGIES[k].3 == Placing::Window)
        .filter(|&k| forced || STRATEGIES[k].4 == Order::BySize)
        .collect();
    let score =
        |k: usize, blast_median: Option<f64>, solver: &Solver<'_>, outcome: &Outcome| Scored {
            strategy: k,
            blast_median,
            placed: placed(outcome),
            cost: solver.plan_cost(outcome),
            contained: contained(solver, outcome),
            median: solver.median_price(outcome),
        };
    let mut best = score(0, None, &solver, &outcome);
    // The cheapest plan that keeps the target, which a cheaper one that breaks it may displace
    // as the best.
    let mut best_contained = Some(best.clone()).filter(|b| b.contained);
    // The plans that break the target, each of which may keep it capped (`Solver::contain`).
    let mut broken: Vec<Scored> = Some(best.clone())
        .filter(|b| !b.contained)
        .into_iter()
        .collect();
    drop((solver, outcome));
    for (n, &k) in tried.iter().enumerate() {
        let strategy = STRATEGIES[k];
        // Placing by load only serves a plan that breaks the blast-radius target.
        if strategy.3 != Placing::Window && best.contained {
            continue;
        }
        let (solver, outcome) = solve_as(strategy, None);
        let scored = score(k, None, &solver, &outcome);
        if scored.contained && best_contained.as_ref().is_none_or(|b| scored.beats(b)) {
            best_contained = Some(scored.clone());
        } else if !scored.contained {
            broken.push(scored.clone());
        }
        // Filling by shape never trades the blast-radius target for cost.
        if strategy.0 == Sizing::FillByShape && best.contained && !scored.contained {
            continue;
        }
        if scored.beats(&best) {
            let contained = scored.contained;
            best = scored;
            // A plan that breaks the target may yet give way to a contained one, and one that
            // keeps it to a plan that broke it capped, below.
            if n + 1 == tried.len() && contained && broken.is_empty() {
                return (solver, outcome);
            }
        }
    }
    if best.contained && broken.is_empty() {
        return solve_as(STRATEGIES[best.strategy], None);
    }
    // The best plan breaks the target: its strategy again, each new NodeClaim capped at what
    // keeps it (`Solver::contain`). The cheapest plan that keeps the target wins unless it
    // places fewer pods or costs more than [`CONTAINED_PREMIUM`] over the best.
    let capped_solve = |from: &Scored| {
        let (solver, outcome) = solve_as(STRATEGIES[from.strategy], from.median);
        let scored = score(from.strategy, from.median, &solver, &outcome);
        (scored, solver, outcome)
    };
    // The plan last solved that `chosen` may name, so that it need not be solved again.
    let mut held = None;
    if !best.contained && best.median.is_some() {
        let (scored, solver, outcome) = capped_solve(&best);
        if scored.contained && best_contained.as_ref().is_none_or(|b| scored.beats(b)) {
            best_contained = Some(scored.clone());
            held = Some((scored, solver, outcome));
        } else if !scored.contained && scored.beats(&best) {
            best = scored.clone();
            held = Some((scored, solver, outcome));
        }
    }
    let (least_placed, dearest) = (best.placed, best.cost * (1.0 + CONTAINED_PREMIUM));
    let acceptable = |c: &Scored| c.placed >= least_placed && c.cost <= dearest;
    // The other strategies whose plans break the target are capped in turn, however dear their
    // piles, and also when the best plan keeps the target: one may split its piles more cheaply
    // (batch pods on a broad spot pool: $19.08/h against $19.43/h for the best's capped plan),
    // split them where the best's capped plan still breaks the target (constrained pods on a
    // broad spot pool: cheapest-first's piles cost more than the premium over the best, its
    // capped plan 4% more and within 4x), or, capped, beat a best plan that kept the target
    // (web, memory-heavy and batch pods on a broad on-demand pool: sized by shape, $68.51/h
    // against $72.66/h on seven 48xlarge nodes).
    let rivals: Vec<Scored> = broken
        .into_iter()
        .filter(|r| r.strategy != best.strategy && r.median.is_some())
        .collect();
    let mut chosen = best_contained.filter(acceptable).unwrap_or(best);
    for rival in &rivals {
        let (scored, solver, outcome) = capped_solve(rival);
        let better = if chosen.contained {
            scored.beats(&chosen)
        } else {
            acceptable(&scored)
        };
        if scored.contained && better {
            chosen = scored.clone();
            held = Some((scored, solver, outcome));
        }
    }
    match held {
        Some((plan, solver, outcome))
            if plan.strategy == chosen.strategy && plan.blast_median == chosen.blast_median =>
        {
            (solver, outcome)
        }
        _ => solve_as(STRATEGIES[chosen.strategy], chosen.blast_median),
    }
}

/// One solve of `input` with `strategy`, capped at `blast_median` (`Solver::contain`), the pods
/// marked in `late` placed after the others.
fn solve_with(
    input: &Input,
    (sizing, yardstick, slack, placing, order): Strategy,
    blast_median: Option<f64>,
    late: Vec<bool>,
) -> (Solver<'_>, Outcome) {
    let mut solver = Solver::new(input);
    solver.order = order;
    if sizing != Sizing::WholeRound {
        solver.size_by_shape(sizing);
    }
    solver.yardstick = yardstick;
    solver.growth_slack = slack;
    solver.placing = placing;
    solver.blast_median = blast_median;
    solver.late = late;
    let outcome = solver.run();
    (solver, outcome)
}

/// The plan `choose` chooses, unless the same solve with the pods of its emptiable NodeClaims
/// placed last (`Solver::emptiable_pods`) places as many pods for less, and keeps the
/// blast-radius target if the chosen plan did. Those NodeClaims are what consolidation would
/// delete right after launch; their pods, coming last, fill the room the others' piles left
/// before they open NodeClaims of their own. In rounds of at most [`TIGHT_SOLVE_MAX_PODS`] pods,
/// where the second plan is held beside the first. The plan kept is then regrouped (`regroup`).
fn plan(input: &Input) -> (Solver<'_>, Outcome) {
    let (solver, outcome) = choose(input);
    if input.pods.len() > TIGHT_SOLVE_MAX_PODS {
        return (solver, outcome);
    }
    let late = solver.emptiable_pods(&outcome);
    if !late.contains(&true) {
        return regroup(input, solver, outcome);
    }
    let strategy = (
        solver.sizing,
        solver.yardstick,
        solver.growth_slack,
        solver.placing,
        solver.order,
    );
    let (again, again_outcome) = solve_with(input, strategy, solver.blast_median, late);
    let placed = |o: &Outcome| o.placements.iter().filter(|p| p.is_some()).count();
    let better = placed(&again_outcome) >= placed(&outcome)
        && again.plan_cost(&again_outcome) < solver.plan_cost(&outcome)
        && (again.within_blast_radius(&again_outcome) || !solver.within_blast_radius(&outcome));
    if better {
        regroup(input, again, again_outcome)
    } else {
        regroup(input, solver, outcome)
    }
}

/// How many of a plan's dearest NodeClaims `regroup` takes groups from.
const REGROUP_CLAIMS: usize = 10;

/// The most groups `regroup` solves for one round.
const REGROUP_SOLVES: usize = 400;

/// The most pods `regroup` solves in all, per pod of the round: a group solved alone takes about
/// what a round of as many pods takes, so this bounds regrouping at a few times the round's own
/// solve and keeps it linear in pods (1,460 mixed pods: 0.2 s -> 0.9 s).
const REGROUP_WORK: usize = 10;

/// The most pods `regroup` solves in all splitting groups by memory per CPU (`solve_alone`), per
/// pod of the round: a budget of its own, so that splits never starve the plain regrouping
/// (spent from one budget, they cost batch pods on a narrow on-demand pool $0.50/h).
const REGROUP_SPLIT_WORK: usize = 10;

/// Whether `regroup` may solve groups of the round's NodeClaims on their own: their pods then
/// depend on nothing outside the group (no topology spread, no pod affinity or anti-affinity,
/// and no existing pod's anti-affinity selects them), and the NodeClaims share nothing else
/// (`independent_claims`).
fn regroupable(input: &Input) -> bool {
    let existing = free_pods::Selectors::of_bound(input.existing.iter().flat_map(|n| &n.pods));
    independent_claims(input)
        && input
            .pods
            .iter()
            .all(|p| free_pods::unconstrained(p) && !existing.select(p))
}

/// Whether a round's new NodeClaims may be planned again in parts: no NodePool limit or
/// capacity reservation is shared among them, and the round is no disruption simulation
/// (`every_fitting_type`, `apart_from` size replacements their own way) nor larger than
/// [`TIGHT_SOLVE_MAX_PODS`] pods.
fn independent_claims(input: &Input) -> bool {
    !input.options.every_fitting_type
        && input.options.apart_from.is_none()
        && input.pods.len() <= TIGHT_SOLVE_MAX_PODS
        && input.nodepools.iter().all(|t| {
            t.limits.is_empty()
                && t.nodes_limit.is_none()
                && !t
                    .instance_types
                    .iter()
                    .any(|it| it.offerings.iter().any(|o| o.reservation.is_some()))
        })
}

/// A planned NodeClaim as a member of the groups `regroup` tries.
#[derive(Clone, Copy)]
struct Member {
    /// Index into `Outcome::nodeclaims`.
    claim: usize,
    /// Its price (as `Solver::plan_cost` counts it).
    price: f64,
    /// The part of its price paid for room its pods leave idle, in the resource (CPU or
    /// memory) they use least of its cheapest type.
    idle: f64,
}

/// The plan with groups of its NodeClaims replaced by what their pods cost solved on their own,
/// where that is cheaper. A round's strategies each pile its pods one way for the whole round;
/// a few NodeClaims solved again together may pair the pods differently (CPU-heavy batch pods
/// on a c6a.48xlarge, memory-heavy ones on an r6a.48xlarge, where the round's plan put both on
/// m6a.48xlarge nodes). Among the [`REGROUP_CLAIMS`] dearest NodeClaims every pair and triple is
/// a group, tried in order of the idle room its NodeClaims pay for, most first, until a group
/// pays for less idle room than the best saving found; the group that saves most is replaced,
/// and again until no group saves. A group's pods are also tried split in two by memory per CPU
/// (`solve_alone`). Keeps the blast-radius target if the plan kept it. A group's pods solve the
/// same way every time (solves are deterministic), so each set of pods is solved once: after a
/// replacement only the groups it changed are solved again, within [`REGROUP_SOLVES`] groups and
/// [`REGROUP_WORK`] pods per pod of the round ([`REGROUP_SPLIT_WORK`] more for the splits).
/// Then each pool's pods are planned again from integer patterns (`repartition`); where that is
/// cheaper, the rounds run again over it (each with budgets of their own).
fn regroup<'a>(input: &'a Input, solver: Solver<'a>, outcome: Outcome) -> (Solver<'a>, Outcome) {
    if !regroupable(input) {
        let outcome = free_pods::apart(input, &solver, &outcome).unwrap_or(outcome);
        return (solver, outcome);
    }
    let contained = solver.within_blast_radius(&outcome);
    let regrouped = regroup_claims(input, &solver, outcome, contained);
    let outcome = match repartition(input, &solver, &regrouped, contained) {
        Some(repartitioned) => regroup_claims(input, &solver, repartitioned, contained),
        None => regrouped,
    };
    (solver, outcome)
}

/// `regroup`'s rounds over `outcome`'s NodeClaims; `contained`: whether the plan it came from
/// kept the blast-radius target.
fn regroup_claims(
    input: &Input,
    solver: &Solver<'_>,
    mut outcome: Outcome,
    contained: bool,
) -> Outcome {
    // What each group's pods (sorted) cost solved alone.
    let mut solved: HashMap<Vec<u32>, SolvedAlone> = HashMap::new();
    let mut work = REGROUP_WORK.saturating_mul(input.pods.len());
    let mut split_work = REGROUP_SPLIT_WORK.saturating_mul(input.pods.len());
    loop {
        let mut dearest: Vec<Member> = outcome
            .nodeclaims
            .iter()
            .enumerate()
            .filter_map(|(claim, c)| solver.member(claim, c))
            .collect();
        dearest.sort_by(|a, b| b.price.total_cmp(&a.price).then(a.claim.cmp(&b.claim)));
        dearest.truncate(REGROUP_CLAIMS);
        let mut groups: Vec<Vec<Member>> = Vec::new();
        for (i, &a) in dearest.iter().enumerate() {
            for (j, &b) in dearest.iter().enumerate().skip(i + 1) {
                groups.push(vec![a, b]);
                for &c in dearest.iter().skip(j + 1) {
                    groups.push(vec![a, b, c]);
                }
            }
        }
        let idle = |group: &[Member]| group.iter().map(|c| c.idle).sum::<f64>();
        groups.sort_by(|a, b| idle(b).total_cmp(&idle(a)));
        // The replacement that saves most and keeps the target if the plan kept it.
        let mut best: Option<(f64, Outcome)> = None;
        for group in groups {
            if best
                .as_ref()
                .is_some_and(|(saved, _)| *saved >= idle(&group))
            {
                break;
            }
            let price: f64 = group.iter().map(|c| c.price).sum();
            let mut pods: Vec<u32> = group
                .iter()
                .flat_map(|c| outcome.nodeclaims[c.claim].pods.iter().copied())
                .collect();
            pods.sort_unstable();
            if !solved.contains_key(&pods) {
                if solved.len() == REGROUP_SOLVES || work < pods.len() {
                    break;
                }
                work -= pods.len();
                let sub = solve_alone(input, &pods, price, &mut split_work);
                solved.insert(pods.clone(), sub);
            }
            let Some(Some((cost, Some(sub)))) = solved.get(&pods) else {
                continue;
            };
            let saved = price - cost;
            if saved <= 1e-9 || best.as_ref().is_some_and(|(s, _)| *s >= saved) {
                continue;
            }
            let removed: Vec<usize> = group.iter().map(|c| c.claim).collect();
            let candidate = replaced(&outcome, &removed, sub);
            if contained && !solver.within_blast_radius(&candidate) {
                continue;
            }
            best = Some((saved, candidate));
        }
        match best {
            Some((_, next)) => outcome = next,
            None => break,
        }
    }
    outcome
}

/// The plan with each NodePool's new NodeClaims planned again in the groups the integer
/// patterns put their pods in (`Solver::pattern_groups`: one group per node), each group solved
/// on its own (`solve_part`, capped at its node's price), when that costs less and keeps the
/// blast-radius target if the plan kept it; `None` when no pool's plan changed. The round's
/// strategies size every NodeClaim for a typical pod; the patterns instead put each kind of pod
/// on the types cheapest for it, and pods that complement each other (CPU-heavy beside
/// memory-heavy) together on one node. `regroup` runs it after its own rounds and then those
/// rounds again, so the plan is never dearer than theirs.
fn repartition(
    input: &Input,
    solver: &Solver<'_>,
    outcome: &Outcome,
    contained: bool,
) -> Option<Outcome> {
    let mut changed: Option<Outcome> = None;
    'pools: for p in 0..input.nodepools.len() {
        let current = changed.as_ref().unwrap_or(outcome);
        let claims: Vec<usize> = (0..current.nodeclaims.len())
            .filter(|&k| current.nodeclaims[k].nodepool == p)
            .collect();
        if claims.len() < 2 {
            continue;
        }
        let pods: Vec<u32> = claims
            .iter()
            .flat_map(|&k| current.nodeclaims[k].pods.iter().copied())
            .collect();
        let Some(groups) = solver.pattern_groups(p, &pods) else {
            continue;
        };
        let price: f64 = solver
            .priced(current)
            .iter()
            .filter(|(c, _)| c.nodepool == p)
            .map(|(_, price)| price)
            .sum();
        let mut cost = 0.0;
        let mut planned = Vec::new();
        for (cap, group) in &groups {
            let Some((group_cost, group_claims)) = solve_part(input, group, *cap) else {
                continue 'pools;
            };
            cost += group_cost;
            planned.extend(group_claims);
        }
        if cost >= price - 1e-9 {
            continue;
        }
        let candidate = replaced(current, &claims, &planned);
        if !contained || solver.within_blast_radius(&candidate) {
            changed = Some(candidate);
        }
    }
    changed
}

/// What a group's pods cost solved on their own, with their NodeClaims when that saved; `None`
/// when not every pod could be placed.
type SolvedAlone = Option<(f64, Option<Vec<PlannedNodeClaim>>)>;

/// Pods `pods` (indices into the round's pods, sorted) solved on their own, without existing
/// nodes: their cost, and their NodeClaims when they cost less than `price`; `None` when a pod
/// stays unplaced. Solved together (`choose`), and, within `split_work` pods solved, also split
/// in two at each step of memory per CPU (`ratio_bucket`) among them, each part solved alone: a
/// round's strategies pile its pods for the round as a whole, and CPU-heavy pods on compute
/// types beside memory-heavy ones on memory-optimized types can cost less than any pile of both
/// (batch pods on a narrow spot pool: $19.23/h -> $18.18/h).
fn solve_alone(input: &Input, pods: &[u32], price: f64, split_work: &mut usize) -> SolvedAlone {
    let mut best = solve_part(input, pods, None);
    let bucket = |i: u32| ratio_bucket(&input.pods[i as usize].requests);
    let mut by_ratio = pods.to_vec();
    by_ratio.sort_by_key(|&i| (bucket(i), i));
    for k in 1..by_ratio.len() {
        if bucket(by_ratio[k - 1]) == bucket(by_ratio[k]) {
            continue;
        }
        if *split_work < pods.len() {
            break;
        }
        *split_work -= pods.len();
        let (mut low, mut high) = (by_ratio[..k].to_vec(), by_ratio[k..].to_vec());
        low.sort_unstable();
        high.sort_unstable();
        let (Some((low_cost, mut claims)), Some((high_cost, high_claims))) = (
            solve_part(input, &low, None),
            solve_part(input, &high, None),
        ) else {
            continue;
        };
        let cost = low_cost + high_cost;
        if best.as_ref().is_none_or(|(c, _)| cost < *c) {
            claims.extend(high_claims);
            best = Some((cost, claims));
        }
    }
    let (cost, claims) = best?;
    Some((cost, Some(claims).filter(|_| cost < price)))
}

/// Pods `pods` (indices into the round's pods) solved on their own (`choose`), without existing
/// nodes: their cost and NodeClaims, whose pods are indices into the round's pods; `None` when a
/// pod stays unplaced.
fn solve_part(
    input: &Input,
    pods: &[u32],
    max_price: Option<f64>,
) -> Option<(f64, Vec<PlannedNodeClaim>)> {
    let sub_input = Input {
        nodepools: input.nodepools.clone(),
        existing: Vec::new(),
        pods: pods
            .iter()
            .map(|&i| input.pods[i as usize].clone())
            .collect(),
        options: Options {
            max_price: lower(max_price, input.options.max_price),
            ..input.options
        },
    };
    let (sub_solver, sub) = choose(&sub_input);
    if !sub.errors.is_empty() || sub.placements.iter().any(Option::is_none) {
        return None;
    }
    let cost = sub_solver.plan_cost(&sub);
    let mut claims = sub.nodeclaims;
    for p in claims.iter_mut().flat_map(|c| &mut c.pods) {
        *p = pods[*p as usize];
    }
    Some((cost, claims))
}

/// The lower of two optional price caps (`Options::max_price`).
fn lower(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `outcome` with its NodeClaims `removed` replaced by `claims` (whose pods are indices into the
/// round's pods); the placeholder hostnames renumbered.
fn replaced(outcome: &Outcome, removed: &[usize], claims: &[PlannedNodeClaim]) -> Outcome {
    let mut nodeclaims: Vec<PlannedNodeClaim> = outcome
        .nodeclaims
        .iter()
        .enumerate()
        .filter(|(k, _)| !removed.contains(k))
        .map(|(_, c)| c.clone())
        .chain(claims.iter().cloned())
        .collect();
    let mut placements = outcome.placements.clone();
    for (k, claim) in nodeclaims.iter_mut().enumerate() {
        claim.hostname = placeholder_hostname(k);
        for &p in &claim.pods {
            placements[p as usize] = Some(Placement::NodeClaim(k));
        }
    }
    Outcome {
        nodeclaims,
        placements,
        errors: outcome.errors.clone(),
    }
}

/// The hostname topology domain of the `k`th planned NodeClaim of a plan (an index into
/// `Outcome::nodeclaims`): unique within the plan, as hostname spreads and anti-affinity need.
fn placeholder_hostname(k: usize) -> Arc<str> {
    Arc::from(format!("hostname-placeholder-{k:04}"))
}

/// A plan of `plan`'s, scored and dropped: enough to solve it again.
#[derive(Clone)]
struct Scored {
    /// Index into [`STRATEGIES`].
    strategy: usize,
    /// `Solver::blast_median` of the solve.
    blast_median: Option<f64>,
    /// How many pods it places.
    placed: usize,
    /// Its price per hour (`Solver::plan_cost`).
    cost: f64,
    /// Whether it meets the blast-radius target (always, in rounds too large to check).
    contained: bool,
    /// Its median NodeClaim's price (`Solver::median_price`): what a contained solve caps at.
    median: Option<f64>,
}

impl Scored {
    /// Places more pods, or as many for less (a tie keeps the earlier plan).
    fn beats(&self, other: &Self) -> bool {
        self.placed
            .cmp(&other.placed)
            .then_with(|| other.cost.total_cmp(&self.cost))
            .is_gt()
    }
}

/// Runs the solver and explains pod `pod` (an index into `Input::pods`): `None` when it was
/// placed, else why not — every existing node (in the order they were tried, against what the
/// other pods left of them) and every NodePool, each with the first constraint that failed.
pub fn diagnose(input: &Input, pod: usize) -> (Outcome, Option<PodFailure>) {
    let (mut solver, outcome) = plan(input);
    let Some((_, failure)) = outcome.errors.iter().find(|(i, _)| *i == pod) else {
        return (outcome, None);
    };
    let mut failure = failure.clone();
    // The pools' reasons are those of the last attempt, with every preference relaxed.
    let mut relax = if input.options.ignore_preferences {
        Relaxation::ignoring_preferences(&input.pods[pod])
    } else {
        Relaxation::default()
    };
    while relax.relax(&input.pods[pod]) {}
    let mut attempts: Vec<Attempt> = (0..solver.existing.len())
        .filter_map(|n| {
            let f = solver.existing_failure(pod, n, relax)?;
            Some(Attempt {
                target: Target::Node(solver.existing[n].node.name.to_string()),
                failure: f,
            })
        })
        .collect();
    attempts.append(&mut failure.attempts);
    failure.attempts = attempts;
    (outcome, Some(failure))
}

/// Whether an instance type's labels agree with the requirements and it has an available
/// offering they allow: which types may serve a planned NodeClaim, and the cloud provider's
/// filter when it picks what to launch for one.
pub fn type_matches(it: &InstanceType, reqs: &Requirements) -> bool {
    type_labels::agree(it, reqs) && cheapest_offering(it, reqs).is_some()
}

/// The cheapest available offering allowed by the requirements.
pub fn cheapest_offering<'a>(
    it: &'a InstanceType,
    reqs: &Requirements,
) -> Option<&'a super::instance_type::Offering> {
    it.cheapest_offering(offering_allowed(reqs))
}

/// Whether the requirements allow an offering's zone, zone ID, capacity type and (for reserved
/// offerings) capacity reservation (ID, type, interruptible), whether or not it is available now.
/// Offerings outside reservations carry no reservation label, so they pass a reservation
/// requirement only when it excludes values.
pub fn offering_allowed(
    reqs: &Requirements,
) -> impl Fn(&super::instance_type::Offering) -> bool + '_ {
    let zone = reqs.get(labels::ZONE);
    let ct = reqs.get(labels::CAPACITY_TYPE);
    let zone_id = reqs.get(labels::ZONE_ID);
    let reservation_id = reqs.get(labels::CAPACITY_RESERVATION_ID);
    let reservation_type = reqs.get(labels::CAPACITY_RESERVATION_TYPE);
    let interruptible = reqs.get(labels::CAPACITY_RESERVATION_INTERRUPTIBLE);
    let partition = reqs.get(labels::PLACEMENT_GROUP_PARTITION);
    let absent_ok =
        |r: &Requirement| matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist);
    move |o| {
        zone.is_none_or(|z| z.has(&o.zone))
            && ct.is_none_or(|c| c.has(o.capacity_type.label()))
            && zone_id.is_none_or(|z| o.zone_id.as_deref().is_none_or(|id| z.has(id)))
            && reservation_id.is_none_or(|ids| match &o.reservation {
                Some(r) => ids.has(&r.id),
                None => absent_ok(ids),
            })
            && reservation_type.is_none_or(|types| match &o.reservation {
                Some(r) => types.has(&r.reservation_type),
                None => absent_ok(types),
            })
            && interruptible.is_none_or(|values| match &o.reservation {
                Some(r) => values.has(r.interruptible_label()),
                None => absent_ok(values),
            })
            && partition.is_none_or(|p| match &o.partition {
                Some(n) => p.has(n),
                None => absent_ok(p),
            })
    }
}

/// The offering a launch would use: reserved, then spot, then on-demand when allowed (as
/// upstream's CreateFleet prefers), cheapest within the capacity type.
pub fn launch_offering<'a>(
    it: &'a InstanceType,
    reqs: &Requirements,
) -> Option<&'a super::instance_type::Offering> {
    [
        CapacityType::Reserved,
        CapacityType::Spot,
        CapacityType::OnDemand,
    ]
    .into_iter()
    .filter(|ct| {
        reqs.get(labels::CAPACITY_TYPE)
            .is_none_or(|r| r.has(ct.label()))
    })
    .find_map(|ct| {
        let mut narrowed = reqs.clone();
        narrowed.add_requirement(Requirement::new(
            labels::CAPACITY_TYPE,
            Operator::In,
            [ct.label()],
            None,
        ));
        cheapest_offering(it, &narrowed)
    })
}

/// Per-resource maximum allocatable over the options (nothing when there are none). Computed
/// without allocating for the common resources.
fn max_allocatable(pool: &Pool, options: &TypeSet) -> Resources {
    if options.is_empty() {
        return Resources::default();
    }
    // Most claims keep the pool's largest types among their options; then the bound is known.
    let types = &pool.template.instance_types;
    let mut out = Resources {
        cpu: i64::MIN,
        memory: i64::MIN,
        pods: i64::MIN,
        ephemeral_storage: i64::MIN,
        extended: Vec::new(),
    };
    for i in options.types(&pool.by_price) {
        let a = &types[i as usize].allocatable;
        out.cpu = out.cpu.max(a.cpu);
        out.memory = out.memory.max(a.memory);
        out.pods = out.pods.max(a.pods);
        out.ephemeral_storage = out.ephemeral_storage.max(a.ephemeral_storage);
        for (name, amount) in &a.extended {
            if *amount > out.get(name) {
                out.set(name, *amount);
            }
        }
        if out.cpu == pool.max_allocatable.cpu
            && out.memory == pool.max_allocatable.memory
            && out.pods == pool.max_allocatable.pods
            && out.ephemeral_storage == pool.max_allocatable.ephemeral_storage
            && out.extended == pool.max_allocatable.extended
        {
            break;
        }
    }
    out
}

/// The zones pool `pool` can launch a node in (see [`PoolCache::zones`]), memoized by its
/// requirements across solves.
fn pool_zones(pool: &Pool) -> Arc<Vec<Arc<str>>> {
    let reqs = &pool.template.requirements;
    let key = reqs.to_string();
    if let Ok(cache) = pool.template.cache.zones.lock()
        && let Some(hit) = cache.get(&key)
    {
        return hit.clone();
    }
    let zone = reqs.get(labels::ZONE);
    let ct = reqs.get(labels::CAPACITY_TYPE);
    let zone_id = reqs.get(labels::ZONE_ID);
    let zones: BTreeSet<&Arc<str>> = pool
        .template
        .instance_types
        .iter()
        .filter(|it| type_labels::agree(it, reqs))
        .flat_map(|it| it.offerings.iter())
        .filter(|o| {
            o.available
                && zone.is_none_or(|z| z.has(&o.zone))
                && ct.is_none_or(|c| c.has(o.capacity_type.label()))
                && zone_id.is_none_or(|z| o.zone_id.as_deref().is_none_or(|id| z.has(id)))
        })
        .map(|o| &o.zone)
        .collect();
    let zones = Arc::new(zones.into_iter().cloned().collect::<Vec<_>>());
    if let Ok(mut cache) = pool.template.cache.zones.lock() {
        cache.insert(key, zones.clone());
    }
    zones
}

/// `max_allocatable - requests`: an upper bound on what one more pod may request.
fn headroom(max_allocatable: &Resources, requests: &Resources) -> Resources {
    let mut out = max_allocatable.clone();
    out.sub(requests);
    out
}

impl<'a> Solver<'a> {
    fn new(input: &'a Input) -> Self {
        let pools: Vec<Pool> = input
            .nodepools
            .iter()
            .map(|t| {
                let by_price = t
                    .cache
                    .by_price
                    .get_or_init(|| {
                        let mut order: Vec<u32> = (0..t.instance_types.len() as u32).collect();
                        let price = |i: &u32| {
                            t.instance_types[*i as usize]
                                .cheapest_offering(|_| true)
                                .map_or(f64::INFINITY, |o| o.price)
                        };
                        order.sort_by(|a, b| price(a).total_cmp(&price(b)).then(a.cmp(b)));
                        Arc::new(order)
                    })
                    .clone();
                let max_allocatable = t
                    .cache
                    .max_allocatable
                    .get_or_init(|| {
                        t.instance_types
                            .iter()
                            .fold(Resources::default(), |max, it| max.max(&it.allocatable))
                    })
                    .clone();
                let has_reservations = *t.cache.has_reservations.get_or_init(|| {
                    t.instance_types
                        .iter()
                        .any(|it| it.offerings.iter().any(|o| o.reservation.is_some()))
                });
                let zone_index = t
                    .cache
                    .zone_index
                    .get_or_init(|| ZoneIndex::new(&t.instance_types).map(Arc::new))
                    .clone();
                Pool {
                    template: t.clone(),
                    by_price,
                    max_allocatable,
                    has_reservations,
                    zone_index,
                    reclaimed_to: 0,
                }
            })
            .collect();
        let mut pool_order: Vec<usize> = (0..pools.len()).collect();
        pool_order.sort_by(|&a, &b| {
            let (a, b) = (&input.nodepools[a], &input.nodepools[b]);
            b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name))
        });

        let mut topology = Topology::default();
        // Zones a NodePool can launch in: the available offerings, within its requirements, of
        // the instance types its requirements allow. A zone only types the pool excludes are
        // offered in (us-east-1e has no current-generation c, m or r type) is no domain: counted
        // at zero forever, it would hold every DoNotSchedule zone spread at one pod per zone.
        for pool in &pools {
            topology.add_domains(labels::ZONE, pool_zones(pool).iter(), &pool.template.taints);
        }
        let mut existing: Vec<Existing<'a>> = input
            .existing
            .iter()
            .enumerate()
            .map(|(index, n)| Existing {
                index,
                volumes: attached(n.pods.iter().flat_map(|p| p.volumes.iter())),
                host_ports: n
                    .pods
                    .iter()
                    .flat_map(|p| p.host_ports.iter().cloned())
                    .collect(),
                node: n,
                requested: n.requested.clone(),
                requirements_ok: HashMap::new(),
            })
            .collect();
        existing.sort_by_key(|e| !e.node.initialized);
        for e in &existing {
            for (key, value) in &e.node.labels {
                topology.add_domains(key, [&Arc::from(value.as_str())], &e.node.taints);
            }
        }
        // Register every pod (bound and pending) so all groups exist before linking.
        let mut bound = Vec::new();
        for (n, e) in existing.iter().enumerate() {
            for (k, p) in e.node.pods.iter().enumerate() {
                bound.push((n, k, topology.register(p)));
            }
        }
        let mut pod_topology: Vec<PodTopology> =
            input.pods.iter().map(|p| topology.register(p)).collect();
        for (n, k, mut t) in bound {
            let node = existing[n].node;
            topology.link(&node.pods[k], &mut t);
            topology.record(&t, |key| domain_of_node(node, key), &node.taints);
        }
        for (p, t) in input.pods.iter().zip(pod_topology.iter_mut()) {
            topology.link(p, t);
        }

        // Classes: pods with the same constraints and labels.
        let mut class_index: HashMap<String, u32> = HashMap::new();
        let mut classes: Vec<Class> = Vec::new();
        let class_of: Vec<u32> = input
            .pods
            .iter()
            .map(|p| {
                let key = format!(
                    "{}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
                    p.namespace,
                    p.labels,
                    p.node_selector,
                    p.required_terms,
                    p.preferred_terms,
                    p.tolerations,
                    p.spread,
                    p.affinity,
                    p.anti_affinity,
                    p.preferred_affinity,
                    p.preferred_anti_affinity,
                    p.host_ports
                );
                let next = classes.len() as u32;
                let id = *class_index.entry(key).or_insert(next);
                if id == next {
                    let universe = if p.required_terms.is_empty() {
                        vec![Requirements::for_pod(&p.node_selector, &[])]
                    } else {
                        p.required_terms
                            .iter()
                            .map(|t| Requirements::for_pod(&p.node_selector, &[t.as_slice()]))
                            .collect()
                    };
                    classes.push(Class {
                        min_request: p.requests.clone(),
                        requirements: HashMap::new(),
                        universe,
                    });
                } else {
                    let c = &mut classes[id as usize];
                    c.min_request = min_resources(&c.min_request, &p.requests);
                }
                id
            })
            .collect();

        let shapes = ResourceShapes::whole_round(&input.pods);

        let mut solver = Self {
            input,
            pools,
            pool_order,
            existing,
            claims: Vec::new(),
            topology,
            pod_topology,
            class_of,
            classes,
            claim_skip: HashMap::new(),
            existing_skip: HashMap::new(),
            allow_well_known: AllowUndefined::well_known_labels(),
            shapes,
            sizing: Sizing::WholeRound,
            route_of: Vec::new(),
            yardstick: Yardstick::Pile,
            placing: Placing::Window,
            by_load: BTreeSet::new(),
            loads: Vec::new(),
            order: Order::BySize,
            growth_slack: COST_SLACK,
            capped: false,
            close_call: Cell::new(false),
            holds: Holds::default(),
            blast_median: None,
            late: Vec::new(),
        };
        solver.route_of = solver.routes();
        solver
    }

    /// Whether pod `i` is at or past `Options::apart_from`: it joins only NodeClaims opened by
    /// such pods, and they only NodeClaims opened by it and its like.
    fn apart(&self, i: usize) -> bool {
        self.input.options.apart_from.is_some_and(|from| i >= from)
    }

    /// Each pod's NodeClaim skip-list key (`Solver::route_of`).
    fn routes(&self) -> Vec<u32> {
        let by_shape = self.sizing == Sizing::ByShape;
        if !by_shape && self.input.options.apart_from.is_none() {
            return self.class_of.clone();
        }
        let mut routes: HashMap<(u32, u32, bool), u32> = HashMap::new();
        (0..self.class_of.len())
            .map(|i| {
                let shape = if by_shape { self.shapes.of[i] } else { 0 };
                let next = routes.len() as u32;
                *routes
                    .entry((self.class_of[i], shape, self.apart(i)))
                    .or_insert(next)
            })
            .collect()
    }

    /// Sizes new NodeClaims for the typical pod of their opening pod's shape and keeps each pod
    /// to its own shape's NodeClaims ([`Sizing::ByShape`]), or to those where it adds cost
    /// ([`Sizing::FillByShape`]: another shape's NodeClaims stay candidates, so the skip lists
    /// stay per class).
    fn size_by_shape(&mut self, sizing: Sizing) {
        self.shapes = ResourceShapes::by_ratio(&self.input.pods);
        self.sizing = sizing;
        self.route_of = self.routes();
    }

    fn run(&mut self) -> Outcome {
        let pods = &self.input.pods;
        let mut order: Vec<usize> = (0..pods.len()).collect();
        let forced_first = self.order == Order::ForcedFirst;
        let late = |i: usize| self.late.get(i).copied().unwrap_or(false);
        order.sort_by(|&i, &j| {
            let (a, b) = (&pods[i], &pods[j]);
            let first = if forced_first {
                // Memory per CPU compared without dividing (a pod without CPU requests last).
                let per_cpu =
                    |p: &Pod, q: &Pod| i128::from(p.requests.memory) * i128::from(q.requests.cpu);
                forces_own_node(b)
                    .cmp(&forces_own_node(a))
                    .then_with(|| per_cpu(a, b).cmp(&per_cpu(b, a)))
            } else {
                std::cmp::Ordering::Equal
            };
            late(i)
                .cmp(&late(j))
                .then(first)
                .then(b.requests.cpu.cmp(&a.requests.cpu))
                .then(b.requests.memory.cmp(&a.requests.memory))
                // Among equal sizes, pods with required anti-affinity first: each needs a node
                // of its own, and placed late they find every existing NodeClaim filled to the
                // brim by their peers, so one more node is launched than needed.
                .then(a.anti_affinity.is_empty().cmp(&b.anti_affinity.is_empty()))
                .then(a.created.cmp(&b.created))
                .then_with(|| a.uid.cmp(&b.uid))
        });
        let mut placements: Vec<Option<Placement>> = vec![None; pods.len()];
        let mut errors = Vec::new();
        for i in order {
            match self.place(i) {
                Ok(p) => placements[i] = Some(p),
                Err(reason) => errors.push((i, reason)),
            }
        }
        // The reservations held are shared out again over what the NodeClaims became, and count
        // as taken from the start, so that a NodeClaim finished earlier cannot take what a
        // reserved-only one holds.
        let holds = self.final_holds();
        let mut reserved = holds.count.clone();
        let nodeclaims = std::mem::take(&mut self.claims)
            .into_iter()
            .enumerate()
            .map(|(c, claim)| self.finish(claim, holds.of.get(&c), &mut reserved))
            .collect();
        errors.sort_by_key(|(i, _)| *i);
        Outcome {
            nodeclaims,
            placements,
            errors,
        }
    }

    /// What the planned NodeClaims of `outcome` cost per hour: each its cheapest option's price
    /// under its zone and capacity-type requirements.
    fn plan_cost(&self, outcome: &Outcome) -> f64 {
        self.priced(outcome).iter().map(|(_, price)| price).sum()
    }

    /// Each planned NodeClaim of `outcome` with its price, as `plan_cost` counts it.
    fn priced<'o>(&self, outcome: &'o Outcome) -> Vec<(&'o PlannedNodeClaim, f64)> {
        outcome
            .nodeclaims
            .iter()
            .filter_map(|c| {
                let t = *c.instance_types.first()?;
                Some((c, self.prices(c.nodepool, &c.requirements)[t as usize]))
            })
            .collect()
    }

    /// The price of `outcome`'s median planned NodeClaim (the mean of the middle two of an even
    /// count, as `benches/gen-cost.py` reads the target), as `plan_cost` prices it; `None`
    /// without NodeClaims.
    fn median_price(&self, outcome: &Outcome) -> Option<f64> {
        patterns::median(self.priced(outcome).iter().map(|(_, p)| *p).collect())
    }

    /// Planned NodeClaim `claim` (`c`) as a member of `regroup`'s groups; `None` without options.
    fn member(&self, claim: usize, c: &PlannedNodeClaim) -> Option<Member> {
        let t = *c.instance_types.first()?;
        let price = *self.prices(c.nodepool, &c.requirements).get(t as usize)?;
        let room = &self.pools[c.nodepool]
            .template
            .instance_types
            .get(t as usize)?
            .allocatable;
        let share = |need: i64, have: i64| {
            if have > 0 {
                (need as f64 / have as f64).min(1.0)
            } else {
                1.0
            }
        };
        let used = share(c.requests.cpu, room.cpu).min(share(c.requests.memory, room.memory));
        Some(Member {
            claim,
            price,
            idle: price * (1.0 - used),
        })
    }

    /// The pods of the NodeClaims of `outcome` that consolidation would delete at once: the
    /// cheapest first, each taken while the pods of those taken fit, in aggregate, in the room
    /// the others' cheapest options leave (CPU, memory, pod slots). NodeClaims holding a pod
    /// that needs a node of its own stay.
    fn emptiable_pods(&self, outcome: &Outcome) -> Vec<bool> {
        let mut claims: Vec<(&PlannedNodeClaim, f64, Resources)> = self
            .priced(outcome)
            .into_iter()
            .filter_map(|(claim, price)| {
                let template = &self.pools[claim.nodepool].template;
                let t = *claim.instance_types.first()?;
                let mut room = template.instance_types.get(t as usize)?.allocatable.clone();
                room.sub(&claim.requests);
                Some((claim, price, room))
            })
            .collect();
        claims.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut room = Resources::ZERO;
        for (_, _, free) in &claims {
            room.add(free);
        }
        let mut moved = Resources::ZERO;
        let pods = &self.input.pods;
        let mut late = vec![false; pods.len()];
        for (claim, _, free) in &claims {
            if claim
                .pods
                .iter()
                .any(|&i| forces_own_node(&pods[i as usize]))
            {
                continue;
            }
            let mut wanted = claim.requests.clone();
            wanted.sub(&self.pools[claim.nodepool].template.daemon_overhead);
            wanted.add(&moved);
            room.sub(free);
            if wanted.fits(&room) {
                moved = wanted;
                for &i in &claim.pods {
                    late[i as usize] = true;
                }
            } else {
                room.add(free);
            }
        }
        late
    }

    /// Whether `outcome` meets the blast-radius target: no planned NodeClaim priced (as in
    /// `plan_cost`) above [`BLAST_RADIUS`] times the larger of the median one and what its most
    /// demanding pod needs, the cheapest type of its pool, under its requirements, that holds
    /// that pod alone with the DaemonSet overhead. Read as `benches/gen-cost.py`'s column reads
    /// it: a 16-CPU pod that needs a $0.48/h node excuses its NodeClaim up to $1.91/h, not the
    /// $7.35/h pile of 99 pods it was planned on (session 40, benches/README.md).
    fn within_blast_radius(&self, outcome: &Outcome) -> bool {
        let Some(median) = self.median_price(outcome) else {
            return true;
        };
        self.priced(outcome).iter().all(|&(claim, price)| {
            price <= BLAST_RADIUS * median || {
                // Excused when a pod fits no type priced below a fourth of the NodeClaim's.
                let bound = price / BLAST_RADIUS;
                let pool = &self.pools[claim.nodepool];
                let template = &pool.template;
                let prices = self.prices(claim.nodepool, &claim.requirements);
                let compatible = self.compatible_types(claim.nodepool, &claim.requirements);
                claim.pods.iter().any(|&i| {
                    let mut alone = template.daemon_overhead.clone();
                    alone.add(&self.input.pods[i as usize].requests);
                    !compatible.types(&pool.by_price).any(|t| {
                        prices[t as usize] < bound
                            && alone.fits(&template.instance_types[t as usize].allocatable)
                    })
                })
            }
        })
    }

    /// `reserved` counts the NodeClaims this round planned onto (or holding) each capacity
    /// reservation; `held` is the one this claim holds.
    fn finish(
        &self,
        mut claim: Claim,
        held: Option<&Arc<str>>,
        reserved: &mut HashMap<Arc<str>, i64>,
    ) -> PlannedNodeClaim {
        let launchable = if claim.sized_by_cost {
            self.launch_options(&claim)
        } else {
            claim.options.clone()
        };
        let launchable = self.reserve(&mut claim, launchable, held, reserved);
        let order = self.launch_order(claim.nodepool, &claim.requirements);
        let pool = &self.pools[claim.nodepool];
        let mut options: Vec<u32> = launchable
            .types_in(&order, &pool.by_price)
            .take(MAX_INSTANCE_TYPES)
            .collect();
        // Thousands of planned NodeClaims outlive the solve: keep the options, not the capacity
        // of every option the claim had.
        options.shrink_to_fit();
        PlannedNodeClaim {
            nodepool: claim.nodepool,
            hostname: claim.hostname,
            requirements: claim.requirements,
            instance_types: options,
            pods: claim.pods,
            requests: claim.requests,
            min_values_relaxed: claim.min_values_relaxed,
        }
    }

    /// Plans a NodeClaim onto a capacity reservation: the cheapest reserved offering among its
    /// `options` that its requirements allow and whose reservation has room left this round (or
    /// is the one it `held` since it was opened, see `Solver::hold_reservation`). The claim is
    /// pinned to that type, zone and reservation (capacity type `reserved`, the
    /// `capacity-reservation-id`), so no more NodeClaims land on a reservation than it has
    /// instances. When every such reservation is full, a claim that may also launch as spot or
    /// on-demand leaves reserved capacity out and launches that way (a NodeClaim that may only
    /// launch reserved was not opened then: it holds a reservation). Returns the options the
    /// claim keeps.
    fn reserve(
        &self,
        claim: &mut Claim,
        options: TypeSet,
        held: Option<&Arc<str>>,
        reserved: &mut HashMap<Arc<str>, i64>,
    ) -> TypeSet {
        if !self.pools[claim.nodepool].has_reservations {
            return options;
        }
        let reserved_label = CapacityType::Reserved.label();
        // Pinning one type would break an instance-type minValues the claim was planned for.
        if Self::keeps_type_choice(&claim.requirements)
            || claim
                .requirements
                .get(labels::CAPACITY_TYPE)
                .is_some_and(|c| !c.has(reserved_label))
        {
            return options;
        }
        let candidates = self.reserved_offerings(claim.nodepool, &claim.requirements, &options);
        let best = candidates
            .iter()
            .filter(|(_, _, r)| {
                held == Some(&r.id) || reserved.get(&r.id).is_none_or(|used| *used < r.available)
            })
            .min_by(|(_, a, _), (_, b, _)| a.price.total_cmp(&b.price))
            .copied();
        // A hold the claim no longer uses (its pods outgrew the held type) goes back.
        if let Some(h) = held.filter(|h| best.is_none_or(|(_, _, r)| r.id != **h)) {
            *reserved.entry(h.clone()).or_default() -= 1;
        }
        let Some((t, o, r)) = best else {
            let others_allowed = claim
                .requirements
                .get(labels::CAPACITY_TYPE)
                .is_none_or(|c| {
                    c.has(labels::CAPACITY_TYPE_SPOT) || c.has(labels::CAPACITY_TYPE_ON_DEMAND)
                });
            if !candidates.is_empty() && others_allowed {
                claim.requirements.add_requirement(Requirement::new(
                    labels::CAPACITY_TYPE,
                    Operator::NotIn,
                    [reserved_label],
                    None,
                ));
            }
            return options;
        };
        if held != Some(&r.id) {
            *reserved.entry(r.id.clone()).or_default() += 1;
        }
        let pool = &self.pools[claim.nodepool];
        let it = &pool.template.instance_types[t as usize];
        for (key, value) in [
            (labels::CAPACITY_TYPE, reserved_label),
            (labels::ZONE, &*o.zone),
            (labels::INSTANCE_TYPE, &*it.name),
            (labels::CAPACITY_RESERVATION_ID, &*r.id),
            (labels::CAPACITY_RESERVATION_TYPE, &*r.reservation_type),
            (
                labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
                r.interruptible_label(),
            ),
        ] {
            claim
                .requirements
                .add_requirement(Requirement::new(key, Operator::In, [value], None));
        }
        options.filter(&pool.by_price, |u| u == t)
    }

    /// Whether an instance-type `minValues` above 1 keeps a NodeClaim with `requirements` from
    /// being pinned to the one type of a reservation.
    fn keeps_type_choice(requirements: &Requirements) -> bool {
        requirements
            .get(labels::INSTANCE_TYPE)
            .and_then(Requirement::min_values)
            .is_some_and(|m| m > 1)
    }

    /// The available reserved offerings of pool `p` among `options` that `requirements` allow
    /// once narrowed to capacity type `reserved`, with their type and reservation, in the
    /// options' price order: where a NodeClaim with those requirements could launch into a
    /// capacity reservation.
    fn reserved_offerings<'s>(
        &'s self,
        p: usize,
        requirements: &Requirements,
        options: &TypeSet,
    ) -> Vec<(u32, &'s Offering, &'s Arc<Reservation>)> {
        let pool = &self.pools[p];
        let types = &pool.template.instance_types;
        let mut only_reserved = requirements.clone();
        only_reserved.add_requirement(Requirement::new(
            labels::CAPACITY_TYPE,
            Operator::In,
            [CapacityType::Reserved.label()],
            None,
        ));
        let zone = only_reserved.get(labels::ZONE);
        let zone_id = only_reserved.get(labels::ZONE_ID);
        let reservation_id = only_reserved.get(labels::CAPACITY_RESERVATION_ID);
        let interruptible = only_reserved.get(labels::CAPACITY_RESERVATION_INTERRUPTIBLE);
        let mut found = Vec::new();
        for t in options.types(&pool.by_price) {
            for o in &types[t as usize].offerings {
                let Some(r) = &o.reservation else { continue };
                if o.available
                    && zone.is_none_or(|z| z.has(&o.zone))
                    && zone_id.is_none_or(|z| o.zone_id.as_deref().is_none_or(|id| z.has(id)))
                    && reservation_id.is_none_or(|ids| ids.has(&r.id))
                    && interruptible.is_none_or(|v| v.has(r.interruptible_label()))
                {
                    found.push((t, o, r));
                }
            }
        }
        found
    }

    /// The reservations a NodeClaim that may launch only into one could use (ID and instances
    /// left, cheapest first, among the options it would launch with); `None` for a NodeClaim
    /// that may also launch as spot or on-demand, or whose instance-type `minValues` keeps it
    /// from being pinned to one type.
    fn reservation_wants(&self, claim: &Claim) -> Option<Vec<(Arc<str>, i64)>> {
        if !self.pools[claim.nodepool].has_reservations {
            return None;
        }
        let reserved_only = claim
            .requirements
            .get(labels::CAPACITY_TYPE)
            .is_some_and(|c| {
                c.has(CapacityType::Reserved.label())
                    && !c.has(labels::CAPACITY_TYPE_SPOT)
                    && !c.has(labels::CAPACITY_TYPE_ON_DEMAND)
            });
        if !reserved_only || Self::keeps_type_choice(&claim.requirements) {
            return None;
        }
        let options = if claim.sized_by_cost {
            self.launch_options(claim)
        } else {
            claim.options.clone()
        };
        let mut offerings = self.reserved_offerings(claim.nodepool, &claim.requirements, &options);
        offerings.sort_by(|(_, a, _), (_, b, _)| a.price.total_cmp(&b.price));
        let mut wants: Vec<(Arc<str>, i64)> = Vec::new();
        for (_, _, r) in offerings {
            if !wants.iter().any(|(id, _)| *id == r.id) {
                wants.push((r.id.clone(), r.available));
            }
        }
        Some(wants)
    }

    /// Consults capacity reservations as a new NodeClaim is opened, as upstream does when a pod
    /// is added to one: a NodeClaim whose requirements allow only capacity type `reserved` is
    /// opened only while the reservations it could launch into have an instance left that this
    /// solve's other reserved-only NodeClaims do not hold ([`Holds`]); it then holds one (for
    /// the index it is about to get). Otherwise the NodePool rejects the pod, which goes to a
    /// lower-weight NodePool or stays pending, rather than onto a NodeClaim whose launch would
    /// fail for lack of capacity. A NodeClaim that may also launch as spot or on-demand holds
    /// nothing: it falls back when its reservations are full (`Solver::reserve`).
    fn hold_reservation(&mut self, claim: Claim) -> Result<Claim, Rejection> {
        let Some(wants) = self.reservation_wants(&claim).filter(|w| !w.is_empty()) else {
            return Ok(claim);
        };
        let ids = wants
            .iter()
            .map(|(id, _)| &**id)
            .collect::<Vec<_>>()
            .join(", ");
        if self.holds.take(self.claims.len(), wants) {
            Ok(claim)
        } else {
            Err(Failure::ReservationsFull { reservations: ids }.into())
        }
    }

    /// The holds shared out again over the NodeClaims as planned: a NodeClaim's pods may have
    /// grown it out of the types of the reservation it held when it was opened.
    fn final_holds(&self) -> Holds {
        let mut holds = Holds::default();
        for &c in self.holds.of.keys() {
            if let Some(wants) = self.reservation_wants(&self.claims[c]) {
                holds.take(c, wants);
            }
        }
        holds
    }

    fn pod_requirements(&mut self, pod_index: usize, relax: Relaxation) -> Arc<Requirements> {
        let class = self.class_of[pod_index] as usize;
        if let Some(r) = self.classes[class].requirements.get(&relax) {
            return r.clone();
        }
        let pod = &self.input.pods[pod_index];
        let mut terms: Vec<&[super::requirements::NodeSelectorExpression]> = Vec::new();
        if let Some(t) = pod.required_terms.get(usize::from(relax.dropped_required)) {
            terms.push(t);
        }
        if let Some((_, t)) = pod
            .preferred_terms
            .get(usize::from(relax.dropped_pref_node))
        {
            terms.push(t);
        }
        let reqs = Arc::new(Requirements::for_pod(&pod.node_selector, &terms));
        self.classes[class].requirements.insert(relax, reqs.clone());
        reqs
    }

    fn place(&mut self, i: usize) -> Result<Placement, PodFailure> {
        let pod = &self.input.pods[i];
        let mut relax = if self.input.options.ignore_preferences {
            Relaxation::ignoring_preferences(pod)
        } else {
            Relaxation::default()
        };
        loop {
            let reqs = self.pod_requirements(i, relax);
            if let Some(p) = self.try_existing(i, relax, &reqs) {
                return Ok(p);
            }
            if let Some(p) = self.try_claims(i, relax, &reqs) {
                return Ok(p);
            }
            match self.try_new(i, relax, &reqs) {
                Ok(p) => return Ok(p),
                Err(reason) => {
                    if !relax.relax(&self.input.pods[i]) {
                        return Err(reason);
                    }
                }
            }
        }
    }

    /// The first taint that keeps `pod` off, at this relaxation.
    fn blocking_taint<'t>(pod: &Pod, taints: &'t [Taint], relax: Relaxation) -> Option<&'t Taint> {
        if relax.tolerate_prefer_no_schedule {
            taints::first_untolerated(taints, &pod.tolerations)
        } else {
            taints::first_untolerated_strict(taints, &pod.tolerations)
        }
    }

    /// Topology check for a candidate: returns the domain narrowing needed (key, domain) or None
    /// when the candidate is not allowed.
    fn topology_for(
        &self,
        i: usize,
        relax: Relaxation,
        candidates_of: &dyn Fn(&str) -> Vec<Arc<str>>,
    ) -> Option<Vec<(Arc<str>, Arc<str>)>> {
        let topo = &self.pod_topology[i];
        let active = |c: &Constraint| relax.active(c);
        let mut keys: Vec<&str> = self.topology.keys(topo, active).collect();
        keys.sort_unstable();
        keys.dedup();
        let universe = &self.classes[self.class_of[i] as usize].universe;
        let pod = &self.input.pods[i];
        let mut narrowing = Vec::new();
        for key in keys {
            let candidates = candidates_of(key);
            // `nodeAffinityPolicy: Ignore` on every spread constraint of this key: count all
            // domains, not only those the pod's node affinity allows.
            let ignore_affinity = pod
                .spread
                .iter()
                .filter(|c| c.topology_key == key)
                .all(|c| !c.honor_node_affinity)
                && pod.spread.iter().any(|c| c.topology_key == key);
            // `nodeTaintsPolicy: Honor` on every spread constraint of this key: leave out
            // domains only NodePools or nodes with taints the pod does not tolerate provide.
            let honor_taints = pod
                .spread
                .iter()
                .filter(|c| c.topology_key == key)
                .all(|c| c.honor_node_taints)
                && pod.spread.iter().any(|c| c.topology_key == key);
            let allowed_by_pod = |d: &str| {
                (ignore_affinity || universe.iter().any(|u| u.get(key).is_none_or(|r| r.has(d))))
                    && (!honor_taints || self.topology.domain_tolerated(key, d, &pod.tolerations))
            };
            let allowed =
                self.topology
                    .allowed_domains(key, topo, &active, &candidates, &allowed_by_pod);
            if allowed.is_empty() {
                return None;
            }
            // Pin the domain (even a single candidate) so the placement is counted exactly.
            if key != labels::HOSTNAME {
                let best = self.topology.best_domain(key, topo, &active, &allowed)?;
                narrowing.push((Arc::from(key), best));
            }
        }
        Some(narrowing)
    }

    fn try_existing(
        &mut self,
        i: usize,
        relax: Relaxation,
        reqs: &Arc<Requirements>,
    ) -> Option<Placement> {
        let key = (self.class_of[i], relax);
        let mut skip = self.existing_skip.remove(&key).unwrap_or_default();
        let len = self.existing.len();
        let mut n = skip.find(0, len);
        let mut placed = None;
        while n < len {
            match self.check_existing(i, n, relax, reqs) {
                Verdict::Fits(()) => {
                    self.commit_existing(i, n);
                    placed = Some(Placement::Existing(self.existing[n].index));
                    break;
                }
                Verdict::Never => skip.kill(n),
                Verdict::NotNow | Verdict::Capped => {}
            }
            n = skip.find(n + 1, len);
        }
        self.existing_skip.insert(key, skip);
        placed
    }

    fn check_existing(
        &mut self,
        i: usize,
        n: usize,
        relax: Relaxation,
        reqs: &Requirements,
    ) -> Verdict<()> {
        match self.existing_blocker(i, n, relax, reqs) {
            None => Verdict::Fits(()),
            Some(
                NodeBlocker::Taint
                | NodeBlocker::Labels
                | NodeBlocker::Full { never: true }
                | NodeBlocker::HostPort,
            ) => Verdict::Never,
            Some(
                NodeBlocker::Full { never: false } | NodeBlocker::Volumes | NodeBlocker::Topology,
            ) => Verdict::NotNow,
        }
    }

    /// The first check existing node `n` fails for pod `i`, or `None` when it takes the pod.
    fn existing_blocker(
        &mut self,
        i: usize,
        n: usize,
        relax: Relaxation,
        reqs: &Requirements,
    ) -> Option<NodeBlocker> {
        let pod = &self.input.pods[i];
        let class = self.class_of[i];
        let e = &self.existing[n];
        if Self::blocking_taint(pod, &e.node.taints, relax).is_some() {
            return Some(NodeBlocker::Taint);
        }
        let ok = match e.requirements_ok.get(&(class, relax)) {
            Some(ok) => *ok,
            None => {
                let ok = reqs.is_compatible_labels(&e.node.labels);
                self.existing[n].requirements_ok.insert((class, relax), ok);
                ok
            }
        };
        let e = &self.existing[n];
        if !ok {
            return Some(NodeBlocker::Labels);
        }
        let mut free = e.node.allocatable.clone();
        free.sub(&e.requested);
        if !self.classes[class as usize].min_request.fits(&free) {
            return Some(NodeBlocker::Full { never: true });
        }
        if !pod.requests.fits(&free) {
            return Some(NodeBlocker::Full { never: false });
        }
        if pod
            .host_ports
            .iter()
            .any(|p| e.host_ports.iter().any(|q| p.conflicts(q)))
        {
            return Some(NodeBlocker::HostPort);
        }
        if !volumes_fit(&e.volumes, &pod.volumes, &e.node.volume_limits) {
            return Some(NodeBlocker::Volumes);
        }
        let node = e.node;
        let candidates = |key: &str| domain_of_node(node, key).into_iter().collect();
        match self.topology_for(i, relax, &candidates) {
            Some(_) => None,
            None => Some(NodeBlocker::Topology),
        }
    }

    /// Why existing node `n` cannot take pod `i` now, with the details the check left out.
    fn existing_failure(&mut self, i: usize, n: usize, relax: Relaxation) -> Option<Failure> {
        let reqs = self.pod_requirements(i, relax);
        let blocker = self.existing_blocker(i, n, relax, &reqs)?;
        let pod = &self.input.pods[i];
        let e = &self.existing[n];
        Some(match blocker {
            NodeBlocker::Taint => Self::blocking_taint(pod, &e.node.taints, relax)
                .map_or(Failure::Topology, Failure::taint),
            NodeBlocker::Labels => Failure::NodeLabels {
                requirement: reqs
                    .first_unmet_by_labels(&e.node.labels)
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            },
            NodeBlocker::Full { .. } => {
                let mut free = e.node.allocatable.clone();
                free.sub(&e.requested);
                let resource = pod.requests.first_exceeding(&free).unwrap_or("resources");
                Failure::NodeFull {
                    resource: resource.to_string(),
                    free: super::resources::format_amount(resource, free.get(resource)),
                    requested: super::resources::format_amount(
                        resource,
                        pod.requests.get(resource),
                    ),
                }
            }
            NodeBlocker::HostPort => Failure::HostPort,
            NodeBlocker::Volumes => Failure::Volumes,
            NodeBlocker::Topology => Failure::Topology,
        })
    }

    fn commit_existing(&mut self, i: usize, n: usize) {
        let pod = &self.input.pods[i];
        let e = &mut self.existing[n];
        e.requested.add(&pod.requests);
        e.host_ports.extend(pod.host_ports.iter().cloned());
        for v in &pod.volumes {
            let ids = e.volumes.entry(v.driver.clone()).or_default();
            if !ids.contains(&v.id) {
                ids.push(v.id.clone());
            }
        }
        let node = e.node;
        self.topology.record(
            &self.pod_topology[i],
            |key| domain_of_node(node, key),
            &node.taints,
        );
    }

    /// Whether a NodeClaim sized by cost whose cheapest option is type `from` should grow into
    /// type `to` for its next pod: yes when `to` costs no more, or when the room it adds costs
    /// no more per typical pod than `Solver::growth_slack` times the best price per typical pod
    /// (`Claim::best_per_pod`), i.e. no more than opening another NodeClaim of an efficient type
    /// would. Growing a pile that already fills a large type into the one type that is larger
    /// still (6 TiB of memory, or twice the vCPUs behind the same ENI pod limit) often doubles its
    /// price for a sliver of room; a new NodeClaim is cheaper. The room is measured as
    /// `Solver::yardstick` says; a growth the tighter bound would refuse is noted
    /// (`Solver::close_call`).
    fn worth_growing(&self, claim: &Claim, from: u32, to: u32) -> bool {
        if from == to || !claim.best_per_pod.is_finite() {
            return true;
        }
        let added = claim.prices[to as usize] - claim.prices[from as usize];
        if added <= 0.0 {
            return true;
        }
        let room = |t: u32| match self.yardstick {
            Yardstick::Pile => self.room_left(claim, t),
            Yardstick::EmptyNode => {
                let share = self.typical_share(claim.nodepool, t, claim.shape);
                if share > 0.0 {
                    1.0 / share
                } else {
                    f64::INFINITY
                }
            }
        };
        let gained = room(to) - room(from);
        if gained <= 0.0 {
            return false;
        }
        let per_pod = added / gained;
        let worth = per_pod <= self.growth_slack * claim.best_per_pod;
        if worth && per_pod > TIGHT_GROWTH_SLACK * claim.best_per_pod {
            self.close_call.set(true);
        }
        worth
    }

    /// How many more typical pods a node of type `t` would hold on top of the pods planned
    /// NodeClaim `claim` already holds (and its DaemonSet overhead): the fewest over CPU,
    /// memory, pod slots and ephemeral storage.
    fn room_left(&self, claim: &Claim, t: u32) -> f64 {
        let a = &self.pools[claim.nodepool].template.instance_types[t as usize].allocatable;
        let used = &claim.requests;
        let [cpu, memory, pods, storage] = self.shapes.typical[claim.shape as usize];
        let room = |need: f64, allocatable: i64, used: i64| {
            if need <= 0.0 {
                f64::INFINITY
            } else {
                allocatable.saturating_sub(used).max(0) as f64 / need
            }
        };
        room(cpu, a.cpu, used.cpu)
            .min(room(memory, a.memory, used.memory))
            .min(room(pods, a.pods, used.pods))
            .min(room(storage, a.ephemeral_storage, used.ephemeral_storage))
    }

    /// Keeps only the options of planned NodeClaim `c` that its cheapest option may grow into
    /// (`worth_growing`), unless that would break its `minValues`; its headroom shrinks to match.
    fn cap_claim(&mut self, c: usize) {
        let claim = &self.claims[c];
        let pool = &self.pools[claim.nodepool];
        let Some(from) = claim.options.types(&pool.by_price).next() else {
            return;
        };
        let capped = claim
            .options
            .filter(&pool.by_price, |t| self.worth_growing(claim, from, t));
        let kept = self
            .check_min_values(pool, &capped, &claim.requirements)
            .is_some_and(|relaxed| !relaxed || claim.min_values_relaxed);
        let max_allocatable = max_allocatable(pool, &capped);
        self.capped |= kept && capped != claim.options;
        let claim = &mut self.claims[c];
        if kept {
            claim.headroom = headroom(&max_allocatable, &claim.requests);
            claim.max_allocatable = max_allocatable;
            claim.options = capped;
        }
        // Either way the claim is not asked again: capped, every option left is worth it; not
        // capped (its `minValues` need the large types), it grows as upstream's would.
        claim.best_per_pod = f64::INFINITY;
    }

    /// The largest share of the room of an instance type of pool `p` (allocatable minus the
    /// DaemonSet overhead) that the typical pod of shape `shape` takes of CPU, memory, pod slots
    /// or ephemeral storage; infinite when the type has no room for it.
    fn typical_share(&self, p: usize, t: u32, shape: u32) -> f64 {
        let pool = &self.pools[p];
        let overhead = &pool.template.daemon_overhead;
        let a = &pool.template.instance_types[t as usize].allocatable;
        let [cpu, memory, pods, storage] = self.shapes.typical[shape as usize];
        let share = |need: f64, allocatable: i64, reserved: i64| {
            let room = allocatable.saturating_sub(reserved);
            if need <= 0.0 {
                0.0
            } else if room <= 0 {
                f64::INFINITY
            } else {
                need / room as f64
            }
        };
        share(cpu, a.cpu, overhead.cpu)
            .max(share(memory, a.memory, overhead.memory))
            .max(share(pods, a.pods, overhead.pods))
            .max(share(
                storage,
                a.ephemeral_storage,
                overhead.ephemeral_storage,
            ))
    }

    /// Places pod `i` on a planned NodeClaim: the one where it adds the least cost
    /// (`added_cost`). Candidates are visited in creation order; the first that holds the pod
    /// without a dearer option ends the search, and otherwise the cheapest of the first
    /// [`PLACEMENT_WINDOW`] that fit wins. First fit instead grows the oldest NodeClaim into
    /// ever larger types while younger ones (opened by a pod that needed a node of its own, say)
    /// run nearly empty on room already paid for.
    fn try_claims(
        &mut self,
        i: usize,
        relax: Relaxation,
        reqs: &Arc<Requirements>,
    ) -> Option<Placement> {
        let key = (self.route_of[i], relax);
        let mut skip = self.claim_skip.remove(&key).unwrap_or_default();
        if self.placing != Placing::Window
            && let Some((c, update)) = self.claim_by_load(i, relax, reqs, &mut skip)
        {
            self.claim_skip.insert(key, skip);
            self.commit_claim(i, c, relax, update);
            return Some(Placement::NodeClaim(c));
        }
        let len = self.claims.len();
        let mut c = skip.find(0, len);
        // The fitting NodeClaim where the pod adds the least cost so far, with that cost.
        let mut best: Option<(usize, ClaimUpdate, f64)> = None;
        let mut fitting = 0;
        let shape = self.shapes.of[i];
        let apart = self.apart(i);
        while c < len {
            // Its route holds no NodeClaim of the other side of `Options::apart_from`.
            if self.claims[c].apart != apart {
                skip.kill(c);
                c = skip.find(c + 1, len);
                continue;
            }
            // Sized by shape, a pod keeps to its own shape's NodeClaims (`Sizing::ByShape`), or
            // joins another shape's where it adds nothing to its cost, which ends the search like
            // any such claim (`Sizing::FillByShape`).
            if self.claims[c].shape != shape {
                if self.sizing != Sizing::FillByShape {
                    skip.kill(c);
                } else if self.added_cost_floor(i, c) == Some(0.0) {
                    match self.check_claim(i, c, relax, reqs) {
                        Verdict::Fits(update) if self.added_cost(c, &update) <= 0.0 => {
                            best = Some((c, update, 0.0));
                            break;
                        }
                        Verdict::Never => skip.kill(c),
                        _ => {}
                    }
                }
                c = skip.find(c + 1, len);
                continue;
            }
            match self.weigh_claim(i, c, relax, reqs, &mut best) {
                Weighed::Fits { free } => {
                    fitting += 1;
                    if free || fitting >= PLACEMENT_WINDOW {
                        break;
                    }
                }
                Weighed::Never => skip.kill(c),
                Weighed::NotNow => {}
                Weighed::Capped => {
                    self.cap_claim(c);
                    // Visit the capped claim again: a smaller option may still hold the pod,
                    // and otherwise its headroom now says whether the class is done with it.
                    continue;
                }
            }
            c = skip.find(c + 1, len);
        }
        self.claim_skip.insert(key, skip);
        let (c, update, _) = best?;
        self.commit_claim(i, c, relax, update);
        Some(Placement::NodeClaim(c))
    }

    /// Weighs planned NodeClaim `c` for pod `i` against `best`, the fitting NodeClaim where the
    /// pod adds the least cost so far (with that cost), and makes `c` the best if it beats it.
    /// A claim that cannot beat the best even if it takes the pod counts as fitting without the
    /// full check (topology, requirements): with every fitting claim adding cost, that check made
    /// a window of eight cost eight times a placement.
    fn weigh_claim(
        &mut self,
        i: usize,
        c: usize,
        relax: Relaxation,
        reqs: &Arc<Requirements>,
        best: &mut Option<(usize, ClaimUpdate, f64)>,
    ) -> Weighed {
        if let Some((_, _, least)) = best
            && self
                .added_cost_floor(i, c)
                .is_some_and(|floor| floor >= *least)
        {
            return Weighed::Fits { free: false };
        }
        match self.check_claim(i, c, relax, reqs) {
            Verdict::Fits(update) => {
                let added = self.added_cost(c, &update);
                if best.as_ref().is_none_or(|(_, _, least)| added < *least) {
                    *best = Some((c, update, added));
                }
                Weighed::Fits { free: added <= 0.0 }
            }
            Verdict::Never => Weighed::Never,
            Verdict::NotNow => Weighed::NotNow,
            Verdict::Capped => Weighed::Capped,
        }
    }

    /// Unless [`Placing::Window`]: the planned NodeClaim where pod `i` adds the least cost among
    /// the first [`PLACEMENT_WINDOW`] that fit, visited in load order; the first that
    /// holds it at no added cost ends the search, and with [`Order::ForcedFirst`] one found past
    /// the window wins. Gives up (`None`) after [`LOAD_SCAN`] NodeClaims ([`FREE_SCAN`] with
    /// [`Order::ForcedFirst`]), and the creation-order search, which reaches every NodeClaim the
    /// pod's skip list leaves, decides instead.
    fn claim_by_load(
        &mut self,
        i: usize,
        relax: Relaxation,
        reqs: &Arc<Requirements>,
        skip: &mut SkipList,
    ) -> Option<(usize, ClaimUpdate)> {
        let mut best: Option<(usize, ClaimUpdate, f64)> = None;
        let (mut fitting, mut visited) = (0, 0);
        let shape = self.shapes.of[i];
        let apart = self.apart(i);
        // Past the window, only a NodeClaim that holds the pod at no added cost is taken.
        let scan = match self.order {
            Order::BySize => LOAD_SCAN,
            Order::ForcedFirst => FREE_SCAN,
        };
        let mut next = self.by_load.first().copied();
        while let Some((load, index)) = next {
            let window_full = fitting >= PLACEMENT_WINDOW;
            if visited >= scan || (window_full && self.order == Order::BySize) {
                break;
            }
            visited += 1;
            next = self.by_load.range((load, index + 1)..).next().copied();
            let c = index as usize;
            if !skip.live(c) || self.claims[c].shape != shape {
                continue;
            }
            if self.claims[c].apart != apart {
                skip.kill(c);
                continue;
            }
            if window_full {
                if self.added_cost_floor(i, c) == Some(0.0)
                    && let Verdict::Fits(update) = self.check_claim(i, c, relax, reqs)
                    && self.added_cost(c, &update) <= 0.0
                {
                    best = Some((c, update, 0.0));
                    break;
                }
                continue;
            }
            match self.weigh_claim(i, c, relax, reqs, &mut best) {
                Weighed::Fits { free } => {
                    fitting += 1;
                    if free {
                        break;
                    }
                }
                Weighed::Never => skip.kill(c),
                Weighed::NotNow => {}
                Weighed::Capped => {
                    // Visit the capped claim again: its load is unchanged (capping keeps the
                    // cheapest option), so it is still next.
                    self.cap_claim(c);
                    next = Some((load, index));
                }
            }
        }
        best.map(|(c, update, _)| (c, update))
    }

    /// The key planned NodeClaim `c` is filed under in `Solver::by_load`: its pod count
    /// ([`Placing::FewestPods`]) or its cheapest option's price in millionths of a dollar
    /// ([`Placing::Cheapest`]), then the largest share of that option's allocatable (CPU, memory,
    /// pod slots, ephemeral storage) its pods and DaemonSets take, in millionths.
    fn load_of(&self, c: usize) -> u64 {
        let claim = &self.claims[c];
        let pool = &self.pools[claim.nodepool];
        let Some(t) = claim.options.types(&pool.by_price).next() else {
            return u64::MAX;
        };
        let a = &pool.template.instance_types[t as usize].allocatable;
        let used = &claim.requests;
        let share = |used: i64, allocatable: i64| {
            if allocatable > 0 {
                used as f64 / allocatable as f64
            } else if used > 0 {
                1.0
            } else {
                0.0
            }
        };
        let load = share(used.cpu, a.cpu)
            .max(share(used.memory, a.memory))
            .max(share(used.pods, a.pods))
            .max(share(used.ephemeral_storage, a.ephemeral_storage));
        // Below 2^20, so the first key's bits sit above it.
        let load = (load.clamp(0.0, 1.0) * 1e6) as u64;
        let first = match self.placing {
            Placing::Cheapest => (claim.prices[t as usize] * 1e6) as u64,
            _ => claim.pods.len() as u64,
        };
        first.min(u64::MAX >> 20) << 20 | load
    }

    /// Files planned NodeClaim `c` under its current load, unless [`Placing::Window`].
    fn refile(&mut self, c: usize) {
        if self.placing == Placing::Window {
            return;
        }
        let load = self.load_of(c);
        if let Some(&old) = self.loads.get(c) {
            self.by_load.remove(&(old, c as u32));
            self.loads[c] = load;
        } else {
            self.loads.push(load);
        }
        self.by_load.insert((load, c as u32));
    }

    /// The least pod `i` can add to planned NodeClaim `c`'s cost (`added_cost`), from its
    /// requests alone: requirements and topology can only take more options away (in the pool's
    /// price order, which `added_cost` reads as the claim's too). `None` when no option holds it.
    fn added_cost_floor(&self, i: usize, c: usize) -> Option<f64> {
        let claim = &self.claims[c];
        let requests = &self.input.pods[i].requests;
        if !requests.fits(&claim.headroom) {
            return None;
        }
        let pool = &self.pools[claim.nodepool];
        let mut total = claim.requests.clone();
        total.add(requests);
        let types = &pool.template.instance_types;
        let mut options = claim.options.types(&pool.by_price);
        let from = options.next()?;
        if total.fits(&types[from as usize].allocatable) {
            return Some(0.0);
        }
        let to = options.find(|&t| total.fits(&types[t as usize].allocatable))?;
        let (now, after) = (claim.prices[from as usize], claim.prices[to as usize]);
        Some(if after == now { 0.0 } else { after - now })
    }

    /// What placing a pod on planned NodeClaim `c` adds to the plan's cost: the price of the
    /// cheapest option left by `update` minus that of the claim's cheapest option now (zero when
    /// the node it would launch still holds the pod). Options are kept in the pool's price order,
    /// so the first option is the cheapest up to the claim's own zone and capacity-type prices,
    /// which `Claim::prices` holds.
    fn added_cost(&self, c: usize, update: &ClaimUpdate) -> f64 {
        let claim = &self.claims[c];
        let by_price = &self.pools[claim.nodepool].by_price;
        let now = claim
            .options
            .types(by_price)
            .next()
            .map_or(f64::INFINITY, |t| claim.prices[t as usize]);
        let after = claim.prices[update.cheapest as usize];
        if after == now { 0.0 } else { after - now }
    }

    /// The domains a planned NodeClaim could still land in for a key, given its requirements
    /// and instance-type options.
    fn claim_domains(
        &self,
        nodepool: usize,
        hostname: &Arc<str>,
        requirements: &Requirements,
        options: &TypeSet,
        key: &str,
    ) -> Vec<Arc<str>> {
        if key == labels::HOSTNAME {
            return vec![hostname.clone()];
        }
        let required = requirements.get(key);
        if let Some(r) = required
            && r.len() == Some(1)
        {
            return r.values().map(Arc::from).collect();
        }
        let pool = &self.pools[nodepool];
        let mut out: Vec<Arc<str>> = Vec::new();
        let mut push = |v: &str| {
            if required.is_none_or(|r| r.has(v)) && !out.iter().any(|o| o.as_ref() == v) {
                out.push(Arc::from(v));
            }
        };
        let zone_index = pool.zone_index.as_deref().filter(|_| key == labels::ZONE);
        if let Some(index) = zone_index {
            let mask = options
                .types(&pool.by_price)
                .fold(0u64, |mask, t| mask | index.masks[t as usize]);
            for (k, zone) in index.names.iter().enumerate() {
                if mask >> k & 1 == 1 {
                    push(zone);
                }
            }
        } else {
            for t in options.types(&pool.by_price) {
                let it = &pool.template.instance_types[t as usize];
                match key {
                    labels::ZONE => it
                        .offerings
                        .iter()
                        .filter(|o| o.available)
                        .for_each(|o| push(&o.zone)),
                    labels::CAPACITY_TYPE => it
                        .offerings
                        .iter()
                        .filter(|o| o.available)
                        .for_each(|o| push(o.capacity_type.label())),
                    labels::PLACEMENT_GROUP_PARTITION => it
                        .offerings
                        .iter()
                        .filter(|o| o.available)
                        .filter_map(|o| o.partition.as_deref())
                        .for_each(&mut push),
                    _ => {
                        if let Some(v) = it.labels.get(key) {
                            push(v);
                        }
                    }
                }
            }
        }
        if out.is_empty()
            && let Some(r) = required
        {
            out = r.values().map(Arc::from).collect();
        }
        out.sort();
        out
    }

    fn check_claim(
        &mut self,
        i: usize,
        c: usize,
        relax: Relaxation,
        reqs: &Arc<Requirements>,
    ) -> Verdict<ClaimUpdate> {
        let pod = &self.input.pods[i];
        let class = self.class_of[i];
        let claim = &self.claims[c];
        let pool = &self.pools[claim.nodepool];
        if Self::blocking_taint(pod, &pool.template.taints, relax).is_some() {
            return Verdict::Never;
        }
        if !self.classes[class as usize]
            .min_request
            .fits(&claim.headroom)
        {
            return Verdict::Never;
        }
        if !pod.requests.fits(&claim.headroom) {
            return Verdict::NotNow;
        }
        if pod
            .host_ports
            .iter()
            .any(|p| claim.host_ports.iter().any(|q| p.conflicts(q)))
        {
            return Verdict::Never;
        }
        let admitted = claim.admitted.contains(&(class, relax));
        if !admitted
            && !claim
                .requirements
                .is_compatible(reqs, &self.allow_well_known)
        {
            return Verdict::Never;
        }
        let mut total = claim.requests.clone();
        total.add(&pod.requests);
        // By requests alone first: the headroom is a per-resource maximum over the options, so
        // it admits pods no single option holds — often, once a NodeClaim is capped to its cheap
        // options (`cap_claim`). Such a pod would only reach `NotNow` after the requirement merge
        // and the topology check below, or `Never` for hostname anti-affinity, asked here.
        let types = &pool.template.instance_types;
        if !claim
            .options
            .types(&pool.by_price)
            .any(|t| total.fits(&types[t as usize].allocatable))
        {
            return if self.blocked_by_hostname(i, relax, claim) {
                Verdict::Never
            } else {
                Verdict::NotNow
            };
        }
        let mut requirements = None;
        if !admitted {
            let mut merged = claim.requirements.clone();
            merged.add(reqs);
            if merged != claim.requirements {
                requirements = Some(merged);
            }
        }
        let base = requirements.as_ref().unwrap_or(&claim.requirements);
        let candidates = |key: &str| {
            self.claim_domains(claim.nodepool, &claim.hostname, base, &claim.options, key)
        };
        let Some(narrowing) = self.topology_for(i, relax, &candidates) else {
            // Hostname anti-affinity against a pod already on this claim never clears.
            return if self.blocked_by_hostname(i, relax, claim) {
                Verdict::Never
            } else {
                Verdict::NotNow
            };
        };
        let mut new_reqs = requirements;
        for (key, domain) in narrowing {
            let current = new_reqs.as_ref().unwrap_or(&claim.requirements).get(&key);
            let pinned = current.is_some_and(|r| r.len() == Some(1) && r.has(&domain));
            if !pinned {
                let r = new_reqs.get_or_insert_with(|| claim.requirements.clone());
                r.add_requirement(Requirement::new(
                    &key,
                    Operator::In,
                    [domain.as_ref()],
                    None,
                ));
            }
        }
        // Only the cheapest option that still holds the pod is needed to judge the claim: a pod
        // compares up to `PLACEMENT_WINDOW` claims, and filtering every option of each (hundreds
        // of types) made that window cost as many full passes. The remaining options are
        // filtered when the pod is committed, or here when `minValues` must be counted.
        let Some(cheapest) = claim
            .options
            .types(&pool.by_price)
            .find(|&t| holds(pool, t, &total, new_reqs.as_ref()))
        else {
            return Verdict::NotNow;
        };
        if let Some(from) = claim.options.types(&pool.by_price).next()
            && !self.worth_growing(claim, from, cheapest)
        {
            return Verdict::Capped;
        }
        let reqs_now = new_reqs.as_ref().unwrap_or(&claim.requirements);
        let mut options = None;
        let mut relaxed = false;
        if reqs_now.iter().any(|r| r.min_values().is_some()) {
            let kept = claim.options.filter(&pool.by_price, |t| {
                holds(pool, t, &total, new_reqs.as_ref())
            });
            let Some(r) = self.check_min_values(pool, &kept, reqs_now) else {
                return Verdict::NotNow;
            };
            relaxed = r;
            options = Some(kept);
        }
        Verdict::Fits(ClaimUpdate {
            requirements: new_reqs,
            cheapest,
            options,
            total,
            min_values_relaxed: relaxed,
        })
    }

    /// Whether hostname anti-affinity (the pod's own, or another pod's that selects it) rules
    /// out this NodeClaim for good: it only gains pods, so that never clears.
    fn blocked_by_hostname(&self, i: usize, relax: Relaxation, claim: &Claim) -> bool {
        let only_anti = |c: &Constraint| {
            relax.active(c) && c.kind == super::topology::ConstraintKind::AntiAffinity
        };
        self.topology
            .allowed_domains(
                labels::HOSTNAME,
                &self.pod_topology[i],
                &only_anti,
                std::slice::from_ref(&claim.hostname),
                &|_| true,
            )
            .is_empty()
    }

    /// Applies `minValues` to the options: whether it had to be relaxed (BestEffort), or None
    /// when Strict and not met.
    fn check_min_values(
        &self,
        pool: &Pool,
        options: &TypeSet,
        reqs: &Requirements,
    ) -> Option<bool> {
        let mut relaxed = false;
        for r in reqs.iter() {
            let Some(min) = r.min_values() else { continue };
            let mut values: Vec<&str> = Vec::new();
            for t in options.types(&pool.by_price) {
                if values.len() as u32 >= min {
                    break;
                }
                let it = &pool.template.instance_types[t as usize];
                let v = match r.key() {
                    labels::INSTANCE_TYPE => Some(it.name.as_ref()),
                    k => it.labels.get(k).map(String::as_str),
                };
                if let Some(v) = v
                    && r.has(v)
                    && !values.contains(&v)
                {
                    values.push(v);
                }
            }
            if (values.len() as u32) < min {
                if self.input.options.min_values_best_effort {
                    relaxed = true;
                } else {
                    return None;
                }
            }
        }
        Some(relaxed)
    }

    fn commit_claim(&mut self, i: usize, c: usize, relax: Relaxation, update: ClaimUpdate) {
        let pod = &self.input.pods[i];
        let class = self.class_of[i];
        let pool_index = self.claims[c].nodepool;
        let pool = &self.pools[pool_index];
        let options = update.options.unwrap_or_else(|| {
            self.claims[c].options.filter(&pool.by_price, |t| {
                holds(pool, t, &update.total, update.requirements.as_ref())
            })
        });
        if let Some(r) = update.requirements {
            let prices = self.prices(pool_index, &r);
            let claim = &mut self.claims[c];
            claim.requirements = r;
            claim.admitted.clear();
            claim.prices = prices;
        }
        let pool = &self.pools[pool_index];
        let claim = &mut self.claims[c];
        claim.admitted.push((class, relax));
        if claim.options != options {
            claim.max_allocatable = max_allocatable(pool, &options);
            claim.options = options;
        }
        claim.requests = update.total;
        claim.pods.push(i as u32);
        claim.host_ports.extend(pod.host_ports.iter().cloned());
        claim.min_values_relaxed |= update.min_values_relaxed;
        claim.headroom = headroom(&claim.max_allocatable, &claim.requests);
        self.record_on_claim(i, c);
        self.refile(c);
    }

    /// Counts pod `i`, just placed on planned NodeClaim `c`, in its topology groups.
    fn record_on_claim(&mut self, i: usize, c: usize) {
        let claim = &self.claims[c];
        let hostname = claim.hostname.clone();
        let reqs = &claim.requirements;
        let taints = &self.pools[claim.nodepool].template.taints;
        self.topology.record(
            &self.pod_topology[i],
            |key| {
                if key == labels::HOSTNAME {
                    Some(hostname.clone())
                } else {
                    reqs.get(key)
                        .filter(|r| r.len() == Some(1))
                        .and_then(|r| r.values().next().map(Arc::from))
                }
            },
            taints,
        );
    }

    fn try_new(
        &mut self,
        i: usize,
        relax: Relaxation,
        reqs: &Arc<Requirements>,
    ) -> Result<Placement, PodFailure> {
        let pod = &self.input.pods[i];
        if self.pools.is_empty() {
            return Err(PodFailure {
                pod: pod.key(),
                requests: pod.requests.to_string(),
                attempts: Vec::new(),
            });
        }
        // Pools rejected, with the reason; `None` for a taint the pod does not tolerate, which is
        // only described if no pool takes the pod: when every pool carries its own taint, most
        // pools reject most pods that way, and a pod placed on a new node would otherwise build
        // one reason per pool.
        let mut rejected: Vec<(usize, Option<Failure>)> = Vec::new();
        for k in 0..self.pool_order.len() {
            let p = self.pool_order[k];
            if Self::blocking_taint(pod, &self.pools[p].template.taints, relax).is_some() {
                rejected.push((p, None));
                continue;
            }
            let mut attempt = self.new_claim(i, p, relax, reqs);
            if attempt.as_ref().is_err_and(|r| r.by_limits) && self.reclaim_limits(p) {
                attempt = self.new_claim(i, p, relax, reqs);
            }
            match attempt.and_then(|claim| self.hold_reservation(claim)) {
                Ok(claim) => {
                    self.claims.push(claim);
                    let c = self.claims.len() - 1;
                    self.record_on_claim(i, c);
                    self.consume_limits(p, c);
                    self.refile(c);
                    return Ok(Placement::NodeClaim(c));
                }
                Err(rejection) => rejected.push((p, Some(rejection.reason))),
            }
        }
        let attempts = rejected
            .into_iter()
            .filter_map(|(p, reason)| {
                let template = &self.pools[p].template;
                let failure = reason.or_else(|| {
                    Self::blocking_taint(pod, &template.taints, relax).map(Failure::taint)
                })?;
                Some(Attempt {
                    target: Target::NodePool(template.name.to_string()),
                    failure,
                })
            })
            .collect();
        Err(PodFailure {
            pod: pod.key(),
            requests: pod.requests.to_string(),
            attempts,
        })
    }

    /// The capacity of the largest option of `options`, per limited resource of pool `p`.
    fn largest_capacity(&self, p: usize, options: &TypeSet) -> Vec<i64> {
        let pool = &self.pools[p];
        pool.template
            .limits
            .iter()
            .map(|(name, _)| {
                options
                    .types(&pool.by_price)
                    .map(|t| pool.template.instance_types[t as usize].capacity.get(name))
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    /// Pessimistically charges a new NodeClaim to its pool's limits, as upstream does: its
    /// options were filtered to what the remaining limits allow, and it reserves the capacity of
    /// the largest of them, per limited resource.
    fn consume_limits(&mut self, p: usize, c: usize) {
        let charges = self.largest_capacity(p, &self.claims[c].options);
        let template = &mut self.pools[p].template;
        // Saturating: a limit written hugely negative must stay exhausted, not wrap to plenty.
        for ((_, remaining), charge) in template.limits.iter_mut().zip(&charges) {
            *remaining = remaining.saturating_sub(*charge);
        }
        if let Some(n) = template.nodes_limit.as_mut() {
            *n = n.saturating_sub(1);
        }
        self.claims[c].reserved = charges;
    }

    /// Gives back limits reserved by this round's NodeClaims of pool `p` that they do not need,
    /// when a pod finds no instance type within what remains; whether anything was freed.
    ///
    /// Each NodeClaim reserves its largest option, so under `limits: {cpu: 1000}` four claims
    /// for one small pod each could hold 384 + 384 + 192 + 40 vCPUs and starve the fifth,
    /// although every one of them launches a 2-vCPU type. Giving back means keeping only the
    /// options no larger (in every limited resource) than the claim's cheapest option, which
    /// holds its pods: the claim can then only take pods that fit that size, and reserves just
    /// it. A claim whose `minValues` the smaller set would break keeps its options. Each claim
    /// gives back at most once, so a round does this work once per NodeClaim.
    fn reclaim_limits(&mut self, p: usize) -> bool {
        let start = self.pools[p].reclaimed_to;
        self.pools[p].reclaimed_to = self.claims.len();
        let mut freed = false;
        for c in start..self.claims.len() {
            if self.claims[c].nodepool != p {
                continue;
            }
            let pool = &self.pools[p];
            let types = &pool.template.instance_types;
            let claim = &self.claims[c];
            let Some(cheapest) = claim.options.types(&pool.by_price).next() else {
                continue;
            };
            let cap = &types[cheapest as usize].capacity;
            let smaller = claim.options.filter(&pool.by_price, |t| {
                pool.template
                    .limits
                    .iter()
                    .all(|(name, _)| types[t as usize].capacity.get(name) <= cap.get(name))
            });
            if smaller == claim.options {
                continue;
            }
            match self.check_min_values(pool, &smaller, &claim.requirements) {
                Some(relaxed) if !relaxed || claim.min_values_relaxed => {}
                _ => continue,
            }
            let charges = self.largest_capacity(p, &smaller);
            let max_allocatable = max_allocatable(pool, &smaller);
            let template = &mut self.pools[p].template;
            let claim = &mut self.claims[c];
            for (((_, remaining), old), new) in template
                .limits
                .iter_mut()
                .zip(&claim.reserved)
                .zip(&charges)
            {
                *remaining = remaining.saturating_add(old.saturating_sub(*new));
            }
            freed |= claim.reserved != charges;
            claim.reserved = charges;
            claim.headroom = headroom(&max_allocatable, &claim.requests);
            claim.max_allocatable = max_allocatable;
            claim.options = smaller;
        }
        freed
    }

    /// A new NodeClaim from pool `p` for pod `i`, whose taints the caller found tolerated.
    fn new_claim(
        &mut self,
        i: usize,
        p: usize,
        relax: Relaxation,
        reqs: &Arc<Requirements>,
    ) -> Result<Claim, Rejection> {
        let pod = &self.input.pods[i];
        let pool = &self.pools[p];
        let template = &pool.template;
        if template.nodes_limit.is_some_and(|n| n <= 0) {
            return Err(Failure::NodeLimit.into());
        }
        if let Some(r) = reqs.iter().find(|r| {
            labels::is_restricted_label(r.key())
                && !matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist)
        }) {
            return Err(Failure::RestrictedLabel {
                key: r.key().to_string(),
                requirement: r.to_string(),
            }
            .into());
        }
        template
            .requirements
            .compatible(reqs, &self.allow_well_known)
            .map_err(|e| {
                Rejection::from(Failure::Requirements {
                    detail: e.describe("the pod", "the NodePool"),
                })
            })?;
        let mut requirements = template.requirements.clone();
        requirements.add(reqs);
        let compatible = self.compatible_types(p, &requirements);
        let pool = &self.pools[p];
        let template = &pool.template;
        if compatible.is_empty() {
            return Err(Failure::NoInstanceType.into());
        }
        let mut total = template.daemon_overhead.clone();
        total.add(&pod.requests);
        let within_limits = |it: &InstanceType| {
            template
                .limits
                .iter()
                .all(|(name, remaining)| it.capacity.get(name) <= *remaining)
        };
        let mut options = compatible.filter(&pool.by_price, |t| {
            let it = &template.instance_types[t as usize];
            total.fits(&it.allocatable) && within_limits(it)
        });
        if options.is_empty() {
            let any_fit = compatible
                .types(&pool.by_price)
                .any(|t| total.fits(&template.instance_types[t as usize].allocatable));
            if any_fit {
                return Err(Rejection {
                    reason: Failure::Limits {
                        remaining: template
                            .limits
                            .iter()
                            .map(|(n, v)| {
                                format!("{n}: {}", super::resources::format_amount(n, *v))
                            })
                            .collect::<Vec<_>>()
                            .join(", "),
                        raise: limits_to_raise(template, &pool.by_price, &compatible, &total),
                    },
                    by_limits: true,
                });
            }
            // Blame the resource no allowed type has enough of (a pod needing 5Ti of
            // ephemeral storage is too large in storage, whatever the cheapest type's memory);
            // when each alone fits some type, the first the cheapest type lacks.
            let allowed = || {
                compatible
                    .types(&pool.by_price)
                    .map(|t| &template.instance_types[t as usize].allocatable)
            };
            let exceeding = total
                .iter()
                .find(|&(name, amount)| allowed().all(|a| a.get(name) < amount))
                .map(|(name, _)| name)
                .or_else(|| allowed().find_map(|a| total.first_exceeding(a)))
                .unwrap_or("resources");
            // The allowed type with the most of that resource: what the pod must fit within.
            let largest = compatible
                .types(&pool.by_price)
                .map(|t| &template.instance_types[t as usize])
                .max_by_key(|it| it.allocatable.get(exceeding))
                .map(|it| {
                    (
                        it.name.to_string(),
                        super::resources::format_amount(exceeding, it.allocatable.get(exceeding)),
                    )
                });
            return Err(Failure::TooLarge {
                resource: exceeding.to_string(),
                needed: total.to_string(),
                largest,
            }
            .into());
        }
        let hostname = placeholder_hostname(self.claims.len());
        let probe = Claim {
            nodepool: p,
            hostname: hostname.clone(),
            requirements: requirements.clone(),
            options: options.clone(),
            requests: total.clone(),
            pods: Vec::new(),
            host_ports: template.daemon_host_ports.clone(),
            admitted: Vec::new(),
            max_allocatable: Resources::default(),
            headroom: Resources::default(),
            min_values_relaxed: false,
            reserved: Vec::new(),
            sized_by_cost: false,
            prices: Arc::default(),
            best_per_pod: f64::INFINITY,
            shape: self.shapes.of[i],
            apart: self.apart(i),
        };
        if pod
            .host_ports
            .iter()
            .any(|a| probe.host_ports.iter().any(|b| a.conflicts(b)))
        {
            return Err(Failure::HostPort.into());
        }
        let candidates = |key: &str| {
            self.claim_domains(p, &probe.hostname, &probe.requirements, &probe.options, key)
        };
        let narrowing = self
            .topology_for(i, relax, &candidates)
            .ok_or_else(|| Rejection::from(Failure::Topology))?;
        if !narrowing.is_empty() {
            for (key, domain) in narrowing {
                requirements.add_requirement(Requirement::new(
                    &key,
                    Operator::In,
                    [domain.as_ref()],
                    None,
                ));
            }
            // The options already meet the other requirements: those that also meet the
            // pinned domains are the types compatible with the whole set, memoized per pool.
            // Filtering the options against it type by type (every label and offering compared
            // again) was most of a tight solve (`plan`) of 20,000 pods, which opens thousands of
            // NodeClaims in spread domains.
            options = options.intersection(&self.compatible_types(p, &requirements));
            if options.is_empty() {
                return Err(Failure::TopologyDomain.into());
            }
        }
        let mut sized_by_cost = false;
        let mut best_per_pod = f64::INFINITY;
        if !self.input.options.every_fitting_type {
            let (efficient, best) =
                self.cost_efficient(p, &options, &requirements, self.shapes.of[i]);
            best_per_pod = best;
            // `minValues` are kept exactly: when the efficient types alone do not meet them,
            // the NodeClaim keeps every type that fits.
            if efficient != options
                && self.check_min_values(&self.pools[p], &efficient, &requirements) == Some(false)
            {
                options = efficient;
                sized_by_cost = true;
            }
        }
        if let Some(median) = self.blast_median {
            let contained = self.contain(p, &options, &requirements, median);
            if contained != options
                && self.check_min_values(&self.pools[p], &contained, &requirements) == Some(false)
            {
                options = contained;
                sized_by_cost = true;
            }
        }
        if let Some(cap) = self.input.options.max_price {
            let within = self.priced_within(p, &options, &requirements, |need| cap.max(need));
            if within != options
                && self.check_min_values(&self.pools[p], &within, &requirements) == Some(false)
            {
                options = within;
                sized_by_cost = true;
            }
        }
        let pool = &self.pools[p];
        let relaxed = self
            .check_min_values(pool, &options, &requirements)
            .ok_or_else(|| Rejection::from(Failure::MinValues))?;
        let max_allocatable = max_allocatable(pool, &options);
        let headroom = headroom(&max_allocatable, &total);
        let prices = self.prices(p, &requirements);
        let mut host_ports = probe.host_ports;
        host_ports.extend(pod.host_ports.iter().cloned());
        Ok(Claim {
            nodepool: p,
            hostname,
            requirements,
            options,
            requests: total,
            pods: vec![i as u32],
            host_ports,
            admitted: vec![(self.class_of[i], relax)],
            max_allocatable,
            headroom,
            min_values_relaxed: relaxed,
            reserved: Vec::new(),
            sized_by_cost,
            prices,
            best_per_pod,
            shape: self.shapes.of[i],
            apart: self.apart(i),
        })
    }

    /// The options a NodeClaim sized by cost launches with: every type that holds its pods, meets
    /// its requirements and stays within what it reserved of the pool's limits. Sizing by cost
    /// decides how far the pile may grow; once it is complete, any type that holds it may launch
    /// it (a superset of the efficient options, so `minValues` still hold), which keeps the
    /// cheapest such type and gives the launch upstream's flexibility.
    fn launch_options(&self, claim: &Claim) -> TypeSet {
        let pool = &self.pools[claim.nodepool];
        let template = &pool.template;
        self.compatible_types(claim.nodepool, &claim.requirements)
            .filter(&pool.by_price, |t| {
                let it = &template.instance_types[t as usize];
                claim.requests.fits(&it.allocatable)
                    && template
                        .limits
                        .iter()
                        .zip(&claim.reserved)
                        .all(|((name, _), reserved)| it.capacity.get(name) <= *reserved)
            })
    }

    /// The options (types that fit the opening pod plus the DaemonSet overhead) a new
    /// NodeClaim of pool `p` keeps: the cheapest, and those whose price per typical pod is within
    /// [`COST_SLACK`] of the best of them.
    ///
    /// Pods join a planned NodeClaim while one of its options holds them all, and the NodeClaim
    /// launches the cheapest option that does. With every fitting type as an option, a pile grows
    /// until only the types with the most CPU, memory or pod slots are left, and those are often
    /// far dearer per unit than the ones it outgrew: 3,000 small web pods end up on four
    /// NodeClaims, two of them u7in-16tb.224xlarge, for $386/h where ordinary nodes cost $83/h.
    /// A type's price per typical pod is what the average pending pod of shape `shape`
    /// (`Solver::shapes`: the whole round unless [`Sizing::ByShape`]) costs on a node of that type
    /// filled with such pods: the price times the largest share of the node's room (allocatable
    /// minus DaemonSet overhead) the pod takes of CPU, memory, pod slots or ephemeral storage,
    /// i.e. its fractional (LP) cost on that type. An average pod, not the opening one, because a
    /// NodeClaim is filled with the whole mix that may join it: sizing for the opening pod alone
    /// would let a memory-heavy pod's NodeClaim grow to a type that only pays off for memory,
    /// then filled with CPU-heavy pods. Keeping only the efficient types lets a NodeClaim grow as long as growing costs no
    /// more per pod than opening another node would, and then makes it full (its headroom is
    /// that of its largest option), so the next pod opens a new NodeClaim. The cheapest type is
    /// always kept, so a lone pod still gets the cheapest node that fits it, and a pod only giant
    /// types can hold still gets one. Hard constraints are untouched: this only removes options.
    fn cost_efficient(
        &self,
        p: usize,
        options: &TypeSet,
        reqs: &Requirements,
        shape: u32,
    ) -> (TypeSet, f64) {
        let pool = &self.pools[p];
        let prices = self.prices(p, reqs);
        let per_pod = |t: u32| {
            let largest = self.typical_share(p, t, shape);
            // A type without room for the pod is never efficient (and a zero price must not
            // make 0 × ∞ a NaN).
            if largest.is_finite() {
                prices[t as usize] * largest
            } else {
                f64::INFINITY
            }
        };
        let mut cheapest: Option<(u32, f64)> = None;
        let costs: Vec<f64> = options
            .types(&pool.by_price)
            .map(|t| {
                let price = prices[t as usize];
                if cheapest.is_none_or(|(_, c)| price < c) {
                    cheapest = Some((t, price));
                }
                per_pod(t)
            })
            .collect();
        let best = costs.iter().copied().fold(f64::INFINITY, f64::min);
        let Some((cheapest, _)) = cheapest else {
            return (options.clone(), best);
        };
        let bound = best * COST_SLACK;
        // Sized with `Sizing::FillByShape`, no option dearer than the cheapest of the near-best
        // types: growing past it buys nothing per pod and widens the blast radius.
        let largest_price = if self.sizing == Sizing::FillByShape {
            let near = best * (1.0 + NEAR_BEST);
            options
                .types(&pool.by_price)
                .zip(&costs)
                .filter(|(_, c)| **c <= near)
                .map(|(t, _)| prices[t as usize])
                .fold(f64::INFINITY, f64::min)
        } else {
            f64::INFINITY
        };
        // `filter` visits the options in the order `types` listed them.
        let mut cost = costs.iter();
        let efficient = options.filter(&pool.by_price, |t| {
            let efficient =
                cost.next().is_some_and(|c| *c <= bound) && prices[t as usize] <= largest_price;
            t == cheapest || efficient
        });
        (efficient, best)
    }

    /// The options (types that hold the opening pod) of a new NodeClaim of pool `p` priced, under
    /// `reqs`, at most [`BLAST_RADIUS`] times the larger of `median` and the cheapest of them:
    /// the most its pile may cost and still keep the blast-radius target. On a broad spot pool
    /// the types cheapest per typical pod are the largest (r8i.96xlarge for batch pods, x8i and
    /// x2iedn for memory-heavy ones), and a pile kept within the efficient types still grew to
    /// 99-352 pods on one of them; capped, it fills the largest type within the bound and the
    /// next pod opens another NodeClaim. The cheapest option is always kept: a pod that needs a
    /// dear type still gets one.
    fn contain(&self, p: usize, options: &TypeSet, reqs: &Requirements, median: f64) -> TypeSet {
        self.priced_within(p, options, reqs, |need| BLAST_RADIUS * median.max(need))
    }

    /// The options of a new NodeClaim of pool `p` priced, under `reqs`, at most `bound` of the
    /// cheapest of them (which is always kept).
    fn priced_within(
        &self,
        p: usize,
        options: &TypeSet,
        reqs: &Requirements,
        bound: impl Fn(f64) -> f64,
    ) -> TypeSet {
        let pool = &self.pools[p];
        let prices = self.prices(p, reqs);
        let need = options
            .types(&pool.by_price)
            .map(|t| prices[t as usize])
            .fold(f64::INFINITY, f64::min);
        let bound = bound(need);
        options.filter(&pool.by_price, |t| prices[t as usize] <= bound)
    }

    /// Pods `pods` (indices into the round's pods, all on pool `p`'s NodeClaims) grouped by the
    /// node the integer patterns (`patterns::contained`) of their shapes (CPU and
    /// memory requests) on the pool's types put them on, each group sorted and with that node's
    /// price; pods of a shape no type holds form a group of their own, without a price. `None`
    /// when the patterns are not found.
    fn pattern_groups(&self, p: usize, pods: &[u32]) -> Option<Vec<(Option<f64>, Vec<u32>)>> {
        let gib = super::resources::gib(1) as f64;
        let amounts =
            |r: &Resources, slots: f64| [r.cpu as f64 / 1000.0, r.memory as f64 / gib, slots];
        let pool = &self.pools[p];
        let template = &pool.template;
        let prices = self.prices(p, &template.requirements);
        let compatible = self.compatible_types(p, &template.requirements);
        let cap = self.input.options.max_price.unwrap_or(f64::INFINITY);
        let listed: Vec<u32> = compatible
            .types(&pool.by_price)
            .filter(|&t| prices[t as usize].is_finite() && prices[t as usize] <= cap)
            .collect();
        let types: Vec<NodeType> = listed
            .iter()
            .map(|&t| {
                let mut room = template.instance_types[t as usize].allocatable.clone();
                room.sub(&template.daemon_overhead);
                NodeType {
                    price: prices[t as usize],
                    allocatable: amounts(&room, room.pods as f64),
                }
            })
            .collect();
        let mut index: HashMap<(i64, i64), usize> = HashMap::new();
        let mut members: Vec<Vec<u32>> = Vec::new();
        let mut shapes: Vec<Shape> = Vec::new();
        for &i in pods {
            let requests = &self.input.pods[i as usize].requests;
            let next = shapes.len();
            let c = *index.entry((requests.cpu, requests.memory)).or_insert(next);
            if c == next {
                shapes.push(Shape {
                    request: amounts(requests, 1.0),
                    count: 0,
                });
                members.push(Vec::new());
            }
            shapes[c].count += 1;
            members[c].push(i);
        }
        let plan = patterns::contained(&types, &shapes, BLAST_RADIUS)?;
        let mut left: Vec<std::vec::IntoIter<u32>> =
            members.into_iter().map(Vec::into_iter).collect();
        let mut groups: Vec<(Option<f64>, Vec<u32>)> = plan
            .iter()
            .map(|pattern| {
                let mut group: Vec<u32> = pattern
                    .pods
                    .iter()
                    .zip(left.iter_mut())
                    .flat_map(|(&n, rest)| rest.by_ref().take(n).collect::<Vec<_>>())
                    .collect();
                group.sort_unstable();
                let price = listed.get(pattern.node).map(|&t| prices[t as usize]);
                (price, group)
            })
            .collect();
        let mut unheld: Vec<u32> = left.into_iter().flatten().collect();
        if !unheld.is_empty() {
            unheld.sort_unstable();
            groups.push((None, unheld));
        }
        Some(groups)
    }

    /// Instance types of a pool compatible with a requirement set, price-ordered, memoized
    /// across solves.
    fn compatible_types(&self, p: usize, reqs: &Requirements) -> Arc<TypeSet> {
        let pool = &self.pools[p];
        let key = reqs.to_string();
        if let Ok(cache) = pool.template.cache.compatible.lock()
            && let Some(hit) = cache.get(&key)
        {
            return hit.clone();
        }
        let list = Arc::new(TypeSet::from_order(&pool.by_price, |t| {
            type_matches(&pool.template.instance_types[t as usize], reqs)
        }));
        if let Ok(mut cache) = pool.template.cache.compatible.lock() {
            cache.insert(key, list.clone());
        }
        list
    }

    /// Each instance type's cheapest price under the zone and capacity-type constraints of
    /// `reqs` (infinite when it has no such offering), memoized across NodeClaims and solves.
    fn prices(&self, p: usize, reqs: &Requirements) -> Arc<Vec<f64>> {
        let pool = &self.pools[p];
        let key = price_key(reqs);
        if let Ok(cache) = pool.template.cache.price_order.lock()
            && let Some(hit) = cache.get(&key)
        {
            return hit.clone();
        }
        let prices: Arc<Vec<f64>> = Arc::new(
            pool.template
                .instance_types
                .iter()
                .map(|it| cheapest_offering(it, reqs).map_or(f64::INFINITY, |o| o.price))
                .collect(),
        );
        if let Ok(mut cache) = pool.template.cache.price_order.lock() {
            cache.insert(key, prices.clone());
        }
        prices
    }

    /// Every position in pool `p`'s price order (`by_price`), ordered by the types' prices
    /// under `reqs` (`prices`), ties by type index: the order in which a NodeClaim under `reqs`
    /// lists its options, cheapest first. Memoized like `prices`, so that each NodeClaim filters
    /// it instead of sorting its options again: on a broad pool whose prices differ by zone that
    /// sort of hundreds of options per NodeClaim took a fifth of a 2,600-pod round's time.
    fn launch_order(&self, p: usize, reqs: &Requirements) -> Arc<Vec<u32>> {
        let pool = &self.pools[p];
        let key = price_key(reqs);
        if let Ok(cache) = pool.template.cache.launch_order.lock()
            && let Some(hit) = cache.get(&key)
        {
            return hit.clone();
        }
        let prices = self.prices(p, reqs);
        let by_price = &pool.by_price;
        let mut order: Vec<u32> = (0..by_price.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| {
            let (a, b) = (by_price[a as usize], by_price[b as usize]);
            prices[a as usize]
                .total_cmp(&prices[b as usize])
                .then(a.cmp(&b))
        });
        let order = Arc::new(order);
        if let Ok(mut cache) = pool.template.cache.launch_order.lock() {
            cache.insert(key, order.clone());
        }
        order
    }
}

/// The key `Solver::prices` and `Solver::launch_order` are memoized under: the requirements an
/// offering's price depends on.
fn price_key(reqs: &Requirements) -> String {
    [
        labels::ZONE,
        labels::CAPACITY_TYPE,
        labels::ZONE_ID,
        labels::CAPACITY_RESERVATION_ID,
        labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
    ]
    .iter()
    .map(|k| reqs.get(k).map(ToString::to_string).unwrap_or_default())
    .collect::<Vec<_>>()
    .join("|")
}

/// Candidates (planned NodeClaims or existing nodes) a pod class can never use again, kept as a
/// "next live index" forest with path halving, so a pod skips any number of dead candidates in
/// amortized constant time instead of re-checking them.
#[derive(Default)]
struct SkipList {
    next: Vec<u32>,
}

impl SkipList {
    /// The link of index `i`: itself when live. Indices past the stored links were never
    /// killed, so a pod class that kills few candidates keeps a short list (thousands of pod
    /// classes times thousands of NodeClaims would otherwise dominate a large solve's memory).
    fn link(&self, i: usize) -> usize {
        self.next.get(i).map_or(i, |&n| n as usize)
    }

    /// The first live index at or after `i`; `len` when none.
    fn find(&mut self, mut i: usize, len: usize) -> usize {
        while i < len {
            let parent = self.link(i);
            if parent == i {
                return i;
            }
            let grandparent = self.link(parent);
            self.next[i] = grandparent as u32;
            i = parent;
        }
        len
    }

    /// Whether index `i` may still be usable.
    fn live(&self, i: usize) -> bool {
        self.link(i) == i
    }

    /// Marks index `i` as never usable again.
    fn kill(&mut self, i: usize) {
        while self.next.len() <= i {
            let k = self.next.len() as u32;
            self.next.push(k);
        }
        self.next[i] = (i + 1) as u32;
    }
}

/// The cheapest of `compatible` that holds `total`, and by how much each of the template's
/// remaining limits it exceeds would have to rise for it to launch (`cpu by 48`).
fn limits_to_raise(
    template: &NodePoolTemplate,
    by_price: &[u32],
    compatible: &TypeSet,
    total: &Resources,
) -> Option<(String, String)> {
    let it = compatible
        .types(by_price)
        .map(|t| &template.instance_types[t as usize])
        .find(|it| total.fits(&it.allocatable))?;
    let by: Vec<String> = template
        .limits
        .iter()
        .filter(|(name, remaining)| it.capacity.get(name) > *remaining)
        .map(|(name, remaining)| {
            let short = it.capacity.get(name).saturating_sub(*remaining);
            format!("{name} by {}", super::resources::format_amount(name, short))
        })
        .collect();
    Some((it.name.to_string(), by.join(", ")))
}

struct ClaimUpdate {
    /// The claim's requirements after the pod, when the pod changes them.
    requirements: Option<Requirements>,
    /// The cheapest of the claim's options that holds the pod.
    cheapest: u32,
    /// Every option that holds the pod, when `minValues` needed them counted; else they are
    /// filtered on commit.
    options: Option<TypeSet>,
    total: Resources,
    min_values_relaxed: bool,
}

/// Whether instance type `t` of `pool` holds requests `total` and, when the pod changes the
/// claim's requirements, meets the new ones (`reqs`).
fn holds(pool: &Pool, t: u32, total: &Resources, reqs: Option<&Requirements>) -> bool {
    let it = &pool.template.instance_types[t as usize];
    total.fits(&it.allocatable) && reqs.is_none_or(|r| type_matches(it, r))
}

fn domain_of_node(node: &ExistingNode, key: &str) -> Option<Arc<str>> {
    if key == labels::HOSTNAME {
        return Some(
            node.labels
                .get(labels::HOSTNAME)
                .map(|h| Arc::from(h.as_str()))
                .unwrap_or_else(|| node.name.clone()),
        );
    }
    node.labels.get(key).map(|v| Arc::from(v.as_str()))
}

/// Volumes attached per driver, deduplicated (pods may share a volume).
fn attached<'v>(
    volumes: impl Iterator<Item = &'v super::pod::VolumeRef>,
) -> BTreeMap<Arc<str>, Vec<Arc<str>>> {
    let mut out: BTreeMap<Arc<str>, Vec<Arc<str>>> = BTreeMap::new();
    for v in volumes {
        let ids = out.entry(v.driver.clone()).or_default();
        if !ids.contains(&v.id) {
            ids.push(v.id.clone());
        }
    }
    out
}

/// Whether a node can attach a pod's volumes on top of those it has, per driver limit.
fn volumes_fit(
    attached: &BTreeMap<Arc<str>, Vec<Arc<str>>>,
    wanted: &[super::pod::VolumeRef],
    limits: &BTreeMap<String, i64>,
) -> bool {
    limits.iter().all(|(driver, limit)| {
        let current = attached.get(driver.as_str());
        let mut count = current.map_or(0, Vec::len) as i64;
        for v in wanted.iter().filter(|v| v.driver.as_ref() == driver) {
            if current.is_none_or(|ids| !ids.contains(&v.id)) {
                count += 1;
            }
        }
        count <= *limit
    })
}

fn min_resources(a: &Resources, b: &Resources) -> Resources {
    let mut out = Resources {
        cpu: a.cpu.min(b.cpu),
        memory: a.memory.min(b.memory),
        pods: a.pods.min(b.pods),
        ephemeral_storage: a.ephemeral_storage.min(b.ephemeral_storage),
        extended: Vec::new(),
    };
    for (name, amount) in &a.extended {
        let m = (*amount).min(b.get(name));
        out.set(name, m);
    }
    out
}

/// Toleration helper for callers that build DaemonSet overhead: whether a DaemonSet pod would run
/// on nodes with these taints.
pub fn daemon_tolerates(tolerations: &[Toleration], taints: &[Taint]) -> bool {
    taints
        .iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .all(|t| tolerations.iter().any(|tol| tol.tolerates(t)))
}
