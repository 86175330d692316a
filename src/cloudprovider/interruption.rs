//! Interruption notices in the cloud's neutral terms: an instance is about to be taken away (or
//! is at risk), and what the interruption controller should do about its NodeClaim. A provider
//! with an interruption source (AWS: the SQS queue EventBridge feeds) hands these out through
//! [`super::CloudProvider::interruptions`]; the controller acts on them without knowing where
//! they came from.

use chrono::{DateTime, Utc};

/// The kinds of message upstream Karpenter acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterruptionKind {
    /// A spot instance will be reclaimed in two minutes.
    SpotInterrupted,
    /// EC2 suggests replacing a spot instance at elevated risk of interruption.
    RebalanceRecommendation,
    /// AWS Health scheduled maintenance (retirement, reboot) on an instance.
    ScheduledChange,
    /// The instance is stopping or stopped.
    InstanceStopped,
    /// The instance is shutting down or terminated.
    InstanceTerminated,
    /// An interruptible capacity reservation is taking its capacity back.
    CapacityReservationInterrupted,
    /// EC2's instance status check has failed for two minutes (the guest is unreachable).
    InstanceStatus,
    /// EC2's system status check has failed for two minutes (the host is impaired).
    SystemStatus,
    /// EC2 scheduled an event (reboot, maintenance, retirement, stop) for the instance.
    EventStatus,
}

impl InterruptionKind {
    /// Upstream's name for the kind, used as the metric label and disruption reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SpotInterrupted => "spot_interrupted",
            Self::RebalanceRecommendation => "rebalance_recommendation",
            Self::ScheduledChange => "scheduled_change",
            Self::InstanceStopped => "instance_stopped",
            Self::InstanceTerminated => "instance_terminated",
            Self::CapacityReservationInterrupted => "capacity_reservation_interrupted",
            Self::InstanceStatus => "instance_status",
            Self::SystemStatus => "system_status",
            Self::EventStatus => "event_status",
        }
    }
}

/// What the cloud's own health reports can say is wrong with a running instance (AWS:
/// DescribeInstanceStatus), each its own category of notice. The action each calls for is
/// decided here, for every provider that reports health.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HealthProblem {
    /// The instance status check has failed past the provider's threshold.
    InstanceCheckFailed,
    /// The system status check has failed past the provider's threshold.
    SystemCheckFailed,
    /// An event (reboot, maintenance, retirement, stop) is scheduled for the instance.
    EventScheduled,
}

impl HealthProblem {
    /// The notice for an instance with this problem: a failed check terminates it forcefully
    /// (it serves nothing, so the drain waits for no pod); a scheduled event drains it, as an
    /// AWS Health scheduled change does.
    pub fn notice(self, instance_id: &str) -> InterruptionEvent {
        let (kind, action) = match self {
            Self::InstanceCheckFailed => (
                InterruptionKind::InstanceStatus,
                InterruptionAction::ForcefulTermination,
            ),
            Self::SystemCheckFailed => (
                InterruptionKind::SystemStatus,
                InterruptionAction::ForcefulTermination,
            ),
            Self::EventScheduled => (
                InterruptionKind::EventStatus,
                InterruptionAction::DeleteNodeClaim,
            ),
        };
        InterruptionEvent {
            kind,
            instance_ids: vec![instance_id.to_string()],
            action,
            time: None,
        }
    }
}

/// What the controller does with the NodeClaims of the affected instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterruptionAction {
    /// Delete the NodeClaim: its node is tainted and drained while a replacement is provisioned
    /// (upstream's CordonAndDrain).
    DeleteNodeClaim,
    /// Delete the NodeClaim with its termination deadline set to now
    /// (`karpenter.sh/nodeclaim-termination-timestamp`), so the drain waits for no pod: the
    /// instance is unhealthy and serves nothing (upstream's ForcefulTermination).
    ForcefulTermination,
    /// Record an event only.
    NoAction,
}

/// One parsed interruption message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterruptionEvent {
    /// What happened.
    pub kind: InterruptionKind,
    /// Affected instances (a health event can name several).
    pub instance_ids: Vec<String>,
    /// What to do.
    pub action: InterruptionAction,
    /// When the event was emitted, for the queue-latency metric.
    pub time: Option<DateTime<Utc>>,
}

/// One notice taken from the provider's source: acknowledge it (with
/// [`super::CloudProvider::acknowledge_interruption`]) once everything it asked for is done, or
/// leave it to be delivered again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterruptionMessage {
    /// The provider's handle for acknowledging the message (SQS: the receipt handle).
    pub receipt: String,
    /// What the message says; `None` for messages about nothing the controller acts on, which
    /// are acknowledged without action.
    pub event: Option<InterruptionEvent>,
}
