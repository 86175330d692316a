//! Golden tests for `karpenter_rs::manifest::legacy`: each directory under
//! `tests/fixtures/convert/` holds an `input.yaml` written for an older Karpenter API and the
//! `expected.yaml` v1 objects it must become; objects are compared as parsed values, not text.

use std::path::{Path, PathBuf};

use karpenter_rs::apis::validation::{Kind, validate_value};
use karpenter_rs::manifest::legacy::{
    Conversion, ConvertError, Options, Warning, convert, convert_with,
};
use karpenter_rs::manifest::{self, Document};
use pretty_assertions::assert_eq;
use serde_json::Value;

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/convert")
        .join(path)
}

fn read(path: &str) -> Vec<Document> {
    manifest::read_paths(&[fixture(path)]).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn values(path: &str) -> Vec<Value> {
    read(path).into_iter().map(|d| d.value).collect()
}

fn show(warnings: &[Warning]) -> String {
    warnings.iter().map(|w| format!("  {w}\n")).collect()
}

/// Converts `case/input.yaml`, compares with `case/expected.yaml`, and checks that each expected
/// warning (object, message substring) was given and that there are no others.
fn check_case(case: &str, options: &Options, expected_warnings: &[(&str, &str)]) -> Conversion {
    let input = read(&format!("{case}/input.yaml"));
    let conversion = convert_with(&input, options).unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!(
        conversion.objects,
        values(&format!("{case}/expected.yaml")),
        "{case}: output differs from expected.yaml"
    );
    for (object, needle) in expected_warnings {
        assert!(
            conversion
                .warnings
                .iter()
                .any(|w| w.object == *object && w.message.contains(needle)),
            "{case}: no warning for {object} containing {needle:?}; got:\n{}",
            show(&conversion.warnings)
        );
    }
    assert_eq!(
        conversion.warnings.len(),
        expected_warnings.len(),
        "{case}: unexpected warnings:\n{}",
        show(&conversion.warnings)
    );
    assert_valid(&conversion.objects);
    assert_yaml_round_trip(&conversion.objects);
    conversion
}

/// Every Karpenter object in the output is accepted by the API server's rules.
fn assert_valid(objects: &[Value]) {
    for object in objects {
        let field = |k: &str| object.get(k).and_then(Value::as_str).unwrap_or_default();
        if let Some(kind) = Kind::of(field("apiVersion"), field("kind"))
            && let Err(e) = validate_value(kind, object, None)
        {
            panic!("output does not validate: {e}");
        }
    }
}

/// The output rendered as YAML parses back to the same objects.
fn assert_yaml_round_trip(objects: &[Value]) {
    let yaml = manifest::to_yaml_stream(objects).expect("render YAML");
    let parsed: Vec<Value> = manifest::parse_str(&yaml, Path::new("-"))
        .expect("re-parse rendered YAML")
        .into_iter()
        .map(|d| d.value)
        .collect();
    assert_eq!(parsed, objects);
}

fn expect_error(path: &str, options: &Options) -> ConvertError {
    match convert_with(&read(path), options) {
        Ok(c) => panic!("{path}: expected an error, got {:#?}", c.objects),
        Err(e) => e,
    }
}

fn assert_mentions(error: &ConvertError, needles: &[&str]) {
    let text = error.to_string();
    for needle in needles {
        assert!(
            text.contains(needle),
            "error does not mention {needle:?}:\n{text}"
        );
    }
}

const HOP_LIMIT: &str = "spec.metadataOptions.httpPutResponseHopLimit: set to 2";

#[test]
fn flux_beta_manifests_become_the_articles_v1_manifests() {
    check_case(
        "flux-beta-to-v1",
        &Options::default(),
        &[
            (
                "EC2NodeClass/default",
                "alias al2023@latest from amiFamily AL2023",
            ),
            ("EC2NodeClass/default", HOP_LIMIT),
        ],
    );
}

#[test]
fn cluster_autoscaler_provisioner_and_node_template_become_nodepool_and_ec2nodeclass() {
    let options = Options {
        default_instance_profile: Some("KarpenterNodeInstanceProfile-karpenter-poc".into()),
        ..Options::default()
    };
    check_case(
        "cluster-autoscaler-alpha",
        &options,
        &[
            (
                "NodePool/default",
                "spec.template.spec.expireAfter: set to Never",
            ),
            (
                "NodePool/default",
                "v1 does not adopt the nodes that Provisioner launched",
            ),
            ("EC2NodeClass/default", "alias al2@latest"),
            ("EC2NodeClass/default", HOP_LIMIT),
        ],
    );
}

#[test]
fn drift_article_al2_nodepool_and_class() {
    check_case(
        "drift-al2-beta",
        &Options::default(),
        &[
            (
                "EC2NodeClass/default",
                "@latest follows every new EKS-optimized AMI release",
            ),
            ("EC2NodeClass/default", HOP_LIMIT),
        ],
    );
}

#[test]
fn drift_article_bottlerocket_class_and_edited_nodepool() {
    check_case(
        "drift-bottlerocket-beta",
        &Options::default(),
        &[
            ("EC2NodeClass/bottlerocket", "alias bottlerocket@latest"),
            ("EC2NodeClass/bottlerocket", HOP_LIMIT),
        ],
    );
}

#[test]
fn differing_kubelet_blocks_split_the_shared_ec2nodeclass() {
    check_case(
        "kubelet-split",
        &Options::default(),
        &[
            ("EC2NodeClass/default", "alias al2023@latest"),
            (
                "EC2NodeClass/default",
                "karpenter.sh/managed-by (\"prod\") was removed",
            ),
            (
                "NodePool/batch",
                "do-not-consolidate replaced by karpenter.sh/do-not-disrupt",
            ),
            (
                "NodePool/batch",
                "nodeClassRef.name changed from default to default-batch",
            ),
            (
                "NodePool/batch-spot",
                "nodeClassRef.name changed from default to default-batch",
            ),
            (
                "NodePool/plain",
                "nodeClassRef.name changed from default to default-plain",
            ),
            (
                "NodePool/gpu",
                "EC2NodeClass/gpu is not in the input; add `kubelet: {\"podsPerCore\":4}`",
            ),
        ],
    );
}

#[test]
fn split_warnings_say_that_the_nodes_drift() {
    let c = convert(&read("kubelet-split/input.yaml")).expect("converts");
    let batch = c
        .warnings
        .iter()
        .find(|w| w.object == "NodePool/batch" && w.message.contains("nodeClassRef"))
        .expect("split warning");
    assert!(
        batch
            .message
            .contains("differs from NodePool/general's kubelet"),
        "{batch}"
    );
    assert!(batch.message.contains("drifts and replaces"), "{batch}");
}

#[test]
fn ubuntu_becomes_al2_with_pinned_amis() {
    check_case(
        "ubuntu",
        &Options::default(),
        &[
            (
                "EC2NodeClass/ubuntu",
                "Ubuntu is no longer a supported family and was replaced by AL2",
            ),
            ("EC2NodeClass/custom", HOP_LIMIT),
            ("EC2NodeClass/windows", "alias windows2022@latest"),
        ],
    );
}

#[test]
fn do_not_evict_and_provisioner_name_in_workloads_are_renamed() {
    check_case(
        "do-not-evict",
        &Options::default(),
        &[
            (
                "Deployment/checkout",
                "spec.template.metadata.annotations: karpenter.sh/do-not-evict: \"true\" replaced by karpenter.sh/do-not-disrupt",
            ),
            (
                "Deployment/checkout",
                "spec.template.spec.nodeSelector: node label key karpenter.sh/provisioner-name renamed",
            ),
            (
                "CronJob/nightly-report",
                "spec.jobTemplate.spec.template.metadata.annotations: karpenter.sh/do-not-evict",
            ),
            (
                "CronJob/nightly-report",
                "nodeSelectorTerms[0].matchExpressions[0].key: node label key karpenter.sh/provisioner-name",
            ),
            (
                "Pod/migration",
                "metadata.annotations: karpenter.sh/do-not-evict",
            ),
            (
                "Node/ip-192-168-40-30.ec2.internal",
                "karpenter.sh/do-not-consolidate: \"true\" replaced by karpenter.sh/do-not-disrupt",
            ),
        ],
    );
}

#[test]
fn other_objects_and_v1_objects_pass_through_unchanged() {
    let c = check_case("passthrough", &Options::default(), &[]);
    assert_eq!(c.objects, values("passthrough/input.yaml"));
}

#[test]
fn provisioners_with_inline_provider_and_ttls() {
    let options = Options {
        default_role: Some("KarpenterNodeRole-prod".into()),
        ..Options::default()
    };
    check_case(
        "alpha-inline-provider",
        &options,
        &[
            (
                "NodePool/team-a",
                "containerRuntime (\"containerd\") was dropped",
            ),
            (
                "NodePool/team-a",
                "added karpenter.sh/capacity-type In [on-demand]",
            ),
            (
                "NodePool/team-a",
                "inline spec.provider block was converted into EC2NodeClass/team-a",
            ),
            ("NodePool/team-a", "v1 does not adopt the nodes"),
            ("EC2NodeClass/team-a", "alias bottlerocket@latest"),
            ("NodePool/team-b", "added kubernetes.io/arch In [amd64]"),
            (
                "NodePool/team-b",
                "consolidationPolicy WhenEmpty with consolidateAfter Never",
            ),
            ("NodePool/team-b", "v1 does not adopt the nodes"),
            ("EC2NodeClass/pinned", HOP_LIMIT),
        ],
    );
}

#[test]
fn nodeclaims_take_expiry_from_their_nodepool() {
    check_case(
        "nodeclaim-beta",
        &Options::default(),
        &[
            (
                "NodeClaim/default-w6fg6",
                "spec.kubelet ({\"maxPods\":110}) was dropped",
            ),
            (
                "NodeClaim/batch-x2k9d",
                "NodePool/batch is not in the input",
            ),
        ],
    );
}

#[test]
fn output_order_follows_input_with_generated_objects_after_their_source() {
    let c = convert(&read("kubelet-split/input.yaml")).expect("converts");
    let names: Vec<String> = c
        .objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "EC2NodeClass/default",
            "EC2NodeClass/default-batch",
            "EC2NodeClass/default-plain",
            "NodePool/general",
            "NodePool/batch",
            "NodePool/batch-spot",
            "NodePool/plain",
            "NodePool/gpu",
        ]
    );
}

