//! Per-thread counts of work no result shows, for the tests that check a
//! search was narrowed or skipped: test builds only.

use std::cell::Cell;

/// What is counted.
#[derive(Clone, Copy)]
pub(super) enum Count {
    /// Slots asked about in a search for the dead (`Registry::lock_if_dead`,
    /// an `fcntl` each).
    Probes,
    /// Reaches worked out for a call (`Locked::reach_of`).
    Reaches,
}

std::thread_local! {
    static COUNTS: [Cell<u64>; 2] = const { [Cell::new(0), Cell::new(0)] };
}

/// Counts one `what` in this thread.
pub(super) fn count(what: Count) {
    COUNTS.with(|c| c[what as usize].set(c[what as usize].get() + 1));
}

/// This thread's count of `what` so far.
pub(super) fn made(what: Count) -> u64 {
    COUNTS.with(|c| c[what as usize].get())
}
