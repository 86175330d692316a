//! A counting global allocator for the heap tests (issue #15): the system allocator, counting
//! the bytes live, the most live since the last [`Mark`], all bytes ever allocated, and the
//! allocations made. Included by path (`#[path = "support/heap.rs"]`) only by the binaries that
//! measure, so no other test binary pays for the counting.

// Each binary that includes it reads part of what it counts.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
            TOTAL.fetch_add(layout.size(), Ordering::Relaxed);
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Held by each test while it counts: the counters are the process's, and the harness runs
/// tests on several threads.
static COUNTING: Mutex<()> = Mutex::new(());

/// Serialises the counting tests of a binary: hold the guard for the whole test.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    COUNTING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The counters at one moment; what happened since is read from it. Taking a mark resets the
/// peak to what is live then.
pub struct Mark {
    live: usize,
    total: usize,
    allocations: usize,
}

impl Mark {
    pub fn now() -> Self {
        let live = LIVE.load(Ordering::Relaxed);
        PEAK.store(live, Ordering::Relaxed);
        Mark {
            live,
            total: TOTAL.load(Ordering::Relaxed),
            allocations: ALLOCATIONS.load(Ordering::Relaxed),
        }
    }

    /// Bytes live now beyond those live at the mark (0 if fewer).
    pub fn held(&self) -> usize {
        LIVE.load(Ordering::Relaxed).saturating_sub(self.live)
    }

    /// The most bytes live at once since the mark, beyond those live at it.
    pub fn peak(&self) -> usize {
        PEAK.load(Ordering::Relaxed).saturating_sub(self.live)
    }

    /// Bytes allocated since the mark, freed or not.
    pub fn allocated(&self) -> usize {
        TOTAL.load(Ordering::Relaxed) - self.total
    }

    /// Allocations made since the mark.
    pub fn allocations(&self) -> usize {
        ALLOCATIONS.load(Ordering::Relaxed) - self.allocations
    }
}
