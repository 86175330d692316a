//! Kubernetes events (`events.k8s.io/v1`), with a repeat folded into the first event's series
//! as kube-rs' [`Recorder`](kube::runtime::events::Recorder) does, but remembering only what a
//! repeat needs: kube-rs' recorder keeps every event it published in full for six minutes, and a
//! 20,000-pod burst's `FailedScheduling` events held 11.8 MB of its heap (and each publish
//! scanned them all). One fix for older clusters: before Kubernetes 1.22 the API server accepts
//! an event about a cluster-scoped object (NodePool, NodeClaim, Node, EC2NodeClass) only in
//! `kube-system`, and refuses `default`. Refused once, such events go to `kube-system` from then
//! on (`kubectl describe` finds them in any namespace).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};

/// Where events about cluster-scoped objects go when the API server refuses `default`.
const LEGACY_NAMESPACE: &str = "kube-system";

/// Where events about cluster-scoped objects go otherwise, as kube-rs' recorder puts them.
const CLUSTER_NAMESPACE: &str = "default";

/// How long a published event takes repeats into its series: kube-rs' recorder's time, well
/// inside the hour the API server keeps an event.
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// Publishes events as `karpenter`.
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    /// Set once the API server refused an event about a cluster-scoped object in `default`.
    legacy: AtomicBool,
    published: Mutex<Published>,
}

impl EventRecorder {
    /// A recorder reporting as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            legacy: AtomicBool::new(false),
            published: Mutex::default(),
        }
    }

    fn published(&self) -> MutexGuard<'_, Published> {
        self.published.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes `event` about the object `reference` points at: a new event, or, when the same
    /// event was published within [`SERIES_WINDOW`], one more in that event's series.
    pub async fn publish(
        &self,
        event: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = key(event, reference);
        let repeat = self.published().repeat(key, now);
        if let Some(seen) = repeat {
            let series = EventSeries {
                count: seen.count,
                last_observed_time: MicroTime(now),
            };
            let patch = serde_json::json!({ "series": series });
            let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &seen.namespace);
            match events
                .patch(&seen.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.published().remember(key, seen, now);
                    return Ok(());
                }
                // Deleted meanwhile (by its TTL or by hand): the repeat starts a new event.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let namespace = match reference.namespace.as_deref() {
            Some(namespace) if !namespace.is_empty() => namespace,
            _ if self.legacy.load(Ordering::Relaxed) => LEGACY_NAMESPACE,
            _ => CLUSTER_NAMESPACE,
        };
        let created = match self.create(event, reference, namespace, now).await {
            Err(kube::Error::Api(status))
                if namespace == CLUSTER_NAMESPACE && status.code == 422 =>
            {
                tracing::debug!(error = %status, "events about cluster-scoped objects go to kube-system on this cluster");
                self.legacy.store(true, Ordering::Relaxed);
                self.create(event, reference, LEGACY_NAMESPACE, now).await
            }
            other => other,
        }?;
        if let Some(name) = created.metadata.name {
            let namespace = created.metadata.namespace.unwrap_or_default();
            let seen = Seen {
                namespace: namespace.into(),
                name: name.into(),
                count: 1,
                last: now,
            };
            self.published().remember(key, seen, now);
        }
        Ok(())
    }

    async fn create(
        &self,
        event: &Event,
        reference: &ObjectReference,
        namespace: &str,
        now: Timestamp,
    ) -> Result<K8sEvent, kube::Error> {
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        events
            .create(
                &PostParams::default(),
                &event_object(&self.reporter, event, reference, namespace, now),
            )
            .await
    }
}

/// What makes an event a repeat of another: its type, action, reason and note (immutable on an
/// `events.k8s.io/v1` event, so a new note needs a new event), the object it regards and the one
/// it relates to. The reporter is the recorder's own.
fn key(event: &Event, regarding: &ObjectReference) -> u64 {
    let mut hasher = DefaultHasher::new();
    matches!(event.type_, EventType::Warning).hash(&mut hasher);
    event.action.hash(&mut hasher);
    event.reason.hash(&mut hasher);
    event.note.hash(&mut hasher);
    event.secondary.is_some().hash(&mut hasher);
    for object in std::iter::once(regarding).chain(event.secondary.as_ref()) {
        object.api_version.hash(&mut hasher);
        object.kind.hash(&mut hasher);
        object.namespace.hash(&mut hasher);
        object.name.hash(&mut hasher);
        object.uid.hash(&mut hasher);
    }
    hasher.finish()
}
/// The events published within [`SERIES_WINDOW`], by [`key`].
#[derive(Default)]
struct Published {
    by_key: HashMap<u64, Seen>,
    /// When entries past the window were last dropped.
    pruned: Option<Timestamp>,
}

