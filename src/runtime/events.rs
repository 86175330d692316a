//! Kubernetes events, through kube-rs' [`Recorder`] (which folds repeats into a series), with
//! one fix for older clusters: before Kubernetes 1.22 the API server accepts an
//! `events.k8s.io/v1` event about a cluster-scoped object (NodePool, NodeClaim, Node,
//! EC2NodeClass) only in `kube-system`, and refuses the `default` namespace the recorder uses.
//! Refused once, such events go to `kube-system` from then on (`kubectl describe` finds them in
//! any namespace).

use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Where events about cluster-scoped objects go when the API server refuses `default`.
const LEGACY_NAMESPACE: &str = "kube-system";

/// Publishes events as `karpenter`.
pub struct EventRecorder {
    recorder: Recorder,
    client: Client,
    reporter: Reporter,
    /// Set once the API server refused an event about a cluster-scoped object in `default`.
    legacy: AtomicBool,
}

impl EventRecorder {
    /// A recorder reporting as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            client,
            reporter,
            legacy: AtomicBool::new(false),
        }
    }

    /// Publishes `event` about the object `reference` points at.
    pub async fn publish(
        &self,
        event: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let cluster_scoped = reference.namespace.as_deref().is_none_or(str::is_empty);
        if !cluster_scoped || !self.legacy.load(Ordering::Relaxed) {
            match self.recorder.publish(event, reference).await {
                Err(kube::Error::Api(status)) if cluster_scoped && status.code == 422 => {
                    tracing::debug!(error = %status, "events about cluster-scoped objects go to kube-system on this cluster");
                    self.legacy.store(true, Ordering::Relaxed);
                }
                other => return other,
            }
        }
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), LEGACY_NAMESPACE);
        events
            .create(
                &PostParams::default(),
                &legacy_event(&self.reporter, event, reference, Timestamp::now()),
            )
            .await
            .map(|_| ())
    }
}

/// The event about a cluster-scoped object as Kubernetes before 1.22 accepts it: in
/// `kube-system`, regarding the object itself.
fn legacy_event(
    reporter: &Reporter,
    event: &Event,
    reference: &ObjectReference,
    now: Timestamp,
) -> K8sEvent {
    let name = reference
        .name
        .as_deref()
        .unwrap_or(reporter.controller.as_str());
    K8sEvent {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(LEGACY_NAMESPACE.into()),
            ..Default::default()
        },
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: event.note.clone(),
        event_time: Some(MicroTime(now)),
        regarding: Some(reference.clone()),
        related: event.secondary.clone(),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(
            reporter
                .instance
                .clone()
                .unwrap_or_else(|| reporter.controller.clone()),
        ),
        type_: Some(
            match event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
        ),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_events_live_in_kube_system_and_regard_the_object() {
        let reporter = Reporter {
            controller: "karpenter".into(),
            instance: None,
        };
        let reference = ObjectReference {
            api_version: Some("karpenter.sh/v1".into()),
            kind: Some("NodePool".into()),
            name: Some("default".into()),
            uid: Some("u".into()),
            ..Default::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "FailedValidation".into(),
            note: Some("bad".into()),
            action: "Validate".into(),
            secondary: None,
        };
        let now = Timestamp::from_second(1_800_000_000).expect("time");
        let e = legacy_event(&reporter, &event, &reference, now);
        assert_eq!(e.metadata.namespace.as_deref(), Some("kube-system"));
        assert!(
            e.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("default."))
        );
        assert_eq!(e.regarding, Some(reference));
        assert_eq!(e.reason.as_deref(), Some("FailedValidation"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reporting_instance.as_deref(), Some("karpenter"));
        assert!(e.event_time.is_some());
    }
}
