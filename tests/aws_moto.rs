//! The AWS provider against moto_server (PyPI `moto[server]`), started on loopback by the test
//! and stopped by PID when it ends. `tests/moto/launcher.py` closes the gaps moto has (public
//! SSM parameters, CreateFleet override order and capacity errors, a Pricing API answered from a
//! fixture); see the README's "AWS provider tests" for what is verified where.
//!
//! The server runs from the venv `hack/test.sh` creates (`$CARGO_TARGET_DIR/moto-venv`) or from
//! `MOTO_PYTHON`. Without it the tests fail with instructions, unless `SKIP_AWS_TESTS=1`.

#[path = "moto/harness.rs"]
mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use aws_sdk_ec2::types::{Filter, InstanceAttributeName, ResourceType, Tag, TagSpecification};
use base64::Engine as _;
use chrono::Utc;
use karpenter_rs::apis::conditions::{self, Condition};
use karpenter_rs::apis::ec2nodeclass::{EC2NodeClassStatus, NodeClassCondition};
use karpenter_rs::apis::{EC2NodeClass, NodeClaim, labels};
use karpenter_rs::clock::FakeClock;
use karpenter_rs::cloudprovider::aws::userdata::parse_mime;
use karpenter_rs::cloudprovider::aws::{AwsProvider, AwsSettings, cluster};
use karpenter_rs::cloudprovider::interruption::{
    InterruptionAction, InterruptionKind, InterruptionMessage,
};
use karpenter_rs::cloudprovider::{
    CloudError, CloudProvider, InstanceState, Tagging, claim_requests, claim_requirements,
    launch_candidates,
};
use karpenter_rs::disruption::drift;
use karpenter_rs::metrics::METRICS;
use karpenter_rs::scheduling::instance_type::{CapacityType, InstanceType};
use karpenter_rs::scheduling::resources;

use harness::{Moto, create_queue, sdk_config};

/// The AWS side of a test: a VPC with two tagged subnets and one untagged, a tagged and an
/// untagged security group, the node role, and the provider.
struct Env {
    config: aws_config::SdkConfig,
    settings: AwsSettings,
    ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
    sqs: aws_sdk_sqs::Client,
    iam: aws_sdk_iam::Client,
    provider: AwsProvider,
    clock: Arc<FakeClock>,
    subnets: BTreeMap<&'static str, String>,
    groups: BTreeMap<&'static str, String>,
}

fn tag(key: &str, value: &str) -> Tag {
    Tag::builder().key(key).value(value).build()
}

fn tagged(rt: ResourceType, tags: &[(&str, &str)]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(rt)
        .set_tags(Some(tags.iter().map(|(k, v)| tag(k, v)).collect()))
        .build()
}

async fn env(moto: &Moto, queue: Option<&str>) -> Env {
    env_with(moto, queue, |_| {}).await
}

/// [`env`] with the provider's settings adjusted by `adjust` before it is built.
async fn env_with(moto: &Moto, queue: Option<&str>, adjust: impl FnOnce(&mut AwsSettings)) -> Env {
    let config = sdk_config(moto).await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .expect("vpc");
    let vpc_id = vpc
        .vpc()
        .and_then(|v| v.vpc_id())
        .expect("vpc id")
        .to_string();
    let mut subnets = BTreeMap::new();
    for (name, cidr, zone, tags) in [
        (
            "a",
            "10.0.1.0/24",
            "us-east-1a",
            &[("karpenter.sh/discovery", "demo"), ("tier", "private")][..],
        ),
        (
            "b",
            "10.0.2.0/24",
            "us-east-1b",
            &[("karpenter.sh/discovery", "demo"), ("tier", "private")][..],
        ),
        ("c", "10.0.3.0/24", "us-east-1c", &[("tier", "public")][..]),
    ] {
        let s = ec2
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(cidr)
            .availability_zone(zone)
            .tag_specifications(tagged(ResourceType::Subnet, tags))
            .send()
            .await
            .expect("subnet");
        subnets.insert(
            name,
            s.subnet()
                .and_then(|s| s.subnet_id())
                .expect("id")
                .to_string(),
        );
    }
    let mut groups = BTreeMap::new();
    for (name, tags) in [
        ("nodes", &[("karpenter.sh/discovery", "demo")][..]),
        ("other", &[("team", "b")][..]),
    ] {
        let g = ec2
            .create_security_group()
            .group_name(name)
            .description(name)
            .vpc_id(&vpc_id)
            .tag_specifications(tagged(ResourceType::SecurityGroup, tags))
            .send()
            .await
            .expect("security group");
        groups.insert(name, g.group_id().expect("id").to_string());
    }
    let iam = aws_sdk_iam::Client::new(&config);
    iam.create_role()
        .role_name("KarpenterNodeRole-demo")
        .assume_role_policy_document(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
        )
        .send()
        .await
        .expect("role");
    let clock = Arc::new(FakeClock::new(Utc::now()));
    let mut settings = AwsSettings {
        cluster_name: "demo".into(),
        cluster_endpoint: "https://demo.gr7.us-east-1.eks.amazonaws.com".into(),
        cluster_ca_bundle: Some("Q0EgYnVuZGxl".into()),
        kubernetes_version: "1.33".into(),
        service_cidr: Some("10.100.0.0/16".into()),
        isolated_vpc: false,
        reserved_enis: 0,
        vm_memory_overhead_percent: 0.075,
        interruption_queue: queue.map(str::to_string),
        region: "us-east-1".into(),
        reserved_capacity: true,
        // The dry-run authorization checks have tests of their own (tests/aws_moto.rs).
        disable_dry_run: true,
        resolution_period: std::time::Duration::from_secs(60),
    };
    adjust(&mut settings);
    let provider = AwsProvider::new(settings.clone(), &config, clock.clone()).expect("provider");
    // What `run` does before it starts the controllers.
    provider.refresh().await.expect("first refresh");
    Env {
        sqs: aws_sdk_sqs::Client::new(&config),
        ssm: aws_sdk_ssm::Client::new(&config),
        config,
        settings,
        ec2,
        iam,
        provider,
        clock,
        subnets,
        groups,
    }
}

/// [`env`] with the interruption queue `karpenter-demo` created; and the queue's URL.
async fn env_with_queue(moto: &Moto) -> (Env, String) {
    let queue = "karpenter-demo";
    let env = env(moto, Some(queue)).await;
    let url = create_queue(&env.config, queue).await;
    (env, url)
}

fn nodeclass(name: &str, extra: &str) -> EC2NodeClass {
    serde_yaml_ng::from_str(&format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: {name}, uid: uid-{name}}}\nspec:\n  role: KarpenterNodeRole-demo\n  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]\n  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]\n  tags: {{team: platform}}\n{extra}"
    ))
    .expect("nodeclass")
}

fn al2023() -> EC2NodeClass {
    nodeclass("default", "  amiSelectorTerms: [{alias: al2023@latest}]\n")
}

/// The images `al2023@latest` resolves to on Kubernetes 1.33 (tests/moto/public-parameters.json):
/// x86_64 and arm64 standard, x86_64 NVIDIA.
const AL2023_AMIS: [&str; 3] = [
    "ami-0a20230000000a001",
    "ami-0a20230000000a002",
    "ami-0a20230000000a003",
];

/// The IDs of the images a resolution selected.
fn ami_ids(status: &EC2NodeClassStatus) -> BTreeSet<&str> {
    status.amis.iter().map(|a| a.id.as_str()).collect()
}

/// A class whose image is a user's own SSM parameter, `/platform/node-ami`, which this puts
/// (pointing at `ami-0c0570000000c0001`).
async fn user_parameter_class(env: &Env) -> EC2NodeClass {
    env.ssm
        .put_parameter()
        .name("/platform/node-ami")
        .value("ami-0c0570000000c0001")
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .expect("parameter");
    nodeclass(
        "param",
        "  amiFamily: AL2023\n  amiSelectorTerms: [{ssmParameter: /platform/node-ami}]\n",
    )
}

/// Resolves the node class and marks it Ready, as the EC2NodeClass controller does.
async fn ready(env: &Env, mut class: EC2NodeClass) -> EC2NodeClass {
    let mut status = env.provider.resolve(&class).await.expect("resolve");
    status.conditions.push(Condition {
        type_: "Ready".into(),
        status: conditions::TRUE.into(),
        observed_generation: None,
        last_transition_time: Utc::now(),
        reason: "Ready".into(),
        message: String::new(),
    });
    class.status = Some(status);
    class
}

fn claim(name: &str, types: &[&str], capacity: &[&str]) -> NodeClaim {
    serde_yaml_ng::from_str(&format!(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: {name}, labels: {{karpenter.sh/nodepool: default, team: a}}}}\nspec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n  resources: {{requests: {{cpu: 500m}}}}\n  taints: [{{key: dedicated, value: web, effect: NoSchedule}}]\n  requirements:\n  - {{key: node.kubernetes.io/instance-type, operator: In, values: [{}]}}\n  - {{key: karpenter.sh/capacity-type, operator: In, values: [{}]}}\n",
        types.join(", "),
        capacity.join(", ")
    ))
    .expect("nodeclaim")
}

/// Launches NodeClaim `name` on `class` as an on-demand `instance_type`.
async fn launch_on_demand(env: &Env, class: &EC2NodeClass, name: &str, instance_type: &str) {
    env.provider
        .create(&claim(name, &[instance_type], &["on-demand"]), class)
        .await
        .expect("launch");
}

async fn instances_of(env: &Env, claim: &str) -> Vec<aws_sdk_ec2::types::Instance> {
    env.ec2
        .describe_instances()
        .filters(
            Filter::builder()
                .name("tag:karpenter.sh/nodeclaim")
                .values(claim)
                .build(),
        )
        .send()
        .await
        .expect("describe")
        .reservations()
        .iter()
        .flat_map(|r| r.instances().to_vec())
        .collect()
}

async fn user_data(env: &Env, instance_id: &str) -> String {
    let attr = env
        .ec2
        .describe_instance_attribute()
        .instance_id(instance_id)
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .expect("user data");
    let encoded = attr
        .user_data()
        .and_then(|v| v.value())
        .expect("user data value");
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .expect("base64"),
    )
    .expect("utf-8")
}

/// The market type of the launch template a reserved CreateFleet request used, which carries
/// no on-demand options (capacity blocks and interruptible reservations are not on-demand).
async fn reserved_market_type(
    env: &Env,
    fleet: &serde_json::Value,
) -> Option<aws_sdk_ec2::types::MarketType> {
    assert!(
        fleet["OnDemandOptions"]
            .as_object()
            .is_none_or(|o| o.is_empty()),
        "{fleet}"
    );
    launch_template_of(env, &fleet_template(fleet))
        .await
        .instance_market_options()
        .and_then(|m| m.market_type())
        .cloned()
}

