//! Garbage collection between the cluster and the cloud, in both directions: a NodeClaim whose
//! instance is gone (terminated outside Karpenter, or reclaimed) is deleted so its pods are
//! planned again, and an instance no NodeClaim accounts for (a launch whose NodeClaim was lost,
//! say in a crash between the two writes) is terminated so it does not bill forever.
//!
//! [`orphaned_instances`] and [`vanished_claims`] are pure; [`run`] is the loop.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};

use crate::apis::NodeClaim;
use crate::apis::conditions;
use crate::cloudprovider::{CloudError, Instance, InstanceState};
use crate::controllers::Context;

use super::LAUNCHED;

/// Instances younger than this are left alone: their NodeClaim may not be visible yet.
pub const INSTANCE_GRACE: chrono::Duration = chrono::Duration::seconds(30);
/// NodeClaims launched less than this long ago are not checked: the cloud's view may lag.
pub const CLAIM_GRACE: chrono::Duration = chrono::Duration::minutes(1);
/// How often garbage is collected.
const PERIOD: Duration = Duration::from_secs(10);

/// Instances (provider IDs) to terminate: running, older than [`INSTANCE_GRACE`], and claimed
/// by no NodeClaim, neither by the NodeClaim tag nor by provider ID.
pub fn orphaned_instances(
    instances: &[Instance],
    claims: &[Arc<NodeClaim>],
    now: DateTime<Utc>,
) -> Vec<String> {
    let names: HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
    let ids: HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.as_deref())
        .collect();
    instances
        .iter()
        .filter(|i| !i.state.is_terminating())
        .filter(|i| now - i.launch_time >= INSTANCE_GRACE)
        .filter(|i| !ids.contains(i.provider_id.as_str()))
        .filter(|i| i.nodeclaim.as_ref().is_none_or(|n| !names.contains(n)))
        .map(|i| i.provider_id.clone())
        .collect()
}

/// NodeClaims worth asking the cloud about: launched at least [`CLAIM_GRACE`] ago and not
/// already being deleted, with their provider IDs.
pub fn vanished_claims(claims: &[Arc<NodeClaim>], now: DateTime<Utc>) -> Vec<(String, String)> {
    claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| {
            let status = c.status.as_ref()?;
            let launched = conditions::find(&status.conditions, LAUNCHED)
                .filter(|l| l.status == conditions::TRUE)?;
            (now - launched.last_transition_time >= CLAIM_GRACE)
                .then(|| (c.name_any(), status.provider_id.clone()))
                .and_then(|(n, id)| Some((n, id?)))
        })
        .collect()
}

/// Runs until the task is dropped.
pub async fn run(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    loop {
        tokio::time::sleep(PERIOD).await;
        collect(&ctx).await;
    }
}

async fn collect(ctx: &Context) {
    let now = ctx.clock.now();
    let claims = ctx.state.nodeclaims.state();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for (name, id) in vanished_claims(&claims, now) {
        let gone = match ctx.provider.get(&id).await {
            Ok(i) => i.state == InstanceState::Terminated,
            Err(CloudError::NotFound(_)) => true,
            Err(e) => {
                tracing::debug!(controller = "garbagecollection", nodeclaim = %name, error = %e, "could not look the instance up");
                false
            }
        };
        if gone {
            tracing::info!(controller = "garbagecollection", nodeclaim = %name, provider_id = %id, "instance is gone; deleting nodeclaim");
            if let Err(e) = api.delete(&name, &DeleteParams::default()).await {
                tracing::warn!(controller = "garbagecollection", nodeclaim = %name, error = %e, "could not delete nodeclaim");
            }
        }
    }
    let instances = match ctx.provider.list().await {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(controller = "garbagecollection", error = %e, "could not list instances");
            return;
        }
    };
    // Read the claims again: one created since the first read must not lose its instance.
    let claims = ctx.state.nodeclaims.state();
    for id in orphaned_instances(&instances, &claims, now) {
        tracing::info!(controller = "garbagecollection", provider_id = %id, "terminating an instance no NodeClaim owns");
        match ctx.provider.delete(&id).await {
            Ok(()) | Err(CloudError::NotFound(_)) => {}
            Err(e) => {
                tracing::warn!(controller = "garbagecollection", provider_id = %id, error = %e, "could not terminate instance")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::instance_type::CapacityType;
    use serde_json::json;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).expect("t")
    }

    fn instance(id: &str, claim: Option<&str>, launched: i64, state: InstanceState) -> Instance {
        Instance {
            provider_id: id.into(),
            nodeclaim: claim.map(Into::into),
            nodepool: None,
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
            image_id: None,
            state,
            launch_time: t(launched),
        }
    }

    fn claim(
        name: &str,
        id: Option<&str>,
        launched_at: Option<i64>,
        deleting: bool,
    ) -> Arc<NodeClaim> {
        let mut v = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                     "requirements": []},
            "status": {"conditions": []},
        });
        if let Some(id) = id {
            v["status"]["providerID"] = json!(id);
        }
        if let Some(at) = launched_at {
            v["status"]["conditions"] = json!([{"type": "Launched", "status": "True",
                "lastTransitionTime": t(at), "reason": "Launched", "message": ""}]);
        }
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(serde_json::from_value(v).expect("claim"))
    }

    #[test]
    fn only_old_unclaimed_running_instances_are_orphans() {
        let claims = vec![
            claim("a", Some("id-a"), Some(0), false),
            claim("b", None, None, false),
        ];
        let instances = vec![
            instance("id-a", Some("a"), 0, InstanceState::Running),
            instance("id-b", Some("b"), 0, InstanceState::Pending),
            instance("id-x", Some("gone"), 0, InstanceState::Running),
            instance("id-y", None, 0, InstanceState::Running),
            instance("id-young", Some("gone"), 90, InstanceState::Running),
            instance("id-dying", Some("gone"), 0, InstanceState::ShuttingDown),
        ];
        assert_eq!(
            orphaned_instances(&instances, &claims, t(100)),
            ["id-x", "id-y"]
        );
    }

    #[test]
    fn claims_are_checked_a_minute_after_launch() {
        let claims = vec![
            claim("old", Some("id-old"), Some(0), false),
            claim("new", Some("id-new"), Some(30), false),
            claim("unlaunched", None, None, false),
            claim("deleting", Some("id-d"), Some(0), true),
        ];
        assert_eq!(
            vanished_claims(&claims, t(70)),
            [("old".to_string(), "id-old".to_string())]
        );
    }
}
