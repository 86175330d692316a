//! Pods no placement constraint reads, and rounds planned again with those pods apart.
//!
//! A round whose pods spread over zones or hostnames, or keep away from each other, cannot be
//! regrouped as a whole (`regroupable`): moving one pod changes what another may do. But most
//! such rounds also hold pods that nothing constrains: no spread or pod (anti-)affinity of their
//! own, and no other pod's spread or affinity term selects them. Where those pods go changes
//! nothing for the rest, so [`apart`] plans the constrained pods on their own, lets the free
//! pods fill the room their NodeClaims leave, and plans the rest of the free pods as a round of
//! their own, which is regroupable (integer patterns, cheapest types per pod shape): 2,600
//! web-sized pods, half of them spread or anti-affine, on a c/m/r spot pool plan $19.57/h
//! instead of $21.83/h (benches/README.md, session 50).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::apis::labels;
use crate::scheduling::instance_type::node_labels;
use crate::scheduling::pod::{
    AffinityTerm, Pod, PodShape, Selector, SpreadConstraint, WhenUnsatisfiable,
};
use crate::scheduling::requirements::Requirements;

use super::{
    BLAST_RADIUS, ExistingNode, Input, Options, Outcome, Placement, PlannedNodeClaim, Solver,
    choose, launch_offering, lower, repartition, replaced, type_matches,
};

/// Whether `pod` has no placement constraint of its own on other pods: no topology spread and
/// no pod affinity or anti-affinity, required or preferred.
pub(super) fn unconstrained(pod: &Pod) -> bool {
    pod.spread.is_empty()
        && pod.affinity.is_empty()
        && pod.anti_affinity.is_empty()
        && pod.preferred_affinity.is_empty()
        && pod.preferred_anti_affinity.is_empty()
}

/// Terms of pods that select other pods, each with its owner's namespace: topology spread
/// selectors (read in any namespace, which only errs towards selecting more) and pod affinity
/// and anti-affinity terms.
#[derive(Default)]
pub(super) struct Selectors {
    spreads: Vec<Selector>,
    terms: Vec<(Arc<str>, AffinityTerm)>,
    /// Pod shapes read, per namespace: each is read once.
    read: HashSet<(*const PodShape, Arc<str>)>,
}

impl Selectors {
    /// The anti-affinity terms (required or preferred) of pods bound to existing nodes: the
    /// only terms of theirs that constrain where the round's pods go.
    pub(super) fn of_bound<'p>(pods: impl Iterator<Item = &'p Pod>) -> Self {
        let mut out = Selectors::default();
        for pod in pods {
            if out.first_read(pod) {
                let preferred = pod.preferred_anti_affinity.iter().map(|(_, t)| t);
                out.add_terms(pod, pod.anti_affinity.iter().chain(preferred));
            }
        }
        out
    }

    /// Every term of the round's pods `pods`, and the anti-affinity of the pods bound to
    /// `existing` nodes.
    fn of_round(pods: &[Pod], existing: &[ExistingNode]) -> Self {
        let mut out = Self::of_bound(existing.iter().flat_map(|n| &n.pods));
        out.read.clear();
        for pod in pods {
            if !out.first_read(pod) {
                continue;
            }
            for s in &pod.spread {
                if !out.spreads.contains(&s.selector) {
                    out.spreads.push(s.selector.clone());
                }
            }
            let terms = pod
                .affinity
                .iter()
                .chain(&pod.anti_affinity)
                .chain(pod.preferred_affinity.iter().map(|(_, t)| t))
                .chain(pod.preferred_anti_affinity.iter().map(|(_, t)| t));
            out.add_terms(pod, terms);
        }
        out
    }

    /// Whether `pod` has terms and its shape was not read yet in its namespace.
    fn first_read(&mut self, pod: &Pod) -> bool {
        !unconstrained(pod)
            && self
                .read
                .insert((Arc::as_ptr(&pod.shape), pod.namespace.clone()))
    }

    fn add_terms<'t>(&mut self, pod: &Pod, terms: impl Iterator<Item = &'t AffinityTerm>) {
        for t in terms {
            let owned = (pod.namespace.clone(), t.clone());
            if !self.terms.contains(&owned) {
                self.terms.push(owned);
            }
        }
    }

    /// Whether any of the terms selects `pod`.
    pub(super) fn select(&self, pod: &Pod) -> bool {
        self.spreads.iter().any(|s| s.matches(&pod.labels))
            || self
                .terms
                .iter()
                .any(|(owner, t)| t.selects(owner, &pod.namespace, &pod.labels))
    }
}

