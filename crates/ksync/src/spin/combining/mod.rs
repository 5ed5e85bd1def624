//! A combining lock: the thread that holds the lock runs the critical
//! sections that waiting threads have published. Needs `std`.
//!
//! # Why
//!
//! With more runnable threads than cores, a lock that hands itself to a
//! particular waiter stalls whenever that waiter is not running, and even an
//! unfair lock bounces its cache line, and the data it protects, between the
//! cores that take turns. Here a waiter does not wait *for the lock*: it
//! publishes its critical section (a closure) and waits *for the result*.
//! Whoever holds the lock runs the published closures one after another, on
//! its own core, with the protected data in its own cache. A waiter that is
//! preempted still gets its critical section run, so preemption of waiters,
//! the problem of Waiman Long's unfair-qspinlock patch (LKML, May 2014), costs
//! nothing here; only the holder's preemption stalls the lock, as with any lock.
//!
//! The idea is flat combining (Hendler, Incze, Shavit and Tzafrir, SPAA 2010);
//! the shape, one word holding both the lock bit and the stack of published
//! requests, follows CC-Synch's and Folly's `DistributedMutex`'s use of a single
//! atomic for the queue. The code is ksync's own.
//!
//! # State
//!
//! One word, `word`: bit 0 is `LOCKED`; the other bits are a pointer to the
//! most recently published [`Request`], whose `next` points at the one
//! published before it, and so on (a stack, newest first). Requests live in
//! their waiters' stack frames. Invariant: **a published request implies
//! `LOCKED`**: a thread publishes only onto a held lock, and the holder
//! releases only when nothing is published (both by compare-and-swap on the
//! one word). So a published request always has a holder that will see it.
//!
//! The holder also owns `batch`: requests it has taken off the word (all of
//! them at once, with one swap) and put in publication order, not yet served.
//!
//! Each request has a `status`, which is also its owner's futex word:
//! `WAITING` (published), `SLEEPING` (published, and the owner is asleep on
//! `status`), `DONE` (its closure ran; the result is in the request) or `OWNER`
//! (the lock was handed to its owner, with `batch`; its closure has not run).
//!
//! # Transitions
//!
//! * Lock: `0 -> LOCKED` (compare-and-swap). Arriving while locked (a
//!   closure): look at the word a few more times, spinning a little before
//!   each look, and take it if it is free ([`BARGE_ROUNDS`]: bounded
//!   barging, as `parking_lot` spins before it parks); then push a request,
//!   `p|LOCKED -> r|LOCKED` with `r.next = p`.
//! * Serve (the holder, at unlock or after its own closure): take the next
//!   request from `batch`, or swap the word to `LOCKED` and turn the stack
//!   it held into a new `batch`. Run its closure (catching a panic) and set
//!   `status = DONE`; the owner returns with the result.
//! * Release: `LOCKED -> 0` by compare-and-swap, which fails if a request was
//!   published meanwhile; then serve that too.
//! * Hand over: after serving [`COMBINE_LIMIT`] requests in one tenure, or on
//!   reaching a request without a closure (a thread that wants a
//!   [`lock_api`] guard), set that request's `status = OWNER` instead: its
//!   owner now holds the lock, serves the rest of `batch` and releases in its
//!   turn. The word stays `LOCKED`. This bounds the time a holder spends on
//!   others' critical sections, and it is how guard users get the lock: in
//!   publication order, behind the closures published before them.
//!
//! # Waiting
//!
//! A waiter polls its own `status` (a line no one else writes until it is
//! served) for about one context switch ([`crate::spin_budget`]), then sleeps
//! on it: `WAITING -> SLEEPING` by compare-and-swap, then a futex wait while
//! `SLEEPING`. Whoever serves or hands over swaps the status and, finding
//! `SLEEPING`, wakes the owner: the futex compares the value the waker
//! changed first, so a wake-up cannot be lost. The wake-ups of completed
//! sleepers are collected and issued together after the holder is done (the
//! words may belong to frames that are gone by then, which a futex wake
//! tolerates: [`crate::futex::wake_ptr`]); a hand-over wakes at once, since
//! the lock waits for that thread. Only a hand-over makes the lock wait for a
//! particular thread, and there is at most one at a time.
//!
//! # Memory ordering
//!
//! * The lock's compare-and-swaps are acquire; the release compare-and-swap
//!   is release. Each waiter's push is a release compare-and-swap (it
//!   publishes the request's fields), and the holder's swap that takes the
//!   stack is acquire: the pair that makes a request readable.
//! * Setting `DONE` is a release swap after the closure ran and the result
//!   was stored; the owner's acquire load of `DONE` makes the result (and the
//!   closure's writes) visible to it. Setting `OWNER` is a release swap that
//!   publishes the protected data and `batch` as the holder left them; the new
//!   holder reads `OWNER` with acquire. These are the pairs named at the sites.
//! * The holder reads a request's `next` before it sets `DONE`: once `DONE`
//!   is visible the owner may return and its frame is gone.
//!
//! # Panics
//!
//! A closure that panics while another thread runs it is caught there
//! (`catch_unwind`); the panic is carried back and resumed in the thread
//! whose closure it was, and the lock goes on serving. The protected data is
//! left as the closure left it: like `parking_lot`'s and unlike `std`'s, this
//! lock has no poisoning. A panic in the holder's own critical section
//! releases the lock (serving what was published) and then unwinds.

