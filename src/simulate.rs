//! `karpenter-rs simulate`: the provisioning decision the controller would make for a cluster
//! described by manifests, computed offline with the same scheduler `run` uses.
//!
//! This module turns a [`Snapshot`] into the scheduler's input (NodePool templates with their
//! instance types and DaemonSet overhead, existing nodes with their bound pods, pending pods),
//! runs it, and reports every new NodeClaim, every pod's placement and the cost.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use std::fmt::Write as _;
use std::sync::Arc;

use serde::Serialize;

use crate::apis::duration;
use crate::apis::ec2nodeclass::AMIFamily;
use crate::apis::labels;
use crate::catalog::Catalog;
use crate::cloudprovider::first_launch_choice;
use crate::disruption::state::State;
use crate::disruption::{self, Blocked, Command};
use crate::scheduling::instance_type::{
    CapacityType, InstanceType, NodeClassSettings, node_labels,
};
use crate::scheduling::pod::Pod;
use crate::scheduling::requirements::Requirements;
use crate::scheduling::resources::Resources;
use crate::scheduling::scheduler::{self, Placement};
use crate::scheduling::static_capacity;
use crate::snapshot::scheduling_input::{
    NodePoolReport, OverlayReport, Prepared, Unschedulable, prepare, template_requirements,
};
use crate::snapshot::static_pools;
use crate::snapshot::{EngineOptions, Snapshot};

/// What `simulate` decided, in the shape `--output json` prints.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The region whose catalog priced the simulation.
    pub region: String,
    /// NodeClaims the controller would create.
    pub nodeclaims: Vec<NodeClaimReport>,
    /// Pod (`namespace/name`) → node or NodeClaim name, for every placed pod.
    pub placements: BTreeMap<String, String>,
    /// Pods that cannot be placed, with the reason.
    pub unschedulable: Vec<Unschedulable>,
    /// NodePools that cannot provision at all, with the reason.
    pub nodepools: Vec<NodePoolReport>,
    /// NodeOverlays not applied (with the `NodeOverlay` gate on), with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overlays: Vec<OverlayReport>,
    /// Hourly cost.
    pub cost: Cost,
    /// Disruption commands (with `--disruption` or `--settle`), in the order they were taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disruptions: Option<Vec<Command>>,
    /// Nodes left alone by the last disruption evaluation, with the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<Vec<Blocked>>,
    /// Rounds run by `--settle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
    /// Each disruption evaluation (with `--disruption` or `--settle`): when it ran, how many of
    /// `disruptions` it took, and the cost once they were carried out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round_log: Option<Vec<Round>>,
}

/// One disruption evaluation of `--disruption` or `--settle`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Round {
    /// The simulated time of the evaluation.
    pub at: DateTime<Utc>,
    /// How many commands it took: the next this many of [`Report::disruptions`].
    pub commands: usize,
    /// Hourly cost after those commands and the re-provisioning of their leftover pods.
    pub cost_after: f64,
}

/// One planned NodeClaim.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimReport {
    /// The name the NodeClaim would get (`<nodepool>-<suffix>`).
    pub name: String,
    /// Its NodePool.
    pub node_pool: String,
    /// The instance type a launch would most likely get: the cheapest option.
    pub instance_type: String,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: String,
    /// The zone of the cheapest offering.
    pub zone: String,
    /// USD per hour of that offering.
    pub price: f64,
    /// Every instance type the launch may use, cheapest first (what CreateFleet gets). Up to
    /// 600 names per NodeClaim: NodeClaims with the same options share one list.
    pub instance_type_options: OptionList,
    /// Pods it will hold (`namespace/name`).
    pub pods: Vec<String>,
    /// Requests of those pods plus DaemonSet overhead.
    pub requests: BTreeMap<String, String>,
    /// Whether `minValues` were relaxed (BestEffort policy).
    pub min_values_relaxed: bool,
}

/// Instance-type names, cheapest first, shared by the NodeClaims that have the same options.
pub type OptionList = Arc<[Arc<str>]>;

/// Hourly cost in USD.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// Existing nodes plus new NodeClaims.
    pub per_hour: f64,
    /// Existing nodes whose instance type the catalog knows.
    pub existing_per_hour: f64,
    /// New NodeClaims.
    pub new_per_hour: f64,
    /// With disruption: the cluster after provisioning, before disruption.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<f64>,
    /// With disruption: after the disruption commands are carried out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<f64>,
}

