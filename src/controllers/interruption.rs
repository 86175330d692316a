//! The interruption queue consumer: EC2 spot interruption warnings, rebalance recommendations,
//! scheduled changes and instance state changes arrive on the SQS queue named by
//! `INTERRUPTION_QUEUE` (fed by EventBridge rules); each is turned into an action on the NodeClaim
//! of the affected instance — deletion, which drains the node while the provisioner replaces it —
//! and spot interruptions mark their offering unavailable so the replacement goes elsewhere.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::runtime::events::{Event, EventType};

use crate::apis::NodeClaim;
use crate::cloudprovider::aws::AwsProvider;
use crate::cloudprovider::aws::interruption::{InterruptionAction, parse_message};
use crate::cloudprovider::provider_id_instance;
use crate::controllers::Context;
use crate::metrics::METRICS;

/// Polls the queue until the task is dropped (SQS long polling makes this cheap).
pub async fn run(ctx: Arc<Context>, aws: Arc<AwsProvider>) {
    let Some(queue) = aws.interruption_queue() else {
        return;
    };
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    loop {
        let messages = match queue.receive().await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(controller = "interruption", error = %e, "could not read the interruption queue");
                tokio::time::sleep(Duration::from_secs(10)).await;
                continue;
            }
        };
        for message in messages {
            if let Some(event) = parse_message(&message.body) {
                let kind = event.kind.as_str();
                METRICS
                    .interruption_received_messages_total
                    .with_label_values(&[kind])
                    .inc();
                if let Err(e) = aws.record_interruption(&event).await {
                    tracing::warn!(controller = "interruption", error = %e, "could not mark the interrupted offering unavailable");
                }
                for claim in ctx.state.nodeclaims.state() {
                    let Some(instance) = claim
                        .status
                        .as_ref()
                        .and_then(|s| s.provider_id.as_deref())
                        .and_then(provider_id_instance)
                    else {
                        continue;
                    };
                    if !event.instance_ids.iter().any(|i| i == instance) {
                        continue;
                    }
                    let note = format!("{kind} for instance {instance}");
                    let e = Event {
                        type_: EventType::Warning,
                        reason: "Interruption".into(),
                        note: Some(note.clone()),
                        action: kind.into(),
                        secondary: None,
                    };
                    let _ = ctx
                        .recorder
                        .publish(&e, &kube::Resource::object_ref(&*claim, &()))
                        .await;
                    if event.action == InterruptionAction::DeleteNodeClaim
                        && claim.metadata.deletion_timestamp.is_none()
                    {
                        tracing::info!(controller = "interruption", nodeclaim = %claim.name_any(), message = %note, "deleting nodeclaim");
                        if let Err(e) = claims
                            .delete(&claim.name_any(), &DeleteParams::default())
                            .await
                        {
                            tracing::warn!(controller = "interruption", error = %e, "could not delete the interrupted nodeclaim");
                            continue;
                        }
                    }
                }
            }
            if queue.delete_message(&message.receipt_handle).await.is_ok() {
                METRICS.interruption_deleted_messages_total.inc();
            }
        }
    }
}
