//! Waiting politely: `cpu_relax`, bounded exponential backoff and yielding.
//!
//! Every wait loop in ksync goes through [`cpu_relax`]. Natively it is the
//! CPU's spin-wait hint (`pause` on x86, `yield`/`isb` on Arm), which is what
//! the kernel's `cpu_relax()` is. Under loom it yields to the model checker
//! instead, which is what lets loom explore a spin loop without unrolling it
//! forever.

/// One iteration of a busy-wait loop: the CPU's spin-wait hint.
#[inline(always)]
pub fn cpu_relax() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// `n` iterations of [`cpu_relax`] without touching shared memory.
///
/// Under loom a delay of any length is a single yield: loom cares about the
/// interleavings a delay allows, not about its length.
#[inline]
pub fn spin_for(n: u32) {
    #[cfg(loom)]
    {
        let _ = n;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    for _ in 0..n {
        core::hint::spin_loop();
    }
}

/// Gives the rest of this time slice to another runnable thread.
///
/// With `std`, `sched_yield`; without it, a [`cpu_relax`] (a `no_std` user has
/// no scheduler to yield to).
#[inline]
pub fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(all(not(loom), feature = "std"))]
    std::thread::yield_now();
    #[cfg(all(not(loom), not(feature = "std")))]
    core::hint::spin_loop();
}

/// Bounded exponential backoff: each [`Backoff::snooze`] spins twice as long
/// as the previous one, up to `2^limit` relaxes.
///
/// This is the "test-and-test-and-set with backoff" policy: contenders that
/// just lost a race spread their next attempts out in time, so the lock's cache
/// line is not hammered by every waiter at once.
///
/// ```
/// use ksync::relax::Backoff;
/// let mut backoff = Backoff::new(6);
/// for _ in 0..10 {
///     backoff.snooze(); // 1, 2, 4, ... 64, 64, 64 relaxes
/// }
/// assert!(backoff.is_saturated());
/// ```
#[derive(Debug, Clone)]
pub struct Backoff {
    step: u32,
    limit: u32,
}

impl Backoff {
    /// The limit the spinlocks use: at most 2^10 = 1024 relaxes between polls.
    pub const DEFAULT_LIMIT: u32 = 10;

    /// A backoff that starts at one relax and stops doubling at `2^limit`
    /// (`limit` is clamped to 16, 65536 relaxes).
    #[inline]
    pub const fn new(limit: u32) -> Self {
        let limit = if limit > 16 { 16 } else { limit };
        Backoff { step: 0, limit }
    }

    /// Spins `2^step` relaxes, then doubles the next spin unless saturated.
    #[inline]
    pub fn snooze(&mut self) {
        spin_for(1 << self.step);
        if self.step < self.limit {
            self.step += 1;
        }
    }

    /// Whether the spin has stopped growing.
    #[inline]
    pub fn is_saturated(&self) -> bool {
        self.step >= self.limit
    }

    /// Starts again from one relax.
    #[inline]
    pub fn reset(&mut self) {
        self.step = 0;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Self::DEFAULT_LIMIT)
    }
}