/// Which of the round's pods [`apart`] may move: unconstrained, selected by no term of the
/// round's pods nor by the anti-affinity of a pod on an existing node, binding no host port (a
/// NodeClaim it joins would have to check them against its DaemonSets'), and with no
/// node-affinity preference and at most one required term (so no solve relaxes what it needs
/// of a node, and the NodeClaim it joins narrows by exactly that).
fn movable(input: &Input) -> Vec<bool> {
    let selectors = Selectors::of_round(&input.pods, &input.existing);
    let mut by_labels: HashMap<(*const BTreeMap<String, String>, Arc<str>), bool> = HashMap::new();
    input
        .pods
        .iter()
        .map(|pod| {
            unconstrained(pod)
                && pod.host_ports.is_empty()
                && pod.preferred_terms.is_empty()
                && pod.required_terms.len() <= 1
                && !*by_labels
                    .entry((Arc::as_ptr(&pod.labels), pod.namespace.clone()))
                    .or_insert_with(|| selectors.select(pod))
        })
        .collect()
}

/// `outcome` (a plan of `input`, from `solver`) planned again with the pods no constraint reads
/// ([`movable`]) that it put on new NodeClaims apart from the others ([`planned_apart`]). `None`
/// unless that places every pod `outcome` placed and costs less, keeping the blast-radius target
/// if `outcome` kept it. Many cheap NodeClaims of free pods may lower the median NodeClaim below
/// a fourth of the constrained pods' dearest: then the constrained pods are planned once more
/// with their NodeClaims capped at 4x that median. Rounds whose NodePools share limits or
/// reservations are left alone, as by `regroup`.
pub(super) fn apart(input: &Input, solver: &Solver<'_>, outcome: &Outcome) -> Option<Outcome> {
    if !super::independent_claims(input) {
        return None;
    }
    let movable = movable(input);
    let moved: Vec<u32> = (0..input.pods.len())
        .filter(|&i| movable[i] && matches!(outcome.placements[i], Some(Placement::NodeClaim(_))))
        .map(|i| i as u32)
        .collect();
    let kept: Vec<u32> = (0..input.pods.len() as u32)
        .filter(|i| moved.binary_search(i).is_err())
        .collect();
    if moved.is_empty() || kept.is_empty() {
        return None;
    }
    let contained = solver.within_blast_radius(outcome);
    let mut cap = None;
    for _ in 0..2 {
        let candidate = planned_apart(input, solver, outcome, &kept, &moved, cap, contained)?;
        if solver.plan_cost(&candidate) >= solver.plan_cost(outcome) - 1e-9 {
            return None;
        }
        if !contained || solver.within_blast_radius(&candidate) {
            return Some(candidate);
        }
        cap = solver.median_price(&candidate).map(|m| BLAST_RADIUS * m);
    }
    None
}