use core::ptr;
use std::panic;

use crate::futex;
use crate::relax::{cpu_relax, spin_for};
use crate::spin_budget::SpinTimer;
use crate::sync::{AtomicU32, AtomicUsize, Ordering, UnsafeCell};

mod mutex;
mod request;
mod stats;
#[cfg(all(test, not(loom)))]
mod tests;

pub use mutex::{CombiningMutex, CombiningMutexGuard};
use request::{run_job, Job, Request, DONE, OWNER, SLEEPING, WAITING};
pub use stats::CombiningStats;
use stats::Counters;

/// Requests one holder serves before it hands the lock over. Bounds the
/// holder's own latency: its `with` returns after at most this many foreign
/// critical sections. One under loom, so that models reach the hand-over.
pub const COMBINE_LIMIT: u32 = if cfg!(loom) { 1 } else { 64 };

/// Looks at a held lock before publishing: a closure is only worth
/// publishing when the holder will not be done within a few hundred
/// nanoseconds. With few cores a published closure costs the holder about
/// four cache-line transfers (the word, the job, its status, and the next
/// push), more than taking the lock after the holder leaves; measured on 2
/// cores with a one-increment critical section, publishing at once gave
/// 0.66x `parking_lot`'s throughput at 2 threads and three rounds of
/// barging 1.2x. Those are `parking_lot`'s spin rounds (its `SpinWait`).
/// One look under loom, which cares about the interleavings, not the time.
const BARGE_ROUNDS: u32 = if cfg!(loom) { 1 } else { 3 };

/// `word` bit 0: the lock is held.
const LOCKED: usize = 1;

/// Completed sleepers whose wake-ups a holder collects before issuing them.
const DEFERRED_WAKES: usize = 16;

/// The raw combining lock: a [`lock_api::RawMutex`] whose unlock runs the
/// closures published by [`CombiningMutex::with`] callers. Use it through
/// [`CombiningMutex`]; the guard path alone (`lock_api::Mutex<RawCombiningLock,
/// T>`) works but never combines.
pub struct RawCombiningLock {
    word: AtomicUsize,
    /// Requests taken off `word`, in publication order, not yet served. Only
    /// the holder touches it; a hand-over passes it on.
    batch: UnsafeCell<*const Request>,
    counters: Counters,
}

// SAFETY: `batch` is only accessed by the lock's holder (see the module
// comment); everything else is atomic.
unsafe impl Sync for RawCombiningLock {}
// SAFETY: the raw pointers in `batch` are only ever followed by the holder.
unsafe impl Send for RawCombiningLock {}

impl core::fmt::Debug for RawCombiningLock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let word = self.word.load(Ordering::Relaxed);
        f.debug_struct("RawCombiningLock")
            .field("locked", &(word & LOCKED != 0))
            .field("published", &(word & !LOCKED != 0))
            .finish()
    }
}

impl Default for RawCombiningLock {
    fn default() -> Self {
        Self::new()
    }
}

