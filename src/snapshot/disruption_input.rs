//! The adapter from a [`Snapshot`] to the disruption engine's [`State`]: nodes joined with their
//! NodeClaims and prices, pods with what protects them, PDBs resolved to the evictions they allow.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::apis::conditions;
use crate::apis::labels;
use crate::apis::nodeclaim::condition::DRIFTED;
use crate::apis::nodeclaim::{NodeClaim, Taint};
use crate::disruption::state::{
    ClaimFacts, Pdb, State, StateNode, StatePod, Waiting, resolve_int_or_percent,
};
use crate::scheduling::instance_type::{CapacityType, InstanceType};
use crate::scheduling::pod::{Pod, Selector};
use crate::scheduling::resources::Resources;
use crate::scheduling::scheduler::{ExistingNode, NodePoolTemplate, Options};
use crate::scheduling::taints::taint_from_k8s;
use crate::snapshot::{ClusterPod, Snapshot};

/// Whether the engine's state lists the pods no node holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unbound {
    /// Listed: `simulate` applies its provisioning plan to the state, placing them.
    Listed,
    /// Left out: in the controllers the provisioner places them, the disruption engine sees
    /// them as [`Waiting::pending`], and no node's verdict depends on them (PDBs still count
    /// them). 20,000 pending pods made each state ~5 MB larger, and three controllers build one.
    LeftOut,
}

/// Builds the disruption engine's state from a snapshot. `templates` come from the provisioning
/// preparation (instance types per NodePool).
pub fn disruption_state(
    cluster: &Snapshot,
    templates: Vec<NodePoolTemplate>,
    options: Options,
    unbound: Unbound,
    now: DateTime<Utc>,
) -> State {
    let by_type: BTreeMap<&str, &InstanceType> = templates
        .iter()
        .flat_map(|t| t.instance_types.iter())
        .map(|it| (it.name.as_ref(), it))
        .collect();
    let mut nodes = Vec::with_capacity(cluster.nodes.len());
    for node in &cluster.nodes {
        let labels_ = node.metadata.labels.clone().unwrap_or_default();
        let claim = super::joins::claim_of(&cluster.nodeclaims, node);
        nodes.push(state_node(
            node,
            &labels_,
            claim.map(Arc::as_ref),
            &by_type,
            now,
        ));
    }
    let index: BTreeMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_ref(), i))
        .collect();
    let bound = |p: &ClusterPod| p.node_name().and_then(|n| index.get(n).copied());
    let listed = |p: &&Arc<ClusterPod>| unbound == Unbound::Listed || bound(p).is_some();
    let mut pods = Vec::with_capacity(cluster.pods.iter().filter(listed).count());
    // The pods left out, for the PDBs' counts.
    let mut left_out: Vec<&Pod> = Vec::new();
    for p in &cluster.pods {
        let Ok(pod) = p.scheduling_pod() else {
            continue;
        };
        let status = p.status.as_deref();
        let phase = status.and_then(|s| s.phase.as_deref());
        let finished = matches!(phase, Some("Succeeded" | "Failed"))
            || p.metadata.deletion_timestamp.is_some();
        if !listed(&p) {
            if !finished {
                left_out.push(pod);
            }
            continue;
        }
        let node = bound(p);
        pods.push(StatePod {
            pod: pod.clone(),
            node,
            started: status
                .and_then(|s| s.start_time.as_ref())
                .or(p.metadata.creation_timestamp.as_ref())
                .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
                .unwrap_or(now),
            finished,
        });
    }
    let pdbs = cluster
        .pdbs
        .iter()
        .filter_map(|pdb| resolve_pdb(pdb, &pods, &left_out))
        .collect();
    State {
        // A few objects each: the engine owns its copies.
        nodepools: cluster.nodepools.iter().map(|p| (**p).clone()).collect(),
        nodeclasses: cluster.nodeclasses.iter().map(|c| (**c).clone()).collect(),
        templates,
        static_templates: Vec::new(),
        nodes,
        pods,
        pdbs,
        waiting: Default::default(),
        // Consolidation keeps upstream's NodeClaim sizing (see `Options::every_fitting_type`).
        options: Options {
            every_fitting_type: true,
            ..options
        },
    }
}

/// What the provisioner is dealing with in `cluster` (see [`Waiting`]), from its input for the
/// same snapshot: the existing capacity no Node has registered for yet, and the pods it still
/// has to place; `planned_onto` names the nodes its rounds planned pending pods onto.
pub fn waiting(
    cluster: &Snapshot,
    existing: &[ExistingNode],
    pending: Vec<Pod>,
    planned_onto: BTreeSet<String>,
) -> Waiting {
    let registered: BTreeSet<&str> = cluster
        .nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    Waiting {
        in_flight: existing
            .iter()
            .filter(|e| !registered.contains(e.name.as_ref()))
            .cloned()
            .collect(),
        pending,
        planned_onto,
    }
}

