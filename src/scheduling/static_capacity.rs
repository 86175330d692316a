//! Static NodePools (`spec.replicas`, upstream's `StaticCapacity`): a pool that keeps a fixed
//! number of NodeClaims whatever the pods ask for. Two decisions live here, pure so the controller
//! and `simulate` make the same ones: how many NodeClaims to add or which to remove
//! ([`decide`]), and which instance types a static NodeClaim may become ([`options`]).

use crate::apis::NodePool;

use super::instance_type::InstanceType;
use super::requirements::Requirements;
use super::resources::parse_quantity;
use super::scheduler::{MAX_INSTANCE_TYPES, cheapest_offering, type_matches};

/// The most NodeClaims a pool may hold, static or not: its `limits.nodes`, `None` without one.
/// A value that is not a quantity is an error naming the pool and the field.
pub fn nodes_limit(pool: &NodePool) -> Result<Option<i64>, String> {
    let Some(quantity) = pool.spec.limits.as_ref().and_then(|l| l.get("nodes")) else {
        return Ok(None);
    };
    parse_quantity("nodes", &quantity.0).map(Some).map_err(|_| {
        format!(
            "NodePool {:?}: spec.limits.nodes {:?} is not a quantity; give a whole number of nodes",
            pool.metadata.name.as_deref().unwrap_or_default(),
            quantity.0
        )
    })
}

/// One NodeClaim of a static pool, as the scale decision weighs it.
#[derive(Clone, Debug, PartialEq)]
pub struct StaticClaim {
    /// The NodeClaim's name.
    pub name: String,
    /// Being deleted already: counts towards the pool's size (its replacement must not overshoot
    /// `limits.nodes` while it drains) but is never chosen again.
    pub deleting: bool,
    /// The cloud provider has an instance for it (`status.providerID` set).
    pub launched: bool,
    /// Pods on its Node that are not DaemonSet pods: what scaling it down would reschedule.
    pub pods: usize,
    /// A pod on its Node asks not to be disrupted (`karpenter.sh/do-not-disrupt`).
    pub do_not_disrupt: bool,
}

/// What keeping a static pool at its size takes now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// NodeClaims to create from the pool's template.
    pub create: usize,
    /// NodeClaims to delete (scale-down), least disruptive first.
    pub delete: Vec<String>,
    /// Replicas `limits.nodes` keeps from being created.
    pub held_by_limit: usize,
}

/// Brings a static pool towards `replicas` NodeClaims.
///
/// Scale-up counts every NodeClaim, deleting ones included, as upstream does: a NodeClaim that is
/// draining still holds its instance, so creating its successor early would overshoot
/// `limits.nodes` (`nodes_limit`, the most NodeClaims the pool may hold). Scale-down counts only
/// the NodeClaims not yet deleting, so a replacement in flight is not mistaken for a surplus, and
/// removes the least disruptive first: not launched, then without workload pods, then the fewest
/// pods; nodes with a `do-not-disrupt` pod go last. Names break ties, so the choice is stable.
pub fn decide(replicas: i64, nodes_limit: Option<i64>, claims: &[StaticClaim]) -> Decision {
    let replicas = usize::try_from(replicas).unwrap_or(0);
    let total = claims.len();
    if total < replicas {
        let wanted = replicas - total;
        let room = nodes_limit.map_or(wanted, |limit| {
            usize::try_from(limit).unwrap_or(0).saturating_sub(total)
        });
        let create = wanted.min(room);
        return Decision {
            create,
            delete: Vec::new(),
            held_by_limit: wanted - create,
        };
    }
    let mut active: Vec<&StaticClaim> = claims.iter().filter(|c| !c.deleting).collect();
    let surplus = active.len().saturating_sub(replicas);
    active.sort_by(|a, b| {
        (a.launched, a.do_not_disrupt, a.pods, &a.name).cmp(&(
            b.launched,
            b.do_not_disrupt,
            b.pods,
            &b.name,
        ))
    });
    Decision {
        create: 0,
        delete: active
            .into_iter()
            .take(surplus)
            .map(|c| c.name.clone())
            .collect(),
        held_by_limit: 0,
    }
}

/// The instance types a static NodeClaim may become: every type the pool's requirements allow
/// with an available offering, cheapest first (so the launch takes the cheapest), at most
/// [`MAX_INSTANCE_TYPES`] as for a provisioned NodeClaim. There are no pods to size it for.
pub fn options<'a>(
    types: &'a [InstanceType],
    requirements: &Requirements,
) -> Vec<&'a InstanceType> {
    let mut priced: Vec<(f64, &InstanceType)> = types
        .iter()
        .filter(|it| type_matches(it, requirements))
        .filter_map(|it| Some((cheapest_offering(it, requirements)?.price, it)))
        .collect();
    priced.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    priced.truncate(MAX_INSTANCE_TYPES);
    priced.into_iter().map(|(_, it)| it).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, launched: bool, pods: usize) -> StaticClaim {
        StaticClaim {
            name: name.into(),
            deleting: false,
            launched,
            pods,
            do_not_disrupt: false,
        }
    }

    #[test]
    fn an_empty_pool_gets_its_replicas() {
        assert_eq!(
            decide(3, None, &[]),
            Decision {
                create: 3,
                ..Decision::default()
            }
        );
    }

    #[test]
    fn a_pool_at_its_size_is_left_alone() {
        let claims = [claim("a", true, 0), claim("b", true, 4)];
        assert_eq!(decide(2, None, &claims), Decision::default());
    }

    #[test]
    fn limits_nodes_caps_the_replicas_created() {
        let decision = decide(3, Some(2), &[claim("a", true, 0)]);
        assert_eq!((decision.create, decision.held_by_limit), (1, 1));
        let full = decide(3, Some(1), &[claim("a", true, 0)]);
        assert_eq!((full.create, full.held_by_limit), (0, 2));
    }

    #[test]
    fn a_deleting_claim_counts_towards_scale_up_but_not_scale_down() {
        let mut draining = claim("old", true, 2);
        draining.deleting = true;
        // One drains, one runs: two of two, nothing to create until the drained one is gone.
        let claims = [draining.clone(), claim("new", false, 0)];
        assert_eq!(decide(2, None, &claims), Decision::default());
        // Its replacement in flight is not a surplus.
        assert_eq!(decide(1, None, &claims), Decision::default());
        assert_eq!(
            decide(0, None, &claims).delete,
            ["new"],
            "only the claim not deleting yet is chosen"
        );
    }

    #[test]
    fn scale_down_removes_the_least_disruptive_first() {
        let mut protected = claim("a-protected", true, 0);
        protected.do_not_disrupt = true;
        let claims = [
            protected,
            claim("b-busy", true, 5),
            claim("c-light", true, 1),
            claim("d-empty", true, 0),
            claim("e-launching", false, 0),
            claim("f-empty", true, 0),
        ];
        assert_eq!(
            decide(1, None, &claims).delete,
            ["e-launching", "d-empty", "f-empty", "c-light", "b-busy"]
        );
        assert_eq!(decide(4, None, &claims).delete, ["e-launching", "d-empty"]);
    }

    #[test]
    fn negative_replicas_or_limits_create_nothing() {
        assert_eq!(decide(-1, None, &[]).create, 0);
        assert_eq!(decide(2, Some(-5), &[]).create, 0);
    }
}
