//! The interruption consumer: the cloud provider's interruption notices (on AWS: EC2 spot
//! interruption warnings, rebalance recommendations, scheduled changes and instance state changes
//! from the SQS queue named by `INTERRUPTION_QUEUE`, fed by EventBridge rules) are each turned into
//! an action on the NodeClaim of the affected instance — deletion, which drains the node while the
//! provisioner replaces it — and the provider records what they say about capacity (an
//! interrupted spot offering becomes unavailable) so the replacement goes elsewhere.
//!
//! A notice is acknowledged only once everything it asked for is done: when marking the pool or
//! deleting a NodeClaim fails, it stays, and the source delivers it again (SQS: after its
//! visibility timeout, 20 s), so a passing API server outage does not lose an interruption.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::api::{Api, DeleteParams};
use kube::runtime::events::{Event, EventType};
use kube::{Client, ResourceExt};

use crate::apis::NodeClaim;
use crate::cloudprovider::interruption::{
    InterruptionAction, InterruptionEvent, InterruptionMessage,
};
use crate::cloudprovider::{CloudProvider, provider_id_instance};
use crate::metrics::METRICS;
use crate::runtime::Context;
use crate::runtime::events::EventRecorder;
use crate::runtime::panics::guarded_pass;

/// Polls the provider's interruption source until the task is dropped (SQS long polling makes
/// this cheap); returns at once when the provider has none.
pub async fn run(ctx: Arc<Context>) {
    loop {
        let messages = match ctx.provider.interruptions().await {
            None => return,
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                tracing::warn!(controller = "interruption", error = %e, "could not read the interruption queue");
                tokio::time::sleep(Duration::from_secs(10)).await;
                continue;
            }
        };
        let claims = ctx.state.nodeclaims.state();
        let pass = async {
            for message in messages {
                if let Err(e) = handle(
                    &ctx.client,
                    &ctx.recorder,
                    &*ctx.provider,
                    &claims,
                    &message,
                    ctx.clock.now(),
                )
                .await
                {
                    tracing::warn!(controller = "interruption", error = %e, "interruption not handled; the message stays on the queue and comes back");
                }
            }
        };
        guarded_pass("interruption", &ctx, pass).await;
    }
}

/// The NodeClaims whose instances an event names.
pub fn affected<'a>(event: &InterruptionEvent, claims: &'a [Arc<NodeClaim>]) -> Vec<&'a NodeClaim> {
    claims
        .iter()
        .filter(|claim| {
            claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(provider_id_instance)
                .is_some_and(|id| event.instance_ids.iter().any(|i| i == id))
        })
        .map(|claim| &**claim)
        .collect()
}

/// Acts on one notice against `claims` (the NodeClaims known now) and acknowledges it when
/// everything succeeded. An error leaves the notice for redelivery. A handled notice's time on
/// the queue (from the event's time to `now`) goes into
/// `karpenter_interruption_message_queue_duration_seconds`, as upstream measures it.
pub async fn handle(
    client: &Client,
    recorder: &EventRecorder,
    cloud: &dyn CloudProvider,
    claims: &[Arc<NodeClaim>],
    message: &InterruptionMessage,
    now: DateTime<Utc>,
) -> Result<(), String> {
    if let Some(event) = &message.event {
        act(client, recorder, cloud, claims, event).await?;
        if let Some(sent) = event.time {
            METRICS
                .interruption_message_queue_duration_seconds
                .observe(seconds_between(sent, now));
        }
    }
    cloud
        .acknowledge_interruption(message)
        .await
        .map_err(|e| format!("could not delete the handled message: {e}"))?;
    METRICS.interruption_deleted_messages_total.inc();
    Ok(())
}

/// Seconds from `from` to `to`, never negative (the event's clock may run ahead of ours).
fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds().max(0) as f64 / 1000.0
}

async fn act(
    client: &Client,
    recorder: &EventRecorder,
    cloud: &dyn CloudProvider,
    claims: &[Arc<NodeClaim>],
    event: &InterruptionEvent,
) -> Result<(), String> {
    let kind = event.kind.as_str();
    METRICS
        .interruption_received_messages_total
        .with_label_values(&[kind])
        .inc();
    // Marked before the deletions so the replacements avoid the offering; a failure to mark must
    // not hold up the drain (a spot notice gives two minutes), so it is reported with the rest
    // and the message is redelivered.
    let mut failed = Vec::new();
    if let Err(e) = cloud.record_interruption(event).await {
        failed.push(format!(
            "could not mark the interrupted offering unavailable: {e}"
        ));
    }
    let api: Api<NodeClaim> = Api::all(client.clone());
    for claim in affected(event, claims) {
        let name = claim.name_any();
        let note = format!("{kind} for instances {}", event.instance_ids.join(", "));
        let e = Event {
            type_: EventType::Warning,
            reason: "Interruption".into(),
            note: Some(note.clone()),
            action: kind.into(),
            secondary: None,
        };
        if let Err(err) = recorder
            .publish(&e, &kube::Resource::object_ref(claim, &()))
            .await
        {
            tracing::debug!(controller = "interruption", error = %err, "could not record event");
        }
        if event.action != InterruptionAction::DeleteNodeClaim
            || claim.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        tracing::info!(controller = "interruption", nodeclaim = %name, message = %note, "deleting nodeclaim");
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => failed.push(format!("deleting NodeClaim {name}: {err}")),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloudprovider::interruption::InterruptionKind;

    fn claim(name: &str, provider_id: Option<&str>) -> Arc<NodeClaim> {
        let mut c: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []}
        }))
        .expect("nodeclaim");
        if let Some(id) = provider_id {
            c.status = Some(
                serde_json::from_value(serde_json::json!({"providerID": id})).expect("status"),
            );
        }
        Arc::new(c)
    }

    #[test]
    fn only_the_claims_of_the_named_instances_are_affected() {
        let claims = [
            claim("a", Some("aws:///us-east-1a/i-1")),
            claim("b", Some("aws:///us-east-1b/i-2")),
            claim("c", None),
        ];
        let event = InterruptionEvent {
            kind: InterruptionKind::ScheduledChange,
            instance_ids: vec!["i-2".into(), "i-9".into()],
            action: InterruptionAction::DeleteNodeClaim,
            time: None,
        };
        let names: Vec<String> = affected(&event, &claims)
            .iter()
            .map(|c| c.name_any())
            .collect();
        assert_eq!(names, ["b"]);
    }
}
