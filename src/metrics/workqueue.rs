//! controller-runtime's work-queue families (`workqueue_*`, labelled with the controller's
//! name twice, as `name` and `controller`), kept for queues that are not client-go's. Operators
//! alert on them (a growing depth, a long queue duration, work that never finishes), so each
//! series moves with what the controller really does:
//!
//! - A polling controller (the provisioner, disruption, garbage collection, ...) has a queue of
//!   one item, its pass: the pass is added when it is due (its wait ran out or its trigger
//!   fired) and taken at once by the one worker, so the depth is 0 between passes and the queue
//!   duration is the moment in between — as upstream's singleton controllers, which requeue
//!   themselves onto an idle queue.
//! - A kube-runtime `Controller` (NodeClaim lifecycle, NodePool, EC2NodeClass) queues objects
//!   in a scheduler that cannot be looked into, so its queue is kept here by the same rules,
//!   fed where the triggers are made (`runtime::untyped`): every watch event of an object and
//!   every object a watched relation maps to is added, an object already waiting is not added
//!   again (the scheduler keeps one entry per object), a reconcile takes its object (it may
//!   have waited for the object's previous reconcile to end), and a trigger for an object that
//!   is gone leaves the queue with the scheduler's "not found". A requeue a reconcile asked for
//!   is added when its delay runs out, which is when the scheduler starts it.
//!
//! Work is timed from a reconcile's (or pass's) start to its end (`runtime::panics`); one that
//! failed or panicked is a retry, as controller-runtime requeues it rate-limited. The
//! in-progress gauges are computed from the work running when the metrics are scraped.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use super::METRICS;

/// Every controller's work queue; see the module documentation.
pub static WORKQUEUES: LazyLock<WorkQueues> = LazyLock::new(WorkQueues::default);

/// The work queues, by controller name.
#[derive(Debug, Default)]
pub struct WorkQueues {
    queues: Mutex<HashMap<&'static str, Queue>>,
}

/// One controller's queue.
#[derive(Debug, Default)]
struct Queue {
    /// Items added and not taken yet, with when each was added.
    waiting: HashMap<String, Instant>,
    /// When each item being worked on was taken, by a number unique within the queue (the same
    /// object may be worked on by an aborted run and its successor).
    working: HashMap<u64, Instant>,
    /// The number the next item taken gets.
    next: u64,
}

impl Queue {
    fn publish_depth(&self, controller: &str) {
        METRICS
            .workqueue_depth
            .with_label_values(&[controller, controller, ""])
            .set(self.waiting.len() as f64);
    }
}

/// One item taken from a queue and being worked on. [`Work::done`] records how it went;
/// dropping it unfinished (its task was aborted) only ends it.
#[derive(Debug)]
#[must_use = "work is timed until done"]
pub struct Work {
    controller: &'static str,
    id: u64,
    started: Instant,
}

impl WorkQueues {
    fn with<R>(&self, controller: &'static str, f: impl FnOnce(&mut Queue) -> R) -> R {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        f(queues.entry(controller).or_default())
    }

    /// Adds `item` to `controller`'s queue unless it is already waiting there.
    pub fn add(&self, controller: &'static str, item: &str) {
        self.with(controller, |q| {
            if q.waiting.contains_key(item) {
                return;
            }
            q.waiting.insert(item.to_string(), Instant::now());
            METRICS
                .workqueue_adds_total
                .with_label_values(&[controller, controller])
                .inc();
            q.publish_depth(controller);
        });
    }

    /// Takes `item` from `controller`'s queue to work on it; an item that was not waiting (a
    /// pass that is due, a requeue whose delay ran out) is added and taken at once.
    pub fn take(&self, controller: &'static str, item: &str) -> Work {
        self.with(controller, |q| {
            let now = Instant::now();
            let added = q.waiting.remove(item).unwrap_or_else(|| {
                METRICS
                    .workqueue_adds_total
                    .with_label_values(&[controller, controller])
                    .inc();
                now
            });
            METRICS
                .workqueue_queue_duration_seconds
                .with_label_values(&[controller, controller])
                .observe(now.saturating_duration_since(added).as_secs_f64());
            q.publish_depth(controller);
            let id = q.next;
            q.next = q.next.wrapping_add(1);
            q.working.insert(id, now);
            Work {
                controller,
                id,
                started: now,
            }
        })
    }

    /// Takes `item` from `controller`'s queue without working on it: it was triggered but no
    /// longer exists, so there is nothing to reconcile.
    pub fn gone(&self, controller: &'static str, item: &str) {
        self.with(controller, |q| {
            if let Some(added) = q.waiting.remove(item) {
                METRICS
                    .workqueue_queue_duration_seconds
                    .with_label_values(&[controller, controller])
                    .observe(added.elapsed().as_secs_f64());
                q.publish_depth(controller);
            }
        });
    }

