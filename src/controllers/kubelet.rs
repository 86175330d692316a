//! A stand-in kubelet for the simulated cloud: when a simulated instance exists for a NodeClaim,
//! register its Node the way a booting kubelet would (labels and taints from the launch,
//! including `karpenter.sh/unregistered`; capacity, allocatable; Ready), and keep its node Lease
//! renewed so kube-controller-manager does not mark it unreachable. kube-scheduler then binds
//! pods to these Nodes as to real ones.
//!
//! Nodes made here carry [`SIMULATED_ANNOTATION`], which also lets a restarted controller find
//! the instances its simulated cloud had launched.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint as K8sTaint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::apis::labels;
use crate::apis::{EC2NodeClass, NodeClaim};
use crate::cloudprovider::simulated::{SimulatedProvider, os_image};
use crate::cloudprovider::{Instance, InstanceState, provider_id_instance};
use crate::runtime::Context;
use crate::runtime::panics::guarded_pass;
use crate::scheduling::instance_type::CapacityType;

/// Annotation on Nodes the stand-in kubelet registered.
pub const SIMULATED_ANNOTATION: &str = "karpenter-rs.sh/simulated-instance";
/// The namespace of node heartbeat Leases.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// How often node Leases are renewed (a real kubelet: every 10 s).
const HEARTBEAT: Duration = Duration::from_secs(10);
/// Lease renewals in flight at once. Real kubelets renew independently; one at a time, a few
/// hundred Nodes on a loaded API server took longer than the Lease's 40 s, so
/// kube-controller-manager marked them NotReady and evicted their pods.
const RENEWALS_AT_ONCE: usize = 32;

/// The Node name EC2 would give an instance: `ip-a-b-c-d.<region>.compute.internal`, with an
/// address derived from the instance ID.
pub fn node_name(provider_id: &str, region: &str) -> String {
    let serial = provider_id_instance(provider_id)
        .and_then(|id| id.strip_prefix("i-"))
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .unwrap_or(0);
    let [a, b, c] = [(serial >> 16) & 0xff, (serial >> 8) & 0xff, serial & 0xff];
    format!("ip-10-{a}-{b}-{c}.{region}.compute.internal")
}

/// The Node a kubelet on this instance registers.
pub fn node_for(claim: &NodeClaim, nodeclass: Option<&EC2NodeClass>, region: &str) -> Option<Node> {
    let status = claim.status.as_ref()?;
    let provider_id = status.provider_id.clone()?;
    let name = node_name(&provider_id, region);
    let mut node_labels: BTreeMap<String, String> = claim.labels().clone();
    node_labels.insert(labels::HOSTNAME.into(), name.clone());
    node_labels.insert(labels::REGION.into(), region.into());
    let mut taints = vec![K8sTaint {
        key: labels::UNREGISTERED_TAINT_KEY.into(),
        value: None,
        effect: "NoExecute".into(),
        time_added: None,
    }];
    for t in claim.spec.taints.iter().chain(&claim.spec.startup_taints) {
        taints.push(K8sTaint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.as_str().into(),
            time_added: None,
        });
    }
    let now = Time(Timestamp::now());
    let arch = node_labels
        .get(labels::ARCH)
        .cloned()
        .unwrap_or_else(|| "amd64".into());
    let serial = name
        .trim_start_matches("ip-")
        .split('.')
        .next()
        .unwrap_or_default()
        .replace('-', ".");
    Some(Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(node_labels),
            annotations: Some(BTreeMap::from([(
                SIMULATED_ANNOTATION.to_string(),
                claim.name_any(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(provider_id),
            taints: Some(taints),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            capacity: status.capacity.clone(),
            allocatable: status.allocatable.clone(),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                message: Some("kubelet is posting ready status (simulated)".into()),
                last_heartbeat_time: Some(now.clone()),
                last_transition_time: Some(now),
            }]),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: serial,
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: name,
                },
            ]),
            node_info: Some(NodeSystemInfo {
                architecture: arch,
                operating_system: "linux".into(),
                os_image: nodeclass
                    .map(os_image)
                    .unwrap_or("Amazon Linux 2023")
                    .into(),
                kubelet_version: "v1.20.2".into(),
                kube_proxy_version: "v1.20.2".into(),
                container_runtime_version: "containerd://1.7.0".into(),
                kernel_version: "6.1.0".into(),
                boot_id: String::new(),
                machine_id: String::new(),
                system_uuid: String::new(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    })
}