#[test]
fn warnings_display_as_object_colon_message() {
    let w = Warning {
        object: "NodePool/default".into(),
        message: "spec.x: y".into(),
    };
    assert_eq!(w.to_string(), "NodePool/default: spec.x: y");
}

#[test]
fn custom_family_without_terms_is_an_error_naming_file_object_and_field() {
    let e = expect_error("errors/custom-without-terms.yaml", &Options::default());
    assert!(matches!(e, ConvertError::Field { .. }), "{e:?}");
    assert_mentions(
        &e,
        &[
            "custom-without-terms.yaml (document 1)",
            "EC2NodeClass/custom",
            "spec.amiSelectorTerms",
            "amiFamily Custom",
        ],
    );
}

#[test]
fn missing_instance_profile_without_a_default_is_an_error() {
    let e = expect_error("errors/missing-instance-profile.yaml", &Options::default());
    assert_mentions(
        &e,
        &[
            "missing-instance-profile.yaml (document 1)",
            "AWSNodeTemplate/default",
            "spec.instanceProfile",
            "set spec.role or spec.instanceProfile, or pass --default-instance-profile",
        ],
    );
}

#[test]
fn ubuntu_without_terms_asks_to_pin_the_ami() {
    let e = expect_error("errors/ubuntu-without-terms.yaml", &Options::default());
    assert_mentions(
        &e,
        &[
            "EC2NodeClass/ubuntu",
            "spec.amiFamily",
            "pin your Ubuntu EKS AMI by id",
        ],
    );
}

