//! Helpers every test target of ksync shares, defined once: the integration
//! tests include this file with `mod common;`, and the library's unit tests
//! include the same file from `src/lib.rs` (`test_common`).
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// How long a test waits for a state the code under test must reach before
/// it calls the code stuck. A watchdog, not a timing threshold: generous, so
/// that a loaded machine only makes a passing test slower.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Polls `cond`, sleeping 200 µs between polls, until it holds; fails the
/// test, naming `what`, if it does not hold within [`PATIENCE`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < PATIENCE,
            "timed out after {PATIENCE:?} waiting for: {what}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}
