//! Node repair's decision (upstream's `node.health` controller, behind the `NodeRepair` gate):
//! a Node whose condition matches one of the cloud provider's repair policies for longer than
//! the policy's toleration has its NodeClaim deleted forcefully, unless too many Nodes of its
//! NodePool (or, for a NodeClaim of no NodePool, of the cluster) are unhealthy at once — then
//! replacing them would more likely make an outage worse than cure a broken Node.
//!
//! Pure: the Node's conditions, the policies, the counts and `now` go in, a [`Verdict`] comes
//! out; `controllers::node_repair` carries it out.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::NodeCondition;

use crate::apis::repair::RepairPolicy;

/// The share of a NodePool's Nodes (rounded up, as a PodDisruptionBudget's percentages are) that
/// may be unhealthy while repair goes on; above it, repair in that NodePool stops.
pub const ALLOWED_UNHEALTHY_PERCENT: usize = 20;

/// A policy the Node's conditions match, and when it may be acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unhealthy {
    /// The policy matched.
    pub policy: RepairPolicy,
    /// When the condition took its unhealthy status (its `lastTransitionTime`).
    pub since: DateTime<Utc>,
    /// `since` plus the policy's toleration: from then on the Node is replaced.
    pub deadline: DateTime<Utc>,
}

/// How many Nodes a NodePool (or the cluster) has, and how many of them match a repair policy
/// now, however recently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// Nodes counted.
    pub nodes: usize,
    /// Those with a condition matching a repair policy.
    pub unhealthy: usize,
}

impl Health {
    /// Counts one Node.
    pub fn count(&mut self, conditions: &[NodeCondition], policies: &[RepairPolicy]) {
        self.nodes = self.nodes.saturating_add(1);
        if policies.iter().any(|p| matching(conditions, p).is_some()) {
            self.unhealthy = self.unhealthy.saturating_add(1);
        }
    }

    /// How many of the Nodes may be unhealthy while repair goes on:
    /// [`ALLOWED_UNHEALTHY_PERCENT`] of them, rounded up (one of three may be, though that is
    /// 33%).
    pub fn allowed(&self) -> usize {
        self.nodes
            .saturating_mul(ALLOWED_UNHEALTHY_PERCENT)
            .div_ceil(100)
    }

    /// Whether repair may go on: no more Nodes are unhealthy than [`Health::allowed`].
    pub fn repairable(&self) -> bool {
        self.unhealthy <= self.allowed()
    }
}

/// What node repair does about one Node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No condition matches a repair policy.
    Healthy,
    /// A condition matches, but its toleration has not run out: look again at `until`.
    Tolerated {
        /// The matched policy with the earliest deadline.
        unhealthy: Unhealthy,
    },
    /// The toleration has run out, but too many Nodes of the group are unhealthy.
    Blocked {
        /// The matched policy.
        unhealthy: Unhealthy,
        /// The group's counts.
        health: Health,
    },
    /// Replace the Node now: delete its NodeClaim forcefully.
    Repair {
        /// The matched policy.
        unhealthy: Unhealthy,
    },
}

/// The condition of `conditions` that `policy` matches (type and status), if any.
fn matching<'a>(
    conditions: &'a [NodeCondition],
    policy: &RepairPolicy,
) -> Option<&'a NodeCondition> {
    conditions
        .iter()
        .find(|c| c.type_ == policy.condition_type)
        .filter(|c| c.status == policy.condition_status)
}

/// The matched policy whose toleration runs out first. A matching condition without a
/// `lastTransitionTime` counts as unhealthy since the epoch, as upstream reads the zero time:
/// its toleration has long run out.
pub fn unhealthy(conditions: &[NodeCondition], policies: &[RepairPolicy]) -> Option<Unhealthy> {
    policies
        .iter()
        .filter_map(|policy| {
            let condition = matching(conditions, policy)?;
            let since = condition
                .last_transition_time
                .as_ref()
                .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
                .unwrap_or(DateTime::UNIX_EPOCH);
            let deadline = since
                .checked_add_signed(policy.toleration)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            Some(Unhealthy {
                policy: *policy,
                since,
                deadline,
            })
        })
        .min_by_key(|u| u.deadline)
}

/// What to do about a Node with `conditions` at `now`, its group (NodePool, or the cluster for a
/// NodeClaim of no NodePool) counted in `health`.
pub fn decide(
    conditions: &[NodeCondition],
    policies: &[RepairPolicy],
    health: Health,
    now: DateTime<Utc>,
) -> Verdict {
    let Some(unhealthy) = unhealthy(conditions, policies) else {
        return Verdict::Healthy;
    };
    if now < unhealthy.deadline {
        Verdict::Tolerated { unhealthy }
    } else if !health.repairable() {
        Verdict::Blocked { unhealthy, health }
    } else {
        Verdict::Repair { unhealthy }
    }
}