fn state_node(
    node: &core::Node,
    labels_: &BTreeMap<String, String>,
    claim: Option<&NodeClaim>,
    by_type: &BTreeMap<&str, &InstanceType>,
    now: DateTime<Utc>,
) -> StateNode {
    let status = node.status.as_ref();
    let allocatable = status
        .and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()))
        .and_then(|l| Resources::from_list(l).ok())
        .unwrap_or_default();
    let capacity_type = labels_
        .get(labels::CAPACITY_TYPE)
        .and_then(|c| CapacityType::from_label(c))
        .unwrap_or(CapacityType::OnDemand);
    let zone = labels_.get(labels::ZONE);
    let price = labels_
        .get(labels::INSTANCE_TYPE)
        .and_then(|t| by_type.get(t.as_str()))
        .and_then(|it| {
            it.cheapest_offering(|o| {
                o.capacity_type == capacity_type && zone.is_none_or(|z| o.zone.as_ref() == z)
            })
            .or_else(|| it.cheapest_offering(|o| o.capacity_type == capacity_type))
        })
        .map(|o| o.price);
    let taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|t| taint_from_k8s(t).ok())
        .collect();
    let ready = super::is_node_ready(node);
    let created = node
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
        .unwrap_or(now);
    let claim_facts = claim.map(|c| ClaimFacts {
        name: c.metadata.name.clone().unwrap_or_default(),
        annotations: c.metadata.annotations.clone().unwrap_or_default(),
        image_id: c.status.as_ref().and_then(|s| s.image_id.clone()),
        termination_grace_period: c.spec.termination_grace_period.as_ref().map(|d| d.get()),
        expire_after: c.spec.expire_after.get(),
        last_pod_event: c.status.as_ref().and_then(|s| s.last_pod_event_time),
        drifted_since: c
            .status
            .as_ref()
            .and_then(|s| conditions::find(&s.conditions, DRIFTED))
            .filter(|c| c.status == conditions::TRUE)
            .map(|c| c.last_transition_time),
        provider_drift: c
            .status
            .as_ref()
            .and_then(|s| conditions::find(&s.conditions, DRIFTED))
            .filter(|c| c.status == conditions::TRUE)
            .filter(|c| crate::disruption::drift::DriftReason::from_provider(&c.reason).is_some())
            .map(|c| c.reason.clone()),
    });
    StateNode {
        name: Arc::from(node.metadata.name.clone().unwrap_or_default()),
        nodepool: labels_.get(labels::NODEPOOL).cloned(),
        labels: labels_.clone(),
        annotations: node.metadata.annotations.clone().unwrap_or_default(),
        disrupting: node.metadata.deletion_timestamp.is_some()
            || claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some())
            || taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY),
        taints,
        allocatable,
        price,
        capacity_type,
        created,
        initialized: ready && labels_.get(labels::INITIALIZED).is_none_or(|v| v == "true"),
        claim: claim_facts,
    }
}

/// `left_out`: unfinished pods no node holds that `pods` does not list (see [`Unbound`]).
fn resolve_pdb(pdb: &PodDisruptionBudget, pods: &[StatePod], left_out: &[&Pod]) -> Option<Pdb> {
    let namespace = pdb
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let spec = pdb.spec.as_ref()?;
    let selector = spec
        .selector
        .as_ref()
        .and_then(|s| Selector::from_k8s(s).ok())?;
    let matching: Vec<&StatePod> = pods
        .iter()
        .filter(|p| {
            !p.finished && p.pod.namespace.as_ref() == namespace && selector.matches(&p.pod.labels)
        })
        .collect();
    let unplaced = left_out
        .iter()
        .filter(|p| p.namespace.as_ref() == namespace && selector.matches(&p.labels))
        .count();
    let expected = (matching.len() + unplaced) as i64;
    let healthy = matching.iter().filter(|p| p.node.is_some()).count() as i64;
    let allowed = match pdb
        .status
        .as_ref()
        .map(|s| i64::from(s.disruptions_allowed))
    {
        Some(a)
            if pdb
                .status
                .as_ref()
                .is_some_and(|s| s.observed_generation.is_some()) =>
        {
            a
        }
        _ => {
            if let Some(max) = &spec.max_unavailable {
                resolve_int_or_percent(max, expected, true) - (expected - healthy)
            } else if let Some(min) = &spec.min_available {
                healthy - resolve_int_or_percent(min, expected, true)
            } else {
                healthy - expected
            }
        }
    };
    Some(Pdb {
        name: format!(
            "{namespace}/{}",
            pdb.metadata.name.as_deref().unwrap_or_default()
        ),
        namespace,
        selector,
        allowed,
    })
}
