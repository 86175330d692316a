//! NodeOverlay status (with the `NodeOverlay` gate on): whether each overlay is in effect, as
//! upstream's `ValidationSucceeded` and `Ready` conditions. Which overlays take effect is decided
//! where the scheduler's input is prepared (`snapshot::scheduling_input`), so the conditions say
//! exactly what the provisioner and the disruption engine use; this shell only writes them.
//!
//! A conflict depends on other overlays and on the instance types the NodePools see, not only on
//! the overlay itself, so the controller polls every overlay at once rather than reconciling one
//! on its own changes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::apis::NodeOverlay;
use crate::apis::conditions::{self, FALSE, READY, TRUE};
use crate::apis::nodeoverlay::VALIDATION_SUCCEEDED;
use crate::runtime::panics::guarded_pass;
use crate::runtime::{Context, Error};
use crate::snapshot::scheduling_input::{OverlayReport, overlays_not_applied};

/// Between passes (upstream re-validates overlays on a comparable period and on changes).
const PERIOD: Duration = Duration::from_secs(10);

/// Runs until the task is dropped.
pub async fn run(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    loop {
        if let Some(Err(e)) = guarded_pass("nodeoverlay.status", &ctx, once(&ctx)).await {
            tracing::warn!(controller = "nodeoverlay.status", error = %e, "NodeOverlay status pass failed; will retry");
        }
        tokio::time::sleep(PERIOD).await;
    }
}

/// One pass: every NodeOverlay's conditions brought up to date; returns how many statuses were
/// written (an overlay whose conditions already say the same is not written).
pub async fn once(ctx: &Context) -> Result<usize, Error> {
    let cluster = ctx.state.snapshot();
    if cluster.node_overlays.is_empty() {
        return Ok(0);
    }
    let types = crate::controllers::provisioning::instance_types(ctx, &cluster).await;
    let not_applied: HashMap<String, OverlayReport> =
        overlays_not_applied(&cluster, &types, &ctx.options)
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect();
    let api: Api<NodeOverlay> = Api::all(ctx.client.clone());
    let now = ctx.clock.now();
    let mut written = 0;
    for overlay in &cluster.node_overlays {
        let name = overlay.name_any();
        let before = overlay
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let mut current = before.clone();
        match not_applied.get(&name) {
            Some(report) => {
                conditions::set(
                    &mut current,
                    VALIDATION_SUCCEEDED,
                    FALSE,
                    report.condition_reason,
                    &report.reason,
                    now,
                );
                conditions::set(
                    &mut current,
                    READY,
                    FALSE,
                    "UnhealthyDependents",
                    "ValidationSucceeded=False",
                    now,
                );
            }
            None => {
                conditions::set(&mut current, VALIDATION_SUCCEEDED, TRUE, "", "", now);
                conditions::set(&mut current, READY, TRUE, "", "", now);
            }
        }
        if current != before {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": current}})),
            )
            .await?;
            written += 1;
        }
    }
    Ok(written)
}