/// A condition type as upstream's metric labels carry it: snake case (`AcceleratedHardwareReady`
/// → `accelerated_hardware_ready`).
pub fn snake_case(condition_type: &str) -> String {
    let mut out = String::with_capacity(condition_type.len().saturating_add(4));
    for (i, c) in condition_type.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use chrono::Duration;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    use crate::apis::repair::EKS_POLICIES;

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("t") + Duration::minutes(minutes)
    }

    fn condition(type_: &str, status: &str, since: DateTime<Utc>) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(since.timestamp()).expect("timestamp"),
            )),
            ..NodeCondition::default()
        }
    }

    fn healthy_pool() -> Health {
        Health {
            nodes: 10,
            unhealthy: 1,
        }
    }

    #[test]
    fn ready_false_is_tolerated_for_thirty_minutes_then_repaired() {
        let conditions = [condition("Ready", "False", at(0))];
        let decide = |now| decide(&conditions, &EKS_POLICIES, healthy_pool(), now);
        assert!(
            matches!(decide(at(29)), Verdict::Tolerated { unhealthy } if unhealthy.deadline == at(30))
        );
        assert!(matches!(
            decide(at(30) - Duration::seconds(1)),
            Verdict::Tolerated { .. }
        ));
        let Verdict::Repair { unhealthy } = decide(at(30)) else {
            panic!("repaired at the deadline: {:?}", decide(at(30)));
        };
        assert_eq!(unhealthy.policy.condition_type, "Ready");
        assert_eq!(unhealthy.since, at(0));
    }

    #[test]
    fn ready_unknown_matches_and_healthy_statuses_do_not() {
        let unknown = [condition("Ready", "Unknown", at(0))];
        assert!(matches!(
            decide(&unknown, &EKS_POLICIES, healthy_pool(), at(31)),
            Verdict::Repair { .. }
        ));
        for healthy in [
            vec![condition("Ready", "True", at(0))],
            vec![condition("KernelReady", "True", at(0))],
            vec![condition("MemoryPressure", "True", at(0))],
            vec![condition("SomethingElse", "False", at(0))],
            vec![],
        ] {
            assert_eq!(
                decide(&healthy, &EKS_POLICIES, healthy_pool(), at(600)),
                Verdict::Healthy,
                "{healthy:?}"
            );
        }
    }

    #[test]
    fn accelerated_hardware_has_the_shorter_toleration_and_the_earliest_deadline_wins() {
        let conditions = [
            condition("Ready", "False", at(0)),
            condition("AcceleratedHardwareReady", "False", at(5)),
        ];
        let u = unhealthy(&conditions, &EKS_POLICIES).expect("unhealthy");
        assert_eq!(u.policy.condition_type, "AcceleratedHardwareReady");
        assert_eq!(u.deadline, at(15));
        assert!(matches!(
            decide(&conditions, &EKS_POLICIES, healthy_pool(), at(15)),
            Verdict::Repair { unhealthy } if unhealthy.policy.condition_type == "AcceleratedHardwareReady"
        ));
        for type_ in [
            "StorageReady",
            "NetworkingReady",
            "KernelReady",
            "ContainerRuntimeReady",
        ] {
            let c = [condition(type_, "False", at(0))];
            assert_eq!(
                unhealthy(&c, &EKS_POLICIES).map(|u| u.deadline),
                Some(at(30)),
                "{type_}"
            );
        }
    }

    #[test]
    fn no_policies_repair_nothing() {
        let conditions = [condition("Ready", "False", at(0))];
        assert_eq!(
            decide(&conditions, &[], healthy_pool(), at(600)),
            Verdict::Healthy
        );
    }

    #[test]
    fn twenty_percent_rounded_up_may_be_unhealthy() {
        let h = |nodes, unhealthy| Health { nodes, unhealthy };
        assert_eq!(h(10, 0).allowed(), 2);
        assert_eq!(h(3, 0).allowed(), 1);
        assert_eq!(h(1, 0).allowed(), 1);
        assert_eq!(h(0, 0).allowed(), 0);
        assert_eq!(h(11, 0).allowed(), 3);
        assert!(h(10, 2).repairable());
        assert!(!h(10, 3).repairable());
        assert!(h(3, 1).repairable(), "one of three, though 33%");
        assert!(!h(3, 2).repairable());
        assert!(h(1, 1).repairable(), "a lone unhealthy node is repaired");
    }

    #[test]
    fn a_pool_over_the_threshold_blocks_repair() {
        let conditions = [condition("Ready", "False", at(0))];
        let crowded = Health {
            nodes: 4,
            unhealthy: 2,
        };
        assert_eq!(
            decide(&conditions, &EKS_POLICIES, crowded, at(31)),
            Verdict::Blocked {
                unhealthy: unhealthy(&conditions, &EKS_POLICIES).expect("unhealthy"),
                health: crowded,
            }
        );
        // Still within its toleration: waiting, not blocked.
        assert!(matches!(
            decide(&conditions, &EKS_POLICIES, crowded, at(10)),
            Verdict::Tolerated { .. }
        ));
    }

    #[test]
    fn counting_marks_a_node_unhealthy_whatever_its_toleration() {
        let mut health = Health::default();
        health.count(&[condition("Ready", "True", at(0))], &EKS_POLICIES);
        health.count(&[condition("Ready", "False", at(0))], &EKS_POLICIES);
        health.count(&[condition("KernelReady", "False", at(0))], &EKS_POLICIES);
        assert_eq!(
            health,
            Health {
                nodes: 3,
                unhealthy: 2
            }
        );
    }

    #[test]
    fn a_matching_condition_without_a_transition_time_is_past_its_toleration() {
        let conditions = [NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            ..NodeCondition::default()
        }];
        assert!(matches!(
            decide(&conditions, &EKS_POLICIES, healthy_pool(), at(0)),
            Verdict::Repair { .. }
        ));
    }

    #[test]
    fn condition_types_are_snake_cased_for_the_metric() {
        assert_eq!(
            snake_case("AcceleratedHardwareReady"),
            "accelerated_hardware_ready"
        );
        assert_eq!(snake_case("Ready"), "ready");
    }
}
