//! An in-memory EC2 on the bundled catalog: the cloud behind `run --cloud-provider simulated`,
//! the scenario tests and the fault-injection run.
//!
//! It behaves like the AWS provider where the controllers can tell the difference: launches are
//! idempotent per NodeClaim, the cheapest allowed offering wins with reserved > spot > on-demand
//! preference, offerings can be made to run out of capacity (and are then skipped for three
//! minutes, like upstream's unavailable-offerings cache), termination passes through
//! `shutting-down`, and node classes resolve to deterministic subnets, security groups and AMIs
//! (IDs given in selector terms are used as given, so changing them produces drift).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};

use crate::apis::ec2nodeclass::NodeClassCondition;
use crate::apis::ec2nodeclass::{
    AMI, AMIFamily, AMIRequirement, EC2NodeClassStatus, SecurityGroup, Subnet,
};
use crate::apis::labels;
use crate::apis::nodeclaim::Operator;
use crate::apis::{EC2NodeClass, NodeClaim};
use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::scheduling::instance_type::{CapacityType, InstanceType, NodeClassSettings};

use super::interruption::{HealthProblem, InterruptionEvent};
use super::{
    CloudError, CloudProvider, Instance, InstanceState, Launched, NodeClassResolution,
    ResolveError, claim_requests, claim_requirements, launch_candidates, node_labels,
    provider_id_instance,
};

/// How long an offering that ran out of capacity is skipped (upstream's ICE cache TTL).
pub const UNAVAILABLE_OFFERING_TTL: Duration = Duration::minutes(3);

/// One way to buy capacity: instance type, zone and capacity type.
pub type OfferingKey = (String, String, CapacityType);

/// The simulated cloud.
pub struct SimulatedProvider {
    catalog: Catalog,
    clock: Arc<dyn Clock>,
    state: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    instances: BTreeMap<String, Instance>,
    /// Offerings that fail every launch until cleared (a capacity shortage the test controls).
    exhausted: HashSet<OfferingKey>,
    /// Offerings that failed recently, with when they may be tried again.
    unavailable: HashMap<OfferingKey, DateTime<Utc>>,
    /// Calls that fail with a throttling error before any succeeds again.
    throttle_next: u32,
    /// What the health reports say is wrong with each instance (by provider ID).
    health: BTreeMap<String, BTreeSet<HealthProblem>>,
    next_id: u64,
    types: HashMap<String, Arc<Vec<InstanceType>>>,
}

