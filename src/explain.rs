//! `karpenter-rs explain pod|node`: why one pod is not provisioned, or why one node is not
//! disrupted, for people (a table) and machines (JSON).
//!
//! Nothing is decided here. A pod's answer is the scheduler's own (`scheduler::diagnose`, the
//! same solve `run` and `simulate` do, with the reasons it records); a node's is the disruption
//! engine's `disruption::explain`. This module finds the object and renders the answer.

use std::fmt;

use serde::Serialize;

use crate::catalog::Catalog;
use crate::scheduling::scheduler::{self, Placement};
use crate::scheduling::unschedulable::PodFailure;
use crate::snapshot::scheduling_input::{NodePoolReport, prepare};
use crate::snapshot::{EngineOptions, Snapshot};

/// How many instance-type options of a planned NodeClaim the table lists.
const OPTIONS_SHOWN: usize = 5;

/// The answer for one pod.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    /// `namespace/name`.
    pub pod: String,
    /// What the scheduler makes of it.
    pub verdict: PodVerdict,
    /// NodePools left out before scheduling (invalid, or their EC2NodeClass unusable).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unused_nodepools: Vec<NodePoolReport>,
}

/// What the scheduler makes of a pod.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum PodVerdict {
    /// Already bound to a node: nothing to provision.
    Bound {
        /// The node.
        node: String,
    },
    /// Not pending (finished, a DaemonSet's, or being deleted): Karpenter does not provision for
    /// it.
    NotPending,
    /// The pod's spec cannot be scheduled by Karpenter at all.
    Invalid {
        /// Why, and what to change.
        reason: String,
    },
    /// It fits on an existing node.
    FitsExisting {
        /// The node.
        node: String,
    },
    /// A new NodeClaim would be launched for it.
    NewNodeClaim {
        /// Its NodePool.
        nodepool: String,
        /// Its instance-type options, cheapest first.
        instance_types: Vec<String>,
        /// Pods it would hold, this one included.
        pods: usize,
    },
    /// It cannot be placed.
    Unschedulable {
        /// The reason as the `FailedScheduling` event states it.
        reason: String,
        /// Every existing node and NodePool it was tried against, with the first constraint that
        /// failed and the fix.
        failure: PodFailure,
    },
}

/// Explains pod `key` (`namespace/name`, or `name` in `default`); `Err` names a pod the input
/// does not hold.
pub fn pod(
    cluster: &Snapshot,
    catalog: &Catalog,
    options: &EngineOptions,
    key: &str,
) -> Result<PodExplanation, String> {
    let key = if key.contains('/') {
        key.to_string()
    } else {
        format!("default/{key}")
    };
    let Some(found) = cluster.pods.iter().find(|p| p.key() == key) else {
        return Err(format!(
            "no pod {key} in the input; pass NAMESPACE/NAME as `kubectl get pods -A` lists it (pods of Deployments and other workloads in files are named by `simulate`'s placements)"
        ));
    };
    let prepared = prepare(cluster, catalog, options);
    let unused_nodepools = prepared.skipped_pools;
    let verdict = if let Some(node) = found.node_name() {
        PodVerdict::Bound {
            node: node.to_string(),
        }
    } else if let Some(invalid) = prepared.invalid_pods.iter().find(|u| u.pod == key) {
        PodVerdict::Invalid {
            reason: invalid.reason.clone(),
        }
    } else if let Some(index) = prepared.input.pods.iter().position(|p| p.key() == key) {
        let input = &prepared.input;
        match scheduler::diagnose(input, index) {
            (_, Some(failure)) => PodVerdict::Unschedulable {
                reason: failure.to_string(),
                failure,
            },
            (outcome, None) => match outcome.placements.get(index).cloned().flatten() {
                Some(Placement::Existing(n)) => PodVerdict::FitsExisting {
                    node: input.existing[n].name.to_string(),
                },
                Some(Placement::NodeClaim(c)) => {
                    let claim = &outcome.nodeclaims[c];
                    let pool = &input.nodepools[claim.nodepool];
                    PodVerdict::NewNodeClaim {
                        nodepool: pool.name.to_string(),
                        instance_types: claim
                            .instance_types
                            .iter()
                            .map(|&t| pool.instance_types[t as usize].name.to_string())
                            .collect(),
                        pods: claim.pods.len(),
                    }
                }
                // The solver places every pod or reports it; neither is a pod it never saw.
                None => PodVerdict::NotPending,
            },
        }
    } else {
        PodVerdict::NotPending
    };
    Ok(PodExplanation {
        pod: key,
        verdict,
        unused_nodepools,
    })
}

impl fmt::Display for PodExplanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pod {}: ", self.pod)?;
        match &self.verdict {
            PodVerdict::Bound { node } => {
                writeln!(f, "bound to node {node}; nothing to provision.")?;
            }
            PodVerdict::NotPending => writeln!(
                f,
                "not pending (finished, being deleted, or a DaemonSet's); Karpenter does not provision for it."
            )?,
            PodVerdict::Invalid { reason } => {
                writeln!(f, "cannot be scheduled.")?;
                writeln!(f, "Reason: {reason}")?;
            }
            PodVerdict::FitsExisting { node } => {
                writeln!(f, "schedulable on existing node {node}.")?;
            }
            PodVerdict::NewNodeClaim {
                nodepool,
                instance_types,
                pods,
            } => {
                let shown: Vec<&str> = instance_types
                    .iter()
                    .take(OPTIONS_SHOWN)
                    .map(String::as_str)
                    .collect();
                let more = instance_types.len().saturating_sub(shown.len());
                writeln!(
                    f,
                    "schedulable on a new NodeClaim from NodePool {nodepool} ({pods} pod(s)), instance types {}{}.",
                    shown.join(", "),
                    if more > 0 {
                        format!(" (+{more} more)")
                    } else {
                        String::new()
                    }
                )?;
            }
            PodVerdict::Unschedulable { reason, failure } => {
                writeln!(f, "cannot be scheduled.")?;
                writeln!(f, "Reason: {reason}")?;
                writeln!(f, "Tried:")?;
                for a in &failure.attempts {
                    writeln!(f, "  {}: {}", a.target, a.failure)?;
                    writeln!(f, "      fix: {}", a.failure.fix())?;
                }
            }
        }
        for p in &self.unused_nodepools {
            writeln!(f, "NodePool {} not used: {}", p.name, p.reason)?;
        }
        Ok(())
    }
}
