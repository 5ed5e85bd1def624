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

/// The payload of a test's deliberate panic (a closure that panics on
/// purpose, thousands of times); [`quiet_deliberate_panics`] keeps the panic
/// hook from printing those, and only those.
pub struct Deliberate(pub u32);

/// Installs, once per process, a panic hook that stays quiet about
/// [`Deliberate`] panics and reports every other panic as the default hook
/// does (so a real failure in a test running alongside still shows).
pub fn quiet_deliberate_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<Deliberate>().is_none() {
                default(info);
            }
        }));
    });
}
