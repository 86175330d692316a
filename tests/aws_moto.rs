//! The AWS provider against moto_server (PyPI `moto[server]`), started on loopback by the test
//! and stopped by PID when it ends. `tests/moto/launcher.py` closes the gaps moto has (public
//! SSM parameters, CreateFleet override order and capacity errors, a Pricing API answered from a
//! fixture); see the README's "AWS provider tests" for what is verified where.
//!
//! The server runs from the venv `hack/test.sh` creates (`$CARGO_TARGET_DIR/moto-venv`) or from
//! `MOTO_PYTHON`. Without it the tests fail with instructions, unless `SKIP_AWS_TESTS=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{Filter, InstanceAttributeName, ResourceType, Tag, TagSpecification};
use base64::Engine as _;
use chrono::Utc;
use karpenter_rs::apis::conditions::{self, Condition};
use karpenter_rs::apis::{EC2NodeClass, NodeClaim};
use karpenter_rs::clock::FakeClock;
use karpenter_rs::cloudprovider::aws::interruption::{
    InterruptionAction, InterruptionKind, parse_message,
};
use karpenter_rs::cloudprovider::aws::userdata::parse_mime;
use karpenter_rs::cloudprovider::aws::{AwsProvider, AwsSettings, config_loader};
use karpenter_rs::cloudprovider::{
    CloudError, CloudProvider, InstanceState, claim_requests, claim_requirements, launch_candidates,
};
use karpenter_rs::scheduling::instance_type::CapacityType;

/// A moto_server child process, killed (by PID) when dropped.
struct Moto {
    child: Child,
    url: String,
    port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn moto_python() -> PathBuf {
    if let Ok(p) = std::env::var("MOTO_PYTHON") {
        return PathBuf::from(p);
    }
    // CARGO_TARGET_TMPDIR is <target>/tmp, so this follows CARGO_TARGET_DIR.
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../moto-venv/bin/python")
}

impl Moto {
    /// Starts moto, or `None` when `SKIP_AWS_TESTS=1`.
    fn start() -> Option<Self> {
        if std::env::var("SKIP_AWS_TESTS").as_deref() == Ok("1") {
            eprintln!("SKIP_AWS_TESTS=1: not running the moto tests");
            return None;
        }
        let python = moto_python();
        assert!(
            python.exists(),
            "moto_server is needed for the AWS provider tests and {} does not exist.\n\
             Run hack/test.sh (it creates the venv), or: python3 -m venv {venv} && {venv}/bin/pip install -r tests/moto/requirements.txt\n\
             (or point MOTO_PYTHON at a python with moto[server] installed; SKIP_AWS_TESTS=1 skips these tests)",
            python.display(),
            venv = python
                .parent()
                .and_then(|p| p.parent())
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let log_path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("moto-{port}.log"));
        let log = std::fs::File::create(&log_path).expect("moto log file");
        let child = Command::new(&python)
            .arg("tests/moto/launcher.py")
            .arg(port.to_string())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start moto_server");
        let mut moto = Moto {
            child,
            url: format!("http://127.0.0.1:{port}"),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!(
                    "moto_server exited ({status}): {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            if moto.http("GET", "/_karpenter/fleets", "").is_some() {
                return Some(moto);
            }
            assert!(
                Instant::now() < deadline,
                "moto_server did not answer within 60s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A plain HTTP/1.0 request to the control endpoints; the body of a 200 answer.
    fn http(&mut self, method: &str, path: &str, body: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let (head, body) = out.split_once("\r\n\r\n")?;
        (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_string())
    }

    fn set_ice(&mut self, pools: &[(&str, &str, &str)]) {
        let body = serde_json::json!({"pools": pools}).to_string();
        self.http("POST", "/_karpenter/ice", &body)
            .expect("set ICE pools");
    }

    fn fleets(&mut self) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.http("GET", "/_karpenter/fleets", "").expect("fleets"))
            .expect("fleet JSON")
    }
}

/// The AWS side of a test: a VPC with two tagged subnets and one untagged, a tagged and an
/// untagged security group, the node role, and the provider.
struct Env {
    ec2: aws_sdk_ec2::Client,
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

async fn sdk_config(moto: &Moto) -> aws_config::SdkConfig {
    config_loader("us-east-1")
        .endpoint_url(&moto.url)
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "testing", "testing", None, None, "moto",
        ))
        .load()
        .await
}

async fn env(moto: &Moto, queue: Option<&str>) -> Env {
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
    let settings = AwsSettings {
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
    };
    let provider = AwsProvider::new(settings, &config, clock.clone()).expect("provider");
    Env {
        sqs: aws_sdk_sqs::Client::new(&config),
        ec2,
        iam,
        provider,
        clock,
        subnets,
        groups,
    }
}

fn nodeclass(name: &str, extra: &str) -> EC2NodeClass {
    serde_yaml_ng::from_str(&format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: {name}}}\nspec:\n  role: KarpenterNodeRole-demo\n  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]\n  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]\n  tags: {{team: platform}}\n{extra}"
    ))
    .expect("nodeclass")
}

fn al2023() -> EC2NodeClass {
    nodeclass("default", "  amiSelectorTerms: [{alias: al2023@latest}]\n")
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
    let amis: BTreeSet<&str> = status.amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(
        amis,
        BTreeSet::from([
            "ami-0a20230000000a001",
            "ami-0a20230000000a002",
            "ami-0a20230000000a003"
        ])
    );
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
    let template =
        fleet["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateName"]
            .as_str()
            .expect("template name")
            .to_string();
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
    let Some(_moto) = Moto::start() else { return };
    let env = env(&_moto, None).await;
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
    let Some(moto) = Moto::start() else { return };
    let env = env(&moto, None).await;
    let class = ready(&env, al2023()).await;
    let c = claim("default-del01", &["m5.large"], &["on-demand"]);
    let launched = env.provider.create(&c, &class).await.expect("launch");
    let seen = env.provider.get(&launched.provider_id).await.expect("get");
    assert_eq!(seen.nodeclaim.as_deref(), Some("default-del01"));
    assert!(!seen.state.is_terminating());
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
    let queue = "karpenter-demo";
    let env = env(&moto, Some(queue)).await;
    let url = env
        .sqs
        .create_queue()
        .queue_name(queue)
        .send()
        .await
        .expect("queue")
        .queue_url()
        .expect("url")
        .to_string();
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
    env.sqs
        .send_message()
        .queue_url(&url)
        .message_body(body.to_string())
        .send()
        .await
        .expect("send");

    let q = env.provider.interruption_queue().expect("queue configured");
    let messages = q.receive().await.expect("receive");
    assert_eq!(messages.len(), 1);
    let event = parse_message(&messages[0].body).expect("event");
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
    q.delete_message(&messages[0].receipt_handle)
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
    assert!(matches!(err, CloudError::NodeClassNotReady(_)), "{err}");
    assert!(
        err.to_string().contains("spec.amiSelectorTerms")
            && err.to_string().contains("ami-0000000000doesnotexist"),
        "{err}"
    );
    let broken = nodeclass(
        "default",
        "  amiSelectorTerms: [{alias: bottlerocket@latest}]\n  userData: '[settings'\n",
    );
    let broken = ready(&env, broken).await;
    let err = env
        .provider
        .create(
            &claim("default-bad01", &["m5.large"], &["on-demand"]),
            &broken,
        )
        .await
        .expect_err("bad user data");
    assert!(matches!(err, CloudError::Invalid(_)), "{err}");
    assert!(err.to_string().contains("spec.userData"), "{err}");
    assert!(instances_of(&env, "default-bad01").await.is_empty());
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
