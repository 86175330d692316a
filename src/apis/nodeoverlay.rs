//! `karpenter.sh/v1alpha1` NodeOverlay (behind the `NodeOverlay` feature gate, as upstream's):
//! a price, a price adjustment or extra extended-resource capacity for the instance types and
//! offerings its requirements select, so the scheduler and the disruption engine weigh what the
//! cloud provider's catalogue does not know (savings plans, licence fees, device plugins).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
use super::nodeclaim::{Operator, ResourceList};
use super::schema;
use super::validation::Problem;

/// Resources a NodeOverlay may not add: the ones the cloud provider reports itself.
pub const RESTRICTED_CAPACITY: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

/// The status condition the NodeOverlay controller sets: whether the overlay is in effect.
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// Reason of a `ValidationSucceeded=False` overlay whose fields fail runtime validation.
pub const REASON_RUNTIME_VALIDATION: &str = "RuntimeValidation";
/// Reason of a `ValidationSucceeded=False` overlay that collides with another of equal weight.
pub const REASON_CONFLICT: &str = "Conflict";

/// Desired state of a NodeOverlay.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    singular = "nodeoverlay",
    shortname = "overlays",
    category = "karpenter",
    status = "NodeOverlayStatus",
    doc = "NodeOverlay adjusts the instance types Karpenter simulates",
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["requirements"]))]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "!has(self.price) || !has(self.priceAdjustment)", "message": "cannot set both 'price' and 'priceAdjustment'"}]))]
pub struct NodeOverlaySpec {
    /// Which instance types and offerings the overlay applies to: well-known labels (instance
    /// type, zone, capacity type, `karpenter.sh/nodepool`) and the NodePool template's labels.
    #[serde(default)]
    #[schemars(length(max = 100), transform = schema::overlay_requirement_list_rules)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    #[schemars(transform = schema::required_without_default)]
    pub requirements: Vec<OverlayRequirement>,
    /// A change to the matching offerings' price: `+0.5`, `-0.5`, `+10%` or `-15%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(
        r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"
    ))]
    pub price_adjustment: Option<String>,
    /// The matching offerings' price in USD per hour, replacing the provider's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^\d+(\.\d+)?$"))]
    pub price: Option<String>,
    /// Extended resources the matching instance types have (never cpu, memory,
    /// ephemeral-storage or pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, schema::QuantitySchema>>")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))", "message": "invalid resource restricted"}]))]
    pub capacity: Option<ResourceList>,
    /// Precedence among overlays (1-10000; unset is 0): the higher weight wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// A label selector requirement of a NodeOverlay (no `minValues`, unlike a NodePool's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OverlayRequirement {
    /// The label key.
    #[schemars(length(max = 316), pattern(schema::QUALIFIED_NAME_PATTERN))]
    #[schemars(transform = schema::overlay_requirement_key_rules)]
    pub key: String,
    /// How the key relates to the values.
    pub operator: Operator,
    /// Values for In/NotIn, or a single integer for Gt/Lt/Gte/Lte.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    #[schemars(transform = schema::requirement_values)]
    pub values: Vec<String>,
}

/// Observed state of a NodeOverlay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeOverlayStatus {
    /// `ValidationSucceeded` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::condition_list)]
    pub conditions: Vec<Condition>,
}

/// How an overlay changes an offering's price.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PriceChange {
    /// `spec.price`: this price.
    Set(f64),
    /// `spec.priceAdjustment` `±x`: the price plus `x`.
    Add(f64),
    /// `spec.priceAdjustment` `±x%`: the price times `1 + x/100`.
    Percent(f64),
}

impl PriceChange {
    /// The price after the change, never below zero.
    pub fn apply(self, price: f64) -> f64 {
        let changed = match self {
            PriceChange::Set(p) => p,
            PriceChange::Add(d) => price + d,
            PriceChange::Percent(p) => price * (1.0 + p / 100.0),
        };
        changed.max(0.0)
    }
}

impl NodeOverlay {
    /// Upstream's weight ordering: higher weight first, equal weights by name, later in the
    /// alphabet first.
    pub fn precedence(a: &NodeOverlay, b: &NodeOverlay) -> std::cmp::Ordering {
        let weight = |o: &NodeOverlay| o.spec.weight.unwrap_or(0);
        weight(b)
            .cmp(&weight(a))
            .then_with(|| b.metadata.name.cmp(&a.metadata.name))
    }

