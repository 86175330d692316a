//! Panics caught at the controller boundary. A panic in one reconcile (of one object, or one
//! pass of a polling controller) must not end the process: a crash loop stops autoscaling for
//! the whole cluster, while the object that triggered the bug is usually one of many. A caught
//! panic is logged at error level with the controller and the object, counted in
//! `controller_runtime_reconcile_panics_total{controller}` (controller-runtime's name, so
//! upstream's alerts keep working), and that object is retried after an exponential backoff
//! instead of at once, so a deterministic panic does not spin.
//!
//! Every reconcile and polling pass passes through here, so this is also where controller-runtime's
//! `controller_runtime_reconcile_total{controller,result}`, `_reconcile_errors_total`,
//! `_reconcile_time_seconds` and `controller_runtime_active_workers` are recorded, and where
//! the item leaves the controller's work queue and its work is timed (`workqueue_*`, see
//! [`crate::metrics::workqueue`]).
//!
//! Unwinding drops the reconcile's future mid-way, so whatever it had not yet written is never
//! written: a decision is applied only by the requests that completed, and every controller
//! already reads its progress back from the objects (a disruption command's marker and taints
//! are resumed or rolled back by the next pass after fresh validation).

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::{Context, Error};
use crate::metrics::METRICS;
use crate::metrics::workqueue::{WORKQUEUES, Work};

/// The first retry after a panic.
const FIRST_DELAY: Duration = Duration::from_secs(1);
/// The longest wait between retries of an object that keeps panicking (controller-runtime's
/// per-item limiter grows to 1000 s; five minutes keeps a fixed bug's recovery prompt).
const MAX_DELAY: Duration = Duration::from_secs(300);

/// The wait before retrying an object after its `panics`-th consecutive panic (1 s, doubling,
/// capped at five minutes).
pub fn panic_delay(panics: u32) -> Duration {
    FIRST_DELAY
        .saturating_mul(1u32 << panics.saturating_sub(1).min(16))
        .min(MAX_DELAY)
}

/// Consecutive panics per controller and object, kept in the [`Context`] so every reconcile of
/// a controller shares it. Lost on restart, which only means retrying sooner.
#[derive(Debug, Default)]
pub struct PanicBackoff {
    panics: Mutex<HashMap<(&'static str, String), u32>>,
}

impl PanicBackoff {
    /// Records a panic of `controller` on `object`; returns how long to wait before retrying.
    pub fn panicked(&self, controller: &'static str, object: &str) -> Duration {
        let mut panics = self.panics.lock().unwrap_or_else(|e| e.into_inner());
        let count = panics.entry((controller, object.to_string())).or_insert(0);
        *count = count.saturating_add(1);
        panic_delay(*count)
    }

    /// Forgets the panics of `controller` on `object` once a reconcile of it completed.
    pub fn completed(&self, controller: &'static str, object: &str) {
        let mut panics = self.panics.lock().unwrap_or_else(|e| e.into_inner());
        if !panics.is_empty() {
            panics.remove(&(controller, object.to_string()));
        }
    }
}

/// One reconcile (or polling pass) in flight, as controller-runtime's metrics see it:
/// `controller_runtime_active_workers` counts it while it lives (also when its task is aborted
/// mid-way, which drops it), it took its item from the work queue, and [`Worker::finish`]
/// records its time and result.
struct Worker {
    controller: &'static str,
    started: Instant,
    /// The queue's item, until [`Worker::finish`] records its work.
    work: Option<Work>,
}

impl Worker {
    fn start(controller: &'static str, item: &str) -> Self {
        METRICS
            .active_workers
            .with_label_values(&[controller])
            .inc();
        Self {
            controller,
            started: Instant::now(),
            work: Some(WORKQUEUES.take(controller, item)),
        }
    }

    /// Records the reconcile's duration and `result` (`success`, `error` or `requeue_after`).
    fn finish(mut self, result: &str) {
        let controller = [self.controller];
        METRICS
            .reconcile_time_seconds
            .with_label_values(&controller)
            .observe(self.started.elapsed().as_secs_f64());
        METRICS
            .reconcile_total
            .with_label_values(&[self.controller, result])
            .inc();
        if result == "error" {
            METRICS
                .reconcile_errors_total
                .with_label_values(&controller)
                .inc();
        }
        if let Some(work) = self.work.take() {
            work.done(result == "error");
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        METRICS
            .active_workers
            .with_label_values(&[self.controller])
            .dec();
    }
}

/// Runs `work`, catching a panic inside it: `Some(output)` when it completed, `None` when it
/// panicked, which is logged naming `controller` and `object` and counted.
pub async fn catch<F: Future>(
    controller: &'static str,
    object: &str,
    work: F,
) -> Option<F::Output> {
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok(output) => Some(output),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string());
            tracing::error!(controller, object, panic = %message, "reconcile panicked; backing off and retrying");
            METRICS
                .reconcile_panics_total
                .with_label_values(&[controller])
                .inc();
            None
        }
    }
}