/// Characters of a generated name suffix, as the API server's generateName uses.
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A deterministic suffix of `len` characters hashed from `seed`, like the API server's
/// generateName.
fn suffix(seed: &str, len: usize) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let base = SUFFIX_ALPHABET.len() as u64;
    (0..len)
        .map(|_| {
            let c = SUFFIX_ALPHABET[(h % base) as usize] as char;
            h /= base;
            c
        })
        .collect()
}

/// The NodeClaim names one simulation hands out: `<nodepool>-<suffix>`, deterministic from a
/// seed, and never a name already taken. Five hashed characters give 27^5 names per NodePool, so a
/// plan of a few thousand NodeClaims collides more likely than not (a collision merges two
/// NodeClaims in the placement map, and in a cluster is an AlreadyExists); uniqueness is
/// therefore checked, not hoped for: a taken name is re-hashed with an attempt number, and after
/// a few attempts the suffix doubles in length so a search always ends quickly.
struct Names {
    /// Existing NodeClaims and nodes, and every name handed out so far.
    taken: std::collections::HashSet<String>,
}

impl Names {
    /// Attempts at five characters before the suffix grows to ten.
    const SHORT_ATTEMPTS: u32 = 8;

    fn new<'n>(taken: impl IntoIterator<Item = &'n str>) -> Self {
        Self {
            taken: taken.into_iter().map(str::to_string).collect(),
        }
    }

    /// A name for a NodeClaim of `pool`, derived from `seed`, not taken before.
    fn next(&mut self, pool: &str, seed: &str) -> String {
        let mut attempt: u32 = 0;
        loop {
            let (seed, len) = match attempt {
                0 => (seed.to_string(), 5),
                a if a < Self::SHORT_ATTEMPTS => (format!("{seed}#{a}"), 5),
                a => (format!("{seed}#{a}"), 10),
            };
            let name = format!("{pool}-{}", suffix(&seed, len));
            if self.taken.insert(name.clone()) {
                return name;
            }
            attempt = attempt.saturating_add(1);
        }
    }
}

