//! The AWS cloud provider: EC2NodeClass resolution, instance types and prices, launches through
//! CreateFleet, termination, garbage-collection listing and the interruption queue, on the AWS
//! SDK for Rust.
//!
//! Every SDK client shares one [`aws_config::SdkConfig`]; [`config_loader`] builds it with the
//! ring-based rustls client (the crypto provider kube already uses) and the SDK's standard retry
//! policy; the one call retried by hand is tagging a new instance with its NodeClaim. Launches are
//! idempotent per NodeClaim: the instance is tagged `karpenter.sh/nodeclaim` and found by that
//! tag before any new launch, and an instance that cannot be tagged is terminated (or, failing
//! that, remembered and settled before the next attempt) so a retry never makes a second one.
//! Instance types and prices are refreshed in the background ([`AwsProvider::run_refresh`]),
//! never on the launch path.

pub mod amis;
pub mod capacity_reservations;
pub mod cluster;
pub mod fleet;
pub mod garbage;
pub mod instance_profile;
pub mod instance_status;
pub mod instance_types;
pub mod interruption;
pub mod launch_templates;
pub mod lookup_cache;
pub mod placement_groups;
pub mod pricing;
pub mod security_groups;
pub mod subnets;
pub mod tags;
pub mod unavailable;
pub mod userdata;
pub mod validation;
pub mod version;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::{InstanceLifecycleType, InstanceStateName};
use base64::Engine as _;
use chrono::{DateTime, Utc};

use crate::apis::ec2nodeclass::NodeClassCondition;
use crate::apis::ec2nodeclass::{
    AMIFamily, BlockDeviceMapping, EC2NodeClassStatus, PlacementGroupSelector,
};
use crate::apis::labels;
use crate::apis::nodeclaim::{Taint, TaintEffect};
use crate::apis::{EC2NodeClass, NodeClaim};
use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::metrics::METRICS;
use crate::scheduling::instance_type::{
    CapacityType, InstanceType, NodeClassSettings, Offering, add_reserved_offerings,
};
use crate::scheduling::requirements::Requirements;
use crate::scheduling::resources;

use super::interruption::{InterruptionEvent, InterruptionKind, InterruptionMessage};
use super::{
    CloudError, CloudProvider, Instance, InstanceState, Launched, NodeClassResolution,
    NodeClassesInUse, ResolveError, Tagging, claim_requests, claim_requirements, launch_candidates,
    node_labels, provider_id_instance,
};
use fleet::{FleetBatcher, FleetInstance, FleetRequest, Override, ReservationKind, TemplateConfig};
use instance_types::{Ec2Catalogue, REFRESH_INTERVAL};
use interruption::InterruptionQueue;
use launch_templates::{LaunchTemplateSpec, ReservationTargeting};
use placement_groups::PlacementGroup;
use pricing::Prices;
use unavailable::{OfferingKey, UnavailableOfferings};

/// The operator settings the AWS provider needs (upstream's AWS options).
#[derive(Clone, Debug, PartialEq)]
pub struct AwsSettings {
    /// `CLUSTER_NAME`: tags, instance profile names, user data.
    pub cluster_name: String,
    /// The API server URL nodes join (`CLUSTER_ENDPOINT`, else eks:DescribeCluster; see
    /// [`cluster::discover`]).
    pub cluster_endpoint: String,
    /// Base64 PEM of the API server's CA, for user data (`CLUSTER_CA_BUNDLE`, else
    /// eks:DescribeCluster).
    pub cluster_ca_bundle: Option<String>,
    /// The cluster's Kubernetes minor version (`1.33`) at start: alias AMIs are published per
    /// version. [`version::run_refresh`] keeps the provider's copy current (see
    /// [`AwsProvider::set_kubernetes_version`]).
    pub kubernetes_version: String,
    /// The cluster's service CIDR, for AL2023 user data (nodeadm derives the DNS address);
    /// from eks:DescribeCluster.
    pub service_cidr: Option<String>,
    /// `ISOLATED_VPC`: no Pricing API; the bundled prices are used.
    pub isolated_vpc: bool,
    /// `RESERVED_ENIS`: interfaces kept out of pod networking.
    pub reserved_enis: i64,
    /// `VM_MEMORY_OVERHEAD_PERCENT`: memory the hypervisor keeps.
    pub vm_memory_overhead_percent: f64,
    /// `INTERRUPTION_QUEUE`: SQS queue name or URL; `None` disables interruption handling.
    pub interruption_queue: Option<String>,
    /// AWS region.
    pub region: String,
    /// The `ReservedCapacity` feature gate: capacity reservations are resolved, offered as
    /// `reserved` capacity and launched into, and other launches stay out of them.
    pub reserved_capacity: bool,
    /// `DISABLE_DRY_RUN`: skip the dry-run authorization checks of EC2NodeClass validation.
    pub disable_dry_run: bool,
    /// How often the EC2NodeClass controller resolves a class again: the shorter of
    /// `AMI_REFRESH_INTERVAL` and `SUBNET_REFRESH_INTERVAL` (one resolution covers both).
    pub resolution_period: Duration,
}

/// An SDK config loader with the HTTP client and retry policy every client here uses: rustls on
/// `ring` (no second crypto provider next to kube's), standard retries (3 attempts with
/// exponential backoff), 5 s connect and 30 s per-attempt timeouts (the SQS long poll is 20 s).
/// Credentials and region come from the usual chain unless the caller sets them.
pub fn config_loader(region: &str) -> aws_config::ConfigLoader {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(region.to_string()))
        .http_client(http)
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(3))
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(5))
                .operation_attempt_timeout(Duration::from_secs(30))
                .build(),
        )
}

/// Error codes that mean "slow down or try again" rather than "this cannot work".
pub(crate) const TRANSIENT_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "TooManyRequestsException",
    "ServiceUnavailable",
    "Unavailable",
    "InternalError",
    "InternalFailure",
    "InsufficientInstanceCapacity",
];

/// Sorts an SDK error into what the controller should do: missing instances are
/// [`CloudError::NotFound`], throttling and network trouble [`CloudError::Transient`], other
/// service errors (permissions, bad parameters) [`CloudError::Invalid`].
pub(crate) fn sdk_error<E, R>(operation: &str, err: SdkError<E, R>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let text = format!("{operation}: {}", DisplayErrorContext(&err));
    match &err {
        SdkError::ServiceError(_) => match err.code() {
            Some("InvalidInstanceID.NotFound" | "InvalidInstanceID.Malformed") => {
                CloudError::NotFound(text)
            }
            Some(code) if TRANSIENT_CODES.contains(&code) => CloudError::Transient(text),
            Some(_) => CloudError::Invalid(text),
            None => CloudError::Transient(text),
        },
        _ => CloudError::Transient(text),
    }
}

/// How often the background refresh checks whether instance types and prices are due.
pub const REFRESH_CHECK: Duration = Duration::from_secs(60);

/// How often tagging a new instance with its NodeClaim is tried before the instance is taken
/// back (each try is itself retried by the SDK when EC2 throttles).
const TAG_ATTEMPTS: u32 = 3;
/// The pause before the second tagging attempt; the next ones wait longer.
const TAG_RETRY_DELAY: Duration = Duration::from_millis(250);

/// Logs a refresh's findings, with why prices could not be read when they could not.
pub fn log_refresh(report: &RefreshReport) {
    tracing::info!(
        instance_types = report.instance_types,
        pricing_api_prices = report.pricing_api_prices,
        spot_prices = report.spot_prices,
        "refreshed EC2 instance types and prices"
    );
    if let Some(e) = &report.pricing_error {
        tracing::warn!(error = %e, "on-demand prices from the Pricing API unavailable; keeping the previous (or bundled) ones");
    }
    if let Some(e) = &report.spot_error {
        tracing::warn!(error = %e, "spot prices unavailable; keeping the previous ones");
    }
}

/// What a catalogue and price refresh found, for the controller to log.
#[derive(Clone, Debug, PartialEq)]
pub struct RefreshReport {
    /// Instance types EC2 describes.
    pub instance_types: usize,
    /// On-demand prices from the Pricing API (0 when it was not used or failed).
    pub pricing_api_prices: usize,
    /// Why the Pricing API was not used, when it failed.
    pub pricing_error: Option<String>,
    /// Spot pools priced.
    pub spot_prices: usize,
    /// Why spot prices could not be refreshed.
    pub spot_error: Option<String>,
}

struct TypesCacheEntry {
    catalogue: Arc<Ec2Catalogue>,
    prices: Arc<Prices>,
    types: Arc<Vec<InstanceType>>,
}

