//! The interruption queue: EventBridge delivers EC2 and AWS Health events to an SQS queue
//! (`INTERRUPTION_QUEUE`), and each one tells the controller to move pods off an instance before
//! EC2 takes it away.
//!
//! [`parse_message`] is pure: it turns a message body into the instances affected and what to do
//! about them. [`InterruptionQueue`] only receives and deletes messages; the provider hands them
//! to the interruption controller through the `CloudProvider` trait (receive, parse, act on the
//! NodeClaims, acknowledge), and marks interrupted spot pools unavailable.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::cloudprovider::CloudError;
use crate::cloudprovider::interruption::{InterruptionAction, InterruptionEvent, InterruptionKind};

use super::sdk_error;

fn instance_id_from_arn(arn: &str) -> Option<String> {
    arn.rsplit('/')
        .next()
        .filter(|id| id.starts_with("i-"))
        .map(str::to_string)
}

/// Parses an EventBridge message body; `None` for messages that are not about instances we act
/// on (other event types, other states, malformed JSON).
pub fn parse_message(body: &str) -> Option<InterruptionEvent> {
    let msg: Value = serde_json::from_str(body).ok()?;
    let source = msg.get("source")?.as_str()?;
    let detail_type = msg.get("detail-type")?.as_str()?;
    let detail = msg.get("detail")?;
    let time = msg
        .get("time")
        .and_then(Value::as_str)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc));
    let instance_id = || -> Vec<String> {
        detail
            .get("instance-id")
            .and_then(Value::as_str)
            .map(|id| vec![id.to_string()])
            .unwrap_or_else(|| {
                msg.get("resources")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter_map(instance_id_from_arn)
                    .collect()
            })
    };
    let (kind, instance_ids) = match (source, detail_type) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => {
            (InterruptionKind::SpotInterrupted, instance_id())
        }
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => {
            (InterruptionKind::RebalanceRecommendation, instance_id())
        }
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning") => (
            InterruptionKind::CapacityReservationInterrupted,
            instance_id(),
        ),
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let kind = match detail.get("state")?.as_str()? {
                "stopping" | "stopped" => InterruptionKind::InstanceStopped,
                "shutting-down" | "terminated" => InterruptionKind::InstanceTerminated,
                _ => return None,
            };
            (kind, instance_id())
        }
        ("aws.health", "AWS Health Event") => {
            if detail.get("service").and_then(Value::as_str) != Some("EC2")
                || detail.get("eventTypeCategory").and_then(Value::as_str)
                    != Some("scheduledChange")
            {
                return None;
            }
            let ids = detail
                .get("affectedEntities")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|e| e.get("entityValue").and_then(Value::as_str))
                .filter(|id| id.starts_with("i-"))
                .map(str::to_string)
                .collect();
            (InterruptionKind::ScheduledChange, ids)
        }
        _ => return None,
    };
    if instance_ids.is_empty() {
        return None;
    }
    let action = match kind {
        InterruptionKind::RebalanceRecommendation => InterruptionAction::NoAction,
        _ => InterruptionAction::DeleteNodeClaim,
    };
    Some(InterruptionEvent {
        kind,
        instance_ids,
        action,
        time,
    })
}

/// A message taken off the queue; delete it with its receipt handle once handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueMessage {
    /// What [`InterruptionQueue::delete_message`] takes.
    pub receipt_handle: String,
    /// The EventBridge event.
    pub body: String,
}

/// The SQS queue, by name or URL.
pub struct InterruptionQueue {
    sqs: aws_sdk_sqs::Client,
    queue: String,
    url: OnceCell<String>,
}

impl InterruptionQueue {
    /// A queue named `queue` (or at URL `queue`).
    pub fn new(sqs: aws_sdk_sqs::Client, queue: impl Into<String>) -> Self {
        Self {
            sqs,
            queue: queue.into(),
            url: OnceCell::new(),
        }
    }

    async fn url(&self) -> Result<&str, CloudError> {
        self.url
            .get_or_try_init(|| async {
                if self.queue.starts_with("https://") || self.queue.starts_with("http://") {
                    return Ok(self.queue.clone());
                }
                let out = self
                    .sqs
                    .get_queue_url()
                    .queue_name(&self.queue)
                    .send()
                    .await
                    .map_err(|e| sdk_error("sqs:GetQueueUrl", e))?;
                out.queue_url()
                    .map(str::to_string)
                    .ok_or_else(|| CloudError::Invalid(format!("queue {} has no URL", self.queue)))
            })
            .await
            .map(String::as_str)
    }

