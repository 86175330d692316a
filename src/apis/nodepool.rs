//! `karpenter.sh/v1` NodePool: the template and constraints Karpenter provisions nodes from,
//! and the rules for disrupting them.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
use super::duration::{Duration, NillableDuration};
use super::nodeclaim::{
    NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceList, Taint,
    default_expire_after,
};
use super::schema;

/// Desired state of a NodePool.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    singular = "nodepool",
    category = "karpenter",
    status = "NodePoolStatus",
    doc = "NodePool is the Schema for the NodePools API",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    ),
    printcolumn = r#"{"name": "NodeClass", "type": "string", "jsonPath": ".spec.template.spec.nodeClassRef.name"}"#,
    printcolumn = r#"{"name": "Nodes", "type": "string", "jsonPath": ".status.nodes"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1}"#,
    printcolumn = r#"{"name": "CPU", "type": "string", "jsonPath": ".status.resources.cpu", "priority": 1}"#,
    printcolumn = r#"{"name": "Memory", "type": "string", "jsonPath": ".status.resources.memory", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::nodepool_spec_rules)]
pub struct NodePoolSpec {
    /// The template every NodeClaim of this pool is created from.
    pub template: NodeClaimTemplate,
    /// How and when nodes of this pool may be disrupted.
    #[serde(default = "Disruption::default_for_nodepool")]
    #[schemars(extend("default" = {"consolidateAfter": "0s"}))]
    pub disruption: Disruption,
    /// Caps on the total resources this pool may provision (`cpu`, `memory`, `nodes`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, schema::QuantitySchema>>")]
    pub limits: Option<ResourceList>,
    /// Priority among NodePools: higher weights are tried first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// A fixed node count (static capacity); unset means nodes follow pending pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

/// Labels and annotations for the nodes, plus their NodeClaim spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    /// Labels and annotations put on the NodeClaims and their nodes.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
    /// The spec of every NodeClaim.
    pub spec: NodeClaimTemplateSpec,
}

/// The subset of object metadata a template may carry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TemplateMetadata {
    /// Labels for the nodes; pods select them with node selectors.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = schema::template_label_rules)]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub labels: BTreeMap<String, String>,
    /// Annotations for the nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-map-type" = "granular"))]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// The NodeClaim spec a NodePool stamps out; unlike a NodeClaim's, it may change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints the nodes carry for their whole life.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub taints: Vec<Taint>,
    /// Taints present at boot that a daemon removes; pods need not tolerate them to be provisioned for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub startup_taints: Vec<Taint>,
    /// Constraints on the labels of launched nodes (instance types, zones, capacity types, ...).
    #[schemars(length(max = 100), transform = schema::requirement_list_rules)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    #[schemars(transform = schema::nodepool_requirement_key_rules)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The cloud-specific node class to launch with.
    #[schemars(transform = schema::node_class_ref_immutable)]
    pub node_class_ref: NodeClassReference,
    /// How long a draining node waits for its pods before they are forcibly removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<Duration>,
    /// How long nodes live before they are replaced; `Never` disables expiry.
    #[serde(default = "default_expire_after")]
    #[schemars(extend("default" = "720h"))]
    pub expire_after: NillableDuration,
}

/// When nodes may be consolidated, and how many at a time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["consolidateAfter"]))]
pub struct Disruption {
    /// How long a node must have had no pod arrive or leave before it may be consolidated.
    #[serde(default = "default_consolidate_after")]
    #[schemars(transform = schema::required_without_default)]
    pub consolidate_after: NillableDuration,
    /// Which nodes consolidation may remove or replace.
    #[serde(default)]
    #[schemars(extend("default" = "WhenEmptyOrUnderutilized"))]
    pub consolidation_policy: ConsolidationPolicy,
    /// Caps on how many nodes may be disrupting at once, per reason and schedule.
    #[serde(default = "default_budgets")]
    #[schemars(extend("default" = [{"nodes": "10%"}]), length(max = 50))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(x, has(x.schedule) == has(x.duration))", "message": "'schedule' must be set with 'duration'"}]))]
    pub budgets: Vec<Budget>,
}

