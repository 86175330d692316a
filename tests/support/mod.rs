//! Support for controller tests without a control plane: an in-memory API server
//! ([`fake_api`]), the objects tests start from ([`builders`]) and [`Env`], a controller
//! [`Context`] wired to both, the simulated cloud and a fake clock. Tests drive the reconcile
//! functions directly, one step at a time, and move time with [`Env::advance`].

pub mod builders;
pub mod fake_api;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use karpenter_rs::apis::NodeClaim;
use karpenter_rs::apis::conditions::{self, Condition};
use karpenter_rs::apis::nodeclaim::condition;
use karpenter_rs::catalog::Catalog;
use karpenter_rs::clock::FakeClock;
use karpenter_rs::cloudprovider::CloudProvider;
use karpenter_rs::cloudprovider::simulated::SimulatedProvider;
use karpenter_rs::controllers::kubelet;
use karpenter_rs::controllers::nodeclaim;
use karpenter_rs::runtime::{Context, Intervals};
use karpenter_rs::snapshot::EngineOptions;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use builders::POOL;
use fake_api::FakeApi;

/// The simulated region (its catalog is bundled).
pub const REGION: &str = "us-east-1";

/// A controller context on an in-memory cluster holding a ready EC2NodeClass and a NodePool,
/// both named [`POOL`].
pub struct Env {
    /// Time, for the controllers, the simulated cloud and the fake API server's timestamps.
    pub clock: Arc<FakeClock>,
    /// The cloud.
    pub cloud: Arc<SimulatedProvider>,
    /// What the reconcilers get.
    pub ctx: Arc<Context>,
    /// The in-memory API server the client talks to (for counting writes).
    pub api: FakeApi,
}

/// A fixed start, so every run sees the same times.
fn start() -> DateTime<Utc> {
    DateTime::from_timestamp(1_795_000_000, 0).expect("start time")
}

impl Env {
    /// A fresh cluster with the given intervals.
    pub async fn with_intervals(intervals: Intervals) -> Self {
        Self::with(intervals, EngineOptions::default()).await
    }

    /// A fresh cluster with production intervals and the given engine options (feature gates).
    pub async fn with_options(options: EngineOptions) -> Self {
        Self::with(Intervals::default(), options).await
    }

    async fn with(intervals: Intervals, options: EngineOptions) -> Self {
        let clock = Arc::new(FakeClock::new(start()));
        let (api, state) = FakeApi::new(clock.clone());
        let client = Client::new(api.clone(), builders::NAMESPACE);
        let catalog = Catalog::bundled(REGION).expect("bundled catalog");
        let cloud = Arc::new(SimulatedProvider::new(catalog, clock.clone()));
        let mut ctx = Context::new(
            client.clone(),
            client,
            state,
            cloud.clone(),
            Some(cloud.clone()),
            clock.clone(),
            options,
        );
        ctx.intervals = intervals;
        let env = Self {
            clock,
            cloud,
            ctx: Arc::new(ctx),
            api,
        };
        let mut class = builders::nodeclass(POOL);
        let resolved = env
            .cloud
            .resolve(&class)
            .await
            .expect("the simulated cloud resolves the node class");
        let mut status = class.status.take().unwrap_or_default();
        status.subnets = resolved.subnets;
        status.security_groups = resolved.security_groups;
        status.amis = resolved.amis;
        status.instance_profile = resolved.instance_profile;
        conditions::set(
            &mut status.conditions,
            "Ready",
            conditions::TRUE,
            "",
            "",
            start(),
        );
        class.status = Some(status);
        env.create(&class).await;
        env.create(&builders::nodepool(POOL)).await;
        env
    }

    /// A fresh cluster with production intervals.
    pub async fn new() -> Self {
        Self::with_intervals(Intervals::default()).await
    }

    /// Moves the fake clock forward.
    pub fn advance(&self, by: chrono::Duration) {
        self.clock.advance(by);
    }

    /// Creates a cluster-scoped object through the API.
    pub async fn create<K>(&self, object: &K) -> K
    where
        K: Resource<DynamicType = (), Scope = ClusterResourceScope>
            + Clone
            + DeserializeOwned
            + Serialize
            + std::fmt::Debug,
    {
        Api::<K>::all(self.ctx.client.clone())
            .create(&PostParams::default(), object)
            .await
            .expect("create")
    }

    /// Creates a namespaced object through the API.
    pub async fn create_namespaced<K>(&self, object: &K) -> K
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Serialize
            + std::fmt::Debug,
    {
        let ns = object
            .namespace()
            .expect("a namespaced object names its namespace");
        Api::<K>::namespaced(self.ctx.client.clone(), &ns)
            .create(&PostParams::default(), object)
            .await
            .expect("create")
    }

