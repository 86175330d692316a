//! Workload expansion: the pods (and StatefulSet PVCs) Deployments, ReplicaSets, StatefulSets and
//! Jobs would create, named and owned as their controllers name and own them.

use super::*;
use crate::snapshot::take_binding;

impl Loader {
    /// A name from `prefix` plus a 5-character suffix, as `generateName` gives, hashed from
    /// `seed` and unique among the pods of the namespace.
    pub(super) fn generate_pod_name(
        &mut self,
        namespace: &str,
        prefix: &str,
        seed: &str,
    ) -> String {
        let prefix = truncate(prefix, MAX_PREFIX_LEN);
        let mut attempt = 0u32;
        loop {
            let h = hash(&[
                b"pod",
                namespace.as_bytes(),
                prefix.as_bytes(),
                seed.as_bytes(),
                &attempt.to_be_bytes(),
            ]);
            let name = format!("{prefix}{}", encode(h, SUFFIX_LEN));
            if self.pod_names.insert((namespace.to_owned(), name.clone())) {
                return name;
            }
            attempt += 1;
        }
    }

    pub(super) fn push_pod(&mut self, mut pod: ClusterPod) {
        settle_object_meta(&mut pod.metadata, "Pod", true, &self.now);
        self.cluster.pods.push(Arc::new(pod));
    }

    /// Deployment → its current ReplicaSet `<deployment>-<pod-template-hash>` → its pods.
    pub(super) fn expand_deployment(&mut self, d: &Deployment) {
        let Some(spec) = &d.spec else { return };
        let template_hash = encode(
            hash(&[
                b"pod-template-hash",
                &serde_json::to_vec(&spec.template).unwrap_or_default(),
            ]),
            10,
        );
        let namespace = namespace_of(&d.metadata);
        let rs_name = format!(
            "{}-{template_hash}",
            d.metadata.name.as_deref().unwrap_or_default()
        );
        let owner =
            controller_ref::<ReplicaSet>(&rs_name, uid_for("ReplicaSet", namespace, &rs_name));
        let created = created_of(&d.metadata, &self.now);
        let labels = [("pod-template-hash".to_owned(), template_hash)];
        self.replica_pods(
            namespace,
            &owner,
            &spec.template,
            spec.replicas,
            &labels,
            &created,
        );
    }

    pub(super) fn expand_replicaset(&mut self, rs: &ReplicaSet) {
        let Some(spec) = &rs.spec else { return };
        let Some(template) = &spec.template else {
            return;
        };
        let namespace = namespace_of(&rs.metadata);
        let owner = own_controller_ref::<ReplicaSet>(&rs.metadata);
        let created = created_of(&rs.metadata, &self.now);
        self.replica_pods(namespace, &owner, template, spec.replicas, &[], &created);
    }

    /// `replicas` (default 1) interchangeable pods `<owner>-<suffix>`, as a ReplicaSet creates.
    pub(super) fn replica_pods(
        &mut self,
        namespace: &str,
        owner: &OwnerReference,
        template: &PodTemplateSpec,
        replicas: Option<i32>,
        labels: &[(String, String)],
        created: &Time,
    ) {
        let prefix = format!("{}-", owner.name);
        let shared = SharedTemplate::new(template, created);
        for i in 0..replicas.unwrap_or(1) {
            let name = self.generate_pod_name(namespace, &prefix, &i.to_string());
            let mut pod = shared.pod(namespace, name, owner);
            pod.metadata.generate_name = Some(prefix.clone());
            extend(&mut pod.metadata.labels, labels);
            self.push_pod(pod);
        }
    }