/// The name of the launch template a CreateFleet request (as moto recorded it) used first.
fn fleet_template(fleet: &serde_json::Value) -> String {
    fleet["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
        .as_str()
        .expect("template name")
        .to_string()
}

/// The data of the launch template the first CreateFleet request used.
async fn first_launch_template(
    env: &Env,
    moto: &mut Moto,
) -> aws_sdk_ec2::types::ResponseLaunchTemplateData {
    launch_template_of(env, &fleet_template(&moto.fleets()[0])).await
}

async fn launch_template_of(
    env: &Env,
    name: &str,
) -> aws_sdk_ec2::types::ResponseLaunchTemplateData {
    env.ec2
        .describe_launch_template_versions()
        .launch_template_name(name)
        .send()
        .await
        .expect("template versions")
        .launch_template_versions()
        .first()
        .and_then(|v| v.launch_template_data())
        .cloned()
        .expect("template data")
}

fn tags_of(i: &aws_sdk_ec2::types::Instance) -> BTreeMap<String, String> {
    i.tags()
        .iter()
        .map(|t| {
            (
                t.key().unwrap_or_default().to_string(),
                t.value().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_selectors_and_the_al2023_alias_resolve() {
    let Some(moto) = Moto::start() else { return };
    let env = env(&moto, None).await;
    let status = env.provider.resolve(&al2023()).await.expect("resolve");
    let subnets: Vec<(&str, &str)> = status
        .subnets
        .iter()
        .map(|s| (s.id.as_str(), s.zone.as_str()))
        .collect();
    assert_eq!(
        subnets,
        [
            (env.subnets["a"].as_str(), "us-east-1a"),
            (env.subnets["b"].as_str(), "us-east-1b")
        ]
    );
    let groups: Vec<&str> = status
        .security_groups
        .iter()
        .map(|g| g.id.as_str())
        .collect();
    assert_eq!(groups, [env.groups["nodes"].as_str()]);
    // al2023@latest reads the EKS SSM parameters: one image per architecture and variant.
    assert_eq!(ami_ids(&status), BTreeSet::from(AL2023_AMIS));
    let nvidia = status
        .amis
        .iter()
        .find(|a| a.id == "ami-0a20230000000a003")
        .expect("nvidia image");
    assert!(
        nvidia
            .requirements
            .iter()
            .any(|r| r.key == "karpenter.k8s.aws/instance-gpu-manufacturer"
                && r.values == ["nvidia"])
    );
    // The managed instance profile exists and holds the role.
    let profile = status.instance_profile.clone().expect("instance profile");
    assert!(profile.starts_with("demo_"), "{profile}");
    let got = env
        .iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .expect("profile");
    let roles: Vec<&str> = got
        .instance_profile()
        .map(|p| p.roles().iter().map(|r| r.role_name()).collect())
        .unwrap_or_default();
    assert_eq!(roles, ["KarpenterNodeRole-demo"]);

    // `*` selects on the key alone, terms are alternatives, names select security groups, and
    // of two images with the same requirements the newer one wins.
    let other = nodeclass(
        "other",
        "  amiFamily: AL2023\n  amiSelectorTerms: [{tags: {team: a}}]\n",
    );
    let mut other = other;
    other.spec.subnet_selector_terms = serde_yaml_ng::from_str(&format!(
        "[{{tags: {{tier: '*'}}}}, {{id: {}}}]",
        env.subnets["a"]
    ))
    .expect("terms");
    other.spec.security_group_selector_terms =
        serde_yaml_ng::from_str("[{name: other}]").expect("terms");
    let status = env.provider.resolve(&other).await.expect("resolve");
    assert_eq!(status.subnets.len(), 3);
    let groups: Vec<&str> = status
        .security_groups
        .iter()
        .map(|g| g.id.as_str())
        .collect();
    assert_eq!(groups, [env.groups["other"].as_str()]);
    let amis: Vec<&str> = status.amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(amis, ["ami-0c0570000000c0002"]);
}

/// The lookups a resolution makes, counted by moto: SSM parameters, images, subnets, security
/// groups, instance profiles.
const LOOKUPS: [&str; 5] = [
    "GetParameter",
    "DescribeImages",
    "DescribeSubnets",
    "DescribeSecurityGroups",
    "GetInstanceProfile",
];

fn lookups(moto: &mut Moto) -> [u64; 5] {
    LOOKUPS.map(|a| moto.calls(a))
}

/// How many of each of [`LOOKUPS`] were made since `before`.
fn lookups_since(moto: &mut Moto, before: [u64; 5]) -> [u64; 5] {
    let now = lookups(moto);
    std::array::from_fn(|i| now[i] - before[i])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolutions_within_upstreams_cache_lifetimes_share_their_lookups() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let before = lookups(&mut moto);
    let first = env.provider.resolve(&al2023()).await.expect("resolve");
    // al2023@latest reads five SSM parameters and describes their images in one call; the
    // class has no profile yet, so one is made (not read) and given the role.
    assert_eq!(lookups_since(&mut moto, before), [5, 1, 1, 1, 0]);
    // From here on the class carries the status written, as the EC2NodeClass controller does.
    let mut class = al2023();
    class.status = Some(first.clone());
    // Of the five, the fixture publishes three (no arm64 NVIDIA, no Neuron image): a parameter
    // that does not exist is not remembered and is asked for again, as upstream.
    const MISSING: u64 = 2;

    // A resolution inside the minute makes no other call and finds the same.
    env.clock.advance(chrono::Duration::seconds(59));
    let before = lookups(&mut moto);
    let second = env.provider.resolve(&class).await.expect("resolve");
    assert_eq!(lookups_since(&mut moto, before), [MISSING, 0, 0, 0, 0]);
    assert_eq!(second, first);
    // Another class with the same selectors shares them; only its own profile is made.
    let other = nodeclass("other", "  amiSelectorTerms: [{alias: al2023@latest}]\n");
    env.provider.resolve(&other).await.expect("resolve");
    assert_eq!(lookups_since(&mut moto, before), [2 * MISSING, 0, 0, 0, 0]);

    // A minute on, images, subnets and security groups are read again; the SSM parameters
    // (a day) and the instance profile (fifteen minutes) are not.
    env.clock.advance(chrono::Duration::seconds(1));
    let before = lookups(&mut moto);
    env.provider.resolve(&class).await.expect("resolve");
    assert_eq!(lookups_since(&mut moto, before), [MISSING, 1, 1, 1, 0]);
    env.clock.advance(chrono::Duration::minutes(14));
    let before = lookups(&mut moto);
    env.provider.resolve(&class).await.expect("resolve");
    assert_eq!(lookups_since(&mut moto, before), [MISSING, 1, 1, 1, 1]);
    env.clock.advance(chrono::Duration::hours(24));
    let before = lookups(&mut moto);
    env.provider.resolve(&class).await.expect("resolve");
    assert_eq!(lookups_since(&mut moto, before), [5, 1, 1, 1, 1]);
    // The half-hourly check describes the images of the cached @latest parameters (one call);
    // none is deprecated here, so all stay.
    let before = lookups(&mut moto);
    let dropped = env.provider.invalidate_parameters_if_due().await;
    assert_eq!(dropped.map(|d| d.expect("check")), Some(Vec::new()));
    assert_eq!(lookups_since(&mut moto, before), [0, 1, 0, 0, 0]);
    assert!(
        env.provider.invalidate_parameters_if_due().await.is_none(),
        "not due again for half an hour"
    );

    // A user's own parameter is read again after five minutes.
    let by_parameter = user_parameter_class(&env).await;
    env.provider.resolve(&by_parameter).await.expect("resolve");
    env.clock.advance(chrono::Duration::minutes(4));
    let before = lookups(&mut moto);
    env.provider.resolve(&by_parameter).await.expect("resolve");
    assert_eq!(lookups_since(&mut moto, before)[0], 0);
    env.clock.advance(chrono::Duration::minutes(1));
    env.provider.resolve(&by_parameter).await.expect("resolve");
    assert_eq!(lookups_since(&mut moto, before)[0], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_makes_one_tagged_instance_and_a_retry_finds_it() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = ready(&env, al2023()).await;
    let c = claim("default-abc12", &["m5.large", "m5.xlarge"], &["on-demand"]);
    let launched = env.provider.create(&c, &class).await.expect("launch");
    assert_eq!(launched.instance_type, "m5.large");
    assert_eq!(launched.capacity_type, CapacityType::OnDemand);
    assert_eq!(launched.image_id.as_deref(), Some("ami-0a20230000000a001"));
    assert_eq!(launched.labels["karpenter.k8s.aws/ec2nodeclass"], "default");
    assert!(
        launched.provider_id.starts_with("aws:///us-east-1"),
        "{}",
        launched.provider_id
    );

    let found = instances_of(&env, "default-abc12").await;
    assert_eq!(found.len(), 1);
    let instance = &found[0];
    let tags = tags_of(instance);
    for (k, v) in [
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/nodeclaim", "default-abc12"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("eks:eks-cluster-name", "demo"),
        ("kubernetes.io/cluster/demo", "owned"),
        ("team", "platform"),
    ] {
        assert_eq!(
            tags.get(k).map(String::as_str),
            Some(v),
            "tag {k} in {tags:?}"
        );
    }
    assert!(
        [env.subnets["a"].as_str(), env.subnets["b"].as_str()]
            .contains(&instance.subnet_id().unwrap_or_default())
    );

    // User data: the AL2023 NodeConfig with the cluster, labels and boot taints.
    let text = user_data(&env, instance.instance_id().expect("id")).await;
    let parts = parse_mime(&text).expect("MIME").expect("parts");
    let config: serde_json::Value =
        serde_yaml_ng::from_str(&parts.last().expect("part").body).expect("NodeConfig");
    assert_eq!(
        parts.last().map(|p| p.content_type.as_str()),
        Some("application/node.eks.aws")
    );
    assert_eq!(config["spec"]["cluster"]["name"], "demo");
    assert_eq!(
        config["spec"]["cluster"]["certificateAuthority"],
        "Q0EgYnVuZGxl"
    );
    assert_eq!(config["spec"]["cluster"]["cidr"], "10.100.0.0/16");
    assert_eq!(config["spec"]["kubelet"]["config"]["maxPods"], 29);
    let taints: Vec<&str> = config["spec"]["kubelet"]["config"]["registerWithTaints"]
        .as_array()
        .expect("taints")
        .iter()
        .filter_map(|t| t["key"].as_str())
        .collect();
    assert_eq!(taints, ["dedicated", "karpenter.sh/unregistered"]);
    let flags = config["spec"]["kubelet"]["flags"][0]
        .as_str()
        .expect("flags");
    assert!(
        flags.contains("karpenter.sh/nodepool=default") && flags.contains("team=a"),
        "{flags}"
    );

    // Block devices and metadata options, as stored on the launch template the fleet used.
    let fleets = moto.fleets();
    assert_eq!(fleets.len(), 1);
    let fleet = &fleets[0];
    assert_eq!(fleet["Type"], "instant");
    assert_eq!(
        fleet["TargetCapacitySpecification"]["DefaultTargetCapacityType"],
        "on-demand"
    );
    assert_eq!(
        fleet["OnDemandOptions"]["AllocationStrategy"],
        "lowest-price"
    );
    // One template per max-pods value (m5.large 29, m5.xlarge 58): the user data states it.
    let configs = fleet["LaunchTemplateConfigs"].as_array().expect("configs");
    assert_eq!(configs.len(), 2, "{configs:?}");
    let overrides: Vec<(&str, &str)> = configs
        .iter()
        .flat_map(|c| c["Overrides"].as_array().expect("overrides"))
        .map(|o| {
            (
                o["InstanceType"].as_str().unwrap_or_default(),
                o["AvailabilityZone"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(overrides.len(), 4, "2 types x 2 zones: {overrides:?}");
    assert_eq!(configs[0]["Overrides"][0]["InstanceType"], "m5.large");
    let template = fleet_template(fleet);
    assert!(template.starts_with("karpenter.k8s.aws/"));
    let data = launch_template_of(&env, &template).await;
    let bdm = &data.block_device_mappings()[0];
    assert_eq!(bdm.device_name(), Some("/dev/xvda"));
    let ebs = bdm.ebs().expect("ebs");
    assert_eq!((ebs.volume_size(), ebs.encrypted()), (Some(20), Some(true)));
    assert_eq!(ebs.volume_type().map(|t| t.as_str()), Some("gp3"));
    let md = data.metadata_options().expect("metadata options");
    assert_eq!(md.http_tokens().map(|t| t.as_str()), Some("required"));
    assert_eq!(md.http_put_response_hop_limit(), Some(1));
    assert_eq!(data.security_group_ids(), [env.groups["nodes"].as_str()]);

    // A retried launch of the same NodeClaim finds the instance instead of making another.
    let again = env.provider.create(&c, &class).await.expect("relaunch");
    assert_eq!(again.provider_id, launched.provider_id);
    assert_eq!(instances_of(&env, "default-abc12").await.len(), 1);
    assert_eq!(moto.fleets().len(), 1, "no second CreateFleet");
    let listed = env.provider.list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].nodeclaim.as_deref(), Some("default-abc12"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bottlerocket_nodes_get_merged_toml_user_data_and_a_data_volume() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = nodeclass(
        "default",
        "  amiSelectorTerms: [{alias: bottlerocket@latest}]\n  userData: |\n    [settings.host-containers.admin]\n    enabled = true\n",
    );
    let class = ready(&env, class).await;
    let c = claim("default-br001", &["m5.large"], &["on-demand"]);
    let launched = env.provider.create(&c, &class).await.expect("launch");
    assert_eq!(launched.image_id.as_deref(), Some("ami-0b07710000000b001"));
    let instance = &instances_of(&env, "default-br001").await[0];
    let text = user_data(&env, instance.instance_id().expect("id")).await;
    let doc: toml::Table = text.parse().expect("TOML user data");
    let k8s = &doc["settings"]["kubernetes"];
    assert_eq!(k8s["cluster-name"].as_str(), Some("demo"));
    assert_eq!(
        k8s["api-server"].as_str(),
        Some("https://demo.gr7.us-east-1.eks.amazonaws.com")
    );
    assert_eq!(
        k8s["node-taints"]["karpenter.sh/unregistered"][0].as_str(),
        Some(":NoExecute")
    );
    assert_eq!(k8s["node-labels"]["team"].as_str(), Some("a"));
    assert_eq!(
        doc["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
        Some(true)
    );
    // Bottlerocket's default volumes: a small OS volume and the 20Gi data volume that holds
    // images and pod storage.
    let data = first_launch_template(&env, &mut moto).await;
    // Device, size in GiB, encrypted, volume type.
    let volumes: Vec<String> = data
        .block_device_mappings()
        .iter()
        .map(|b| {
            let ebs = b.ebs();
            format!(
                "{} {:?} {:?} {:?}",
                b.device_name().unwrap_or_default(),
                ebs.and_then(|e| e.volume_size()),
                ebs.and_then(|e| e.encrypted()),
                ebs.and_then(|e| e.volume_type()).map(|t| t.as_str()),
            )
        })
        .collect();
    assert_eq!(
        volumes,
        [
            "/dev/xvda Some(4) Some(true) Some(\"gp3\")",
            "/dev/xvdb Some(20) Some(true) Some(\"gp3\")",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insufficient_capacity_falls_back_and_skips_the_pool_for_three_minutes() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = ready(&env, al2023()).await;
    let first_claim = claim(
        "default-ice01",
        &["m5.large", "m5.xlarge", "c5.large"],
        &["spot"],
    );
    let types = env.provider.instance_types(&class).await.expect("types");
    let reqs = claim_requirements(&first_claim);
    let candidates = launch_candidates(types.iter(), &reqs, &claim_requests(&first_claim));
    let (it, o) = candidates.first().expect("a candidate");
    let pool = (it.name.to_string(), o.zone.to_string());
    moto.set_ice(&[(&pool.0, &pool.1, "spot")]);

    let launched = env
        .provider
        .create(&first_claim, &class)
        .await
        .expect("fallback launch");
    assert_eq!(launched.capacity_type, CapacityType::Spot);
    assert_ne!(
        (launched.instance_type.clone(), launched.zone.clone()),
        pool
    );
    let fleets = moto.fleets();
    assert_eq!(
        fleets[0]["SpotOptions"]["AllocationStrategy"],
        "price-capacity-optimized"
    );

    let available = |types: &[karpenter_rs::scheduling::instance_type::InstanceType]| {
        types
            .iter()
            .find(|t| *t.name == pool.0)
            .and_then(|t| {
                t.offerings
                    .iter()
                    .find(|o| *o.zone == pool.1 && o.capacity_type == CapacityType::Spot)
            })
            .map(|o| o.available)
    };
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(available(&types), Some(false));

    // The next launch does not ask for the exhausted pool at all.
    let second = claim(
        "default-ice02",
        &["m5.large", "m5.xlarge", "c5.large"],
        &["spot"],
    );
    env.provider
        .create(&second, &class)
        .await
        .expect("second launch");
    let asked: Vec<(String, String)> = moto.fleets()[1]["LaunchTemplateConfigs"]
        .as_array()
        .expect("configs")
        .iter()
        .flat_map(|c| c["Overrides"].as_array().cloned().unwrap_or_default())
        .map(|o| {
            (
                o["InstanceType"].as_str().unwrap_or_default().to_string(),
                o["AvailabilityZone"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert!(!asked.is_empty());
    assert!(
        !asked.contains(&pool),
        "{pool:?} was asked for again: {asked:?}"
    );

    env.clock
        .advance(chrono::Duration::minutes(3) + chrono::Duration::seconds(1));
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(available(&types), Some(true));

    // Every pool out of capacity: the launch fails as insufficient capacity and makes nothing.
    let only = claim("default-ice03", &["m5.large"], &["spot"]);
    moto.set_ice(&[
        ("m5.large", "us-east-1a", "spot"),
        ("m5.large", "us-east-1b", "spot"),
    ]);
    let err = env
        .provider
        .create(&only, &class)
        .await
        .expect_err("no capacity");
    assert!(matches!(err, CloudError::InsufficientCapacity(_)), "{err}");
    assert!(
        err.to_string().contains("InsufficientInstanceCapacity"),
        "{err}"
    );
    assert!(instances_of(&env, "default-ice03").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_terminates_and_get_reports_it() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    // A class name of its own: the user-data gauge is per EC2NodeClass, and other tests launch
    // from `default` at the same time.
    let mut class = al2023();
    class.metadata.name = Some("metrics-del".into());
    class.metadata.uid = Some("uid-metrics-del".into());
    let class = ready(&env, class).await;
    let c = claim("default-del01", &["m5.large"], &["on-demand"]);
    let launched = env.provider.create(&c, &class).await.expect("launch");
    let seen = env.provider.get(&launched.provider_id).await.expect("get");
    assert_eq!(seen.nodeclaim.as_deref(), Some("default-del01"));
    assert!(!seen.state.is_terminating());
    let instance_id = launched
        .provider_id
        .rsplit('/')
        .next()
        .expect("instance ID")
        .to_string();
    assert_eq!(
        METRICS
            .ec2nodeclasses_userdata_bytes
            .with_label_values(&["metrics-del"])
            .get(),
        user_data(&env, &instance_id).await.len() as f64,
        "the gauge holds the size of the user data the instance got"
    );

    // A refused TerminateInstances is counted by the instance's zone and zone ID.
    let zone_id = env
        .ec2
        .describe_availability_zones()
        .zone_names(&seen.zone)
        .send()
        .await
        .expect("zones")
        .availability_zones()[0]
        .zone_id()
        .expect("zone ID")
        .to_string();
    let failures = || {
        METRICS
            .cloudprovider_instance_termination_failures_total
            .with_label_values(&[&seen.zone, &zone_id])
            .get()
    };
    let before = failures();
    moto.fail("TerminateInstances", 1, "UnauthorizedOperation");
    assert!(env.provider.delete(&launched.provider_id).await.is_err());
    assert_eq!(failures() - before, 1.0);
    env.provider
        .delete(&launched.provider_id)
        .await
        .expect("delete");
    // moto terminates at once (EC2 passes through shutting-down first); either way get keeps
    // reporting the instance so the controller can wait for it.
    let seen = env.provider.get(&launched.provider_id).await.expect("get");
    assert_eq!(seen.state, InstanceState::Terminated);
    assert!(matches!(
        env.provider.delete(&launched.provider_id).await,
        Err(CloudError::NotFound(_))
    ));
    let listed = env.provider.list().await.expect("list");
    assert!(
        listed.iter().all(|i| i.provider_id != launched.provider_id),
        "garbage collection does not see terminated instances: {listed:?}"
    );
    assert!(matches!(
        env.provider
            .get("aws:///us-east-1a/i-0123456789abcdef0")
            .await,
        Err(CloudError::NotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_interruption_marks_the_pool_and_asks_to_delete_the_nodeclaim() {
    let Some(moto) = Moto::start() else { return };
    let (env, url) = env_with_queue(&moto).await;
    let class = ready(&env, al2023()).await;
    let c = claim("default-spot1", &["m5.large"], &["spot"]);
    let launched = env.provider.create(&c, &class).await.expect("launch");
    assert_eq!(launched.capacity_type, CapacityType::Spot);
    let instance_id = launched
        .provider_id
        .rsplit('/')
        .next()
        .expect("id")
        .to_string();
    let body = serde_json::json!({
        "version": "0", "id": "7", "source": "aws.ec2", "account": "123456789012",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "time": "2025-06-01T00:00:00Z", "region": "us-east-1",
        "resources": [format!("arn:aws:ec2:{}:instance/{instance_id}", launched.zone)],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"}
    });
    let messages = deliver(&env, &url, &body).await;
    let event = messages[0].event.clone().expect("event");
    assert_eq!(event.kind, InterruptionKind::SpotInterrupted);
    assert_eq!(event.action, InterruptionAction::DeleteNodeClaim);
    assert_eq!(event.instance_ids, [instance_id]);
    env.provider
        .record_interruption(&event)
        .await
        .expect("record");
    assert!(env.provider.unavailable_offerings().is_unavailable(
        &launched.instance_type,
        &launched.zone,
        CapacityType::Spot
    ));
    let types = env.provider.instance_types(&class).await.expect("types");
    let offering = types
        .iter()
        .find(|t| *t.name == launched.instance_type)
        .and_then(|t| {
            t.offerings
                .iter()
                .find(|o| *o.zone == launched.zone && o.capacity_type == CapacityType::Spot)
        })
        .expect("offering");
    assert!(!offering.available);
    env.provider
        .acknowledge_interruption(&messages[0])
        .await
        .expect("delete");
    let left = env
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("attributes");
    assert_eq!(
        left.attributes()
            .and_then(
                |a| a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            )
            .map(String::as_str),
        Some("0")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_amis_and_malformed_user_data_are_explained() {
    let Some(moto) = Moto::start() else { return };
    let env = env(&moto, None).await;
    let unknown = nodeclass(
        "unknown",
        "  amiFamily: AL2023\n  amiSelectorTerms: [{id: ami-0000000000doesnotexist}]\n",
    );
    let err = env
        .provider
        .resolve(&unknown)
        .await
        .expect_err("unknown AMI");
    assert_eq!(
        (err.condition, err.reason),
        (NodeClassCondition::AMIsReady, "AMINotFound")
    );
    assert!(
        matches!(err.error, CloudError::NodeClassNotReady(_)),
        "{err}"
    );
    assert!(
        err.to_string().contains("spec.amiSelectorTerms")
            && err.to_string().contains("ami-0000000000doesnotexist"),
        "{err}"
    );
    // Malformed user data fails the node class' resolution, before any NodeClaim tries it.
    let broken = nodeclass(
        "default",
        "  amiSelectorTerms: [{alias: bottlerocket@latest}]\n  userData: '[settings'\n",
    );
    let err = env
        .provider
        .resolve(&broken)
        .await
        .expect_err("bad user data");
    assert_eq!(
        (err.condition, err.reason),
        (NodeClassCondition::ValidationSucceeded, "InvalidUserData")
    );
    assert!(err.to_string().contains("spec.userData"), "{err}");
    // A launch on a status resolved before the user data broke refuses as well.
    let mut stale = ready(
        &env,
        nodeclass(
            "default",
            "  amiSelectorTerms: [{alias: bottlerocket@latest}]\n",
        ),
    )
    .await;
    stale.spec.user_data = broken.spec.user_data.clone();
    let err = env
        .provider
        .create(
            &claim("default-bad01", &["m5.large"], &["on-demand"]),
            &stale,
        )
        .await
        .expect_err("bad user data");
    assert!(matches!(err, CloudError::Invalid(_)), "{err}");
    assert!(err.to_string().contains("spec.userData"), "{err}");
    assert!(instances_of(&env, "default-bad01").await.is_empty());
    // An AL2023 node class on a controller that could not learn the service CIDR says so.
    let blind = AwsProvider::new(
        AwsSettings {
            service_cidr: None,
            ..env.settings.clone()
        },
        &env.config,
        env.clock.clone(),
    )
    .expect("provider");
    let err = blind.resolve(&al2023()).await.expect_err("no service CIDR");
    assert_eq!(
        (err.condition, err.reason),
        (
            NodeClassCondition::ValidationSucceeded,
            "ClusterNotDiscovered"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_reads_prices_from_the_pricing_api_and_spot_history() {
    let Some(moto) = Moto::start() else { return };
    let env = env(&moto, None).await;
    let report = env.provider.refresh().await.expect("refresh");
    assert!(report.instance_types > 100, "{report:?}");
    assert_eq!(report.pricing_error, None);
    // Six priced entries in the fixture (t3.nano's zero price is no price), over both pages and
    // both tenancy queries.
    assert_eq!(report.pricing_api_prices, 6, "{report:?}");
    assert!(report.spot_prices > 0, "{report:?}");
    let class = ready(&env, al2023()).await;
    let types = env.provider.instance_types(&class).await.expect("types");
    let m5 = types
        .iter()
        .find(|t| &*t.name == "m5.large")
        .expect("m5.large");
    let od = m5
        .cheapest_offering(|o| o.capacity_type == CapacityType::OnDemand)
        .expect("on-demand");
    assert_eq!(od.price, 0.096);
    let zones: BTreeSet<&str> = m5.offerings.iter().map(|o| &*o.zone).collect();
    assert_eq!(
        zones,
        BTreeSet::from(["us-east-1a", "us-east-1b"]),
        "only the subnets' zones"
    );
    assert_eq!(m5.labels["karpenter.k8s.aws/instance-family"], "m5");
    assert_eq!(m5.capacity.pods, 29);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_cluster_supplies_the_endpoint_ca_and_service_cidr_for_al2023() {
    use aws_sdk_eks::types::{KubernetesNetworkConfigRequest, VpcConfigRequest};
    let Some(moto) = Moto::start() else { return };
    let config = sdk_config(&moto).await;
    let eks = aws_sdk_eks::Client::new(&config);
    // No such cluster and nothing set: the controller cannot start, and says why in one line.
    let err = cluster::discover(&eks, "demo", Some(""), Some(""), None)
        .await
        .expect_err("nothing to go on");
    assert!(!err.contains('\n'), "{err}");
    assert!(
        err.contains("CLUSTER_ENDPOINT") && err.contains("eks:DescribeCluster"),
        "{err}"
    );
    // Both set: DescribeCluster's failure only costs the service CIDR, with a warning.
    let partial = cluster::discover(&eks, "demo", Some("https://x.example"), Some("Q0E="), None)
        .await
        .expect("settings suffice");
    assert_eq!(partial.info.service_cidr, None);
    assert!(partial.warning.is_some());
    // CLUSTER_ENDPOINT and the CA the controller's own client trusts are enough too (no
    // CLUSTER_CA_BUNDLE; the cluster is not found).
    let client_ca = cluster::pem_bundle(&[vec![0x30, 0x03, 0x02, 0x01, 0x01]]).expect("a CA");
    let from_client = cluster::discover(
        &eks,
        "demo",
        Some("https://x.example"),
        Some(""),
        Some(&client_ca),
    )
    .await
    .expect("the client's CA suffices");
    assert_eq!(from_client.info.ca_bundle, client_ca);

    eks.create_cluster()
        .name("demo")
        .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
        .resources_vpc_config(VpcConfigRequest::builder().subnet_ids("subnet-1").build())
        .kubernetes_network_config(
            KubernetesNetworkConfigRequest::builder()
                .service_ipv4_cidr("10.100.0.0/16")
                .build(),
        )
        .send()
        .await
        .expect("cluster");
    let described = eks
        .describe_cluster()
        .name("demo")
        .send()
        .await
        .expect("describe");
    let want = described.cluster().expect("cluster");
    let found = cluster::discover(&eks, "demo", Some(""), None, None)
        .await
        .expect("discovered");
    assert_eq!(found.warning, None);
    assert_eq!(
        found.info.endpoint,
        want.endpoint().expect("endpoint").trim_end_matches('/')
    );
    assert_eq!(
        Some(found.info.ca_bundle.as_str()),
        want.certificate_authority().and_then(|c| c.data())
    );
    assert_eq!(found.info.service_cidr.as_deref(), Some("10.100.0.0/16"));
    // A setting wins over what EKS reports.
    let proxied = cluster::discover(&eks, "demo", Some("https://proxy.example"), None, None)
        .await
        .expect("discovered");
    assert_eq!(proxied.info.endpoint, "https://proxy.example");

    // The discovered facts reach an AL2023 node's NodeConfig.
    let info = found.info.clone();
    let env = env_with(&moto, None, |s| {
        s.cluster_endpoint = info.endpoint.clone();
        s.cluster_ca_bundle = Some(info.ca_bundle.clone());
        s.service_cidr = info.service_cidr.clone();
    })
    .await;
    let class = ready(&env, al2023()).await;
    launch_on_demand(&env, &class, "default-eks01", "m5.large").await;
    let instance = &instances_of(&env, "default-eks01").await[0];
    let text = user_data(&env, instance.instance_id().expect("id")).await;
    let parts = parse_mime(&text).expect("MIME").expect("parts");
    let node_config: serde_json::Value =
        serde_yaml_ng::from_str(&parts.last().expect("part").body).expect("NodeConfig");
    let c = &node_config["spec"]["cluster"];
    assert_eq!(c["apiServerEndpoint"], info.endpoint.as_str());
    assert_eq!(c["certificateAuthority"], info.ca_bundle.as_str());
    assert_eq!(c["cidr"], "10.100.0.0/16");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_eks_control_plane_describe_clusters_version_picks_the_alias_amis() {
    use aws_sdk_eks::types::VpcConfigRequest;
    use karpenter_rs::cloudprovider::aws::version::{self, Refreshed, Source};
    let Some(moto) = Moto::start() else { return };
    // The provider starts on a version no alias AMI is published for in the fixture.
    let env = env_with(&moto, None, |s| s.kubernetes_version = "1.31".into()).await;
    let err = env
        .provider
        .resolve(&al2023())
        .await
        .expect_err("no 1.31 alias parameters");
    assert_eq!(err.reason, "AMINotFound");
    let eks = aws_sdk_eks::Client::new(&env.config);
    eks.create_cluster()
        .name("demo")
        .version("1.33")
        .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
        .resources_vpc_config(VpcConfigRequest::builder().subnet_ids("subnet-1").build())
        .send()
        .await
        .expect("cluster");
    // EKS_CONTROL_PLANE=true without KUBERNETES_VERSION: the API server is never asked (this
    // client points nowhere), DescribeCluster is.
    let nowhere = kube::Client::try_from(kube::Config::new(
        "http://127.0.0.1:9".parse().expect("url"),
    ))
    .expect("client");
    let origin = version::origin("", true).expect("origin");
    let source = Source::new(origin.clone(), &eks, "demo", &nowhere);
    assert_eq!(source.read().await.as_deref(), Ok("1.33"));
    assert_eq!(
        version::refresh(&env.provider, &source).await,
        Ok(Refreshed::Changed {
            from: "1.31".into(),
            to: "1.33".into(),
            unsupported: None
        })
    );
    assert_eq!(env.provider.kubernetes_version(), "1.33");
    // The next resolution, without a restart, reads the 1.33 alias parameters.
    let status = env.provider.resolve(&al2023()).await.expect("resolve");
    assert_eq!(ami_ids(&status), BTreeSet::from(AL2023_AMIS));
    assert_eq!(
        version::refresh(&env.provider, &source).await,
        Ok(Refreshed::Unchanged)
    );
    // A failed read (no such cluster) keeps the version.
    let gone = Source::new(origin, &eks, "gone", &nowhere);
    let err = version::refresh(&env.provider, &gone)
        .await
        .expect_err("no cluster");
    assert!(
        err.contains("eks:DescribeCluster") && err.contains("\"gone\""),
        "{err}"
    );
    assert_eq!(env.provider.kubernetes_version(), "1.33");
    // KUBERNETES_VERSION wins over DescribeCluster; a version outside 1.26..1.36 is used and
    // reported.
    let setting = Source::new(
        version::origin("1.25", true).expect("origin"),
        &eks,
        "demo",
        &nowhere,
    );
    match version::refresh(&env.provider, &setting).await {
        Ok(Refreshed::Changed {
            to,
            unsupported: Some(why),
            ..
        }) => assert!(to == "1.25" && why.contains("1.26 to 1.36"), "{to}: {why}"),
        other => panic!("{other:?}"),
    }
}

/// Instances of the cluster that are not terminated (or terminating).
async fn live_instances(env: &Env) -> Vec<karpenter_rs::cloudprovider::Instance> {
    env.provider.list().await.expect("list")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_cannot_be_tagged_is_taken_back_and_never_doubled() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = ready(&env, al2023()).await;

    // Two failed attempts: the third tags the instance, and the launch succeeds.
    moto.fail("CreateTags", 2, "UnauthorizedOperation");
    let first = claim("default-tag01", &["m5.large"], &["on-demand"]);
    let launched = env.provider.create(&first, &class).await.expect("launch");
    assert_eq!(moto.calls("CreateTags"), 3);
    assert_eq!(instances_of(&env, "default-tag01").await.len(), 1);

    // Tagging keeps failing: the instance is terminated and the launch fails; the retry
    // launches exactly one.
    moto.fail("CreateTags", 3, "UnauthorizedOperation");
    let second = claim("default-tag02", &["m5.large"], &["on-demand"]);
    let err = env
        .provider
        .create(&second, &class)
        .await
        .expect_err("untaggable");
    assert!(matches!(err, CloudError::Transient(_)), "{err}");
    assert!(err.to_string().contains("terminated it"), "{err}");
    let live = live_instances(&env).await;
    assert_eq!(
        live.len(),
        1,
        "only the first claim's instance lives: {live:?}"
    );
    env.provider.create(&second, &class).await.expect("retry");
    assert_eq!(instances_of(&env, "default-tag02").await.len(), 1);
    assert_eq!(live_instances(&env).await.len(), 2);
    assert_eq!(moto.fleets().len(), 3);

    // Neither tagging nor terminating works: the instance is remembered, every attempt tries
    // again and launches nothing, and once tagging works the instance is adopted.
    moto.fail("CreateTags", 6, "UnauthorizedOperation");
    moto.fail("TerminateInstances", 2, "UnauthorizedOperation");
    let third = claim("default-tag03", &["m5.large"], &["on-demand"]);
    let err = env
        .provider
        .create(&third, &class)
        .await
        .expect_err("untaggable");
    assert!(err.to_string().contains("nor terminate"), "{err}");
    let live = live_instances(&env).await;
    let orphan = live
        .iter()
        .find(|i| i.nodeclaim.is_none())
        .expect("the untagged instance is listed for garbage collection")
        .clone();
    assert_eq!(orphan.nodepool.as_deref(), Some("default"));
    let err = env
        .provider
        .create(&third, &class)
        .await
        .expect_err("still untaggable");
    assert!(err.to_string().contains("not launching another"), "{err}");
    assert_eq!(
        moto.fleets().len(),
        4,
        "no launch while the first is unsettled"
    );
    let adopted = env.provider.create(&third, &class).await.expect("adopted");
    assert_eq!(adopted.provider_id, orphan.provider_id);
    assert_eq!(moto.fleets().len(), 4);
    assert_eq!(live_instances(&env).await.len(), 3);
    assert_ne!(adopted.provider_id, launched.provider_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_template_deleted_behind_the_cache_is_made_again_once() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = ready(&env, al2023()).await;
    launch_on_demand(&env, &class, "default-lt001", "m5.large").await;
    let template = fleet_template(&moto.fleets()[0]);
    env.ec2
        .delete_launch_template()
        .launch_template_name(&template)
        .send()
        .await
        .expect("delete template");
    env.provider
        .create(
            &claim("default-lt002", &["m5.large"], &["on-demand"]),
            &class,
        )
        .await
        .expect("launch after the template vanished");
    let fleets = moto.fleets();
    assert_eq!(fleets.len(), 3, "launch, failed launch, retried launch");
    let found = env
        .ec2
        .describe_launch_templates()
        .launch_template_names(&template)
        .send()
        .await
        .expect("templates");
    assert_eq!(
        found.launch_templates().len(),
        1,
        "the template exists again"
    );
    assert_eq!(instances_of(&env, "default-lt002").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launches_never_refresh_and_the_background_refresh_runs_when_due() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    // A provider that has not loaded instance types says so instead of loading them inline.
    let cold =
        AwsProvider::new(env.settings.clone(), &env.config, env.clock.clone()).expect("provider");
    assert!(cold.refresh_due());
    assert!(matches!(
        cold.instance_types(&al2023()).await,
        Err(CloudError::Transient(_))
    ));

    let class = ready(&env, al2023()).await;
    let described = moto.calls("DescribeInstanceTypes");
    assert!(described > 0);
    assert!(!env.provider.refresh_due());
    assert!(
        env.provider
            .refresh_if_due()
            .await
            .expect("refresh")
            .is_none()
    );
    env.clock
        .advance(chrono::Duration::hours(12) + chrono::Duration::seconds(1));
    assert!(env.provider.refresh_due());
    // Twelve hours on, a launch and a scheduling read still use what was loaded.
    launch_on_demand(&env, &class, "default-ref01", "m5.large").await;
    env.provider.instance_types(&class).await.expect("types");
    assert_eq!(moto.calls("DescribeInstanceTypes"), described);
    // The background schedule's step refreshes, once.
    let report = env
        .provider
        .refresh_if_due()
        .await
        .expect("refresh")
        .expect("due");
    assert!(report.instance_types > 100, "{report:?}");
    assert!(moto.calls("DescribeInstanceTypes") > described);
    assert!(!env.provider.refresh_due());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_launches_that_arrive_together_share_one_create_fleet() {
    use karpenter_rs::cloudprovider::aws::fleet::{
        BATCHER_NAME, FleetBatcher, FleetRequest, Override, ReservationKind, TemplateConfig,
    };
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = ready(&env, al2023()).await;
    // A launch through the provider makes the launch template the batch uses.
    launch_on_demand(&env, &class, "default-bat00", "m5.large").await;
    let template = fleet_template(&moto.fleets()[0]);
    let request = |instance_type: &str| FleetRequest {
        capacity_type: CapacityType::OnDemand,
        reservation: ReservationKind::OnDemand,
        configs: vec![TemplateConfig {
            launch_template: template.clone(),
            overrides: vec![Override {
                instance_type: instance_type.into(),
                zone: "us-east-1a".into(),
                subnet_id: env.subnets["a"].clone(),
                rank: 0,
            }],
        }],
        tags: BTreeMap::from([
            (
                "kubernetes.io/cluster/demo".to_string(),
                "owned".to_string(),
            ),
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
        ]),
        context: None,
    };
    let batcher = FleetBatcher::new(env.ec2.clone());
    let sizes = METRICS
        .cloudprovider_batcher_batch_size
        .with_label_values(&[BATCHER_NAME]);
    let windows = METRICS
        .cloudprovider_batcher_batch_time_seconds
        .with_label_values(&[BATCHER_NAME]);
    let (batches, launches, windows_before) = (
        sizes.get_sample_count(),
        sizes.get_sample_sum(),
        windows.get_sample_count(),
    );
    let same = futures::future::join_all((0..5).map(|_| batcher.launch(request("m5.large"))));
    let other = batcher.launch(request("c5.large"));
    let (same, other) = futures::join!(same, other);
    // Two batches (five launches and one) at least; other tests' launches may add theirs.
    assert!(sizes.get_sample_count() - batches >= 2);
    assert!(sizes.get_sample_sum() - launches >= 6.0);
    assert!(windows.get_sample_count() - windows_before >= 2);
    let fleets = moto.fleets();
    assert_eq!(fleets.len(), 3, "one call per distinct request");
    let mut capacities: Vec<i64> = fleets[1..]
        .iter()
        .map(|f| {
            f["TargetCapacitySpecification"]["TotalTargetCapacity"]
                .as_i64()
                .expect("capacity")
        })
        .collect();
    capacities.sort_unstable();
    assert_eq!(capacities, [1, 5]);
    let ids: BTreeSet<String> = same
        .into_iter()
        .map(|r| {
            r.expect("launch")
                .0
                .expect("an instance for every caller")
                .id
        })
        .collect();
    assert_eq!(ids.len(), 5, "each caller its own instance: {ids:?}");
    let other = other.expect("launch").0.expect("instance");
    assert_eq!(other.instance_type, "c5.large");
    assert!(!ids.contains(&other.id));

    // Through the provider, concurrent launches (batched or not, as they happen to arrive)
    // give every NodeClaim exactly one instance of its own.
    let claims: Vec<NodeClaim> = (1..=4)
        .map(|i| claim(&format!("default-bat0{i}"), &["m5.large"], &["on-demand"]))
        .collect();
    let launched =
        futures::future::join_all(claims.iter().map(|c| env.provider.create(c, &class))).await;
    let ids: BTreeSet<String> = launched
        .into_iter()
        .map(|r| r.expect("launch").provider_id)
        .collect();
    assert_eq!(ids.len(), 4);
    for c in &claims {
        let name = c.metadata.name.as_deref().expect("name");
        assert_eq!(instances_of(&env, name).await.len(), 1, "{name}");
    }
}

fn flexible_claim(name: &str, capacity: &[&str]) -> NodeClaim {
    serde_yaml_ng::from_str(&format!(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: {name}, labels: {{karpenter.sh/nodepool: default}}}}\nspec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n  resources: {{requests: {{cpu: 500m}}}}\n  requirements:\n  - {{key: karpenter.sh/capacity-type, operator: In, values: [{}]}}\n",
        capacity.join(", ")
    ))
    .expect("nodeclaim")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flexible_launch_asks_for_at_most_60_pools_in_karpenters_order() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = ready(&env, al2023()).await;
    let c = flexible_claim("default-flex1", &["on-demand"]);
    let types = env.provider.instance_types(&class).await.expect("types");
    let candidates = launch_candidates(types.iter(), &claim_requirements(&c), &claim_requests(&c));
    assert_eq!(candidates.len(), 60, "more than 60 pools fit");
    let amis = &class.status.as_ref().expect("status").amis;
    let expected: Vec<(String, String)> = candidates
        .iter()
        .filter(|(it, _)| {
            let labels = it
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            karpenter_rs::cloudprovider::aws::amis::ami_for(amis, &labels).is_some()
        })
        .map(|(it, o)| (it.name.to_string(), o.zone.to_string()))
        .collect();
    env.provider.create(&c, &class).await.expect("launch");
    let fleet = &moto.fleets()[0];
    let mut asked: Vec<(f64, String, String)> = fleet["LaunchTemplateConfigs"]
        .as_array()
        .expect("configs")
        .iter()
        .flat_map(|c| c["Overrides"].as_array().cloned().unwrap_or_default())
        .map(|o| {
            (
                o["Priority"].as_f64().expect("priority"),
                o["InstanceType"].as_str().unwrap_or_default().to_string(),
                o["AvailabilityZone"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert!(asked.len() <= 60, "{} overrides", asked.len());
    asked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let asked: Vec<(String, String)> = asked.into_iter().map(|(_, t, z)| (t, z)).collect();
    assert_eq!(
        asked, expected,
        "the pools, by priority, are Karpenter's first 60"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_judged_on_the_ami_subnet_and_security_groups_ec2_reports() {
    let Some(moto) = Moto::start() else { return };
    let env = env(&moto, None).await;
    let class = ready(&env, al2023()).await;
    let c = claim("default-dft01", &["m5.large"], &["on-demand"]);
    let launched = env.provider.create(&c, &class).await.expect("launch");
    // What the NodeClaim controller does every few minutes: ask EC2 what the instance runs
    // with, and judge it against the class as the engine does.
    let judged = |class: EC2NodeClass| {
        let provider = &env.provider;
        let provider_id = launched.provider_id.clone();
        async move {
            let instance = provider.get(&provider_id).await.expect("instance");
            let observed = drift::Observed {
                image_id: instance.image_id.as_deref(),
                subnet_id: instance.subnet_id.as_deref(),
                security_groups: instance.security_groups.as_deref(),
                capacity_reservation_id: instance.capacity_reservation_id.as_deref(),
                placement_group: None,
            };
            drift::instance_drift(&class, &observed).map(|(reason, _)| reason.as_str())
        }
    };
    assert_eq!(judged(class.clone()).await, None);
    let status = |class: &EC2NodeClass| class.status.clone().expect("status");

    let mut new_ami = class.clone();
    let mut s = status(&class);
    s.amis.retain(|a| a.id != "ami-0a20230000000a001");
    new_ami.status = Some(s);
    assert_eq!(judged(new_ami).await, Some("AMIDrift"));

    let instance = &instances_of(&env, "default-dft01").await[0];
    let subnet = instance.subnet_id().expect("subnet").to_string();
    let mut moved = class.clone();
    let mut s = status(&class);
    s.subnets.retain(|x| x.id != subnet);
    assert!(!s.subnets.is_empty());
    moved.status = Some(s);
    assert_eq!(judged(moved).await, Some("SubnetDrift"));

    // moto does not apply a launch template's security groups to fleet instances (EC2 does):
    // give the instance the node class' group the way EC2 would have, then change the class.
    env.ec2
        .modify_instance_attribute()
        .instance_id(instance.instance_id().expect("id"))
        .groups(&env.groups["nodes"])
        .send()
        .await
        .expect("security groups");
    assert_eq!(judged(class.clone()).await, None);
    let mut regrouped = class.clone();
    let mut s = status(&class);
    s.security_groups =
        serde_json::from_value(serde_json::json!([{"id": env.groups["other"], "name": "other"}]))
            .expect("groups");
    regrouped.status = Some(s);
    assert_eq!(judged(regrouped).await, Some("SecurityGroupDrift"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_aliases_resolve_through_ssm_and_boot_with_the_eks_script() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    for (alias, image) in [
        ("windows2019@latest", "ami-0d2019000000d0001"),
        ("windows2022@latest", "ami-0d2022000000d0002"),
        ("windows2025@latest", "ami-0d2025000000d0003"),
    ] {
        let class = nodeclass(
            "default",
            &format!("  amiSelectorTerms: [{{alias: {alias}}}]\n"),
        );
        let status = env.provider.resolve(&class).await.expect("resolve");
        let amis: Vec<&str> = status.amis.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(amis, [image], "{alias}");
    }
    let class = ready(
        &env,
        nodeclass(
            "default",
            "  amiSelectorTerms: [{alias: windows2022@latest}]\n",
        ),
    )
    .await;
    let launched = env
        .provider
        .create(
            &claim("default-win01", &["m5.large"], &["on-demand"]),
            &class,
        )
        .await
        .expect("launch");
    assert_eq!(launched.image_id.as_deref(), Some("ami-0d2022000000d0002"));
    assert_eq!(
        launched.capacity.pods, 110,
        "Windows nodes are not ENI-limited"
    );
    let instance = &instances_of(&env, "default-win01").await[0];
    let text = user_data(&env, instance.instance_id().expect("id")).await;
    assert!(text.starts_with("<powershell>"), "{text}");
    assert!(text.contains("Start-EKSBootstrap.ps1"), "{text}");
    assert!(text.contains("-EKSClusterName 'demo'"), "{text}");
    assert!(
        text.contains("karpenter.sh/unregistered:NoExecute"),
        "{text}"
    );
    let data = first_launch_template(&env, &mut moto).await;
    let root = &data.block_device_mappings()[0];
    assert_eq!(root.device_name(), Some("/dev/sda1"));
    assert_eq!(root.ebs().and_then(|e| e.volume_size()), Some(50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ami_terms_select_by_name_and_owner_and_by_ssm_parameter() {
    let Some(moto) = Moto::start() else { return };
    let env = env(&moto, None).await;
    let named = nodeclass(
        "named",
        "  amiFamily: AL2023\n  amiSelectorTerms: [{name: 'amazon-eks-node-al2023-*-standard-1.33-*', owner: '602401143452'}]\n",
    );
    let status = env.provider.resolve(&named).await.expect("resolve");
    assert_eq!(
        ami_ids(&status),
        BTreeSet::from(["ami-0a20230000000a001", "ami-0a20230000000a002"])
    );
    let stranger = nodeclass(
        "stranger",
        "  amiFamily: AL2023\n  amiSelectorTerms: [{name: 'amazon-eks-node-al2023-*', owner: '123456789012'}]\n",
    );
    let err = env
        .provider
        .resolve(&stranger)
        .await
        .expect_err("another owner's images are not ours");
    assert_eq!(err.condition, NodeClassCondition::AMIsReady);
    assert!(err.to_string().contains("owner 123456789012"), "{err}");

    let by_parameter = user_parameter_class(&env).await;
    let status = env.provider.resolve(&by_parameter).await.expect("resolve");
    let amis: Vec<&str> = status.amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(amis, ["ami-0c0570000000c0001"]);
    let missing = nodeclass(
        "missing",
        "  amiFamily: AL2023\n  amiSelectorTerms: [{ssmParameter: /platform/none}]\n",
    );
    let err = env
        .provider
        .resolve(&missing)
        .await
        .expect_err("no such parameter");
    assert!(err.to_string().contains("/platform/none"), "{err}");
}

// --- capacity reservations (tests/moto/capacity_reservations.py) ---------------------------------

/// A node class selecting the reservations tagged `karpenter.sh/discovery: demo`.
fn reservation_class() -> EC2NodeClass {
    nodeclass(
        "default",
        "  amiSelectorTerms: [{alias: al2023@latest}]\n  capacityReservationSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]\n",
    )
}

/// A targeted m5.large reservation in us-east-1a for `count` instances, tagged for the class.
async fn create_reservation(env: &Env, count: i32) -> String {
    env.ec2
        .create_capacity_reservation()
        .instance_type("m5.large")
        .instance_platform(aws_sdk_ec2::types::CapacityReservationInstancePlatform::LinuxUnix)
        .availability_zone("us-east-1a")
        .instance_count(count)
        .instance_match_criteria(aws_sdk_ec2::types::InstanceMatchCriteria::Targeted)
        .tag_specifications(tagged(
            ResourceType::CapacityReservation,
            &[("karpenter.sh/discovery", "demo")],
        ))
        .send()
        .await
        .expect("capacity reservation")
        .capacity_reservation()
        .and_then(|r| r.capacity_reservation_id())
        .expect("reservation id")
        .to_string()
}

/// Changes a reservation behind the controller's back (the launcher's control endpoint).
fn change_reservation(moto: &mut Moto, change: serde_json::Value) {
    moto.http(
        "POST",
        "/_karpenter/capacity-reservations",
        &change.to_string(),
    )
    .expect("reservation changed");
}

/// What the provisioner would create for `pods` pending pods (1.5 vCPU each, so one per
/// m5.large) on a NodePool of m5.large allowing `capacity`, with the instance types the provider
/// offers now: the same planner `run` uses. NodeClaims are named `<prefix>-<n>`.
async fn plan(
    env: &Env,
    class: &EC2NodeClass,
    capacity: &[&str],
    pods: usize,
    prefix: &str,
) -> karpenter_rs::controllers::provisioning::Plan {
    let mut yaml = serde_yaml_ng::to_string(class).expect("class YAML");
    yaml.push_str(&format!(
        "---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: default}}\nspec:\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n      - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}\n      - {{key: karpenter.sh/capacity-type, operator: In, values: [{}]}}\n",
        capacity.join(", ")
    ));
    for i in 0..pods {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: train-{i}, namespace: default}}\nspec:\n  containers: [{{name: c, image: trainer, resources: {{requests: {{cpu: 1500m}}}}}}]\n"
        ));
    }
    let docs = karpenter_rs::manifest::parse_str(&yaml, std::path::Path::new("reserved.yaml"))
        .expect("manifests");
    let cluster = karpenter_rs::manifest::load(&docs, Utc::now()).expect("snapshot");
    let types = std::collections::HashMap::from([(
        "default".to_string(),
        env.provider.instance_types(class).await.expect("types"),
    )]);
    let mut plan = karpenter_rs::controllers::provisioning::plan(
        &cluster,
        &types,
        &karpenter_rs::snapshot::EngineOptions::default(),
    );
    for (n, c) in plan.nodeclaims.iter_mut().enumerate() {
        c.metadata.name = Some(format!("{prefix}-{n}"));
    }
    plan
}

/// The reserved offering of m5.large in us-east-1a: (available, instances left).
fn reserved_offering(
    types: &[karpenter_rs::scheduling::instance_type::InstanceType],
) -> Option<(bool, i64)> {
    types
        .iter()
        .find(|t| &*t.name == "m5.large")?
        .offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::Reserved)
        .and_then(|o| Some((o.available, o.reservation.as_ref()?.available)))
}

fn requirement_values(claim: &NodeClaim, key: &str) -> Vec<String> {
    claim
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == key && r.operator == karpenter_rs::apis::nodeclaim::Operator::In)
        .flat_map(|r| r.values.clone())
        .collect()
}

/// What the NodeClaim controller judges an instance's drift on.
fn observed(i: &karpenter_rs::cloudprovider::Instance) -> drift::Observed<'_> {
    drift::Observed {
        image_id: i.image_id.as_deref(),
        subnet_id: i.subnet_id.as_deref(),
        security_groups: i.security_groups.as_deref(),
        capacity_reservation_id: i.capacity_reservation_id.as_deref(),
        placement_group: i
            .placement_group
            .as_ref()
            .map(|g| drift::ObservedPlacementGroup {
                id: g.id.as_deref(),
                name: g.name.as_deref(),
            }),
    }
}

/// The capacity reservation targeting of the launch template a CreateFleet request used.
async fn fleet_targeting(
    env: &Env,
    fleet: &serde_json::Value,
) -> Option<aws_sdk_ec2::types::LaunchTemplateCapacityReservationSpecificationResponse> {
    launch_template_of(env, &fleet_template(fleet))
        .await
        .capacity_reservation_specification()
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_planned_onto_a_reservation_first_and_launched_into_it() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let reservation = create_reservation(&env, 1).await;
    let class = ready(&env, reservation_class()).await;
    let status = class.status.as_ref().expect("status");
    assert_eq!(status.capacity_reservations.len(), 1);
    let resolved = &status.capacity_reservations[0];
    assert_eq!(resolved.id, reservation);
    assert_eq!(resolved.instance_type, "m5.large");
    assert_eq!(resolved.availability_zone, "us-east-1a");
    assert_eq!(resolved.instance_match_criteria, "targeted");
    assert_eq!(resolved.reservation_type.as_deref(), Some("default"));
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), Some((true, 1)));

    // Two pods, one reserved slot: one NodeClaim is pinned to the reservation, the other is kept
    // out of reserved capacity and launches on-demand.
    let planned = plan(&env, &class, &["reserved", "on-demand"], 2, "default-rsv").await;
    assert!(
        planned.unschedulable.is_empty(),
        "{:?}",
        planned.unschedulable
    );
    assert_eq!(planned.nodeclaims.len(), 2);
    let (reserved_claims, others): (Vec<&NodeClaim>, Vec<&NodeClaim>) =
        planned.nodeclaims.iter().partition(|c| {
            requirement_values(c, "karpenter.k8s.aws/capacity-reservation-id") == [&*reservation]
        });
    assert_eq!(reserved_claims.len(), 1, "{:?}", planned.nodeclaims);
    let reserved_claim = reserved_claims[0];
    assert_eq!(
        requirement_values(reserved_claim, "karpenter.sh/capacity-type"),
        ["reserved"]
    );

    let launched = env
        .provider
        .create(reserved_claim, &class)
        .await
        .expect("reserved launch");
    assert_eq!(launched.capacity_type, CapacityType::Reserved);
    assert_eq!(launched.zone, "us-east-1a");
    for (key, value) in [
        ("karpenter.sh/capacity-type", "reserved"),
        (
            "karpenter.k8s.aws/capacity-reservation-id",
            reservation.as_str(),
        ),
        ("karpenter.k8s.aws/capacity-reservation-type", "default"),
        ("node.kubernetes.io/instance-type", "m5.large"),
    ] {
        assert_eq!(
            launched.labels.get(key).map(String::as_str),
            Some(value),
            "{key}"
        );
    }
    let name = reserved_claim.metadata.name.as_deref().expect("name");
    let instance = instances_of(&env, name).await.pop().expect("instance");
    assert_eq!(
        instance.capacity_reservation_id(),
        Some(reservation.as_str())
    );
    let fleets = moto.fleets();
    assert_eq!(
        fleets[0]["TargetCapacitySpecification"]["DefaultTargetCapacityType"],
        "on-demand"
    );
    let targeting = fleet_targeting(&env, &fleets[0]).await.expect("targeting");
    assert_eq!(
        targeting.capacity_reservation_preference(),
        Some(&aws_sdk_ec2::types::CapacityReservationPreference::CapacityReservationsOnly)
    );
    assert_eq!(
        targeting
            .capacity_reservation_target()
            .and_then(|t| t.capacity_reservation_id()),
        Some(reservation.as_str())
    );
    // A retry finds the instance and reports the same reserved launch.
    let again = env
        .provider
        .create(reserved_claim, &class)
        .await
        .expect("retry");
    assert_eq!(again.provider_id, launched.provider_id);
    assert_eq!(again.capacity_type, CapacityType::Reserved);
    assert_eq!(
        again.labels["karpenter.k8s.aws/capacity-reservation-id"],
        reservation
    );
    let got = env.provider.get(&launched.provider_id).await.expect("get");
    assert_eq!(got.capacity_type, CapacityType::Reserved);
    assert_eq!(
        got.capacity_reservation_id.as_deref(),
        Some(reservation.as_str())
    );
    // Drift as the NodeClaim controller judges it: in sync while the class selects the
    // reservation, drifted once it does not.
    assert_eq!(drift::instance_drift(&class, &observed(&got)), None);
    let mut deselected = class.clone();
    if let Some(s) = deselected.status.as_mut() {
        s.capacity_reservations.clear();
    }
    assert_eq!(
        drift::instance_drift(&deselected, &observed(&got)).map(|(r, _)| r),
        Some(drift::DriftReason::CapacityReservationDrift)
    );
    // The launch took the last slot.
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), Some((false, 0)));

    // The other NodeClaim launches on-demand and stays out of reservations.
    let on_demand = env
        .provider
        .create(others[0], &class)
        .await
        .expect("on-demand launch");
    assert_eq!(on_demand.capacity_type, CapacityType::OnDemand);
    assert!(
        !on_demand
            .labels
            .contains_key("karpenter.k8s.aws/capacity-reservation-id")
    );
    let fleets = moto.fleets();
    let targeting = fleet_targeting(&env, &fleets[1]).await.expect("targeting");
    assert_eq!(
        targeting.capacity_reservation_preference(),
        Some(&aws_sdk_ec2::types::CapacityReservationPreference::None)
    );
    let other = others[0].metadata.name.as_deref().expect("name");
    let instance = instances_of(&env, other).await.pop().expect("instance");
    assert_eq!(instance.capacity_reservation_id(), None);
    let got = env.provider.get(&on_demand.provider_id).await.expect("get");
    assert_eq!(got.capacity_reservation_id, None);
    assert_eq!(drift::instance_drift(&deselected, &observed(&got)), None);

    // Terminating the reserved node gives its slot back.
    env.provider
        .delete(&launched.provider_id)
        .await
        .expect("delete");
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), Some((true, 1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_reservation_fails_the_reserved_launch_and_the_next_plan_falls_back() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let reservation = create_reservation(&env, 1).await;
    let class = ready(&env, reservation_class()).await;
    let planned = plan(&env, &class, &["reserved", "on-demand"], 1, "default-full").await;
    let claim = planned.nodeclaims.first().expect("a NodeClaim");
    assert_eq!(
        requirement_values(claim, "karpenter.k8s.aws/capacity-reservation-id"),
        [&*reservation]
    );

    // Someone else's instance took the slot since EC2 last reported it.
    change_reservation(
        &mut moto,
        serde_json::json!({"id": reservation, "available": 0}),
    );
    let err = env
        .provider
        .create(claim, &class)
        .await
        .expect_err("the reservation is full");
    assert!(matches!(err, CloudError::InsufficientCapacity(_)), "{err}");
    assert!(
        err.to_string().contains("ReservationCapacityExceeded"),
        "{err}"
    );
    let name = claim.metadata.name.as_deref().expect("name");
    assert!(instances_of(&env, name).await.is_empty());
    assert_eq!(
        moto.fleets().len(),
        1,
        "the reserved launch was asked for once"
    );
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), Some((false, 0)));

    // The NodeClaim is deleted and the pods planned again: now onto on-demand capacity.
    let replanned = plan(&env, &class, &["reserved", "on-demand"], 1, "default-full2").await;
    let fallback = replanned.nodeclaims.first().expect("a NodeClaim");
    assert!(
        requirement_values(fallback, "karpenter.k8s.aws/capacity-reservation-id").is_empty(),
        "{fallback:?}"
    );
    let launched = env
        .provider
        .create(fallback, &class)
        .await
        .expect("on-demand launch");
    assert_eq!(launched.capacity_type, CapacityType::OnDemand);
    let name = fallback.metadata.name.as_deref().expect("name");
    let instance = instances_of(&env, name).await.pop().expect("instance");
    assert_eq!(instance.capacity_reservation_id(), None);
    // A pool that may only use reserved capacity has nowhere to go.
    let strict = plan(&env, &class, &["reserved"], 1, "default-strict").await;
    assert!(strict.nodeclaims.is_empty(), "{:?}", strict.nodeclaims);
    assert_eq!(strict.unschedulable.len(), 1);

    // Once EC2 reports room again (the background refresh every minute), the reservation is
    // offered again.
    change_reservation(
        &mut moto,
        serde_json::json!({"id": reservation, "available": 1}),
    );
    assert_eq!(
        env.provider.refresh_reservations().await.expect("refresh"),
        1
    );
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), Some((true, 1)));
    // And at the next resolution of the class.
    change_reservation(
        &mut moto,
        serde_json::json!({"id": reservation, "available": 2}),
    );
    let class = ready(&env, reservation_class()).await;
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), Some((true, 2)));
    // A reservation that is no longer active has nothing left, even before the class is
    // resolved again.
    change_reservation(
        &mut moto,
        serde_json::json!({"id": reservation, "state": "cancelled"}),
    );
    assert_eq!(
        env.provider.refresh_reservations().await.expect("refresh"),
        0
    );
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), Some((false, 0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_block_is_launched_with_the_capacity_block_market_type() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let reservation = create_reservation(&env, 2).await;
    let end = Utc::now() + chrono::Duration::hours(6);
    change_reservation(
        &mut moto,
        serde_json::json!({"id": reservation, "reservationType": "capacity-block", "endDate": end.to_rfc3339()}),
    );
    let class = ready(&env, reservation_class()).await;
    let resolved = &class.status.as_ref().expect("status").capacity_reservations[0];
    assert_eq!(resolved.reservation_type.as_deref(), Some("capacity-block"));
    assert_eq!(
        resolved.end_time.map(|t| t.timestamp()),
        Some(end.timestamp())
    );
    let planned = plan(&env, &class, &["reserved", "on-demand"], 1, "default-block").await;
    let claim = planned.nodeclaims.first().expect("a NodeClaim");
    let launched = env
        .provider
        .create(claim, &class)
        .await
        .expect("launch into the block");
    assert_eq!(launched.capacity_type, CapacityType::Reserved);
    assert_eq!(
        launched.labels["karpenter.k8s.aws/capacity-reservation-type"],
        "capacity-block"
    );
    let fleets = moto.fleets();
    assert_eq!(
        fleets[0]["TargetCapacitySpecification"]["DefaultTargetCapacityType"],
        "capacity-block"
    );
    assert_eq!(
        reserved_market_type(&env, &fleets[0]).await,
        Some(aws_sdk_ec2::types::MarketType::CapacityBlock)
    );
    let name = claim.metadata.name.as_deref().expect("name");
    let instance = instances_of(&env, name).await.pop().expect("instance");
    assert_eq!(
        instance.capacity_reservation_id(),
        Some(reservation.as_str())
    );
    // 30 minutes before its end the block is expiring: nothing more is launched into it.
    let soon = Utc::now() + chrono::Duration::minutes(30);
    change_reservation(
        &mut moto,
        serde_json::json!({"id": reservation, "endDate": soon.to_rfc3339()}),
    );
    let class = ready(&env, reservation_class()).await;
    let resolved = &class.status.as_ref().expect("status").capacity_reservations[0];
    assert_eq!(resolved.state.as_deref(), Some("expiring"));
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interruptible_reservation_is_launched_into_and_its_interruption_drains_the_node() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let (env, url) = env_with_queue(&moto).await;
    let reservation = create_reservation(&env, 2).await;
    // Capacity another account lends: EC2 reports it as an interruptible reservation.
    change_reservation(
        &mut moto,
        serde_json::json!({"id": reservation, "interruptible": true}),
    );
    let class = ready(&env, reservation_class()).await;
    let resolved = &class.status.as_ref().expect("status").capacity_reservations[0];
    assert_eq!(resolved.interruptible, Some(true));
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), Some((true, 2)));

    let planned = plan(&env, &class, &["reserved"], 1, "default-lent").await;
    assert!(
        planned.unschedulable.is_empty(),
        "{:?}",
        planned.unschedulable
    );
    let claim = planned.nodeclaims.first().expect("a NodeClaim");
    assert_eq!(
        requirement_values(claim, "karpenter.k8s.aws/capacity-reservation-id"),
        [&*reservation]
    );
    assert_eq!(
        requirement_values(
            claim,
            "karpenter.k8s.aws/capacity-reservation-interruptible"
        ),
        ["true"]
    );
    let launched = env
        .provider
        .create(claim, &class)
        .await
        .expect("launch into the interruptible reservation");
    assert_eq!(launched.capacity_type, CapacityType::Reserved);
    for (key, value) in [
        ("karpenter.sh/capacity-type", "reserved"),
        (
            "karpenter.k8s.aws/capacity-reservation-id",
            reservation.as_str(),
        ),
        ("karpenter.k8s.aws/capacity-reservation-type", "default"),
        (
            "karpenter.k8s.aws/capacity-reservation-interruptible",
            "true",
        ),
    ] {
        assert_eq!(
            launched.labels.get(key).map(String::as_str),
            Some(value),
            "{key}"
        );
    }
    // The CreateFleet shape EC2 requires for interruptible reservations (the launcher's
    // extension refuses any other): `reserved-capacity` with ReservedCapacityOptions naming
    // them, no on-demand options, and a template targeting the reservation with the
    // interruptible market type.
    let fleets = moto.fleets();
    assert_eq!(fleets.len(), 1);
    assert_eq!(
        fleets[0]["TargetCapacitySpecification"]["DefaultTargetCapacityType"],
        "reserved-capacity"
    );
    assert_eq!(
        fleets[0]["ReservedCapacityOptions"]["ReservationTypes"],
        serde_json::json!(["interruptible-capacity-reservation"]),
        "{}",
        fleets[0]
    );
    assert_eq!(
        reserved_market_type(&env, &fleets[0]).await,
        Some(aws_sdk_ec2::types::MarketType::InterruptibleCapacityReservation)
    );
    let targeting = fleet_targeting(&env, &fleets[0]).await.expect("targeting");
    assert_eq!(
        targeting
            .capacity_reservation_target()
            .and_then(|t| t.capacity_reservation_id()),
        Some(reservation.as_str())
    );
    let name = claim.metadata.name.as_deref().expect("name");
    let instance = instances_of(&env, name).await.pop().expect("instance");
    assert_eq!(
        instance.capacity_reservation_id(),
        Some(reservation.as_str())
    );
    let got = env.provider.get(&launched.provider_id).await.expect("get");
    assert_eq!(got.capacity_type, CapacityType::Reserved);
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), Some((true, 1)));

    // The owner takes its capacity back: EC2's two-minute warning deletes the NodeClaim (its
    // node is drained) and nothing more is planned onto the reservation.
    let instance_id = instance.instance_id().expect("id").to_string();
    let body = serde_json::json!({
        "version": "0", "id": "9", "source": "aws.ec2", "account": "123456789012",
        "detail-type": "EC2 Capacity Reservation Instance Interruption Warning",
        "time": "2026-06-01T00:00:00Z", "region": "us-east-1",
        "resources": [format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}")],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"}
    });
    let messages = deliver(&env, &url, &body).await;
    let event = messages[0].event.clone().expect("event");
    assert_eq!(event.kind, InterruptionKind::CapacityReservationInterrupted);
    assert_eq!(event.action, InterruptionAction::DeleteNodeClaim);
    assert_eq!(event.instance_ids, [instance_id]);
    env.provider
        .record_interruption(&event)
        .await
        .expect("record");
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), Some((false, 0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_reserved_capacity_gate_off_reservations_are_left_alone() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env_with(&moto, None, |s| s.reserved_capacity = false).await;
    create_reservation(&env, 1).await;
    let class = ready(&env, reservation_class()).await;
    assert!(
        class
            .status
            .as_ref()
            .expect("status")
            .capacity_reservations
            .is_empty()
    );
    assert_eq!(moto.calls("DescribeCapacityReservations"), 0);
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(reserved_offering(&types), None);
    let launched = env
        .provider
        .create(
            &claim("default-gate01", &["m5.large"], &["on-demand"]),
            &class,
        )
        .await
        .expect("launch");
    assert_eq!(launched.capacity_type, CapacityType::OnDemand);
    let fleets = moto.fleets();
    assert_eq!(
        fleet_targeting(&env, &fleets[0]).await,
        None,
        "the launch template says nothing about reservations, as before"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raid0_offers_the_instance_store_and_the_launch_template_stripes_it() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = nodeclass(
        "default",
        "  amiSelectorTerms: [{alias: bottlerocket@latest}]\n  instanceStorePolicy: RAID0\n",
    );
    let class = ready(&env, class).await;
    let types = env.provider.instance_types(&class).await.expect("types");
    let storage = |name: &str| {
        types
            .iter()
            .find(|t| &*t.name == name)
            .map(|t| t.capacity.ephemeral_storage)
    };
    // m5d.large has one 75 GB NVMe disk; m5.large has none and keeps the 20Gi data volume.
    assert_eq!(storage("m5d.large"), Some(75_000_000_000));
    assert_eq!(storage("m5.large"), Some(20 << 30));

    launch_on_demand(&env, &class, "default-raid01", "m5d.large").await;
    let data = first_launch_template(&env, &mut moto).await;
    let text = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data.user_data().expect("template user data"))
            .expect("base64"),
    )
    .expect("utf-8");
    let doc: toml::Table = text.parse().expect("TOML user data");
    let command = &doc["settings"]["bootstrap-commands"]["000-mount-instance-storage"];
    let commands: Vec<Vec<&str>> = command["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|c| {
            c.as_array()
                .expect("a command")
                .iter()
                .filter_map(|a| a.as_str())
                .collect()
        })
        .collect();
    assert_eq!(
        commands,
        [
            vec!["apiclient", "ephemeral-storage", "init"],
            vec![
                "apiclient",
                "ephemeral-storage",
                "bind",
                "--dirs",
                "/var/lib/containerd",
                "/var/lib/kubelet",
                "/var/log/pods"
            ],
        ]
    );
    assert_eq!(command["mode"].as_str(), Some("always"));
    assert_eq!(command["essential"].as_bool(), Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_clusters_get_an_ipv6_primary_interface_and_cluster_dns() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env_with(&moto, None, |s| {
        s.service_cidr = Some("fd30:1c53:5f8a::/108".into());
    })
    .await;
    let class = ready(&env, al2023()).await;
    launch_on_demand(&env, &class, "default-ipv601", "m5.large").await;
    let data = first_launch_template(&env, &mut moto).await;
    assert!(data.security_group_ids().is_empty(), "{data:?}");
    let primary: Vec<_> = data
        .network_interfaces()
        .iter()
        .map(|n| {
            (
                n.device_index(),
                n.primary_ipv6(),
                n.ipv6_address_count(),
                n.groups().len(),
            )
        })
        .collect();
    assert_eq!(primary, [(Some(0), Some(true), Some(1), 1)]);
    let text = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data.user_data().expect("template user data"))
            .expect("base64"),
    )
    .expect("utf-8");
    let parts = parse_mime(&text).expect("MIME").expect("parts");
    let node_config: serde_json::Value =
        serde_yaml_ng::from_str(&parts.last().expect("part").body).expect("NodeConfig");
    assert_eq!(
        node_config["spec"]["cluster"]["cidr"],
        "fd30:1c53:5f8a::/108"
    );
    assert_eq!(
        node_config["spec"]["kubelet"]["config"]["clusterDNS"],
        serde_json::json!(["fd30:1c53:5f8a::a"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_prefix_count_reaches_the_primary_interface() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = nodeclass(
        "default",
        "  amiSelectorTerms: [{alias: al2023@latest}]\n  ipPrefixCount: 2\n",
    );
    let class = ready(&env, class).await;
    launch_on_demand(&env, &class, "default-pfx01", "m5.large").await;
    let data = first_launch_template(&env, &mut moto).await;
    assert!(data.security_group_ids().is_empty(), "{data:?}");
    let primary: Vec<_> = data
        .network_interfaces()
        .iter()
        .map(|n| {
            (
                n.device_index(),
                n.ipv4_prefix_count(),
                n.ipv6_prefix_count(),
                n.groups().len(),
            )
        })
        .collect();
    assert_eq!(primary, [(Some(0), Some(2), None, 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_instance_is_named_after_its_node_once() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = ready(&env, al2023()).await;
    let c = claim("default-name1", &["m5.large"], &["on-demand"]);
    let launched = env.provider.create(&c, &class).await.expect("launch");
    assert!(
        !tags_of(&instances_of(&env, "default-name1").await[0]).contains_key("Name"),
        "no Name before the Node registers"
    );
    assert_eq!(
        env.provider
            .tag_registered(
                &launched.provider_id,
                "default-name1",
                "ip-10-0-1-5.ec2.internal",
            )
            .await
            .expect("tag"),
        Tagging::Done
    );
    let tags = tags_of(&instances_of(&env, "default-name1").await[0]);
    assert_eq!(tags["Name"], "ip-10-0-1-5.ec2.internal");
    assert_eq!(tags["karpenter.sh/nodeclaim"], "default-name1");
    assert_eq!(tags["eks:eks-cluster-name"], env.settings.cluster_name);
    assert_eq!(tags["team"], "platform", "launch tags stay");

    // Everything there already: no write (an armed CreateTags failure stays unused).
    let writes = moto.calls("CreateTags");
    moto.fail("CreateTags", 1, "UnauthorizedOperation");
    env.provider
        .tag_registered(
            &launched.provider_id,
            "default-name1",
            "ip-10-0-1-5.ec2.internal",
        )
        .await
        .expect("nothing to tag");
    assert_eq!(moto.calls("CreateTags"), writes);
    assert!(matches!(
        env.provider
            .tag_registered(&launched.provider_id, "default-name1", "other-node")
            .await,
        Ok(Tagging::Done)
    ));
    moto.fail("CreateTags", 0, "");

    // A Name the node class sets at launch is the user's and stays.
    let mut named = al2023();
    named.metadata.name = Some("named".into());
    named.metadata.uid = Some("uid-named".into());
    named
        .spec
        .tags
        .insert("Name".into(), "payments-node".into());
    let named = ready(&env, named).await;
    let mut c2 = claim("default-name2", &["m5.large"], &["on-demand"]);
    c2.spec.node_class_ref.name = "named".into();
    let launched2 = env.provider.create(&c2, &named).await.expect("launch");
    env.provider
        .tag_registered(
            &launched2.provider_id,
            "default-name2",
            "ip-10-0-1-6.ec2.internal",
        )
        .await
        .expect("tag");
    assert_eq!(
        tags_of(&instances_of(&env, "default-name2").await[0])["Name"],
        "payments-node"
    );

    // A terminated instance is reported gone, for the controller to leave alone.
    env.provider
        .delete(&launched.provider_id)
        .await
        .expect("delete");
    assert!(matches!(
        env.provider
            .tag_registered(
                &launched.provider_id,
                "default-name1",
                "ip-10-0-1-5.ec2.internal"
            )
            .await,
        Err(CloudError::NotFound(_))
    ));
}

async fn template_names(env: &Env, class: &str) -> Vec<String> {
    env.ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name("tag:karpenter.k8s.aws/ec2nodeclass")
                .values(class)
                .build(),
        )
        .send()
        .await
        .expect("templates")
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_string))
        .collect()
}

/// One pass of the node classes' garbage collection: what it deleted.
async fn collect(env: &Env, in_use: &karpenter_rs::cloudprovider::NodeClassesInUse) -> Vec<String> {
    env.provider
        .collect_nodeclass_resources(in_use)
        .await
        .expect("collect")
}

/// An AL2023 class named `name`, ready, with NodeClaim `<name>-1` launched on it (an on-demand
/// m5.large); and the instance profile the provider made for it.
async fn launched_class(env: &Env, name: &str) -> (EC2NodeClass, String) {
    let mut class = al2023();
    class.metadata.name = Some(name.into());
    class.metadata.uid = Some(format!("uid-{name}"));
    let class = ready(env, class).await;
    let profile = class
        .status
        .as_ref()
        .and_then(|s| s.instance_profile.clone())
        .expect("managed profile");
    let mut c = claim(&format!("{name}-1"), &["m5.large"], &["on-demand"]);
    c.spec.node_class_ref.name = name.into();
    env.provider.create(&c, &class).await.expect("launch");
    (class, profile)
}

async fn profile_exists(env: &Env, name: &str) -> bool {
    env.iam
        .get_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_node_class_takes_its_launch_templates_and_instance_profile_along() {
    let Some(_moto) = Moto::start() else {
        return;
    };
    let env = env(&_moto, None).await;
    let (class, profile) = launched_class(&env, "going").await;
    let (_, keep_profile) = launched_class(&env, "default").await;
    assert_eq!(template_names(&env, "going").await.len(), 1);
    assert!(profile_exists(&env, &profile).await);

    env.provider
        .delete_nodeclass_resources(&class)
        .await
        .expect("delete");
    assert!(template_names(&env, "going").await.is_empty());
    assert!(!profile_exists(&env, &profile).await);
    assert_eq!(
        template_names(&env, "default").await.len(),
        1,
        "other classes keep theirs"
    );
    assert!(profile_exists(&env, &keep_profile).await);
    env.provider
        .delete_nodeclass_resources(&class)
        .await
        .expect("deleting again finds nothing to delete");

    // The provider forgot the deleted template: a class of that name made again launches.
    let class = ready(&env, class).await;
    let mut again = claim("going-2", &["m5.large"], &["on-demand"]);
    again.spec.node_class_ref.name = "going".into();
    env.provider.create(&again, &class).await.expect("relaunch");
    assert_eq!(template_names(&env, "going").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_gone_node_classes_left_is_collected_and_nothing_else() {
    let Some(_moto) = Moto::start() else {
        return;
    };
    let env = env(&_moto, None).await;
    let (_, gone_profile) = launched_class(&env, "gone").await;
    let (_, keep_profile) = launched_class(&env, "default").await;
    // A profile a user made under the cluster's prefix, not tagged as the controller's own.
    let user_profile = format!("{}_made-by-hand", env.settings.cluster_name);
    env.iam
        .create_instance_profile()
        .instance_profile_name(&user_profile)
        .send()
        .await
        .expect("user profile");

    // The live class' status names its profile.
    let in_use = karpenter_rs::cloudprovider::NodeClassesInUse {
        nodeclasses: BTreeSet::from(["default".to_string()]),
        instance_profiles: BTreeSet::from([keep_profile.clone()]),
    };
    assert_eq!(
        collect(&env, &in_use).await,
        Vec::<String>::new(),
        "nothing younger than the grace period"
    );
    env.clock.advance(chrono::Duration::minutes(6));
    let deleted = collect(&env, &in_use).await;
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert!(template_names(&env, "gone").await.is_empty());
    assert!(
        profile_exists(&env, &gone_profile).await,
        "a managed profile is protected for the hour after it was made"
    );
    assert_eq!(template_names(&env, "default").await.len(), 1);
    env.clock.advance(chrono::Duration::minutes(55));
    let deleted = collect(&env, &in_use).await;
    assert!(
        deleted.contains(&format!("instance profile {gone_profile}")),
        "{deleted:?}"
    );
    assert!(!profile_exists(&env, &gone_profile).await);
    assert!(profile_exists(&env, &keep_profile).await);
    assert!(profile_exists(&env, &user_profile).await);
}

/// The profile of the launch template `name` launches with.
async fn template_profile(env: &Env, name: &str) -> Option<String> {
    launch_template_of(env, name)
        .await
        .iam_instance_profile()
        .and_then(|p| p.name())
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_change_gets_a_new_profile_and_the_old_one_goes_after_its_protection() {
    let Some(_moto) = Moto::start() else {
        return;
    };
    let env = env(&_moto, None).await;
    env.iam
        .create_role()
        .role_name("KarpenterNodeRole-other")
        .assume_role_policy_document("{}")
        .send()
        .await
        .expect("role");
    let class = ready(&env, al2023()).await;
    let old = class
        .status
        .as_ref()
        .and_then(|s| s.instance_profile.clone())
        .expect("managed profile");
    let first = env
        .provider
        .create(&claim("default-r1", &["m5.large"], &["on-demand"]), &class)
        .await
        .expect("launch");
    assert_eq!(first.annotations[labels::INSTANCE_PROFILE_NAME], old);
    let old_templates = template_names(&env, "default").await;

    let mut changed = class.clone();
    changed.spec.role = Some("arn:aws:iam::123456789012:role/KarpenterNodeRole-other".into());
    let changed = ready(&env, changed).await;
    let new = changed
        .status
        .as_ref()
        .and_then(|s| s.instance_profile.clone())
        .expect("managed profile");
    assert_ne!(new, old, "a role change makes a new profile");
    let described = env
        .iam
        .get_instance_profile()
        .instance_profile_name(&new)
        .send()
        .await
        .expect("new profile");
    let profile = described.instance_profile().expect("profile");
    let roles: Vec<&str> = profile.roles().iter().map(|r| r.role_name()).collect();
    assert_eq!(roles, ["KarpenterNodeRole-other"]);
    assert_eq!(profile.path(), "/karpenter/us-east-1/demo/uid-default/");
    let tags: BTreeMap<&str, &str> = profile
        .tags()
        .iter()
        .map(|t| (t.key(), t.value()))
        .collect();
    assert_eq!(tags["kubernetes.io/cluster/demo"], "owned");
    assert_eq!(tags["eks:eks-cluster-name"], "demo");
    assert_eq!(tags[labels::EC2NODECLASS], "default");
    assert_eq!(tags["team"], "platform");
    let old_roles: Vec<String> = env
        .iam
        .get_instance_profile()
        .instance_profile_name(&old)
        .send()
        .await
        .expect("old profile")
        .instance_profile()
        .map(|p| {
            p.roles()
                .iter()
                .map(|r| r.role_name().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        old_roles,
        ["KarpenterNodeRole-demo"],
        "the old profile keeps its role"
    );
    // Resolving again keeps the new profile; so does a resolution whose status write was lost.
    let again = ready(&env, changed.clone()).await;
    assert_eq!(
        again.status.and_then(|s| s.instance_profile),
        Some(new.clone())
    );
    let mut lost = class.clone();
    lost.spec.role = changed.spec.role.clone();
    lost.status = None;
    assert_eq!(
        env.provider
            .resolve(&lost)
            .await
            .expect("resolve")
            .instance_profile,
        Some(new.clone())
    );

    // Launches from now on use the new profile.
    let second = env
        .provider
        .create(
            &claim("default-r2", &["m5.large"], &["on-demand"]),
            &changed,
        )
        .await
        .expect("launch");
    assert_eq!(second.annotations[labels::INSTANCE_PROFILE_NAME], new);
    let templates = template_names(&env, "default").await;
    let fresh: Vec<&String> = templates
        .iter()
        .filter(|t| !old_templates.contains(t))
        .collect();
    assert_eq!(fresh.len(), 1, "{templates:?}");
    assert_eq!(template_profile(&env, fresh[0]).await, Some(new.clone()));
    assert_eq!(
        template_profile(&env, &old_templates[0]).await,
        Some(old.clone())
    );

    // The class names the new profile; the first NodeClaim (launched with the old) is gone.
    let in_use = karpenter_rs::cloudprovider::NodeClassesInUse {
        nodeclasses: BTreeSet::from(["default".to_string()]),
        instance_profiles: BTreeSet::from([new.clone()]),
    };
    env.clock.advance(chrono::Duration::minutes(59));
    let deleted = collect(&env, &in_use).await;
    assert!(
        deleted.iter().all(|d| !d.contains("instance profile")),
        "{deleted:?}"
    );
    assert!(profile_exists(&env, &old).await, "protected for an hour");
    env.clock.advance(chrono::Duration::minutes(2));
    // A NodeClaim launched with the old profile keeps it past the window.
    let mut launched_with_old = in_use.clone();
    launched_with_old.instance_profiles.insert(old.clone());
    collect(&env, &launched_with_old).await;
    assert!(profile_exists(&env, &old).await);
    let deleted = collect(&env, &in_use).await;
    assert!(
        deleted.contains(&format!("instance profile {old}")),
        "{deleted:?}"
    );
    assert!(!profile_exists(&env, &old).await);
    assert!(
        profile_exists(&env, &new).await,
        "the class' current profile stays"
    );

    // Deleting the class takes every profile under its path.
    env.provider
        .delete_nodeclass_resources(&changed)
        .await
        .expect("delete");
    assert!(!profile_exists(&env, &new).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_template_no_launch_used_for_thirty_minutes_is_deleted() {
    let Some(_moto) = Moto::start() else {
        return;
    };
    let env = env(&_moto, None).await;
    let class = ready(&env, al2023()).await;
    env.provider
        .create(&claim("default-lt1", &["m5.large"], &["on-demand"]), &class)
        .await
        .expect("launch");
    let used = template_names(&env, "default").await;
    assert_eq!(used.len(), 1);
    // A template of the class this process never used (made before a restart, say).
    env.ec2
        .create_launch_template()
        .launch_template_name("karpenter.k8s.aws/from-before")
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id("ami-0123456789abcdef0")
                .build(),
        )
        .tag_specifications(tagged(
            ResourceType::LaunchTemplate,
            &[
                ("eks:eks-cluster-name", env.settings.cluster_name.as_str()),
                ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ],
        ))
        .send()
        .await
        .expect("template");
    let in_use = karpenter_rs::cloudprovider::NodeClassesInUse {
        nodeclasses: BTreeSet::from(["default".to_string()]),
        instance_profiles: BTreeSet::new(),
    };
    env.clock.advance(chrono::Duration::minutes(20));
    assert_eq!(collect(&env, &in_use).await, Vec::<String>::new());
    // 35 minutes after the launch, 15 after the collection first saw the other one.
    env.clock.advance(chrono::Duration::minutes(15));
    let deleted = collect(&env, &in_use).await;
    assert_eq!(deleted, [format!("unused launch template {}", used[0])]);
    env.clock.advance(chrono::Duration::minutes(20));
    collect(&env, &in_use).await;
    assert!(template_names(&env, "default").await.is_empty());

    // The next launch makes its template again.
    env.provider
        .create(&claim("default-lt2", &["m5.large"], &["on-demand"]), &class)
        .await
        .expect("launch");
    assert_eq!(template_names(&env, "default").await, used);
}

/// Makes placement group `name` with `strategy` (3 partitions for `partition`); its ID.
async fn create_placement_group(env: &Env, name: &str, strategy: &str) -> String {
    let mut request = env
        .ec2
        .create_placement_group()
        .group_name(name)
        .strategy(aws_sdk_ec2::types::PlacementStrategy::from(strategy));
    if strategy == "partition" {
        request = request.partition_count(3);
    }
    request
        .send()
        .await
        .expect("placement group")
        .placement_group()
        .and_then(|g| g.group_id())
        .expect("group id")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_placement_group_offers_no_burstable_types() {
    let Some(_moto) = Moto::start() else {
        return;
    };
    let env = env(&_moto, None).await;
    create_placement_group(&env, "hpc", "cluster").await;
    let names = |types: &[InstanceType]| -> BTreeSet<String> {
        types.iter().map(|it| it.name.to_string()).collect()
    };
    let plain = ready(&env, al2023()).await;
    let everything = names(&env.provider.instance_types(&plain).await.expect("types"));
    assert!(everything.contains("t3.medium") && everything.contains("m5.large"));
    let class = ready(
        &env,
        nodeclass(
            "hpc",
            "  amiSelectorTerms: [{alias: al2023@latest}]\n  placementGroupSelector: {name: hpc}\n",
        ),
    )
    .await;
    let grouped = names(&env.provider.instance_types(&class).await.expect("types"));
    assert!(grouped.contains("m5.large"), "{grouped:?}");
    let burstable: Vec<&String> = grouped
        .iter()
        .filter(|n| {
            ["t1.", "t2.", "t3.", "t3a.", "t4g."]
                .iter()
                .any(|f| n.starts_with(f))
        })
        .collect();
    assert!(burstable.is_empty(), "{burstable:?}");
    // EC2's list, not a family list: every type it cannot place in a cluster group goes.
    assert!(grouped.is_subset(&everything) && grouped.len() < everything.len());
    let mut c = claim("hpc-t3", &["t3.medium"], &["on-demand"]);
    c.spec.node_class_ref.name = "hpc".into();
    assert!(env.provider.create(&c, &class).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_group_is_resolved_launched_into_and_labelled() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let group = create_placement_group(&env, "kafka", "partition").await;
    let class = nodeclass(
        "default",
        "  amiSelectorTerms: [{alias: al2023@latest}]\n  placementGroupSelector: {name: kafka}\n",
    );
    let class = ready(&env, class).await;
    // Every type of the class carries the group, so requirements on the label select it.
    let types = env
        .provider
        .instance_types(&class)
        .await
        .expect("instance types");
    assert!(!types.is_empty());
    assert!(
        types
            .iter()
            .all(|it| it.labels.get(labels::PLACEMENT_GROUP_ID) == Some(&group)),
        "every type labelled with {group}"
    );
    let launched = env
        .provider
        .create(
            &claim("default-pg001", &["m5.large"], &["on-demand"]),
            &class,
        )
        .await
        .expect("launch");
    assert_eq!(
        launched.labels.get(labels::PLACEMENT_GROUP_ID),
        Some(&group)
    );
    assert_eq!(
        launched.labels.get(labels::PLACEMENT_GROUP_PARTITION),
        Some(&"1".to_string()),
        "EC2 picked the first partition"
    );
    let data = first_launch_template(&env, &mut moto).await;
    assert_eq!(
        data.placement().and_then(|p| p.group_id()),
        Some(group.as_str()),
        "{data:?}"
    );
    let instance = &instances_of(&env, "default-pg001").await[0];
    assert_eq!(
        instance.placement().and_then(|p| p.group_name()),
        Some("kafka")
    );
    let seen = env
        .provider
        .get(&launched.provider_id)
        .await
        .expect("instance");
    assert_eq!(seen.placement_group.and_then(|g| g.id), Some(group.clone()));

    // A class without a selector launches outside any group, with a template of its own.
    let plain = ready(&env, al2023()).await;
    let outside = env
        .provider
        .create(
            &claim("default-pg002", &["m5.large"], &["on-demand"]),
            &plain,
        )
        .await
        .expect("launch");
    assert_eq!(outside.labels.get(labels::PLACEMENT_GROUP_ID), None);
    let instance = &instances_of(&env, "default-pg002").await[0];
    assert_eq!(
        instance
            .placement()
            .and_then(|p| p.group_id())
            .filter(|g| !g.is_empty()),
        None
    );
}

/// `claim` additionally requiring partition `partition` of the class' placement group.
fn in_partition(mut c: NodeClaim, partition: &str) -> NodeClaim {
    c.spec.requirements.push(
        serde_yaml_ng::from_str(&format!(
            "{{key: {}, operator: In, values: ['{partition}']}}",
            labels::PLACEMENT_GROUP_PARTITION
        ))
        .expect("requirement"),
    );
    c
}

/// Whether each partition's (partition, available) offering of `instance_type` in `zone` as
/// `capacity_type`.
fn partition_offerings(
    types: &[karpenter_rs::scheduling::instance_type::InstanceType],
    instance_type: &str,
    zone: &str,
    capacity_type: CapacityType,
) -> Vec<(Option<String>, bool)> {
    types
        .iter()
        .filter(|t| &*t.name == instance_type)
        .flat_map(|t| t.offerings.iter())
        .filter(|o| &*o.zone == zone && o.capacity_type == capacity_type)
        .map(|o| (o.partition.as_deref().map(str::to_string), o.available))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_group_offers_reservations_per_partition_and_keeps_its_capacity_errors() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    create_placement_group(&env, "kafka", "partition").await;
    let reservation = create_reservation(&env, 2).await;
    let class = nodeclass(
        "default",
        "  amiSelectorTerms: [{alias: al2023@latest}]\n  capacityReservationSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]\n  placementGroupSelector: {name: kafka}\n",
    );
    let class = ready(&env, class).await;
    let types = env.provider.instance_types(&class).await.expect("types");
    let some = |p: &str| (Some(p.to_string()), true);
    assert_eq!(
        partition_offerings(&types, "m5.large", "us-east-1a", CapacityType::Reserved),
        [some("1"), some("2"), some("3")],
        "the reservation is offered in every partition"
    );

    // A reserved NodeClaim pinned to partition 2 launches into the reservation there.
    let reserved = in_partition(claim("default-pr001", &["m5.large"], &["reserved"]), "2");
    let launched = env
        .provider
        .create(&reserved, &class)
        .await
        .expect("reserved launch");
    assert_eq!(launched.capacity_type, CapacityType::Reserved);
    assert_eq!(
        launched.labels.get(labels::PLACEMENT_GROUP_PARTITION),
        Some(&"2".to_string())
    );
    let fleets = moto.fleets();
    let targeting = fleet_targeting(&env, &fleets[0]).await.expect("targeting");
    assert_eq!(
        targeting
            .capacity_reservation_target()
            .and_then(|t| t.capacity_reservation_id()),
        Some(reservation.as_str())
    );
    let template = fleet_template(&fleets[0]);
    let data = launch_template_of(&env, &template).await;
    assert_eq!(
        data.placement().and_then(|p| p.partition_number()),
        Some(2),
        "{data:?}"
    );

    // EC2 cannot fill a pool in partition 3: only partition 3 of the group skips it.
    moto.set_ice(&[("m5.large", "us-east-1b", "on-demand")]);
    let full = in_partition(
        claim("default-pr002", &["m5.large", "m5.xlarge"], &["on-demand"]),
        "3",
    );
    let mut full = full;
    full.spec.requirements.push(
        serde_yaml_ng::from_str(
            "{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1b]}",
        )
        .expect("requirement"),
    );
    let fallback = env.provider.create(&full, &class).await.expect("fallback");
    assert_eq!(fallback.instance_type, "m5.xlarge");
    let types = env.provider.instance_types(&class).await.expect("types");
    assert_eq!(
        partition_offerings(&types, "m5.large", "us-east-1b", CapacityType::OnDemand),
        [some("1"), some("2"), (Some("3".to_string()), false)]
    );
    // A launch that lets EC2 pick the partition blocks the pool in the whole group, and only
    // there: a class outside the group still offers it.
    let open = claim("default-pr003", &["m5.large", "m5.xlarge"], &["on-demand"]);
    let mut open = open;
    open.spec.requirements.push(
        serde_yaml_ng::from_str(
            "{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1b]}",
        )
        .expect("requirement"),
    );
    env.provider.create(&open, &class).await.expect("fallback");
    let types = env.provider.instance_types(&class).await.expect("types");
    assert!(
        partition_offerings(&types, "m5.large", "us-east-1b", CapacityType::OnDemand)
            .iter()
            .all(|(_, available)| !available)
    );
    let plain = ready(
        &env,
        nodeclass("plain", "  amiSelectorTerms: [{alias: al2023@latest}]\n"),
    )
    .await;
    let types = env.provider.instance_types(&plain).await.expect("types");
    assert_eq!(
        partition_offerings(&types, "m5.large", "us-east-1b", CapacityType::OnDemand),
        [(None, true)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_placement_group_keeps_the_class_from_launching() {
    let Some(moto) = Moto::start() else { return };
    let env = env(&moto, None).await;
    for selector in ["{name: missing}", "{id: pg-0123456789abcdef0}"] {
        let class = nodeclass(
            "default",
            &format!(
                "  amiSelectorTerms: [{{alias: al2023@latest}}]\n  placementGroupSelector: {selector}\n"
            ),
        );
        let err = env
            .provider
            .resolve(&class)
            .await
            .expect_err("unknown placement group");
        assert_eq!(
            (err.condition, err.reason),
            (
                NodeClassCondition::PlacementGroupReady,
                "PlacementGroupNotFound"
            ),
            "{selector}: {err}"
        );
        assert!(
            err.to_string().contains("spec.placementGroupSelector"),
            "{err}"
        );
    }
    // A class resolved while its group existed does not launch outside it once it is gone.
    create_placement_group(&env, "etcd", "spread").await;
    let class = nodeclass(
        "default",
        "  amiSelectorTerms: [{alias: al2023@latest}]\n  placementGroupSelector: {name: etcd}\n",
    );
    let class = ready(&env, class).await;
    env.ec2
        .delete_placement_group()
        .group_name("etcd")
        .send()
        .await
        .expect("delete group");
    // The group found is remembered for a minute, as upstream.
    env.clock.advance(chrono::Duration::minutes(1));
    env.provider.resolve(&class).await.expect_err("group gone");
    let err = env
        .provider
        .create(
            &claim("default-pg003", &["m5.large"], &["on-demand"]),
            &class,
        )
        .await
        .expect_err("no group, no launch");
    assert!(matches!(err, CloudError::NodeClassNotReady(_)), "{err}");
    assert!(instances_of(&env, "default-pg003").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_outside_the_selected_placement_group_drifts() {
    let Some(moto) = Moto::start() else { return };
    let env = env(&moto, None).await;
    let kafka = create_placement_group(&env, "kafka", "cluster").await;
    create_placement_group(&env, "etcd", "spread").await;
    let selecting = |selector: &str| {
        nodeclass(
            "default",
            &format!("  amiSelectorTerms: [{{alias: al2023@latest}}]\n{selector}"),
        )
    };
    let class = ready(&env, selecting("  placementGroupSelector: {name: kafka}\n")).await;
    let launched = env
        .provider
        .create(
            &claim("default-pgd01", &["m5.large"], &["on-demand"]),
            &class,
        )
        .await
        .expect("launch");
    let instance = env
        .provider
        .get(&launched.provider_id)
        .await
        .expect("instance");
    let reason = |class: &EC2NodeClass| {
        drift::instance_drift(class, &observed(&instance)).map(|(r, _)| r.as_str())
    };
    assert_eq!(reason(&class), None);
    let by_id = ready(
        &env,
        selecting(&format!("  placementGroupSelector: {{id: {kafka}}}\n")),
    )
    .await;
    assert_eq!(reason(&by_id), None, "the same group by ID");
    let moved = ready(&env, selecting("  placementGroupSelector: {name: etcd}\n")).await;
    assert_eq!(reason(&moved), Some("PlacementGroupDrift"));
    let removed = ready(&env, al2023()).await;
    assert_eq!(reason(&removed), Some("PlacementGroupDrift"));

    // And the other way: an instance in no group drifts once its class selects one.
    let plain = env
        .provider
        .create(
            &claim("default-pgd02", &["m5.large"], &["on-demand"]),
            &removed,
        )
        .await
        .expect("launch");
    let outside = env
        .provider
        .get(&plain.provider_id)
        .await
        .expect("instance");
    assert_eq!(drift::instance_drift(&removed, &observed(&outside)), None);
    assert_eq!(
        drift::instance_drift(&class, &observed(&outside)).map(|(r, _)| r.as_str()),
        Some("PlacementGroupDrift")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn efa_network_interfaces_reach_the_launch_template_and_the_efa_capacity() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = nodeclass(
        "default",
        "  amiSelectorTerms: [{alias: al2023@latest}]\n  networkInterfaces:\n  - {networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}\n  - {networkCardIndex: 0, deviceIndex: 1, interfaceType: efa-only}\n",
    );
    let class = ready(&env, class).await;
    let types = env
        .provider
        .instance_types(&class)
        .await
        .expect("instance types");
    let efa = |name: &str| {
        types
            .iter()
            .find(|it| &*it.name == name)
            .map(|it| it.capacity.get(resources::EFA))
    };
    assert_eq!(efa("m5.large"), None, "no EFA: not offered to this class");
    assert_eq!(efa("c5n.18xlarge"), Some(1));
    assert_eq!(
        efa("p4d.24xlarge"),
        Some(1),
        "one device per efa-only interface, not the type's four"
    );
    launch_on_demand(&env, &class, "default-efa01", "c5n.18xlarge").await;
    let data = first_launch_template(&env, &mut moto).await;
    assert!(data.security_group_ids().is_empty(), "{data:?}");
    let got: Vec<_> = data
        .network_interfaces()
        .iter()
        .map(|n| {
            (
                n.network_card_index(),
                n.device_index(),
                n.interface_type().map(str::to_string),
                n.groups().len(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (Some(0), Some(0), None, 1),
            (Some(0), Some(1), Some("efa-only".to_string()), 1)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_check_the_launch_permissions_during_validation() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env_with(&moto, None, |s| s.disable_dry_run = false).await;
    let dry_runs = |moto: &mut Moto| {
        ["CreateFleet", "CreateLaunchTemplate", "RunInstances"].map(|a| moto.calls(a))
    };
    env.provider.resolve(&al2023()).await.expect("allowed");
    assert_eq!(dry_runs(&mut moto), [1, 1, 1]);
    // Dry runs make nothing.
    let all = env
        .ec2
        .describe_instances()
        .send()
        .await
        .expect("instances");
    assert!(all.reservations().is_empty(), "{all:?}");
    let templates = env
        .ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("templates");
    assert!(templates.launch_templates().is_empty());
    // A verdict is kept while the class resolves the same.
    env.provider.resolve(&al2023()).await.expect("allowed");
    assert_eq!(dry_runs(&mut moto), [1, 1, 1]);

    let class = |name: &str| nodeclass(name, "  amiSelectorTerms: [{alias: al2023@latest}]\n");
    moto.fail("CreateLaunchTemplate", 1, "UnauthorizedOperation");
    let err = env
        .provider
        .resolve(&class("denied"))
        .await
        .expect_err("not authorized");
    assert_eq!(
        (err.condition, err.reason),
        (
            NodeClassCondition::ValidationSucceeded,
            "CreateLaunchTemplateAuthCheckFailed"
        )
    );
    assert!(matches!(err.error, CloudError::Invalid(_)), "{err}");
    assert!(
        err.to_string().contains("ec2:CreateLaunchTemplate"),
        "{err}"
    );
    assert_eq!(dry_runs(&mut moto), [2, 2, 1], "stops at the first refusal");

    moto.fail("RunInstances", 1, "UnauthorizedOperation");
    let err = env
        .provider
        .resolve(&class("no-run"))
        .await
        .expect_err("not authorized");
    assert_eq!(err.reason, "RunInstancesAuthCheckFailed");

    // Throttled: no verdict, tried again at the next resolution.
    moto.fail("CreateFleet", 1, "RequestLimitExceeded");
    let err = env
        .provider
        .resolve(&class("throttled"))
        .await
        .expect_err("throttled");
    assert!(matches!(err.error, CloudError::Transient(_)), "{err}");
    env.provider
        .resolve(&class("throttled"))
        .await
        .expect("allowed once EC2 answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeclaim_asking_for_efa_gets_an_efa_interface_per_device() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = ready(&env, al2023()).await;
    let mut c = claim("default-efa02", &["p4d.24xlarge"], &["on-demand"]);
    let requests = c
        .spec
        .resources
        .as_mut()
        .and_then(|r| r.requests.as_mut())
        .expect("requests");
    requests.insert(
        resources::EFA.into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
    );
    env.provider.create(&c, &class).await.expect("launch");
    let data = first_launch_template(&env, &mut moto).await;
    let got: Vec<_> = data
        .network_interfaces()
        .iter()
        .map(|n| {
            (
                n.network_card_index(),
                n.device_index(),
                n.interface_type().map(str::to_string),
            )
        })
        .collect();
    let efa = Some("efa".to_string());
    assert_eq!(
        got,
        [
            (Some(0), Some(0), efa.clone()),
            (Some(1), Some(1), efa.clone()),
            (Some(2), Some(1), efa.clone()),
            (Some(3), Some(1), efa)
        ],
        "p4d.24xlarge offers four EFA devices"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_virtualization_offers_only_the_types_that_support_it() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let names = |types: &[InstanceType]| -> BTreeSet<String> {
        types.iter().map(|it| it.name.to_string()).collect()
    };
    let plain = ready(&env, al2023()).await;
    let all = names(&env.provider.instance_types(&plain).await.expect("types"));
    let nested = ready(
        &env,
        nodeclass(
            "default",
            "  amiSelectorTerms: [{alias: al2023@latest}]\n  cpuOptions: {nestedVirtualization: enabled}\n",
        ),
    )
    .await;
    let capable = names(&env.provider.instance_types(&nested).await.expect("types"));
    // moto's DescribeInstanceTypes lists `nested-virtualization` for the 7th and 8th generation
    // Intel types (c7i, m8i, ...), not for m5.
    assert!(capable.contains("c7i.large"), "{capable:?}");
    assert!(!capable.contains("m5.large"), "{capable:?}");
    assert!(all.contains("m5.large"));
    assert!(capable.is_subset(&all) && capable.len() < all.len());
    let disabled = ready(
        &env,
        nodeclass(
            "default",
            "  amiSelectorTerms: [{alias: al2023@latest}]\n  cpuOptions: {nestedVirtualization: disabled}\n",
        ),
    )
    .await;
    assert_eq!(
        names(&env.provider.instance_types(&disabled).await.expect("types")),
        all,
        "`disabled` filters nothing"
    );

    // The setting reaches the launch templates' CPU options, as upstream sends it (read back
    // from EC2); a class without `cpuOptions` sends none.
    let allowed: Vec<&str> = capable.iter().map(String::as_str).collect();
    for (class, name, expected) in [
        (
            &nested,
            "default-nested",
            Some(aws_sdk_ec2::types::NestedVirtualizationSpecification::Enabled),
        ),
        (
            &disabled,
            "default-unnested",
            Some(aws_sdk_ec2::types::NestedVirtualizationSpecification::Disabled),
        ),
        (&plain, "default-plain", None),
    ] {
        env.provider
            .create(&claim(name, &allowed, &["on-demand"]), class)
            .await
            .expect("launch");
        let fleet = moto.fleets().pop().expect("a CreateFleet request");
        let configs = fleet["LaunchTemplateConfigs"]
            .as_array()
            .expect("configs")
            .clone();
        assert!(!configs.is_empty());
        for config in configs {
            let template = config["LaunchTemplateSpecification"]["LaunchTemplateName"]
                .as_str()
                .expect("template name");
            let data = launch_template_of(&env, template).await;
            assert_eq!(
                data.cpu_options()
                    .and_then(|c| c.nested_virtualization())
                    .cloned(),
                expected,
                "{name}: {template}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeclaim_that_requires_a_partition_launches_into_it() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let group = create_placement_group(&env, "brokers", "partition").await;
    let class = ready(
        &env,
        nodeclass(
            "default",
            "  amiSelectorTerms: [{alias: al2023@latest}]\n  placementGroupSelector: {name: brokers}\n",
        ),
    )
    .await;
    // Each pool is offered once per partition, as upstream.
    let types = env
        .provider
        .instance_types(&class)
        .await
        .expect("instance types");
    let m5 = types
        .iter()
        .find(|it| &*it.name == "m5.large")
        .expect("m5.large");
    let partitions: BTreeSet<&str> = m5
        .offerings
        .iter()
        .filter_map(|o| o.partition.as_deref())
        .collect();
    assert_eq!(partitions, BTreeSet::from(["1", "2", "3"]));
    let requiring = |name: &str, partition: &str| {
        let mut c = claim(name, &["m5.large"], &["on-demand"]);
        c.spec.requirements.push(
            serde_yaml_ng::from_str(&format!(
                "{{key: {}, operator: In, values: ['{partition}']}}",
                labels::PLACEMENT_GROUP_PARTITION
            ))
            .expect("requirement"),
        );
        c
    };
    let launched = env
        .provider
        .create(&requiring("default-part1", "3"), &class)
        .await
        .expect("launch");
    assert_eq!(
        launched.labels.get(labels::PLACEMENT_GROUP_PARTITION),
        Some(&"3".to_string()),
        "EC2 put it where the template says, not in the first partition"
    );
    let fleets = moto.fleets();
    let template = fleet_template(&fleets[0]);
    let pools: Vec<(&str, &str)> = fleets[0]["LaunchTemplateConfigs"][0]["Overrides"]
        .as_array()
        .expect("overrides")
        .iter()
        .map(|o| {
            (
                o["InstanceType"].as_str().unwrap_or_default(),
                o["AvailabilityZone"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        pools,
        [("m5.large", "us-east-1a"), ("m5.large", "us-east-1b")],
        "each pool asked for once, not once per partition"
    );
    let data = launch_template_of(&env, &template).await;
    let placement = data.placement().expect("placement");
    assert_eq!(placement.group_id(), Some(group.as_str()));
    assert_eq!(placement.partition_number(), Some(3));
    // A partition the group does not have is refused with the reason, and nothing launches.
    let err = env
        .provider
        .create(&requiring("default-part2", "7"), &class)
        .await
        .expect_err("no partition 7");
    assert!(matches!(err, CloudError::Invalid(_)), "{err}");
    assert!(err.to_string().contains("1 to 3"), "{err}");
    assert!(instances_of(&env, "default-part2").await.is_empty());
}

/// Sends `body` to the interruption queue at `url` and returns what the provider reads back from
/// it: that one message.
async fn deliver(env: &Env, url: &str, body: &serde_json::Value) -> Vec<InterruptionMessage> {
    env.sqs
        .send_message()
        .queue_url(url)
        .message_body(body.to_string())
        .send()
        .await
        .expect("send");
    let messages = env
        .provider
        .interruptions()
        .await
        .expect("queue configured")
        .expect("receive");
    assert_eq!(messages.len(), 1);
    messages
}

/// Tells the launcher what EC2 reports about an instance's health (`tests/moto/instance_status.py`).
fn set_health(moto: &mut Moto, health: serde_json::Value) {
    moto.http("POST", "/_karpenter/instance-status", &health.to_string())
        .expect("health set");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_status_checks_and_scheduled_events_become_notices() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let env = env(&moto, None).await;
    let class = ready(&env, al2023()).await;
    let mut claims = Vec::new();
    let mut ids = Vec::new();
    for name in ["health-a", "health-b", "health-c", "health-d"] {
        let mut c = claim(name, &["m5.large"], &["on-demand"]);
        let launched = env.provider.create(&c, &class).await.expect("launch");
        let id = karpenter_rs::cloudprovider::provider_id_instance(&launched.provider_id)
            .expect("instance id")
            .to_string();
        c.status = Some(
            serde_json::from_value(serde_json::json!({"providerID": launched.provider_id}))
                .expect("status"),
        );
        claims.push(Arc::new(c));
        ids.push(id);
    }
    let now = karpenter_rs::clock::Clock::now(&*env.clock);
    let ago = |d: chrono::Duration| (now - d).to_rfc3339();
    // a: unreachable for three minutes; b: its host impaired for 30 s; c: to be retired; d: fine.
    set_health(
        &mut moto,
        serde_json::json!({"instance": ids[0], "instance_status": "impaired", "impaired_since": ago(chrono::Duration::minutes(3))}),
    );
    set_health(
        &mut moto,
        serde_json::json!({"instance": ids[1], "system_status": "impaired", "impaired_since": ago(chrono::Duration::seconds(30))}),
    );
    set_health(
        &mut moto,
        serde_json::json!({"instance": ids[2], "events": ["instance-retirement"]}),
    );
    let notices = |events: Vec<karpenter_rs::cloudprovider::interruption::InterruptionEvent>| {
        events
            .into_iter()
            .map(|e| {
                (
                    e.instance_ids.join(","),
                    e.kind.as_str(),
                    format!("{:?}", e.action),
                )
            })
            .collect::<BTreeSet<_>>()
    };
    let calls = moto.calls("DescribeInstanceStatus");
    let first = env
        .provider
        .instance_health()
        .await
        .expect("a health source")
        .expect("health");
    assert_eq!(
        moto.calls("DescribeInstanceStatus") - calls,
        3,
        "one query per filter: instance checks, system checks, events"
    );
    let mut seen = std::collections::HashSet::new();
    let counted =
        karpenter_rs::controllers::interruption::newly_unhealthy(&first, &claims, &mut seen);
    assert_eq!(
        notices(first),
        BTreeSet::from([
            (
                ids[0].clone(),
                "instance_status",
                format!("{:?}", InterruptionAction::ForcefulTermination)
            ),
            (
                ids[2].clone(),
                "event_status",
                format!("{:?}", InterruptionAction::DeleteNodeClaim)
            ),
        ]),
        "the host check has failed for less than two minutes"
    );
    assert_eq!(
        counted,
        [
            (ids[0].clone(), "instance_status"),
            (ids[2].clone(), "event_status")
        ]
    );

    env.clock.advance(chrono::Duration::seconds(90));
    let second = env
        .provider
        .instance_health()
        .await
        .expect("a health source")
        .expect("health");
    assert!(notices(second.clone()).contains(&(
        ids[1].clone(),
        "system_status",
        format!("{:?}", InterruptionAction::ForcefulTermination)
    )));
    assert_eq!(
        karpenter_rs::controllers::interruption::newly_unhealthy(&second, &claims, &mut seen),
        [(ids[1].clone(), "system_status")],
        "the others were counted the pass before"
    );
}
