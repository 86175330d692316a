//! What the caches keep of an object: the fields the controllers and the core read, nothing
//! else. A pod as the API serves it is mostly what the kubelet needs (images, commands,
//! environment, mounts, probes) and what it reports (container statuses); at 20,000 pods that
//! is most of the controller's memory. Trimming happens once, as the watch delivers an object, so
//! the stores, the snapshots (which share the stores' objects) and the core see the same trimmed
//! objects.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::{Container, Node, PodCondition, PodSpec, PodStatus};
use kube::Resource;

use crate::scheduling::pod_shapes::PodShapes;
use crate::snapshot::ClusterPod;

/// The annotation `kubectl apply` writes: a full copy of the object as applied.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops the metadata no controller reads: `managedFields` (often the largest part of an
/// object) and `kubectl apply`'s copy of the object.
pub fn metadata<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// The pod conditions anything here reads: whether the pod was found unschedulable, and when it
/// became ready (metrics).
const READ_CONDITIONS: [&str; 2] = ["PodScheduled", "Ready"];

/// Keeps of a pod what scheduling, disruption and draining read: its metadata (but its
/// `generateName` and `resourceVersion`), the scheduling parts of its spec (requests and
/// overhead, host ports, sidecars' restart policy, node selection, affinity, tolerations,
/// spread, priority, the volumes that are claims, DRA claims, the grace period) and the phase,
/// the [`READ_CONDITIONS`] (type, status, reason, transition time), start time and nominated
/// node of its status.
pub fn pod(pod: &mut ClusterPod) {
    metadata(pod);
    // Nothing reads a cached pod's generateName or resourceVersion (deletes and evictions are
    // conditioned on the UID): two strings per pod.
    pod.metadata.generate_name = None;
    pod.metadata.resource_version = None;
    {
        // Just read from the API, the spec and status are not shared yet: no copy is made.
        let spec = Arc::make_mut(&mut pod.spec);
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            container(c);
        }
        spec.ephemeral_containers = None;
        if let Some(volumes) = spec.volumes.as_mut() {
            volumes.retain(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
        }
        spec.image_pull_secrets = None;
        spec.host_aliases = None;
        spec.dns_config = None;
        spec.readiness_gates = None;
        spec.security_context = None;
    }
    if let Some(status) = pod.status.as_mut().map(Arc::make_mut) {
        *status = PodStatus {
            phase: status.phase.take(),
            conditions: status.conditions.take().map(|conditions| {
                conditions
                    .into_iter()
                    .filter(|c| READ_CONDITIONS.contains(&c.type_.as_str()))
                    .map(|c| PodCondition {
                        type_: c.type_,
                        status: c.status,
                        reason: c.reason,
                        last_transition_time: c.last_transition_time,
                        ..PodCondition::default()
                    })
                    .collect()
            }),
            start_time: status.start_time.take(),
            nominated_node_name: status.nominated_node_name.take(),
            ..PodStatus::default()
        };
    }
}

/// Trims pods ([`pod`]) and has the pods of one controller (a ReplicaSet, a Job) share one
/// spec when their trimmed specs are equal, as they are for replicas once the per-pod parts
/// (the binding, the service-account token volume) are gone: at 20,000 pods from a hundred
/// Deployments that keeps a hundred specs instead of 20,000. A pod whose spec differs (a
/// StatefulSet's hostname, a resized pod) keeps its own. Trimmed statuses are shared the same
/// way: replicas created, scheduled or started in the same second have equal ones. Each pod is
/// then converted for the scheduler, once, sharing its shape with its siblings'
/// ([`PodShapes`]).
#[derive(Default)]
pub struct SharedSpecs {
    /// The last spec and status seen per controller UID; an entry lives as long as a pod holds
    /// the spec.
    by_owner: HashMap<String, Siblings>,
    /// Entries added since dead ones were last dropped.
    added: usize,
    /// The scheduler's view of the pods, shared per spec and labels.
    shapes: PodShapes,
}

/// What the last pod of one controller had, for the next one to share.
struct Siblings {
    spec: Weak<PodSpec>,
    status: Weak<PodStatus>,
}

/// Dead entries are dropped once this many, or as many as the table holds, were added.
const SHARED_SPECS_PRUNE_AFTER: usize = 1024;

impl SharedSpecs {
    /// Trims `p`, shares its spec and status with its siblings' and converts it. The converted
    /// pod holds the labels and annotations (one map per distinct value, shared by siblings),
    /// so the metadata's own copies go ([`ClusterPod::labels`] reads them): at 20,000 pods
    /// they were ~12 MB. A pod that does not convert keeps them.
    pub fn trim(&mut self, p: &mut ClusterPod) {
        pod(p);
        self.share(p);
        p.convert_with(&mut self.shapes);
        if p.scheduling_pod().is_ok() {
            p.metadata.labels = None;
            p.metadata.annotations = None;
        }
    }