/// Runs provisioning on a cluster.
pub fn simulate(cluster: &Snapshot, catalog: &Catalog, options: &EngineOptions) -> Report {
    let mut prepared = prepare(cluster, catalog, options);
    let mut names = Names::new(
        cluster
            .nodeclaims
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .chain(
                cluster
                    .nodes
                    .iter()
                    .filter_map(|n| n.metadata.name.as_deref()),
            )
            .chain(prepared.input.existing.iter().map(|n| n.name.as_ref())),
    );
    let mut statics = if options.static_capacity {
        add_static_nodeclaims(cluster, &mut prepared, &mut names)
    } else {
        Vec::new()
    };
    let outcome = scheduler::solve(&prepared.input);
    let input = &prepared.input;
    let mut placements = BTreeMap::new();
    let mut nodeclaims = Vec::new();
    let mut cost = Cost::default();
    let mut option_lists: HashMap<(usize, &[u32]), OptionList> = HashMap::new();
    for (i, planned) in outcome.nodeclaims.iter().enumerate() {
        let pool = &input.nodepools[planned.nodepool];
        let name = names.next(&pool.name, &format!("{}/{i}", pool.name));
        let options: Vec<&InstanceType> = planned
            .instance_types
            .iter()
            .map(|&t| &pool.instance_types[t as usize])
            .collect();
        // The solver kept only options that satisfy the claim's final requirements.
        let chosen = first_launch_choice(options.iter().copied(), &planned.requirements);
        let pods: Vec<String> = planned
            .pods
            .iter()
            .map(|&p| input.pods[p as usize].key())
            .collect();
        for p in &pods {
            placements.insert(p.clone(), name.clone());
        }
        let (instance_type, capacity_type, zone, price) = match chosen {
            Some((it, o)) => (
                it.name.to_string(),
                o.capacity_type.label().to_string(),
                o.zone.to_string(),
                o.price,
            ),
            None => (String::new(), String::new(), String::new(), 0.0),
        };
        cost.new_per_hour += price;
        nodeclaims.push(NodeClaimReport {
            name,
            node_pool: pool.name.to_string(),
            instance_type,
            capacity_type,
            zone,
            price,
            instance_type_options: option_lists
                .entry((planned.nodepool, &planned.instance_types))
                .or_insert_with(|| options.iter().map(|it| it.name.clone()).collect())
                .clone(),
            pods,
            requests: planned
                .requests
                .to_list()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
            min_values_relaxed: planned.min_values_relaxed,
        });
    }
    for (i, placement) in outcome.placements.iter().enumerate() {
        if let Some(Placement::Existing(n)) = placement {
            let node = &input.existing[*n].name;
            if let Some((claim, requests)) = statics.iter_mut().find(|(c, _)| *c.name == **node) {
                claim.pods.push(input.pods[i].key());
                requests.add(&input.pods[i].requests);
            }
            placements.insert(input.pods[i].key(), node.to_string());
        }
    }
    let static_names: std::collections::HashSet<String> =
        statics.iter().map(|(c, _)| c.name.clone()).collect();
    let statics: Vec<NodeClaimReport> = statics
        .into_iter()
        .map(|(mut claim, requests)| {
            claim.requests = requests
                .to_list()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            cost.new_per_hour += claim.price;
            claim
        })
        .collect();
    nodeclaims.splice(0..0, statics);
    let by_name: HashMap<&str, &InstanceType> = input
        .nodepools
        .iter()
        .flat_map(|p| p.instance_types.iter())
        .map(|it| (it.name.as_ref(), it))
        .collect();
    let fallback = catalog.instance_types(&NodeClassSettings::for_family(AMIFamily::AL2023));
    for node in input
        .existing
        .iter()
        .filter(|n| !static_names.contains(n.name.as_ref()))
    {
        let Some(t) = node.labels.get(labels::INSTANCE_TYPE) else {
            continue;
        };
        let it = by_name
            .get(t.as_str())
            .copied()
            .or_else(|| fallback.iter().find(|it| it.name.as_ref() == t));
        let ct = node
            .labels
            .get(labels::CAPACITY_TYPE)
            .and_then(|c| CapacityType::from_label(c))
            .unwrap_or(CapacityType::OnDemand);
        let zone = node.labels.get(labels::ZONE);
        if let Some(o) = it.and_then(|it| {
            it.cheapest_offering(|o| {
                o.capacity_type == ct && zone.is_none_or(|z| o.zone.as_ref() == z)
            })
        }) {
            cost.existing_per_hour += o.price;
        }
    }
    cost.per_hour = cost.existing_per_hour + cost.new_per_hour;
    let mut unschedulable = prepared.invalid_pods;
    unschedulable.extend(outcome.errors.into_iter().map(|(i, reason)| Unschedulable {
        pod: input.pods[i].key(),
        reason: reason.to_string(),
    }));
    unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
    Report {
        region: catalog.region.clone(),
        nodeclaims,
        placements,
        unschedulable,
        nodepools: prepared.skipped_pools,
        overlays: prepared.overlays_not_applied,
        cost,
        disruptions: None,
        blocked: None,
        rounds: None,
        round_log: None,
    }
}

/// The NodeClaims the static NodePools would create now (the `StaticCapacity` gate on), as
/// [`static_pools::decide`] counts them: each joins the scheduler's input as an in-flight node
/// of the cheapest launchable option (so pending pods may land on it, as kube-scheduler would
/// bind them) and is reported with the requests of its DaemonSet overhead, to which the pods
/// placed on it are added. Pools that cannot reach their replicas are reported with the reason.
fn add_static_nodeclaims(
    cluster: &Snapshot,
    prepared: &mut Prepared,
    names: &mut Names,
) -> Vec<(NodeClaimReport, Resources)> {
    let mut out = Vec::new();
    for template in &prepared.static_templates {
        let Some(pool) = cluster
            .nodepools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&*template.name))
        else {
            continue;
        };
        let mut problem = |reason: String| {
            prepared.skipped_pools.push(NodePoolReport {
                name: template.name.to_string(),
                reason,
            })
        };
        let decision = match static_pools::decide(cluster, pool) {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                problem(e);
                continue;
            }
            None => continue,
        };
        if decision.held_by_limit > 0 {
            problem(format!(
                "static NodePool: spec.limits.nodes keeps {} of its spec.replicas NodeClaims from being created",
                decision.held_by_limit
            ));
        }
        if decision.create == 0 {
            continue;
        }
        let options = static_capacity::options(&template.instance_types, &template.requirements);
        let Some((it, offering)) =
            first_launch_choice(options.iter().copied(), &template.requirements)
        else {
            problem("static NodePool: no instance type of its EC2NodeClass fits spec.template.spec.requirements; widen them".into());
            continue;
        };
        let option_list: OptionList = options.iter().map(|it| it.name.clone()).collect();
        let node_labels = node_labels(it, offering, &template.requirements);
        for i in 0..decision.create {
            let name = names.next(&template.name, &format!("{}/static/{i}", template.name));
            let mut own_labels = node_labels.clone();
            own_labels.insert(labels::HOSTNAME.into(), name.clone());
            prepared.input.existing.push(scheduler::ExistingNode {
                name: Arc::from(name.as_str()),
                labels: own_labels,
                taints: template.taints.clone(),
                allocatable: it.allocatable.clone(),
                requested: template.daemon_overhead.clone(),
                pods: Vec::new(),
                initialized: false,
                volume_limits: BTreeMap::new(),
            });
            out.push((
                NodeClaimReport {
                    name,
                    node_pool: template.name.to_string(),
                    instance_type: it.name.to_string(),
                    capacity_type: offering.capacity_type.label().to_string(),
                    zone: offering.zone.to_string(),
                    price: offering.price,
                    instance_type_options: option_list.clone(),
                    pods: Vec::new(),
                    requests: BTreeMap::new(),
                    min_values_relaxed: false,
                },
                template.daemon_overhead.clone(),
            ));
        }
    }
    out
}