/// One plan of `input` with the pods `moved` apart from the pods `kept` (indices into
/// `input.pods`, each sorted): the kept pods solved as a round of their own (`choose`, existing
/// nodes included, new NodeClaims priced at most `cap`), then the moved pods as a round whose
/// existing nodes are also those NodeClaims, each as a node of its cheapest type in the zone
/// and capacity type it would launch in ([`as_node`]: so the moved pods fill the room the kept
/// ones leave, at no cost), the rest on NodeClaims of their own, planned again from integer
/// patterns (`repartition`: that round's pods depend on no other pod) and, when `contained`,
/// priced at most 4x the kept pods' median NodeClaim. A NodeClaim moved pods join keeps the
/// types that still hold all its pods ([`grow`]). `None` when a pod `outcome` placed is left
/// unplaced or a hostname spread would break ([`hostname_spreads_hold`]).
fn planned_apart(
    input: &Input,
    solver: &Solver<'_>,
    outcome: &Outcome,
    kept: &[u32],
    moved: &[u32],
    cap: Option<f64>,
    contained: bool,
) -> Option<Outcome> {
    let pods_of = |indices: &[u32]| -> Vec<Pod> {
        indices
            .iter()
            .map(|&i| input.pods[i as usize].clone())
            .collect()
    };
    let constrained = Input {
        nodepools: input.nodepools.clone(),
        existing: input.existing.clone(),
        pods: pods_of(kept),
        options: Options {
            max_price: lower(input.options.max_price, cap),
            ..input.options
        },
    };
    let (kept_solver, kept_plan) = choose(&constrained);
    let free_cap = contained
        .then(|| kept_solver.median_price(&kept_plan))
        .flatten()
        .map(|median| BLAST_RADIUS * median);
    drop(kept_solver);
    let mut placements = vec![None; input.pods.len()];
    for (j, &i) in kept.iter().enumerate() {
        let placed = kept_plan.placements[j].clone();
        if placed.is_none() && outcome.placements[i as usize].is_some() {
            return None;
        }
        if let Some(Placement::Existing(n)) = placed {
            placements[i as usize] = Some(Placement::Existing(n));
        }
    }
    let mut claims = kept_plan.nodeclaims.clone();
    for p in claims.iter_mut().flat_map(|c| &mut c.pods) {
        *p = kept[*p as usize];
    }
    // The free pods' round: existing nodes as the constrained round left them, then its
    // NodeClaims as nodes.
    let mut existing = input.existing.clone();
    for (j, placed) in kept_plan.placements.iter().enumerate() {
        if let Some(Placement::Existing(n)) = placed {
            let pod = &constrained.pods[j];
            existing[*n].requested.add(&pod.requests);
            existing[*n].pods.push(pod.clone());
        }
    }
    let base = existing.len();
    let mut as_nodes: Vec<usize> = Vec::new();
    for (k, claim) in claims.iter().enumerate() {
        if let Some(node) = as_node(input, k, claim) {
            existing.push(node);
            as_nodes.push(k);
        }
    }
    let free = Input {
        nodepools: input.nodepools.clone(),
        existing,
        pods: pods_of(moved),
        options: Options {
            max_price: lower(input.options.max_price, free_cap),
            ..input.options
        },
    };
    let (free_solver, free_plan) = choose(&free);
    let free_contained = free_solver.within_blast_radius(&free_plan);
    let free_plan =
        repartition(&free, &free_solver, &free_plan, free_contained).unwrap_or(free_plan);
    drop(free_solver);
    let mut joined: Vec<Vec<u32>> = vec![Vec::new(); claims.len()];
    for (j, &i) in moved.iter().enumerate() {
        match free_plan.placements[j] {
            Some(Placement::Existing(n)) if n < base => {
                placements[i as usize] = Some(Placement::Existing(n));
            }
            Some(Placement::Existing(n)) => joined[*as_nodes.get(n - base)?].push(i),
            Some(Placement::NodeClaim(_)) => {}
            None => return None,
        }
    }
    for (claim, pods) in claims.iter_mut().zip(&joined) {
        if !pods.is_empty() {
            grow(input, solver, claim, pods)?;
        }
    }
    let mut own = free_plan.nodeclaims;
    for p in own.iter_mut().flat_map(|c| &mut c.pods) {
        *p = moved[*p as usize];
    }
    claims.extend(own);
    let errors = kept_plan
        .errors
        .into_iter()
        .map(|(j, failure)| (kept[j] as usize, failure))
        .collect();
    let planned = Outcome {
        nodeclaims: Vec::new(),
        placements,
        errors,
    };
    let candidate = replaced(&planned, &[], &claims);
    hostname_spreads_hold(input, &candidate).then_some(candidate)
}