impl Disruption {
    /// The disruption block the API server defaults an omitted one to.
    pub fn default_for_nodepool() -> Self {
        Self {
            consolidate_after: default_consolidate_after(),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

fn default_consolidate_after() -> NillableDuration {
    NillableDuration::After(Duration::from_std(std::time::Duration::ZERO))
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget {
        nodes: "10%".to_string(),
        schedule: None,
        duration: None,
        reasons: None,
    }]
}

/// Which nodes consolidation may act on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    /// Only nodes without workload pods.
    WhenEmpty,
    /// Empty nodes, and nodes whose pods fit elsewhere or on a cheaper replacement.
    #[default]
    WhenEmptyOrUnderutilized,
    /// Like WhenEmptyOrUnderutilized, but a move must save enough relative to the pods it disrupts.
    Balanced,
}

/// Why a node is being voluntarily disrupted; budgets can be scoped to reasons.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum DisruptionReason {
    /// Consolidation replacing or removing an underused node.
    Underutilized,
    /// Removing a node with no workload pods.
    Empty,
    /// Replacing a node that no longer matches its NodePool or node class.
    Drifted,
}

impl DisruptionReason {
    /// All reasons, in the order upstream lists them.
    pub const ALL: [DisruptionReason; 3] = [Self::Underutilized, Self::Empty, Self::Drifted];
}

impl fmt::Display for DisruptionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Underutilized => "Underutilized",
            Self::Empty => "Empty",
            Self::Drifted => "Drifted",
        })
    }
}

/// A cap on concurrently disrupting nodes, optionally limited to reasons and a recurring window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["nodes"]))]
pub struct Budget {
    /// A node count (`"5"`) or a percentage of the pool's nodes (`"10%"`, rounded up).
    #[serde(default = "default_budget_nodes")]
    #[schemars(extend("default" = "10%"), pattern(r"^((100|[0-9]{1,2})%|[0-9]+)$"))]
    pub nodes: String,
    /// Cron schedule (UTC) at which the budget's window opens; needs `duration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"))]
    pub schedule: Option<String>,
    /// How long the window stays open after each scheduled start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        with = "Option<String>",
        pattern(r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$")
    )]
    pub duration: Option<Duration>,
    /// Reasons the budget applies to; all reasons when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "set"))]
    pub reasons: Option<Vec<DisruptionReason>>,
}

fn default_budget_nodes() -> String {
    "10%".to_string()
}

/// The `nodes` field of a budget, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetNodes {
    /// At most this many nodes.
    Count(u32),
    /// At most this percentage of the pool's nodes, rounded up.
    Percent(u8),
}

impl BudgetNodes {
    /// How many nodes this allows out of `total`, rounding percentages up as upstream does.
    pub fn allowed(self, total: u32) -> u32 {
        match self {
            Self::Count(n) => n,
            Self::Percent(p) => (u64::from(total) * u64::from(p)).div_ceil(100) as u32,
        }
    }
}

/// Why a budget field could not be used; budgets that fail to parse allow no disruption.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// `nodes` is neither a count nor a percentage.
    #[error(
        "budget nodes {0:?} is not a node count (\"5\") or a percentage from 0% to 100% (\"10%\")"
    )]
    Nodes(String),
    /// `schedule` is not a cron expression the controller understands.
    #[error(
        "budget schedule {schedule:?} is not a valid cron expression ({reason}); use five fields \"minute hour day-of-month month day-of-week\" or a macro such as @daily"
    )]
    Schedule {
        /// The schedule as written.
        schedule: String,
        /// What the cron parser said.
        reason: String,
    },
    /// Only one of `schedule` and `duration` is set.
    #[error("budget 'schedule' must be set with 'duration'")]
    ScheduleWithoutDuration,
}

