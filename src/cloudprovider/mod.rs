//! The controller's hands on the cloud: launch an instance for a NodeClaim, find it again,
//! terminate it, list what the cluster owns, tell which instance types a node class can use and
//! whether a launched NodeClaim no longer matches its node class.
//!
//! The controllers talk only to [`CloudProvider`], so the same reconcilers drive real EC2
//! (`aws`) and the in-memory [`simulated`] cloud that `run --cloud-provider simulated`, the tests
//! and the benchmarks use. Which offering a launch picks is decided here, once
//! ([`launch_candidates`]), so that `simulate`'s prediction and both providers agree.

pub mod aws;
pub mod instrumented;
pub mod interruption;
pub mod simulated;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::apis::conditions;
use crate::apis::ec2nodeclass::{EC2NodeClassStatus, NodeClassCondition};
use crate::apis::{EC2NodeClass, NodeClaim};
use crate::scheduling::instance_type::{CapacityType, InstanceType, Offering, node_labels};
use crate::scheduling::requirements::Requirements;
use crate::scheduling::resources::Resources;
use crate::scheduling::scheduler;
use interruption::{InterruptionEvent, InterruptionMessage};

/// The most instance type × zone pairs one launch request carries (CreateFleet's override cap
/// that upstream also applies).
pub const MAX_LAUNCH_OVERRIDES: usize = 60;

/// What a successful launch tells the controller about the new instance, written to the
/// NodeClaim's status and labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Launched {
    /// `aws:///<zone>/<instance-id>`: how the Node and the NodeClaim find each other.
    pub provider_id: String,
    /// The image the instance booted.
    pub image_id: Option<String>,
    /// The instance type chosen from the NodeClaim's options.
    pub instance_type: String,
    /// Availability zone.
    pub zone: String,
    /// How the instance is bought.
    pub capacity_type: CapacityType,
    /// Full capacity the node will report.
    pub capacity: Resources,
    /// What pods can use once the node is up.
    pub allocatable: Resources,
    /// Labels the node will carry (instance type, zone, capacity type and the instance labels).
    pub labels: BTreeMap<String, String>,
    /// Annotations the NodeClaim gets (the AWS provider: the instance profile it launched with,
    /// which garbage collection keeps while the NodeClaim exists).
    pub annotations: BTreeMap<String, String>,
}

/// Where an instance is in its life, as EC2 reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceState {
    /// Booting.
    Pending,
    /// Up.
    Running,
    /// Stopping or stopped: will not serve pods until started again.
    Stopped,
    /// Terminating.
    ShuttingDown,
    /// Gone.
    Terminated,
}

impl InstanceState {
    /// Whether the instance is on its way out or gone, so a NodeClaim waiting for termination can
    /// let go once it is [`InstanceState::Terminated`].
    pub fn is_terminating(self) -> bool {
        matches!(self, Self::ShuttingDown | Self::Terminated)
    }
}

/// An instance as the cloud reports it, with the tags that tie it to the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// `aws:///<zone>/<instance-id>`.
    pub provider_id: String,
    /// The NodeClaim it was launched for (`karpenter.sh/nodeclaim` tag).
    pub nodeclaim: Option<String>,
    /// The NodePool (`karpenter.sh/nodepool` tag).
    pub nodepool: Option<String>,
    /// Instance type.
    pub instance_type: String,
    /// Availability zone.
    pub zone: String,
    /// How it is bought.
    pub capacity_type: CapacityType,
    /// Image it runs.
    pub image_id: Option<String>,
    /// Subnet it was launched into, when the cloud reports it.
    pub subnet_id: Option<String>,
    /// Security groups attached to it, when the cloud reports any.
    pub security_groups: Option<Vec<String>>,
    /// The capacity reservation a `reserved` instance runs in (None for spot and on-demand).
    pub capacity_reservation_id: Option<String>,
    /// The placement group it runs in, when the cloud reports placement (`None`: not reported,
    /// which never drifts).
    pub placement_group: Option<InstancePlacementGroup>,
    /// Lifecycle state.
    pub state: InstanceState,
    /// When it was launched: garbage collection leaves young instances alone.
    pub launch_time: DateTime<Utc>,
}

