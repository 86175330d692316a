//! Topology bookkeeping for spread constraints and pod (anti-)affinity: how many selected pods
//! each domain (zone, hostname, capacity type, any label value) holds, updated as the scheduler
//! places pods, and which domains a pod may go to.
//!
//! Groups are shared: every pod whose constraint has the same topology key, namespace scope and
//! selector reads and updates one set of counters, so 20,000 replicas of a Deployment cost one
//! group, not 20,000.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::apis::labels;
use crate::apis::nodeclaim::Taint;

use super::pod::{AffinityTerm, Pod, Selector, SpreadConstraint, WhenUnsatisfiable};
use super::taints::{Toleration, first_untolerated};

/// Which pods a group counts: the selector, evaluated in a namespace scope.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct GroupKey {
    key: String,
    namespaces: Scope,
    selector: Selector,
    /// For `nodeTaintsPolicy: Honor` spread constraints, the owner's tolerations: pods on nodes
    /// with taints these do not tolerate are not counted.
    tolerations: Option<Vec<Toleration>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Scope {
    All,
    Some(Vec<String>),
}

impl Scope {
    fn contains(&self, namespace: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Some(list) => list.iter().any(|n| n == namespace),
        }
    }
}

/// Counters for one group.
#[derive(Clone, Debug)]
struct Group {
    key: GroupKey,
    /// Domain → pods selected by the group placed there.
    counts: HashMap<Arc<str>, u32>,
    /// Domain → pods that own an anti-affinity term of this group placed there (so pods the
    /// term selects keep away: anti-affinity is symmetric).
    anti_owners: HashMap<Arc<str>, u32>,
}

/// What a pod's constraint asks of a domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConstraintKind {
    /// Topology spread: the domain's count after placement may exceed the minimum by `max_skew`.
    Spread {
        /// Allowed skew.
        max_skew: u32,
        /// Below this many eligible domains, the global minimum counts as zero.
        min_domains: Option<u32>,
    },
    /// The domain must hold a selected pod (or, if none exists and the pod selects itself, any).
    Affinity,
    /// The domain must hold no selected pod.
    AntiAffinity,
}

/// Why a constraint exists, for relaxation order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strength {
    /// Always enforced.
    Required,
    /// A preferred pod affinity term, relaxable (rank = position, heaviest first).
    PreferredAffinity(usize),
    /// A preferred pod anti-affinity term, relaxable.
    PreferredAntiAffinity(usize),
    /// A `ScheduleAnyway` spread constraint, relaxable.
    ScheduleAnyway(usize),
}

/// One constraint of a pod, bound to its group.
#[derive(Clone, Debug)]
pub struct Constraint {
    group: usize,
    /// The topology key.
    pub key: Arc<str>,
    /// What it asks.
    pub kind: ConstraintKind,
    /// Required or relaxable.
    pub strength: Strength,
    /// Whether the pod itself is selected by the group (self-affinity, self-spread).
    pub selects_self: bool,
}

/// The topology facts of one pod: its constraints and the groups that count it.
#[derive(Clone, Debug, Default)]
pub struct PodTopology {
    /// Constraints the pod must satisfy.
    pub constraints: Vec<Constraint>,
    /// Groups whose selector selects the pod: placing it increments their counts, and it must
    /// avoid the domains where owners of their anti-affinity terms are.
    pub counted_in: Vec<usize>,
    /// Groups of this pod's own anti-affinity terms: placing it marks the domain as owned.
    pub owns_anti: Vec<usize>,
}

