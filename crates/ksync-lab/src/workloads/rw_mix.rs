//! The reader-writer mixes of David Howells' "rw_semaphores, optimisations"
//! thread (LKML, April 2001), in which Andrea Arcangeli compared rwsem
//! designs: `rw`, `r1`, `r2`, `ro`, `w1`, `wo`; and two zero-load twins of
//! the lab's own, `wo0` and `rw0`.
//!
//! The 2001 test programs are not public; their descendant, Howells'
//! `synchro-test` module, runs `rd` reader and `wr` writer threads for a
//! fixed time, each looping `down; hold for load µs; up; wait interval µs`,
//! and reports acquisitions per class ("reads taken", "writes taken"). The
//! thread shows which modes have readers only (r1, r2, ro) and writers only
//! (w1, wo) but not their thread counts; those below are the lab's reading
//! (r1/w1 one thread, r2 two, ro/wo many, rw many of both), kept in one
//! table, [`MIXES`], so that exact definitions can be dropped in when the
//! programs turn up, and new mixes added as lines.

use crate::harness::clock::busy;
use crate::peers::rwlock::{LabRwLock, RwVisitor};
use ksync::stat::LockStatSnapshot;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// One of the thread's modes: who runs, and how long each holds the lock
/// and waits between acquisitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    pub name: &'static str,
    pub readers: usize,
    pub writers: usize,
    /// Busy time inside the lock per acquisition, microseconds.
    pub load_us: u32,
    /// Busy time outside the lock between acquisitions, microseconds.
    pub interval_us: u32,
    /// What the mix stands for.
    pub about: &'static str,
}

/// The six mixes of the thread, then two of the lab's own. Load and interval
/// follow synchro-test's defaults (2 µs) for the contended modes and are zero
/// for the single-thread fast-path ones. `wo0` and `rw0` are `wo` and `rw`
/// with zero load and interval: 2 µs of busy work per acquisition hides what
/// the lock word and the wake-ups cost, so these two show it.
pub const MIXES: [Mix; 8] = [
    Mix {
        name: "rw",
        readers: 8,
        writers: 4,
        load_us: 2,
        interval_us: 2,
        about: "many readers and writers together (the only mixed mode; Andrea ran it 50 s)",
    },
    Mix {
        name: "r1",
        readers: 1,
        writers: 0,
        load_us: 0,
        interval_us: 0,
        about: "one reader: the uncontended read fast path",
    },
    Mix {
        name: "r2",
        readers: 2,
        writers: 0,
        load_us: 0,
        interval_us: 0,
        about: "two readers, one per CPU of the 2001 two-way box: the count word bouncing",
    },
    Mix {
        name: "ro",
        readers: 16,
        writers: 0,
        load_us: 2,
        interval_us: 2,
        about: "many readers only",
    },
    Mix {
        name: "w1",
        readers: 0,
        writers: 1,
        load_us: 0,
        interval_us: 0,
        about: "one writer: the uncontended write fast path",
    },
    Mix {
        name: "wo",
        readers: 0,
        writers: 16,
        load_us: 2,
        interval_us: 2,
        about: "many writers only",
    },
    Mix {
        name: "wo0",
        readers: 0,
        writers: 16,
        load_us: 0,
        interval_us: 0,
        about: "wo with no load: the lock word and hand-overs alone (the lab's, not the thread's)",
    },
    Mix {
        name: "rw0",
        readers: 8,
        writers: 4,
        load_us: 0,
        interval_us: 0,
        about: "rw with no load: phase changes alone (the lab's, not the thread's)",
    },
];

/// What one mix measured for one lock.
#[derive(Debug, Clone)]
pub struct MixResult {
    pub reads: u64,
    pub writes: u64,
    pub elapsed: Duration,
    /// Each reader's acquisitions.
    pub per_reader: Vec<u64>,
    /// Each writer's acquisitions.
    pub per_writer: Vec<u64>,
    pub longest_read_wait: Duration,
    pub longest_write_wait: Duration,
    /// Writers' increments all survived and no reader saw a writer inside.
    pub exact: bool,
    /// The lock's statistics over the run, for a `+stat` lock.
    pub lock_stats: Option<LockStatSnapshot>,
}