    /// StatefulSet → pods `<sts>-<ordinal>` with stable hostnames, and a PVC
    /// `<template>-<sts>-<ordinal>` per volumeClaimTemplate (unless one already exists).
    pub(super) fn expand_statefulset(&mut self, sts: &StatefulSet, default_class: Option<&str>) {
        let Some(spec) = &sts.spec else { return };
        let namespace = namespace_of(&sts.metadata);
        let name = sts.metadata.name.as_deref().unwrap_or_default();
        let owner = own_controller_ref::<StatefulSet>(&sts.metadata);
        let created = created_of(&sts.metadata, &self.now);
        let revision = format!(
            "{name}-{}",
            encode(
                hash(&[
                    b"controller-revision-hash",
                    &serde_json::to_vec(&spec.template).unwrap_or_default()
                ]),
                10
            )
        );
        let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0);
        let claims = spec.volume_claim_templates.as_deref().unwrap_or_default();
        let shared = SharedTemplate::new(&spec.template, &created);
        let existing_claims: HashSet<(String, String)> = self
            .cluster
            .persistent_volume_claims
            .iter()
            .map(|c| {
                (
                    namespace_of(&c.metadata).to_owned(),
                    c.metadata.name.clone().unwrap_or_default(),
                )
            })
            .collect();
        for ordinal in (0..spec.replicas.unwrap_or(1)).map(|i| start.saturating_add(i)) {
            let pod_name = format!("{name}-{ordinal}");
            let mut volumes = Vec::new();
            for claim in claims {
                let template_name = claim.metadata.name.as_deref().unwrap_or_default();
                let claim_name = format!("{template_name}-{pod_name}");
                volumes.push(Volume {
                    name: template_name.to_owned(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: claim_name.clone(),
                        read_only: None,
                    }),
                    ..Volume::default()
                });
                if !existing_claims.contains(&(namespace.to_owned(), claim_name.clone())) {
                    let pvc = claim_from_template(
                        namespace,
                        claim_name,
                        claim,
                        &spec.selector,
                        &created,
                        default_class,
                    );
                    self.cluster.persistent_volume_claims.push(Arc::new(pvc));
                }
            }
            // A pod of that name in the input is this ordinal, already created.
            if !self
                .pod_names
                .insert((namespace.to_owned(), pod_name.clone()))
            {
                continue;
            }
            let mut pod = shared.pod(namespace, pod_name.clone(), &owner);
            extend(
                &mut pod.metadata.labels,
                &[
                    (
                        "statefulset.kubernetes.io/pod-name".to_owned(),
                        pod_name.clone(),
                    ),
                    (
                        "apps.kubernetes.io/pod-index".to_owned(),
                        ordinal.to_string(),
                    ),
                    ("controller-revision-hash".to_owned(), revision.clone()),
                ],
            );
            // Each ordinal has its own hostname and claims, so its own spec.
            let pod_spec = Arc::make_mut(&mut pod.spec);
            pod_spec.hostname = Some(pod_name);
            pod_spec.subdomain = spec.service_name.clone().filter(|s| !s.is_empty());
            let pod_volumes = pod_spec.volumes.get_or_insert_default();
            pod_volumes.retain(|v| !volumes.iter().any(|c| c.name == v.name));
            pod_volumes.extend(volumes);
            self.push_pod(pod);
        }
    }

    /// Job → the pods running at once: `parallelism` (default 1), at most `completions`, none
    /// while suspended. Indexed Jobs name pods `<job>-<index>-<suffix>`.
    pub(super) fn expand_job(&mut self, job: &Job) {
        let Some(spec) = &job.spec else { return };
        let count = super::checks::job_pods(spec);
        let namespace = namespace_of(&job.metadata);
        let name = job.metadata.name.as_deref().unwrap_or_default();
        let owner = own_controller_ref::<Job>(&job.metadata);
        let created = created_of(&job.metadata, &self.now);
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        let shared = SharedTemplate::new(&spec.template, &created);
        let labels = [
            (
                "batch.kubernetes.io/controller-uid".to_owned(),
                owner.uid.clone(),
            ),
            ("batch.kubernetes.io/job-name".to_owned(), name.to_owned()),
            ("controller-uid".to_owned(), owner.uid.clone()),
            ("job-name".to_owned(), name.to_owned()),
        ];
        for i in 0..count {
            let prefix = if indexed {
                format!("{name}-{i}-")
            } else {
                format!("{name}-")
            };
            let pod_name = self.generate_pod_name(namespace, &prefix, &i.to_string());
            let mut pod = shared.pod(namespace, pod_name, &owner);
            pod.metadata.generate_name = Some(prefix);
            extend(&mut pod.metadata.labels, &labels);
            if indexed {
                let index = [(
                    "batch.kubernetes.io/job-completion-index".to_owned(),
                    i.to_string(),
                )];
                extend(&mut pod.metadata.labels, &index);
                extend(&mut pod.metadata.annotations, &index);
                Arc::make_mut(&mut pod.spec)
                    .hostname
                    .get_or_insert_with(|| format!("{name}-{i}"));
            }
            self.push_pod(pod);
        }
    }
}

