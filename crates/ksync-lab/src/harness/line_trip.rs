//! How long a cache line takes to go from one CPU to another and back: the
//! price of every handshake between a thread that posts and one that polls
//! for the post.
//!
//! On a virtual machine it follows where the host has put the vCPUs, and
//! that changes while the guest runs. On the 2-core AMD EPYC guest of
//! BENCHMARKS.md this probe read about 45 ns for some minutes and 360-400
//! ns for others, and sembench `-t 8 -w 4`'s ratio to the kernel followed it
//! (issue 12's eighteenth round). So sembench measures it just before each
//! run, and a run can be read against the state the machine was in.

use super::affinity::pin_current_thread;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Round trips per batch: a few milliseconds at the slowest trips seen.
const TRIPS: u32 = 10_000;
/// Batches; the fastest one's mean is the answer, so that a batch in
/// which one side lost its CPU for a while does not count.
const BATCHES: u32 = 3;
/// A probe whose threads cannot both run (a machine busy with something
/// else) gives up after this long.
const LIMIT: Duration = Duration::from_secs(1);

/// The line the two threads pass back and forth, alone on its lines.
#[repr(align(128))]
struct Line {
    /// Passes so far: odd when the line is the second CPU's thread's to
    /// hand back, even when it is the first's. A thread adds one to hand
    /// the line over.
    turn: AtomicU32,
}

/// The mean round trip of a cache line between `cpus.0` and `cpus.1`, in
/// nanoseconds, over the fastest of a few batches; `None` if the two are
/// one CPU, a thread could not be bound, or the threads could not both run
/// within a second.
pub fn round_trip_ns(cpus: (usize, usize)) -> Option<f64> {
    probe(cpus, TRIPS, BATCHES, LIMIT)
}

/// [`round_trip_ns`] with `batches` of `trips`, given up after `limit`.
fn probe(cpus: (usize, usize), trips: u32, batches: u32, limit: Duration) -> Option<f64> {
    if cpus.0 == cpus.1 {
        return None;
    }
    let line = Line {
        turn: AtomicU32::new(0),
    };
    let give_up = AtomicBool::new(false);
    let deadline = Instant::now() + limit;
    // Waits until `turn` reads `expected`, or the probe is given up.
    let wait_for = |expected: u32| -> bool {
        let mut spins = 0u32;
        // Acquire pairs with the other thread's release increment.
        while line.turn.load(Ordering::Acquire) != expected {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024)
                && (give_up.load(Ordering::Relaxed) || Instant::now() > deadline)
            {
                give_up.store(true, Ordering::Relaxed);
                return false;
            }
        }
        true
    };
    std::thread::scope(|s| {
        let answerer = s.spawn(|| {
            if !pin_current_thread(cpus.1) {
                give_up.store(true, Ordering::Relaxed);
                return;
            }
            for trip in 0..trips * batches {
                if !wait_for(2 * trip + 1) {
                    return;
                }
                line.turn.fetch_add(1, Ordering::Release);
            }
        });
        let asker = s.spawn(|| {
            if !pin_current_thread(cpus.0) {
                give_up.store(true, Ordering::Relaxed);
                return None;
            }
            let mut fastest = f64::INFINITY;
            for batch in 0..batches {
                let start = Instant::now();
                for trip in batch * trips..(batch + 1) * trips {
                    // Release pairs with the answerer's acquire load.
                    line.turn.fetch_add(1, Ordering::Release);
                    if !wait_for(2 * trip + 2) {
                        return None;
                    }
                }
                let mean = start.elapsed().as_nanos() as f64 / f64::from(trips);
                fastest = fastest.min(mean);
            }
            Some(fastest)
        });
        let answer = asker.join().expect("the asking thread does not panic");
        answerer
            .join()
            .expect("the answering thread does not panic");
        answer
    })
}

/// [`round_trip_ns`] between the first two CPUs this process may use;
/// `None` with fewer than two.
pub fn first_two_cpus() -> Option<f64> {
    match super::affinity::allowed_cpus()[..] {
        [a, b, ..] => round_trip_ns((a, b)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_takes_some_time_and_needs_two_cpus() {
        let cpus = super::super::affinity::allowed_cpus();
        // Few trips and a long limit: the test threads of a busy machine
        // still let both sides through.
        let probe = |pair| probe(pair, 100, 2, Duration::from_secs(60));
        assert_eq!(probe((cpus[0], cpus[0])), None, "one CPU");
        // A CPU that cannot be bound: either side gives up, the other too.
        let nowhere = libc::CPU_SETSIZE as usize;
        assert_eq!(probe((cpus[0], nowhere)), None);
        assert_eq!(probe((nowhere, cpus[0])), None);
        if let [a, b, ..] = cpus[..] {
            let ns = probe((a, b)).expect("two CPUs");
            assert!(ns.is_finite() && ns > 0.0, "{ns}");
        }
    }
}