/// Runs `mix` on a fresh `L` for `duration`.
pub fn run_mix<L: LabRwLock>(mix: Mix, duration: Duration) -> MixResult {
    let lock = L::new();
    // Set while a writer is inside: a reader that sees it, or a writer that
    // finds it already set, caught the lock failing to exclude.
    let writer_inside = AtomicBool::new(false);
    let torn = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let threads = mix.readers + mix.writers;
    let start_line = Barrier::new(threads + 1);
    let load = Duration::from_micros(u64::from(mix.load_us));
    let interval = Duration::from_micros(u64::from(mix.interval_us));
    let (results, elapsed): (Vec<(bool, u64, Duration)>, Duration) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let is_writer = t >= mix.readers;
                let (lock, writer_inside, torn, stop, start_line) =
                    (&lock, &writer_inside, &torn, &stop, &start_line);
                s.spawn(move || {
                    start_line.wait();
                    let mut taken = 0u64;
                    let mut longest = Duration::ZERO;
                    while !stop.load(Ordering::Relaxed) {
                        let asked = Instant::now();
                        if is_writer {
                            lock.write(|v| {
                                longest = longest.max(asked.elapsed());
                                if writer_inside.swap(true, Ordering::Relaxed) {
                                    torn.store(true, Ordering::Relaxed);
                                }
                                *v += 1;
                                busy(load);
                                writer_inside.store(false, Ordering::Relaxed);
                            });
                        } else {
                            lock.read(|_| {
                                longest = longest.max(asked.elapsed());
                                if writer_inside.load(Ordering::Relaxed) {
                                    torn.store(true, Ordering::Relaxed);
                                }
                                busy(load);
                            });
                        }
                        taken += 1;
                        busy(interval);
                    }
                    (is_writer, taken, longest)
                })
            })
            .collect();
        // The workers wait at the start line: the lock is idle.
        lock.reset_lock_stats();
        start_line.wait();
        let start = Instant::now();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let results = workers
            .into_iter()
            .map(|w| w.join().expect("rwsem benchmark thread panicked"))
            .collect();
        (results, start.elapsed())
    });
    let counts = |writer: bool| -> Vec<u64> {
        results
            .iter()
            .filter(|r| r.0 == writer)
            .map(|r| r.1)
            .collect()
    };
    let longest = |writer: bool| {
        results
            .iter()
            .filter(|r| r.0 == writer)
            .map(|r| r.2)
            .max()
            .unwrap_or_default()
    };
    let (per_reader, per_writer) = (counts(false), counts(true));
    let writes = per_writer.iter().sum();
    // Before the check below takes the lock once more.
    let lock_stats = lock.lock_stats();
    let counted = lock.read(|v| *v);
    MixResult {
        reads: per_reader.iter().sum(),
        writes,
        elapsed,
        per_reader,
        per_writer,
        longest_read_wait: longest(false),
        longest_write_wait: longest(true),
        exact: counted == writes && !torn.load(Ordering::Relaxed),
        lock_stats,
    }
}

/// [`run_mix`] as a visitor, for a registry entry's lock.
pub struct MixLoop {
    pub mix: Mix,
    pub duration: Duration,
}

impl RwVisitor for MixLoop {
    type Out = MixResult;
    fn visit<L: LabRwLock>(self) -> MixResult {
        run_mix::<L>(self.mix, self.duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mix_counts_reads_and_writes_exactly() {
        let mix = Mix {
            name: "test",
            readers: 2,
            writers: 2,
            load_us: 1,
            interval_us: 1,
            about: "",
        };
        let r = run_mix::<lock_api::RwLock<ksync::rwsem::RawRwSem, u64>>(
            mix,
            Duration::from_millis(30),
        );
        assert!(r.exact, "{r:?}");
        assert_eq!((r.per_reader.len(), r.per_writer.len()), (2, 2));
        assert_eq!(r.writes, r.per_writer.iter().sum::<u64>());
        assert!(r.lock_stats.is_none());
    }

    #[test]
    fn mix_names_are_unique() {
        for (i, m) in MIXES.iter().enumerate() {
            assert!(
                MIXES[i + 1..].iter().all(|n| n.name != m.name),
                "{}",
                m.name
            );
        }
    }
}