/// Topology state for one scheduling run.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    groups: Vec<Group>,
    index: HashMap<GroupKey, usize>,
    /// Known domains per topology key (zones from the NodePools' offerings, existing nodes'
    /// label values), the universe spread minimums are taken over, with the taints of what
    /// provides each.
    domains: HashMap<String, BTreeMap<Arc<str>, Providers>>,
    /// The distinct taint sets of tainted providers, interned: when every NodePool and its nodes
    /// carry their own taint, a domain such as a zone has as many providers as there are pools,
    /// and comparing each new provider's taints with every known set made registering the
    /// domains quadratic in the pools, in every solve.
    taint_sets: Vec<Vec<Taint>>,
    taint_set_ids: HashMap<Vec<Taint>, u32>,
    /// The groups that select each distinct namespace and label set, while the groups were
    /// `linked_at` many ([`Topology::link`]): a workload's replicas carry the same labels, so
    /// 20,000 pods of a hundred Deployments are matched against the groups a hundred times. The
    /// disruption engine builds a topology over every bound pod for each candidate it
    /// simulates; matching each pod against every group there was most of a drift pass at
    /// 20,000 pods.
    linked: HashMap<Selected, Vec<usize>>,
    linked_at: usize,
}

/// What decides which groups select a pod: its namespace and labels.
type Selected = (Arc<str>, Arc<BTreeMap<String, String>>);

/// The taints of the NodePools and nodes that provide a domain, so a `nodeTaintsPolicy: Honor`
/// spread constraint leaves out domains only reachable through taints its pod does not tolerate.
#[derive(Clone, Debug, Default)]
struct Providers {
    /// Some provider has no taint that keeps pods off (NoSchedule or NoExecute).
    untainted: bool,
    /// The distinct taint sets of the other providers (ids into `Topology::taint_sets`), sorted.
    tainted: Vec<u32>,
}

impl Providers {
    /// Adds a provider: `None` when its taints keep no pod off, else its interned taint set.
    fn add(&mut self, taint_set: Option<u32>) {
        if self.untainted {
            return;
        }
        match taint_set {
            None => {
                self.untainted = true;
                self.tainted = Vec::new();
            }
            Some(id) => {
                if let Err(at) = self.tainted.binary_search(&id) {
                    self.tainted.insert(at, id);
                }
            }
        }
    }
}