/// The AWS cloud provider.
pub struct AwsProvider {
    settings: AwsSettings,
    clock: Arc<dyn Clock>,
    ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
    iam: aws_sdk_iam::Client,
    pricing: Option<aws_sdk_pricing::Client>,
    queue: Option<InterruptionQueue>,
    unavailable: UnavailableOfferings,
    fallback: Catalog,
    catalogue: RwLock<Arc<Ec2Catalogue>>,
    prices: RwLock<Arc<Prices>>,
    refresh_lock: tokio::sync::Mutex<()>,
    types_cache: Mutex<HashMap<String, TypesCacheEntry>>,
    /// Launch templates known to exist → when a launch last used them (or garbage collection
    /// first saw them); unused ones go ([`garbage::unused_templates`]).
    launch_templates: Mutex<HashMap<String, DateTime<Utc>>>,
    /// Instances each selected capacity reservation can still launch.
    reservations: capacity_reservations::Availability,
    batcher: FleetBatcher,
    /// NodeClaim → instance launched for it that could be neither tagged nor terminated.
    untagged: Mutex<HashMap<String, String>>,
    /// EC2NodeClass → its `placementGroupSelector` and the group it resolved to (upstream keeps
    /// it in memory too: the status has no field for it).
    placement_groups: Mutex<HashMap<String, (PlacementGroupSelector, PlacementGroup)>>,
    /// The dry-run authorization verdicts per EC2NodeClass, kept while their inputs hold.
    validations: Mutex<validation::Verdicts>,
    /// What resolutions looked up (SSM parameters, images, subnets, security groups, placement
    /// groups, instance profiles), kept for upstream's lifetimes.
    lookups: lookup_cache::LookupCache,
    /// Paces the per-node calls that name registered instances.
    registration_tagging: tags::RegistrationPacing,
    /// The cluster's Kubernetes minor version, read by every resolution: it starts as the
    /// settings' and [`version::run_refresh`] replaces it when the cluster is upgraded.
    kubernetes_version: RwLock<String>,
}

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read().unwrap_or_else(|e| e.into_inner()).clone()
}

