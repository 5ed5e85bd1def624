//! Bounded torture tests: every lock, 2, 8 and 64 threads (64 on a 2-core
//! machine is the oversubscribed case), through the exclusion check in
//! `exclusion`. `broken_lock_is_caught` proves the check can fail, and
//! `fifo_bug_is_caught_at_every_fifo_size` that the FIFO locks' short runs
//! can.

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

/// The FIFO locks' runs are short; each size must still catch a lock whose
/// handover lets the next waiter in early. Any forced handover whose waiter
/// has taken its ticket before the holder leaves shows it, and every run has
/// dozens of handovers; the attempts only absorb a run whose waiters were
/// all still on their way.
#[test]
fn fifo_bug_is_caught_at_every_fifo_size() {
    use exclusion::{FIFO_EIGHT, FIFO_OVERSUBSCRIBED, FIFO_TWO, FIFO_WAITERS};
    for (threads, iters) in [FIFO_TWO, FIFO_EIGHT, FIFO_OVERSUBSCRIBED] {
        let caught = (1..=3).any(|_| {
            !exclusion::hammer_waiting(
                exclusion::Raw(<exclusion::OffByOneTicketLock as lock_api::RawMutex>::INIT),
                threads,
                iters,
                FIFO_WAITERS,
            )
            .is_exact()
        });
        assert!(
            caught,
            "{threads} threads x {iters}: the run never caught a FIFO lock that lets the next waiter in"
        );
    }
}
