//! Why a pod cannot be placed, as data: for each NodePool (and, when asked, each existing node)
//! the first constraint that failed and the change that would clear it.
//!
//! The solver records these while it decides, so the provisioner's `FailedScheduling` event, the
//! `simulate` report and `explain pod` all render the same facts.

use std::fmt;

use serde::Serialize;

use crate::apis::nodeclaim::Taint;

/// The first constraint that kept a pod off one NodePool or node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Failure {
    /// A taint the pod does not tolerate.
    Taint {
        /// `key[=value]:Effect`.
        taint: String,
    },
    /// The pod selects a label only Kubernetes or the cloud provider sets.
    RestrictedLabel {
        /// The label key.
        key: String,
        /// The pod's requirement on it.
        requirement: String,
    },
    /// The pod's node selector or affinity and the NodePool's requirements exclude each other.
    Requirements {
        /// Which key, and what each side allows.
        detail: String,
    },
    /// The node's labels do not satisfy the pod's node selector or affinity.
    NodeLabels {
        /// The first requirement the labels fail.
        requirement: String,
    },
    /// No instance type satisfies the pod's and the NodePool's requirements together.
    NoInstanceType,
    /// The NodePool's `limits.nodes` is used up.
    NodeLimit,
    /// An instance type would fit, but none within the NodePool's remaining `spec.limits`.
    Limits {
        /// The remaining limits, `resource: amount`.
        remaining: String,
        /// The cheapest instance type that fits the pod, and by how much each limit it exceeds
        /// would have to rise for it (`cpu by 48`).
        raise: Option<(String, String)>,
    },
    /// No allowed instance type is big enough for the pod plus DaemonSet overhead.
    TooLarge {
        /// The first resource that does not fit.
        resource: String,
        /// The pod's requests plus DaemonSet overhead.
        needed: String,
        /// The allowed instance type with the most allocatable `resource`, and that amount.
        largest: Option<(String, String)>,
    },
    /// The node has too little free `resource` left.
    NodeFull {
        /// The first resource that does not fit.
        resource: String,
        /// What the node still has free of it.
        free: String,
        /// What the pod requests of it.
        requested: String,
    },
    /// A host port the pod binds is already taken (by a DaemonSet pod, or a pod on the node).
    HostPort,
    /// The node cannot attach another volume of the pod's CSI driver.
    Volumes,
    /// Topology spread or pod (anti-)affinity cannot be met there.
    Topology,
    /// No instance type is offered in the topology domain the pod needs.
    TopologyDomain,
    /// The instance types that fit do not meet the NodePool's `minValues`.
    MinValues,
    /// The NodePool allows only capacity type `reserved`, and the capacity reservations the pod
    /// could launch into have no instance left that this round's NodeClaims have not taken.
    ReservationsFull {
        /// The reservation IDs, comma-separated.
        reservations: String,
    },
}

impl Failure {
    /// A taint the pod does not tolerate, as `key[=value]:Effect`.
    pub fn taint(taint: &Taint) -> Self {
        Failure::Taint {
            taint: format!(
                "{}{}:{:?}",
                taint.key,
                taint
                    .value
                    .as_deref()
                    .map(|v| format!("={v}"))
                    .unwrap_or_default(),
                taint.effect
            ),
        }
    }

