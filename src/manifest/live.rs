//! Reading a live cluster as `simulate` input: the objects a user would otherwise dump with
//! `kubectl get -o yaml`, listed read-only through the API in pages, as [`Document`]s the loader
//! reads exactly like files. Workload controllers (Deployments, StatefulSets, Jobs) are not read:
//! their pods already exist, and the loader would otherwise expand them a second time.

use std::path::PathBuf;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::Value;

use super::{Document, Source};

/// One kind `simulate` reads from a cluster.
#[derive(Clone, Copy, Debug)]
pub struct LiveKind {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Resource name, as RBAC rules name it.
    pub plural: &'static str,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

const fn live(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
) -> LiveKind {
    LiveKind {
        group,
        version,
        kind,
        plural,
        namespaced,
    }
}

/// Everything provisioning and disruption decisions depend on; the README's read-only
/// ClusterRole grants `get`/`list` on exactly these.
pub const KINDS: &[LiveKind] = &[
    live("karpenter.sh", "v1", "NodePool", "nodepools", false),
    live(
        "karpenter.k8s.aws",
        "v1",
        "EC2NodeClass",
        "ec2nodeclasses",
        false,
    ),
    live("karpenter.sh", "v1", "NodeClaim", "nodeclaims", false),
    live(
        "karpenter.sh",
        "v1alpha1",
        "NodeOverlay",
        "nodeoverlays",
        false,
    ),
    live("", "v1", "Node", "nodes", false),
    live("", "v1", "Pod", "pods", true),
    live("apps", "v1", "DaemonSet", "daemonsets", true),
    live(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
    ),
    live("", "v1", "PersistentVolume", "persistentvolumes", false),
    live(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
    ),
    live(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
    ),
    live("storage.k8s.io", "v1", "CSINode", "csinodes", false),
];

/// Objects per list request: large clusters are read in pages, as kubectl does.
const PAGE: u32 = 500;

impl LiveKind {
    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.to_string(),
            version: self.version.to_string(),
            api_version: self.api_version(),
            kind: self.kind.to_string(),
            plural: self.plural.to_string(),
        }
    }
}

/// A list the cluster refused or failed.
#[derive(Debug, thiserror::Error)]
#[error(
    "listing {plural} from the cluster: {source}; the kubeconfig's user needs get and list on \
     {plural} (the README's read-only ClusterRole `karpenter-rs-viewer` grants them)"
)]
pub struct LiveError {
    /// The resource that failed.
    pub plural: &'static str,
    /// The API's answer.
    #[source]
    pub source: kube::Error,
}

/// Lists every [`KINDS`] object in all namespaces. `progress` hears each kind's count as it is
/// read (large clusters take a while). A kind the cluster does not serve (a 404, e.g. no
/// Karpenter CRDs yet) is reported through `progress` as `None` and skipped.
pub async fn read_cluster(
    client: &Client,
    mut progress: impl FnMut(&LiveKind, Option<usize>),
) -> Result<Vec<Document>, LiveError> {
    let mut docs = Vec::new();
    for kind in KINDS {
        match list_all(client, kind).await {
            Ok(values) => {
                progress(kind, Some(values.len()));
                docs.extend(values.into_iter().enumerate().map(|(i, value)| Document {
                    source: Source {
                        file: PathBuf::from(format!("cluster:{}", kind.plural)),
                        document: i + 1,
                    },
                    value,
                }));
            }
            Err(kube::Error::Api(status)) if status.code == 404 => progress(kind, None),
            Err(source) => {
                return Err(LiveError {
                    plural: kind.plural,
                    source,
                });
            }
        }
    }
    Ok(docs)
}

/// Every object of one kind, page by page, each with its `apiVersion` and `kind` (list items
/// carry neither) and without `managedFields`, which nothing reads.
async fn list_all(client: &Client, kind: &LiveKind) -> Result<Vec<Value>, kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource());
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        for mut object in page.items {
            object.metadata.managed_fields = None;
            let mut value = serde_json::to_value(&object).map_err(kube::Error::SerdeError)?;
            if let Value::Object(map) = &mut value {
                map.insert("apiVersion".into(), Value::String(kind.api_version()));
                map.insert("kind".into(), Value::String(kind.kind.to_string()));
            }
            out.push(value);
        }
        match next {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// The cluster's objects with files applied on top, as `kubectl apply` would: a file object
/// replaces the cluster's object of the same kind, namespace and name ("what if I apply this
/// NodePool"); the others are added.
pub fn overlay(cluster: Vec<Document>, files: Vec<Document>) -> Vec<Document> {
    let key = |d: &Document| {
        let at = |p: &str| {
            d.value
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let kind = d.kind().to_string();
        let mut namespace = at("/metadata/namespace");
        // A file may leave a namespaced object's namespace out; the API server defaults it.
        if namespace.is_empty() && KINDS.iter().any(|k| k.kind == kind && k.namespaced) {
            namespace = crate::snapshot::DEFAULT_NAMESPACE.to_string();
        }
        (kind, namespace, at("/metadata/name"))
    };
    let replaced: std::collections::HashSet<_> = files.iter().map(key).collect();
    cluster
        .into_iter()
        .filter(|d| !replaced.contains(&key(d)))
        .chain(files)
        .collect()
}