impl Topology {
    /// Registers the domains a key can take (e.g. every zone some NodePool can launch in) and
    /// the taints of the NodePool or node that provides them.
    pub fn add_domains<'a>(
        &mut self,
        key: &str,
        values: impl IntoIterator<Item = &'a Arc<str>>,
        taints: &[Taint],
    ) {
        let taint_set = first_untolerated(taints, &[]).map(|_| self.intern(taints));
        let map = self.domains.entry(key.to_string()).or_default();
        for value in values {
            map.entry(value.clone()).or_default().add(taint_set);
        }
    }

    fn intern(&mut self, taints: &[Taint]) -> u32 {
        if let Some(&id) = self.taint_set_ids.get(taints) {
            return id;
        }
        let id = self.taint_sets.len() as u32;
        self.taint_sets.push(taints.to_vec());
        self.taint_set_ids.insert(taints.to_vec(), id);
        id
    }

    /// Whether a NodePool or node whose taints the tolerations allow provides the domain
    /// (`nodeTaintsPolicy: Honor`); unknown domains count as allowed.
    pub fn domain_tolerated(&self, key: &str, domain: &str, tolerations: &[Toleration]) -> bool {
        self.domains
            .get(key)
            .and_then(|m| m.get(domain))
            .is_none_or(|p| {
                p.untainted
                    || p.tainted.iter().any(|&id| {
                        first_untolerated(&self.taint_sets[id as usize], tolerations).is_none()
                    })
            })
    }

    fn group(&mut self, key: GroupKey) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.groups.len();
        self.groups.push(Group {
            key: key.clone(),
            counts: HashMap::new(),
            anti_owners: HashMap::new(),
        });
        self.index.insert(key, i);
        i
    }

    fn scope(term: &AffinityTerm, owner_namespace: &str) -> Scope {
        if term.all_namespaces {
            Scope::All
        } else if term.namespaces.is_empty() {
            Scope::Some(vec![owner_namespace.to_string()])
        } else {
            let mut n = term.namespaces.clone();
            n.sort();
            Scope::Some(n)
        }
    }

    /// Registers a pod's constraints (creating groups) and returns its topology facts. Call for
    /// every pod (pending and bound) before [`Topology::link`].
    pub fn register(&mut self, pod: &Pod) -> PodTopology {
        let mut out = PodTopology::default();
        let ns = pod.namespace.as_ref();
        let spread = |c: &SpreadConstraint| GroupKey {
            key: c.topology_key.clone(),
            namespaces: Scope::Some(vec![ns.to_string()]),
            selector: c.selector.clone(),
            tolerations: c.honor_node_taints.then(|| pod.tolerations.clone()),
        };
        let mut schedule_anyway = 0;
        for c in &pod.spread {
            let strength = match c.when_unsatisfiable {
                WhenUnsatisfiable::DoNotSchedule => Strength::Required,
                WhenUnsatisfiable::ScheduleAnyway => {
                    schedule_anyway += 1;
                    Strength::ScheduleAnyway(schedule_anyway - 1)
                }
            };
            let group = self.group(spread(c));
            out.constraints.push(Constraint {
                group,
                key: Arc::from(c.topology_key.as_str()),
                kind: ConstraintKind::Spread {
                    max_skew: c.max_skew,
                    min_domains: c.min_domains,
                },
                strength,
                selects_self: c.selector.matches(&pod.labels),
            });
        }
        let terms = pod
            .affinity
            .iter()
            .map(|t| (t, ConstraintKind::Affinity, Strength::Required))
            .chain(
                pod.anti_affinity
                    .iter()
                    .map(|t| (t, ConstraintKind::AntiAffinity, Strength::Required)),
            )
            .chain(
                pod.preferred_affinity
                    .iter()
                    .enumerate()
                    .map(|(i, (_, t))| {
                        (t, ConstraintKind::Affinity, Strength::PreferredAffinity(i))
                    }),
            )
            .chain(
                pod.preferred_anti_affinity
                    .iter()
                    .enumerate()
                    .map(|(i, (_, t))| {
                        (
                            t,
                            ConstraintKind::AntiAffinity,
                            Strength::PreferredAntiAffinity(i),
                        )
                    }),
            );
        for (term, kind, strength) in terms {
            let group = self.group(GroupKey {
                key: term.topology_key.clone(),
                namespaces: Self::scope(term, ns),
                selector: term.selector.clone(),
                tolerations: None,
            });
            if kind == ConstraintKind::AntiAffinity && strength == Strength::Required {
                out.owns_anti.push(group);
            }
            out.constraints.push(Constraint {
                group,
                key: Arc::from(term.topology_key.as_str()),
                kind,
                strength,
                selects_self: term.selects(ns, ns, &pod.labels),
            });
        }
        out
    }

    /// Fills in which groups select the pod; call after every pod has been registered.
    pub fn link(&mut self, pod: &Pod, topo: &mut PodTopology) {
        if self.linked_at != self.groups.len() {
            self.linked.clear();
            self.linked_at = self.groups.len();
        }
        let selected = (pod.namespace.clone(), pod.labels.clone());
        if let Some(known) = self.linked.get(&selected) {
            topo.counted_in.clone_from(known);
            return;
        }
        topo.counted_in = self
            .groups
            .iter()
            .enumerate()
            .filter(|(_, g)| {
                g.key.namespaces.contains(&pod.namespace) && g.key.selector.matches(&pod.labels)
            })
            .map(|(i, _)| i)
            .collect();
        self.linked.insert(selected, topo.counted_in.clone());
    }

    /// Records a pod placed in `domain_of(key)`, on a node or NodeClaim with `taints`, for each
    /// group that counts it.
    pub fn record(
        &mut self,
        topo: &PodTopology,
        domain_of: impl Fn(&str) -> Option<Arc<str>>,
        taints: &[Taint],
    ) {
        for &g in &topo.counted_in {
            if let Some(tolerations) = &self.groups[g].key.tolerations
                && first_untolerated(taints, tolerations).is_some()
            {
                continue;
            }
            if let Some(d) = domain_of(&self.groups[g].key.key) {
                *self.groups[g].counts.entry(d).or_default() += 1;
            }
        }
        for &g in &topo.owns_anti {
            if let Some(d) = domain_of(&self.groups[g].key.key) {
                *self.groups[g].anti_owners.entry(d).or_default() += 1;
            }
        }
    }

    /// The topology keys a pod's active constraints (and the anti-affinity of others) involve.
    pub fn keys<'a>(
        &'a self,
        topo: &'a PodTopology,
        active: impl Fn(&Constraint) -> bool + 'a,
    ) -> impl Iterator<Item = &'a str> + 'a {
        topo.constraints
            .iter()
            .filter(move |c| active(c))
            .map(|c| c.key.as_ref())
            .chain(
                topo.counted_in
                    .iter()
                    .filter(|&&g| !self.groups[g].anti_owners.is_empty())
                    .map(|&g| self.groups[g].key.key.as_str()),
            )
    }

    /// Filters `candidates` (the domains a node or NodeClaim could be in for `key`) down to those
    /// where the pod may be placed, given its active constraints on that key.
    /// `allowed_by_pod` says whether the pod's node requirements allow a domain (spread
    /// minimums are only taken over those when `nodeAffinityPolicy: Honor`).
    pub fn allowed_domains(
        &self,
        key: &str,
        topo: &PodTopology,
        active: &dyn Fn(&Constraint) -> bool,
        candidates: &[Arc<str>],
        allowed_by_pod: &dyn Fn(&str) -> bool,
    ) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = candidates.to_vec();
        for c in topo
            .constraints
            .iter()
            .filter(|c| c.key.as_ref() == key && active(c))
        {
            let g = &self.groups[c.group];
            let count = |d: &str| g.counts.get(d).copied().unwrap_or(0);
            match c.kind {
                ConstraintKind::AntiAffinity => out.retain(|d| count(d) == 0),
                ConstraintKind::Affinity => {
                    let anywhere = g.counts.values().any(|&n| n > 0);
                    if anywhere {
                        out.retain(|d| count(d) > 0);
                    } else if !c.selects_self {
                        out.clear();
                    }
                }
                ConstraintKind::Spread {
                    max_skew,
                    min_domains,
                } => {
                    let min = if key == labels::HOSTNAME {
                        // A new node is always possible, so the emptiest hostname has zero.
                        0
                    } else {
                        let universe: Vec<&Arc<str>> = self
                            .domains
                            .get(key)
                            .into_iter()
                            .flat_map(BTreeMap::keys)
                            .filter(|d| allowed_by_pod(d))
                            .collect();
                        let below_min_domains =
                            min_domains.is_some_and(|m| (universe.len() as u32) < m);
                        if below_min_domains {
                            0
                        } else {
                            universe.iter().map(|d| count(d)).min().unwrap_or(0)
                        }
                    };
                    let own = u32::from(c.selects_self);
                    out.retain(|d| count(d) + own <= min + max_skew);
                }
            }
        }
        for &g in &topo.counted_in {
            let group = &self.groups[g];
            if group.key.key == key && !group.anti_owners.is_empty() {
                out.retain(|d| group.anti_owners.get(d).copied().unwrap_or(0) == 0);
            }
        }
        out
    }

    /// The best domain among allowed ones for the pod: the emptiest for its spread constraints
    /// (ties by name), so placements stay balanced.
    pub fn best_domain(
        &self,
        key: &str,
        topo: &PodTopology,
        active: &dyn Fn(&Constraint) -> bool,
        allowed: &[Arc<str>],
    ) -> Option<Arc<str>> {
        let load = |d: &str| -> u32 {
            topo.constraints
                .iter()
                .filter(|c| c.key.as_ref() == key && active(c))
                .filter(|c| matches!(c.kind, ConstraintKind::Spread { .. }))
                .map(|c| self.groups[c.group].counts.get(d).copied().unwrap_or(0))
                .sum()
        };
        allowed
            .iter()
            .min_by(|a, b| load(a).cmp(&load(b)).then_with(|| a.cmp(b)))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::pod::SelectorOp;
    use std::collections::BTreeMap;

    fn pod(name: &str, app: &str) -> Pod {
        Pod {
            namespace: Arc::from("default"),
            name: Arc::from(name),
            uid: Arc::from(name),
            labels: BTreeMap::from([("app".to_string(), app.to_string())]).into(),
            created: 0,
            owner_kind: None,
            annotations: Arc::default(),
            volumes: vec![],
            shape: Arc::default(),
        }
    }

    fn app(app: &str) -> Selector {
        Selector {
            expressions: vec![("app".into(), SelectorOp::In, vec![app.into()])],
        }
    }

    fn zones() -> Vec<Arc<str>> {
        ["a", "b", "c"].into_iter().map(Arc::from).collect()
    }

    #[test]
    fn zonal_spread_keeps_skew() {
        let mut t = Topology::default();
        t.add_domains(labels::ZONE, &zones(), &[]);
        let mut p = pod("p", "web");
        p.spread.push(SpreadConstraint {
            topology_key: labels::ZONE.into(),
            max_skew: 1,
            min_domains: None,
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            selector: app("web"),
            honor_node_affinity: true,
            honor_node_taints: false,
        });
        let mut topo = t.register(&p);
        t.link(&p, &mut topo);
        let all = |_: &Constraint| true;
        let any = |_: &str| true;
        assert_eq!(
            t.allowed_domains(labels::ZONE, &topo, &all, &zones(), &any)
                .len(),
            3
        );
        t.record(&topo, |_| Some(Arc::from("a")), &[]);
        let allowed = t.allowed_domains(labels::ZONE, &topo, &all, &zones(), &any);
        assert_eq!(allowed, vec![Arc::from("b"), Arc::from("c")]);
        assert_eq!(
            t.best_domain(labels::ZONE, &topo, &all, &allowed)
                .as_deref(),
            Some("b")
        );
    }

    #[test]
    fn honoring_taints_skips_pods_on_untolerated_nodes_and_their_domains() {
        use crate::apis::nodeclaim::TaintEffect;
        let gpu = [Taint {
            key: "gpu".into(),
            value: None,
            effect: TaintEffect::NoSchedule,
            time_added: None,
        }];
        let mut t = Topology::default();
        t.add_domains(labels::ZONE, &zones()[..2], &[]);
        t.add_domains(labels::ZONE, &zones()[2..], &gpu);
        // A PreferNoSchedule taint never keeps a domain out.
        let soft = [Taint {
            effect: TaintEffect::PreferNoSchedule,
            ..gpu[0].clone()
        }];
        t.add_domains("other", &zones()[..1], &soft);
        assert!(t.domain_tolerated("other", "a", &[]));
        assert!(t.domain_tolerated(labels::ZONE, "a", &[]));
        assert!(!t.domain_tolerated(labels::ZONE, "c", &[]));
        let toleration = Toleration {
            key: "gpu".into(),
            operator: crate::scheduling::taints::TolerationOperator::Exists,
            ..Toleration::default()
        };
        assert!(t.domain_tolerated(labels::ZONE, "c", std::slice::from_ref(&toleration)));

        let constraint = |honor: bool| SpreadConstraint {
            topology_key: labels::ZONE.into(),
            max_skew: 1,
            min_domains: None,
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            selector: app("web"),
            honor_node_affinity: true,
            honor_node_taints: honor,
        };
        let mut honoring = pod("h", "web");
        honoring.spread.push(constraint(true));
        let mut ignoring = pod("i", "web");
        ignoring.spread.push(constraint(false));
        let mut h = t.register(&honoring);
        let mut i = t.register(&ignoring);
        t.link(&honoring, &mut h);
        t.link(&ignoring, &mut i);
        // A selected pod on a tainted node in zone a counts only for the Ignore constraint.
        let placed = pod("placed", "web");
        let mut p = t.register(&placed);
        t.link(&placed, &mut p);
        t.record(&p, |_| Some(Arc::from("a")), &gpu);
        let all = |_: &Constraint| true;
        let any = |_: &str| true;
        assert_eq!(
            t.allowed_domains(labels::ZONE, &h, &all, &zones(), &any)
                .len(),
            3
        );
        assert_eq!(
            t.allowed_domains(labels::ZONE, &i, &all, &zones(), &any),
            vec![Arc::from("b"), Arc::from("c")]
        );
    }

    #[test]
    fn a_domain_many_tainted_pools_provide_is_tolerated_through_any_of_them() {
        use crate::apis::nodeclaim::TaintEffect;
        use crate::scheduling::taints::TolerationOperator;
        let team = |name: &str| {
            vec![Taint {
                key: "team".into(),
                value: Some(name.into()),
                effect: TaintEffect::NoSchedule,
                time_added: None,
            }]
        };
        let mut t = Topology::default();
        for pool in 0..50 {
            // A pool registers each zone of each of its instance types: the same taints again.
            for _ in 0..3 {
                t.add_domains(labels::ZONE, &zones(), &team(&format!("pool-{pool}")));
            }
        }
        assert_eq!(
            t.taint_sets.len(),
            50,
            "each distinct taint set is kept once"
        );
        let tolerating = |name: &str| Toleration {
            key: "team".into(),
            operator: TolerationOperator::Equal,
            value: name.into(),
            effect: None,
        };
        assert!(t.domain_tolerated(labels::ZONE, "a", &[tolerating("pool-49")]));
        assert!(!t.domain_tolerated(labels::ZONE, "a", &[tolerating("pool-50")]));
        assert!(!t.domain_tolerated(labels::ZONE, "a", &[]));
        // An untainted provider opens the domain to every pod.
        t.add_domains(labels::ZONE, &zones()[..1], &[]);
        assert!(t.domain_tolerated(labels::ZONE, "a", &[]));
        assert!(!t.domain_tolerated(labels::ZONE, "b", &[]));
    }

    #[test]
    fn anti_affinity_is_symmetric_and_affinity_follows_its_target() {
        let mut t = Topology::default();
        let mut owner = pod("owner", "db");
        owner.anti_affinity.push(AffinityTerm {
            topology_key: labels::HOSTNAME.into(),
            selector: app("web"),
            namespaces: vec![],
            all_namespaces: false,
        });
        let web = pod("web", "web");
        let mut follower = pod("follower", "cache");
        follower.affinity.push(AffinityTerm {
            topology_key: labels::HOSTNAME.into(),
            selector: app("db"),
            namespaces: vec![],
            all_namespaces: false,
        });
        let mut owner_t = t.register(&owner);
        let mut web_t = t.register(&web);
        let mut follower_t = t.register(&follower);
        t.link(&owner, &mut owner_t);
        t.link(&web, &mut web_t);
        t.link(&follower, &mut follower_t);
        let all = |_: &Constraint| true;
        let any = |_: &str| true;
        let nodes: Vec<Arc<str>> = vec![Arc::from("n1"), Arc::from("n2")];
        // No db pod anywhere: the follower cannot go anywhere (it does not select itself).
        assert!(
            t.allowed_domains(labels::HOSTNAME, &follower_t, &all, &nodes, &any)
                .is_empty()
        );
        t.record(&owner_t, |_| Some(Arc::from("n1")), &[]);
        assert_eq!(
            t.allowed_domains(labels::HOSTNAME, &follower_t, &all, &nodes, &any),
            vec![Arc::from("n1")]
        );
        assert_eq!(
            t.allowed_domains(labels::HOSTNAME, &web_t, &all, &nodes, &any),
            vec![Arc::from("n2")],
            "web pods keep away from the pod whose anti-affinity selects them"
        );
    }
}
