//! Capacity blocks end on schedule: EC2 reclaims a capacity block's instances 30 minutes before
//! its end time. As upstream's capacity reservation expiration controller does, the NodeClaims
//! launched into a block are deleted once it is within
//! [`CAPACITY_BLOCK_EXPIRATION`](crate::cloudprovider::aws::capacity_reservations::CAPACITY_BLOCK_EXPIRATION)
//! of its end, so their nodes are drained through the usual termination (and their pods planned
//! elsewhere) before EC2 stops them. The end time comes from the EC2NodeClass status; the check
//! runs every minute against the clock, so it does not wait for the next resolution.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};

use crate::apis::labels;
use crate::apis::{EC2NodeClass, NodeClaim};
use crate::cloudprovider::aws::capacity_reservations::{TYPE_CAPACITY_BLOCK, is_expiring};
use crate::runtime::Context;
use crate::runtime::panics::guarded_pass;

/// How often NodeClaims in capacity blocks are checked (upstream: every minute).
pub const INTERVAL: Duration = Duration::from_secs(60);

/// The NodeClaims (name, reservation ID) launched into a capacity block that is expiring at
/// `now`, not already being deleted.
pub fn expiring(
    claims: &[Arc<NodeClaim>],
    classes: &[Arc<EC2NodeClass>],
    now: DateTime<Utc>,
) -> Vec<(String, String)> {
    claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            c.labels()
                .get(labels::CAPACITY_RESERVATION_TYPE)
                .map(String::as_str)
                == Some(TYPE_CAPACITY_BLOCK)
        })
        .filter_map(|c| {
            let id = c.labels().get(labels::CAPACITY_RESERVATION_ID)?;
            let class = classes
                .iter()
                .find(|k| k.name_any() == c.spec.node_class_ref.name)?;
            let reservation = class
                .status
                .as_ref()?
                .capacity_reservations
                .iter()
                .find(|r| r.id == *id)?;
            is_expiring(reservation, now).then(|| (c.name_any(), id.clone()))
        })
        .collect()
}

/// Deletes the NodeClaims of expiring capacity blocks. Public so the controller tests can drive
/// it without the polling loop.
pub async fn pass(ctx: &Context) -> Result<(), kube::Error> {
    let due = expiring(
        &ctx.state.nodeclaims.state(),
        &ctx.state.nodeclasses.state(),
        ctx.clock.now(),
    );
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for (name, reservation) in due {
        tracing::info!(controller = "capacityreservation.expiration", nodeclaim = %name, capacity_reservation = %reservation, "capacity block is ending; deleting the nodeclaim");
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Runs until the task is dropped.
pub async fn run(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    loop {
        if let Some(Err(e)) = guarded_pass("capacityreservation.expiration", &ctx, pass(&ctx)).await
        {
            tracing::warn!(controller = "capacityreservation.expiration", error = %e, "could not delete the nodeclaims of an ending capacity block");
        }
        tokio::time::sleep(INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(end: DateTime<Utc>) -> Arc<EC2NodeClass> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "gpu"},
                "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                         "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
                "status": {"capacityReservations": [
                    {"availabilityZone": "us-east-1a", "id": "cr-block", "instanceMatchCriteria": "targeted",
                     "instanceType": "p5.48xlarge", "ownerID": "012345678901", "reservationType": "capacity-block",
                     "endTime": end.to_rfc3339()},
                    {"availabilityZone": "us-east-1a", "id": "cr-odcr", "instanceMatchCriteria": "targeted",
                     "instanceType": "p5.48xlarge", "ownerID": "012345678901", "reservationType": "default",
                     "endTime": end.to_rfc3339()}
                ]}
            }))
            .expect("class"),
        )
    }

    fn claim(name: &str, reservation: &str, kind: &str) -> Arc<NodeClaim> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {
                    "karpenter.sh/capacity-type": "reserved",
                    "karpenter.k8s.aws/capacity-reservation-id": reservation,
                    "karpenter.k8s.aws/capacity-reservation-type": kind}},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                         "requirements": []}
            }))
            .expect("claim"),
        )
    }

    #[test]
    fn nodes_of_a_capacity_block_go_forty_minutes_before_its_end() {
        let end = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        let classes = [class(end)];
        let claims = [
            claim("in-block", "cr-block", "capacity-block"),
            claim("in-odcr", "cr-odcr", "default"),
            claim("elsewhere", "cr-unknown", "capacity-block"),
        ];
        let at = |minutes_before_end: i64| {
            expiring(
                &claims,
                &classes,
                end - chrono::Duration::minutes(minutes_before_end),
            )
        };
        assert!(at(41).is_empty(), "{:?}", at(41));
        assert_eq!(
            at(40),
            [("in-block".to_string(), "cr-block".to_string())],
            "the ODCR ending at the same time and a block the class does not list are left alone"
        );
        let mut deleting = serde_json::to_value(&*claims[0]).expect("claim JSON");
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let deleting: NodeClaim = serde_json::from_value(deleting).expect("claim");
        assert!(
            expiring(&[Arc::new(deleting)], &classes, end).is_empty(),
            "already being deleted"
        );
    }
}
