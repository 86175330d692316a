//! The loader's checks of workloads, pod specs and quantities, reported with the field path as
//! the API server would.

use k8s_openapi::api::batch::v1::JobSpec;

use super::*;

impl Loader {
    pub(super) fn check_replicas(&mut self, at: &At, path: &str, value: Option<i32>) -> bool {
        match value {
            Some(n) if n < 0 => {
                self.problem(
                    at,
                    path,
                    format!("Invalid value: {n}: must be greater than or equal to 0"),
                );
                false
            }
            _ => true,
        }
    }

    /// Counts `count` more pods (set by the field at `path`, empty for a Pod) towards
    /// [`MAX_PODS`], or reports the object that takes the input past it.
    pub(super) fn plan_pods(&mut self, at: &At, path: &str, count: i32) -> bool {
        let count = usize::try_from(count).unwrap_or(0);
        let total = self.planned_pods.saturating_add(count);
        if total > MAX_PODS {
            let fix = if path.is_empty() {
                "remove pods or simulate the input in parts".to_owned()
            } else {
                format!("lower {path} or simulate the workloads in parts")
            };
            self.problem(
                at,
                path,
                format!(
                    "Too many: {count} pods would make {total} in the input, more than the \
                     {MAX_PODS} simulate reads ({} before this object); {fix}",
                    self.planned_pods
                ),
            );
            return false;
        }
        self.planned_pods = total;
        true
    }

    /// Checks what the API server checks of a workload's selector: present, valid, and
    /// selecting the pods of its own template (otherwise the controller could never count them).
    pub(super) fn check_selector(
        &mut self,
        at: &At,
        kind: &str,
        selector: &LabelSelector,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let empty = selector
            .match_labels
            .as_ref()
            .is_none_or(BTreeMap::is_empty)
            && selector
                .match_expressions
                .as_ref()
                .is_none_or(Vec::is_empty);
        if empty {
            self.problem(
                at,
                "spec.selector",
                format!(
                    "Invalid value: empty selector is invalid for {}; select the template's \
                     labels",
                    kind.to_lowercase()
                ),
            );
            return false;
        }
        let no_labels = BTreeMap::new();
        match selects(selector, labels.unwrap_or(&no_labels)) {
            Ok(true) => true,
            Ok(false) => {
                self.problem(
                    at,
                    "spec.template.metadata.labels",
                    "Invalid value: `selector` does not match template `labels`; give the pod \
                     template the labels spec.selector selects",
                );
                false
            }
            Err((path, message)) => {
                self.problem(at, format!("spec.selector.{path}"), message);
                false
            }
        }
    }

    pub(super) fn check_template(&mut self, at: &At, template: &mut PodTemplateSpec) -> bool {
        let Some(spec) = template.spec.as_mut() else {
            self.problem(
                at,
                "spec.template.spec",
                "Required value: the pod template needs a spec",
            );
            return false;
        };
        self.check_pod_spec(at, "spec.template.spec", spec);
        true
    }

