//! CreateFleet: one instant request per launch, carrying every allowed instance type × zone as an
//! override so EC2 falls back across pools within the call.
//!
//! Spot asks EC2 for `price-capacity-optimized`, on-demand for `lowest-price`; override
//! priorities follow Karpenter's own order ([`crate::cloudprovider::launch_candidates`]). A
//! reserved launch is an on-demand request whose launch templates target the reservations (see
//! [`super::launch_templates::ReservationTargeting`]); into a capacity block it is a
//! `capacity-block` request without on-demand options, and into interruptible reservations a
//! `reserved-capacity` request whose `ReservedCapacityOptions` name them, as upstream sends it.
//! Identical requests that arrive together (a burst of NodeClaims from one NodePool) are merged
//! into one call with a larger target capacity, as upstream's batcher does: a short idle window
//! (35 ms) that closes after one second at most.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetReservationType, FleetType,
    InstanceType as Ec2InstanceType, OnDemandOptionsRequest, ReservedCapacityOptionsRequest,
    ResourceType, SpotAllocationStrategy, SpotOptionsRequest, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::cloudprovider::CloudError;
use crate::metrics::METRICS;
use crate::scheduling::instance_type::CapacityType;

use super::sdk_error;
use super::tags::to_ec2;

/// How long a batch waits for more identical requests after the last one arrived.
pub const BATCH_IDLE: Duration = Duration::from_millis(35);
/// The longest a batch stays open.
pub const BATCH_MAX: Duration = Duration::from_secs(1);
/// The most launches one batch carries.
pub const BATCH_MAX_ITEMS: usize = 1000;

/// One pool EC2 may launch from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Override {
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Subnet in that zone.
    pub subnet_id: String,
    /// Karpenter's preference among all pools of the request (0 first), sent as the override's
    /// priority: pools are grouped by launch template, so their order alone does not say it.
    pub rank: usize,
}

/// The overrides that share one launch template.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TemplateConfig {
    /// Launch template name.
    pub launch_template: String,
    /// Pools, in Karpenter's preference order.
    pub overrides: Vec<Override>,
}

/// Which kind of reservation a reserved launch goes into: EC2 asks for each differently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReservationKind {
    /// On-Demand Capacity Reservations, launched as on-demand (also what spot and on-demand
    /// launches carry, where it means nothing).
    #[default]
    OnDemand,
    /// Capacity blocks: the `capacity-block` target capacity type.
    CapacityBlock,
    /// Interruptible reservations: the `reserved-capacity` target capacity type with
    /// `ReservedCapacityOptions.ReservationTypes` [`interruptible-capacity-reservation`].
    Interruptible,
}

/// A launch request, without the number of instances. Equal requests are merged into one call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FleetRequest {
    /// How the instances are bought.
    pub capacity_type: CapacityType,
    /// The kind of reservation of a reserved launch.
    pub reservation: ReservationKind,
    /// Templates with their pools.
    pub configs: Vec<TemplateConfig>,
    /// Tags for the instances, their volumes and the fleet.
    pub tags: BTreeMap<String, String>,
    /// `spec.context` of the node class.
    pub context: Option<String>,
}

impl FleetRequest {
    /// The zone of a subnet in this request.
    pub fn zone_of_subnet(&self, subnet: &str) -> Option<&str> {
        self.configs
            .iter()
            .flat_map(|c| &c.overrides)
            .find(|o| o.subnet_id == subnet)
            .map(|o| o.zone.as_str())
    }
}

/// An instance CreateFleet started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetInstance {
    /// Instance ID.
    pub id: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone, when the response tells.
    pub zone: Option<String>,
}

/// A pool CreateFleet could not launch from, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetError {
    /// EC2 error code, e.g. `InsufficientInstanceCapacity`.
    pub code: String,
    /// EC2's message.
    pub message: String,
    /// The pool's instance type, when the error names it.
    pub instance_type: Option<String>,
    /// The pool's zone, when the error names it (or its subnet).
    pub zone: Option<String>,
}

/// What one CreateFleet call did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetOutcome {
    /// Instances started.
    pub instances: Vec<FleetInstance>,
    /// Pools that failed.
    pub errors: Vec<FleetError>,
}

/// Whether an EC2 error code says a launch template (or its version) does not exist.
pub fn is_launch_template_not_found(code: &str) -> bool {
    matches!(
        code,
        "InvalidLaunchTemplateName.NotFoundException"
            | "InvalidLaunchTemplateId.NotFound"
            | "InvalidLaunchTemplateId.VersionNotFound"
    )
}

