//! The AWS provider's controllers end to end: the interruption-queue consumer and the
//! EC2NodeClass status controller, the real code, against a real control plane (started by
//! `hack/test.sh`, which exports `KARPENTER_RS_TEST_KUBECONFIG`) and moto_server (see
//! `tests/moto/harness.rs`).
//!
//! Tests share the cluster, so they run one at a time and remove what they create.

#[path = "moto/harness.rs"]
mod harness;
#[path = "k8s/harness.rs"]
mod k8s;

use std::sync::{Arc, Mutex};

use chrono::Utc;
use karpenter_rs::apis::conditions::{self, Condition};
use karpenter_rs::apis::{EC2NodeClass, NodeClaim};
use karpenter_rs::clock::{Clock, FakeClock};
use karpenter_rs::cloudprovider::CloudProvider;
use karpenter_rs::cloudprovider::aws::{AwsProvider, AwsSettings};
use karpenter_rs::controllers::{interruption, nodeclass};
use karpenter_rs::runtime::Context;
use karpenter_rs::runtime::events::EventRecorder;
use karpenter_rs::scheduling::instance_type::CapacityType;
use karpenter_rs::state::ClusterState;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Client, Config};
use serde_json::json;

use harness::{Moto, create_queue, sdk_config};
use k8s::client;

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs one test body alone (the tests share the cluster), on its own runtime.
fn serial(body: impl std::future::Future<Output = ()>) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(body);
}

/// Waits (up to the control-plane tests' [`k8s::PATIENCE`]) for `check` to hold.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    k8s::wait_for(what, || {
        let holds = check();
        async move { holds.await.then_some(()) }
    })
    .await;
}

/// The cloud side: a VPC with tagged subnets and a security group, the node role, and the
/// provider (with `queue` as its interruption queue), instance types loaded.
async fn provider(moto: &Moto, queue: Option<&str>, clock: Arc<FakeClock>) -> Arc<AwsProvider> {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
    let config = sdk_config(moto).await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let discovery = || {
        TagSpecification::builder().tags(
            Tag::builder()
                .key("karpenter.sh/discovery")
                .value("demo")
                .build(),
        )
    };
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .expect("vpc");
    let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).expect("vpc id");
    for (cidr, zone) in [("10.0.1.0/24", "us-east-1a"), ("10.0.2.0/24", "us-east-1b")] {
        ec2.create_subnet()
            .vpc_id(vpc_id)
            .cidr_block(cidr)
            .availability_zone(zone)
            .tag_specifications(discovery().resource_type(ResourceType::Subnet).build())
            .send()
            .await
            .expect("subnet");
    }
    ec2.create_security_group()
        .group_name("nodes")
        .description("nodes")
        .vpc_id(vpc_id)
        .tag_specifications(
            discovery()
                .resource_type(ResourceType::SecurityGroup)
                .build(),
        )
        .send()
        .await
        .expect("security group");
    aws_sdk_iam::Client::new(&config)
        .create_role()
        .role_name("KarpenterNodeRole-demo")
        .assume_role_policy_document(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
        )
        .send()
        .await
        .expect("role");
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
        reserved_capacity: true,
        // The dry-run authorization checks have tests of their own (tests/aws_moto.rs).
        disable_dry_run: true,
        resolution_period: std::time::Duration::from_secs(60),
    };
    let provider = AwsProvider::new(settings, &config, clock).expect("provider");
    provider.refresh().await.expect("instance types");
    Arc::new(provider)
}

/// A node class as the API server serves it (with a UID: its managed instance profile lives
/// under an IAM path named after it).
fn nodeclass(name: &str, extra: &str) -> EC2NodeClass {
    serde_yaml_ng::from_str(&format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: {name}, uid: {name}-uid}}\nspec:\n  role: KarpenterNodeRole-demo\n  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]\n  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]\n{extra}"
    ))
    .expect("nodeclass")
}

fn nodeclaim(name: &str) -> NodeClaim {
    serde_yaml_ng::from_str(&format!(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: {name}, labels: {{karpenter.sh/nodepool: default}}}}\nspec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n  resources: {{requests: {{cpu: 500m}}}}\n  requirements:\n  - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}\n  - {{key: karpenter.sh/capacity-type, operator: In, values: [spot]}}\n"
    ))
    .expect("nodeclaim")
}