    /// A cluster-scoped object as the API server has it, if it exists.
    pub async fn get<K>(&self, name: &str) -> Option<K>
    where
        K: Resource<DynamicType = (), Scope = ClusterResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        Api::<K>::all(self.ctx.client.clone())
            .get_opt(name)
            .await
            .expect("get")
    }

    /// A namespaced object of [`builders::NAMESPACE`] as the API server has it, if it exists.
    pub async fn get_namespaced<K>(&self, name: &str) -> Option<K>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        Api::<K>::namespaced(self.ctx.client.clone(), builders::NAMESPACE)
            .get_opt(name)
            .await
            .expect("get")
    }

    /// The NodeClaim, which must exist.
    pub async fn claim(&self, name: &str) -> NodeClaim {
        self.get(name)
            .await
            .unwrap_or_else(|| panic!("NodeClaim {name} exists"))
    }

    /// One reconcile of the NodeClaim lifecycle controller on the NodeClaim as it is now.
    pub async fn reconcile(&self, name: &str) -> Action {
        let claim = self.claim(name).await;
        nodeclaim::reconcile(Arc::new(claim), self.ctx.clone())
            .await
            .unwrap_or_else(|e| panic!("reconcile of {name}: {e}"))
    }

    /// Creates the NodeClaim and reconciles it until it has launched (finalizer, then launch).
    pub async fn launched(&self, claim: &NodeClaim) -> NodeClaim {
        let name = claim.name_any();
        self.create(claim).await;
        self.reconcile(&name).await;
        self.reconcile(&name).await;
        let claim = self.claim(&name).await;
        assert!(
            has_condition(&claim, condition::LAUNCHED, conditions::TRUE),
            "{name} launched: {:?}",
            claim.status
        );
        claim
    }

    /// The Node the stand-in kubelet of the launched NodeClaim's instance registers: Ready, with
    /// the `karpenter.sh/unregistered` taint and the NodeClaim's taints and startup taints.
    pub async fn join(&self, claim: &NodeClaim) -> Node {
        let class = self.ctx.state.nodeclasses.state().into_iter().next();
        let node = kubelet::node_for(claim, class.as_deref(), REGION)
            .expect("a launched NodeClaim has a provider ID");
        self.create(&node).await
    }

    /// A NodeClaim launched, its Node joined, registered and initialized.
    pub async fn running(&self, claim: &NodeClaim) -> (NodeClaim, Node) {
        let name = claim.name_any();
        let claim = self.launched(claim).await;
        let node = self.join(&claim).await;
        // Registration, then initialization judged on the registered Node.
        self.reconcile(&name).await;
        self.reconcile(&name).await;
        let claim = self.claim(&name).await;
        assert!(
            has_condition(&claim, condition::INITIALIZED, conditions::TRUE),
            "{name} initialized: {:?}",
            claim.status
        );
        let node = self
            .get(&node.name_any())
            .await
            .expect("the registered Node exists");
        (claim, node)
    }
}

impl Env {
    /// Deletes the NodeClaim without its finalizer: it is gone at once, whatever it launched
    /// left behind (an instance no NodeClaim owns).
    pub async fn drop_claim(&self, name: &str) {
        Api::<NodeClaim>::all(self.ctx.client.clone())
            .patch(
                name,
                &Default::default(),
                &kube::api::Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
            )
            .await
            .expect("strip the finalizer");
        self.delete_claim(name).await;
    }

    /// Deletes the NodeClaim through the API (its finalizer keeps it, being deleted).
    pub async fn delete_claim(&self, name: &str) {
        Api::<NodeClaim>::all(self.ctx.client.clone())
            .delete(name, &Default::default())
            .await
            .expect("delete");
    }

    /// Reconciles the NodeClaim until it is gone, at most `passes` times; returns how many it
    /// took.
    pub async fn reconcile_until_gone(&self, name: &str, passes: usize) -> usize {
        for pass in 1..=passes {
            self.reconcile(name).await;
            if self.get::<NodeClaim>(name).await.is_none() {
                return pass;
            }
        }
        panic!("NodeClaim {name} still exists after {passes} reconciles")
    }
}

/// The NodeClaim's condition of this type, if set.
pub fn condition<'a>(claim: &'a NodeClaim, type_: &str) -> Option<&'a Condition> {
    conditions::find(&claim.status.as_ref()?.conditions, type_)
}

/// Whether the NodeClaim's condition of this type has this status.
pub fn has_condition(claim: &NodeClaim, type_: &str, status: &str) -> bool {
    condition(claim, type_).is_some_and(|c| c.status == status)
}

/// The keys of the Node's taints.
pub fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .map(|t| t.key.clone())
        .collect()
}

/// Whether the Node carries the label with this value.
pub fn has_label(node: &Node, key: &str, value: &str) -> bool {
    node.labels().get(key).map(String::as_str) == Some(value)
}

/// Whether the object is being deleted.
pub fn deleting<K: Resource>(object: &K) -> bool {
    object.meta().deletion_timestamp.is_some()
}
