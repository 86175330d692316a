//! NodeOverlays applied to instance types (upstream's `NodeOverlay` gate): which overlays take
//! effect (weight order, equal-weight conflicts) and the instance types a NodePool sees once they
//! have. Decided once per scheduler input, so the provisioner, the disruption engine and
//! `simulate` weigh the same prices and capacities.

use std::collections::{BTreeMap, BTreeSet};

use crate::apis::labels;
use crate::apis::nodeoverlay::{NodeOverlay, PriceChange};
use crate::scheduling::instance_type::{InstanceType, Offering};
use crate::scheduling::requirements::{Requirement, Requirements};
use crate::scheduling::resources::Resources;

/// A NodePool's view of the instance types: its name, its template labels and the types its
/// node class offers.
pub struct PoolTypes<'a> {
    /// The NodePool's name (`karpenter.sh/nodepool`).
    pub pool: &'a str,
    /// `spec.template.metadata.labels`.
    pub labels: &'a BTreeMap<String, String>,
    /// The instance types before any overlay.
    pub types: &'a [InstanceType],
}

/// What became of one NodeOverlay: the `ValidationSucceeded` condition it earns.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// In effect.
    Applied,
    /// Its fields fail validation (the message names the field and the fix).
    Invalid(String),
    /// It sets a price for an offering, or a resource for an instance type, that an overlay of
    /// the same weight earlier in name order already sets; it is not applied anywhere.
    Conflict(String),
}

/// An overlay in effect, parsed once.
struct Effective {
    weight: i32,
    requirements: Requirements,
    price: Option<PriceChange>,
    capacity: Resources,
}

impl Effective {
    /// Whether the overlay selects this offering of `it` for `pool`.
    fn matches(&self, pool: &PoolTypes<'_>, it: &InstanceType, offering: &Offering) -> bool {
        let mut node: BTreeMap<String, String> = pool.labels.clone();
        node.insert(labels::NODEPOOL.to_owned(), pool.pool.to_owned());
        node.extend(it.labels.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        node.insert(labels::INSTANCE_TYPE.to_owned(), it.name.to_string());
        node.insert(labels::ZONE.to_owned(), offering.zone.to_string());
        if let Some(id) = &offering.zone_id {
            node.insert(labels::ZONE_ID.to_owned(), id.to_string());
        }
        node.insert(
            labels::CAPACITY_TYPE.to_owned(),
            offering.capacity_type.label().to_owned(),
        );
        self.requirements.is_compatible_labels(&node)
    }

    /// Whether it selects `it` at all: capacity applies to the whole type then, as upstream's.
    fn matches_type(&self, pool: &PoolTypes<'_>, it: &InstanceType) -> bool {
        it.offerings.iter().any(|o| self.matches(pool, it, o))
    }
}

/// The overlays in effect, in precedence order, and every overlay's verdict.
pub struct Overlays {
    effective: Vec<Effective>,
    verdicts: BTreeMap<String, Verdict>,
}

impl Overlays {
    /// Decides which of `overlays` take effect against the instance types of `pools`, in
    /// upstream's order (higher weight first, equal weights later name first): an invalid overlay
    /// is left out; one that sets an offering's price or a type's resource that an accepted
    /// overlay of the same weight sets is a conflict and is left out whole.
    pub fn decide<'a>(
        overlays: impl IntoIterator<Item = &'a NodeOverlay>,
        pools: &[PoolTypes<'_>],
    ) -> Self {
        let mut ordered: Vec<&NodeOverlay> = overlays.into_iter().collect();
        ordered.sort_by(|a, b| NodeOverlay::precedence(a, b));
        let mut effective: Vec<Effective> = Vec::new();
        let mut verdicts = BTreeMap::new();
        for overlay in ordered {
            let name = overlay.metadata.name.clone().unwrap_or_default();
            let verdict = match parse(overlay) {
                Err(message) => Verdict::Invalid(message),
                Ok(candidate) => match conflict(&candidate, &effective, pools) {
                    Some(message) => Verdict::Conflict(message),
                    None => {
                        effective.push(candidate);
                        Verdict::Applied
                    }
                },
            };
            verdicts.insert(name, verdict);
        }
        Self {
            effective,
            verdicts,
        }
    }