/// Re-registers, after a restart, the instances the simulated cloud had launched (they live on
/// as NodeClaims' provider IDs and Nodes), so launches stay idempotent.
pub fn adopt_instances(cloud: &SimulatedProvider, claims: &[Arc<NodeClaim>]) {
    for claim in claims {
        let Some(id) = claim.status.as_ref().and_then(|s| s.provider_id.clone()) else {
            continue;
        };
        let l = claim.labels();
        cloud.adopt(Instance {
            provider_id: id,
            nodeclaim: Some(claim.name_any()),
            nodepool: l.get(labels::NODEPOOL).cloned(),
            instance_type: l.get(labels::INSTANCE_TYPE).cloned().unwrap_or_default(),
            zone: l.get(labels::ZONE).cloned().unwrap_or_default(),
            capacity_type: l
                .get(labels::CAPACITY_TYPE)
                .and_then(|c| CapacityType::from_label(c))
                .unwrap_or(CapacityType::OnDemand),
            image_id: claim.status.as_ref().and_then(|s| s.image_id.clone()),
            // Not recorded on the NodeClaim: unknown after a restart, so never a drift verdict.
            subnet_id: None,
            security_groups: None,
            placement_group: None,
            capacity_reservation_id: l
                .get(labels::CAPACITY_TYPE)
                .filter(|c| *c == labels::CAPACITY_TYPE_RESERVED)
                .and_then(|_| l.get(labels::CAPACITY_RESERVATION_ID).cloned()),
            state: InstanceState::Running,
            launch_time: claim
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(|t| chrono::DateTime::from_timestamp(t.0.as_second(), 0))
                .unwrap_or_else(chrono::Utc::now),
        });
    }
}

/// Runs the stand-in kubelet: registers Nodes for running simulated instances and renews their
/// Leases.
pub async fn run(ctx: Arc<Context>, cloud: Arc<SimulatedProvider>, region: String) {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), NODE_LEASE_NAMESPACE);
    let mut last_heartbeat = tokio::time::Instant::now() - HEARTBEAT;
    loop {
        let pass = async {
            let running: Vec<String> = cloud
                .instances()
                .into_iter()
                .filter(|i| i.state == InstanceState::Running)
                .map(|i| i.provider_id)
                .collect();
            for claim in ctx.state.nodeclaims.state() {
                let Some(id) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) else {
                    continue;
                };
                if !running.iter().any(|r| r == id) || claim.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let name = node_name(id, &region);
                if ctx.state.nodes.get(&ObjectRef::new(&name)).is_some() {
                    continue;
                }
                let class = ctx
                    .state
                    .nodeclasses
                    .get(&ObjectRef::new(&claim.spec.node_class_ref.name));
                let Some(node) = node_for(&claim, class.as_deref(), &region) else {
                    continue;
                };
                match nodes.create(&PostParams::default(), &node).await {
                    Ok(_) => {
                        tracing::info!(controller = "kubelet.simulated", node = %name, nodeclaim = %claim.name_any(), "node registered")
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => tracing::warn!(node = %name, error = %e, "could not register node"),
                }
            }
            if last_heartbeat.elapsed() >= HEARTBEAT {
                last_heartbeat = tokio::time::Instant::now();
                let ours = ctx.state.nodes.state().into_iter().filter(|node| {
                    node.annotations().contains_key(SIMULATED_ANNOTATION)
                        && node.metadata.deletion_timestamp.is_none()
                });
                stream::iter(ours)
                    .for_each_concurrent(RENEWALS_AT_ONCE, |node| {
                        let leases = &leases;
                        async move {
                            if let Err(e) = renew_lease(leases, &node).await {
                                tracing::debug!(node = %node.name_any(), error = %e, "lease renewal failed");
                            }
                        }
                    })
                    .await;
            }
        };
        guarded_pass("kubelet", &ctx, pass).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn renew_lease(leases: &Api<Lease>, node: &Node) -> Result<(), kube::Error> {
    let name = node.name_any();
    let now = MicroTime(Timestamp::now());
    let patch =
        json!({"spec": {"renewTime": now, "holderIdentity": name, "leaseDurationSeconds": 40}});
    match leases
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(NODE_LEASE_NAMESPACE.into()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: name.clone(),
                        uid: node.meta().uid.clone().unwrap_or_default(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name),
                    lease_duration_seconds: Some(40),
                    renew_time: Some(now),
                    ..Default::default()
                }),
            };
            leases
                .create(&PostParams::default(), &lease)
                .await
                .map(|_| ())
        }
        Err(e) => Err(e),
    }
}
