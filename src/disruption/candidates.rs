//! Which nodes may be disrupted, and for every node that may not, why not.

use chrono::{DateTime, Utc};

use crate::apis::nodepool::ConsolidationPolicy;
use crate::apis::{duration, labels};

use super::Cause;
use super::drift::{self, DriftInput, DriftVerdict};
use super::state::{State, lifetime_remaining};

/// A node the engine may act on.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Index into `State::nodes`.
    pub node: usize,
    /// Its NodePool.
    pub nodepool: String,
    /// Pods that need a new home if the node goes (indices into `State::pods`).
    pub pods: Vec<usize>,
    /// Hourly price (0 when unknown).
    pub price: f64,
    /// Upstream's disruption cost: cheaper to disrupt first.
    pub cost: f64,
    /// Drift verdict.
    pub drift: DriftVerdict,
    /// When it expires, if it does.
    pub expires: Option<DateTime<Utc>>,
    /// `consolidateAfter` has elapsed since the last pod event.
    pub consolidatable: bool,
    /// Seconds until it becomes consolidatable (for explanations).
    pub consolidatable_in: Option<i64>,
    /// The pool's consolidation policy.
    pub policy: ConsolidationPolicy,
    /// Why graceful methods (emptiness, consolidation) may not touch it: a `do-not-disrupt`
    /// annotation or a PDB. Drift may still, when the NodeClaim has a terminationGracePeriod.
    pub protected: Option<String>,
    /// Whether the NodeClaim has a terminationGracePeriod.
    pub has_tgp: bool,
    /// Its NodePool is static (`spec.replicas`): never emptied or consolidated, replaced when
    /// drifted.
    pub is_static: bool,
}

/// Why a pod's `karpenter.sh/do-not-disrupt` value is not one Karpenter honours, or `None` for
/// `"true"` and a positive Go duration within Go's range. Such a value protects nothing, as
/// upstream ignores it; `run` reports it in an `InvalidDoNotDisruptAnnotation` event.
pub fn invalid_do_not_disrupt(value: &str) -> Option<String> {
    if value == "true" {
        return None;
    }
    match duration::parse_go_duration(value) {
        Ok(d) if d.is_zero() => Some(format!(
            "{value:?} is not a positive duration; use \"true\" or a duration such as 5m or 1h"
        )),
        Ok(_) => None,
        Err(e) => Some(format!("{e}; or use \"true\"")),
    }
}

/// Parses a pod's `karpenter.sh/do-not-disrupt`: `"true"`, or a Go duration (`30m`, `1.5h`)
/// measured from the pod's start. Invalid values, including durations beyond Go's range, protect
/// nothing (upstream emits an event and ignores them).
fn do_not_disrupt_active(value: &str, started: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    if value == "true" {
        return true;
    }
    match duration::parse_go_duration(value) {
        Ok(d) => now < duration::saturating_add(started, d),
        Err(_) => false,
    }
}