/// What the pods a controller stamps from one template have in common: the spec and the
/// status they start with, built once and shared.
struct SharedTemplate<'a> {
    template: &'a PodTemplateSpec,
    created: &'a Time,
    spec: Arc<PodSpec>,
    /// The template's `nodeName`, which binds every pod stamped from it.
    bound_to: Option<String>,
    status: Arc<PodStatus>,
}

impl<'a> SharedTemplate<'a> {
    pub(super) fn new(template: &'a PodTemplateSpec, created: &'a Time) -> Self {
        let mut spec = template.spec.clone().unwrap_or_default();
        let status = settled_status(&spec, Some(created));
        let bound_to = take_binding(&mut spec);
        Self {
            template,
            created,
            spec: Arc::new(spec),
            bound_to,
            status: Arc::new(status),
        }
    }

    /// A pod as a controller stamps it from the template.
    pub(super) fn pod(&self, namespace: &str, name: String, owner: &OwnerReference) -> ClusterPod {
        let template_meta = self.template.metadata.as_ref();
        ClusterPod {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace.to_owned()),
                labels: template_meta.and_then(|m| m.labels.clone()),
                annotations: template_meta.and_then(|m| m.annotations.clone()),
                owner_references: Some(vec![owner.clone()]),
                creation_timestamp: Some(self.created.clone()),
                ..ObjectMeta::default()
            },
            spec: self.spec.clone(),
            bound_to: self.bound_to.clone(),
            status: Some(self.status.clone()),
            converted: Default::default(),
        }
    }
}

/// The PVC a StatefulSet creates from a volumeClaimTemplate: unbound, labelled with the set's
/// selector so it can be found again.
fn claim_from_template(
    namespace: &str,
    name: String,
    template: &PersistentVolumeClaim,
    selector: &LabelSelector,
    created: &Time,
    default_class: Option<&str>,
) -> PersistentVolumeClaim {
    let mut labels = template.metadata.labels.clone().unwrap_or_default();
    labels.extend(selector.match_labels.clone().unwrap_or_default());
    let mut pvc = PersistentVolumeClaim {
        metadata: ObjectMeta {
            uid: Some(uid_for("PersistentVolumeClaim", namespace, &name)),
            name: Some(name),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: template.metadata.annotations.clone(),
            creation_timestamp: Some(created.clone()),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
            phase: Some("Pending".to_owned()),
            ..Default::default()
        }),
    };
    apply_default_class(&mut pvc, default_class);
    pvc
}

/// The class the DefaultStorageClass admission plugin assigns: of those annotated default, the
/// newest (ties: first by name).
pub(super) fn default_storage_class(classes: &[Arc<StorageClass>]) -> Option<String> {
    classes
        .iter()
        .filter(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true")
        })
        .max_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
                .then_with(|| b.metadata.name.cmp(&a.metadata.name))
        })
        .and_then(|c| c.metadata.name.clone())
}

/// Sets the default class on a claim that names none (an explicit `""` means "no class").
pub(super) fn apply_default_class(pvc: &mut PersistentVolumeClaim, default_class: Option<&str>) {
    let Some(class) = default_class else { return };
    let legacy = pvc
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(BETA_CLASS_ANNOTATION));
    if let Some(spec) = pvc.spec.as_mut()
        && spec.storage_class_name.is_none()
        && !legacy
    {
        spec.storage_class_name = Some(class.to_owned());
    }
}
