//! Authorization checks of an EC2NodeClass (upstream's validation controller): with
//! `DISABLE_DRY_RUN` false, a resolved class is tried with dry-run CreateFleet,
//! CreateLaunchTemplate and RunInstances calls shaped like its launches (its tags, AMI, security
//! groups, instance profile, volumes, metadata options, a subnet of its), so a controller role
//! missing a permission (or a tag condition it does not meet) turns `ValidationSucceeded` false
//! before any NodeClaim fails to launch. EC2 answers `DryRunOperation` when the call would have
//! been allowed and `UnauthorizedOperation` when not.

use std::collections::BTreeMap;

use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest, FleetType,
    IamInstanceProfileSpecification, InstanceType as Ec2InstanceType, ResourceType,
    TagSpecification, TargetCapacitySpecificationRequest,
};

use crate::apis::hash::fnv1a;
use crate::cloudprovider::CloudError;

use super::TRANSIENT_CODES;
use super::launch_templates::{self, LaunchTemplateSpec};
use super::tags::to_ec2;

/// The reasons (and messages) of a failed check, upstream's.
pub const CREATE_FLEET: (&str, &str) = (
    "CreateFleetAuthCheckFailed",
    "Controller isn't authorized to call ec2:CreateFleet",
);
/// See [`CREATE_FLEET`].
pub const CREATE_LAUNCH_TEMPLATE: (&str, &str) = (
    "CreateLaunchTemplateAuthCheckFailed",
    "Controller isn't authorized to call ec2:CreateLaunchTemplate",
);
/// See [`CREATE_FLEET`].
pub const RUN_INSTANCES: (&str, &str) = (
    "RunInstancesAuthCheckFailed",
    "Controller isn't authorized to call ec2:RunInstances",
);

/// What the dry runs are made with: one launch of the class as it resolved.
pub struct Probe<'a> {
    /// The launch template a launch would make (tags included).
    pub template: LaunchTemplateSpec,
    /// The instance type the RunInstances check asks for (one the template's AMI serves).
    pub instance_type: &'a str,
    /// A subnet of the class.
    pub subnet_id: &'a str,
}

impl Probe<'_> {
    /// What the verdict depends on: a cached verdict holds while this stays the same.
    pub fn key(&self) -> u64 {
        let json = serde_json::to_vec(&(&self.template, self.instance_type, self.subnet_id))
            .unwrap_or_default();
        fnv1a(&json)
    }
}

/// The first failed check as (reason, message), or `None` when all three would be allowed.
/// Throttling and any answer other than `DryRunOperation` / `UnauthorizedOperation` are errors
/// ([`CloudError::Transient`]): the checks are tried again, the condition is left alone.
pub async fn check(
    ec2: &aws_sdk_ec2::Client,
    probe: &Probe<'_>,
) -> Result<Option<(&'static str, &'static str)>, CloudError> {
    let tags = &probe.template.tags;
    let tag_spec = |rt: ResourceType| {
        TagSpecification::builder()
            .resource_type(rt)
            .set_tags(Some(to_ec2(tags)))
            .build()
    };
    // Not retried by the SDK: a throttled check is simply made again at the next reconcile.
    let once = || aws_sdk_ec2::config::Builder::default().retry_config(RetryConfig::disabled());

    let fleet = ec2
        .create_fleet()
        .dry_run(true)
        .r#type(FleetType::Instant)
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(DefaultTargetCapacityType::OnDemand)
                .build(),
        )
        .launch_template_configs(
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_name(probe.template.name())
                        .version("$Latest")
                        .build(),
                )
                .overrides(
                    FleetLaunchTemplateOverridesRequest::builder()
                        .instance_type(Ec2InstanceType::from(probe.instance_type))
                        .subnet_id(probe.subnet_id)
                        .build(),
                )
                .build(),
        )
        .tag_specifications(tag_spec(ResourceType::Instance))
        .tag_specifications(tag_spec(ResourceType::Volume))
        .tag_specifications(tag_spec(ResourceType::Fleet))
        .customize()
        .config_override(once())
        .send()
        .await;
    if let Some(failed) = verdict("ec2:CreateFleet", fleet, CREATE_FLEET)? {
        return Ok(Some(failed));
    }

    let data = launch_templates::request_data(&probe.template)?;
    let template = ec2
        .create_launch_template()
        .dry_run(true)
        .launch_template_name(probe.template.name())
        .launch_template_data(data.clone())
        .tag_specifications(tag_spec(ResourceType::LaunchTemplate))
        .customize()
        .config_override(once())
        .send()
        .await;
    if let Some(failed) = verdict("ec2:CreateLaunchTemplate", template, CREATE_LAUNCH_TEMPLATE)? {
        return Ok(Some(failed));
    }

    let run = ec2
        .run_instances()
        .dry_run(true)
        .min_count(1)
        .max_count(1)
        .image_id(&probe.template.image_id)
        .instance_type(Ec2InstanceType::from(probe.instance_type))
        .subnet_id(probe.subnet_id)
        .set_security_group_ids(Some(probe.template.security_groups.clone()))
        .iam_instance_profile(
            IamInstanceProfileSpecification::builder()
                .name(&probe.template.instance_profile)
                .build(),
        )
        .tag_specifications(tag_spec(ResourceType::Instance))
        .tag_specifications(tag_spec(ResourceType::Volume))
        .customize()
        .config_override(once())
        .send()
        .await;
    verdict("ec2:RunInstances", run, RUN_INSTANCES)
}

/// Reads one dry run's answer: `DryRunOperation` passes, `UnauthorizedOperation` fails with
/// `failed`, anything else is an error.
fn verdict<T, E, R>(
    operation: &str,
    answer: Result<T, aws_sdk_ec2::error::SdkError<E, R>>,
    failed: (&'static str, &'static str),
) -> Result<Option<(&'static str, &'static str)>, CloudError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let e = match answer {
        // A dry run that "succeeds" was not a dry run; nothing was refused either.
        Ok(_) => return Ok(None),
        Err(e) => e,
    };
    match e.code() {
        Some("DryRunOperation") => Ok(None),
        Some("UnauthorizedOperation") => Ok(Some(failed)),
        Some(code) if TRANSIENT_CODES.contains(&code) => Err(super::sdk_error(operation, e)),
        _ => Err(CloudError::Transient(format!(
            "{operation} dry run answered neither DryRunOperation nor UnauthorizedOperation: {}",
            aws_sdk_ec2::error::DisplayErrorContext(&e)
        ))),
    }
}

/// A verdict reached: what it was reached on ([`Probe::key`]), when, and the failed check.
#[derive(Clone, Copy, Debug)]
pub struct Verdict {
    /// The probe's key.
    pub key: u64,
    /// When the checks were made.
    pub at: chrono::DateTime<chrono::Utc>,
    /// The first failed check, or `None`.
    pub failed: Option<(&'static str, &'static str)>,
}

/// How long a verdict is kept while nothing it was reached on changes (a role fixed or broken
/// meanwhile is noticed within this time).
pub const VERDICT_TTL: chrono::TimeDelta = chrono::TimeDelta::minutes(30);

/// Verdicts per EC2NodeClass.
pub type Verdicts = BTreeMap<String, Verdict>;