/// Builds the candidates and the reasons the other nodes are not candidates.
pub fn candidates(
    state: &State,
    now: DateTime<Utc>,
) -> (Vec<Candidate>, Vec<(usize, Cause, String)>) {
    let mut out = Vec::new();
    let mut blocked = Vec::new();
    for (n, node) in state.nodes.iter().enumerate() {
        let Some(pool_name) = &node.nodepool else {
            blocked.push((
                n,
                Cause::NotCandidate,
                "not managed by Karpenter (no karpenter.sh/nodepool label)".to_string(),
            ));
            continue;
        };
        let Some(pool) = state.nodepool(pool_name) else {
            blocked.push((
                n,
                Cause::NotCandidate,
                format!("its NodePool {pool_name} does not exist"),
            ));
            continue;
        };
        if node.disrupting {
            blocked.push((
                n,
                Cause::NotCandidate,
                "already being disrupted".to_string(),
            ));
            continue;
        }
        if !node.initialized {
            blocked.push((
                n,
                Cause::NotInitialized,
                "not initialized yet (not Ready, or startup taints remain)".to_string(),
            ));
            continue;
        }
        let pods: Vec<usize> = state
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| p.node == Some(n) && p.reschedulable())
            .map(|(i, _)| i)
            .collect();
        let mut protected = None;
        if node
            .annotations
            .get(labels::DO_NOT_DISRUPT)
            .map(String::as_str)
            == Some("true")
        {
            protected = Some("the node has karpenter.sh/do-not-disrupt: \"true\"".to_string());
        }
        for &p in &pods {
            if protected.is_some() {
                break;
            }
            let sp = &state.pods[p];
            if let Some(v) = sp.pod.annotations.get(labels::DO_NOT_DISRUPT)
                && do_not_disrupt_active(v, sp.started, now)
            {
                protected = Some(format!(
                    "pod {} has karpenter.sh/do-not-disrupt: {v:?}",
                    sp.pod.key()
                ));
                break;
            }
            let pdbs: Vec<_> = state
                .pdbs
                .iter()
                .filter(|b| {
                    b.namespace == sp.pod.namespace.as_ref() && b.selector.matches(&sp.pod.labels)
                })
                .collect();
            if pdbs.len() > 1 {
                protected = Some(format!(
                    "pod {} matches more than one PodDisruptionBudget ({}), which the Eviction API refuses",
                    sp.pod.key(),
                    pdbs.iter()
                        .map(|b| b.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            } else if let Some(b) = pdbs.first().filter(|b| b.allowed < 1) {
                protected = Some(format!(
                    "PodDisruptionBudget {} allows no disruption of pod {} right now",
                    b.name,
                    sp.pod.key()
                ));
            }
        }
        let claim = node.claim.as_ref();
        let drift = drift::detect(
            &DriftInput {
                labels: &node.labels,
                annotations: claim
                    .map(|c| &c.annotations)
                    .unwrap_or(&std::collections::BTreeMap::new()),
                // Subnet, security groups and capacity reservation are the cloud provider's
                // to report: the NodeClaim controller records what it finds as
                // `provider_drift`.
                observed: drift::Observed {
                    image_id: claim.and_then(|c| c.image_id.as_deref()),
                    ..Default::default()
                },
                instance_types: state
                    .templates
                    .iter()
                    .chain(&state.static_templates)
                    .find(|t| &*t.name == pool_name.as_str())
                    .map_or(&[][..], |t| t.instance_types.as_slice()),
            },
            pool,
            state.nodeclasses.iter().find(|c| {
                c.metadata.name.as_deref()
                    == Some(pool.spec.template.spec.node_class_ref.name.as_str())
            }),
        );
        let drift = match (drift, claim.and_then(|c| c.provider_drift.as_deref())) {
            (DriftVerdict::None | DriftVerdict::Restamp, Some(reason)) => {
                match drift::DriftReason::from_provider(reason) {
                    Some(r) => DriftVerdict::Drifted(
                        r,
                        "the cloud provider reports the instance no longer matches its EC2NodeClass"
                            .into(),
                    ),
                    None => DriftVerdict::None,
                }
            }
            (verdict, _) => verdict,
        };
        let expire_after = claim
            .map(|c| match c.expire_after {
                Some(d) => duration::NillableDuration::After(duration::Duration::from_std(d)),
                None => duration::NillableDuration::Never,
            })
            .unwrap_or_else(|| pool.spec.template.spec.expire_after.clone());
        let expires = expire_after
            .get()
            .map(|d| duration::saturating_add(node.created, d));
        let (consolidatable, consolidatable_in) = match pool.spec.disruption.consolidate_after.get()
        {
            None => (false, None),
            Some(after) => {
                let since = claim
                    .and_then(|c| c.last_pod_event)
                    .unwrap_or(node.created)
                    .max(node.created);
                let ready_at = duration::saturating_add(since, after);
                (now >= ready_at, Some((ready_at - now).num_seconds().max(0)))
            }
        };
        let per_pod: f64 = pods
            .iter()
            .map(|&p| {
                let pod = &state.pods[p].pod;
                let deletion_cost: f64 = pod
                    .annotations
                    .get("controller.kubernetes.io/pod-deletion-cost")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0.0);
                (1.0 + deletion_cost / 2f64.powi(27) + f64::from(pod.priority) / 2f64.powi(25))
                    .clamp(-10.0, 10.0)
            })
            .sum();
        let cost = per_pod * lifetime_remaining(node, &expire_after, now);
        out.push(Candidate {
            node: n,
            nodepool: pool_name.clone(),
            pods,
            price: node.price.unwrap_or(0.0),
            cost,
            drift,
            expires,
            consolidatable,
            consolidatable_in,
            policy: pool.spec.disruption.consolidation_policy,
            protected,
            has_tgp: claim.is_some_and(|c| c.termination_grace_period.is_some()),
            is_static: pool.spec.replicas.is_some(),
        });
    }
    (out, blocked)
}