impl FromStr for BudgetNodes {
    type Err = BudgetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BudgetError::Nodes(s.to_string());
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        match s.strip_suffix('%') {
            Some(p) if (digits(p) && p.len() <= 2) || p == "100" => {
                p.parse().map(Self::Percent).map_err(|_| bad())
            }
            Some(_) => Err(bad()),
            None if digits(s) => s.parse().map(Self::Count).map_err(|_| bad()),
            None => Err(bad()),
        }
    }
}

impl Budget {
    /// The parsed `nodes` value.
    pub fn nodes(&self) -> Result<BudgetNodes, BudgetError> {
        self.nodes.parse()
    }

    /// The parsed schedule, or `None` for an always-active budget.
    pub fn schedule(&self) -> Result<Option<cron::Schedule>, BudgetError> {
        match (&self.schedule, &self.duration) {
            (None, None) => Ok(None),
            (Some(s), Some(_)) => parse_schedule(s).map(Some),
            _ => Err(BudgetError::ScheduleWithoutDuration),
        }
    }

    /// Whether the budget applies to disruptions for `reason`.
    pub fn applies_to(&self, reason: DisruptionReason) -> bool {
        self.reasons.as_ref().is_none_or(|r| r.contains(&reason))
    }
}

/// Parses a budget schedule with the semantics of the standard five-field cron that upstream uses
/// (minute, hour, day of month, month, day of week with 0 or 7 = Sunday; `@daily`-style macros),
/// evaluated in UTC.
pub fn parse_schedule(schedule: &str) -> Result<cron::Schedule, BudgetError> {
    let fail = |reason: String| BudgetError::Schedule {
        schedule: schedule.to_string(),
        reason,
    };
    let expr = match schedule.trim() {
        "@yearly" | "@annually" => "0 0 0 1 1 *".to_string(),
        "@monthly" => "0 0 0 1 * *".to_string(),
        "@weekly" => "0 0 0 * * SUN".to_string(),
        "@daily" | "@midnight" => "0 0 0 * * *".to_string(),
        "@hourly" => "0 0 * * * *".to_string(),
        other => {
            let fields: Vec<&str> = other.split_whitespace().collect();
            if fields.len() != 5 {
                return Err(fail(format!("it has {} fields, not 5", fields.len())));
            }
            let dow = day_of_week_names(fields[4]).map_err(fail)?;
            format!(
                "0 {} {} {} {} {}",
                fields[0], fields[1], fields[2], fields[3], dow
            )
        }
    };
    expr.parse::<cron::Schedule>()
        .map_err(|e| fail(e.to_string()))
}

/// Rewrites numeric days of week (standard cron: 0-7, Sunday = 0 and 7) as names, because the
/// `cron` crate numbers days from 1 = Sunday; names mean the same thing in both.
fn day_of_week_names(field: &str) -> Result<String, String> {
    const NAMES: [&str; 8] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];
    let mut out = String::with_capacity(field.len());
    let mut number = String::new();
    let mut after_slash = false;
    let flush = |number: &mut String, out: &mut String, after_slash: bool| -> Result<(), String> {
        if number.is_empty() {
            return Ok(());
        }
        if after_slash {
            out.push_str(number);
        } else {
            let n: usize = number
                .parse()
                .map_err(|_| format!("day of week {number:?} is not a number"))?;
            let name = NAMES
                .get(n)
                .ok_or_else(|| format!("day of week {n} is outside 0-7"))?;
            out.push_str(name);
        }
        number.clear();
        Ok(())
    };
    for c in field.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        flush(&mut number, &mut out, after_slash)?;
        after_slash = c == '/';
        out.push(c);
    }
    flush(&mut number, &mut out, after_slash)?;
    Ok(out)
}

/// The NodePool's condition types besides [`READY`](super::conditions::READY), as upstream's
/// `nodepool_status.go` names them.
pub mod condition {
    /// The pool passes the API server's rules and upstream's runtime checks.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// The pool's EC2NodeClass is Ready.
    pub const NODE_CLASS_READY: &str = "NodeClassReady";
    /// The pool's recent NodeClaims registered: `False` once two of the last four were given up
    /// on at the launch or registration timeout, `True` after a registration, `Unknown` when the
    /// pool or its EC2NodeClass changed. Informational: `Ready` does not depend on it.
    pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";
}