    /// The change that would clear this failure, for `explain pod`.
    pub fn fix(&self) -> String {
        match self {
            Failure::Taint { taint } => {
                format!("add a toleration for {taint} to the pod, or remove the taint")
            }
            Failure::RestrictedLabel { key, .. } => format!(
                "select a well-known or custom label instead of {key}, which no new node can be launched with"
            ),
            Failure::Requirements { .. } => {
                "change the pod's nodeSelector/affinity or widen the NodePool's requirements so they share a value".into()
            }
            Failure::NodeLabels { .. } => {
                "change the pod's nodeSelector/affinity, or label the node".into()
            }
            Failure::NoInstanceType => {
                "widen the requirements (instance families, sizes, zones, capacity types, architecture) of the pod or the NodePool".into()
            }
            Failure::NodeLimit => "raise the NodePool's spec.limits.nodes".into(),
            Failure::Limits {
                raise: Some((name, by)),
                ..
            } => format!(
                "raise the NodePool's spec.limits ({by}) so that {name}, the cheapest instance type that fits, stays within them"
            ),
            Failure::Limits { raise: None, .. } => "raise the NodePool's spec.limits".into(),
            Failure::TooLarge {
                resource, largest, ..
            } => match largest {
                Some((name, amount)) => format!(
                    "lower the pod's {resource} request below what {name} offers ({amount}, less DaemonSet overhead), or allow larger instance types"
                ),
                None => format!("lower the pod's {resource} request, or allow larger instance types"),
            },
            Failure::NodeFull { .. } => "the node is full; a new node is needed".into(),
            Failure::HostPort => "change or drop the pod's hostPort".into(),
            Failure::Volumes => {
                "the node has no volume attachment left for the pod's CSI driver; a new node is needed".into()
            }
            Failure::Topology => {
                "relax the pod's topologySpreadConstraints (maxSkew, whenUnsatisfiable: ScheduleAnyway) or (anti-)affinity, or allow more zones/nodes".into()
            }
            Failure::TopologyDomain => {
                "allow instance types offered in the zone the pod's topology needs".into()
            }
            Failure::MinValues => {
                "lower minValues, allow more instance types, or set MIN_VALUES_POLICY=BestEffort".into()
            }
            Failure::ReservationsFull { .. } => {
                "wait for a reservation to have room (the pod is planned again each round), enlarge the reservation, or allow spot or on-demand in the NodePool's karpenter.sh/capacity-type (or add a lower-weight NodePool that does)".into()
            }
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Taint { taint } => write!(f, "did not tolerate taint {taint}"),
            Failure::RestrictedLabel { key, requirement } => write!(
                f,
                "the pod requires label {key} ({requirement}), which is restricted: only Kubernetes or the cloud provider set it, so no new node can be launched with a chosen value; select a well-known or custom label instead"
            ),
            Failure::Requirements { detail } => f.write_str(detail),
            Failure::NodeLabels { requirement } => {
                write!(f, "its labels do not satisfy the pod's {requirement}")
            }
            Failure::NoInstanceType => f.write_str(
                "no instance type satisfies the requirements of the pod and the NodePool (e.g. zone, capacity type, architecture)",
            ),
            Failure::NodeLimit => f.write_str("node limits have been exhausted for nodepool"),
            Failure::Limits { remaining, .. } => write!(
                f,
                "node limits: every instance type that fits exceeds the NodePool's remaining limits ({remaining}); within one provisioning round each planned NodeClaim reserves the capacity of its largest instance type option"
            ),
            Failure::TooLarge {
                resource,
                needed,
                largest,
            } => {
                write!(
                    f,
                    "no instance type has enough allocatable {resource} for the pod plus DaemonSet overhead ({needed})"
                )?;
                if let Some((name, amount)) = largest {
                    write!(f, "; the largest allowed, {name}, has {amount}")?;
                }
                Ok(())
            }
            Failure::NodeFull {
                resource,
                free,
                requested,
            } => write!(
                f,
                "not enough free {resource}: {free} left, the pod requests {requested}"
            ),
            Failure::HostPort => f.write_str("a host port of the pod is taken"),
            Failure::Volumes => f.write_str("its volume attachment limit is reached"),
            Failure::Topology => f.write_str(
                "its topology spread or pod (anti-)affinity constraints cannot be met",
            ),
            Failure::TopologyDomain => {
                f.write_str("no instance type is offered in the topology domain the pod needs")
            }
            Failure::MinValues => {
                f.write_str("minValues requirements are not met by the instance types that fit")
            }
            Failure::ReservationsFull { reservations } => write!(
                f,
                "one or more instance types with compatible reserved offerings are available, but could not be reserved: the NodePool allows only capacity type reserved, and this round's NodeClaims take every instance its capacity reservations ({reservations}) have left"
            ),
        }
    }
}

/// What a pod was tried against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "name")]
pub enum Target {
    /// A NodePool that could launch a new node.
    NodePool(String),
    /// An existing node (or launched NodeClaim).
    Node(String),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::NodePool(n) => write!(f, "nodepool {n:?}"),
            Target::Node(n) => write!(f, "node {n:?}"),
        }
    }
}

/// One NodePool or node and why it could not take the pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attempt {
    /// What was tried.
    pub target: Target,
    /// The first constraint that failed.
    pub failure: Failure,
}

/// Why a pod could not be placed anywhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodFailure {
    /// `namespace/name`.
    pub pod: String,
    /// The pod's requests.
    pub requests: String,
    /// Every NodePool in the order they were tried (highest weight first); existing nodes only
    /// when the failure was diagnosed for one pod ([`super::scheduler::diagnose`]).
    pub attempts: Vec<Attempt>,
}

impl PodFailure {
    /// The attempts on NodePools.
    pub fn nodepools(&self) -> impl Iterator<Item = (&str, &Failure)> {
        self.attempts.iter().filter_map(|a| match &a.target {
            Target::NodePool(n) => Some((n.as_str(), &a.failure)),
            Target::Node(_) => None,
        })
    }
}

/// One line, as the `FailedScheduling` event and the `simulate` report print it: every NodePool
/// with its reason (existing nodes are left out: a node that is full says little).
impl fmt::Display for PodFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut pools = self.nodepools().peekable();
        if pools.peek().is_none() {
            return f.write_str("no NodePool is defined");
        }
        write!(
            f,
            "no NodePool can launch a node for pod {} (requests {})",
            self.pod, self.requests
        )?;
        for (name, failure) in pools {
            write!(f, "; nodepool {name:?}: {failure}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(attempts: Vec<Attempt>) -> PodFailure {
        PodFailure {
            pod: "default/app".into(),
            requests: "cpu: 1".into(),
            attempts,
        }
    }

    #[test]
    fn the_line_names_every_nodepool_and_leaves_nodes_out() {
        let f = failure(vec![
            Attempt {
                target: Target::Node("n1".into()),
                failure: Failure::Volumes,
            },
            Attempt {
                target: Target::NodePool("a".into()),
                failure: Failure::NodeLimit,
            },
        ]);
        assert_eq!(
            f.to_string(),
            "no NodePool can launch a node for pod default/app (requests cpu: 1); nodepool \"a\": node limits have been exhausted for nodepool"
        );
        assert_eq!(failure(vec![]).to_string(), "no NodePool is defined");
    }

    #[test]
    fn too_large_names_the_largest_allowed_type_in_reason_and_fix() {
        let f = Failure::TooLarge {
            resource: "cpu".into(),
            needed: "cpu: 200".into(),
            largest: Some(("m5.24xlarge".into(), "95690m".into())),
        };
        assert!(
            f.to_string()
                .ends_with("; the largest allowed, m5.24xlarge, has 95690m")
        );
        assert!(f.fix().contains("what m5.24xlarge offers (95690m"));
    }
}