/// What a repeat needs of a published event: where it is, and its series so far.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    namespace: Box<str>,
    name: Box<str>,
    count: i32,
    last: Timestamp,
}

impl Published {
    /// The published event `key` repeats, with its count raised, if it was last seen within
    /// [`SERIES_WINDOW`].
    fn repeat(&self, key: u64, now: Timestamp) -> Option<Seen> {
        let seen = self.by_key.get(&key)?;
        (seen.last + SERIES_WINDOW > now).then(|| Seen {
            count: seen.count.saturating_add(1),
            ..seen.clone()
        })
    }

    /// Remembers `seen` as published at `now`, and drops entries past the window, at most once
    /// a window (each is one scan of the table).
    fn remember(&mut self, key: u64, seen: Seen, now: Timestamp) {
        self.by_key.insert(key, Seen { last: now, ..seen });
        if self.pruned.is_none_or(|at| at + SERIES_WINDOW <= now) {
            self.by_key
                .retain(|_, seen| seen.last + SERIES_WINDOW > now);
            self.pruned = Some(now);
        }
    }
}

/// The event object for `event` about `reference`, to be created in `namespace`.
fn event_object(
    reporter: &Reporter,
    event: &Event,
    reference: &ObjectReference,
    namespace: &str,
    now: Timestamp,
) -> K8sEvent {
    let name = reference
        .name
        .as_deref()
        .unwrap_or(reporter.controller.as_str());
    K8sEvent {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.into()),
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

    fn node_pool() -> ObjectReference {
        ObjectReference {
            api_version: Some("karpenter.sh/v1".into()),
            kind: Some("NodePool".into()),
            name: Some("default".into()),
            uid: Some("u".into()),
            ..Default::default()
        }
    }

    fn warning(note: &str) -> Event {
        Event {
            type_: EventType::Warning,
            reason: "FailedValidation".into(),
            note: Some(note.into()),
            action: "Validate".into(),
            secondary: None,
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).expect("time")
    }

    #[test]
    fn legacy_events_live_in_kube_system_and_regard_the_object() {
        let reporter = Reporter {
            controller: "karpenter".into(),
            instance: None,
        };
        let reference = node_pool();
        let e = event_object(
            &reporter,
            &warning("bad"),
            &reference,
            LEGACY_NAMESPACE,
            at(0),
        );
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
        assert!(e.series.is_none());
    }

    /// A repeat within the window extends the first event's series; a repeat after it, or an
    /// event with another note, is a new event.
    #[test]
    fn repeats_within_the_window_extend_the_series() {
        let mut published = Published::default();
        let first = key(&warning("bad"), &node_pool());
        let seen = Seen {
            namespace: "default".into(),
            name: "default.1".into(),
            count: 1,
            last: at(0),
        };
        assert_eq!(published.repeat(first, at(0)), None);
        published.remember(first, seen.clone(), at(0));
        let repeat = published.repeat(first, at(60)).expect("a repeat");
        assert_eq!((repeat.count, &*repeat.name), (2, "default.1"));
        published.remember(first, repeat, at(60));
        let third = published
            .repeat(first, at(400))
            .expect("within six minutes of the last");
        assert_eq!(third.count, 3);
        assert_eq!(published.repeat(first, at(60 + 360)), None);
        assert_ne!(key(&warning("worse"), &node_pool()), first);
        // The object's version is not its identity.
        let newer = ObjectReference {
            resource_version: Some("7".into()),
            ..node_pool()
        };
        assert_eq!(key(&warning("bad"), &newer), first);
    }

    #[test]
    fn entries_past_the_window_are_dropped() {
        let mut published = Published::default();
        let seen = |name: &str| Seen {
            namespace: "default".into(),
            name: name.into(),
            count: 1,
            last: at(0),
        };
        published.remember(1, seen("a"), at(0));
        published.remember(2, seen("b"), at(300));
        assert_eq!(published.by_key.len(), 2);
        published.remember(3, seen("c"), at(400));
        assert_eq!(
            published
                .by_key
                .keys()
                .copied()
                .collect::<std::collections::BTreeSet<_>>(),
            [2, 3].into()
        );
    }
}