    /// Gives `p` its controller's last spec and status where they are equal to its own, and
    /// makes its own the ones the next sibling is compared with where they are not.
    fn share(&mut self, p: &mut ClusterPod) {
        let Some(owner) = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
        else {
            return;
        };
        let status = p.status.as_ref().map_or_else(Weak::new, Arc::downgrade);
        let Some(last) = self.by_owner.get_mut(&owner.uid) else {
            self.by_owner.insert(
                owner.uid.clone(),
                Siblings {
                    spec: Arc::downgrade(&p.spec),
                    status,
                },
            );
            self.added += 1;
            if self.added >= self.by_owner.len().max(SHARED_SPECS_PRUNE_AFTER) {
                self.by_owner.retain(|_, last| last.spec.strong_count() > 0);
                self.added = 0;
            }
            return;
        };
        match last.spec.upgrade() {
            Some(shared) if *shared == *p.spec => p.spec = shared,
            _ => last.spec = Arc::downgrade(&p.spec),
        }
        if let Some(own) = p.status.as_mut() {
            match last.status.upgrade() {
                Some(shared) if *shared == **own => *own = shared,
                _ => last.status = status,
            }
        }
    }
}

/// A container reduced to its name, resources, ports and restart policy.
fn container(c: &mut Container) {
    *c = Container {
        name: std::mem::take(&mut c.name),
        resources: c.resources.take(),
        ports: c.ports.take(),
        restart_policy: c.restart_policy.take(),
        ..Container::default()
    };
}