/// The placement group an instance runs in as the cloud reports it; all `None` when it runs in
/// none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstancePlacementGroup {
    /// The group's ID (`pg-...`).
    pub id: Option<String>,
    /// The group's name.
    pub name: Option<String>,
    /// The partition, in a partition placement group.
    pub partition: Option<i32>,
}

/// Why a cloud call failed, sorted by what the controller should do about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    /// No offering the NodeClaim allows has capacity right now: delete the NodeClaim so the
    /// provisioner plans again without the exhausted offerings.
    #[error("insufficient capacity: {0}")]
    InsufficientCapacity(String),
    /// The node class cannot launch yet (subnets, security groups, AMIs or instance profile not
    /// resolved): wait and retry.
    #[error("node class not ready: {0}")]
    NodeClassNotReady(String),
    /// The instance does not exist (any more).
    #[error("instance not found: {0}")]
    NotFound(String),
    /// A transient failure (throttling, timeouts): retry with backoff.
    #[error("transient cloud error: {0}")]
    Transient(String),
    /// The request cannot succeed as given (bad user data, unknown AMI); reported on the object.
    #[error("{0}")]
    Invalid(String),
}

impl AsRef<CloudError> for CloudError {
    fn as_ref(&self) -> &CloudError {
        self
    }
}

/// What [`CloudProvider::tag_registered`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tagging {
    /// The instance carries the tags.
    Done,
    /// Not yet: the cloud paces these calls (one per node) and this NodeClaim's turn comes after
    /// this long; ask again then. Nothing waits meanwhile, so the NodeClaim's lifecycle goes on.
    Paced(std::time::Duration),
}

/// The node class' status, once its controller has resolved it and marked it Ready: what every
/// launch reads its subnets, security groups and AMIs from.
fn nodeclass_ready(nodeclass: &EC2NodeClass) -> Result<&EC2NodeClassStatus, CloudError> {
    let name = nodeclass.metadata.name.as_deref().unwrap_or_default();
    let status = nodeclass.status.as_ref().ok_or_else(|| {
        CloudError::NodeClassNotReady(format!("EC2NodeClass {name} has not been resolved yet"))
    })?;
    match conditions::find(&status.conditions, conditions::READY) {
        Some(c) if c.status == conditions::TRUE => Ok(status),
        Some(c) => Err(CloudError::NodeClassNotReady(format!(
            "EC2NodeClass {name} is not ready: {}",
            c.message
        ))),
        None => Err(CloudError::NodeClassNotReady(format!(
            "EC2NodeClass {name} has no Ready condition yet"
        ))),
    }
}

/// Why a node class did not resolve: the condition that is false, its reason (a CamelCase word,
/// as conditions carry) and the error whose message explains it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}={}: {error}", condition.type_(), reason)]
pub struct ResolveError {
    /// The failed condition.
    pub condition: NodeClassCondition,
    /// The condition's reason, e.g. `AMINotFound`.
    pub reason: &'static str,
    /// What went wrong; [`CloudError::Transient`] means "try again", not a verdict.
    pub error: CloudError,
}

impl AsRef<CloudError> for ResolveError {
    fn as_ref(&self) -> &CloudError {
        &self.error
    }
}

impl ResolveError {
    /// A failure of `condition` for `reason`.
    pub fn new(condition: NodeClassCondition, reason: &'static str, error: CloudError) -> Self {
        Self {
            condition,
            reason,
            error,
        }
    }
}

/// What a node class's selectors resolve to in the cloud; the EC2NodeClass controller writes it
/// to the status with readiness conditions.
pub type NodeClassResolution = Result<EC2NodeClassStatus, ResolveError>;

/// What still needs the cloud resources a provider made for node classes, so their garbage
/// collection leaves them be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeClassesInUse {
    /// The EC2NodeClasses that exist, and those NodeClaims still name.
    pub nodeclasses: std::collections::BTreeSet<String>,
    /// The instance profiles EC2NodeClasses name (`spec.instanceProfile`) or resolved
    /// (`status.instanceProfile`), and those NodeClaims were launched with
    /// (`karpenter.k8s.aws/instance-profile-name`).
    pub instance_profiles: std::collections::BTreeSet<String>,
}

