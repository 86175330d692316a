//! The watch events of a kind, handed on to the controllers that reconcile *other* objects on
//! them (a NodeClaim's NodePool, a Node's NodeClaim) only once [`super::ClusterState`]'s store has
//! them.
//!
//! Why not a watch of their own (`Controller::watches`): that watch and the shared store's are
//! two streams. When the controller's arrives first, the reconcile it starts reads the store
//! before the change is in it, writes a stale status (a NodePool still counting a deleted
//! NodeClaim), and nothing triggers it again until its periodic requeue. Fed from the shared
//! watch instead, the reconcile always sees at least the change that triggered it, and the API
//! server serves one watch per kind fewer.

use std::sync::{Arc, Mutex, PoisonError};

use futures::Stream;
use kube::runtime::watcher::Event;
use tokio::sync::mpsc::{self, UnboundedSender};

/// Subscribers to the changed objects of `K`.
pub struct Changes<K> {
    subscribers: Arc<Mutex<Vec<UnboundedSender<Arc<K>>>>>,
}

impl<K> Clone for Changes<K> {
    fn clone(&self) -> Self {
        Self {
            subscribers: self.subscribers.clone(),
        }
    }
}

impl<K> Default for Changes<K> {
    fn default() -> Self {
        Self {
            subscribers: Arc::default(),
        }
    }
}

impl<K: Send + Sync + 'static> Changes<K> {
    /// Every object applied or deleted from now on, in watch order. Unbounded: a controller's
    /// trigger stream is drained into its (deduplicating) scheduler as fast as it arrives.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.lock().push(tx);
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    /// Hands `object` to every subscriber still listening.
    fn publish(&self, object: &Arc<K>) {
        self.lock().retain(|s| s.send(object.clone()).is_ok());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<UnboundedSender<Arc<K>>>> {
        // A subscriber list is valid whatever a panicking holder left half done.
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Follows one kind's reflected watch: hands each change on once the store holds it. A relist's
/// objects reach the store together at its end (`InitDone`), so they are held until then.
pub struct Publisher<K> {
    changes: Changes<K>,
    relisted: Vec<Arc<K>>,
}

impl<K: Send + Sync + 'static> Publisher<K> {
    /// A publisher to `changes`.
    pub fn new(changes: Changes<K>) -> Self {
        Self {
            changes,
            relisted: Vec::new(),
        }
    }

    /// Takes the next event of the reflected stream (after the store applied it).
    pub fn observe(&mut self, event: Event<K>) {
        match event {
            Event::Apply(o) | Event::Delete(o) => self.changes.publish(&Arc::new(o)),
            Event::Init => self.relisted.clear(),
            Event::InitApply(o) => self.relisted.push(Arc::new(o)),
            Event::InitDone => {
                for o in self.relisted.drain(..) {
                    self.changes.publish(&o);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use futures::StreamExt;

    use super::*;

    fn next(stream: &mut (impl Stream<Item = Arc<&'static str>> + Unpin)) -> Option<&'static str> {
        stream.next().now_or_never().flatten().map(|o| *o)
    }

    #[test]
    fn changes_reach_every_subscriber_and_a_relist_only_when_it_is_complete() {
        let changes = Changes::default();
        let mut a = Box::pin(changes.subscribe());
        let mut b = Box::pin(changes.subscribe());
        let mut publisher = Publisher::new(changes.clone());
        publisher.observe(Event::Apply("one"));
        publisher.observe(Event::Delete("two"));
        for s in [&mut a, &mut b] {
            assert_eq!(next(s), Some("one"));
            assert_eq!(next(s), Some("two"));
            assert_eq!(next(s), None);
        }
        publisher.observe(Event::Init);
        publisher.observe(Event::InitApply("stale"));
        publisher.observe(Event::Init);
        publisher.observe(Event::InitApply("three"));
        assert_eq!(next(&mut a), None, "the store has no relisted object yet");
        publisher.observe(Event::InitDone);
        assert_eq!(next(&mut a), Some("three"));
        assert_eq!(
            next(&mut a),
            None,
            "an abandoned relist's objects are dropped"
        );
    }

    #[test]
    fn a_dropped_subscriber_is_forgotten() {
        let changes = Changes::default();
        let gone = changes.subscribe();
        let mut kept = Box::pin(changes.subscribe());
        drop(gone);
        Publisher::new(changes.clone()).observe(Event::Apply("one"));
        assert_eq!(changes.lock().len(), 1);
        assert_eq!(next(&mut kept), Some("one"));
    }
}
