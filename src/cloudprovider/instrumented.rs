//! Cloud-provider metrics for any provider: every call's duration
//! (`karpenter_cloudprovider_duration_seconds`) and errors
//! (`karpenter_cloudprovider_errors_total`), and launch failures by offering
//! (`karpenter_cloudprovider_instance_launch_failures_total`), recorded in one place so the AWS and
//! simulated clouds report alike.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use crate::apis::{EC2NodeClass, NodeClaim};
use crate::metrics::METRICS;
use crate::scheduling::instance_type::InstanceType;

use super::interruption::{InterruptionEvent, InterruptionMessage};
use super::{
    CloudError, CloudProvider, Instance, Launched, NodeClassResolution, NodeClassesInUse, Tagging,
};

/// Wraps a provider and records metrics around each call.
pub struct Instrumented<P> {
    inner: Arc<P>,
}

impl<P> Instrumented<P> {
    /// Instruments `inner`.
    pub fn new(inner: Arc<P>) -> Self {
        Self { inner }
    }
}

/// The `error` label: the kind of failure, never the message (unbounded cardinality).
fn error_label(e: &CloudError) -> &'static str {
    match e {
        CloudError::InsufficientCapacity(_) => "InsufficientCapacityError",
        CloudError::NodeClassNotReady(_) => "NodeClassNotReadyError",
        CloudError::NotFound(_) => "NodeClaimNotFoundError",
        CloudError::Transient(_) => "TransientError",
        CloudError::Invalid(_) => "InvalidRequestError",
    }
}

async fn observe<T, E: AsRef<CloudError>>(
    provider: &'static str,
    method: &'static str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let start = Instant::now();
    let result = call.await;
    let controller = crate::metrics::current_controller();
    let labels = [controller, method, provider];
    METRICS
        .cloudprovider_duration_seconds
        .with_label_values(&labels)
        .observe(start.elapsed().as_secs_f64());
    if let Err(e) = &result {
        METRICS
            .cloudprovider_errors_total
            .with_label_values(&[controller, method, provider, error_label(e.as_ref())])
            .inc();
    }
    result
}

#[async_trait]
impl<P: CloudProvider + 'static> CloudProvider for Instrumented<P> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn repair_policies(&self) -> &'static [crate::apis::repair::RepairPolicy] {
        self.inner.repair_policies()
    }

    fn resolution_period(&self) -> std::time::Duration {
        self.inner.resolution_period()
    }

    fn resolves_capacity_reservations(&self) -> bool {
        self.inner.resolves_capacity_reservations()
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        nodeclass: &EC2NodeClass,
    ) -> Result<Launched, CloudError> {
        let result = observe(self.name(), "Create", self.inner.create(claim, nodeclass)).await;
        if let Err(e @ CloudError::InsufficientCapacity(_)) = &result {
            let capacity = claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::apis::labels::CAPACITY_TYPE))
                .cloned()
                .unwrap_or_default();
            // The zone (and its ID) when the NodeClaim allows only one, as a zonal launch
            // failure is; a NodeClaim open to several zones failed in all of them.
            let only = |key: &str| {
                claim
                    .spec
                    .requirements
                    .iter()
                    .find(|r| r.key == key && r.operator == crate::apis::nodeclaim::Operator::In)
                    .and_then(|r| match r.values.as_slice() {
                        [one] => Some(one.clone()),
                        _ => None,
                    })
                    .unwrap_or_default()
            };
            METRICS
                .cloudprovider_instance_launch_failures_total
                .with_label_values(&[
                    &only(crate::apis::labels::ZONE),
                    &only(crate::apis::labels::ZONE_ID),
                    &capacity,
                    error_label(e),
                ])
                .inc();
        }
        result
    }

    async fn delete(&self, provider_id: &str) -> Result<(), CloudError> {
        observe(self.name(), "Delete", self.inner.delete(provider_id)).await
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        observe(self.name(), "Get", self.inner.get(provider_id)).await
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        observe(self.name(), "List", self.inner.list()).await
    }

    async fn delete_nodeclass_resources(&self, nodeclass: &EC2NodeClass) -> Result<(), CloudError> {
        self.inner.delete_nodeclass_resources(nodeclass).await
    }

    async fn collect_nodeclass_resources(
        &self,
        in_use: &NodeClassesInUse,
    ) -> Result<Vec<String>, CloudError> {
        self.inner.collect_nodeclass_resources(in_use).await
    }

    /// Not timed: upstream tags from its own controller, outside the cloud provider interface
    /// whose calls `karpenter_cloudprovider_duration_seconds` counts.
    async fn tag_registered(
        &self,
        provider_id: &str,
        nodeclaim: &str,
        node_name: &str,
    ) -> Result<Tagging, CloudError> {
        self.inner
            .tag_registered(provider_id, nodeclaim, node_name)
            .await
    }

    async fn instance_types(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Arc<Vec<InstanceType>>, CloudError> {
        observe(
            self.name(),
            "GetInstanceTypes",
            self.inner.instance_types(nodeclass),
        )
        .await
    }

    async fn resolve(&self, nodeclass: &EC2NodeClass) -> NodeClassResolution {
        observe(self.name(), "Resolve", self.inner.resolve(nodeclass)).await
    }

    async fn interruptions(&self) -> Option<Result<Vec<InterruptionMessage>, CloudError>> {
        self.inner.interruptions().await
    }

    async fn record_interruption(&self, event: &InterruptionEvent) -> Result<(), CloudError> {
        self.inner.record_interruption(event).await
    }

    async fn acknowledge_interruption(
        &self,
        message: &InterruptionMessage,
    ) -> Result<(), CloudError> {
        self.inner.acknowledge_interruption(message).await
    }
}