/// The operations the controllers need from a cloud.
///
/// Implementations must make [`CloudProvider::create`] idempotent per NodeClaim name: a launch
/// retried after a crash finds the instance the first attempt made instead of making another.
#[async_trait]
pub trait CloudProvider: Send + Sync {
    /// A short name for logs and metrics (`aws`, `simulated`).
    fn name(&self) -> &'static str;

    /// The Node conditions that, held past their toleration, get a Node replaced (node repair,
    /// behind the `NodeRepair` gate). None by default: a provider that declares none is never
    /// repaired.
    fn repair_policies(&self) -> &'static [crate::apis::repair::RepairPolicy] {
        &[]
    }

    /// How long the EC2NodeClass controller waits before resolving a class again: five minutes
    /// unless the provider says otherwise (AWS: the shorter of `AMI_REFRESH_INTERVAL` and
    /// `SUBNET_REFRESH_INTERVAL`).
    fn resolution_period(&self) -> std::time::Duration {
        std::time::Duration::from_secs(300)
    }

    /// Whether [`CloudProvider::resolve`] looks up capacity reservations (AWS: the
    /// `ReservedCapacity` gate), so that the EC2NodeClass reports `CapacityReservationsReady`.
    /// Not by default: a cloud without reservations says nothing about them.
    fn resolves_capacity_reservations(&self) -> bool {
        false
    }

    /// Launches (or finds the already launched) instance for a NodeClaim on its node class.
    async fn create(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> Result<Launched, CloudError>;

    /// Starts terminating the instance; [`CloudError::NotFound`] once it is gone.
    async fn delete(&self, provider_id: &str) -> Result<(), CloudError>;

    /// The instance behind a provider ID.
    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError>;

    /// Every instance tagged for this cluster, for garbage collection.
    async fn list(&self) -> Result<Vec<Instance>, CloudError>;

    /// Labels the instance of a registered NodeClaim for people reading the cloud's console: its
    /// Node's name, the NodeClaim and the cluster, leaving any of those tags the instance already
    /// carries as they are (a `Name` from the node class's `tags` stays). Nothing by default: a
    /// cloud without instance tags has nothing to write.
    async fn tag_registered(
        &self,
        _provider_id: &str,
        _nodeclaim: &str,
        _node_name: &str,
    ) -> Result<Tagging, CloudError> {
        Ok(Tagging::Done)
    }

    /// Deletes what the provider made for node class `nodeclass` (AWS: its launch templates and
    /// the instance profile it manages for `spec.role`), once the class is being deleted and no
    /// NodeClaim uses it. Nothing by default.
    async fn delete_nodeclass_resources(
        &self,
        _nodeclass: &EC2NodeClass,
    ) -> Result<(), CloudError> {
        Ok(())
    }

    /// Deletes what the provider made for node classes nothing uses any more (`in_use` says what
    /// is used) — left behind when a class went while the controller was down, or its finalizer
    /// was removed by hand — and says what it deleted. Nothing by default.
    async fn collect_nodeclass_resources(
        &self,
        _in_use: &NodeClassesInUse,
    ) -> Result<Vec<String>, CloudError> {
        Ok(Vec::new())
    }

    /// Instance types a node class can launch, with current offerings (exhausted ones marked
    /// unavailable) and the node class's overhead applied.
    async fn instance_types(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Arc<Vec<InstanceType>>, CloudError>;

    /// Resolves a node class's selectors (subnets, security groups, AMIs, instance profile).
    async fn resolve(&self, nodeclass: &EC2NodeClass) -> NodeClassResolution;

    /// The interruption notices waiting now (a provider may wait a while for the first, as SQS
    /// long polling does); `None` when the provider has no interruption source, which ends the
    /// interruption controller.
    async fn interruptions(&self) -> Option<Result<Vec<InterruptionMessage>, CloudError>> {
        None
    }

    /// Takes what an interruption says about capacity into account (an interrupted spot pool is
    /// marked unavailable), so its replacement is launched elsewhere.
    async fn record_interruption(&self, _event: &InterruptionEvent) -> Result<(), CloudError> {
        Ok(())
    }

    /// The instances the cloud reports unhealthy now, as notices to act on (AWS: EC2
    /// DescribeInstanceStatus, polled every minute by the interruption controller); `None` when
    /// the provider has no such source.
    async fn instance_health(&self) -> Option<Result<Vec<InterruptionEvent>, CloudError>> {
        None
    }

    /// Removes a handled notice from the source, so it is not delivered again.
    async fn acknowledge_interruption(
        &self,
        _message: &InterruptionMessage,
    ) -> Result<(), CloudError> {
        Ok(())
    }
}

/// The requirements a NodeClaim's spec states.
pub fn claim_requirements(claim: &NodeClaim) -> Requirements {
    Requirements::from_node_selector_requirements(&claim.spec.requirements)
}

/// Requests a NodeClaim must fit, from `spec.resources.requests`.
pub fn claim_requests(claim: &NodeClaim) -> Resources {
    claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| Resources::from_list(r).ok())
        .unwrap_or_default()
}