/// How logs and the backoff name an object of kind `kind`: `Kind/name`, or
/// `Kind/namespace/name`.
pub fn object_key(kind: &str, object: &impl ResourceExt) -> String {
    match object.namespace() {
        Some(ns) => format!("{kind}/{ns}/{}", object.name_any()),
        None => format!("{kind}/{}", object.name_any()),
    }
}

/// One reconcile of `object` by a kube-rs controller, with a panic caught: the object is
/// requeued after [`PanicBackoff`]'s delay and the other objects carry on.
pub async fn guarded<K, F, Fut>(
    controller: &'static str,
    object: Arc<K>,
    ctx: Arc<Context>,
    reconcile: F,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>>,
{
    let key = object_key(&K::kind(&()), object.as_ref());
    guarded_object(controller, &key, &ctx, reconcile(object, ctx.clone())).await
}

/// [`guarded`] for a reconcile already bound to its object, named `key`.
pub async fn guarded_object(
    controller: &'static str,
    key: &str,
    ctx: &Context,
    reconcile: impl Future<Output = Result<Action, Error>>,
) -> Result<Action, Error> {
    let worker = Worker::start(controller, key);
    match catch(controller, key, reconcile).await {
        Some(result) => {
            worker.finish(match &result {
                Ok(action) if *action == Action::await_change() => "success",
                Ok(_) => "requeue_after",
                Err(_) => "error",
            });
            ctx.panics.completed(controller, key);
            result
        }
        None => {
            worker.finish("error");
            Ok(Action::requeue(ctx.panics.panicked(controller, key)))
        }
    }
}

/// What a polling pass's output says about how it went, for the `result` label: a pass that
/// returns an error counts as `error`, any other completed pass as `success`.
pub trait PassOutcome {
    /// Whether the pass failed.
    fn failed(&self) -> bool;
}

impl PassOutcome for () {
    fn failed(&self) -> bool {
        false
    }
}

impl<T, E> PassOutcome for Result<T, E> {
    fn failed(&self) -> bool {
        self.is_err()
    }
}

/// One pass of a polling controller (which reconciles every object at once), with a panic
/// caught: `Some(output)` when it completed, or `None` after waiting out the backoff of
/// consecutive panicking passes, so the caller simply starts the next pass.
pub async fn guarded_pass<F: Future<Output: PassOutcome>>(
    controller: &'static str,
    ctx: &Context,
    pass: F,
) -> Option<F::Output> {
    const PASS: &str = "pass";
    let worker = Worker::start(controller, PASS);
    match catch(controller, PASS, pass).await {
        Some(output) => {
            worker.finish(if output.failed() { "error" } else { "success" });
            ctx.panics.completed(controller, PASS);
            Some(output)
        }
        None => {
            worker.finish("error");
            tokio::time::sleep(ctx.panics.panicked(controller, PASS)).await;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_retries_back_off_to_five_minutes() {
        let delays: Vec<u64> = [1, 2, 3, 4, 9, 10, 1000, u32::MAX]
            .iter()
            .map(|n| panic_delay(*n).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 256, 300, 300, 300]);
    }

    #[test]
    fn the_backoff_grows_per_object_and_resets_once_a_reconcile_completes() {
        let b = PanicBackoff::default();
        assert_eq!(b.panicked("c", "Pod/ns/a"), Duration::from_secs(1));
        assert_eq!(b.panicked("c", "Pod/ns/a"), Duration::from_secs(2));
        assert_eq!(b.panicked("c", "Pod/ns/b"), Duration::from_secs(1));
        assert_eq!(b.panicked("other", "Pod/ns/a"), Duration::from_secs(1));
        b.completed("c", "Pod/ns/a");
        assert_eq!(b.panicked("c", "Pod/ns/a"), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_panic_is_caught_named_and_counted() {
        let counter = || {
            METRICS
                .reconcile_panics_total
                .with_label_values(&["panics-unit-test"])
                .get()
        };
        let before = counter();
        assert_eq!(
            catch("panics-unit-test", "Pod/ns/a", async { 7 }).await,
            Some(7)
        );
        assert_eq!(counter(), before);
        let caught: Option<()> = catch("panics-unit-test", "Pod/ns/b", async {
            panic!("index out of bounds");
        })
        .await;
        assert_eq!(caught, None);
        assert_eq!(counter(), before + 1.0);
    }
}