impl SimulatedProvider {
    /// A simulated cloud selling what `catalog` lists.
    pub fn new(catalog: Catalog, clock: Arc<dyn Clock>) -> Self {
        // Instance IDs continue from a per-process starting point, as EC2's never repeat: a
        // restarted simulated cloud must not hand out the name of a Node that still exists.
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or_default();
        Self {
            catalog,
            clock,
            state: Mutex::new(Inner {
                next_id: (start & 0x00ff_ffff) << 8,
                ..Inner::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes an offering fail every launch (`InsufficientInstanceCapacity`) until
    /// [`SimulatedProvider::restore`].
    pub fn exhaust(&self, key: OfferingKey) {
        self.lock().exhausted.insert(key);
    }

    /// Ends a shortage made with [`SimulatedProvider::exhaust`].
    pub fn restore(&self, key: &OfferingKey) {
        self.lock().exhausted.remove(key);
    }

    /// Makes the next `calls` calls fail with a throttling error, as EC2's request limits do.
    pub fn throttle(&self, calls: u32) {
        self.lock().throttle_next = calls;
    }

    /// Records an instance that exists outside this process's memory (the controller restarted
    /// and found its Node), so launches stay idempotent and garbage collection sees it.
    pub fn adopt(&self, instance: Instance) {
        let mut inner = self.lock();
        inner.next_id = inner
            .next_id
            .max(instance_serial(&instance.provider_id) + 1);
        inner
            .instances
            .insert(instance.provider_id.clone(), instance);
    }

    /// Marks an offering unavailable for [`UNAVAILABLE_OFFERING_TTL`], as an interruption or a
    /// failed launch does.
    pub fn mark_unavailable(&self, key: OfferingKey) {
        let until = self.clock.now() + UNAVAILABLE_OFFERING_TTL;
        self.lock().unavailable.insert(key, until);
    }

    /// Whether an offering is currently skipped.
    pub fn is_unavailable(&self, key: &OfferingKey) -> bool {
        let now = self.clock.now();
        self.lock()
            .unavailable
            .get(key)
            .is_some_and(|until| *until > now)
    }

    /// Reports `problem` for the instance from now on, through
    /// [`CloudProvider::instance_health`] while it runs, as EC2 reports a check failed past its
    /// threshold or a scheduled event, until [`SimulatedProvider::report_healthy`].
    pub fn report_unhealthy(&self, provider_id: &str, problem: HealthProblem) {
        self.lock()
            .health
            .entry(provider_id.to_string())
            .or_default()
            .insert(problem);
    }

    /// Ends the problems reported with [`SimulatedProvider::report_unhealthy`]: the checks pass
    /// again and no event is scheduled.
    pub fn report_healthy(&self, provider_id: &str) {
        self.lock().health.remove(provider_id);
    }

    /// Every instance, terminated ones included, for assertions.
    pub fn instances(&self) -> Vec<Instance> {
        self.lock().instances.values().cloned().collect()
    }

    fn check_throttle(&self) -> Result<(), CloudError> {
        let mut inner = self.lock();
        if inner.throttle_next > 0 {
            inner.throttle_next -= 1;
            return Err(CloudError::Transient(
                "RequestLimitExceeded: Request limit exceeded (simulated)".into(),
            ));
        }
        Ok(())
    }

    fn types_for(&self, nodeclass: &EC2NodeClass) -> Arc<Vec<InstanceType>> {
        let settings = NodeClassSettings::for_nodeclass(nodeclass);
        let zones: Vec<String> = nodeclass
            .status
            .as_ref()
            .map(|s| s.subnets.iter().map(|s| s.zone.clone()).collect())
            .unwrap_or_default();
        let key = format!(
            "{:?}|{:?}|{}|{}|{zones:?}",
            settings.ami_family,
            settings.kubelet,
            settings.ephemeral_storage,
            settings.instance_store_raid0
        );
        let base = {
            let mut inner = self.lock();
            inner
                .types
                .entry(key)
                .or_insert_with(|| {
                    let mut types = self.catalog.instance_types(&settings);
                    if !zones.is_empty() {
                        for it in &mut types {
                            it.offerings.retain(|o| zones.iter().any(|z| *z == *o.zone));
                        }
                        types.retain(|it| !it.offerings.is_empty());
                    }
                    Arc::new(types)
                })
                .clone()
        };
        let now = self.clock.now();
        let inner = self.lock();
        let blocked: Vec<&OfferingKey> = inner
            .unavailable
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(k, _)| k)
            .collect();
        if blocked.is_empty() {
            return base;
        }
        let mut types = (*base).clone();
        for it in &mut types {
            for o in &mut it.offerings {
                if blocked.iter().any(|(t, z, c)| {
                    t.as_str() == it.name.as_ref()
                        && z.as_str() == &*o.zone
                        && *c == o.capacity_type
                }) {
                    o.available = false;
                }
            }
        }
        Arc::new(types)
    }
}

/// The numeric part of a simulated instance ID, so adopted instances never collide with new ones.
fn instance_serial(provider_id: &str) -> u64 {
    super::provider_id_instance(provider_id)
        .and_then(|id| id.strip_prefix("i-"))
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .unwrap_or(0)
}

/// FNV-1a: stable, dependency-free IDs for simulated resources.
fn short_hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Deterministic resolution of a node class against the simulated region.
fn resolve_nodeclass(catalog: &Catalog, nodeclass: &EC2NodeClass) -> EC2NodeClassStatus {
    let spec = &nodeclass.spec;
    let zones = &catalog.zones;
    let ids: Vec<&String> = spec
        .subnet_selector_terms
        .iter()
        .filter_map(|t| t.id.as_ref())
        .collect();
    let subnets: Vec<Subnet> = if ids.is_empty() {
        zones
            .iter()
            .map(|(zone, id)| Subnet {
                id: format!("subnet-{}", short_hash(zone)),
                zone: zone.to_string(),
                zone_id: Some(id.to_string()),
            })
            .collect()
    } else {
        ids.iter()
            .enumerate()
            .map(|(i, id)| {
                let (zone, zone_id) = &zones[i % zones.len().max(1)];
                Subnet {
                    id: (*id).clone(),
                    zone: zone.to_string(),
                    zone_id: Some(zone_id.to_string()),
                }
            })
            .collect()
    };
    let security_groups = spec
        .security_group_selector_terms
        .iter()
        .map(|t| SecurityGroup {
            id: t.id.clone().unwrap_or_else(|| {
                format!("sg-{}", short_hash(&format!("{:?}{:?}", t.name, t.tags)))
            }),
            name: t.name.clone(),
        })
        .collect();
    let arch = |a: &str| AMIRequirement {
        key: labels::ARCH.into(),
        operator: Operator::In,
        values: vec![a.into()],
    };
    let mut amis = Vec::new();
    for term in &spec.ami_selector_terms {
        if let Some(id) = &term.id {
            amis.push(AMI {
                id: id.clone(),
                name: None,
                deprecated: None,
                requirements: Vec::new(),
            });
            continue;
        }
        let what = term
            .alias
            .clone()
            .or_else(|| term.name.clone())
            .or_else(|| term.ssm_parameter.clone())
            .unwrap_or_else(|| format!("{:?}", term.tags));
        for a in ["amd64", "arm64"] {
            amis.push(AMI {
                id: format!("ami-{}", short_hash(&format!("{what}/{a}"))),
                name: Some(format!("{what}-{a}")),
                deprecated: None,
                requirements: vec![arch(a)],
            });
        }
    }
    let instance_profile = spec.instance_profile.clone().or_else(|| {
        spec.role.as_ref().map(|role| {
            format!(
                "karpenter-rs_{}",
                &short_hash(&format!("{role}/{}", catalog.region))[..12]
            )
        })
    });
    EC2NodeClassStatus {
        subnets,
        security_groups,
        capacity_reservations: Vec::new(),
        amis,
        instance_profile,
        conditions: Vec::new(),
    }
}

#[async_trait]
impl CloudProvider for SimulatedProvider {
    fn name(&self) -> &'static str {
        "simulated"
    }

    fn repair_policies(&self) -> &'static [crate::apis::repair::RepairPolicy] {
        &crate::apis::repair::EKS_POLICIES
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> Result<Launched, CloudError> {
        self.check_throttle()?;
        let status = super::nodeclass_ready(nodeclass)?;
        let name = claim.metadata.name.clone().unwrap_or_default();
        let types = self.types_for(nodeclass);
        let requirements = claim_requirements(claim);
        let existing = self
            .lock()
            .instances
            .values()
            .find(|i| i.nodeclaim.as_deref() == Some(name.as_str()) && !i.state.is_terminating())
            .cloned();
        if let Some(instance) = existing {
            let it = types
                .iter()
                .find(|it| it.name.as_ref() == instance.instance_type)
                .ok_or_else(|| {
                    CloudError::Invalid(format!(
                        "instance type {} of {} is no longer offered",
                        instance.instance_type, instance.provider_id
                    ))
                })?;
            let offering = it
                .offerings
                .iter()
                .find(|o| *o.zone == *instance.zone && o.capacity_type == instance.capacity_type)
                .ok_or_else(|| {
                    CloudError::Invalid(format!(
                        "offering of {} is no longer listed",
                        instance.provider_id
                    ))
                })?;
            return Ok(launched(&instance, it, offering, &requirements));
        }
        let candidates = launch_candidates(types.iter(), &requirements, &claim_requests(claim));
        if candidates.is_empty() {
            return Err(CloudError::InsufficientCapacity(format!(
                "no instance type among {} offered in an allowed zone and capacity type fits NodeClaim {name}",
                types.len()
            )));
        }
        let arch_of = |it: &InstanceType| it.labels.get(labels::ARCH).cloned();
        let mut tried = Vec::new();
        for (it, offering) in candidates {
            let key: OfferingKey = (
                it.name.to_string(),
                offering.zone.to_string(),
                offering.capacity_type,
            );
            let exhausted = self.lock().exhausted.contains(&key);
            if exhausted {
                self.mark_unavailable(key.clone());
                tried.push(format!("{}/{}/{}", key.0, key.1, key.2.label()));
                continue;
            }
            let image_id = status
                .amis
                .iter()
                .find(|ami| {
                    ami.requirements.iter().all(|r| {
                        r.key != labels::ARCH || arch_of(it).is_some_and(|a| r.values.contains(&a))
                    })
                })
                .map(|ami| ami.id.clone());
            let mut inner = self.lock();
            inner.next_id += 1;
            let instance = Instance {
                provider_id: format!("aws:///{}/i-{:017x}", offering.zone, inner.next_id),
                nodeclaim: Some(name.clone()),
                nodepool: claim
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::NODEPOOL))
                    .cloned(),
                instance_type: it.name.to_string(),
                zone: offering.zone.to_string(),
                capacity_type: offering.capacity_type,
                image_id,
                subnet_id: status
                    .subnets
                    .iter()
                    .find(|sn| *sn.zone == *offering.zone)
                    .map(|sn| sn.id.clone()),
                security_groups: Some(
                    status
                        .security_groups
                        .iter()
                        .map(|g| g.id.clone())
                        .collect::<Vec<_>>(),
                )
                .filter(|g| !g.is_empty()),
                placement_group: None,
                capacity_reservation_id: offering.reservation.as_ref().map(|r| r.id.to_string()),
                state: InstanceState::Running,
                launch_time: self.clock.now(),
            };
            inner
                .instances
                .insert(instance.provider_id.clone(), instance.clone());
            return Ok(launched(&instance, it, offering, &requirements));
        }
        Err(CloudError::InsufficientCapacity(format!(
            "InsufficientInstanceCapacity for every allowed offering of NodeClaim {name}: {}",
            tried.join(", ")
        )))
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        self.check_throttle()?;
        let mut inner = self.lock();
        match inner.instances.get_mut(provider_id) {
            Some(i) if i.state == InstanceState::Terminated => {
                Err(CloudError::NotFound(provider_id.into()))
            }
            Some(i) => {
                i.state = InstanceState::ShuttingDown;
                Ok(())
            }
            None => Err(CloudError::NotFound(provider_id.into())),
        }
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.check_throttle()?;
        let mut inner = self.lock();
        let instance = inner
            .instances
            .get_mut(provider_id)
            .ok_or_else(|| CloudError::NotFound(provider_id.into()))?;
        let seen = instance.clone();
        // Termination completes between two looks, as EC2's does within a minute or so.
        if instance.state == InstanceState::ShuttingDown {
            instance.state = InstanceState::Terminated;
        }
        Ok(seen)
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.check_throttle()?;
        Ok(self
            .lock()
            .instances
            .values()
            .filter(|i| i.state != InstanceState::Terminated)
            .cloned()
            .collect())
    }