    /// The checks upstream's CRD makes with patterns and CEL rules, with the fix in each message.
    pub fn validate(&self) -> Result<(), Vec<Problem>> {
        let spec = &self.spec;
        let mut problems = Vec::new();
        let mut problem = |path: String, message: String| problems.push(Problem { path, message });
        if spec.price.is_some() && spec.price_adjustment.is_some() {
            problem(
                "spec".into(),
                "Invalid value: cannot set both 'price' and 'priceAdjustment'; keep one".into(),
            );
        }
        if let Some(price) = &spec.price
            && parse_price(price).is_none()
        {
            problem(
                "spec.price".into(),
                format!(
                    "Invalid value: {price:?}: give a non-negative decimal price such as \"0.25\""
                ),
            );
        }
        if let Some(adjustment) = &spec.price_adjustment
            && parse_adjustment(adjustment).is_none()
        {
            problem(
                "spec.priceAdjustment".into(),
                format!(
                    "Invalid value: {adjustment:?}: give a signed amount (\"+0.5\", \"-0.5\") or percentage (\"+10%\", \"-15%\", at most \"-100%\")"
                ),
            );
        }
        if let Some(weight) = spec.weight
            && !(1..=10000).contains(&weight)
        {
            problem(
                "spec.weight".into(),
                format!("Invalid value: {weight}: the weight must be between 1 and 10000"),
            );
        }
        for name in spec.capacity.iter().flat_map(BTreeMap::keys) {
            if RESTRICTED_CAPACITY.contains(&name.as_str()) {
                problem(
                    format!("spec.capacity.{name}"),
                    "Invalid value: invalid resource restricted: an overlay adds extended resources only, not cpu, memory, ephemeral-storage or pods".into(),
                );
            }
        }
        for (i, r) in spec.requirements.iter().enumerate() {
            let path = format!("spec.requirements[{i}]");
            let bad = match r.operator {
                Operator::In | Operator::NotIn if r.values.is_empty() => Some(format!(
                    "requirements with operator '{:?}' must have a value defined",
                    r.operator
                )),
                Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
                    if r.values.len() != 1 || r.values[0].parse::<u64>().is_err() =>
                {
                    Some("requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value".into())
                }
                _ => None,
            };
            if let Some(message) = bad {
                problem(path, format!("Invalid value: {message}"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// The overlay's price change, `None` when it sets none or the value does not parse
    /// ([`NodeOverlay::validate`] reports that).
    pub fn price_change(&self) -> Option<PriceChange> {
        match (&self.spec.price, &self.spec.price_adjustment) {
            (Some(price), _) => parse_price(price).map(PriceChange::Set),
            (None, Some(adjustment)) => parse_adjustment(adjustment),
            (None, None) => None,
        }
    }
}

/// `^\d+(\.\d+)?$`.
fn parse_price(s: &str) -> Option<f64> {
    let (whole, fraction) = s.split_once('.').unwrap_or((s, "0"));
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    (digits(whole) && digits(fraction))
        .then(|| s.parse::<f64>().ok())
        .flatten()
        .filter(|p| p.is_finite())
}

/// A signed decimal (`+0.5`, `-.5`) or a signed percentage (`+10%`, `-15.5%`, at most `-100%`).
fn parse_adjustment(s: &str) -> Option<PriceChange> {
    let sign = match s.as_bytes().first()? {
        b'+' => 1.0,
        b'-' => -1.0,
        _ => return None,
    };
    let rest = &s[1..];
    let (number, percent) = match rest.strip_suffix('%') {
        Some(n) => (n, true),
        None => (rest, false),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) || (whole.is_empty() && fraction.is_empty()) {
        return None;
    }
    if number.ends_with('.') {
        return None;
    }
    let value = sign * format!("0{number}").parse::<f64>().ok()?;
    if !value.is_finite() {
        return None;
    }
    if percent {
        (value >= -100.0).then_some(PriceChange::Percent(value))
    } else {
        Some(PriceChange::Add(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(name: &str, weight: Option<i32>) -> NodeOverlay {
        NodeOverlay::new(
            name,
            NodeOverlaySpec {
                weight,
                ..NodeOverlaySpec::default()
            },
        )
    }

    #[test]
    fn adjustments_parse_as_upstream_patterns_allow() {
        assert_eq!(parse_adjustment("+0.5"), Some(PriceChange::Add(0.5)));
        assert_eq!(parse_adjustment("-.5"), Some(PriceChange::Add(-0.5)));
        assert_eq!(parse_adjustment("+10%"), Some(PriceChange::Percent(10.0)));
        assert_eq!(
            parse_adjustment("-15.5%"),
            Some(PriceChange::Percent(-15.5))
        );
        assert_eq!(
            parse_adjustment("-100%"),
            Some(PriceChange::Percent(-100.0))
        );
        for bad in ["0.5", "10%", "-101%", "+", "+1.", "+1.2.3", "+a", "-", "+%"] {
            assert_eq!(parse_adjustment(bad), None, "{bad}");
        }
        assert_eq!(parse_price("0.25"), Some(0.25));
        assert_eq!(parse_price("3"), Some(3.0));
        for bad in ["-1", ".5", "1.", "", "1e3"] {
            assert_eq!(parse_price(bad), None, "{bad}");
        }
    }

    #[test]
    fn price_changes_apply_and_never_go_negative() {
        assert_eq!(PriceChange::Set(0.3).apply(1.0), 0.3);
        assert_eq!(PriceChange::Add(-0.25).apply(1.0), 0.75);
        assert_eq!(PriceChange::Percent(-10.0).apply(2.0), 1.8);
        assert_eq!(PriceChange::Add(-5.0).apply(1.0), 0.0);
    }

    #[test]
    fn validation_rejects_what_upstream_rejects() {
        let mut o = overlay("a", Some(0));
        o.spec.price = Some("1".into());
        o.spec.price_adjustment = Some("+1".into());
        o.spec.capacity = Some(BTreeMap::from([(
            "cpu".to_owned(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
        )]));
        o.spec.requirements = vec![OverlayRequirement {
            key: "node.kubernetes.io/instance-type".into(),
            operator: Operator::In,
            values: vec![],
        }];
        let paths: Vec<String> = o
            .validate()
            .unwrap_err()
            .into_iter()
            .map(|p| p.path)
            .collect();
        assert_eq!(
            paths,
            [
                "spec",
                "spec.weight",
                "spec.capacity.cpu",
                "spec.requirements[0]"
            ]
        );
        assert!(overlay("b", Some(10)).validate().is_ok());
    }

    #[test]
    fn precedence_is_weight_then_name_descending() {
        let mut list = [
            overlay("a", Some(5)),
            overlay("b", None),
            overlay("c", Some(5)),
        ];
        list.sort_by(NodeOverlay::precedence);
        let names: Vec<_> = list
            .iter()
            .map(|o| o.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["c", "a", "b"]);
    }
}
