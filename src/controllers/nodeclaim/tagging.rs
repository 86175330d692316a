//! Names a NodeClaim's instance after its Node once it registers, as upstream's
//! `nodeclaim.tagging` controller does: the cloud writes `Name`, `karpenter.sh/nodeclaim` and
//! `eks:eks-cluster-name` (keeping those the instance already has), and the NodeClaim is annotated
//! `karpenter.k8s.aws/tagged` and `compatibility.karpenter.k8s.aws/cluster-name-tagged` so the
//! instance is not looked at again. A failure is logged and retried ([`RETRY`]); it never holds
//! the NodeClaim's lifecycle up.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::apis::NodeClaim;
use crate::apis::labels;
use crate::cloudprovider::{CloudError, Tagging};
use crate::runtime::{Context, Error};

/// How soon a failed tagging is tried again once the NodeClaim is initialized (before, the
/// lifecycle's own 5-second rechecks retry it). The tags are for people reading the console, so a
/// failure never holds the NodeClaim up, and a missing permission must not become a stream of
/// calls per node.
pub const RETRY: Duration = Duration::from_secs(5 * 60);

/// The Node name to tag the NodeClaim's instance with, or `None` when there is nothing to do:
/// both annotations already say it is done, the Node has not registered yet, or the NodeClaim is
/// going away.
pub fn pending<'a>(claim: &NodeClaim, node_name: Option<&'a str>) -> Option<&'a str> {
    let done = |key: &str| claim.annotations().get(key).is_some_and(|v| v == "true");
    if done(labels::TAGGED) && done(labels::CLUSTER_NAME_TAGGED) {
        return None;
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return None;
    }
    node_name.filter(|n| !n.is_empty())
}

/// Tags the instance of registered NodeClaim `claim` (its Node is `node_name`) and records that
/// on the NodeClaim; `Some(wait)` when the cloud paces the tagging and the NodeClaim's turn comes
/// after `wait` (nothing is recorded; call again then). An instance that is gone is left to the
/// lifecycle and garbage collection.
pub async fn tag(
    claim: &NodeClaim,
    node_name: &str,
    ctx: &Context,
) -> Result<Option<Duration>, Error> {
    let Some(provider_id) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) else {
        return Ok(None);
    };
    let name = claim.name_any();
    match ctx
        .provider
        .tag_registered(provider_id, &name, node_name)
        .await
    {
        Ok(Tagging::Done) => {}
        Ok(Tagging::Paced(wait)) => return Ok(Some(wait)),
        Err(CloudError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            labels::TAGGED: "true",
            labels::CLUSTER_NAME_TAGGED: "true",
        }}})),
    )
    .await?;
    tracing::info!(controller = "nodeclaim.lifecycle", nodeclaim = %name, node = node_name, provider_id, "tagged instance");
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(annotations: serde_json::Value, deleting: bool) -> NodeClaim {
        let mut meta = json!({"name": "default-x", "annotations": annotations});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": meta,
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
        }))
        .expect("claim")
    }

    #[test]
    fn a_registered_claim_is_tagged_until_both_annotations_say_so() {
        let node = Some("ip-10-0-0-1.ec2.internal");
        assert_eq!(pending(&claim(json!({}), false), node), node);
        assert_eq!(pending(&claim(json!({}), false), None), None);
        assert_eq!(pending(&claim(json!({}), false), Some("")), None);
        assert_eq!(pending(&claim(json!({}), true), node), None);
        assert_eq!(
            pending(&claim(json!({labels::TAGGED: "true"}), false), node),
            node,
            "tagged before eks:eks-cluster-name was: tagged again"
        );
        assert_eq!(
            pending(
                &claim(
                    json!({labels::TAGGED: "true", labels::CLUSTER_NAME_TAGGED: "true"}),
                    false
                ),
                node
            ),
            None
        );
    }
}