    /// The problems reported with [`SimulatedProvider::report_unhealthy`] of the instances
    /// that run, as DescribeInstanceStatus lists only running instances.
    async fn instance_health(&self) -> Option<Result<Vec<InterruptionEvent>, CloudError>> {
        let inner = self.lock();
        let notices = inner
            .health
            .iter()
            .filter(|(provider_id, _)| {
                inner
                    .instances
                    .get(*provider_id)
                    .is_some_and(|i| i.state == InstanceState::Running)
            })
            .filter_map(|(provider_id, problems)| {
                provider_id_instance(provider_id).map(|id| (id, problems))
            })
            .flat_map(|(id, problems)| problems.iter().map(move |p| p.notice(id)))
            .collect();
        Some(Ok(notices))
    }

    async fn instance_types(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Arc<Vec<InstanceType>>, CloudError> {
        Ok(self.types_for(nodeclass))
    }

    async fn resolve(&self, nodeclass: &EC2NodeClass) -> NodeClassResolution {
        self.check_throttle().map_err(|e| {
            ResolveError::new(NodeClassCondition::ValidationSucceeded, "Throttled", e)
        })?;
        let status = resolve_nodeclass(&self.catalog, nodeclass);
        if status.security_groups.is_empty() {
            return Err(ResolveError::new(
                NodeClassCondition::SecurityGroupsReady,
                "SecurityGroupsNotFound",
                CloudError::NodeClassNotReady(
                    "spec.securityGroupSelectorTerms matched no security group".into(),
                ),
            ));
        }
        if status.amis.is_empty() {
            return Err(ResolveError::new(
                NodeClassCondition::AMIsReady,
                "AMINotFound",
                CloudError::NodeClassNotReady("spec.amiSelectorTerms matched no AMI".into()),
            ));
        }
        if status.instance_profile.is_none() {
            return Err(ResolveError::new(
                NodeClassCondition::InstanceProfileReady,
                "InstanceProfileNotFound",
                CloudError::Invalid("set spec.role or spec.instanceProfile".into()),
            ));
        }
        Ok(status)
    }
}

fn launched(
    instance: &Instance,
    it: &InstanceType,
    offering: &crate::scheduling::instance_type::Offering,
    requirements: &crate::scheduling::requirements::Requirements,
) -> Launched {
    let mut labels_ = node_labels(it, offering, requirements);
    labels_.insert(labels::INSTANCE_TYPE.into(), it.name.to_string());
    Launched {
        provider_id: instance.provider_id.clone(),
        image_id: instance.image_id.clone(),
        instance_type: it.name.to_string(),
        zone: instance.zone.clone(),
        capacity_type: instance.capacity_type,
        capacity: it.capacity.clone(),
        allocatable: it.allocatable.clone(),
        labels: labels_,
        annotations: BTreeMap::new(),
    }
}

/// The AMI family a simulated node reports in its OS image label.
pub fn os_image(nodeclass: &EC2NodeClass) -> &'static str {
    match nodeclass.spec.ami_family().unwrap_or(AMIFamily::AL2023) {
        AMIFamily::AL2 => "Amazon Linux 2",
        AMIFamily::AL2023 => "Amazon Linux 2023",
        AMIFamily::Bottlerocket => "Bottlerocket OS",
        AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => "Windows",
        AMIFamily::Custom => "Custom",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::conditions::{self, Condition};
    use crate::clock::FakeClock;

    fn nodeclass(ami_id: Option<&str>, ready: bool) -> EC2NodeClass {
        let ami = match ami_id {
            Some(id) => format!("[{{id: {id}}}]"),
            None => "[{alias: al2023@latest}]".into(),
        };
        let mut class: EC2NodeClass = serde_yaml_ng::from_str(&format!(
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\nspec:\n  role: KarpenterNodeRole\n  amiSelectorTerms: {ami}\n  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]\n  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]\n"
        ))
        .expect("nodeclass");
        if ready {
            let catalog = Catalog::bundled("us-east-1").expect("catalog");
            let mut status = resolve_nodeclass(&catalog, &class);
            status.conditions.push(Condition {
                type_: "Ready".into(),
                status: conditions::TRUE.into(),
                observed_generation: None,
                last_transition_time: Utc::now(),
                reason: "Ready".into(),
                message: String::new(),
            });
            class.status = Some(status);
        }
        class
    }

    fn claim(name: &str, types: &[&str], capacity: &[&str]) -> NodeClaim {
        serde_yaml_ng::from_str(&format!(
            "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: {name}, labels: {{karpenter.sh/nodepool: default}}}}\nspec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n  resources: {{requests: {{cpu: '1'}}}}\n  requirements:\n  - {{key: node.kubernetes.io/instance-type, operator: In, values: [{}]}}\n  - {{key: karpenter.sh/capacity-type, operator: In, values: [{}]}}\n",
            types.join(", "),
            capacity.join(", ")
        ))
        .expect("nodeclaim")
    }

    fn provider() -> (SimulatedProvider, Arc<FakeClock>) {
        let clock = Arc::new(FakeClock::new(Utc::now()));
        let catalog = Catalog::bundled("us-east-1").expect("catalog");
        (SimulatedProvider::new(catalog, clock.clone()), clock)
    }

    #[tokio::test]
    async fn a_retried_launch_finds_the_first_instance() {
        let (cloud, _) = provider();
        let class = nodeclass(None, true);
        let c = claim("default-abcde", &["m5.large", "m5.xlarge"], &["on-demand"]);
        let first = cloud.create(&c, &class).await.expect("launch");
        let again = cloud.create(&c, &class).await.expect("relaunch");
        assert_eq!(first, again);
        assert_eq!(cloud.list().await.expect("list").len(), 1);
        assert_eq!(first.instance_type, "m5.large");
        assert_eq!(first.labels[labels::INSTANCE_TYPE], "m5.large");
        assert_eq!(first.labels[labels::CAPACITY_TYPE], "on-demand");
        assert!(first.provider_id.starts_with("aws:///us-east-1"));
        assert!(
            first
                .image_id
                .as_deref()
                .is_some_and(|i| i.starts_with("ami-"))
        );
    }

    #[tokio::test]
    async fn spot_is_chosen_when_allowed() {
        let (cloud, _) = provider();
        let c = claim("default-spot", &["m5.large"], &["spot", "on-demand"]);
        let launched = cloud
            .create(&c, &nodeclass(None, true))
            .await
            .expect("launch");
        assert_eq!(launched.capacity_type, CapacityType::Spot);
    }

    #[tokio::test]
    async fn insufficient_capacity_falls_back_and_skips_the_pool_for_three_minutes() {
        let (cloud, clock) = provider();
        let class = nodeclass(None, true);
        let c = claim("default-ice", &["m5.large", "m5.xlarge"], &["on-demand"]);
        let types = cloud.instance_types(&class).await.expect("types");
        let cheapest =
            launch_candidates(types.iter(), &claim_requirements(&c), &claim_requests(&c))
                .first()
                .map(|(it, o)| (it.name.to_string(), o.zone.to_string(), o.capacity_type))
                .expect("a candidate");
        cloud.exhaust(cheapest.clone());
        let launched = cloud.create(&c, &class).await.expect("fallback launch");
        assert_ne!(
            (launched.instance_type.clone(), launched.zone.clone()),
            (cheapest.0.clone(), cheapest.1.clone())
        );
        assert!(cloud.is_unavailable(&cheapest));
        let types = cloud.instance_types(&class).await.expect("types");
        let offering_available = |types: &[InstanceType]| {
            types
                .iter()
                .find(|it| *it.name == *cheapest.0)
                .and_then(|it| {
                    it.offerings
                        .iter()
                        .find(|o| *o.zone == *cheapest.1 && o.capacity_type == cheapest.2)
                })
                .map(|o| o.available)
        };
        assert_eq!(offering_available(&types), Some(false));
        clock.advance(Duration::minutes(3) + Duration::seconds(1));
        assert!(!cloud.is_unavailable(&cheapest));
        let types = cloud.instance_types(&class).await.expect("types");
        assert_eq!(offering_available(&types), Some(true));
    }

    #[tokio::test]
    async fn no_capacity_anywhere_is_reported_as_such() {
        let (cloud, _) = provider();
        let class = nodeclass(None, true);
        let c = claim("default-none", &["m5.large"], &["on-demand"]);
        let types = cloud.instance_types(&class).await.expect("types");
        for (it, o) in launch_candidates(types.iter(), &claim_requirements(&c), &claim_requests(&c))
        {
            cloud.exhaust((it.name.to_string(), o.zone.to_string(), o.capacity_type));
        }
        let err = cloud.create(&c, &class).await.expect_err("no capacity");
        assert!(matches!(err, CloudError::InsufficientCapacity(_)), "{err}");
        assert!(cloud.list().await.expect("list").is_empty());
    }

    #[tokio::test]
    async fn an_unresolved_nodeclass_makes_the_launch_wait() {
        let (cloud, _) = provider();
        let c = claim("default-wait", &["m5.large"], &["on-demand"]);
        let err = cloud
            .create(&c, &nodeclass(None, false))
            .await
            .expect_err("not ready");
        assert!(matches!(err, CloudError::NodeClassNotReady(_)), "{err}");
    }

    #[tokio::test]
    async fn health_problems_are_reported_while_the_instance_runs() {
        let (cloud, _) = provider();
        let launched = cloud
            .create(
                &claim("default-sick", &["m5.large"], &["on-demand"]),
                &nodeclass(None, true),
            )
            .await
            .expect("launch");
        let id = provider_id_instance(&launched.provider_id).expect("an instance ID");
        let reported = || async {
            cloud
                .instance_health()
                .await
                .expect("reports health")
                .expect("read")
        };
        assert!(reported().await.is_empty());
        cloud.report_unhealthy(&launched.provider_id, HealthProblem::EventScheduled);
        cloud.report_unhealthy(&launched.provider_id, HealthProblem::InstanceCheckFailed);
        assert_eq!(
            reported().await,
            [
                HealthProblem::InstanceCheckFailed.notice(id),
                HealthProblem::EventScheduled.notice(id)
            ]
        );
        cloud.report_healthy(&launched.provider_id);
        assert!(reported().await.is_empty(), "recovered");
        cloud.report_unhealthy(&launched.provider_id, HealthProblem::SystemCheckFailed);
        cloud.delete(&launched.provider_id).await.expect("delete");
        assert!(
            reported().await.is_empty(),
            "EC2 reports the status of running instances only"
        );
    }

    #[tokio::test]
    async fn delete_passes_through_shutting_down_to_terminated() {
        let (cloud, _) = provider();
        let c = claim("default-del", &["m5.large"], &["on-demand"]);
        let launched = cloud
            .create(&c, &nodeclass(None, true))
            .await
            .expect("launch");
        cloud.delete(&launched.provider_id).await.expect("delete");
        let seen = cloud.get(&launched.provider_id).await.expect("get");
        assert_eq!(seen.state, InstanceState::ShuttingDown);
        let seen = cloud.get(&launched.provider_id).await.expect("get");
        assert_eq!(seen.state, InstanceState::Terminated);
        assert!(matches!(
            cloud.delete(&launched.provider_id).await,
            Err(CloudError::NotFound(_))
        ));
        assert!(cloud.list().await.expect("list").is_empty());
    }

    #[tokio::test]
    async fn an_instance_reports_what_drift_is_judged_on() {
        let (cloud, _) = provider();
        let class = nodeclass(Some("ami-0aaaaaaaaaaaaaaaa"), true);
        let c = claim("default-drift", &["m5.large"], &["on-demand"]);
        let launched = cloud.create(&c, &class).await.expect("launch");
        let instance = cloud.get(&launched.provider_id).await.expect("get");
        let status = class.status.as_ref().expect("status");
        assert_eq!(instance.image_id.as_deref(), Some("ami-0aaaaaaaaaaaaaaaa"));
        let subnet = status
            .subnets
            .iter()
            .find(|s| s.id == instance.subnet_id.clone().unwrap_or_default())
            .expect("the instance's subnet is one the class selects");
        assert_eq!(subnet.zone, instance.zone);
        let groups: Vec<String> = status
            .security_groups
            .iter()
            .map(|g| g.id.clone())
            .collect();
        assert!(!groups.is_empty());
        assert_eq!(instance.security_groups, Some(groups));
    }

    #[tokio::test]
    async fn throttling_is_transient() {
        let (cloud, _) = provider();
        cloud.throttle(1);
        assert!(matches!(cloud.list().await, Err(CloudError::Transient(_))));
        assert!(cloud.list().await.is_ok());
    }

    #[tokio::test]
    async fn adopted_instances_keep_launches_idempotent_after_a_restart() {
        let (first, _) = provider();
        let class = nodeclass(None, true);
        let c = claim("default-restart", &["m5.large"], &["on-demand"]);
        let launched = first.create(&c, &class).await.expect("launch");
        let (second, _) = provider();
        for instance in first.instances() {
            second.adopt(instance);
        }
        let again = second.create(&c, &class).await.expect("relaunch");
        assert_eq!(again.provider_id, launched.provider_id);
        let other = second
            .create(
                &claim("default-other", &["m5.large"], &["on-demand"]),
                &class,
            )
            .await
            .expect("launch");
        assert_ne!(other.provider_id, launched.provider_id);
    }
}