fn write<T>(lock: &RwLock<T>, value: T) {
    *lock.write().unwrap_or_else(|e| e.into_inner()) = value;
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl AwsProvider {
    /// A provider on `sdk_config` (see [`config_loader`]); no AWS call is made until first use.
    pub fn new(
        settings: AwsSettings,
        sdk_config: &SdkConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, CloudError> {
        let fallback = Catalog::bundled(&settings.region)
            .or_else(|_| Catalog::bundled(crate::catalog::DEFAULT_REGION))
            .map_err(|e| CloudError::Invalid(e.to_string()))?;
        let ec2 = aws_sdk_ec2::Client::new(sdk_config);
        let pricing = (!settings.isolated_vpc).then(|| {
            aws_sdk_pricing::Client::from_conf(
                aws_sdk_pricing::config::Builder::from(sdk_config)
                    .region(aws_config::Region::new(pricing::pricing_region(
                        &settings.region,
                    )))
                    .build(),
            )
        });
        let queue = settings
            .interruption_queue
            .as_ref()
            .map(|q| InterruptionQueue::new(aws_sdk_sqs::Client::new(sdk_config), q.clone()));
        let prices = Prices {
            on_demand: pricing::bundled_on_demand(&settings.region),
            ..Prices::default()
        };
        Ok(Self {
            unavailable: UnavailableOfferings::new(clock.clone()),
            batcher: FleetBatcher::new(ec2.clone()),
            ssm: aws_sdk_ssm::Client::new(sdk_config),
            iam: aws_sdk_iam::Client::new(sdk_config),
            ec2,
            pricing,
            queue,
            fallback,
            catalogue: RwLock::new(Arc::new(Ec2Catalogue::default())),
            prices: RwLock::new(Arc::new(prices)),
            refresh_lock: tokio::sync::Mutex::new(()),
            types_cache: Mutex::new(HashMap::new()),
            launch_templates: Mutex::new(HashMap::new()),
            reservations: capacity_reservations::Availability::default(),
            untagged: Mutex::new(HashMap::new()),
            placement_groups: Mutex::new(HashMap::new()),
            validations: Mutex::new(validation::Verdicts::new()),
            lookups: lookup_cache::LookupCache::new(clock.clone()),
            registration_tagging: tags::RegistrationPacing::new(tokio::time::Instant::now()),
            kubernetes_version: RwLock::new(settings.kubernetes_version.clone()),
            settings,
            clock,
        })
    }

    /// The Kubernetes minor version the next resolution picks alias AMIs for.
    pub fn kubernetes_version(&self) -> String {
        read(&self.kubernetes_version)
    }

    /// Makes `version` the one the next resolution uses; returns the previous one when it
    /// differed, `None` when nothing changed.
    pub fn set_kubernetes_version(&self, version: String) -> Option<String> {
        let mut current = self
            .kubernetes_version
            .write()
            .unwrap_or_else(|e| e.into_inner());
        (*current != version).then(|| std::mem::replace(&mut *current, version))
    }

    /// The unavailable-offerings cache (launch failures and interruptions feed it).
    pub fn unavailable_offerings(&self) -> &UnavailableOfferings {
        &self.unavailable
    }

    /// Re-reads instance types, zones and prices now. A failing Pricing API or spot price call
    /// keeps the previous prices (the bundled table at first) and is reported, not fatal.
    pub async fn refresh(&self) -> Result<RefreshReport, CloudError> {
        let _guard = self.refresh_lock.lock().await;
        let now = self.clock.now();
        let catalogue = instance_types::describe(&self.ec2, &self.fallback, now).await?;
        let previous = read(&self.prices);
        let mut prices = (*previous).clone();
        let mut report = RefreshReport {
            instance_types: catalogue.types.len(),
            pricing_api_prices: 0,
            pricing_error: None,
            spot_prices: 0,
            spot_error: None,
        };
        if let Some(client) = &self.pricing {
            match pricing::fetch_on_demand(client, &self.settings.region).await {
                Ok(found) if !found.is_empty() => {
                    report.pricing_api_prices = found.len();
                    prices.on_demand.extend(found);
                }
                Ok(_) => report.pricing_error = Some("the Pricing API returned no prices".into()),
                Err(e) => report.pricing_error = Some(e.to_string()),
            }
        }
        match pricing::fetch_spot(&self.ec2, now).await {
            Ok(spot) => {
                report.spot_prices = spot.len();
                prices.spot = spot;
                prices.spot_fetched = true;
            }
            Err(e) => report.spot_error = Some(e.to_string()),
        }
        write(&self.catalogue, Arc::new(catalogue));
        write(&self.prices, Arc::new(prices));
        Ok(report)
    }

    /// Whether the catalogue was never loaded or is older than [`REFRESH_INTERVAL`] by the
    /// provider's clock.
    pub fn refresh_due(&self) -> bool {
        read(&self.catalogue)
            .fetched_at
            .is_none_or(|at| self.clock.now() - at >= REFRESH_INTERVAL)
    }

    /// Refreshes when [`AwsProvider::refresh_due`]; `None` when it was not.
    pub async fn refresh_if_due(&self) -> Result<Option<RefreshReport>, CloudError> {
        if !self.refresh_due() {
            return Ok(None);
        }
        self.refresh().await.map(Some)
    }

    /// Re-reads the counts of the capacity reservations the node classes selected (see
    /// [`capacity_reservations::refresh_counts`]); nothing without the `ReservedCapacity` gate.
    /// Returns how many were refreshed.
    pub async fn refresh_reservations(&self) -> Result<usize, CloudError> {
        if !self.settings.reserved_capacity {
            return Ok(0);
        }
        capacity_reservations::refresh_counts(&self.ec2, &self.reservations).await
    }

    /// Drops the cached `@latest` SSM parameters whose image EC2 now reports deprecated, so the
    /// next resolution reads the parameter again instead of keeping a withdrawn release for up
    /// to a day (upstream's SSM invalidation controller). Returns the parameters dropped.
    pub async fn invalidate_deprecated_parameters(&self) -> Result<Vec<String>, CloudError> {
        let parameters = self.lookups.mutable_parameters();
        let ids: Vec<&str> = parameters.iter().map(|(_, id)| id.as_str()).collect();
        let deprecated = amis::deprecated_images(&self.ec2, &ids, self.clock.now()).await?;
        Ok(self.lookups.forget_deprecated(&deprecated))
    }

    /// [`AwsProvider::invalidate_deprecated_parameters`] every
    /// [`lookup_cache::SSM_INVALIDATION_PERIOD`] by the provider's clock; `None` when not due.
    pub async fn invalidate_parameters_if_due(&self) -> Option<Result<Vec<String>, CloudError>> {
        if !self.lookups.ssm_check_due(self.clock.now()) {
            return None;
        }
        Some(self.invalidate_deprecated_parameters().await)
    }

    /// Keeps instance types and prices fresh in the background, so that no launch or
    /// scheduling pass ever waits for a refresh: checks every [`REFRESH_CHECK`] whether one is
    /// due and logs what it found, and re-reads the capacity reservations' counts each time, as
    /// upstream re-reads them every minute; every half hour it checks the cached `@latest` SSM
    /// parameters for deprecated images. Never returns: it ends with the runtime (or when its
    /// task is aborted).
    pub async fn run_refresh(self: Arc<Self>) {
        loop {
            match self.invalidate_parameters_if_due().await {
                Some(Ok(dropped)) if !dropped.is_empty() => {
                    tracing::info!(parameters = ?dropped, "alias SSM parameters point at deprecated AMIs; reading them again");
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "checking the cached alias AMIs for deprecation failed; retrying in half an hour");
                }
                Some(Ok(_)) | None => {}
            }
            match self.refresh_if_due().await {
                Ok(Some(report)) => log_refresh(&report),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "refreshing EC2 instance types failed; keeping the previous ones and retrying");
                }
            }
            if let Err(e) = self.refresh_reservations().await {
                tracing::warn!(error = %e, "refreshing capacity reservation counts failed; keeping the previous ones and retrying");
            }
            tokio::time::sleep(REFRESH_CHECK).await;
        }
    }

    fn settings_for(&self, nodeclass: &EC2NodeClass) -> NodeClassSettings {
        let mut settings = NodeClassSettings::for_nodeclass(nodeclass);
        settings.vm_memory_overhead_percent = self.settings.vm_memory_overhead_percent;
        settings.reserved_enis = self.settings.reserved_enis;
        settings
    }

    /// The placement group `nodeclass` launches into: none without a selector; else the group
    /// its last resolution found, or (a restarted controller may launch before the EC2NodeClass
    /// controller resolves again) the group DescribePlacementGroups finds now. A selector that
    /// finds no available group fails: launching outside the group would defeat it.
    async fn placement_group(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Option<PlacementGroup>, CloudError> {
        let name = nodeclass.metadata.name.clone().unwrap_or_default();
        let Some(selector) = &nodeclass.spec.placement_group_selector else {
            locked(&self.placement_groups).remove(&name);
            return Ok(None);
        };
        if let Some((known, group)) = locked(&self.placement_groups).get(&name)
            && known == selector
        {
            return Ok(Some(group.clone()));
        }
        let group = placement_groups::resolve(&self.ec2, &self.lookups, selector)
            .await?
            .ok_or_else(|| {
                CloudError::NodeClassNotReady(format!(
                    "EC2NodeClass {name}: spec.placementGroupSelector matches no available placement group (by {}); create it or fix the selector",
                    placement_groups::describe(selector)
                ))
            })?;
        locked(&self.placement_groups).insert(name, (selector.clone(), group.clone()));
        Ok(Some(group))
    }

    /// The launch template of a launch of `nodeclass`: what the launch decides (`launch`) and
    /// what the node class says (volumes, metadata options, monitoring, public IP, prefixes,
    /// network interfaces, nested virtualization) and the cluster (IPv6).
    fn template_spec(&self, nodeclass: &EC2NodeClass, launch: Launch<'_>) -> LaunchTemplateSpec {
        LaunchTemplateSpec {
            image_id: launch.image_id,
            user_data: launch.user_data,
            block_devices: block_devices(nodeclass),
            metadata: nodeclass.spec.metadata_options.clone(),
            instance_profile: launch.instance_profile,
            security_groups: launch
                .security_groups
                .iter()
                .map(|g| g.id.clone())
                .collect(),
            detailed_monitoring: nodeclass.spec.detailed_monitoring.unwrap_or(false),
            associate_public_ip: nodeclass.spec.associate_public_ip_address,
            ipv6: self.ipv6_kube_dns().is_some(),
            ip_prefix_count: nodeclass.spec.ip_prefix_count,
            placement_group: launch.placement_group.map(|g| g.id.clone()),
            placement_partition: launch.placement_partition,
            network_interfaces: nodeclass.spec.network_interfaces.clone(),
            efa_interfaces: launch.efa_interfaces,
            nested_virtualization: nodeclass
                .spec
                .cpu_options
                .as_ref()
                .and_then(|c| c.nested_virtualization.clone()),
            tags: launch.tags,
            reservations: launch.reservations,
        }
    }

    /// Upstream's dry-run authorization checks ([`validation::check`]) on one launch of the
    /// class as it resolved: its first instance type an AMI serves, that AMI, its first subnet.
    /// A verdict is kept for [`validation::VERDICT_TTL`] while nothing it was reached on changes.
    async fn check_authorization(
        &self,
        nodeclass: &EC2NodeClass,
        subnets: &[subnets::SubnetInfo],
        security_groups: &[crate::apis::ec2nodeclass::SecurityGroup],
        amis: &[crate::apis::ec2nodeclass::AMI],
        instance_profile: &str,
    ) -> Result<(), ResolveError> {
        let condition = NodeClassCondition::ValidationSucceeded;
        let transient = |e: CloudError| ResolveError::new(condition, "DependenciesNotReady", e);
        let class = nodeclass.metadata.name.clone().unwrap_or_default();
        let placement_group = self.placement_group(nodeclass).await.map_err(transient)?;
        let types = self
            .types_for(nodeclass, placement_group.as_ref())
            .map_err(transient)?;
        let Some((it, ami)) = types.iter().find_map(|it| {
            let type_labels: BTreeMap<String, String> = it
                .labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect();
            amis::ami_for(amis, &type_labels).map(|ami| (it, ami))
        }) else {
            // Nothing to launch yet; the launch itself will say why.
            return Ok(());
        };
        let Some(subnet) = subnets.first() else {
            return Ok(());
        };
        let owner = tags::Owner {
            cluster: &self.settings.cluster_name,
            nodepool: "",
            nodeclass: &class,
        };
        let probe = validation::Probe {
            template: self.template_spec(
                nodeclass,
                Launch {
                    image_id: ami.id.clone(),
                    user_data: String::new(),
                    instance_profile: instance_profile.to_string(),
                    security_groups,
                    placement_group: placement_group.as_ref(),
                    placement_partition: None,
                    efa_interfaces: 0,
                    tags: tags::launch_tags(&owner, &nodeclass.spec.tags),
                    reservations: ReservationTargeting::Open,
                },
            ),
            instance_type: &it.name,
            subnet_id: &subnet.id,
        };
        let key = probe.key();
        let now = self.clock.now();
        let cached = locked(&self.validations)
            .get(&class)
            .filter(|v| v.key == key && now - v.at < validation::VERDICT_TTL)
            .copied();
        let failed = match cached {
            Some(v) => v.failed,
            None => {
                let failed = validation::check(&self.ec2, &probe)
                    .await
                    .map_err(transient)?;
                locked(&self.validations).insert(
                    class,
                    validation::Verdict {
                        key,
                        at: now,
                        failed,
                    },
                );
                failed
            }
        };
        match failed {
            None => Ok(()),
            Some((reason, message)) => Err(ResolveError::new(
                condition,
                reason,
                CloudError::Invalid(format!(
                    "{message}: grant it to the controller's role (see the IAM permissions in the README), or set DISABLE_DRY_RUN=true to skip the check"
                )),
            )),
        }
    }

    /// The node class' instance types from the catalogue as last refreshed (never refreshing
    /// here: [`AwsProvider::run_refresh`] does that off the launch path), labelled with the
    /// placement group the class launches into.
    fn types_for(
        &self,
        nodeclass: &EC2NodeClass,
        placement_group: Option<&PlacementGroup>,
    ) -> Result<Arc<Vec<InstanceType>>, CloudError> {
        if read(&self.catalogue).fetched_at.is_none() {
            return Err(CloudError::Transient(
                "EC2 instance types have not been loaded yet (the first refresh has not completed)"
                    .into(),
            ));
        }
        let settings = self.settings_for(nodeclass);
        let mut zones: Vec<String> = nodeclass
            .status
            .as_ref()
            .map(|s| s.subnets.iter().map(|s| s.zone.clone()).collect())
            .unwrap_or_default();
        zones.sort();
        zones.dedup();
        let group_id = placement_group.map(|g| g.id.as_str());
        let nested_virtualization = nodeclass
            .spec
            .cpu_options
            .as_ref()
            .is_some_and(|c| c.nested_virtualization_enabled());
        let key = format!(
            "{:?}|{:?}|{}|{}|{zones:?}|{group_id:?}|{:?}|{nested_virtualization}",
            settings.ami_family,
            settings.kubelet,
            settings.ephemeral_storage,
            settings.instance_store_raid0,
            settings.network_interfaces
        );
        let catalogue = read(&self.catalogue);
        let prices = read(&self.prices);
        let base = {
            let mut cache = locked(&self.types_cache);
            match cache.get(&key) {
                Some(e)
                    if Arc::ptr_eq(&e.catalogue, &catalogue) && Arc::ptr_eq(&e.prices, &prices) =>
                {
                    e.types.clone()
                }
                _ => {
                    let mut types = instance_types::build(
                        &catalogue,
                        &prices,
                        &zones,
                        &settings,
                        nested_virtualization,
                        placement_group.map(|g| g.strategy.as_str()),
                        &self.settings.region,
                    );
                    // Every node of the class runs in the group: the label is the type's, so
                    // requirements on it select the class' types and the launch labels the node.
                    if let Some(id) = group_id {
                        for it in &mut types {
                            it.labels.insert(labels::PLACEMENT_GROUP_ID, id.to_string());
                        }
                    }
                    if let Some(group) = placement_group {
                        placement_groups::offer_partitions(&mut types, group);
                    }
                    let types = Arc::new(types);
                    cache.insert(
                        key,
                        TypesCacheEntry {
                            catalogue,
                            prices,
                            types: types.clone(),
                        },
                    );
                    types
                }
            }
        };
        let types = instance_types::mark_unavailable(base, &self.unavailable, group_id);
        if !self.settings.reserved_capacity {
            return Ok(types);
        }
        let reservations = capacity_reservations::offered(
            nodeclass
                .status
                .as_ref()
                .map(|s| s.capacity_reservations.as_slice())
                .unwrap_or_default(),
            &self.reservations,
            self.clock.now(),
        );
        if reservations.is_empty() {
            return Ok(types);
        }
        // Reserved offerings are built fresh for every call: their counts change with every
        // launch and termination.
        let mut with_reserved = (*types).clone();
        add_reserved_offerings(&mut with_reserved, &reservations);
        if let Some(group) = placement_group {
            placement_groups::offer_partitions(&mut with_reserved, group);
        }
        Ok(Arc::new(with_reserved))
    }

    async fn describe_instance(&self, id: &str) -> Result<Option<Instance>, CloudError> {
        let now = self.clock.now();
        Ok(self
            .describe_raw(id)
            .await?
            .iter()
            .find_map(|i| to_instance(i, now, self.settings.reserved_capacity)))
    }

    /// Instance `id` as DescribeInstances returns it (empty when EC2 does not know it): the one
    /// lookup by ID behind [`Self::describe_instance`] and the registration tagging.
    async fn describe_raw(
        &self,
        id: &str,
    ) -> Result<Vec<aws_sdk_ec2::types::Instance>, CloudError> {
        let out = self
            .ec2
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
            .map_err(|e| sdk_error("ec2:DescribeInstances", e))?;
        Ok(out
            .reservations
            .unwrap_or_default()
            .into_iter()
            .flat_map(|r| r.instances.unwrap_or_default())
            .collect())
    }

    async fn find_by_nodeclaim(&self, name: &str) -> Result<Option<Instance>, CloudError> {
        let cluster_key = tags::cluster_tag_key(&self.settings.cluster_name);
        let out = self
            .ec2
            .describe_instances()
            .filters(tags::filter(&format!("tag:{}", tags::NODECLAIM), [name]))
            .filters(tags::filter("tag-key", [cluster_key.as_str()]))
            .filters(tags::filter(
                "instance-state-name",
                ["pending", "running", "stopping", "stopped"],
            ))
            .send()
            .await
            .map_err(|e| sdk_error("ec2:DescribeInstances", e))?;
        let (now, gate) = (self.clock.now(), self.settings.reserved_capacity);
        Ok(out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find_map(|i| to_instance(i, now, gate)))
    }

    async fn ensure_launch_template(
        &self,
        spec: &LaunchTemplateSpec,
    ) -> Result<String, CloudError> {
        let name = spec.name();
        let now = self.clock.now();
        if let Some(used) = locked(&self.launch_templates).get_mut(&name) {
            *used = now;
            return Ok(name);
        }
        let name = launch_templates::ensure(&self.ec2, spec).await?;
        locked(&self.launch_templates).insert(name.clone(), now);
        Ok(name)
    }

    /// Deletes launch template `name` and forgets it was made, so a launch that needs it again
    /// makes it again.
    async fn delete_launch_template(&self, name: &str) -> Result<(), CloudError> {
        launch_templates::delete(&self.ec2, name).await?;
        locked(&self.launch_templates).remove(name);
        Ok(())
    }

    /// The kube-dns address when the cluster is IPv6 (its service CIDR is): nodes then get it
    /// as their cluster DNS unless the node class sets one, the AL2 bootstrap its IPv6 flag and
    /// the primary interface an IPv6 address, as upstream does for IPv6 clusters.
    fn ipv6_kube_dns(&self) -> Option<String> {
        self.settings
            .service_cidr
            .as_deref()
            .and_then(cluster::ipv6_kube_dns)
    }

    /// The user data of a node of `nodeclass` with these labels, taints and pod limit.
    fn render_user_data(
        &self,
        nodeclass: &EC2NodeClass,
        node_labels: &BTreeMap<String, String>,
        taints: &[Taint],
        max_pods: Option<i64>,
    ) -> Result<String, userdata::UserDataError> {
        let mut kubelet = nodeclass.spec.kubelet.clone().unwrap_or_default();
        if kubelet.cluster_dns.as_ref().is_none_or(Vec::is_empty)
            && let Some(dns) = self.ipv6_kube_dns()
        {
            kubelet.cluster_dns = Some(vec![dns]);
        }
        let bootstrap = userdata::Bootstrap {
            cluster_name: &self.settings.cluster_name,
            cluster_endpoint: &self.settings.cluster_endpoint,
            ca_bundle: self.settings.cluster_ca_bundle.as_deref(),
            service_cidr: self.settings.service_cidr.as_deref(),
            labels: node_labels,
            taints,
            kubelet: &kubelet,
            max_pods,
            user_data: nodeclass.spec.user_data.as_deref(),
            instance_store_raid0: self.settings_for(nodeclass).instance_store_raid0,
        };
        userdata::render(family_of(nodeclass), &bootstrap)
    }

    /// Sends the launch for NodeClaim `name` through the batcher and records what EC2 could
    /// not fill: exhausted pools in the unavailable-offerings cache, or, for a reserved launch,
    /// the reservations whose pools failed as having no room left (upstream's handling of
    /// `ReservationCapacityExceeded` and capacity errors on reserved launches), so the next plan
    /// falls back to spot or on-demand. A launch template deleted behind the cache's back fails
    /// the call; the cache is then forgotten, the templates made again and the launch retried
    /// once, as upstream does.
    async fn launch(
        &self,
        name: &str,
        capacity_type: CapacityType,
        reservation: ReservationKind,
        specs: &[(LaunchTemplateSpec, Vec<Override>)],
        launch_tags: &BTreeMap<String, String>,
        nodeclass: &EC2NodeClass,
    ) -> Result<FleetInstance, CloudError> {
        let mut retried = false;
        loop {
            let mut configs = Vec::with_capacity(specs.len());
            for (spec, overrides) in specs {
                configs.push(TemplateConfig {
                    launch_template: self.ensure_launch_template(spec).await?,
                    overrides: overrides.clone(),
                });
            }
            let request = FleetRequest {
                capacity_type,
                reservation,
                configs,
                tags: launch_tags.clone(),
                context: nodeclass.spec.context.clone(),
            };
            let (instance, errors) = self.batcher.launch(request).await?;
            let mut template_missing = false;
            for e in &errors {
                if fleet::is_launch_template_not_found(&e.code) {
                    template_missing = true;
                    continue;
                }
                if capacity_type == CapacityType::Reserved {
                    if let (Some(t), Some(z)) = (&e.instance_type, &e.zone)
                        && let Some(id) = reservation_of_pool(specs, t, z)
                    {
                        tracing::info!(nodeclaim = name, capacity_reservation = id, instance_type = %t, zone = %z, code = %e.code, "capacity reservation has no room; marking it unavailable");
                        self.reservations.mark_unavailable(id);
                    }
                    continue;
                }
                if e.code == unavailable::SPOT_SERVICE_LINKED_ROLE_MISSING {
                    self.unavailable.mark_capacity_type(CapacityType::Spot);
                } else if unavailable::is_unfulfillable_capacity(&e.code)
                    && let (Some(t), Some(z)) = (&e.instance_type, &e.zone)
                {
                    let key = OfferingKey {
                        instance_type: t.clone(),
                        zone: z.clone(),
                        capacity_type,
                    };
                    // A pool a placement group could not fill may still launch outside it.
                    match group_of_pool(specs, t, z) {
                        Some(group) => self.unavailable.mark_in_group(key, group),
                        None => self.unavailable.mark(key),
                    }
                }
            }
            if template_missing {
                locked(&self.launch_templates).clear();
            }
            if let Some(started) = instance {
                return Ok(started);
            }
            if template_missing && !retried {
                retried = true;
                continue;
            }
            let why: Vec<String> = errors
                .iter()
                .map(|e| {
                    format!(
                        "{}/{}: {} {}",
                        e.instance_type.as_deref().unwrap_or("?"),
                        e.zone.as_deref().unwrap_or("?"),
                        e.code,
                        e.message
                    )
                })
                .collect();
            let why = if why.is_empty() {
                "no errors reported".to_string()
            } else {
                why.join("; ")
            };
            return Err(if template_missing {
                CloudError::Transient(format!(
                    "CreateFleet for NodeClaim {name} did not find its launch template even after it was made again: {why}"
                ))
            } else {
                CloudError::InsufficientCapacity(format!(
                    "CreateFleet launched nothing for NodeClaim {name}: {why}"
                ))
            });
        }
    }

    /// Tags instance `id` with NodeClaim `name`, trying [`TAG_ATTEMPTS`] times.
    async fn tag_nodeclaim(&self, id: &str, name: &str) -> Result<(), CloudError> {
        let mut attempt = 1;
        loop {
            let result = self
                .ec2
                .create_tags()
                .resources(id)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key(tags::NODECLAIM)
                        .value(name)
                        .build(),
                )
                .send()
                .await;
            match result {
                Ok(_) => return Ok(()),
                Err(e) if attempt >= TAG_ATTEMPTS => return Err(sdk_error("ec2:CreateTags", e)),
                Err(e) => {
                    tracing::warn!(instance = id, nodeclaim = name, attempt, error = %DisplayErrorContext(&e), "tagging a new instance with its NodeClaim failed; retrying");
                    tokio::time::sleep(TAG_RETRY_DELAY * attempt).await;
                    attempt += 1;
                }
            }
        }
    }

    /// Terminates instance `id`.
    async fn terminate(&self, id: &str) -> Result<(), CloudError> {
        self.ec2
            .terminate_instances()
            .instance_ids(id)
            .send()
            .await
            .map_err(|e| sdk_error("ec2:TerminateInstances", e))?;
        Ok(())
    }

    /// Takes back instance `id`, launched for NodeClaim `name` but not tagged with it (`why`):
    /// a retry would not find it, so it is terminated; when even that fails it is remembered
    /// and the next attempt for the NodeClaim settles it before launching
    /// ([`AwsProvider::settle_untagged`]). The error says what happened.
    async fn give_back(&self, name: &str, id: &str, why: CloudError) -> CloudError {
        match self.terminate(id).await {
            Ok(()) => CloudError::Transient(format!(
                "launched {id} for NodeClaim {name} but could not tag it with the NodeClaim ({why}); terminated it so that the retry launches one instance, not a second"
            )),
            Err(e) => {
                locked(&self.untagged).insert(name.to_string(), id.to_string());
                CloudError::Transient(format!(
                    "launched {id} for NodeClaim {name} but could neither tag it ({why}) nor terminate it ({e}); the next attempt tags or terminates it before launching anything"
                ))
            }
        }
    }

    /// Deals with an instance an earlier attempt for NodeClaim `name` launched but could not
    /// tag or terminate: tags it (so the lookup that follows adopts it) or else terminates it.
    /// Fails, without launching, while neither works.
    async fn settle_untagged(&self, name: &str) -> Result<(), CloudError> {
        let Some(id) = locked(&self.untagged).get(name).cloned() else {
            return Ok(());
        };
        let settled = match self.tag_nodeclaim(&id, name).await {
            Ok(()) => Ok(()),
            Err(tag_error) => match self.terminate(&id).await {
                Ok(()) | Err(CloudError::NotFound(_)) => Ok(()),
                Err(e) => Err(CloudError::Transient(format!(
                    "instance {id}, launched earlier for NodeClaim {name}, can still be neither tagged ({tag_error}) nor terminated ({e}); not launching another beside it"
                ))),
            },
        };
        if settled.is_ok() {
            locked(&self.untagged).remove(name);
        }
        settled
    }
}