/// The shared context the controllers run with, on `client` and `provider`.
async fn context(
    client: &Client,
    provider: Arc<AwsProvider>,
    clock: Arc<FakeClock>,
) -> (Arc<Context>, tokio::task::JoinSet<()>) {
    let (state, tasks) = ClusterState::start(client).await;
    state.wait_synced().await;
    let clock: Arc<dyn Clock> = clock;
    let cloud: Arc<dyn CloudProvider> = provider;
    let ctx = Context::new(
        client.clone(),
        client.clone(),
        state,
        cloud,
        None,
        clock,
        Default::default(),
    );
    (Arc::new(ctx), tasks)
}

/// Messages on the queue, visible or in flight.
async fn queued(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("queue attributes");
    let attrs = out.attributes().cloned().unwrap_or_default();
    [
        A::ApproximateNumberOfMessages,
        A::ApproximateNumberOfMessagesNotVisible,
    ]
    .iter()
    .map(|a| {
        attrs
            .get(a)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    })
    .sum()
}

#[test]
fn a_spot_interruption_deletes_the_nodeclaim_and_is_kept_until_that_succeeds() {
    serial(async {
        let Some(mut moto) = Moto::start() else {
            return;
        };
        let client = client().await;
        let clock = Arc::new(FakeClock::new(Utc::now()));
        let queue = "karpenter-demo";
        let config = sdk_config(&moto).await;
        let sqs = aws_sdk_sqs::Client::new(&config);
        let url = create_queue(&config, queue).await;
        let aws = provider(&moto, Some(queue), clock.clone()).await;

        // A spot instance in moto, and a NodeClaim in the cluster whose providerID points at it.
        let mut class = nodeclass("default", "  amiSelectorTerms: [{alias: al2023@latest}]\n");
        let mut status = aws.resolve(&class).await.expect("resolve");
        status.conditions.push(Condition {
            type_: "Ready".into(),
            status: conditions::TRUE.into(),
            observed_generation: None,
            last_transition_time: Utc::now(),
            reason: "Ready".into(),
            message: String::new(),
        });
        class.status = Some(status);
        let name = format!("interrupted-{}", std::process::id());
        let claim = nodeclaim(&name);
        let launched = aws.create(&claim, &class).await.expect("launch");
        assert_eq!(launched.capacity_type, CapacityType::Spot);
        let instance_id = launched
            .provider_id
            .rsplit('/')
            .next()
            .expect("id")
            .to_string();
        let claims: Api<NodeClaim> = Api::all(client.clone());
        let _ = claims.delete(&name, &DeleteParams::default()).await;
        claims
            .create(&PostParams::default(), &claim)
            .await
            .expect("create nodeclaim");
        let written = claims
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"providerID": launched.provider_id}})),
            )
            .await
            .expect("providerID");
        let body = json!({
            "version": "0", "id": "7", "source": "aws.ec2", "account": "123456789012",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "time": "2025-06-01T00:00:00Z", "region": "us-east-1",
            "resources": [format!("arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}")],
            "detail": {"instance-id": instance_id, "instance-action": "terminate"}
        });
        sqs.send_message()
            .queue_url(&url)
            .message_body(body.to_string())
            .send()
            .await
            .expect("send");

        // The API server is unreachable: the NodeClaim cannot be deleted, so the message stays
        // on the queue (in flight until its visibility timeout) and will come back.
        let unreachable = Client::try_from(Config::new("http://127.0.0.1:9".parse().expect("url")))
            .expect("client");
        let recorder = EventRecorder::new(
            unreachable.clone(),
            Reporter {
                controller: "karpenter".into(),
                instance: None,
            },
        );
        let messages = aws.interruptions().await.expect("queue").expect("receive");
        assert_eq!(messages.len(), 1);
        let err = interruption::handle(
            &unreachable,
            &recorder,
            aws.as_ref(),
            &[Arc::new(written.clone())],
            &messages[0],
            Utc::now(),
        )
        .await
        .expect_err("the deletion fails");
        assert!(err.contains(&name), "{err}");
        assert_eq!(queued(&sqs, &url).await, 1, "the message is kept");
        assert!(claims.get_opt(&name).await.expect("get").is_some());

        // Marking the spot pool fails (DescribeInstances refused): the NodeClaim is deleted all
        // the same (the notice gives two minutes), the failure is reported and the message kept.
        moto.fail("DescribeInstances", 1, "UnauthorizedOperation");
        let reachable = EventRecorder::new(
            client.clone(),
            Reporter {
                controller: "karpenter".into(),
                instance: None,
            },
        );
        let err = interruption::handle(
            &client,
            &reachable,
            aws.as_ref(),
            &[Arc::new(written)],
            &messages[0],
            Utc::now(),
        )
        .await
        .expect_err("marking fails");
        assert!(err.contains("could not mark"), "{err}");
        eventually(
            "the NodeClaim to be deleted although marking failed",
            || async { claims.get_opt(&name).await.expect("get").is_none() },
        )
        .await;
        assert_eq!(queued(&sqs, &url).await, 1, "the message is kept");
        // Redeliver now rather than after the 20 s visibility timeout.
        sqs.change_message_visibility()
            .queue_url(&url)
            .receipt_handle(&messages[0].receipt)
            .visibility_timeout(0)
            .send()
            .await
            .expect("visibility");

        // The consumer as `run` starts it: the NodeClaim goes, the spot pool is marked and the
        // message is deleted.
        let (ctx, _watchers) = context(&client, aws.clone(), clock.clone()).await;
        let mut consumer = tokio::task::JoinSet::new();
        consumer.spawn(interruption::run(ctx));
        eventually("the interrupted NodeClaim to be deleted", || async {
            claims.get_opt(&name).await.expect("get").is_none()
        })
        .await;
        assert!(aws.unavailable_offerings().is_unavailable(
            &launched.instance_type,
            &launched.zone,
            CapacityType::Spot
        ));
        eventually("the message to leave the queue", || async {
            queued(&sqs, &url).await == 0
        })
        .await;
        consumer.abort_all();
    });
}