#[test]
fn node_class_ref_to_another_kind_is_an_error() {
    let e = expect_error("errors/nodeclassref-kind.yaml", &Options::default());
    assert_mentions(
        &e,
        &[
            "NodePool/default",
            "spec.template.spec.nodeClassRef.kind",
            "\"MyNodeClass\" is not EC2NodeClass",
        ],
    );
}

#[test]
fn malformed_field_types_are_errors() {
    let e = expect_error("errors/malformed-ttl.yaml", &Options::default());
    assert_mentions(
        &e,
        &[
            "Provisioner/default",
            "spec.ttlSecondsAfterEmpty",
            "expected a whole number of seconds, got the string \"30s\"",
        ],
    );
}

#[test]
fn launch_templates_cannot_be_converted() {
    let e = expect_error("errors/launch-template.yaml", &Options::default());
    assert_mentions(
        &e,
        &[
            "AWSNodeTemplate/legacy",
            "spec.launchTemplate",
            "not supported",
        ],
    );
}

#[test]
fn outputs_the_api_server_would_reject_are_errors_listing_the_problems() {
    let e = expect_error("errors/invalid-output.yaml", &Options::default());
    assert!(matches!(e, ConvertError::Invalid { .. }), "{e:?}");
    assert_mentions(
        &e,
        &[
            "invalid-output.yaml (document 1)",
            "NodePool/default is invalid",
            "spec.template.spec.requirements[0].operator",
            "spec.disruption.consolidateAfter",
        ],
    );
}

