//! EC2's health reports as interruption notices, as upstream v1.14.1's instance status provider
//! reads them: DescribeInstanceStatus, asked three times (a failed instance status check, a
//! failed system status check, a scheduled event — EC2 ANDs filters of different names, so each
//! is its own query), gives the instances to act on.
//!
//! A failed instance or system check counts once it has failed for [`UNHEALTHY_THRESHOLD`] (a
//! check that recovers by itself is left alone); its NodeClaim is deleted forcefully, as the
//! instance serves nothing. A scheduled event (reboot, maintenance, retirement, stop) counts at
//! once — its time is often days ahead, and the host is known to be going — and the NodeClaim is
//! drained as for an AWS Health scheduled change. Attached EBS checks are ignored, as upstream:
//! a failed volume may be a pod's, not the node's.

use aws_sdk_ec2::types::{InstanceStatus, InstanceStatusSummary, StatusType};
use chrono::{DateTime, Duration, Utc};

use crate::cloudprovider::CloudError;
use crate::cloudprovider::interruption::{HealthProblem, InterruptionEvent};

use super::sdk_error;
use super::tags::filter;

/// How long a status check must have failed before its instance is acted on (upstream's
/// `UnhealthyThreshold`).
pub const UNHEALTHY_THRESHOLD: Duration = Duration::seconds(120);

/// The scheduled event codes upstream asks EC2 for.
pub const EVENT_CODES: [&str; 5] = [
    "instance-reboot",
    "system-reboot",
    "system-maintenance",
    "instance-retirement",
    "instance-stop",
];

/// The unhealthy instances EC2 reports now, as notices (one per instance and category).
pub async fn unhealthy(
    ec2: &aws_sdk_ec2::Client,
    now: DateTime<Utc>,
) -> Result<Vec<InterruptionEvent>, CloudError> {
    let queries = [
        filter("instance-status.status", ["impaired"]),
        filter("system-status.status", ["impaired"]),
        filter("event.code", EVENT_CODES),
    ];
    let mut statuses: Vec<InstanceStatus> = Vec::new();
    for query in queries {
        let mut pages = ec2
            .describe_instance_status()
            .filters(query)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("ec2:DescribeInstanceStatus", e))?;
            for status in page.instance_statuses() {
                if !statuses
                    .iter()
                    .any(|s| s.instance_id() == status.instance_id())
                {
                    statuses.push(status.clone());
                }
            }
        }
    }
    Ok(notices(&statuses, now))
}

/// Whether a status check summary has a check that failed at least [`UNHEALTHY_THRESHOLD`] before
/// `now` (one without a time counts, as upstream's zero time does).
fn failed_long_enough(summary: Option<&InstanceStatusSummary>, now: DateTime<Utc>) -> bool {
    summary.is_some_and(|s| {
        s.details().iter().any(|d| {
            d.status() == Some(&StatusType::Failed)
                && d.impaired_since().is_none_or(|since| {
                    DateTime::from_timestamp(since.secs(), since.subsec_nanos())
                        .is_none_or(|since| now - since >= UNHEALTHY_THRESHOLD)
                })
        })
    })
}

/// The notices DescribeInstanceStatus' answers call for at `now`.
pub fn notices(statuses: &[InstanceStatus], now: DateTime<Utc>) -> Vec<InterruptionEvent> {
    let mut out = Vec::new();
    for status in statuses {
        let Some(id) = status.instance_id() else {
            continue;
        };
        if failed_long_enough(status.instance_status(), now) {
            out.push(HealthProblem::InstanceCheckFailed.notice(id));
        }
        if failed_long_enough(status.system_status(), now) {
            out.push(HealthProblem::SystemCheckFailed.notice(id));
        }
        if !status.events().is_empty() {
            out.push(HealthProblem::EventScheduled.notice(id));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloudprovider::interruption::InterruptionAction;
    use aws_sdk_ec2::types::{
        EventCode, InstanceStatusDetails, InstanceStatusEvent, StatusName, SummaryStatus,
    };

    fn summary(failed_since: Option<DateTime<Utc>>) -> InstanceStatusSummary {
        let detail = InstanceStatusDetails::builder().name(StatusName::Reachability);
        let detail = match failed_since {
            Some(t) => detail
                .status(StatusType::Failed)
                .impaired_since(aws_sdk_ec2::primitives::DateTime::from_secs(t.timestamp())),
            None => detail.status(StatusType::Passed),
        };
        InstanceStatusSummary::builder()
            .status(if failed_since.is_some() {
                SummaryStatus::Impaired
            } else {
                SummaryStatus::Ok
            })
            .details(detail.build())
            .build()
    }

    fn status(
        id: &str,
        instance: Option<DateTime<Utc>>,
        system: Option<DateTime<Utc>>,
        event: bool,
    ) -> InstanceStatus {
        let mut s = InstanceStatus::builder()
            .instance_id(id)
            .instance_status(summary(instance))
            .system_status(summary(system));
        if event {
            s = s.events(
                InstanceStatusEvent::builder()
                    .code(EventCode::InstanceRetirement)
                    .build(),
            );
        }
        s.build()
    }

    #[test]
    fn failed_checks_count_after_two_minutes_and_events_at_once() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        let statuses = [
            status("i-healthy", None, None, false),
            status(
                "i-reachability",
                Some(now - UNHEALTHY_THRESHOLD),
                None,
                false,
            ),
            status(
                "i-recovering",
                Some(now - Duration::seconds(119)),
                None,
                false,
            ),
            status("i-host", None, Some(now - Duration::minutes(10)), false),
            status("i-retiring", None, None, true),
        ];
        let got: Vec<(String, &str, InterruptionAction)> = notices(&statuses, now)
            .into_iter()
            .map(|n| (n.instance_ids.join(","), n.kind.as_str(), n.action))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "i-reachability".to_string(),
                    "instance_status",
                    InterruptionAction::ForcefulTermination
                ),
                (
                    "i-host".to_string(),
                    "system_status",
                    InterruptionAction::ForcefulTermination
                ),
                (
                    "i-retiring".to_string(),
                    "event_status",
                    InterruptionAction::DeleteNodeClaim
                ),
            ]
        );
    }
}