/// The reservation of the launch template whose overrides hold pool (`instance_type`, `zone`).
fn reservation_of_pool<'a>(
    specs: &'a [(LaunchTemplateSpec, Vec<Override>)],
    instance_type: &str,
    zone: &str,
) -> Option<&'a str> {
    specs
        .iter()
        .find_map(|(spec, overrides)| match &spec.reservations {
            ReservationTargeting::Target { id, .. }
                if overrides
                    .iter()
                    .any(|o| o.instance_type == instance_type && o.zone == zone) =>
            {
                Some(id.as_str())
            }
            _ => None,
        })
}

/// The placement group (and partition) the launch template of an `instance_type`/`zone`
/// override launched into, for scoping what EC2 could not fill to it.
fn group_of_pool(
    specs: &[(LaunchTemplateSpec, Vec<Override>)],
    instance_type: &str,
    zone: &str,
) -> Option<unavailable::GroupScope> {
    specs.iter().find_map(|(spec, overrides)| {
        let group_id = spec.placement_group.clone()?;
        overrides
            .iter()
            .any(|o| o.instance_type == instance_type && o.zone == zone)
            .then(|| unavailable::GroupScope {
                group_id,
                partition: spec.placement_partition.map(|p| p.to_string()),
            })
    })
}

/// The capacity reservation an instance was launched into by a reserved launch (with the
/// `ReservedCapacity` gate on): it runs in the reservation and may run nowhere else
/// (`capacity-reservations-only`). An on-demand instance EC2 matched to an open reservation is
/// still the on-demand launch it was planned as.
fn reservation_of(i: &aws_sdk_ec2::types::Instance, reserved_capacity: bool) -> Option<String> {
    let only_reservations = i
        .capacity_reservation_specification()
        .and_then(|s| s.capacity_reservation_preference())
        == Some(&aws_sdk_ec2::types::CapacityReservationPreference::CapacityReservationsOnly);
    (reserved_capacity && only_reservations)
        .then(|| i.capacity_reservation_id().map(str::to_string))
        .flatten()
}