#[test]
fn every_failing_object_is_reported() {
    let e = expect_error("errors/several.yaml", &Options::default());
    assert!(
        matches!(&e, ConvertError::Several(list) if list.len() == 2),
        "{e:?}"
    );
    assert_mentions(
        &e,
        &[
            "2 objects could not be converted",
            "several.yaml (document 1): EC2NodeClass/custom: spec.amiSelectorTerms",
            "several.yaml (document 2): NodePool/default: spec.template.spec.nodeClassRef",
        ],
    );
}

#[test]
fn duplicate_output_names_are_errors() {
    let e = expect_error("errors/duplicate.yaml", &Options::default());
    assert_mentions(
        &e,
        &[
            "duplicate.yaml (document 2)",
            "NodePool/default",
            "duplicate.yaml (document 1)",
        ],
    );
}

#[test]
fn both_defaults_at_once_are_rejected() {
    let options = Options {
        default_instance_profile: Some("profile".into()),
        default_role: Some("role".into()),
    };
    let e = convert_with(&read("cluster-autoscaler-alpha/input.yaml"), &options)
        .expect_err("conflicting defaults");
    assert!(matches!(e, ConvertError::ConflictingDefaults), "{e:?}");
}

#[test]
fn unknown_legacy_fields_are_dropped_with_a_warning() {
    let yaml = r#"
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiFamily: AL2023
  role: node
  subnetSelectorTerms: [{tags: {k: v}}]
  securityGroupSelectorTerms: [{tags: {k: v}}]
  metadataOptions: {httpPutResponseHopLimit: 2}
  launchTemplateVersion: "3"
  blockDeviceMappings:
    - deviceName: /dev/xvda
      ebs: {volumeSize: 20Gi, iopsPerGb: 3}
"#;
    let docs = manifest::parse_str(yaml, Path::new("inline.yaml")).expect("parses");
    let c = convert(&docs).expect("converts");
    let spec = &c.objects[0]["spec"];
    assert!(spec.get("launchTemplateVersion").is_none());
    assert!(
        spec["blockDeviceMappings"][0]["ebs"]
            .get("iopsPerGb")
            .is_none()
    );
    for field in [
        "spec.launchTemplateVersion",
        "spec.blockDeviceMappings[0].ebs.iopsPerGb",
    ] {
        assert!(
            c.warnings.iter().any(|w| w
                .message
                .starts_with(&format!("{field} is not part of the v1 API"))),
            "no warning for {field}:\n{}",
            show(&c.warnings)
        );
    }
}

#[test]
fn when_underutilized_with_consolidate_after_keeps_it_and_warns() {
    let yaml = r#"
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef: {name: default}
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
  disruption:
    consolidationPolicy: WhenUnderutilized
    consolidateAfter: 10m
"#;
    let docs = manifest::parse_str(yaml, Path::new("inline.yaml")).expect("parses");
    let c = convert(&docs).expect("converts");
    assert_eq!(
        c.objects[0]["spec"]["disruption"],
        serde_json::json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "10m"})
    );
    assert!(
        c.warnings.iter().any(|w| w
            .message
            .contains("spec.disruption.consolidateAfter (\"10m\") was kept")),
        "{}",
        show(&c.warnings)
    );
}
