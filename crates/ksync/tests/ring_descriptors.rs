//! The batched futex wake's io_uring rings, one per waking thread, hold a
//! descriptor each: they may take at most a quarter of the descriptors the
//! process may open (`RLIMIT_NOFILE`'s soft limit). Its own test binary,
//! because it lowers the limit for the whole process before any ring is
//! made.

#![cfg(all(target_os = "linux", not(loom)))]

use std::sync::atomic::AtomicU32;
use std::sync::Barrier;

/// Descriptors of this process that are io_uring instances.
fn io_uring_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().contains("io_uring"))
        })
        .count()
}

#[test]
fn rings_take_at_most_a_quarter_of_the_descriptor_limit() {
    const LIMIT: u64 = 128;
    const THREADS: usize = 64;
    // SAFETY: plain old data; getrlimit fills it, setrlimit reads it.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = LIMIT.min(limit.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    let before = io_uring_descriptors();
    let (woke, counted) = (Barrier::new(THREADS + 1), Barrier::new(THREADS + 1));
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let words = [AtomicU32::new(0), AtomicU32::new(0)];
                // Two words: a batch, through this thread's ring if it may
                // have one. Nobody sleeps on them.
                ksync::futex_batch::wake_each(&[&words[0], &words[1]]);
                woke.wait();
                // Every ring stays open until its thread exits.
                counted.wait();
            });
        }
        woke.wait();
        let rings = io_uring_descriptors() - before;
        counted.wait();
        if rings == 0 {
            eprintln!("ring_descriptors: no io_uring here (the fallback woke); nothing to count");
        }
        assert!(
            rings <= (LIMIT / 4) as usize,
            "{rings} rings for {THREADS} threads under a limit of {LIMIT} descriptors"
        );
    });
}
