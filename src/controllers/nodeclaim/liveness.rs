//! What a failed launch leads to, and when a NodeClaim that will not launch or register is given
//! up on. Upstream's rules: insufficient capacity deletes the NodeClaim at once so its pods are
//! planned again on other offerings; everything else (node class missing or not ready, a bad
//! request, a throttled or failing cloud) is retried, but only until the launch timeout, so no
//! NodeClaim stays stuck forever; a launched NodeClaim whose Node has not registered after the
//! registration timeout is deleted too.
//!
//! Pure: the failure, the times and `now` go in, a decision comes out; the lifecycle controller
//! carries it out.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::apis::conditions::{FALSE, UNKNOWN};
use crate::cloudprovider::CloudError;

/// A NodeClaim that has not launched this long after its creation is deleted (the provisioner
/// plans again).
pub const LAUNCH_TIMEOUT: chrono::Duration = chrono::Duration::minutes(5);
/// A launched NodeClaim whose Node has not registered this long after the launch is deleted.
pub const REGISTRATION_TIMEOUT: chrono::Duration = chrono::Duration::minutes(15);

/// How soon a launch is tried again after a transient cloud error (throttling, timeouts).
const TRANSIENT_RETRY: Duration = Duration::from_secs(5);
/// How soon a launch is tried again while waiting on the node class or after a refused request.
const WAIT_RETRY: Duration = Duration::from_secs(10);
/// The longest a launched, unregistered NodeClaim waits between registration checks.
const REGISTRATION_RECHECK: Duration = Duration::from_secs(15);

/// Why a launch attempt produced no instance.
#[derive(Clone, Copy, Debug)]
pub enum LaunchFailure<'a> {
    /// The EC2NodeClass the NodeClaim names does not exist.
    NodeClassNotFound(&'a str),
    /// The cloud refused the launch or could not be reached.
    Cloud(&'a CloudError),
}

/// What to do about a failed launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchDecision {
    /// Delete the NodeClaim now: no offering it allows has capacity, and the provisioner, which
    /// skips the exhausted offerings for a while, plans its pods again elsewhere.
    Replan {
        /// The cloud's message.
        message: String,
    },
    /// Keep the NodeClaim and launch again after `retry`; record why on its `Launched`
    /// condition.
    Retry {
        /// `False` (waiting on something the user or the node class controller must fix) or
        /// `Unknown` (a transient failure).
        status: &'static str,
        /// The condition's reason.
        reason: &'static str,
        /// The condition's message.
        message: String,
        /// Whether a Warning event with `reason` is worth publishing when the condition
        /// changes (the user can act on it).
        event: bool,
        /// When to try again.
        retry: Duration,
    },
    /// The launch timeout has passed: delete the NodeClaim so its pods are planned again.
    GiveUp {
        /// Why it never launched, for the `LaunchTimeout` event.
        message: String,
    },
}

/// What a failed launch of a NodeClaim created at `created` leads to at `now`.
pub fn after_launch_failure(
    failure: LaunchFailure<'_>,
    created: DateTime<Utc>,
    now: DateTime<Utc>,
) -> LaunchDecision {
    let (status, reason, message, event, retry) = match failure {
        LaunchFailure::Cloud(CloudError::InsufficientCapacity(message)) => {
            return LaunchDecision::Replan {
                message: message.clone(),
            };
        }
        LaunchFailure::NodeClassNotFound(name) => (
            FALSE,
            "NodeClassNotFound",
            format!(
                "EC2NodeClass {name:?} not found (spec.nodeClassRef.name): create it, or point the NodePool at an existing one"
            ),
            false,
            WAIT_RETRY,
        ),
        LaunchFailure::Cloud(CloudError::NodeClassNotReady(m)) => {
            (FALSE, "NodeClassNotReady", m.clone(), true, WAIT_RETRY)
        }
        LaunchFailure::Cloud(CloudError::Invalid(m)) => {
            (FALSE, "LaunchFailed", m.clone(), true, WAIT_RETRY)
        }
        LaunchFailure::Cloud(e @ (CloudError::Transient(_) | CloudError::NotFound(_))) => (
            UNKNOWN,
            "LaunchFailed",
            e.to_string(),
            false,
            TRANSIENT_RETRY,
        ),
    };
    if launch_timed_out(created, now) {
        return LaunchDecision::GiveUp { message };
    }
    LaunchDecision::Retry {
        status,
        reason,
        message,
        event,
        retry,
    }
}

/// Whether a NodeClaim created at `created` has had its [`LAUNCH_TIMEOUT`] by `now`.
pub fn launch_timed_out(created: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    now - created > LAUNCH_TIMEOUT
}

/// What becomes of a launched NodeClaim whose Node has not registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// Keep waiting; look again after this long (at the latest when the timeout falls).
    Wait(Duration),
    /// [`REGISTRATION_TIMEOUT`] has passed since the launch: delete the NodeClaim.
    TimedOut,
}