/// A holder's foreign closures: `served` bounds them ([`COMBINE_LIMIT`])
/// for the whole tenure, and they are counted when it ends (and while the
/// lock is still held: see `serve_and_release`).
struct Tenure<'a> {
    counters: &'a Counters,
    served: u32,
    /// How many of `served` are counted already: a holder whose release
    /// found a request published meanwhile closes its tenure again later.
    counted: u32,
}

impl Tenure<'_> {
    fn close(&mut self) {
        let uncounted = self.served - self.counted;
        if uncounted > 0 {
            Counters::add_held(&self.counters.combined, u64::from(uncounted));
            if self.counted == 0 {
                Counters::add_held(&self.counters.tenures, 1);
            }
            self.counted = self.served;
        }
    }
}

/// Wake-ups owed to served sleepers, issued together.
struct Wakes {
    words: [*const AtomicU32; DEFERRED_WAKES],
    len: usize,
}

impl Wakes {
    fn new() -> Wakes {
        Wakes {
            words: [ptr::null(); DEFERRED_WAKES],
            len: 0,
        }
    }

    fn push(&mut self, word: *const AtomicU32) {
        if self.len == DEFERRED_WAKES {
            self.flush();
        }
        self.words[self.len] = word;
        self.len += 1;
    }

    fn flush(&mut self) {
        // SAFETY: every entry is the address of a request's `status`, a futex
        // word its owner sleeps on; the frame may be gone, which `wake_all`
        // (through `wake_ptr`) allows.
        unsafe { crate::futex_batch::wake_all(&self.words[..self.len]) };
        self.len = 0;
    }
}

impl Drop for Wakes {
    fn drop(&mut self) {
        if self.len > 0 {
            self.flush();
        }
    }
}

