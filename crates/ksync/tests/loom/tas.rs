//! loom model of the test-and-test-and-set lock: exclusion and progress.

use crate::exclusion::{increments, try_lock_respects_holder};
use ksync::spin::RawTasLock;

#[test]
fn tas_two_threads() {
    increments(RawTasLock::new, 2, true);
}

#[test]
fn tas_three_threads() {
    increments(RawTasLock::new, 3, true);
}

/// try_lock never succeeds while another thread holds the lock.
#[test]
fn tas_try_lock_respects_holder() {
    try_lock_respects_holder(RawTasLock::new);
}