/// Whether a NodeClaim launched at `launched` may still wait for its Node at `now`.
pub fn registration(launched: DateTime<Utc>, now: DateTime<Utc>) -> Registration {
    let left = REGISTRATION_TIMEOUT - (now - launched);
    if left < chrono::Duration::zero() {
        return Registration::TimedOut;
    }
    let left = left.to_std().unwrap_or_default() + Duration::from_secs(1);
    Registration::Wait(left.min(REGISTRATION_RECHECK))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("time")
    }

    fn at(minutes: i64, seconds: i64) -> DateTime<Utc> {
        t0() + chrono::Duration::minutes(minutes) + chrono::Duration::seconds(seconds)
    }

    #[test]
    fn insufficient_capacity_deletes_at_once_to_plan_elsewhere() {
        let ice = CloudError::InsufficientCapacity("no m5.xlarge in us-west-2a".into());
        for now in [t0(), at(10, 0)] {
            assert_eq!(
                after_launch_failure(LaunchFailure::Cloud(&ice), t0(), now),
                LaunchDecision::Replan {
                    message: "no m5.xlarge in us-west-2a".into()
                }
            );
        }
    }

    #[test]
    fn a_node_class_that_is_missing_or_not_ready_is_waited_for_until_the_launch_timeout() {
        let not_ready = CloudError::NodeClassNotReady("subnets not resolved".into());
        match after_launch_failure(LaunchFailure::Cloud(&not_ready), t0(), at(4, 59)) {
            LaunchDecision::Retry {
                status,
                reason,
                message,
                event,
                retry,
            } => {
                assert_eq!(
                    (status, reason, message.as_str(), event),
                    (FALSE, "NodeClassNotReady", "subnets not resolved", true)
                );
                assert_eq!(retry, WAIT_RETRY);
            }
            other => panic!("{other:?}"),
        }
        match after_launch_failure(LaunchFailure::NodeClassNotFound("gone"), t0(), at(1, 0)) {
            LaunchDecision::Retry {
                status,
                reason,
                message,
                ..
            } => {
                assert_eq!((status, reason), (FALSE, "NodeClassNotFound"));
                assert_eq!(
                    message,
                    "EC2NodeClass \"gone\" not found (spec.nodeClassRef.name): create it, or point the NodePool at an existing one"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            after_launch_failure(LaunchFailure::Cloud(&not_ready), t0(), at(5, 1)),
            LaunchDecision::GiveUp {
                message: "subnets not resolved".into()
            }
        );
        assert!(matches!(
            after_launch_failure(LaunchFailure::NodeClassNotFound("gone"), t0(), at(6, 0)),
            LaunchDecision::GiveUp { .. }
        ));
    }

    #[test]
    fn transient_errors_are_retried_soon_but_only_until_the_launch_timeout() {
        let throttled = CloudError::Transient("RequestLimitExceeded".into());
        for now in [t0(), at(2, 30), at(5, 0)] {
            match after_launch_failure(LaunchFailure::Cloud(&throttled), t0(), now) {
                LaunchDecision::Retry {
                    status,
                    reason,
                    event,
                    retry,
                    message,
                } => {
                    assert_eq!((status, reason, event), (UNKNOWN, "LaunchFailed", false));
                    assert_eq!(retry, TRANSIENT_RETRY);
                    assert!(message.contains("RequestLimitExceeded"), "{message}");
                }
                other => panic!("{now}: {other:?}"),
            }
        }
        // This is what used to be missing: a cloud that keeps failing no longer keeps the
        // NodeClaim (and the pods planned onto it) forever.
        assert!(matches!(
            after_launch_failure(LaunchFailure::Cloud(&throttled), t0(), at(5, 1)),
            LaunchDecision::GiveUp { .. }
        ));
    }

    #[test]
    fn refused_launches_are_reported_and_retried_until_the_launch_timeout() {
        let invalid = CloudError::Invalid("InvalidAMIID.NotFound".into());
        assert!(matches!(
            after_launch_failure(LaunchFailure::Cloud(&invalid), t0(), at(0, 1)),
            LaunchDecision::Retry {
                status: FALSE,
                reason: "LaunchFailed",
                event: true,
                ..
            }
        ));
        assert_eq!(
            after_launch_failure(LaunchFailure::Cloud(&invalid), t0(), at(7, 0)),
            LaunchDecision::GiveUp {
                message: "InvalidAMIID.NotFound".into()
            }
        );
    }

    #[test]
    fn registration_waits_fifteen_minutes_from_the_launch() {
        assert_eq!(
            registration(t0(), t0()),
            Registration::Wait(REGISTRATION_RECHECK)
        );
        assert_eq!(
            registration(t0(), at(14, 55)),
            Registration::Wait(Duration::from_secs(6))
        );
        assert_eq!(
            registration(t0(), at(15, 0)),
            Registration::Wait(Duration::from_secs(1))
        );
        assert_eq!(registration(t0(), at(15, 1)), Registration::TimedOut);
    }
}