/// The offerings a launch for these requirements may use, in the order the cloud is asked to try
/// them: capacity type by preference (reserved, spot, on-demand), then price, at most
/// [`MAX_LAUNCH_OVERRIDES`]. Instance types that do not fit `requests` or contradict the
/// requirements are left out; so are unavailable offerings.
pub fn launch_candidates<'a>(
    types: impl IntoIterator<Item = &'a InstanceType>,
    requirements: &Requirements,
    requests: &Resources,
) -> Vec<(&'a InstanceType, &'a Offering)> {
    launch_order(
        types
            .into_iter()
            .filter(|it| requests.fits(&it.allocatable))
            .filter(|it| scheduler::type_matches(it, requirements)),
        requirements,
    )
}

/// The first offering [`launch_candidates`] would list for instance types already known to fit
/// and to satisfy the requirements' labels, such as a planned NodeClaim's options: what
/// `simulate` reports as the launch. One pass, no sort and no re-derived requirement sets, which
/// matters when reporting thousands of NodeClaims with hundreds of options each.
pub fn first_launch_choice<'a>(
    types: impl IntoIterator<Item = &'a InstanceType>,
    requirements: &Requirements,
) -> Option<(&'a InstanceType, &'a Offering)> {
    let allowed = offering_filter(requirements);
    types
        .into_iter()
        .flat_map(|it| it.offerings.iter().map(move |o| (it, o)))
        .filter(|(_, o)| allowed(o))
        .min_by(launch_cmp)
}

fn launch_order<'a>(
    types: impl IntoIterator<Item = &'a InstanceType>,
    requirements: &Requirements,
) -> Vec<(&'a InstanceType, &'a Offering)> {
    let allowed = offering_filter(requirements);
    let mut out: Vec<(&InstanceType, &Offering)> = types
        .into_iter()
        .flat_map(|it| it.offerings.iter().map(move |o| (it, o)))
        .filter(|(_, o)| allowed(o))
        .collect();
    out.sort_by(launch_cmp);
    // A partition placement group's class offers each pool once per partition (adjacent after
    // the sort); the launch asks for each pool once.
    out.dedup_by(|(a_it, a), (b_it, b)| {
        a_it.name == b_it.name
            && a.zone == b.zone
            && a.capacity_type == b.capacity_type
            && a.reservation.as_ref().map(|r| &r.id) == b.reservation.as_ref().map(|r| &r.id)
    });
    out.truncate(MAX_LAUNCH_OVERRIDES);
    out
}

/// Whether an offering is available now and in a zone, capacity type and reservation the
/// requirements allow ([`crate::scheduling::scheduler::offering_allowed`], the scheduler's own rule).
fn offering_filter(requirements: &Requirements) -> impl Fn(&Offering) -> bool + '_ {
    let allowed = crate::scheduling::scheduler::offering_allowed(requirements);
    move |o| o.available && allowed(o)
}

