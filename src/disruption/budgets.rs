//! Disruption budgets: how many of a NodePool's nodes may be voluntarily disrupting at once for a
//! reason, at a moment in time (cron windows are evaluated in UTC, as upstream does).

use chrono::{DateTime, Utc};

use crate::apis::duration;
use crate::apis::nodepool::{BudgetNodes, DisruptionReason, NodePool};

/// The budget arithmetic for one NodePool and reason, kept for explanations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowance {
    /// Nodes that may be disrupting at once under the tightest active budget.
    pub limit: u32,
    /// Nodes of the pool already disrupting (being deleted or marked).
    pub disrupting: u32,
    /// `limit - disrupting`, floored at zero: what a new command may take.
    pub remaining: u32,
    /// How the limit was reached, one line per budget.
    pub explanation: Vec<String>,
}

/// Computes the allowance for `reason` in `pool` with `total` nodes of which `disrupting` are
/// already disrupting. Budgets that do not apply to the reason, or whose window is closed, do not
/// limit; a budget that cannot be parsed allows nothing (fail closed).
pub fn allowance(
    pool: &NodePool,
    reason: DisruptionReason,
    total: u32,
    disrupting: u32,
    now: DateTime<Utc>,
) -> Allowance {
    let mut limit = u32::MAX;
    let mut explanation = Vec::new();
    for (i, budget) in pool.spec.disruption.budgets.iter().enumerate() {
        if !budget.applies_to(reason) {
            explanation.push(format!("budgets[{i}] does not apply to {reason}"));
            continue;
        }
        let nodes = match budget.nodes() {
            Ok(n) => n,
            Err(e) => {
                explanation.push(format!(
                    "budgets[{i}] is invalid ({e}): no disruption allowed"
                ));
                limit = 0;
                continue;
            }
        };
        let active = match budget.schedule() {
            Ok(None) => true,
            Ok(Some(schedule)) => {
                let window = budget
                    .duration
                    .as_ref()
                    .map_or(std::time::Duration::ZERO, |d| d.get());
                // Upstream's rule: active iff the first start after (now - duration) is not
                // after now, i.e. the window [start, start + duration) contains now.
                schedule
                    .after(&duration::saturating_sub(now, window))
                    .next()
                    .is_some_and(|start| start <= now)
            }
            Err(e) => {
                explanation.push(format!(
                    "budgets[{i}] is invalid ({e}): no disruption allowed"
                ));
                limit = 0;
                continue;
            }
        };
        if !active {
            explanation.push(format!(
                "budgets[{i}] ({}) is outside its window {} for {}",
                budget.nodes,
                budget.schedule.as_deref().unwrap_or_default(),
                budget
                    .duration
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ));
            continue;
        }
        let allowed = nodes.allowed(total);
        explanation.push(match nodes {
            BudgetNodes::Percent(p) => {
                format!("budgets[{i}] allows {p}% of {total} nodes, rounded up: {allowed}")
            }
            BudgetNodes::Count(n) => format!("budgets[{i}] allows {n} nodes"),
        });
        limit = limit.min(allowed);
    }
    let remaining = limit.saturating_sub(disrupting);
    if limit != u32::MAX {
        explanation.push(format!(
            "{disrupting} already disrupting, so {remaining} more may start for {reason}"
        ));
    }
    Allowance {
        limit,
        disrupting,
        remaining,
        explanation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn pool(budgets: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {
                "template": {"spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "k", "name": "n"}}},
                "disruption": {"consolidateAfter": "0s", "budgets": budgets}
            }
        }))
        .expect("pool")
    }

    #[test]
    fn percentages_round_up_and_the_minimum_wins() {
        let now = Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, 0).unwrap();
        let p = pool(json!([{"nodes": "30%"}, {"nodes": "5"}]));
        assert_eq!(
            allowance(&p, DisruptionReason::Empty, 10, 0, now).remaining,
            3
        );
        assert_eq!(
            allowance(&p, DisruptionReason::Empty, 10, 2, now).remaining,
            1
        );
        assert_eq!(
            allowance(&p, DisruptionReason::Empty, 30, 0, now).remaining,
            5
        );
    }

    #[test]
    fn reasons_scope_budgets() {
        let now = Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, 0).unwrap();
        let p = pool(json!([{"nodes": "0", "reasons": ["Drifted"]}, {"nodes": "100%"}]));
        assert_eq!(
            allowance(&p, DisruptionReason::Drifted, 4, 0, now).remaining,
            0
        );
        assert_eq!(
            allowance(&p, DisruptionReason::Underutilized, 4, 0, now).remaining,
            4
        );
    }

    #[test]
    fn schedules_open_windows_in_utc() {
        let p = pool(
            json!([{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}, {"nodes": "100%"}]),
        );
        // Monday 2026-11-23 10:00 UTC: inside.
        let inside = Utc.with_ymd_and_hms(2026, 11, 23, 10, 0, 0).unwrap();
        assert_eq!(
            allowance(&p, DisruptionReason::Drifted, 3, 0, inside).remaining,
            0
        );
        // Monday 09:00 exactly: inside.
        let start = Utc.with_ymd_and_hms(2026, 11, 23, 9, 0, 0).unwrap();
        assert_eq!(
            allowance(&p, DisruptionReason::Drifted, 3, 0, start).remaining,
            0
        );
        // Monday 17:00: the window [09:00, 17:00) has closed.
        let after = Utc.with_ymd_and_hms(2026, 11, 23, 17, 0, 1).unwrap();
        assert_eq!(
            allowance(&p, DisruptionReason::Drifted, 3, 0, after).remaining,
            3
        );
        // Saturday: outside.
        let weekend = Utc.with_ymd_and_hms(2026, 11, 21, 10, 0, 0).unwrap();
        let a = allowance(&p, DisruptionReason::Drifted, 3, 0, weekend);
        assert_eq!(a.remaining, 3);
        assert!(
            a.explanation
                .iter()
                .any(|l| l.contains("outside its window"))
        );
    }

    #[test]
    fn invalid_budgets_fail_closed() {
        let now = Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, 0).unwrap();
        let p = pool(json!([{"nodes": "lots"}]));
        let a = allowance(&p, DisruptionReason::Empty, 10, 0, now);
        assert_eq!(a.remaining, 0);
        assert!(a.explanation[0].contains("invalid"));
    }
}
