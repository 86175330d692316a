//! `instanceStorePolicy: RAID0` in `simulate`: a pod asking for more ephemeral storage than the
//! root volume holds fits only an instance type whose striped NVMe instance store is big enough,
//! and only when the node class asks for RAID0 (upstream's instance-type capacity).

use std::path::Path;

use karpenter_rs::catalog::Catalog;
use karpenter_rs::manifest;
use karpenter_rs::simulate::{self, Report};
use karpenter_rs::snapshot::EngineOptions;

fn nodeclass(extra_spec: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: c}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: c}}}}]
{extra_spec}
"#
    )
}

const NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
"#;

const SCRATCH_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: scratch, namespace: batch}
spec:
  containers:
    - name: c
      image: busybox
      resources: {requests: {cpu: "1", memory: 1Gi, ephemeral-storage: 500Gi}}
"#;

fn run(nodeclass_extra: &str) -> Report {
    let text = [
        nodeclass(nodeclass_extra),
        NODEPOOL.into(),
        SCRATCH_POD.into(),
    ]
    .join("\n---\n");
    let parsed = manifest::parse_str(&text, Path::new("test.yaml")).expect("YAML parses");
    let cluster = manifest::load(&parsed, chrono::Utc::now()).unwrap_or_else(|e| panic!("{e}"));
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    simulate::simulate(&cluster, &catalog, &EngineOptions::default())
}

#[test]
fn a_500gi_scratch_pod_fits_an_instance_store_type_only_with_raid0() {
    let without = run("");
    assert!(without.nodeclaims.is_empty(), "{:#?}", without.nodeclaims);
    assert_eq!(
        without.unschedulable.len(),
        1,
        "{:#?}",
        without.unschedulable
    );
    assert_eq!(without.unschedulable[0].pod, "batch/scratch");

    let with = run("  instanceStorePolicy: RAID0");
    assert!(with.unschedulable.is_empty(), "{:#?}", with.unschedulable);
    assert_eq!(with.nodeclaims.len(), 1);
    let claim = &with.nodeclaims[0];
    assert_eq!(claim.pods, ["batch/scratch"]);
    let catalog = Catalog::bundled("us-east-1").expect("catalog");
    let nvme_gb = |name: &str| {
        catalog
            .infos()
            .find(|i| i.name == name)
            .map(|i| i.local_nvme_gb)
            .unwrap_or_else(|| panic!("{name} is in the catalog"))
    };
    // 500Gi, plus 1Gi kube-reserved, must fit in 90% of the array (10% eviction threshold).
    let needed = (501u64 << 30) as f64 / 0.9 / 1e9;
    for name in claim.instance_type_options.iter() {
        let gb = nvme_gb(name);
        assert!(
            gb as f64 >= needed,
            "{name} has {gb} GB of instance store, under the {needed:.0} GB the pod needs"
        );
    }
    assert!(
        nvme_gb(&claim.instance_type) > 0,
        "{} has no instance store",
        claim.instance_type
    );
}
