//! glibc's allocator set up for a long-running controller.
//!
//! Why: each provisioning round and disruption pass at 20,000 pods builds and drops vectors of
//! tens of thousands of entries. With glibc's defaults, a freed block above the mmap threshold
//! raises that threshold to its size, so the next such blocks come from the heap, and what is
//! freed there stays resident; every thread the runtime runs on may get an arena of its own
//! holding the same. Measured on a 20,000-pod burst (`hack/scale-bench.sh`, benches/README.md):
//! peak RSS 133 → 113 MiB and 128 → 106 MiB at the end, at the same CPU seconds, with a fixed
//! 128 KiB mmap and trim threshold and two arenas.
//!
//! An operator who sets glibc's own knobs (`GLIBC_TUNABLES` or the `MALLOC_*` variables) keeps
//! them: nothing is changed then.

/// The mmap and trim threshold: blocks from 128 KiB up are mapped and unmapped on their own.
const THRESHOLD: libc::c_int = 128 * 1024;

/// Arenas: the runtime has two worker threads.
const ARENAS: libc::c_int = 2;

/// Sets the thresholds and the arena count, unless the environment sets glibc's. Call before
/// any thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune() {
    let set_by_operator = std::env::vars_os().any(|(key, _)| {
        key.to_str()
            .is_some_and(|k| k == "GLIBC_TUNABLES" || k.starts_with("MALLOC_"))
    });
    if set_by_operator {
        return;
    }
    // SAFETY: mallopt only sets allocator parameters; the values are in range, and it is called
    // before the runtime starts any other thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, THRESHOLD);
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// Other C libraries have other allocators, and nothing to set here.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune() {}