impl RawCombiningLock {
    /// A new, unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawCombiningLock {
            word: AtomicUsize::new(0),
            batch: UnsafeCell::new(ptr::null()),
            counters: Counters::new(),
        }
    }

    /// A new, unlocked lock (loom's atomics have no `const` constructor).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawCombiningLock {
            word: AtomicUsize::new(0),
            batch: UnsafeCell::new(ptr::null()),
            counters: Counters::new(),
        }
    }

    #[inline]
    fn try_acquire(&self) -> bool {
        self.word
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes the lock, or publishes `request` onto the held lock. True if
    /// the lock was taken (and `request` not published).
    fn acquire_or_publish(&self, request: &Request) -> bool {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let (new, order) = if word & LOCKED == 0 {
                (LOCKED, Ordering::Acquire)
            } else {
                // SAFETY: the request is not published yet: it is ours alone.
                unsafe { request.set_next((word & !LOCKED) as *const Request) };
                // Release: publishes `next`, `run` and the job around the
                // request; pairs with the acquire swap in `take_published`.
                (
                    request as *const Request as usize | LOCKED,
                    Ordering::Release,
                )
            };
            match self
                .word
                .compare_exchange_weak(word, new, order, Ordering::Relaxed)
            {
                Ok(_) => return new == LOCKED,
                Err(seen) => word = seen,
            }
        }
    }

    /// The next request to serve: the head of `batch`, else everything
    /// published, taken with one swap and put in publication order.
    ///
    /// # Safety
    ///
    /// The caller holds the lock.
    unsafe fn next_request(&self) -> Option<*const Request> {
        // SAFETY: the holder owns `batch`.
        let head = unsafe { self.batch() };
        if !head.is_null() {
            // SAFETY: `head` is a published request, live until it is served
            // or handed over (its owner waits for that); the holder owns its
            // link and `batch`.
            unsafe { self.set_batch((*head).next()) };
            return Some(head);
        }
        let mut stack = self.take_published();
        if stack.is_null() {
            return None;
        }
        // Reverse the stack (newest first) into publication order.
        let mut ordered: *const Request = ptr::null();
        while !stack.is_null() {
            // SAFETY: as above; the holder owns the links of taken requests.
            unsafe {
                let next = (*stack).next();
                (*stack).set_next(ordered);
                ordered = stack;
                stack = next;
            }
        }
        // SAFETY: `ordered` is non-null (the stack was); the holder owns `batch`.
        unsafe { self.set_batch((*ordered).next()) };
        Some(ordered)
    }

    /// # Safety
    ///
    /// The caller holds the lock.
    #[inline]
    unsafe fn batch(&self) -> *const Request {
        // SAFETY: only the holder touches `batch`.
        self.batch.with(|b| unsafe { *b })
    }

    /// # Safety
    ///
    /// The caller holds the lock.
    #[inline]
    unsafe fn set_batch(&self, batch: *const Request) {
        // SAFETY: only the holder touches `batch`.
        self.batch.with_mut(|b| unsafe { *b = batch })
    }

    /// Swaps the published stack out of the word, keeping `LOCKED`.
    #[inline]
    fn take_published(&self) -> *const Request {
        if self.word.load(Ordering::Relaxed) == LOCKED {
            return ptr::null();
        }
        // Acquire: pairs with the release push in `acquire_or_publish`.
        (self.word.swap(LOCKED, Ordering::Acquire) & !LOCKED) as *const Request
    }

    /// Serves published requests, then releases the lock or hands it over.
    ///
    /// # Safety
    ///
    /// The caller holds the lock; it does not hold it afterwards.
    unsafe fn serve_and_release(&self) {
        let mut wakes = Wakes::new();
        let mut tenure = Tenure {
            counters: &self.counters,
            served: 0,
            counted: 0,
        };
        loop {
            // SAFETY: we hold the lock.
            let Some(request) = (unsafe { self.next_request() }) else {
                tenure.close();
                match self
                    .word
                    .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
                {
                    Ok(_) => return,
                    // Published meanwhile: serve that too.
                    Err(_) => continue,
                }
            };
            // SAFETY: a published request stays live until served or handed over.
            let run = unsafe { (*request).run };
            match run {
                Some(run) if tenure.served < COMBINE_LIMIT => {
                    // SAFETY: we hold the lock; `request` heads a live job
                    // that has not run.
                    unsafe { run(request) };
                    tenure.served += 1;
                    // Release: publishes the result and the closure's writes;
                    // pairs with the acquire load in `wait`. The last access
                    // to the request: its owner may return at once.
                    // SAFETY: as above.
                    let status = unsafe { &(*request).status };
                    if status.swap(DONE, Ordering::Release) == SLEEPING {
                        Counters::add_held(&self.counters.wakes, 1);
                        wakes.push(status);
                    }
                }
                _ => {
                    // Release: publishes `batch` and the data to the new
                    // holder; pairs with the acquire load in `wait`.
                    // SAFETY: as above.
                    let status = unsafe { &(*request).status };
                    // Counted before the swap: after it the lock is not ours.
                    tenure.close();
                    Counters::add_held(&self.counters.handed_over, 1);
                    if status.swap(OWNER, Ordering::Release) == SLEEPING {
                        // The lock waits for this thread: wake it now.
                        // SAFETY: the owner cannot return before it runs.
                        unsafe { futex::wake_ptr(status, 1) };
                    }
                    return;
                }
            }
        }
    }

    /// Waits for `request` (published) to be served or handed the lock; true
    /// if the lock was handed over (the caller now holds it).
    fn wait(&self, request: &Request) -> bool {
        let mut timer = SpinTimer::one_switch();
        let mut slept = false;
        loop {
            // Acquire: pairs with the release swaps in `serve_and_release`.
            match request.status.load(Ordering::Acquire) {
                DONE => return false,
                OWNER => {
                    if slept {
                        // The hand-over woke us; we hold the lock now, so
                        // the holder-only counter is ours to update.
                        Counters::add_held(&self.counters.wakes, 1);
                    }
                    return true;
                }
                WAITING if !timer.expired() => cpu_relax(),
                WAITING => {
                    if request
                        .status
                        .compare_exchange(WAITING, SLEEPING, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                    {
                        self.counters.sleeps.fetch_add(1, Ordering::Relaxed);
                        slept = true;
                        self.sleep(request);
                    }
                }
                // Woken spuriously: still ours to sleep on.
                _ => self.sleep(request),
            }
        }
    }

    /// Sleeps while `request.status` is `SLEEPING`. The server swaps the
    /// status before it wakes, so this sleeps until woken or sees the change.
    fn sleep(&self, request: &Request) {
        futex::wait(&request.status, SLEEPING, None);
    }

    /// What this lock did so far; see [`CombiningStats`].
    pub fn stats(&self) -> CombiningStats {
        self.counters.snapshot()
    }

    /// Sets this lock's counters back to zero. Counts in flight may be lost
    /// or survive; call it while the lock is idle for exact figures.
    pub fn reset_stats(&self) {
        self.counters.reset();
    }

    /// The lock, for a guard: taken at once, or by publishing a lock request
    /// that the holder hands the lock to in its turn.
    #[cold]
    fn lock_slow(&self) {
        let request = Request::new(None);
        if self.acquire_or_publish(&request) {
            return;
        }
        let handed_over = self.wait(&request);
        debug_assert!(handed_over, "a lock request is never run");
    }

    /// Runs `f` on `data` with the lock held: at once if the lock is free,
    /// else by publishing it for the holder to run.
    ///
    /// # Safety
    ///
    /// `data` is valid for the lock's lifetime and only accessed with this
    /// lock held.
    unsafe fn combine<T: ?Sized, F, R>(&self, data: *mut T, f: F) -> R
    where
        F: FnOnce(&mut T) -> R + Send,
        R: Send,
    {
        if self.try_acquire() || self.barge() {
            // SAFETY: we hold the lock, and `data` is the data it guards.
            return unsafe { self.run_own(data, f) };
        }
        let job = Job {
            request: Request::new(Some(run_job::<T, F, R>)),
            data,
            f: UnsafeCell::new(Some(f)),
            result: UnsafeCell::new(None),
        };
        if self.acquire_or_publish(&job.request) || self.wait(&job.request) {
            // The lock is ours (taken, or handed over), the closure unrun.
            // SAFETY: the job was never published, or the holder handed it
            // back unrun with `OWNER`: nobody else touches it now.
            let f = job.f.with_mut(|f| unsafe { (*f).take() });
            let Some(f) = f else {
                unreachable!("a handed-over job's closure has not run");
            };
            // SAFETY: we hold the lock.
            return unsafe { self.run_own(data, f) };
        }
        // `DONE`: the holder ran the closure and stored the result.
        // SAFETY: after `DONE` (read with acquire) no other thread touches it.
        match job.result.with_mut(|r| unsafe { (*r).take() }) {
            Some(Ok(value)) => value,
            Some(Err(payload)) => panic::resume_unwind(payload),
            None => unreachable!("a served job has a result"),
        }
    }

    /// Bounded barging before publishing: look at the lock [`BARGE_ROUNDS`]
    /// times, spinning 4, 8, 16... relaxes before each look, and take it if
    /// it is free. True if taken.
    fn barge(&self) -> bool {
        (0..BARGE_ROUNDS).any(|round| {
            spin_for(4 << round);
            self.word.load(Ordering::Relaxed) == 0 && self.try_acquire()
        })
    }

    /// Runs our own critical section as the holder, then serves and releases,
    /// also when `f` panics.
    ///
    /// # Safety
    ///
    /// The caller holds the lock and `data` is the data it guards.
    unsafe fn run_own<T: ?Sized, R>(&self, data: *mut T, f: impl FnOnce(&mut T) -> R) -> R {
        struct Release<'a>(&'a RawCombiningLock);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                // SAFETY: created only while the lock is held.
                unsafe { self.0.serve_and_release() };
            }
        }
        let _release = Release(self);
        // SAFETY: we hold the lock.
        f(unsafe { &mut *data })
    }
}

// SAFETY: `lock` returns only once the word holds `LOCKED` for this caller
// (taken by compare-and-swap, or handed over by the previous holder), and
// holders pass it on or release it only in `unlock`; see the module comment.
unsafe impl lock_api::RawMutex for RawCombiningLock {
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[cfg(loom)]
    const INIT: Self = panic!("use RawCombiningLock::new() under loom");

    // Any thread may release: the release serves on whichever thread it runs.
    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        if !self.try_acquire() {
            self.lock_slow();
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        self.try_acquire().then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // Fast path: nothing published and nothing left in `batch`.
        // SAFETY: we hold the lock, so `batch` is ours to read.
        if unsafe { self.batch() }.is_null()
            && self
                .word
                .compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
        // SAFETY: the caller holds the lock.
        unsafe { self.serve_and_release() };
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) & LOCKED != 0
    }
}
