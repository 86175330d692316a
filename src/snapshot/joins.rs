//! The one join between Nodes and NodeClaims. Upstream joins them by provider ID, which both
//! carry once the instance exists; a NodeClaim written without one (a hand-made manifest for
//! `simulate`) falls back to the Node name its status records. Every consumer — the snapshot
//! adapters, the lifecycle, garbage collection, disruption — asks here, so they agree.

use std::borrow::Borrow;

use k8s_openapi::api::core::v1::Node;

use crate::apis::NodeClaim;

/// The Node's `spec.providerID`, when set and not empty.
pub fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()?
        .provider_id
        .as_deref()
        .filter(|id| !id.is_empty())
}

/// The NodeClaim's `status.providerID`, when set and not empty.
pub fn claim_provider_id(claim: &NodeClaim) -> Option<&str> {
    claim
        .status
        .as_ref()?
        .provider_id
        .as_deref()
        .filter(|id| !id.is_empty())
}

/// Whether `node` is the Node of `claim`: the same provider ID, or, when either lacks one, the
/// Node name the NodeClaim's status records.
pub fn is_node_of(claim: &NodeClaim, node: &Node) -> bool {
    match (claim_provider_id(claim), node_provider_id(node)) {
        (Some(claim_id), Some(node_id)) => claim_id == node_id,
        _ => {
            let recorded = claim.status.as_ref().and_then(|s| s.node_name.as_deref());
            recorded.is_some_and(|n| !n.is_empty() && node.metadata.name.as_deref() == Some(n))
        }
    }
}

/// The NodeClaim `node` belongs to, among `claims`.
pub fn claim_of<'a, C: Borrow<NodeClaim> + 'a>(
    claims: impl IntoIterator<Item = &'a C>,
    node: &Node,
) -> Option<&'a C> {
    claims.into_iter().find(|c| is_node_of((*c).borrow(), node))
}

/// The Node of `claim`, among `nodes`.
pub fn node_of<'a, N: Borrow<Node> + 'a>(
    nodes: impl IntoIterator<Item = &'a N>,
    claim: &NodeClaim,
) -> Option<&'a N> {
    nodes.into_iter().find(|n| is_node_of(claim, (*n).borrow()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str, id: Option<&str>) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"providerID": id}}))
            .expect("node")
    }

    fn claim(node_name: Option<&str>, id: Option<&str>) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                     "requirements": []},
            "status": {"nodeName": node_name, "providerID": id},
        }))
        .expect("claim")
    }

    #[test]
    fn provider_ids_decide_when_both_have_one() {
        let n = node("n1", Some("aws:///us-east-1a/i-1"));
        assert!(is_node_of(&claim(None, Some("aws:///us-east-1a/i-1")), &n));
        assert!(!is_node_of(
            &claim(Some("n1"), Some("aws:///us-east-1a/i-2")),
            &n
        ));
    }

    #[test]
    fn the_recorded_node_name_decides_without_a_provider_id() {
        assert!(is_node_of(
            &claim(Some("n1"), None),
            &node("n1", Some("aws:///x/i-1"))
        ));
        assert!(is_node_of(
            &claim(Some("n1"), Some("aws:///x/i-1")),
            &node("n1", None)
        ));
        assert!(!is_node_of(&claim(None, None), &node("n1", None)));
        assert!(!is_node_of(&claim(Some(""), None), &node("", None)));
    }

    #[test]
    fn lookups_find_the_partner_among_many() {
        let nodes = vec![node("a", Some("id-a")), node("b", Some("id-b"))];
        let found = node_of(&nodes, &claim(None, Some("id-b"))).map(|n| n.metadata.name.clone());
        assert_eq!(found, Some(Some("b".to_string())));
        let claims = vec![claim(None, Some("id-a"))];
        assert!(claim_of(&claims, &nodes[0]).is_some());
        assert!(claim_of(&claims, &nodes[1]).is_none());
    }
}