    pub(super) fn check_deployment(&mut self, at: &At, mut d: Deployment) -> Option<Deployment> {
        let Some(spec) = d.spec.as_mut() else {
            self.problem(at, "spec", "Required value: a Deployment needs a spec");
            return None;
        };
        let replicas = self.check_replicas(at, "spec.replicas", spec.replicas);
        let labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref());
        let selector = self.check_selector(at, "Deployment", &spec.selector, labels);
        let template = self.check_template(at, &mut spec.template);
        (replicas
            && selector
            && template
            && self.plan_pods(at, "spec.replicas", spec.replicas.unwrap_or(1)))
        .then_some(d)
    }

    pub(super) fn check_replicaset(&mut self, at: &At, mut rs: ReplicaSet) -> Option<ReplicaSet> {
        let Some(spec) = rs.spec.as_mut() else {
            self.problem(at, "spec", "Required value: a ReplicaSet needs a spec");
            return None;
        };
        let replicas = self.check_replicas(at, "spec.replicas", spec.replicas);
        let Some(template) = spec.template.as_mut() else {
            self.problem(
                at,
                "spec.template",
                "Required value: a ReplicaSet needs a pod template",
            );
            return None;
        };
        let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
        let selector = self.check_selector(at, "ReplicaSet", &spec.selector, labels);
        let template = self.check_template(at, template);
        (replicas
            && selector
            && template
            && self.plan_pods(at, "spec.replicas", spec.replicas.unwrap_or(1)))
        .then_some(rs)
    }

    pub(super) fn check_statefulset(
        &mut self,
        at: &At,
        mut sts: StatefulSet,
    ) -> Option<StatefulSet> {
        let Some(spec) = sts.spec.as_mut() else {
            self.problem(at, "spec", "Required value: a StatefulSet needs a spec");
            return None;
        };
        let mut ok = self.check_replicas(at, "spec.replicas", spec.replicas);
        let start = spec.ordinals.as_ref().and_then(|o| o.start);
        ok &= self.check_replicas(at, "spec.ordinals.start", start);
        let labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref());
        ok &= self.check_selector(at, "StatefulSet", &spec.selector, labels);
        ok &= self.check_template(at, &mut spec.template);
        for (i, claim) in spec.volume_claim_templates.iter().flatten().enumerate() {
            let path = format!("spec.volumeClaimTemplates[{i}]");
            if claim.metadata.name.as_deref().is_none_or(str::is_empty) {
                self.problem(
                    at,
                    format!("{path}.metadata.name"),
                    "Required value: each volumeClaimTemplate needs a name; pods mount it by \
                     that name",
                );
                ok = false;
            }
            ok &= self.check_claim(at, &format!("{path}.spec"), claim);
        }
        (ok && self.plan_pods(at, "spec.replicas", spec.replicas.unwrap_or(1))).then_some(sts)
    }

    pub(super) fn check_job(&mut self, at: &At, mut job: Job) -> Option<Job> {
        let Some(spec) = job.spec.as_mut() else {
            self.problem(at, "spec", "Required value: a Job needs a spec");
            return None;
        };
        let mut ok = self.check_replicas(at, "spec.parallelism", spec.parallelism);
        ok &= self.check_replicas(at, "spec.completions", spec.completions);
        ok &= self.check_template(at, &mut spec.template);
        (ok && self.plan_pods(at, job_pods_field(spec), job_pods(spec))).then_some(job)
    }

    pub(super) fn check_claim(
        &mut self,
        at: &At,
        path: &str,
        claim: &PersistentVolumeClaim,
    ) -> bool {
        let requests = claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref());
        self.check_quantities(at, &format!("{path}.resources.requests"), requests)
    }

    /// Checks the resource quantities of a pod spec and applies the API server's defaulting
    /// that scheduling depends on: a container's requests default to its limits.
    pub(super) fn check_pod_spec(&mut self, at: &At, path: &str, spec: &mut PodSpec) {
        if spec.containers.is_empty() {
            self.problem(
                at,
                format!("{path}.containers"),
                "Required value: a pod needs at least one container",
            );
        }
        let init = spec.init_containers.as_deref_mut().unwrap_or_default();
        for (list, containers) in [
            ("initContainers", init),
            ("containers", &mut spec.containers),
        ] {
            for (i, container) in containers.iter_mut().enumerate() {
                let path = format!("{path}.{list}[{i}].resources");
                self.check_container(at, &path, container);
            }
        }
        self.check_quantities(at, &format!("{path}.overhead"), spec.overhead.as_ref());
        if let Some(resources) = &spec.resources {
            let path = format!("{path}.resources");
            self.check_quantities(at, &format!("{path}.requests"), resources.requests.as_ref());
            self.check_quantities(at, &format!("{path}.limits"), resources.limits.as_ref());
        }
    }

    pub(super) fn check_container(&mut self, at: &At, path: &str, container: &mut Container) {
        let Some(ResourceRequirements {
            limits, requests, ..
        }) = container.resources.as_mut()
        else {
            return;
        };
        let valid = self.check_quantities(at, &format!("{path}.limits"), limits.as_ref())
            & self.check_quantities(at, &format!("{path}.requests"), requests.as_ref());
        let Some(limits) = limits.as_ref().filter(|l| valid && !l.is_empty()) else {
            return;
        };
        let requests = requests.get_or_insert_default();
        for (resource, limit) in limits {
            let request = requests
                .entry(resource.clone())
                .or_insert_with(|| limit.clone());
            if let (Some(r), Some(l)) = (quantity_value(&request.0), quantity_value(&limit.0))
                && r > l
            {
                let message = format!(
                    "Invalid value: {:?}: must be less than or equal to {resource} limit of {}",
                    request.0, limit.0
                );
                self.problem(at, format!("{path}.requests.{resource}"), message);
            }
        }
    }

    /// Reports every quantity that is not one; `true` when all are.
    pub(super) fn check_quantities(
        &mut self,
        at: &At,
        path: &str,
        list: Option<&BTreeMap<String, Quantity>>,
    ) -> bool {
        let mut valid = true;
        for (name, Quantity(q)) in list.into_iter().flatten() {
            let message = match quantity_value(q) {
                None => format!(
                    "Invalid value: {q:?}: quantities must match the regular expression \
                     '{QUANTITY_PATTERN}', e.g. 500m, 2 or 1.5Gi"
                ),
                Some(_) if q.starts_with('-') => {
                    format!("Invalid value: {q:?}: must be greater than or equal to 0")
                }
                Some(_) => continue,
            };
            self.problem(at, format!("{path}.{name}"), message);
            valid = false;
        }
        valid
    }
}

/// Whether `selector` selects `labels`; `Err((field, message))` for an invalid selector.
fn selects(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, (String, String)> {
    let mut matches = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
        let value = labels.get(&expr.key);
        let values = expr.values.as_deref().unwrap_or_default();
        matches &= match expr.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => !value.is_some_and(|v| values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => {
                return Err((
                    format!("matchExpressions[{i}].operator"),
                    format!(
                        "Unsupported value: {other:?}: supported values: \"In\", \"NotIn\", \
                         \"Exists\", \"DoesNotExist\""
                    ),
                ));
            }
        };
    }
    Ok(matches)
}

/// The pods a Job runs at once: `parallelism` (default 1), at most `completions`, none while
/// suspended.
pub(super) fn job_pods(spec: &JobSpec) -> i32 {
    if spec.suspend == Some(true) {
        return 0;
    }
    spec.parallelism
        .unwrap_or(1)
        .min(spec.completions.unwrap_or(i32::MAX))
}

/// The field that sets [`job_pods`], for messages.
fn job_pods_field(spec: &JobSpec) -> &'static str {
    if spec
        .completions
        .is_some_and(|c| c < spec.parallelism.unwrap_or(1))
    {
        "spec.completions"
    } else {
        "spec.parallelism"
    }
}
