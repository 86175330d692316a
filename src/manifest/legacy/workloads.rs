//! Workloads and nodes: legacy annotations and selector keys on pod templates and Nodes.

use super::*;

// Workloads and nodes

/// Kinds that are, or carry, a pod template.
#[derive(Clone, Copy)]
pub(super) enum PodKind {
    Pod,
    Template,
    CronJob,
}

impl PodKind {
    pub(super) fn of(kind: &str) -> Option<Self> {
        match kind {
            "Pod" => Some(Self::Pod),
            "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "ReplicaSet" => {
                Some(Self::Template)
            }
            "CronJob" => Some(Self::CronJob),
            _ => None,
        }
    }

    /// JSON pointer to the pod template (the object itself for a Pod).
    fn template(self) -> &'static str {
        match self {
            Self::Pod => "",
            Self::Template => "/spec/template",
            Self::CronJob => "/spec/jobTemplate/spec/template",
        }
    }
}

/// Rewrites v1alpha5/v1beta1 pod annotations and node selectors to their v1 spelling.
pub(super) fn workload(doc: &Document, kind: PodKind, w: &mut Vec<Warning>) -> Value {
    let mut value = doc.value.clone();
    let object = doc.describe();
    let template = kind.template();
    let mut metas = vec!["/metadata".to_string()];
    if !template.is_empty() {
        metas.push(format!("{template}/metadata"));
    }
    for pointer in metas {
        if let Some(meta) = value.pointer_mut(&pointer)
            && replace_legacy_annotation(meta, LEGACY_DO_NOT_EVICT)
        {
            warn(
                w,
                &object,
                format!(
                    "{}.annotations: {LEGACY_DO_NOT_EVICT}: \"true\" replaced by {DO_NOT_DISRUPT}: \"true\"; \
                     v1 ignores do-not-evict",
                    dotted(&pointer)
                ),
            );
        }
    }
    let spec_pointer = format!("{template}/spec");
    if let Some(spec) = value.pointer_mut(&spec_pointer) {
        for field in rename_selector_keys(spec) {
            warn(
                w,
                &object,
                format!(
                    "{}.{field}: node label key {LEGACY_PROVISIONER_NAME} renamed to {NODEPOOL}; v1 nodes carry \
                     {NODEPOOL}, and each Provisioner becomes the NodePool of the same name",
                    dotted(&spec_pointer)
                ),
            );
        }
    }
    value
}

/// Renames `karpenter.sh/provisioner-name` in a pod spec's node selector and node affinity;
/// returns the fields changed, relative to the pod spec.
pub(super) fn rename_selector_keys(spec: &mut Value) -> Vec<String> {
    let mut changed = Vec::new();
    if let Some(selector) = spec.get_mut("nodeSelector").and_then(Value::as_object_mut)
        && let Some(v) = selector.remove(LEGACY_PROVISIONER_NAME)
    {
        selector.insert(NODEPOOL.into(), v);
        changed.push("nodeSelector".to_string());
    }
    let Some(affinity) = spec.pointer_mut("/affinity/nodeAffinity") else {
        return changed;
    };
    let mut rename = |expressions: Option<&mut Value>, field: String| {
        let Some(Value::Array(expressions)) = expressions else {
            return;
        };
        for (i, e) in expressions.iter_mut().enumerate() {
            if let Some(key) = e.get_mut("key")
                && *key == LEGACY_PROVISIONER_NAME
            {
                *key = Value::String(NODEPOOL.into());
                changed.push(format!("{field}.matchExpressions[{i}].key"));
            }
        }
    };
    let required = "requiredDuringSchedulingIgnoredDuringExecution";
    if let Some(Value::Array(terms)) =
        affinity.pointer_mut(&format!("/{required}/nodeSelectorTerms"))
    {
        for (i, term) in terms.iter_mut().enumerate() {
            rename(
                term.get_mut("matchExpressions"),
                format!("affinity.nodeAffinity.{required}.nodeSelectorTerms[{i}]"),
            );
        }
    }
    let preferred = "preferredDuringSchedulingIgnoredDuringExecution";
    if let Some(Value::Array(terms)) = affinity.get_mut(preferred) {
        for (i, term) in terms.iter_mut().enumerate() {
            rename(
                term.pointer_mut("/preference/matchExpressions"),
                format!("affinity.nodeAffinity.{preferred}[{i}].preference"),
            );
        }
    }
    changed
}

/// Rewrites a Node's legacy `do-not-consolidate` annotation.
pub(super) fn node(doc: &Document, w: &mut Vec<Warning>) -> Value {
    let mut value = doc.value.clone();
    if let Some(meta) = value.get_mut("metadata")
        && replace_legacy_annotation(meta, LEGACY_DO_NOT_CONSOLIDATE)
    {
        warn(
            w,
            &doc.describe(),
            format!(
                "metadata.annotations: {LEGACY_DO_NOT_CONSOLIDATE}: \"true\" replaced by {DO_NOT_DISRUPT}: \
                 \"true\", which also blocks drift, not only consolidation; remove it if the node should still \
                 be replaced when it drifts"
            ),
        );
    }
    value
}

/// `/spec/template/metadata` → `spec.template.metadata`.
pub(super) fn dotted(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}
