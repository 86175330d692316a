//! Where provisioning rounds planned pods that are still pending: pod UID → the NodeClaim or
//! Node, and since when. Kept in memory, as upstream keeps its nominations in cluster state.
//!
//! Two controllers read them. The provisioner counts such pods where it planned them, so the
//! next round neither packs them differently nor counts their room as free (see
//! [`Snapshot::nominate`]). The disruption controller leaves a node with nominated pods alone:
//! a node launched for pods is empty only until kube-scheduler binds them, and taking it then
//! would make the provisioner launch another (upstream: a nominated node is no candidate).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, TimeDelta, Utc};

use crate::snapshot::Snapshot;

/// How long a pod counts as bound to the capacity a round planned it onto while it stays
/// pending: long enough for an instance to launch and register and kube-scheduler to bind the
/// pod; a pod still pending after that (its node filled up with other pods, say) is planned
/// again. (Capacity that has been initialized for a while stops holding nominations sooner:
/// see [`crate::snapshot::NOMINATION_GRACE`].)
pub const NOMINATION_TTL: TimeDelta = TimeDelta::minutes(3);

/// Pod UID → (its capacity's name, since when). The UIDs are the cached pods' own (see
/// [`crate::scheduling::pod::Pod::uid`]) and a round's pods share one name per capacity, so
/// 20,000 nominations hold no string of their own.
type Table = HashMap<Arc<str>, (Arc<str>, DateTime<Utc>)>;

/// The nominations of the running controller, shared by its provisioner and disruption loops.
#[derive(Debug, Default)]
pub struct Nominations(Mutex<Table>);

impl Nominations {
    /// The nominations younger than [`NOMINATION_TTL`], the older ones forgotten.
    fn current(&self, now: DateTime<Utc>) -> MutexGuard<'_, Table> {
        let mut nominations = self.0.lock().unwrap_or_else(|e| e.into_inner());
        nominations.retain(|_, (_, since)| now - *since < NOMINATION_TTL);
        nominations
    }

    /// Applies the nominations that still stand to a provisioning round's snapshot, and
    /// forgets the rest (their pod bound or gone, their capacity gone or long initialized).
    pub fn apply(&self, cluster: &mut Snapshot, now: DateTime<Utc>) {
        let mut nominations = self.current(now);
        if nominations.is_empty() {
            return;
        }
        let kept = cluster.nominate(&wanted(&nominations), now);
        nominations.retain(|uid, (target, _)| match kept.get(uid) {
            Some(now_named) => {
                *target = Arc::clone(now_named);
                true
            }
            None => false,
        });
    }

    /// The Nodes (and NodeClaims no Node has registered for yet) that pending pods of `cluster`
    /// are nominated to, by name. `cluster` is left as it is.
    pub fn targets(&self, cluster: &Snapshot, now: DateTime<Utc>) -> BTreeSet<String> {
        let nominations = self.current(now);
        if nominations.is_empty() {
            return BTreeSet::new();
        }
        cluster
            .nominations(&wanted(&nominations), now)
            .into_values()
            .map(|target| target.to_string())
            .collect()
    }

    /// Remembers where a round planned its pods: (pod UID, the NodeClaim's or Node's name).
    pub fn remember(
        &self,
        placed: impl IntoIterator<Item = (Arc<str>, Arc<str>)>,
        now: DateTime<Utc>,
    ) {
        let mut nominations = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for (uid, target) in placed {
            nominations.insert(uid, (target, now));
        }
    }
}

/// Pod UID → target, as [`Snapshot::nominate`] takes them, sharing the nominations' strings.
fn wanted(nominations: &Table) -> HashMap<Arc<str>, Arc<str>> {
    nominations
        .iter()
        .map(|(uid, (target, _))| (Arc::clone(uid), Arc::clone(target)))
        .collect()
}
