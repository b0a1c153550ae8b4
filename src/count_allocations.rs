//! Allocation counts for the benchmarks. With the feature `count-allocations` (which
//! `make bench-cpu` builds apart from the shipped bootstrap, never in it) the global allocator
//! is a counting one: every call goes to the system allocator unchanged and is counted, and
//! after each invocation the bootstrap writes the counts so far on one stderr line (`report`).
//! Without it only [`parse_report`], which `benches/cpu.rs` reads those lines with, is here.

/// Allocator calls since start-up.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    /// `alloc` and `alloc_zeroed` calls.
    pub allocations: u64,
    /// `realloc` calls.
    pub reallocations: u64,
    /// Bytes asked for by allocations and by growing reallocations.
    pub bytes: u64,
}

const PREFIX: &str = "count-allocations";

/// The counts on a line the counting bootstrap wrote; `None` for any other line.
pub fn parse_report(line: &str) -> Option<Counts> {
    let mut fields = line.strip_prefix(PREFIX)?.split_whitespace();
    let mut next = |name: &str| {
        let (field, value) = fields.next()?.split_once('=')?;
        (field == name).then(|| value.parse().ok()).flatten()
    };
    Some(Counts {
        allocations: next("allocations")?,
        reallocations: next("reallocations")?,
        bytes: next("bytes")?,
    })
}

#[cfg(feature = "count-allocations")]
pub use counting::report;

#[cfg(feature = "count-allocations")]
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::PREFIX;

    struct Counting;

    static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
    static REALLOCATIONS: AtomicU64 = AtomicU64::new(0);
    static BYTES: AtomicU64 = AtomicU64::new(0);

    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    // SAFETY: each method passes its arguments to the system allocator unchanged and returns what
    // it returns; the counters are atomics, touched without allocating.
    #[allow(unsafe_code)]
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(&ALLOCATIONS, 1);
            add(&BYTES, layout.size());
            // SAFETY: the caller's contract for `alloc`, passed on.
            unsafe { System.alloc(layout) }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            add(&ALLOCATIONS, 1);
            add(&BYTES, layout.size());
            // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
            unsafe { System.alloc_zeroed(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: the caller's contract for `dealloc`, passed on.
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            add(&REALLOCATIONS, 1);
            add(&BYTES, new_size.saturating_sub(layout.size()));
            // SAFETY: the caller's contract for `realloc`, passed on.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    /// Writes the counts since start-up on one stderr line, which [`super::parse_report`] reads.
    pub fn report() {
        eprintln!(
            "{PREFIX} allocations={} reallocations={} bytes={}",
            ALLOCATIONS.load(Ordering::Relaxed),
            REALLOCATIONS.load(Ordering::Relaxed),
            BYTES.load(Ordering::Relaxed),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_line_is_read_back_and_other_lines_are_not() {
        let line = "count-allocations allocations=12 reallocations=3 bytes=4567";
        assert_eq!(
            parse_report(line),
            Some(Counts {
                allocations: 12,
                reallocations: 3,
                bytes: 4567
            })
        );
        assert_eq!(parse_report(r#"{"level":"INFO"}"#), None);
        assert_eq!(parse_report("count-allocations bytes=1"), None);
    }
}