/// What one launch decides about its launch template (see [`AwsProvider::template_spec`]).
struct Launch<'a> {
    image_id: String,
    /// Base64.
    user_data: String,
    instance_profile: String,
    security_groups: &'a [crate::apis::ec2nodeclass::SecurityGroup],
    placement_group: Option<&'a PlacementGroup>,
    /// The partition of the placement group the NodeClaim requires, if it narrows them.
    placement_partition: Option<i32>,
    /// EFA interfaces the NodeClaim needs (0: none asked for).
    efa_interfaces: i32,
    tags: BTreeMap<String, String>,
    reservations: ReservationTargeting,
}

/// The placement group EC2 reports an instance in (all `None` when it runs in none).
fn placement_group_of(i: &aws_sdk_ec2::types::Instance) -> super::InstancePlacementGroup {
    let placement = i.placement();
    let non_empty = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
    super::InstancePlacementGroup {
        id: non_empty(placement.and_then(|p| p.group_id())),
        name: non_empty(placement.and_then(|p| p.group_name())),
        partition: placement.and_then(|p| p.partition_number()),
    }
}

/// Converts an EC2 instance; `None` without an ID, type or zone. An instance EC2 reports no
/// launch time for is taken as launched `now`: garbage collection must not judge it old.
/// `reserved_capacity` is the `ReservedCapacity` gate: with it on, an instance launched into a
/// reservation ([`reservation_of`]) is `reserved`.
fn to_instance(
    i: &aws_sdk_ec2::types::Instance,
    now: DateTime<Utc>,
    reserved_capacity: bool,
) -> Option<Instance> {
    let id = i.instance_id()?;
    let zone = i.placement()?.availability_zone()?;
    let tag_map = tags::from_ec2(i.tags());
    let state = match i.state().and_then(|s| s.name()) {
        Some(InstanceStateName::Pending) => InstanceState::Pending,
        Some(InstanceStateName::Running) => InstanceState::Running,
        Some(InstanceStateName::Stopping | InstanceStateName::Stopped) => InstanceState::Stopped,
        Some(InstanceStateName::ShuttingDown) => InstanceState::ShuttingDown,
        Some(InstanceStateName::Terminated) => InstanceState::Terminated,
        _ => InstanceState::Pending,
    };
    let reservation = reservation_of(i, reserved_capacity);
    let capacity_type = if i.instance_lifecycle() == Some(&InstanceLifecycleType::Spot) {
        CapacityType::Spot
    } else if reservation.is_some() {
        CapacityType::Reserved
    } else {
        CapacityType::OnDemand
    };
    Some(Instance {
        provider_id: format!("aws:///{zone}/{id}"),
        nodeclaim: tag_map.get(tags::NODECLAIM).cloned(),
        nodepool: tag_map.get(labels::NODEPOOL).cloned(),
        instance_type: i.instance_type()?.as_str().to_string(),
        zone: zone.to_string(),
        capacity_type,
        image_id: i.image_id().map(str::to_string),
        subnet_id: i.subnet_id().map(str::to_string),
        capacity_reservation_id: reservation,
        placement_group: Some(placement_group_of(i)),
        security_groups: Some(
            i.security_groups()
                .iter()
                .filter_map(|g| g.group_id().map(str::to_string))
                .collect::<Vec<_>>(),
        )
        .filter(|g| !g.is_empty()),
        state,
        launch_time: i
            .launch_time()
            .and_then(|t| DateTime::<Utc>::from_timestamp(t.secs(), 0))
            .unwrap_or(now),
    })
}

/// Labels kubelet may register itself with (`--node-labels`): the NodeClaim's labels less the
/// `kubernetes.io` / `k8s.io` keys only Kubernetes sets (the node-restriction admission rule).
fn kubelet_labels(claim: &NodeClaim, reqs: &Requirements) -> BTreeMap<String, String> {
    let mut out = reqs.nodeclaim_labels();
    if let Some(l) = &claim.metadata.labels {
        out.extend(l.clone());
    }
    out.retain(|key, _| {
        let domain = key.split_once('/').map(|(d, _)| d).unwrap_or_default();
        let reserved = ["kubernetes.io", "k8s.io"]
            .iter()
            .any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
        let allowed = ["node.kubernetes.io", "kubelet.kubernetes.io"]
            .iter()
            .any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
        !reserved || allowed
    });
    out
}

/// The taints a node boots with: the NodeClaim's taints and startup taints, and
/// `karpenter.sh/unregistered` until Karpenter registers it.
fn boot_taints(claim: &NodeClaim) -> Vec<Taint> {
    let taints: Vec<Taint> = claim
        .spec
        .taints
        .iter()
        .chain(&claim.spec.startup_taints)
        .cloned()
        .collect();
    boot_taints_of(&taints)
}

/// `taints` plus `karpenter.sh/unregistered` unless already there.
fn boot_taints_of(taints: &[Taint]) -> Vec<Taint> {
    let mut out = taints.to_vec();
    if !out.iter().any(|t| t.key == labels::UNREGISTERED_TAINT_KEY) {
        out.push(Taint {
            key: labels::UNREGISTERED_TAINT_KEY.into(),
            value: None,
            effect: TaintEffect::NoExecute,
            time_added: None,
        });
    }
    out
}

/// The node class' volumes, or its AMI family's defaults when it names none.
fn block_devices(nodeclass: &EC2NodeClass) -> Vec<BlockDeviceMapping> {
    if nodeclass.spec.block_device_mappings.is_empty() {
        launch_templates::default_block_devices(family_of(nodeclass))
    } else {
        nodeclass.spec.block_device_mappings.clone()
    }
}

