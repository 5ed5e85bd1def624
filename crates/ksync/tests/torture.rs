//! Bounded torture tests: every lock, 2, 8 and 64 threads (64 on a 2-core
//! machine is the oversubscribed case), through the exclusion check in
//! `exclusion`. `broken_lock_is_caught` proves the check can fail.

mod common;
#[path = "torture/exclusion.rs"]
mod exclusion;

#[path = "torture/combining.rs"]
mod combining;
#[path = "torture/mcs.rs"]
mod mcs;
#[path = "torture/pv.rs"]
mod pv;
#[path = "torture/qspin.rs"]
mod qspin;
#[path = "torture/semlock.rs"]
mod semlock;
#[path = "torture/tas.rs"]
mod tas;
#[path = "torture/ticket.rs"]
mod ticket;

/// The check must catch a lock that lets two threads in. A single run could in
/// principle interleave perfectly, so allow a few attempts; a correct check
/// fails the broken lock on the first in practice.
#[test]
fn broken_lock_is_caught() {
    for attempt in 1..=10 {
        let report = exclusion::hammer(
            <exclusion::BrokenLock as lock_api::RawMutex>::INIT,
            8,
            20_000,
        );
        if !report.is_exact() {
            eprintln!(
                "broken lock caught on attempt {attempt}: counted {} of {}, {} violations",
                report.counted,
                report.expected(),
                report.violations
            );
            return;
        }
    }
    panic!("the torture check never caught a lock with no exclusion: the check is broken");
}