    /// Empties `controller`'s queue for a new run of the controller (its watches list every
    /// object again); the work of the previous run ends as its tasks are dropped.
    pub fn restart(&self, controller: &'static str) {
        self.with(controller, |q| {
            q.waiting.clear();
            q.publish_depth(controller);
        });
    }

    /// Sets the in-progress gauges of every queue from the work running now: the seconds all of
    /// it has run so far, and the longest any one of it has.
    pub fn refresh(&self) {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        for (controller, q) in queues.iter() {
            let running = q
                .working
                .values()
                .map(|started| started.elapsed().as_secs_f64());
            let (total, longest) =
                running.fold((0.0, 0.0), |(t, l): (f64, f64), s| (t + s, l.max(s)));
            let labels = [*controller, *controller];
            METRICS
                .workqueue_unfinished_work_seconds
                .with_label_values(&labels)
                .set(total);
            METRICS
                .workqueue_longest_running_processor_seconds
                .with_label_values(&labels)
                .set(longest);
        }
    }
}

impl Work {
    /// Records the work's duration, and a retry when it `failed`.
    pub fn done(self, failed: bool) {
        let labels = [self.controller, self.controller];
        METRICS
            .workqueue_work_duration_seconds
            .with_label_values(&labels)
            .observe(self.started.elapsed().as_secs_f64());
        if failed {
            METRICS
                .workqueue_retries_total
                .with_label_values(&labels)
                .inc();
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        WORKQUEUES.with(self.controller, |q| {
            q.working.remove(&self.id);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(family: &prometheus::GaugeVec, controller: &str) -> f64 {
        family.with_label_values(&[controller, controller]).get()
    }

    fn adds(controller: &str) -> f64 {
        METRICS
            .workqueue_adds_total
            .with_label_values(&[controller, controller])
            .get()
    }

    fn depth(controller: &str) -> f64 {
        METRICS
            .workqueue_depth
            .with_label_values(&[controller, controller, ""])
            .get()
    }

    fn counts(family: &prometheus::HistogramVec, controller: &str) -> u64 {
        family
            .with_label_values(&[controller, controller])
            .get_sample_count()
    }

    #[test]
    fn an_object_waits_once_however_often_it_is_triggered() {
        let q = &*WORKQUEUES;
        let c = "workqueue-unit-dedup";
        q.add(c, "NodePool/a");
        q.add(c, "NodePool/a");
        q.add(c, "NodePool/b");
        assert_eq!((adds(c), depth(c)), (2.0, 2.0));
        let work = q.take(c, "NodePool/a");
        assert_eq!(depth(c), 1.0);
        assert_eq!(
            counts(&METRICS.workqueue_queue_duration_seconds, c),
            1,
            "taking an item records how long it waited"
        );
        // Triggered again while its reconcile runs: it waits for the next one.
        q.add(c, "NodePool/a");
        assert_eq!((adds(c), depth(c)), (3.0, 2.0));
        work.done(false);
        q.gone(c, "NodePool/b");
        assert_eq!(depth(c), 1.0);
        q.restart(c);
        assert_eq!(depth(c), 0.0);
        assert_eq!(counts(&METRICS.workqueue_work_duration_seconds, c), 1);
    }

    #[test]
    fn a_due_item_is_added_as_it_is_taken_and_a_failure_is_a_retry() {
        let q = &*WORKQUEUES;
        let c = "workqueue-unit-pass";
        let retries = || {
            METRICS
                .workqueue_retries_total
                .with_label_values(&[c, c])
                .get()
        };
        q.take(c, "pass").done(true);
        assert_eq!((adds(c), depth(c), retries()), (1.0, 0.0, 1.0));
        q.take(c, "pass").done(false);
        assert_eq!((adds(c), retries()), (2.0, 1.0));
        assert_eq!(counts(&METRICS.workqueue_work_duration_seconds, c), 2);
    }

    #[test]
    fn running_work_is_unfinished_until_it_ends_or_is_dropped() {
        let q = &*WORKQUEUES;
        let c = "workqueue-unit-unfinished";
        let first = q.take(c, "NodeClaim/a");
        let second = q.take(c, "NodeClaim/b");
        std::thread::sleep(std::time::Duration::from_millis(5));
        q.refresh();
        let unfinished = value(&METRICS.workqueue_unfinished_work_seconds, c);
        let longest = value(&METRICS.workqueue_longest_running_processor_seconds, c);
        assert!(longest > 0.0, "{longest}");
        assert!(unfinished >= longest, "{unfinished} < {longest}");
        first.done(false);
        drop(second);
        q.refresh();
        assert_eq!(value(&METRICS.workqueue_unfinished_work_seconds, c), 0.0);
        assert_eq!(
            value(&METRICS.workqueue_longest_running_processor_seconds, c),
            0.0
        );
    }
}