    /// Every overlay's verdict, by name.
    pub fn verdicts(&self) -> &BTreeMap<String, Verdict> {
        &self.verdicts
    }

    /// Whether no overlay is in effect (the types need no copy).
    pub fn is_empty(&self) -> bool {
        self.effective.is_empty()
    }

    /// `pool.types` with the overlays in effect applied: each offering takes the price change of
    /// the first overlay selecting it; each extended resource the value of the first overlay
    /// selecting the type that sets it, in capacity and allocatable alike.
    pub fn apply(&self, pool: &PoolTypes<'_>) -> Vec<InstanceType> {
        pool.types
            .iter()
            .map(|it| {
                let mut out = it.clone();
                for offering in &mut out.offerings {
                    if let Some(change) = self
                        .effective
                        .iter()
                        .filter(|e| e.price.is_some())
                        .find(|e| e.matches(pool, it, offering))
                        .and_then(|e| e.price)
                    {
                        offering.price = change.apply(offering.price);
                    }
                }
                let mut set = BTreeSet::new();
                for e in self.effective.iter().filter(|e| e.matches_type(pool, it)) {
                    for (name, amount) in e.capacity.iter() {
                        if set.insert(name.to_owned()) {
                            out.capacity.set(name, amount);
                            out.allocatable.set(name, amount);
                        }
                    }
                }
                out
            })
            .collect()
    }
}

fn parse(overlay: &NodeOverlay) -> Result<Effective, String> {
    let problems = |ps: Vec<crate::apis::Problem>| {
        ps.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    overlay.validate().map_err(problems)?;
    let capacity = match &overlay.spec.capacity {
        Some(list) => Resources::from_list(list)
            .map_err(|e| format!("spec.capacity: {e}; give Kubernetes quantities such as \"1\""))?,
        None => Resources::default(),
    };
    let requirements = overlay
        .spec
        .requirements
        .iter()
        .map(|r| {
            Requirement::new(
                &r.key,
                r.operator,
                r.values.iter().map(String::as_str),
                None,
            )
        })
        .collect();
    Ok(Effective {
        weight: overlay.spec.weight.unwrap_or(0),
        requirements,
        price: overlay.price_change(),
        capacity,
    })
}

/// Why `candidate` collides with an accepted overlay of its weight, if it does.
fn conflict(
    candidate: &Effective,
    accepted: &[Effective],
    pools: &[PoolTypes<'_>],
) -> Option<String> {
    let peers: Vec<&Effective> = accepted
        .iter()
        .filter(|e| e.weight == candidate.weight)
        .collect();
    if peers.is_empty() {
        return None;
    }
    for pool in pools {
        for it in pool.types {
            if candidate.price.is_some() {
                for offering in &it.offerings {
                    if candidate.matches(pool, it, offering)
                        && peers
                            .iter()
                            .any(|p| p.price.is_some() && p.matches(pool, it, offering))
                    {
                        return Some(format!(
                            "conflict with another overlay: an overlay of weight {} already sets the price of {} ({}, {}) in NodePool {}; give one a different weight or disjoint requirements",
                            candidate.weight,
                            it.name,
                            offering.zone,
                            offering.capacity_type.label(),
                            pool.pool
                        ));
                    }
                }
            }
            if candidate.capacity.iter().next().is_some() && candidate.matches_type(pool, it) {
                for peer in &peers {
                    let shared = candidate
                        .capacity
                        .iter()
                        .find(|(name, _)| peer.capacity.get(name) != 0);
                    if let Some((name, _)) = shared
                        && peer.matches_type(pool, it)
                    {
                        return Some(format!(
                            "conflict with another overlay: an overlay of weight {} already sets {name} for {} in NodePool {}; give one a different weight or disjoint requirements",
                            candidate.weight, it.name, pool.pool
                        ));
                    }
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::apis::nodeclaim::Operator;
    use crate::apis::nodeoverlay::{NodeOverlaySpec, OverlayRequirement};
    use crate::scheduling::instance_type::CapacityType;

    fn offering(zone: &str, capacity_type: CapacityType, price: f64) -> Offering {
        Offering {
            zone: Arc::from(zone),
            zone_id: None,
            capacity_type,
            price,
            available: true,
            reservation: None,
            partition: None,
        }
    }

    fn types() -> Vec<InstanceType> {
        ["m5.large", "c5.large"]
            .into_iter()
            .map(|name| InstanceType {
                name: Arc::from(name),
                labels: BTreeMap::new(),
                offerings: vec![
                    offering("us-east-1a", CapacityType::OnDemand, 1.0),
                    offering("us-east-1a", CapacityType::Spot, 0.5),
                ],
                capacity: Resources::cpu_memory(2000, 8 << 30),
                overhead: Default::default(),
                allocatable: Resources::cpu_memory(2000, 8 << 30),
            })
            .collect()
    }

    fn overlay(name: &str, weight: Option<i32>, key: &str, values: &[&str]) -> NodeOverlay {
        NodeOverlay::new(
            name,
            NodeOverlaySpec {
                weight,
                requirements: vec![OverlayRequirement {
                    key: key.into(),
                    operator: Operator::In,
                    values: values.iter().map(|v| (*v).to_owned()).collect(),
                }],
                ..NodeOverlaySpec::default()
            },
        )
    }

    fn priced(mut o: NodeOverlay, adjustment: &str) -> NodeOverlay {
        o.spec.price_adjustment = Some(adjustment.into());
        o
    }

    fn with_capacity(mut o: NodeOverlay, name: &str, amount: &str) -> NodeOverlay {
        o.spec.capacity = Some(BTreeMap::from([(name.to_owned(), Quantity(amount.into()))]));
        o
    }

    fn run(
        overlays: &[NodeOverlay],
        pool_labels: &BTreeMap<String, String>,
    ) -> (Overlays, Vec<InstanceType>) {
        let types = types();
        let pool = PoolTypes {
            pool: "default",
            labels: pool_labels,
            types: &types,
        };
        let decided = Overlays::decide(overlays, std::slice::from_ref(&pool));
        let applied = decided.apply(&pool);
        (decided, applied)
    }

    fn price(types: &[InstanceType], name: &str, ct: CapacityType) -> f64 {
        types
            .iter()
            .find(|t| t.name.as_ref() == name)
            .and_then(|t| t.offerings.iter().find(|o| o.capacity_type == ct))
            .map(|o| o.price)
            .unwrap_or(f64::NAN)
    }

    #[test]
    fn a_price_adjustment_changes_only_the_offerings_it_selects() {
        let o = priced(
            overlay("spot-m5", None, labels::INSTANCE_TYPE, &["m5.large"]),
            "-50%",
        );
        let mut o = o;
        o.spec.requirements.push(OverlayRequirement {
            key: labels::CAPACITY_TYPE.into(),
            operator: Operator::In,
            values: vec!["spot".into()],
        });
        let (_, out) = run(&[o], &BTreeMap::new());
        assert_eq!(price(&out, "m5.large", CapacityType::Spot), 0.25);
        assert_eq!(price(&out, "m5.large", CapacityType::OnDemand), 1.0);
        assert_eq!(price(&out, "c5.large", CapacityType::Spot), 0.5);
    }

    #[test]
    fn the_higher_weight_price_wins_and_equal_weights_conflict() {
        let high = priced(
            overlay("high", Some(10), labels::INSTANCE_TYPE, &["m5.large"]),
            "+1",
        );
        let low = priced(
            overlay("low", Some(1), labels::INSTANCE_TYPE, &["m5.large"]),
            "+5",
        );
        let (decided, out) = run(&[low, high], &BTreeMap::new());
        assert_eq!(price(&out, "m5.large", CapacityType::OnDemand), 2.0);
        assert_eq!(decided.verdicts()["low"], Verdict::Applied);

        let a = priced(
            overlay("a", Some(3), labels::INSTANCE_TYPE, &["m5.large"]),
            "+1",
        );
        let mut b = overlay("b", Some(3), labels::INSTANCE_TYPE, &["m5.large"]);
        b.spec.price = Some("7".into());
        let (decided, out) = run(&[a, b], &BTreeMap::new());
        // "b" comes first among equal weights (later name first); "a" collides with it.
        assert_eq!(price(&out, "m5.large", CapacityType::OnDemand), 7.0);
        assert_eq!(decided.verdicts()["b"], Verdict::Applied);
        assert!(
            matches!(decided.verdicts()["a"], Verdict::Conflict(ref m) if m.contains("m5.large"))
        );
    }

    #[test]
    fn equal_weights_on_disjoint_offerings_do_not_conflict() {
        let a = priced(
            overlay("a", Some(3), labels::INSTANCE_TYPE, &["m5.large"]),
            "+1",
        );
        let b = priced(
            overlay("b", Some(3), labels::INSTANCE_TYPE, &["c5.large"]),
            "+2",
        );
        let (decided, out) = run(&[a, b], &BTreeMap::new());
        assert!(decided.verdicts().values().all(|v| *v == Verdict::Applied));
        assert_eq!(price(&out, "c5.large", CapacityType::OnDemand), 3.0);
    }

    #[test]
    fn capacity_adds_extended_resources_and_conflicts_per_resource() {
        let foo = with_capacity(
            overlay("foo", None, labels::INSTANCE_TYPE, &["m5.large"]),
            "example.com/foo",
            "2",
        );
        let bar = with_capacity(
            overlay("bar", None, labels::INSTANCE_TYPE, &["m5.large"]),
            "example.com/bar",
            "1",
        );
        let (decided, out) = run(&[foo.clone(), bar], &BTreeMap::new());
        assert!(decided.verdicts().values().all(|v| *v == Verdict::Applied));
        let m5 = &out[0];
        assert_eq!(m5.allocatable.get("example.com/foo"), 2);
        assert_eq!(m5.capacity.get("example.com/bar"), 1);
        assert_eq!(m5.allocatable.get("cpu"), 2000);
        assert_eq!(out[1].allocatable.get("example.com/foo"), 0);

        let zfoo = with_capacity(
            overlay("zfoo", None, labels::INSTANCE_TYPE, &["m5.large"]),
            "example.com/foo",
            "4",
        );
        let (decided, out) = run(&[foo, zfoo], &BTreeMap::new());
        assert!(matches!(decided.verdicts()["foo"], Verdict::Conflict(_)));
        assert_eq!(out[0].allocatable.get("example.com/foo"), 4);
    }

    #[test]
    fn requirements_match_the_pool_name_and_template_labels() {
        let o = priced(overlay("team", None, "team", &["a"]), "+1");
        let (_, out) = run(
            std::slice::from_ref(&o),
            &BTreeMap::from([("team".to_owned(), "a".to_owned())]),
        );
        assert_eq!(price(&out, "c5.large", CapacityType::OnDemand), 2.0);
        let (_, out) = run(&[o], &BTreeMap::new());
        assert_eq!(price(&out, "c5.large", CapacityType::OnDemand), 1.0);
        let o = priced(overlay("pool", None, labels::NODEPOOL, &["other"]), "+1");
        let (_, out) = run(&[o], &BTreeMap::new());
        assert_eq!(price(&out, "c5.large", CapacityType::OnDemand), 1.0);
    }

    #[test]
    fn an_invalid_overlay_is_not_applied() {
        let mut o = with_capacity(
            overlay("cpu", None, labels::INSTANCE_TYPE, &["m5.large"]),
            "cpu",
            "64",
        );
        o.spec.price_adjustment = Some("+1".into());
        let (decided, out) = run(&[o], &BTreeMap::new());
        assert!(
            matches!(decided.verdicts()["cpu"], Verdict::Invalid(ref m) if m.contains("spec.capacity.cpu"))
        );
        assert!(decided.is_empty());
        assert_eq!(out[0].allocatable.get("cpu"), 2000);
        assert_eq!(price(&out, "m5.large", CapacityType::OnDemand), 1.0);
    }
}