/// The resolved instance type `name` of NodePool `pool`, as the state's templates (static
/// pools' included) know it.
fn instance_type_of(state: &State, pool: &str, name: &str) -> Option<InstanceType> {
    state
        .templates
        .iter()
        .chain(&state.static_templates)
        .find(|t| t.name.as_ref() == pool)?
        .instance_types
        .iter()
        .find(|t| t.name.as_ref() == name)
        .cloned()
}

/// Materializes a provisioning outcome into the disruption state: planned NodeClaims become
/// launched nodes holding their pods; pods placed on existing nodes are bound there.
fn apply_provisioning(state: &mut State, report: &Report, now: DateTime<Utc>) {
    let keys: HashMap<String, usize> = state
        .pods
        .iter()
        .enumerate()
        .map(|(i, p)| (p.pod.key(), i))
        .collect();
    for claim in &report.nodeclaims {
        let Some(it) = instance_type_of(state, &claim.node_pool, &claim.instance_type) else {
            continue;
        };
        let Some(offering) = it
            .offerings
            .iter()
            .find(|o| {
                o.zone.as_ref() == claim.zone && o.capacity_type.label() == claim.capacity_type
            })
            .cloned()
        else {
            continue;
        };
        let mut reqs = Requirements::new();
        if let Some(pool) = state.nodepool(&claim.node_pool) {
            reqs = template_requirements(pool);
        }
        let pods: Vec<usize> = claim
            .pods
            .iter()
            .filter_map(|p| keys.get(p).copied())
            .collect();
        let name = claim.name.clone();
        let pool = claim.node_pool.clone();
        state.launch(&name, &pool, &reqs, &it, &offering, &pods, now);
    }
    for (pod, node) in &report.placements {
        if let (Some(&p), Some(n)) = (
            keys.get(pod),
            state.nodes.iter().position(|n| n.name.as_ref() == node),
        ) && state.pods[p].node.is_none()
        {
            state.pods[p].node = Some(n);
        }
    }
}

/// The provisioning report and the disruption state of the cluster once its planned NodeClaims
/// have launched and its pods are placed.
pub fn provisioned(
    cluster: &Snapshot,
    catalog: &Catalog,
    options: &EngineOptions,
    now: DateTime<Utc>,
) -> (Report, State) {
    let report = simulate(cluster, catalog, options);
    let prepared = prepare(cluster, catalog, options);
    let mut state = crate::snapshot::disruption_input::disruption_state(
        cluster,
        prepared.input.nodepools,
        options.scheduler,
        crate::snapshot::disruption_input::Unbound::Listed,
        now,
    );
    state.static_templates = prepared.static_templates;
    apply_provisioning(&mut state, &report, now);
    (report, state)
}