/// Sends one CreateFleet for `count` instances.
pub async fn create_fleet(
    ec2: &aws_sdk_ec2::Client,
    req: &FleetRequest,
    count: usize,
) -> Result<FleetOutcome, CloudError> {
    let count = i32::try_from(count).unwrap_or(i32::MAX);
    let default_type = match req.capacity_type {
        CapacityType::Spot => DefaultTargetCapacityType::Spot,
        CapacityType::Reserved => match req.reservation {
            ReservationKind::CapacityBlock => DefaultTargetCapacityType::CapacityBlock,
            ReservationKind::Interruptible => DefaultTargetCapacityType::ReservedCapacity,
            ReservationKind::OnDemand => DefaultTargetCapacityType::OnDemand,
        },
        CapacityType::OnDemand => DefaultTargetCapacityType::OnDemand,
    };
    let configs: Vec<FleetLaunchTemplateConfigRequest> = req
        .configs
        .iter()
        .map(|c| {
            let overrides = c
                .overrides
                .iter()
                .map(|o| {
                    FleetLaunchTemplateOverridesRequest::builder()
                        .instance_type(Ec2InstanceType::from(o.instance_type.as_str()))
                        .subnet_id(&o.subnet_id)
                        .availability_zone(&o.zone)
                        .priority(o.rank as f64 + 1.0)
                        .build()
                })
                .collect();
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_name(&c.launch_template)
                        .version("$Latest")
                        .build(),
                )
                .set_overrides(Some(overrides))
                .build()
        })
        .collect();
    let tag_spec = |rt: ResourceType| {
        TagSpecification::builder()
            .resource_type(rt)
            .set_tags(Some(to_ec2(&req.tags)))
            .build()
    };
    let mut call = ec2
        .create_fleet()
        .r#type(FleetType::Instant)
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(count)
                .default_target_capacity_type(default_type.clone())
                .build(),
        )
        .set_launch_template_configs(Some(configs))
        .tag_specifications(tag_spec(ResourceType::Instance))
        .tag_specifications(tag_spec(ResourceType::Volume))
        .tag_specifications(tag_spec(ResourceType::Fleet))
        .set_context(req.context.clone());
    call = match default_type {
        DefaultTargetCapacityType::Spot => call.spot_options(
            SpotOptionsRequest::builder()
                .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                .build(),
        ),
        DefaultTargetCapacityType::CapacityBlock => call,
        DefaultTargetCapacityType::ReservedCapacity => call.reserved_capacity_options(
            ReservedCapacityOptionsRequest::builder()
                .reservation_types(FleetReservationType::InterruptibleCapacityReservation)
                .build(),
        ),
        _ => call.on_demand_options(
            OnDemandOptionsRequest::builder()
                .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                .build(),
        ),
    };
    let out = match call.send().await {
        Ok(out) => out,
        // A missing template fails the whole call; reported like a pool error so the caller
        // handles it in one place (remake the template, retry once).
        Err(e) if e.code().is_some_and(is_launch_template_not_found) => {
            return Ok(FleetOutcome {
                instances: Vec::new(),
                errors: vec![FleetError {
                    code: e.code().unwrap_or_default().to_string(),
                    message: e.message().unwrap_or_default().to_string(),
                    instance_type: None,
                    zone: None,
                }],
            });
        }
        Err(e) => return Err(sdk_error("ec2:CreateFleet", e)),
    };
    let pool_of = |lto: Option<&aws_sdk_ec2::types::LaunchTemplateAndOverridesResponse>| {
        let o = lto.and_then(|l| l.overrides());
        let instance_type = o
            .and_then(|o| o.instance_type())
            .map(|t| t.as_str().to_string());
        let zone = o.and_then(|o| {
            o.availability_zone().map(str::to_string).or_else(|| {
                o.subnet_id()
                    .and_then(|s| req.zone_of_subnet(s))
                    .map(str::to_string)
            })
        });
        (instance_type, zone)
    };
    let mut outcome = FleetOutcome::default();
    for i in out.instances() {
        let (override_type, zone) = pool_of(i.launch_template_and_overrides());
        let instance_type = i
            .instance_type()
            .map(|t| t.as_str().to_string())
            .or(override_type)
            .unwrap_or_default();
        for id in i.instance_ids() {
            outcome.instances.push(FleetInstance {
                id: id.clone(),
                instance_type: instance_type.clone(),
                zone: zone.clone(),
            });
        }
    }
    for e in out.errors() {
        let (instance_type, zone) = pool_of(e.launch_template_and_overrides());
        outcome.errors.push(FleetError {
            code: e.error_code().unwrap_or_default().to_string(),
            message: e.error_message().unwrap_or_default().to_string(),
            instance_type,
            zone,
        });
    }
    Ok(outcome)
}