/// Observed state of a NodePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Total capacity of the pool's nodes, including `nodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, schema::QuantitySchema>>")]
    pub resources: Option<ResourceList>,
    /// Number of nodes in the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub nodes: Option<i64>,
    /// Generation of the node class the status was computed against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// ValidationSucceeded, NodeClassReady, NodeRegistrationHealthy, Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::condition_list)]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_nodes_parse_counts_and_percentages() {
        assert_eq!("10%".parse(), Ok(BudgetNodes::Percent(10)));
        assert_eq!("100%".parse(), Ok(BudgetNodes::Percent(100)));
        assert_eq!("0".parse(), Ok(BudgetNodes::Count(0)));
        assert_eq!("25".parse(), Ok(BudgetNodes::Count(25)));
        for bad in ["101%", "%", "-1", "ten", "1.5"] {
            assert!(bad.parse::<BudgetNodes>().is_err(), "{bad}");
        }
    }

    #[test]
    fn percentages_round_up() {
        assert_eq!(BudgetNodes::Percent(30).allowed(10), 3);
        assert_eq!(BudgetNodes::Percent(10).allowed(5), 1);
        assert_eq!(BudgetNodes::Percent(10).allowed(0), 0);
        assert_eq!(BudgetNodes::Percent(100).allowed(7), 7);
        assert_eq!(BudgetNodes::Count(3).allowed(1), 3);
    }

    #[test]
    fn budgets_apply_to_their_reasons() {
        let all = Budget {
            nodes: "1".into(),
            schedule: None,
            duration: None,
            reasons: None,
        };
        assert!(DisruptionReason::ALL.iter().all(|r| all.applies_to(*r)));
        let drift_only = Budget {
            reasons: Some(vec![DisruptionReason::Drifted]),
            ..all
        };
        assert!(drift_only.applies_to(DisruptionReason::Drifted));
        assert!(!drift_only.applies_to(DisruptionReason::Empty));
    }

    #[test]
    fn schedules_use_standard_cron_days_in_utc() {
        use chrono::{Datelike, TimeZone, Utc, Weekday};
        let next = |expr: &str, from| parse_schedule(expr).unwrap().after(&from).next().unwrap();
        // Saturday 2026-11-21 12:00 UTC.
        let saturday = Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, 0).unwrap();
        for expr in ["0 9 * * 1-5", "0 9 * * mon-fri", "0 9 * * MON-FRI"] {
            let n = next(expr, saturday);
            assert_eq!(n.weekday(), Weekday::Mon, "{expr}");
            assert_eq!(n.format("%H:%M").to_string(), "09:00");
        }
        assert_eq!(next("0 0 * * 0", saturday).weekday(), Weekday::Sun);
        assert_eq!(next("0 0 * * 7", saturday).weekday(), Weekday::Sun);
        assert_eq!(
            next("30 * * * *", saturday).format("%H:%M").to_string(),
            "12:30"
        );
        assert_eq!(
            next("@daily", saturday).format("%d %H:%M").to_string(),
            "22 00:00"
        );
        assert_eq!(
            next("*/15 * * * *", saturday).format("%H:%M").to_string(),
            "12:15"
        );
    }

    #[test]
    fn bad_schedules_say_why() {
        for bad in ["0 9 * *", "61 * * * *", "0 9 * * 8", "@often"] {
            let e = parse_schedule(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
            assert!(e.contains("five fields"), "{e}");
        }
    }

    #[test]
    fn schedule_requires_duration() {
        let b = Budget {
            nodes: "0".into(),
            schedule: Some("0 9 * * mon-fri".into()),
            duration: None,
            reasons: None,
        };
        assert_eq!(
            b.schedule().unwrap_err(),
            BudgetError::ScheduleWithoutDuration
        );
    }
}
