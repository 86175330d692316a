//! The NodePool's `NodeRegistrationHealthy` condition, as upstream v1.14's NodeClaim lifecycle
//! writes it: each NodeClaim that registers, or is given up on at the launch or registration
//! timeout, is an outcome for its NodePool (`state::registration_health`); the condition turns
//! `False` once the recent outcomes are unhealthy (reason `RegistrationFailed` for a launched
//! instance that never joined, else the `Launched` condition's reason and message) and `True`
//! on a registration while they are healthy. The NodePool controller resets it to `Unknown` when
//! the pool or its EC2NodeClass changes. It is informational: nothing stops launching from an
//! unhealthy pool.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::apis::conditions::{self, FALSE, TRUE};
use crate::apis::nodeclaim::condition::LAUNCHED;
use crate::apis::nodepool::condition::NODE_REGISTRATION_HEALTHY;
use crate::apis::{NodeClaim, NodePool, labels};
use crate::runtime::Context;
use crate::state::registration_health::Health;

/// How often a write that lost a race with another writer of the NodePool's status is tried.
const ATTEMPTS: usize = 3;

/// Records that `claim` registered (`true`) or was given up on (`false`), and updates its
/// NodePool's `NodeRegistrationHealthy` when that changes it. Best effort: a failure is logged,
/// never holds the NodeClaim's own lifecycle up.
pub async fn record(ctx: &Context, claim: &NodeClaim, registered: bool) {
    let Some(pool) = claim.labels().get(labels::NODEPOOL) else {
        return;
    };
    if let Err(e) = write(ctx, claim, pool, registered).await {
        tracing::warn!(controller = "nodeclaim.lifecycle", nodepool = %pool, error = %e, "could not update NodeRegistrationHealthy");
    }
}

/// The condition `health` calls for after an outcome, if any: `(status, reason, message)`.
fn wanted(
    health: Health,
    registered: bool,
    claim: &NodeClaim,
) -> Option<(&'static str, String, String)> {
    match (health, registered) {
        (Health::Healthy, true) => Some((TRUE, String::new(), String::new())),
        (Health::Unhealthy, false) => {
            let launched = claim
                .status
                .as_ref()
                .and_then(|s| conditions::find(&s.conditions, LAUNCHED));
            Some(match launched {
                Some(l) if l.status == TRUE => (
                    FALSE,
                    "RegistrationFailed".to_string(),
                    "Failed to register node".to_string(),
                ),
                Some(l) => (FALSE, l.reason.clone(), l.message.clone()),
                None => (
                    FALSE,
                    "LaunchFailed".to_string(),
                    "Failed to launch node".to_string(),
                ),
            })
        }
        _ => None,
    }
}

async fn write(
    ctx: &Context,
    claim: &NodeClaim,
    pool: &str,
    registered: bool,
) -> Result<(), kube::Error> {
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    let mut recorded = None;
    for attempt in 1..=ATTEMPTS {
        let Some(current) = api.get_opt(pool).await? else {
            return Ok(());
        };
        let uid = current.metadata.uid.clone().unwrap_or_default();
        let health =
            *recorded.get_or_insert_with(|| ctx.registration_health.record(&uid, registered));
        let Some((status, reason, message)) = wanted(health, registered, claim) else {
            return Ok(());
        };
        let mut list = current
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        if conditions::find(&list, NODE_REGISTRATION_HEALTHY).is_some_and(|c| c.status == status) {
            return Ok(());
        }
        conditions::set(
            &mut list,
            NODE_REGISTRATION_HEALTHY,
            status,
            &reason,
            &message,
            ctx.clock.now(),
        );
        if let Some(c) = list
            .iter_mut()
            .find(|c| c.type_ == NODE_REGISTRATION_HEALTHY)
        {
            c.observed_generation = current.metadata.generation;
        }
        // The resourceVersion makes the write conditional: the list is replaced whole, and a
        // concurrent writer's conditions must not be lost.
        let patch = json!({
            "metadata": {"resourceVersion": current.resource_version()},
            "status": {"conditions": list},
        });
        match api
            .patch_status(pool, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(controller = "nodeclaim.lifecycle", nodepool = %pool, status, reason = %reason, "NodeRegistrationHealthy changed");
                return Ok(());
            }
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < ATTEMPTS => continue,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
