//! The runtime every controller shell shares: the [`Context`] (API clients, cluster caches,
//! cloud provider, clock, options, event recorder), the [`Error`] a reconcile returns, the
//! [`Intervals`] of the polling loops, and the boundary that catches a reconcile's panic
//! ([`panics`]). It imports no shell, so every shell can import it without
//! a cycle.

pub mod events;
pub mod evictions;
pub mod panics;
pub mod untyped;

use std::sync::Arc;

use kube::Client;
use kube::runtime::events::Reporter;

use crate::clock::Clock;
use crate::cloudprovider::simulated::SimulatedProvider;
use crate::cloudprovider::{CloudError, CloudProvider};
use crate::snapshot::EngineOptions;
use crate::state::ClusterState;

/// Everything a controller needs, shared by all of them.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// An API client that does not retry HTTP 429 itself: an eviction a PodDisruptionBudget
    /// refuses must come back to the drain, which backs off per pod and watches the
    /// terminationGracePeriod deadline (the default client would retry for many minutes).
    pub eviction_client: Client,
    /// Reflected cluster state.
    pub state: ClusterState,
    /// The cloud.
    pub provider: Arc<dyn CloudProvider>,
    /// The simulated cloud again, when that is the cloud, for the stand-in kubelet.
    pub simulated: Option<Arc<SimulatedProvider>>,
    /// Publishes Kubernetes events.
    pub recorder: events::EventRecorder,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Scheduler and disruption options.
    pub options: EngineOptions,
    /// Retry delays for evictions refused by PodDisruptionBudgets.
    pub evictions: evictions::EvictionBackoff,
    /// Retry delays for objects (and passes) whose reconcile panicked.
    pub panics: panics::PanicBackoff,
    /// Poll periods and waits of the disruption and garbage-collection loops.
    pub intervals: Intervals,
    /// When the provisioner first saw, decided about and placed each pending pod, for the pod
    /// provisioning metrics the metrics controller publishes.
    pub pod_scheduling: Arc<crate::metrics::pod_scheduling::PodSchedulingTimes>,
    /// NodePools' recent registration outcomes, behind their `NodeRegistrationHealthy`
    /// condition.
    pub registration_health: crate::state::registration_health::RegistrationHealth,
    /// Where provisioning rounds planned pods that are still pending: the provisioner counts
    /// them there, and disruption leaves their nodes alone.
    pub nominations: crate::state::nominations::Nominations,
}

/// How often the polling controllers run and how long a disruption command waits. Production
/// uses upstream's values ([`Intervals::default`]); tests that drive hundreds of rounds against
/// a real API server shorten them, since every wait is wall-clock time there.
#[derive(Clone, Copy, Debug)]
pub struct Intervals {
    /// Between disruption passes that found nothing to do (upstream: 10 s).
    pub disruption_poll: std::time::Duration,
    /// Between deciding a command and re-validating it, before anything is tainted or launched
    /// (upstream's `commandValidationDelay`, 15 s): pods, annotations and PDBs catch up meanwhile.
    pub validation_delay: std::time::Duration,
    /// How long a command's replacements may take to initialize before it is rolled back.
    pub replacement_timeout: std::time::Duration,
    /// Between updates of the NodeClaims' Drifted / Consolidatable conditions.
    pub disruption_status: std::time::Duration,
    /// Between garbage collections of instances and NodeClaims.
    pub garbage_collection: std::time::Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Self {
            disruption_poll: std::time::Duration::from_secs(10),
            validation_delay: std::time::Duration::from_secs(15),
            replacement_timeout: std::time::Duration::from_secs(600),
            disruption_status: std::time::Duration::from_secs(3),
            garbage_collection: std::time::Duration::from_secs(10),
        }
    }
}

impl Context {
    /// Builds the shared context; events are reported as `karpenter`, as upstream's are.
    pub fn new(
        client: Client,
        eviction_client: Client,
        state: ClusterState,
        provider: Arc<dyn CloudProvider>,
        simulated: Option<Arc<SimulatedProvider>>,
        clock: Arc<dyn Clock>,
        options: EngineOptions,
    ) -> Self {
        let reporter = Reporter {
            controller: "karpenter".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: events::EventRecorder::new(client.clone(), reporter),
            client,
            eviction_client,
            state,
            provider,
            simulated,
            clock,
            options,
            evictions: Default::default(),
            panics: Default::default(),
            intervals: Intervals::default(),
            pod_scheduling: Default::default(),
            registration_health: Default::default(),
            nominations: Default::default(),
        }
    }
}

/// Why a reconcile failed; every variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or could not be reached.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The cloud refused or could not be reached.
    #[error("cloud provider: {0}")]
    Cloud(#[from] CloudError),
}

impl Error {
    /// Whether the API server refused a write made from a copy older than its own (409
    /// Conflict): the cache was behind, and the watch is about to deliver the newer version.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(e)) if e.code == 409)
    }
}

/// The error policy of the kube-rs controllers: retry the object in five seconds. A conflict is
/// logged at debug level, as upstream requeues conflicts without reporting them: the newer
/// version's watch event reconciles the object again anyway, and a roll of a few hundred nodes
/// would otherwise log hundreds of warnings that ask nothing of the operator.
pub fn retry_later(
    controller: &'static str,
    object: &str,
    error: &Error,
) -> kube::runtime::controller::Action {
    if error.is_conflict() {
        tracing::debug!(controller, object, error = %error, "the cache was behind the API server; retrying");
    } else {
        tracing::warn!(controller, object, error = %error, "reconcile failed; retrying");
    }
    kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> Error {
        Error::Kube(kube::Error::Api(
            kube::core::Status::failure("refused", "Conflict")
                .with_code(code)
                .boxed(),
        ))
    }

    #[test]
    fn only_a_409_is_a_conflict() {
        assert!(api_error(409).is_conflict());
        assert!(!api_error(404).is_conflict());
        assert!(!api_error(422).is_conflict());
    }
}