/// Keeps of a node all but the images its kubelet reports (often dozens of long names) and the
/// volume attachment lists, which nothing here reads.
pub fn node(node: &mut Node) {
    metadata(node);
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::scheduling::pod::Pod as ScheduledPod;

    fn served_pod() -> ClusterPod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u1",
                "labels": {"app": "web"},
                "annotations": {
                    "karpenter.sh/do-not-disrupt": "true",
                    LAST_APPLIED: "{\"a\": \"huge copy\"}",
                },
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "r", "controller": true}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}],
            },
            "spec": {
                "nodeName": "node-a",
                "priority": 100,
                "terminationGracePeriodSeconds": 45,
                "nodeSelector": {"kubernetes.io/arch": "amd64"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}],
                "containers": [{
                    "name": "app", "image": "registry/app:1", "command": ["/app"], "args": ["--serve"],
                    "env": [{"name": "A", "value": "b"}],
                    "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets"}],
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                    "ports": [{"containerPort": 8080, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
                }],
                "initContainers": [{"name": "proxy", "image": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}],
                "volumes": [
                    {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}},
                ],
            },
            "status": {
                "phase": "Running",
                "startTime": "2026-11-25T10:00:00Z",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "message": "long text", "lastTransitionTime": "2026-11-25T10:00:00Z"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "Ready", "status": "True", "lastProbeTime": null},
                ],
                "qosClass": "Burstable",
                "hostIP": "10.0.0.9",
                "containerStatuses": [{"name": "app", "image": "registry/app:1", "imageID": "sha256:x", "ready": true, "restartCount": 0}],
                "podIPs": [{"ip": "10.0.0.1"}],
            },
        }))
        .map(|pod: Pod| pod.into())
        .expect("pod")
    }

    #[test]
    fn a_trimmed_pod_schedules_and_drains_as_the_served_one() {
        let served = served_pod();
        let mut trimmed = served.clone();
        pod(&mut trimmed);
        let as_scheduled = |p: &ClusterPod| {
            let pod = ScheduledPod::from_parts(&p.metadata, &p.spec).expect("pod");
            format!("{pod:?}")
        };
        let mut without_last_applied = served.clone();
        metadata(&mut without_last_applied);
        assert_eq!(as_scheduled(&trimmed), as_scheduled(&without_last_applied));
        let spec = &trimmed.spec;
        assert_eq!(spec.termination_grace_period_seconds, Some(45));
        assert_eq!(trimmed.node_name(), Some("node-a"));
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(
            volumes,
            ["data"],
            "only claims matter for zones and attach limits"
        );
        let app = &spec.containers[0];
        assert!(app.image.is_none() && app.env.is_none() && app.liveness_probe.is_none());
        assert!(app.resources.is_some() && app.ports.is_some());
        let status = trimmed.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.start_time.is_some());
        assert!(status.container_statuses.is_none());
        let conditions: Vec<(&str, &str, bool, bool)> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| {
                (
                    c.type_.as_str(),
                    c.status.as_str(),
                    c.last_transition_time.is_some(),
                    c.message.is_some(),
                )
            })
            .collect();
        assert_eq!(
            conditions,
            [
                ("PodScheduled", "True", true, false),
                ("Ready", "True", false, false)
            ]
        );
        assert!(status.qos_class.is_none() && status.host_ip.is_none());
        assert!(trimmed.metadata.managed_fields.is_none());
        let annotations = trimmed.metadata.annotations.as_ref().expect("annotations");
        assert!(annotations.contains_key("karpenter.sh/do-not-disrupt"));
        assert!(!annotations.contains_key(LAST_APPLIED));
        let size = |p: &ClusterPod| {
            let (spec, status) = (p.spec.as_ref().clone(), p.status.as_deref().cloned());
            let pod = Pod {
                metadata: p.metadata.clone(),
                spec: Some(spec),
                status,
            };
            serde_json::to_string(&pod).map_or(0, |s| s.len())
        };
        assert!(
            size(&trimmed) * 3 < size(&served) * 2,
            "{} vs {}",
            size(&trimmed),
            size(&served)
        );
    }

    #[test]
    fn replicas_share_one_spec_and_a_different_one_is_kept() {
        let mut shared = SharedSpecs::default();
        let mut replica = |name: &str, node: &str, owner: &str| {
            let mut p = served_pod();
            p.metadata.name = Some(name.into());
            p.bound_to = Some(node.into());
            if let Some(o) = p
                .metadata
                .owner_references
                .as_mut()
                .and_then(|o| o.first_mut())
            {
                o.uid = owner.into();
            }
            shared.trim(&mut p);
            p
        };
        let (a, b) = (
            replica("web-1", "node-a", "r"),
            replica("web-2", "node-b", "r"),
        );
        assert!(Arc::ptr_eq(&a.spec, &b.spec), "replicas share the spec");
        assert!(
            a.metadata.labels.is_none() && a.metadata.annotations.is_none(),
            "the converted pod holds them"
        );
        assert_eq!(a.labels().get("app").map(String::as_str), Some("web"));
        assert_eq!(
            a.annotations()
                .get("karpenter.sh/do-not-disrupt")
                .map(String::as_str),
            Some("true")
        );
        let status = |p: &ClusterPod| p.status.clone().expect("a status");
        assert!(Arc::ptr_eq(&status(&a), &status(&b)), "and an equal status");
        assert_eq!(
            (a.node_name(), b.node_name()),
            (Some("node-a"), Some("node-b"))
        );
        let other = replica("web-3", "node-a", "another-replicaset");
        assert!(!Arc::ptr_eq(&a.spec, &other.spec), "only within one owner");
        let scheduled = |p: &ClusterPod| p.scheduling_pod().expect("converts").clone();
        let (sa, sb) = (scheduled(&a), scheduled(&b));
        assert!(
            Arc::ptr_eq(&sa.shape, &sb.shape) && Arc::ptr_eq(&sa.labels, &sb.labels),
            "replicas are converted once and share the scheduler's view of their spec"
        );
        assert_eq!((&*sa.name, &*sb.name), ("web-1", "web-2"));
        assert!(!Arc::ptr_eq(&sa.shape, &scheduled(&other).shape));
        assert!(
            Arc::ptr_eq(&sa.labels, &scheduled(&other).labels),
            "equal labels are kept once"
        );

        let mut resized = served_pod();
        Arc::make_mut(&mut resized.spec).priority = Some(1);
        shared.trim(&mut resized);
        assert!(!Arc::ptr_eq(&a.spec, &resized.spec));
        assert_eq!(
            resized.spec.priority,
            Some(1),
            "a different spec is its own"
        );
        assert_eq!(scheduled(&resized).priority, 1, "and so is its shape");
        assert!(
            Arc::ptr_eq(&status(&a), &status(&resized)),
            "its status is still its siblings'"
        );
        let mut resized_too = served_pod();
        Arc::make_mut(&mut resized_too.spec).priority = Some(1);
        shared.trim(&mut resized_too);
        assert!(
            Arc::ptr_eq(&resized.spec, &resized_too.spec),
            "the latest spec of an owner is the one shared"
        );
        let mut started_later = served_pod();
        if let Some(s) = started_later.status.as_mut() {
            Arc::make_mut(s).start_time = None;
        }
        shared.trim(&mut started_later);
        assert!(!Arc::ptr_eq(&status(&a), &status(&started_later)));
        assert_eq!(status(&started_later).start_time, None);
    }
}
