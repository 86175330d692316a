//! Commands in flight. Once a command is validated, its candidates tainted and its replacements
//! launched, the rest — waiting for the replacements to initialize, then deleting the candidates
//! — runs beside the next passes, as upstream's orchestration queue does: a drift roll keeps as
//! many nodes moving as its budget allows instead of one node per replacement's boot.
//!
//! The passes must see what is in flight before the cache does: an in-flight command's
//! candidates count against budgets and are no candidates again, its taints are no orphans and
//! its replacements' markers are not a dead controller's. A command that ended with its markers
//! cleared is remembered until the cache no longer shows them, so a stale view does not resume
//! it. One that ended with a marker left (a failed write) is forgotten at once: the next pass
//! finishes or rolls it back from that marker, as a dead controller's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use kube::ResourceExt;
use tokio::task::JoinSet;

use crate::disruption::Command;
use crate::disruption::state::State;
use crate::runtime::Context;
use crate::runtime::panics::catch;
use crate::snapshot::Snapshot;

use super::command::complete;
use super::queue_failure;
use super::resume::COMMAND_ANNOTATION;

/// What the passes and the in-flight tasks share.
#[derive(Debug, Default)]
struct Book {
    /// The candidates of each command in flight, by its marker.
    running: BTreeMap<String, Vec<String>>,
    /// Markers of commands that ended, cleared, which the cache may still show on a replacement.
    ended: BTreeSet<String>,
}

/// The disruption controller's commands in flight. Dropping it aborts them where they stand,
/// which the next controller resumes or rolls back from the markers, as after a crash.
#[derive(Debug, Default)]
pub struct Queue {
    tasks: JoinSet<()>,
    book: Arc<Mutex<Book>>,
}

fn lock(book: &Mutex<Book>) -> MutexGuard<'_, Book> {
    book.lock().unwrap_or_else(|e| e.into_inner())
}

impl Queue {
    /// Hands a tainted command whose replacements (`launched`) exist to a task that waits for
    /// them and deletes the candidates. `marker` is the command's [`COMMAND_ANNOTATION`].
    pub(super) fn start(
        &mut self,
        ctx: &Arc<Context>,
        cmd: Command,
        launched: Vec<String>,
        marker: String,
    ) {
        lock(&self.book)
            .running
            .insert(marker.clone(), cmd.candidates.clone());
        let (ctx, book) = (ctx.clone(), self.book.clone());
        self.tasks.spawn(async move {
            let work = async {
                match complete(&ctx, &cmd, &launched).await {
                    Ok(cleared) => cleared,
                    Err(e) => {
                        queue_failure(&cmd, super::decision_label(&cmd));
                        tracing::warn!(controller = "disruption", command = ?cmd.candidates, error = %e, "disruption command failed; the next pass finishes or rolls it back");
                        false
                    }
                }
            };
            // A failure or a panic may leave the marker on the replacements; with the command
            // out of the book, the next pass resumes or rolls it back, as a dead controller's.
            let cleared = catch("disruption", "command", work).await == Some(true);
            let mut book = lock(&book);
            book.running.remove(&marker);
            if cleared {
                book.ended.insert(marker);
            }
        });
    }

    /// Collects the tasks that ended and forgets ended commands whose marker `cluster` no longer
    /// shows.
    pub(super) fn reap(&mut self, cluster: &Snapshot) {
        while self.tasks.try_join_next().is_some() {}
        let shown: BTreeSet<&String> = cluster
            .nodeclaims
            .iter()
            .filter_map(|c| c.annotations().get(COMMAND_ANNOTATION))
            .collect();
        lock(&self.book).ended.retain(|m| shown.contains(m));
    }

    /// Whether the command that wrote `marker` is in flight or just ended: not left behind.
    pub(super) fn holds(&self, marker: &str) -> bool {
        let book = lock(&self.book);
        book.running.contains_key(marker) || book.ended.contains(marker)
    }

    /// The candidates of the commands in flight.
    pub(super) fn candidates(&self) -> BTreeSet<String> {
        lock(&self.book)
            .running
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    /// Marks the candidates in flight disrupting in `state`, whatever the cache shows of their
    /// taint yet: they count against budgets and are no candidates.
    pub(super) fn mark(&self, state: &mut State) {
        let book = lock(&self.book);
        if book.running.is_empty() {
            return;
        }
        for node in &mut state.nodes {
            if book
                .running
                .values()
                .any(|c| c.iter().any(|c| c.as_str() == node.name.as_ref()))
            {
                node.disrupting = true;
            }
        }
    }

    /// Waits until every command in flight ended. The controller never waits so; tests do, to
    /// see a command's end.
    pub async fn settle(&mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}