/// The node class' AMI family (AL2023 when neither `amiFamily` nor an alias says).
fn family_of(nodeclass: &EC2NodeClass) -> AMIFamily {
    nodeclass.spec.ami_family().unwrap_or(AMIFamily::AL2023)
}

/// The reserved pools one launch asks for, from `candidates` in launch order (reserved first):
/// as upstream filters them, one reservation type per request (the first candidate's; an
/// interruptible reservation is launched differently, so it is a type of its own), one capacity
/// block (the first), and for On-Demand Capacity Reservations one reservation per instance type
/// and zone, the one with the most room.
fn reserved_candidates<'a>(
    candidates: Vec<(&'a InstanceType, &'a Offering)>,
) -> Vec<(&'a InstanceType, &'a Offering)> {
    let reservation = |o: &'a Offering| o.reservation.as_deref();
    let Some(first) = candidates.first().and_then(|(_, o)| reservation(o)) else {
        return Vec::new();
    };
    let first = first.clone();
    let mut out: Vec<(&InstanceType, &Offering)> = Vec::new();
    for (it, o) in candidates {
        let Some(r) = reservation(o) else { continue };
        if r.reservation_type != first.reservation_type || r.interruptible != first.interruptible {
            continue;
        }
        if &*first.reservation_type == capacity_reservations::TYPE_CAPACITY_BLOCK {
            if r.id == first.id {
                out.push((it, o));
            }
            continue;
        }
        match out
            .iter_mut()
            .find(|(t, kept)| t.name == it.name && kept.zone == o.zone)
        {
            Some(kept) => {
                if reservation(kept.1).is_some_and(|k| r.available > k.available) {
                    *kept = (it, o);
                }
            }
            None => out.push((it, o)),
        }
    }
    out
}

fn launched(
    instance: &Instance,
    it: &InstanceType,
    offering: &Offering,
    reqs: &Requirements,
    nodeclass: &str,
    instance_profile: &str,
) -> Launched {
    let mut node = node_labels(it, offering, reqs);
    node.insert(labels::INSTANCE_TYPE.into(), it.name.to_string());
    node.insert(labels::EC2NODECLASS.into(), nodeclass.to_string());
    // EC2 picks the partition of a partition placement group; the instance reports it.
    if let Some(partition) = instance.placement_group.as_ref().and_then(|g| g.partition) {
        node.insert(
            labels::PLACEMENT_GROUP_PARTITION.into(),
            partition.to_string(),
        );
    }
    Launched {
        provider_id: instance.provider_id.clone(),
        image_id: instance.image_id.clone(),
        instance_type: it.name.to_string(),
        zone: instance.zone.clone(),
        capacity_type: instance.capacity_type,
        capacity: it.capacity.clone(),
        allocatable: it.allocatable.clone(),
        labels: node,
        // As upstream: what garbage collection keeps the instance's profile by.
        annotations: BTreeMap::from([(
            labels::INSTANCE_PROFILE_NAME.to_string(),
            instance_profile.to_string(),
        )]),
    }
}

