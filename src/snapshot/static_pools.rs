//! The adapter from a [`Snapshot`] to the static-pool decision
//! ([`crate::scheduling::static_capacity`]): a static pool's NodeClaims as the decision weighs
//! them, and its `limits.nodes`. The controller and `simulate` both decide through [`decide`].

use crate::apis::{NodePool, labels};
use crate::scheduling::static_capacity::{self, Decision, StaticClaim};

use super::{Snapshot, is_daemon_pod, joins};

/// Whether a NodePool is static: `spec.replicas` set (the CRD keeps it from changing either way).
pub fn is_static(pool: &NodePool) -> bool {
    pool.spec.replicas.is_some()
}

/// The NodeClaims of the pool called `pool` (by the `karpenter.sh/nodepool` label), with what
/// scaling each down would disrupt: the non-DaemonSet pods on its Node.
pub fn claims_of(cluster: &Snapshot, pool: &str) -> Vec<StaticClaim> {
    let bound = cluster.bound_pods();
    cluster
        .nodeclaims
        .iter()
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::NODEPOOL))
                .is_some_and(|p| p == pool)
        })
        .map(|claim| {
            let pods: Vec<_> = joins::node_of(&cluster.nodes, claim)
                .and_then(|node| bound.get(node.metadata.name.as_deref()?))
                .into_iter()
                .flatten()
                .filter(|p| !is_daemon_pod(&p.metadata))
                .collect();
            StaticClaim {
                name: claim.metadata.name.clone().unwrap_or_default(),
                deleting: claim.metadata.deletion_timestamp.is_some(),
                launched: joins::claim_provider_id(claim).is_some(),
                pods: pods.len(),
                do_not_disrupt: pods.iter().any(|p| {
                    p.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(labels::DO_NOT_DISRUPT))
                }),
            }
        })
        .collect()
}

/// What keeping a static pool at `spec.replicas` takes now; `None` for a dynamic pool.
pub fn decide(cluster: &Snapshot, pool: &NodePool) -> Option<Result<Decision, String>> {
    let replicas = pool.spec.replicas?;
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    Some(
        static_capacity::nodes_limit(pool)
            .map(|limit| static_capacity::decide(replicas, limit, &claims_of(cluster, name))),
    )
}