#[test]
fn ec2nodeclass_conditions_name_what_failed() {
    serial(async {
        let Some(moto) = Moto::start() else { return };
        let client = client().await;
        let clock = Arc::new(FakeClock::new(Utc::now()));
        let aws = provider(&moto, None, clock.clone()).await;
        let (ctx, _watchers) = context(&client, aws, clock).await;
        let mut controller = tokio::task::JoinSet::new();
        controller.spawn(nodeclass::run(ctx));
        let classes: Api<EC2NodeClass> = Api::all(client.clone());
        let suffix = std::process::id();
        let cases = [
            (
                format!("good-{suffix}"),
                "  amiSelectorTerms: [{alias: al2023@latest}]\n",
                ("Ready", "True", "Ready"),
            ),
            (
                format!("unknown-ami-{suffix}"),
                "  amiFamily: AL2023\n  amiSelectorTerms: [{id: ami-0000000000doesnotexist}]\n",
                ("AMIsReady", "False", "AMINotFound"),
            ),
            (
                format!("bad-userdata-{suffix}"),
                "  amiSelectorTerms: [{alias: bottlerocket@latest}]\n  userData: '[settings'\n",
                ("ValidationSucceeded", "False", "InvalidUserData"),
            ),
        ];
        for (name, extra, _) in &cases {
            classes
                .create(&PostParams::default(), &nodeclass(name, extra))
                .await
                .expect("create ec2nodeclass");
        }
        for (name, _, (type_, status, reason)) in &cases {
            eventually(&format!("{name}: {type_}={status}"), || async {
                let class = classes.get(name).await.expect("get");
                let conds = class.status.map(|s| s.conditions).unwrap_or_default();
                conditions::find(&conds, type_)
                    .is_some_and(|c| c.status == *status && c.reason == *reason)
            })
            .await;
            let class = classes.get(name).await.expect("get");
            let conds = class.status.map(|s| s.conditions).unwrap_or_default();
            let ready = conditions::find(&conds, "Ready").expect("Ready");
            if *status == "False" {
                assert_eq!(ready.status, "False", "{name}");
                assert!(
                    ready.message.starts_with(&format!("{type_}=False: ")),
                    "{name}: {}",
                    ready.message
                );
            }
        }
        let bad = classes.get(&cases[2].0).await.expect("get");
        let conds = bad.status.map(|s| s.conditions).unwrap_or_default();
        let validation = conditions::find(&conds, "ValidationSucceeded").expect("condition");
        assert!(
            validation.message.contains("spec.userData"),
            "{}",
            validation.message
        );
        // Deleting them goes through the controller's finalizer.
        for (name, _, _) in &cases {
            classes
                .delete(name, &DeleteParams::default())
                .await
                .expect("delete");
        }
        for (name, _, _) in &cases {
            eventually(&format!("{name} to be deleted"), || async {
                classes.get_opt(name).await.expect("get").is_none()
            })
            .await;
        }
        controller.abort_all();
    });
}