#[async_trait]
impl CloudProvider for AwsProvider {
    fn name(&self) -> &'static str {
        "aws"
    }

    fn repair_policies(&self) -> &'static [crate::apis::repair::RepairPolicy] {
        &crate::apis::repair::EKS_POLICIES
    }

    fn resolution_period(&self) -> Duration {
        self.settings.resolution_period
    }

    fn resolves_capacity_reservations(&self) -> bool {
        self.settings.reserved_capacity
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> Result<Launched, CloudError> {
        let status = super::nodeclass_ready(nodeclass)?;
        let name = claim.metadata.name.clone().unwrap_or_default();
        let class = nodeclass.metadata.name.clone().unwrap_or_default();
        let placement_group = self.placement_group(nodeclass).await?;
        let types = self.types_for(nodeclass, placement_group.as_ref())?;
        let reqs = claim_requirements(claim);
        let instance_profile = status.instance_profile.clone().ok_or_else(|| {
            CloudError::NodeClassNotReady(format!(
                "EC2NodeClass {class} has no instance profile yet"
            ))
        })?;
        let placement_partition = placement_group
            .as_ref()
            .map(|g| placement_groups::required_partition(g, &reqs))
            .transpose()
            .map_err(|e| CloudError::Invalid(format!("NodeClaim {name}: {e}")))?
            .flatten();
        // An instance an earlier attempt launched but could not tag is tagged (and found below)
        // or terminated before anything new is launched.
        self.settle_untagged(&name).await?;
        if let Some(existing) = self.find_by_nodeclaim(&name).await? {
            let it = types
                .iter()
                .find(|it| *it.name == existing.instance_type)
                .ok_or_else(|| {
                    CloudError::Invalid(format!(
                        "instance type {} of {} is no longer offered",
                        existing.instance_type, existing.provider_id
                    ))
                })?;
            let offering = it
                .offerings
                .iter()
                .find(|o| {
                    *o.zone == existing.zone
                        && o.capacity_type == existing.capacity_type
                        && o.reservation.as_ref().map(|r| &*r.id)
                            == existing.capacity_reservation_id.as_deref()
                })
                .ok_or_else(|| {
                    CloudError::Invalid(format!(
                        "the offering of {} is no longer listed",
                        existing.provider_id
                    ))
                })?;
            return Ok(launched(
                &existing,
                it,
                offering,
                &reqs,
                &class,
                &instance_profile,
            ));
        }
        let candidates = launch_candidates(types.iter(), &reqs, &claim_requests(claim));
        let Some(capacity_type) = candidates.first().map(|(_, o)| o.capacity_type) else {
            return Err(CloudError::InsufficientCapacity(format!(
                "no available offering of the {} instance types fits NodeClaim {name} in the zones of EC2NodeClass {class}",
                types.len()
            )));
        };
        let candidates = if capacity_type == CapacityType::Reserved {
            reserved_candidates(candidates)
        } else {
            candidates
                .into_iter()
                .filter(|(_, o)| o.capacity_type == capacity_type)
                .collect()
        };
        let reservation_kind = match candidates
            .first()
            .and_then(|(_, o)| o.reservation.as_deref())
        {
            Some(r) if &*r.reservation_type == capacity_reservations::TYPE_CAPACITY_BLOCK => {
                ReservationKind::CapacityBlock
            }
            Some(r) if r.interruptible => ReservationKind::Interruptible,
            _ => ReservationKind::OnDemand,
        };
        let nodepool = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
            .cloned()
            .unwrap_or_default();
        let owner = tags::Owner {
            cluster: &self.settings.cluster_name,
            nodepool: &nodepool,
            nodeclass: &class,
        };
        let launch_tags = tags::launch_tags(&owner, &nodeclass.spec.tags);
        // One launch template per (AMI, max pods, EFA interfaces, reservation): the user data
        // states the pod limit the scheduler planned with, a NodeClaim that asks for EFA devices
        // (and whose class lists no interfaces) gets one EFA interface per device its type
        // offers, as upstream, and a reserved launch targets each reservation from its own
        // template.
        let efa_requested = claim_requests(claim).get(resources::EFA) > 0
            && nodeclass.spec.network_interfaces.is_empty();
        let mut groups: Vec<((String, i64, i64, ReservationTargeting), Vec<Override>)> = Vec::new();
        for (rank, (it, o)) in candidates.iter().enumerate() {
            let type_labels: BTreeMap<String, String> = it
                .labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect();
            let Some(ami) = amis::ami_for(&status.amis, &type_labels) else {
                continue;
            };
            let Some(subnet) = status.subnets.iter().find(|s| *s.zone == *o.zone) else {
                continue;
            };
            let targeting = match &o.reservation {
                Some(r) => ReservationTargeting::Target {
                    id: r.id.to_string(),
                    capacity_block: &*r.reservation_type
                        == capacity_reservations::TYPE_CAPACITY_BLOCK,
                    interruptible: r.interruptible,
                },
                None if self.settings.reserved_capacity => ReservationTargeting::Avoid,
                None => ReservationTargeting::Open,
            };
            let efas = if efa_requested {
                it.capacity.get(resources::EFA)
            } else {
                0
            };
            let key = (ami.id.clone(), it.capacity.pods, efas, targeting);
            let entry = Override {
                instance_type: it.name.to_string(),
                zone: o.zone.to_string(),
                subnet_id: subnet.id.clone(),
                rank,
            };
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, list)) => list.push(entry),
                None => groups.push((key, vec![entry])),
            }
        }
        if groups.is_empty() {
            return Err(CloudError::NodeClassNotReady(format!(
                "EC2NodeClass {class}: no resolved AMI or subnet serves the instance types NodeClaim {name} allows"
            )));
        }
        let node_labels_ = kubelet_labels(claim, &reqs);
        let taints = boot_taints(claim);
        let mut specs = Vec::with_capacity(groups.len());
        for ((image_id, max_pods, efa_interfaces, reservations), overrides) in groups {
            let user_data = self
                .render_user_data(nodeclass, &node_labels_, &taints, Some(max_pods))
                .map_err(|e| CloudError::Invalid(format!("EC2NodeClass {class}: {e}")))?;
            METRICS
                .ec2nodeclasses_userdata_bytes
                .with_label_values(&[class.as_str()])
                .set(user_data.len() as f64);
            let spec = self.template_spec(
                nodeclass,
                Launch {
                    image_id,
                    user_data: base64::engine::general_purpose::STANDARD.encode(user_data),
                    instance_profile: instance_profile.clone(),
                    security_groups: &status.security_groups,
                    placement_group: placement_group.as_ref(),
                    placement_partition,
                    efa_interfaces: i32::try_from(efa_interfaces).unwrap_or(0),
                    tags: launch_tags.clone(),
                    reservations,
                },
            );
            specs.push((spec, overrides));
        }
        let started = self
            .launch(
                &name,
                capacity_type,
                reservation_kind,
                &specs,
                &launch_tags,
                nodeclass,
            )
            .await?;
        // Only now can the instance be told apart from the others of its batch: tag it with
        // its NodeClaim, or take it back, so that a retry never launches a second one.
        if let Err(why) = self.tag_nodeclaim(&started.id, &name).await {
            return Err(self.give_back(&name, &started.id, why).await);
        }
        let reservation = started
            .zone
            .as_deref()
            .and_then(|zone| reservation_of_pool(&specs, &started.instance_type, zone));
        if let Some(id) = reservation {
            self.reservations.mark_launched(id);
        }
        let instance = match self.describe_instance(&started.id).await? {
            Some(i) => i,
            None => Instance {
                provider_id: format!(
                    "aws:///{}/{}",
                    started.zone.as_deref().unwrap_or_default(),
                    started.id
                ),
                nodeclaim: Some(name.clone()),
                nodepool: Some(nodepool.clone()),
                instance_type: started.instance_type.clone(),
                zone: started.zone.clone().unwrap_or_default(),
                capacity_type,
                image_id: None,
                subnet_id: None,
                security_groups: None,
                capacity_reservation_id: reservation.map(str::to_string),
                placement_group: None,
                state: InstanceState::Pending,
                launch_time: self.clock.now(),
            },
        };
        let (it, offering) = candidates
            .iter()
            .find(|(it, o)| {
                *it.name == instance.instance_type
                    && *o.zone == instance.zone
                    && o.capacity_type == capacity_type
            })
            .copied()
            .ok_or_else(|| {
                CloudError::Invalid(format!(
                    "EC2 launched {} ({} in {}), which was not among the requested pools",
                    started.id, instance.instance_type, instance.zone
                ))
            })?;
        let mut result = launched(&instance, it, offering, &reqs, &class, &instance_profile);
        result.capacity_type = capacity_type;
        Ok(result)
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        let id = provider_id_instance(provider_id).ok_or_else(|| {
            CloudError::NotFound(format!("{provider_id} is not an EC2 provider ID"))
        })?;
        match self.describe_instance(id).await? {
            None => return Err(CloudError::NotFound(provider_id.into())),
            Some(i) if i.state == InstanceState::Terminated => {
                return Err(CloudError::NotFound(provider_id.into()));
            }
            Some(i) => {
                let result = self.terminate(id).await;
                // The slot is free again: counted when the termination is asked for (once).
                if result.is_ok()
                    && !i.state.is_terminating()
                    && let Some(reservation) = &i.capacity_reservation_id
                {
                    self.reservations.mark_terminated(reservation);
                }
                if result.is_err() {
                    let zone_id = read(&self.catalogue)
                        .zone_ids
                        .get(&i.zone)
                        .cloned()
                        .unwrap_or_default();
                    METRICS
                        .cloudprovider_instance_termination_failures_total
                        .with_label_values(&[&i.zone, &zone_id])
                        .inc();
                }
                result
            }
        }
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        let id = provider_id_instance(provider_id).ok_or_else(|| {
            CloudError::NotFound(format!("{provider_id} is not an EC2 provider ID"))
        })?;
        self.describe_instance(id)
            .await?
            .ok_or_else(|| CloudError::NotFound(provider_id.into()))
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        let now = self.clock.now();
        let cluster_key = tags::cluster_tag_key(&self.settings.cluster_name);
        let mut pages = self
            .ec2
            .describe_instances()
            .filters(tags::filter("tag-key", [cluster_key.as_str()]))
            .filters(tags::filter("tag-key", [labels::NODEPOOL]))
            .filters(tags::filter(
                "instance-state-name",
                ["pending", "running", "stopping", "stopped", "shutting-down"],
            ))
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("ec2:DescribeInstances", e))?;
            out.extend(
                page.reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .filter_map(|i| to_instance(i, now, self.settings.reserved_capacity)),
            );
        }
        Ok(out)
    }

    async fn delete_nodeclass_resources(&self, nodeclass: &EC2NodeClass) -> Result<(), CloudError> {
        let class = nodeclass.metadata.name.as_deref().unwrap_or_default();
        let cluster = &self.settings.cluster_name;
        let region = &self.settings.region;
        if nodeclass.spec.role.is_some() {
            let legacy = instance_profile::legacy_name(cluster, region, class);
            instance_profile::delete(&self.iam, &self.lookups, &legacy).await?;
        }
        if let Some(uid) = nodeclass.metadata.uid.as_deref().filter(|u| !u.is_empty()) {
            let path = instance_profile::class_path(region, cluster, uid);
            for profile in instance_profile::list_under(&self.iam, &path).await? {
                instance_profile::delete(&self.iam, &self.lookups, &profile.name).await?;
            }
        }
        for template in launch_templates::list_owned(&self.ec2, cluster).await? {
            if template.nodeclass == class {
                self.delete_launch_template(&template.name).await?;
            }
        }
        Ok(())
    }

    async fn collect_nodeclass_resources(
        &self,
        in_use: &NodeClassesInUse,
    ) -> Result<Vec<String>, CloudError> {
        let (cluster, region) = (&self.settings.cluster_name, &self.settings.region);
        let now = self.clock.now();
        let mut deleted = Vec::new();
        let templates = launch_templates::list_owned(&self.ec2, cluster).await?;
        for template in garbage::stale_templates(&templates, in_use, now) {
            self.delete_launch_template(&template.name).await?;
            deleted.push(format!("launch template {}", template.name));
        }
        let unused: Vec<String> = {
            let mut used = locked(&self.launch_templates);
            for t in templates
                .iter()
                .filter(|t| in_use.nodeclasses.contains(&t.nodeclass))
            {
                used.entry(t.name.clone()).or_insert(now);
            }
            garbage::unused_templates(&templates, in_use, &used, now)
                .into_iter()
                .map(|t| t.name.clone())
                .collect()
        };
        for name in unused {
            self.delete_launch_template(&name).await?;
            deleted.push(format!("unused launch template {name}"));
        }
        let profiles = instance_profile::list_owned(&self.iam, cluster).await?;
        let protected = self
            .lookups
            .protected_profiles
            .live()
            .into_iter()
            .map(|(name, ())| name)
            .collect();
        for profile in garbage::stale_profiles(&profiles, in_use, &protected, cluster, region, now)
        {
            instance_profile::delete(&self.iam, &self.lookups, &profile.name).await?;
            deleted.push(format!("instance profile {}", profile.name));
        }
        Ok(deleted)
    }

    async fn tag_registered(
        &self,
        provider_id: &str,
        nodeclaim: &str,
        node_name: &str,
    ) -> Result<Tagging, CloudError> {
        let id = provider_id_instance(provider_id).ok_or_else(|| {
            CloudError::NotFound(format!("{provider_id} is not an EC2 provider ID"))
        })?;
        // One turn per node: a thousand Nodes registering together are named at the pacing
        // rate instead of in one burst of DescribeInstances and CreateTags.
        if let Some(wait) = self
            .registration_tagging
            .turn(nodeclaim, tokio::time::Instant::now())
        {
            return Ok(Tagging::Paced(wait));
        }
        let instance = self
            .describe_raw(id)
            .await?
            .into_iter()
            .find(|i| {
                !matches!(
                    i.state().and_then(|s| s.name()),
                    Some(InstanceStateName::Terminated)
                )
            })
            .ok_or_else(|| CloudError::NotFound(provider_id.into()))?;
        let missing = tags::registration_tags(
            node_name,
            nodeclaim,
            &self.settings.cluster_name,
            &tags::from_ec2(instance.tags()),
        );
        if missing.is_empty() {
            return Ok(Tagging::Done);
        }
        self.ec2
            .create_tags()
            .resources(id)
            .set_tags(Some(tags::to_ec2(&missing)))
            .send()
            .await
            .map_err(|e| sdk_error("ec2:CreateTags", e))?;
        Ok(Tagging::Done)
    }

    async fn instance_types(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Arc<Vec<InstanceType>>, CloudError> {
        let placement_group = self.placement_group(nodeclass).await?;
        self.types_for(nodeclass, placement_group.as_ref())
    }

    async fn resolve(&self, nodeclass: &EC2NodeClass) -> NodeClassResolution {
        use NodeClassCondition as C;
        let spec = &nodeclass.spec;
        let subnets = subnets::resolve(&self.ec2, &self.lookups, &spec.subnet_selector_terms)
            .await
            .map_err(|e| ResolveError::new(C::SubnetsReady, "SubnetsNotFound", e))?;
        if subnets.is_empty() {
            return Err(ResolveError::new(
                C::SubnetsReady,
                "SubnetsNotFound",
                CloudError::NodeClassNotReady("spec.subnetSelectorTerms matched no subnet".into()),
            ));
        }
        let security_groups = security_groups::resolve(
            &self.ec2,
            &self.lookups,
            &spec.security_group_selector_terms,
        )
        .await
        .map_err(|e| ResolveError::new(C::SecurityGroupsReady, "SecurityGroupsNotFound", e))?;
        if security_groups.is_empty() {
            return Err(ResolveError::new(
                C::SecurityGroupsReady,
                "SecurityGroupsNotFound",
                CloudError::NodeClassNotReady(
                    "spec.securityGroupSelectorTerms matched no security group".into(),
                ),
            ));
        }
        let amis = amis::resolve(
            &self.ec2,
            &self.ssm,
            &self.lookups,
            &spec.ami_selector_terms,
            &self.kubernetes_version(),
            self.clock.now(),
        )
        .await
        .map_err(|e| ResolveError::new(C::AMIsReady, "AMINotFound", e))?;
        let instance_profile = instance_profile::ensure(
            &self.iam,
            &self.lookups,
            &self.settings.cluster_name,
            &self.settings.region,
            nodeclass,
        )
        .await
        .map_err(|e| ResolveError::new(C::InstanceProfileReady, "InstanceProfileNotFound", e))?;
        // With the `ReservedCapacity` gate off reservations are neither looked up nor used, as
        // upstream (no DescribeCapacityReservations permission needed).
        let capacity_reservations = if spec.capacity_reservation_selector_terms.is_empty()
            || !self.settings.reserved_capacity
        {
            Vec::new()
        } else {
            let resolved = capacity_reservations::resolve(
                &self.ec2,
                &spec.capacity_reservation_selector_terms,
                self.clock.now(),
            )
            .await
            .map_err(|e| {
                ResolveError::new(
                    C::CapacityReservationsReady,
                    "CapacityReservationsNotFound",
                    e,
                )
            })?;
            self.reservations.sync(&resolved.available);
            resolved.reservations
        };
        // Looked up again once its cached answer is a minute old (a group deleted and made
        // again under its name gets a new ID) and kept for the launches.
        let class_name = nodeclass.metadata.name.clone().unwrap_or_default();
        match &spec.placement_group_selector {
            None => {
                locked(&self.placement_groups).remove(&class_name);
            }
            Some(selector) => {
                let group = placement_groups::resolve(&self.ec2, &self.lookups, selector)
                    .await
                    .map_err(|e| {
                        ResolveError::new(
                            C::PlacementGroupReady,
                            "PlacementGroupResolutionFailed",
                            e,
                        )
                    })?
                    .ok_or_else(|| {
                        locked(&self.placement_groups).remove(&class_name);
                        ResolveError::new(
                            C::PlacementGroupReady,
                            "PlacementGroupNotFound",
                            CloudError::NodeClassNotReady(format!(
                                "spec.placementGroupSelector matches no available placement group (by {}); create it or fix the selector",
                                placement_groups::describe(selector)
                            )),
                        )
                    })?;
                locked(&self.placement_groups).insert(class_name, (selector.clone(), group));
            }
        }
        // User data is rendered for every launch; rendering it here (with the boot taint and no
        // NodeClaim labels) reports a spec.userData that cannot be merged on the node class,
        // before any NodeClaim tries it.
        self.render_user_data(nodeclass, &BTreeMap::new(), &boot_taints_of(&[]), None)
            .map_err(|e| {
                let reason = match &e {
                    userdata::UserDataError::Invalid(_) => "InvalidUserData",
                    userdata::UserDataError::TooLarge(_) => "UserDataSizeLimitExceeded",
                    userdata::UserDataError::ClusterUnknown(_) => "ClusterNotDiscovered",
                };
                ResolveError::new(
                    C::ValidationSucceeded,
                    reason,
                    CloudError::Invalid(e.to_string()),
                )
            })?;
        if !self.settings.disable_dry_run {
            self.check_authorization(
                nodeclass,
                &subnets,
                &security_groups,
                &amis,
                &instance_profile,
            )
            .await?;
        }
        Ok(EC2NodeClassStatus {
            subnets: subnets.iter().map(subnets::SubnetInfo::status).collect(),
            security_groups,
            capacity_reservations,
            amis,
            instance_profile: Some(instance_profile),
            conditions: Vec::new(),
        })
    }

    async fn interruptions(&self) -> Option<Result<Vec<InterruptionMessage>, CloudError>> {
        let queue = self.queue.as_ref()?;
        Some(queue.receive().await.map(|messages| {
            messages
                .into_iter()
                .map(|m| InterruptionMessage {
                    event: interruption::parse_message(&m.body),
                    receipt: m.receipt_handle,
                })
                .collect()
        }))
    }

    /// EC2's failed status checks and scheduled events (DescribeInstanceStatus).
    async fn instance_health(&self) -> Option<Result<Vec<InterruptionEvent>, CloudError>> {
        Some(instance_status::unhealthy(&self.ec2, self.clock.now()).await)
    }

    /// Marks the spot pools of spot-interrupted instances unavailable, so the replacement is not
    /// launched into the pool EC2 is reclaiming, and an interruptible reservation taking its
    /// capacity back as having none left (until EC2 reports room again), as upstream does.
    async fn record_interruption(&self, event: &InterruptionEvent) -> Result<(), CloudError> {
        if !matches!(
            event.kind,
            InterruptionKind::SpotInterrupted | InterruptionKind::CapacityReservationInterrupted
        ) {
            return Ok(());
        }
        for id in &event.instance_ids {
            match self.describe_instance(id).await {
                Ok(Some(i))
                    if event.kind == InterruptionKind::SpotInterrupted
                        && i.capacity_type == CapacityType::Spot =>
                {
                    self.unavailable.mark(OfferingKey {
                        instance_type: i.instance_type,
                        zone: i.zone,
                        capacity_type: CapacityType::Spot,
                    });
                }
                Ok(Some(Instance {
                    capacity_reservation_id: Some(reservation),
                    ..
                })) if event.kind == InterruptionKind::CapacityReservationInterrupted => {
                    tracing::info!(instance = %id, capacity_reservation = %reservation, "capacity reservation interrupted; nothing more is launched into it until EC2 reports room again");
                    self.reservations.mark_unavailable(&reservation);
                }
                Ok(_) | Err(CloudError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn acknowledge_interruption(
        &self,
        message: &InterruptionMessage,
    ) -> Result<(), CloudError> {
        let queue = self.queue.as_ref().ok_or_else(|| {
            CloudError::Invalid(
                "no interruption queue is configured (set INTERRUPTION_QUEUE)".into(),
            )
        })?;
        queue.delete_message(&message.receipt).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{InstanceState as Ec2State, Placement};

    fn ec2_instance() -> aws_sdk_ec2::types::builders::InstanceBuilder {
        aws_sdk_ec2::types::Instance::builder()
            .instance_id("i-0123456789abcdef0")
            .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
            .placement(Placement::builder().availability_zone("us-east-1a").build())
            .state(Ec2State::builder().name(InstanceStateName::Running).build())
    }

    #[test]
    fn an_instance_without_a_launch_time_is_taken_as_new() {
        let now = DateTime::from_timestamp(1_750_000_000, 0).expect("time");
        let i = to_instance(&ec2_instance().build(), now, true).expect("instance");
        assert_eq!(
            i.launch_time, now,
            "not the epoch, which garbage collection would judge old"
        );
        let launched = aws_sdk_ec2::primitives::DateTime::from_secs(1_700_000_000);
        let i = to_instance(&ec2_instance().launch_time(launched).build(), now, true)
            .expect("instance");
        assert_eq!(i.launch_time.timestamp(), 1_700_000_000);
        assert_eq!(i.provider_id, "aws:///us-east-1a/i-0123456789abcdef0");
    }

    #[test]
    fn only_an_instance_targeted_at_its_reservation_is_reserved() {
        use aws_sdk_ec2::types::{
            CapacityReservationPreference, CapacityReservationSpecificationResponse,
        };
        let now = Utc::now();
        let open = ec2_instance().capacity_reservation_id("cr-0123").build();
        assert_eq!(
            to_instance(&open, now, true).map(|i| i.capacity_type),
            Some(CapacityType::OnDemand),
            "an on-demand launch EC2 matched to an open reservation stays on-demand"
        );
        assert_eq!(reservation_of(&open, true), None);
        let targeted = ec2_instance()
            .capacity_reservation_id("cr-0123")
            .capacity_reservation_specification(
                CapacityReservationSpecificationResponse::builder()
                    .capacity_reservation_preference(
                        CapacityReservationPreference::CapacityReservationsOnly,
                    )
                    .build(),
            )
            .build();
        assert_eq!(
            to_instance(&targeted, now, true).map(|i| i.capacity_type),
            Some(CapacityType::Reserved)
        );
        assert_eq!(reservation_of(&targeted, true).as_deref(), Some("cr-0123"));
        assert_eq!(
            to_instance(&targeted, now, false).map(|i| i.capacity_type),
            Some(CapacityType::OnDemand),
            "with the ReservedCapacity gate off nothing is reserved"
        );
        let spot = ec2_instance()
            .instance_lifecycle(InstanceLifecycleType::Spot)
            .build();
        assert_eq!(
            to_instance(&spot, now, true).map(|i| i.capacity_type),
            Some(CapacityType::Spot)
        );
    }
}