/// Provisioning followed by disruption: one evaluation, or (`settle`) rounds of provisioning and
/// disruption until nothing changes, the clock advancing by `step` each round, as the
/// controller would behave.
pub fn simulate_with_disruption(
    cluster: &Snapshot,
    catalog: &Catalog,
    options: &EngineOptions,
    now: DateTime<Utc>,
    settle: Option<std::time::Duration>,
) -> Report {
    let (mut report, mut state) = provisioned(cluster, catalog, options, now);
    let before = state.cost();
    let mut clock = now;
    let mut commands = Vec::new();
    let mut rounds = 0;
    let mut round_log = Vec::new();
    let mut blocked;
    loop {
        rounds += 1;
        let decision = disruption::evaluate(&state, clock, options.disruption);
        blocked = decision.blocked;
        if decision.commands.is_empty() {
            round_log.push(Round {
                at: clock,
                commands: 0,
                cost_after: state.cost(),
            });
            break;
        }
        let taken = decision.commands.len();
        for cmd in &decision.commands {
            apply_command(&mut state, cmd, clock);
        }
        commands.extend(decision.commands);
        // Pods of removed nodes that no replacement took go back through provisioning.
        let pending = state.pending();
        if !pending.is_empty() {
            let pods: Vec<Pod> = pending.iter().map(|&p| state.pods[p].pod.clone()).collect();
            let input = state.scheduler_input(&[], pods);
            let outcome = scheduler::solve(&input);
            for (k, placement) in outcome.placements.iter().enumerate() {
                if let Some(Placement::Existing(n)) = placement {
                    let name = input.existing[*n].name.clone();
                    if let Some(i) = state.nodes.iter().position(|x| x.name == name) {
                        state.pods[pending[k]].node = Some(i);
                    }
                }
            }
        }
        round_log.push(Round {
            at: clock,
            commands: taken,
            cost_after: state.cost(),
        });
        match settle.map(|step| duration::saturating_add(clock, step)) {
            // A clock that reached the far future cannot advance: settling stops there.
            Some(next) if rounds < 100 && next < duration::NEVER => clock = next,
            _ => break,
        }
    }
    report.cost.before = Some(before);
    report.cost.after = Some(state.cost());
    report.disruptions = Some(commands);
    report.blocked = Some(blocked);
    report.rounds = settle.map(|_| rounds);
    report.round_log = Some(round_log);
    report
}

/// Carries out a command on the state: launch replacements with the candidates' pods, then
/// remove the candidates.
fn apply_command(state: &mut State, cmd: &Command, now: DateTime<Utc>) {
    let mut names = Names::new(state.nodes.iter().map(|n| n.name.as_ref()));
    let candidates: Vec<usize> = cmd
        .candidates
        .iter()
        .filter_map(|name| state.nodes.iter().position(|n| n.name.as_ref() == name))
        .collect();
    for (i, r) in cmd.replacements.iter().enumerate() {
        let Some(it) = instance_type_of(state, &r.node_pool, &r.instance_type) else {
            continue;
        };
        let Some(offering) = it
            .offerings
            .iter()
            .filter(|o| o.capacity_type.label() == r.capacity_type && o.available)
            .min_by(|a, b| a.price.total_cmp(&b.price))
            .cloned()
        else {
            continue;
        };
        let reqs = state
            .nodepool(&r.node_pool)
            .map(template_requirements)
            .unwrap_or_default();
        let pods: Vec<usize> = state
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| r.pods.contains(&p.pod.key()))
            .map(|(k, _)| k)
            .collect();
        let name = names.next(
            &r.node_pool,
            &format!("{}/{}/{i}", cmd.candidates.join(","), now.timestamp()),
        );
        let pool = r.node_pool.clone();
        state.launch(&name, &pool, &reqs, &it, &offering, &pods, now);
    }
    let mut sorted = candidates;
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    for n in sorted {
        state.remove(n);
    }
}