/// Planned NodeClaim `claim` (the `k`th of its plan) as the node it would launch: its cheapest
/// type in the zone and capacity type of that type's launch offering, holding its pods. `None`
/// for a NodeClaim with `minValues` (pods joining it would narrow its types below them) or
/// without a launchable option.
fn as_node(input: &Input, k: usize, claim: &PlannedNodeClaim) -> Option<ExistingNode> {
    if claim.requirements.iter().any(|r| r.min_values().is_some()) {
        return None;
    }
    let template = &input.nodepools[claim.nodepool];
    let it = template
        .instance_types
        .get(*claim.instance_types.first()? as usize)?;
    let offering = launch_offering(it, &claim.requirements)?;
    let name = format!("planned-nodeclaim-{k:04}");
    let mut node_labels = node_labels(it, offering, &claim.requirements);
    node_labels.insert(labels::HOSTNAME.into(), name.clone());
    Some(ExistingNode {
        name: Arc::from(name),
        labels: node_labels,
        taints: template.taints.clone(),
        allocatable: it.allocatable.clone(),
        requested: claim.requests.clone(),
        pods: claim
            .pods
            .iter()
            .map(|&i| input.pods[i as usize].clone())
            .collect(),
        initialized: true,
        volume_limits: Default::default(),
    })
}

/// `claim` with the movable pods `pods` (indices into `input.pods`) added: their requests, what
/// they require of a node, and only the types that still hold it all, cheapest first under
/// its narrowed requirements. `None` if no type is left (its node's type always is, as the pods
/// fit on it).
fn grow(
    input: &Input,
    solver: &Solver<'_>,
    claim: &mut PlannedNodeClaim,
    pods: &[u32],
) -> Option<()> {
    for &i in pods {
        let pod = &input.pods[i as usize];
        claim.requests.add(&pod.requests);
        let terms: Vec<&[_]> = pod.required_terms.iter().map(Vec::as_slice).collect();
        claim
            .requirements
            .add(&Requirements::for_pod(&pod.node_selector, &terms));
        claim.pods.push(i);
    }
    let template = &input.nodepools[claim.nodepool];
    claim.instance_types.retain(|&t| {
        let it = &template.instance_types[t as usize];
        claim.requests.fits(&it.allocatable) && type_matches(it, &claim.requirements)
    });
    let prices = solver.prices(claim.nodepool, &claim.requirements);
    claim
        .instance_types
        .sort_by(|&a, &b| prices[a as usize].total_cmp(&prices[b as usize]));
    (!claim.instance_types.is_empty()).then_some(())
}

/// Whether every hostname spread of `input`'s pods (required) still holds with the NodeClaims
/// of `candidate` that hold none of its pods: each is a domain of its own with none of them,
/// so no NodeClaim may hold more than the spread's `maxSkew`. The free pods' NodeClaims are
/// such domains, added after the constrained pods were spread without them.
fn hostname_spreads_hold(input: &Input, candidate: &Outcome) -> bool {
    let mut spreads: Vec<&SpreadConstraint> = Vec::new();
    for s in input.pods.iter().flat_map(|p| &p.spread) {
        if s.topology_key == labels::HOSTNAME
            && s.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule
            && !spreads.contains(&s)
        {
            spreads.push(s);
        }
    }
    spreads.iter().all(|s| {
        candidate.nodeclaims.iter().all(|claim| {
            let held = claim
                .pods
                .iter()
                .filter(|&&i| s.selector.matches(&input.pods[i as usize].labels))
                .count();
            held <= s.max_skew as usize
        })
    })
}