/// The launch order: capacity type by preference, then price, then name and zone for a
/// deterministic tie-break.
fn launch_cmp(
    (a_it, a): &(&InstanceType, &Offering),
    (b_it, b): &(&InstanceType, &Offering),
) -> std::cmp::Ordering {
    capacity_rank(a.capacity_type)
        .cmp(&capacity_rank(b.capacity_type))
        .then(a.price.total_cmp(&b.price))
        .then(a_it.name.cmp(&b_it.name))
        .then(a.zone.cmp(&b.zone))
}

/// Upstream's capacity-type preference: reserved capacity is already paid for, spot is cheaper
/// than on-demand.
fn capacity_rank(ct: CapacityType) -> u8 {
    match ct {
        CapacityType::Reserved => 0,
        CapacityType::Spot => 1,
        CapacityType::OnDemand => 2,
    }
}

/// The zone part of an `aws:///<zone>/<id>` provider ID.
pub fn provider_id_zone(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws:///")?;
    rest.split_once('/').map(|(zone, _)| zone)
}

/// The instance ID part of an `aws:///<zone>/<id>` provider ID.
pub fn provider_id_instance(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws:///")?;
    rest.split_once('/')
        .map(|(_, id)| id)
        .filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::labels;
    use crate::apis::nodeclaim::Operator;
    use crate::catalog::Catalog;
    use crate::scheduling::instance_type::{
        NodeClassSettings, ReservedCapacity, add_reserved_offerings,
    };
    use crate::scheduling::requirements::Requirement;

    fn types() -> Vec<InstanceType> {
        let catalog = Catalog::bundled("us-east-1").expect("bundled catalog");
        catalog.instance_types(&NodeClassSettings::for_family(
            crate::apis::ec2nodeclass::AMIFamily::AL2023,
        ))
    }

    #[test]
    fn spot_is_preferred_then_price_and_the_list_is_capped() {
        let types = types();
        let mut reqs = Requirements::new();
        reqs.add_requirement(Requirement::new(
            labels::CAPACITY_TYPE,
            Operator::In,
            ["spot", "on-demand"],
            None,
        ));
        let requests = Resources::cpu_memory(1000, 1 << 30);
        let c = launch_candidates(&types, &reqs, &requests);
        assert_eq!(c.len(), MAX_LAUNCH_OVERRIDES);
        assert!(c.iter().all(|(_, o)| o.capacity_type == CapacityType::Spot));
        assert!(c.windows(2).all(|w| w[0].1.price <= w[1].1.price));
        assert!(c.iter().all(|(it, _)| requests.fits(&it.allocatable)));
        // simulate's one-pass choice over types known to fit is the head of the same order.
        let fitting: Vec<&InstanceType> = types
            .iter()
            .filter(|it| requests.fits(&it.allocatable))
            .collect();
        let (it, o) = first_launch_choice(fitting.iter().copied(), &reqs).expect("a choice");
        assert_eq!((&it.name, &o.zone), (&c[0].0.name, &c[0].1.zone));
        assert_eq!(o.capacity_type, c[0].1.capacity_type);
    }

    #[test]
    fn requirements_narrow_types_zones_and_capacity() {
        let types = types();
        let mut reqs = Requirements::new();
        reqs.add_requirement(Requirement::new(
            labels::INSTANCE_TYPE,
            Operator::In,
            ["m5.large", "m5.xlarge"],
            None,
        ));
        reqs.add_requirement(Requirement::new(
            labels::ZONE,
            Operator::In,
            ["us-east-1b"],
            None,
        ));
        reqs.add_requirement(Requirement::new(
            labels::CAPACITY_TYPE,
            Operator::In,
            ["on-demand"],
            None,
        ));
        let c = launch_candidates(&types, &reqs, &Resources::default());
        let names: Vec<&str> = c.iter().map(|(it, _)| it.name.as_ref()).collect();
        assert_eq!(names, ["m5.large", "m5.xlarge"]);
        assert!(c.iter().all(|(_, o)| o.zone.as_ref() == "us-east-1b"));
        let too_big = Resources::cpu_memory(64_000, 0);
        assert!(launch_candidates(&types, &reqs, &too_big).is_empty());
    }

    #[test]
    fn a_claim_pinned_to_a_reservation_launches_only_into_it() {
        let mut types = types();
        let reservation = |id: &str| ReservedCapacity {
            id: id.into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            reservation_type: "default".into(),
            available: 1,
            interruptible: id == "cr-3",
        };
        add_reserved_offerings(
            &mut types,
            &[
                reservation("cr-1"),
                reservation("cr-2"),
                reservation("cr-3"),
            ],
        );
        let requirement = |key: &str, values: &[&str]| {
            Requirement::new(key, Operator::In, values.iter().copied(), None)
        };
        let mut reqs = Requirements::new();
        reqs.add_requirement(requirement(labels::INSTANCE_TYPE, &["m5.large"]));
        reqs.add_requirement(requirement(
            labels::CAPACITY_TYPE,
            &["reserved", "on-demand"],
        ));
        let c = launch_candidates(&types, &reqs, &Resources::default());
        assert_eq!(
            c[0].1.capacity_type,
            CapacityType::Reserved,
            "reserved first"
        );
        let mut pinned = reqs.clone();
        pinned.add_requirement(requirement(labels::CAPACITY_RESERVATION_ID, &["cr-2"]));
        let c = launch_candidates(&types, &pinned, &Resources::default());
        let ids: Vec<&str> = c
            .iter()
            .map(|(_, o)| o.reservation.as_ref().map_or("-", |r| &*r.id))
            .collect();
        assert_eq!(ids, ["cr-2"], "no other reservation and no on-demand pool");
        let (it, o) = c[0];
        let node = node_labels(it, o, &pinned);
        assert_eq!(node[labels::CAPACITY_RESERVATION_ID], "cr-2");
        assert_eq!(node[labels::CAPACITY_RESERVATION_TYPE], "default");
        assert_eq!(node[labels::CAPACITY_RESERVATION_INTERRUPTIBLE], "false");
        assert_eq!(node[labels::CAPACITY_TYPE], "reserved");
        // The interruptible label selects reservations as upstream's offerings carry it.
        let mut lent = reqs.clone();
        lent.add_requirement(requirement(
            labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
            &["true"],
        ));
        let c = launch_candidates(&types, &lent, &Resources::default());
        let ids: Vec<&str> = c
            .iter()
            .map(|(_, o)| o.reservation.as_ref().map_or("-", |r| &*r.id))
            .collect();
        assert_eq!(ids, ["cr-3"], "only the interruptible reservation");
        let node = node_labels(c[0].0, c[0].1, &lent);
        assert_eq!(node[labels::CAPACITY_RESERVATION_INTERRUPTIBLE], "true");
        let mut own = reqs.clone();
        own.add_requirement(requirement(
            labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
            &["false"],
        ));
        let c = launch_candidates(&types, &own, &Resources::default());
        assert!(
            c.iter()
                .all(|(_, o)| o.reservation.as_ref().is_some_and(|r| !r.interruptible)),
            "{c:?}"
        );
        assert!(!c.is_empty());
        let mut outside = reqs;
        outside.add_requirement(Requirement::new(
            labels::CAPACITY_RESERVATION_ID,
            Operator::DoesNotExist,
            std::iter::empty::<&str>(),
            None,
        ));
        let c = launch_candidates(&types, &outside, &Resources::default());
        assert!(
            c.iter()
                .all(|(_, o)| o.capacity_type == CapacityType::OnDemand)
        );
        assert!(!c.is_empty());
    }

    #[test]
    fn provider_ids_split_into_zone_and_instance() {
        let id = "aws:///us-east-1a/i-0123456789abcdef0";
        assert_eq!(provider_id_zone(id), Some("us-east-1a"));
        assert_eq!(provider_id_instance(id), Some("i-0123456789abcdef0"));
        assert_eq!(provider_id_instance("kind://x"), None);
        assert_eq!(provider_id_instance("aws:///us-east-1a/"), None);
    }
}