impl Report {
    /// A human-readable rendering: one line per NodeClaim, then placements, problems and cost.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Region: {}", self.region);
        let _ = writeln!(out);
        if self.nodeclaims.is_empty() {
            let _ = writeln!(out, "No new NodeClaims.");
        } else {
            let _ = writeln!(
                out,
                "{:<28} {:<18} {:<16} {:<10} {:<12} {:>9} {:>5}  OPTIONS",
                "NODECLAIM", "NODEPOOL", "INSTANCE TYPE", "CAPACITY", "ZONE", "$/HOUR", "PODS"
            );
            for c in &self.nodeclaims {
                let shown: Vec<&str> = c
                    .instance_type_options
                    .iter()
                    .take(4)
                    .map(AsRef::as_ref)
                    .collect();
                let more = c.instance_type_options.len().saturating_sub(shown.len());
                let _ = writeln!(
                    out,
                    "{:<28} {:<18} {:<16} {:<10} {:<12} {:>9.4} {:>5}  {}{}",
                    c.name,
                    c.node_pool,
                    c.instance_type,
                    c.capacity_type,
                    c.zone,
                    c.price,
                    c.pods.len(),
                    shown.join(", "),
                    if more > 0 {
                        format!(" (+{more} more)")
                    } else {
                        String::new()
                    }
                );
            }
        }
        let existing =
            self.placements.len() - self.nodeclaims.iter().map(|c| c.pods.len()).sum::<usize>();
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Pods: {} placed on new NodeClaims, {} on existing nodes, {} unschedulable.",
            self.placements.len() - existing,
            existing,
            self.unschedulable.len()
        );
        for p in &self.nodepools {
            let _ = writeln!(out, "NodePool {} not used: {}", p.name, p.reason);
        }
        for o in &self.overlays {
            let _ = writeln!(out, "NodeOverlay {} not applied: {}", o.name, o.reason);
        }
        for u in &self.unschedulable {
            let _ = writeln!(out, "  unschedulable {}: {}", u.pod, u.reason);
        }
        let _ = writeln!(
            out,
            "Cost: ${:.4}/hour (new ${:.4}, existing ${:.4}); spot prices are estimates.",
            self.cost.per_hour, self.cost.new_per_hour, self.cost.existing_per_hour
        );
        self.write_disruption(&mut out);
        out
    }

    /// The disruption part of the table (with `--disruption` or `--settle`): one line per
    /// command grouped by round with the cost after each round, then the nodes left alone with
    /// their reason, then the cost before and after.
    fn write_disruption(&self, out: &mut String) {
        let (Some(commands), Some(log)) = (&self.disruptions, &self.round_log) else {
            return;
        };
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Disruption: {} command(s) in {} round(s).",
            commands.len(),
            log.len()
        );
        if !commands.is_empty() {
            let _ = writeln!(
                out,
                "{:<5} {:<20} {:<23} {:<22} {:<32} {:<40} {:>9}",
                "ROUND", "AT", "METHOD", "REASON", "CANDIDATES", "REPLACEMENTS", "SAVES $/H"
            );
        }
        let mut next = commands.iter();
        for (r, round) in log.iter().enumerate() {
            if round.commands == 0 {
                continue;
            }
            for cmd in next.by_ref().take(round.commands) {
                let _ = writeln!(
                    out,
                    "{:<5} {:<20} {:<23} {:<22} {:<32} {:<40} {:>9.4}",
                    r + 1,
                    round.at.format("%Y-%m-%dT%H:%M:%SZ"),
                    format!("{:?}", cmd.method),
                    cmd.reason,
                    abbreviated(cmd.candidates.iter().map(String::as_str)),
                    replacements(cmd),
                    cmd.savings
                );
            }
            let _ = writeln!(
                out,
                "{:<5} cost after round {}: ${:.4}/hour",
                "",
                r + 1,
                round.cost_after
            );
        }
        if let Some(blocked) = &self.blocked
            && !blocked.is_empty()
        {
            let _ = writeln!(out, "Left alone ({} node(s)):", blocked.len());
            for b in blocked.iter().take(BLOCKED_SHOWN) {
                let _ = writeln!(out, "  {}: {}", b.node, b.reason);
            }
            if blocked.len() > BLOCKED_SHOWN {
                let _ = writeln!(
                    out,
                    "  ... and {} more (-o json lists every node).",
                    blocked.len() - BLOCKED_SHOWN
                );
            }
        }
        if let (Some(before), Some(after)) = (self.cost.before, self.cost.after) {
            let _ = writeln!(
                out,
                "Cost after disruption: ${after:.4}/hour (before ${before:.4}, saves ${:.4}).",
                before - after
            );
        }
    }
}

/// How many nodes left alone the table lists by name; `-o json` has them all.
const BLOCKED_SHOWN: usize = 50;

/// Up to three names, then how many more.
fn abbreviated<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    let total = names.len();
    if total == 0 {
        return "-".to_string();
    }
    let shown: Vec<&str> = names.take(3).collect();
    let mut s = shown.join(",");
    if total > shown.len() {
        let _ = write!(s, " (+{} more)", total - shown.len());
    }
    s
}

/// A command's replacements as `pool/type capacity`, or `-` for a deletion.
fn replacements(cmd: &Command) -> String {
    let described: Vec<String> = cmd
        .replacements
        .iter()
        .map(|r| format!("{}/{} {}", r.node_pool, r.instance_type, r.capacity_type))
        .collect();
    abbreviated(described.iter().map(String::as_str))
}

/// The engine's reasoning for one node after provisioning, for `simulate --explain`.
pub fn explain(
    cluster: &Snapshot,
    catalog: &Catalog,
    options: &EngineOptions,
    now: DateTime<Utc>,
    node: &str,
) -> Option<disruption::Explanation> {
    let (_, state) = provisioned(cluster, catalog, options, now);
    disruption::explain(&state, now, options.disruption, node)
}