/// What one launch in a batch gets: its instance (if the fleet started enough) and the errors
/// the whole call reported.
pub type BatchResult = Result<(Option<FleetInstance>, Vec<FleetError>), CloudError>;

struct Batch {
    request: FleetRequest,
    waiters: Vec<oneshot::Sender<BatchResult>>,
    opened: Instant,
    last: Instant,
}

/// The batcher label of the CreateFleet batcher's metrics, upstream's name for it.
pub const BATCHER_NAME: &str = "create_fleet";

/// Records one closed batch: how long its window stayed open (from the first request until
/// the call went out) and how many launches it merged, as upstream's batcher reports them.
fn record_batch(window: Duration, size: usize) {
    METRICS
        .cloudprovider_batcher_batch_time_seconds
        .with_label_values(&[BATCHER_NAME])
        .observe(window.as_secs_f64());
    METRICS
        .cloudprovider_batcher_batch_size
        .with_label_values(&[BATCHER_NAME])
        .observe(size as f64);
}

/// Merges identical launch requests that arrive together into one CreateFleet call.
#[derive(Clone)]
pub struct FleetBatcher {
    ec2: aws_sdk_ec2::Client,
    pending: Arc<Mutex<HashMap<FleetRequest, Batch>>>,
}

impl FleetBatcher {
    /// A batcher sending through `ec2`.
    pub fn new(ec2: aws_sdk_ec2::Client) -> Self {
        Self {
            ec2,
            pending: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    fn lock(
        pending: &Mutex<HashMap<FleetRequest, Batch>>,
    ) -> MutexGuard<'_, HashMap<FleetRequest, Batch>> {
        pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Launches one instance for `request`, possibly together with identical requests.
    pub async fn launch(&self, request: FleetRequest) -> BatchResult {
        let (tx, rx) = oneshot::channel();
        let now = Instant::now();
        // Keyed by the whole request: only equal requests share a call, and a different one
        // never displaces a pending batch.
        let key = request.clone();
        let open_new = {
            let mut pending = Self::lock(&self.pending);
            match pending.get_mut(&key) {
                Some(batch) => {
                    batch.waiters.push(tx);
                    batch.last = now;
                    false
                }
                None => {
                    pending.insert(
                        key.clone(),
                        Batch {
                            request,
                            waiters: vec![tx],
                            opened: now,
                            last: now,
                        },
                    );
                    true
                }
            }
        };
        if open_new {
            let ec2 = self.ec2.clone();
            let pending = self.pending.clone();
            tokio::spawn(async move {
                let batch = loop {
                    tokio::time::sleep(BATCH_IDLE).await;
                    let mut map = Self::lock(&pending);
                    let ready = map.get(&key).is_none_or(|b| {
                        b.last.elapsed() >= BATCH_IDLE
                            || b.opened.elapsed() >= BATCH_MAX
                            || b.waiters.len() >= BATCH_MAX_ITEMS
                    });
                    if ready {
                        break map.remove(&key);
                    }
                };
                let Some(batch) = batch else { return };
                record_batch(batch.opened.elapsed(), batch.waiters.len());
                let result = create_fleet(&ec2, &batch.request, batch.waiters.len()).await;
                match result {
                    Ok(outcome) => {
                        let mut instances = outcome.instances.into_iter();
                        for waiter in batch.waiters {
                            let _ = waiter.send(Ok((instances.next(), outcome.errors.clone())));
                        }
                    }
                    Err(e) => {
                        for waiter in batch.waiters {
                            let _ = waiter.send(Err(e.clone()));
                        }
                    }
                }
            });
        }
        rx.await.unwrap_or_else(|_| {
            Err(CloudError::Transient(
                "the CreateFleet batch ended without an answer".into(),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(tags: &[(&str, &str)]) -> FleetRequest {
        FleetRequest {
            capacity_type: CapacityType::Spot,
            reservation: ReservationKind::OnDemand,
            configs: vec![TemplateConfig {
                launch_template: "karpenter.k8s.aws/1".into(),
                overrides: vec![Override {
                    instance_type: "m5.large".into(),
                    zone: "us-east-1a".into(),
                    subnet_id: "subnet-a".into(),
                    rank: 0,
                }],
            }],
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            context: None,
        }
    }

    #[test]
    fn subnets_map_to_zones_and_template_errors_are_recognised() {
        let a = request(&[("karpenter.sh/nodepool", "default")]);
        assert_eq!(a.zone_of_subnet("subnet-a"), Some("us-east-1a"));
        assert_eq!(a.zone_of_subnet("subnet-x"), None);
        assert!(is_launch_template_not_found(
            "InvalidLaunchTemplateName.NotFoundException"
        ));
        assert!(!is_launch_template_not_found(
            "InsufficientInstanceCapacity"
        ));
    }
}