    /// Up to ten messages, waiting up to 20 seconds for the first (long polling); a received
    /// message is hidden from other receivers for 20 seconds.
    pub async fn receive(&self) -> Result<Vec<QueueMessage>, CloudError> {
        let url = self.url().await?;
        let out = self
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(20)
            .wait_time_seconds(20)
            .send()
            .await
            .map_err(|e| sdk_error("sqs:ReceiveMessage", e))?;
        Ok(out
            .messages()
            .iter()
            .filter_map(|m| {
                Some(QueueMessage {
                    receipt_handle: m.receipt_handle()?.to_string(),
                    body: m.body().unwrap_or_default().to_string(),
                })
            })
            .collect())
    }

    /// Removes a handled message from the queue.
    pub async fn delete_message(&self, receipt_handle: &str) -> Result<(), CloudError> {
        let url = self.url().await?;
        self.sqs
            .delete_message()
            .queue_url(url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|e| sdk_error("sqs:DeleteMessage", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spot_interruptions_delete_the_nodeclaim() {
        let body = json!({
            "version": "0", "id": "1", "source": "aws.ec2", "account": "123456789012",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "time": "2025-01-01T00:00:00Z", "region": "us-east-1",
            "resources": ["arn:aws:ec2:us-east-1b:instance/i-0abc"],
            "detail": {"instance-id": "i-0abc", "instance-action": "terminate"}
        })
        .to_string();
        let e = parse_message(&body).expect("event");
        assert_eq!(e.kind, InterruptionKind::SpotInterrupted);
        assert_eq!(e.kind.as_str(), "spot_interrupted");
        assert_eq!(e.instance_ids, ["i-0abc"]);
        assert_eq!(e.action, InterruptionAction::DeleteNodeClaim);
        assert!(e.time.is_some());
    }

    #[test]
    fn each_message_kind_maps_to_its_action() {
        let ec2 = |detail_type: &str, detail: Value| {
            parse_message(
                &json!({"source": "aws.ec2", "detail-type": detail_type, "detail": detail})
                    .to_string(),
            )
        };
        let rebalance = ec2(
            "EC2 Instance Rebalance Recommendation",
            json!({"instance-id": "i-1"}),
        )
        .expect("rebalance");
        assert_eq!(rebalance.action, InterruptionAction::NoAction);
        // An interruptible capacity reservation taking its capacity back: cordon and drain,
        // as upstream.
        let reclaimed = ec2(
            "EC2 Capacity Reservation Instance Interruption Warning",
            json!({"instance-id": "i-7", "instance-action": "terminate"}),
        )
        .expect("reclaimed");
        assert_eq!(
            reclaimed.kind,
            InterruptionKind::CapacityReservationInterrupted
        );
        assert_eq!(reclaimed.instance_ids, ["i-7"]);
        assert_eq!(reclaimed.action, InterruptionAction::DeleteNodeClaim);
        let stopped = ec2(
            "EC2 Instance State-change Notification",
            json!({"instance-id": "i-2", "state": "stopping"}),
        )
        .expect("stopping");
        assert_eq!(stopped.kind, InterruptionKind::InstanceStopped);
        let gone = ec2(
            "EC2 Instance State-change Notification",
            json!({"instance-id": "i-3", "state": "terminated"}),
        )
        .expect("terminated");
        assert_eq!(gone.kind, InterruptionKind::InstanceTerminated);
        assert_eq!(gone.action, InterruptionAction::DeleteNodeClaim);
        assert_eq!(
            ec2(
                "EC2 Instance State-change Notification",
                json!({"instance-id": "i-4", "state": "running"})
            ),
            None
        );
        let health = parse_message(
            &json!({"source": "aws.health", "detail-type": "AWS Health Event",
                    "detail": {"service": "EC2", "eventTypeCategory": "scheduledChange",
                               "affectedEntities": [{"entityValue": "i-5"}, {"entityValue": "i-6"}]}})
            .to_string(),
        )
        .expect("health");
        assert_eq!(health.kind, InterruptionKind::ScheduledChange);
        assert_eq!(health.instance_ids, ["i-5", "i-6"]);
        assert_eq!(parse_message("not json"), None);
        assert_eq!(
            parse_message(
                &json!({"source": "aws.s3", "detail-type": "x", "detail": {}}).to_string()
            ),
            None
        );
    }
}
