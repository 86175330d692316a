//! Pods converted so that siblings share what they have in common. The pod cache already has
//! the replicas of one controller share one spec; converting each replica on its own would
//! still hold one [`PodShape`] (~1 KB) per pod in every pass that converts them, which at
//! 20,000 pods was most of the controller's transient memory. Here a shape is converted once
//! per spec and label set, and labels, annotations and namespaces are kept once per distinct
//! value.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pod::{DEFAULT_NAMESPACE, Pod, PodShape};

/// A shape found for a spec: the spec it came from (weakly, so the table does not keep specs
/// alive; while the entry exists the allocation is not reused, so its address stays unique)
/// and the conversion's outcome.
struct Converted {
    spec: Weak<PodSpec>,
    shape: Result<Arc<PodShape>, String>,
}

/// Converts pods, sharing shapes per (spec, labels) and labels, annotations and namespaces per
/// value. Entries no pod holds any more are dropped as new ones come in.
#[derive(Default)]
pub struct PodShapes {
    /// By the spec's address and the pod's (shared) labels.
    shapes: HashMap<(usize, Arc<BTreeMap<String, String>>), Converted>,
    /// Distinct label and annotation maps.
    maps: HashSet<Arc<BTreeMap<String, String>>>,
    /// Distinct namespaces.
    namespaces: HashSet<Arc<str>>,
    /// Entries added since unused ones were last dropped.
    added: usize,
}

/// Unused entries are dropped once this many, or as many as the tables hold, were added.
const PRUNE_AFTER: usize = 1024;

impl PodShapes {
    /// Converts the pod of `meta` and `spec`; the error names the field and what to change.
    pub fn convert(&mut self, meta: &ObjectMeta, spec: &Arc<PodSpec>) -> Result<Pod, String> {
        let labels = self.map(meta.labels.as_ref());
        let annotations = self.map(meta.annotations.as_ref());
        let key = (Arc::as_ptr(spec) as usize, labels.clone());
        let shape = match self.shapes.get(&key) {
            Some(found) if found.spec.strong_count() > 0 => found.shape.clone(),
            _ => {
                let shape = PodShape::from_spec(spec, &labels).map(Arc::new);
                self.shapes.insert(
                    key,
                    Converted {
                        spec: Arc::downgrade(spec),
                        shape: shape.clone(),
                    },
                );
                self.added_one();
                shape
            }
        }?;
        let namespace = self.namespace(meta.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE));
        Ok(Pod::with_shape(meta, namespace, labels, annotations, shape))
    }

    /// The shared copy of a label or annotation map.
    fn map(&mut self, map: Option<&BTreeMap<String, String>>) -> Arc<BTreeMap<String, String>> {
        let empty = BTreeMap::new();
        let map = map.unwrap_or(&empty);
        if let Some(shared) = self.maps.get(map) {
            return shared.clone();
        }
        let shared = Arc::new(map.clone());
        self.maps.insert(shared.clone());
        self.added_one();
        shared
    }

    /// The shared copy of a namespace's name.
    fn namespace(&mut self, namespace: &str) -> Arc<str> {
        if let Some(shared) = self.namespaces.get(namespace) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(namespace);
        self.namespaces.insert(shared.clone());
        self.added_one();
        shared
    }

    /// Counts an added entry; drops the entries nothing else holds once enough were added.
    fn added_one(&mut self) {
        self.added += 1;
        let held = self.shapes.len() + self.maps.len() + self.namespaces.len();
        if self.added < held.max(PRUNE_AFTER) {
            return;
        }
        self.shapes.retain(|_, c| c.spec.strong_count() > 0);
        // A map or name only the tables hold (the key of a live shape holds its labels too).
        self.maps.retain(|m| Arc::strong_count(m) > 1);
        self.namespaces.retain(|n| Arc::strong_count(n) > 1);
        self.added = 0;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn meta(name: &str, labels: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(json!({"name": name, "namespace": "shop", "labels": labels}))
            .expect("meta")
    }

    fn spec(cpu: &str) -> Arc<PodSpec> {
        Arc::new(
            serde_json::from_value(json!({
                "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}],
                "topologySpreadConstraints": [{
                    "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule", "matchLabelKeys": ["version"],
                    "labelSelector": {"matchLabels": {"app": "web"}}
                }]
            }))
            .expect("spec"),
        )
    }

    #[test]
    fn siblings_share_a_shape_and_labels_that_differ_do_not() {
        let mut shapes = PodShapes::default();
        let shared = spec("500m");
        let v1 = json!({"app": "web", "version": "1"});
        let a = shapes.convert(&meta("a", v1.clone()), &shared).expect("a");
        let b = shapes.convert(&meta("b", v1), &shared).expect("b");
        assert!(Arc::ptr_eq(&a.shape, &b.shape) && Arc::ptr_eq(&a.labels, &b.labels));
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert_eq!((&*a.name, &*b.name, a.requests.cpu), ("a", "b", 500));

        // `matchLabelKeys` makes the spread depend on the labels: a new version is its own shape.
        let c = shapes
            .convert(&meta("c", json!({"app": "web", "version": "2"})), &shared)
            .expect("c");
        assert!(!Arc::ptr_eq(&a.shape, &c.shape));
        let version = |p: &Pod| p.spread[0].selector.expressions.clone();
        assert_ne!(version(&a), version(&c));

        // An equal spec elsewhere converts to an equal shape, its own.
        let d = shapes
            .convert(
                &meta("d", json!({"app": "web", "version": "1"})),
                &spec("500m"),
            )
            .expect("d");
        assert!(!Arc::ptr_eq(&a.shape, &d.shape));
        assert_eq!(version(&a), version(&d));
    }

    #[test]
    fn changing_one_pods_shape_leaves_its_siblings_alone() {
        let mut shapes = PodShapes::default();
        let shared = spec("1");
        let a = shapes.convert(&meta("a", json!({})), &shared).expect("a");
        let mut b = shapes.convert(&meta("b", json!({})), &shared).expect("b");
        b.required_terms.push(Vec::new());
        assert_eq!((a.required_terms.len(), b.required_terms.len()), (0, 1));
    }

    #[test]
    fn a_bad_spec_is_reported_for_every_pod_that_has_it() {
        let mut shapes = PodShapes::default();
        let bad = spec("lots");
        for name in ["a", "b"] {
            let error = shapes.convert(&meta(name, json!({})), &bad).unwrap_err();
            assert!(
                error.contains("spec.containers[0].resources.requests"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_spec_no_pod_holds_is_forgotten() {
        let mut shapes = PodShapes::default();
        let first = spec("1");
        shapes.convert(&meta("a", json!({})), &first).expect("a");
        drop(first);
        // Enough new specs to prune: the dropped spec's entry goes, live ones stay.
        let live: Vec<Arc<PodSpec>> = (0..PRUNE_AFTER).map(|_| spec("2")).collect();
        for (i, s) in live.iter().enumerate() {
            shapes
                .convert(&meta(&format!("p{i}"), json!({})), s)
                .expect("p");
        }
        assert!(shapes.shapes.len() <= live.len());
        assert!(shapes.shapes.values().all(|c| c.spec.strong_count() > 0));
    }
}
