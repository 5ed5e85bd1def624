//! A published request: the header the lock's word and `batch` link, and
//! the closure job around it in its waiter's stack frame.

use core::ptr;
use std::panic::{self, AssertUnwindSafe};

use crate::sync::{AtomicU32, UnsafeCell};

/// Request statuses; `status` is also the owner's futex word.
pub(super) const WAITING: u32 = 0;
pub(super) const SLEEPING: u32 = 1;
pub(super) const DONE: u32 = 2;
pub(super) const OWNER: u32 = 3;

/// A published critical section (or a request for the lock itself), in its
/// waiter's stack frame. The closure, its data and its result live around it
/// in a [`Job`]; `run` knows how to reach them.
#[repr(C)]
pub(super) struct Request {
    /// Toward the request published before this one while on the stack; the
    /// next to serve once the holder has put them in `batch`.
    next: UnsafeCell<*const Request>,
    pub(super) status: AtomicU32,
    /// Runs the closure and stores its result; `None` for a lock request.
    pub(super) run: Option<unsafe fn(*const Request)>,
}

impl Request {
    pub(super) fn new(run: Option<unsafe fn(*const Request)>) -> Request {
        Request {
            next: UnsafeCell::new(ptr::null()),
            status: AtomicU32::new(WAITING),
            run,
        }
    }

    /// # Safety
    ///
    /// The caller owns the link: the request's owner before publishing it, or
    /// the lock's holder after taking it.
    #[inline]
    pub(super) unsafe fn next(&self) -> *const Request {
        // SAFETY: per the contract nobody writes the link concurrently.
        self.next.with(|p| unsafe { *p })
    }

    /// # Safety
    ///
    /// As for [`next`](Self::next).
    #[inline]
    pub(super) unsafe fn set_next(&self, next: *const Request) {
        // SAFETY: per the contract nobody accesses the link concurrently.
        self.next.with_mut(|p| unsafe { *p = next })
    }
}

/// A closure request: the header first, so a `*const Request` that came from
/// a `Job` is a `*const Job`. Aligned to a cache line, so that a small job
/// (header, data pointer, a few captures, the result) is one line for the
/// holder to fetch and write back, and no other local of its owner's frame
/// shares it.
#[repr(C, align(64))]
pub(super) struct Job<T: ?Sized, F, R> {
    pub(super) request: Request,
    pub(super) data: *mut T,
    pub(super) f: UnsafeCell<Option<F>>,
    pub(super) result: UnsafeCell<Option<std::thread::Result<R>>>,
}

/// `Request::run` for a `Job<T, F, R>`.
///
/// # Safety
///
/// `request` is the header of a live `Job<T, F, R>` whose data the caller may
/// access exclusively (it holds the lock), run at most once.
pub(super) unsafe fn run_job<T: ?Sized, F: FnOnce(&mut T) -> R, R>(request: *const Request) {
    // SAFETY: per the contract, the request heads a live `Job<T, F, R>`
    // (`repr(C)`, header first).
    let job = unsafe { &*(request as *const Job<T, F, R>) };
    // SAFETY: only the lock holder touches `f` and `result` between the
    // owner's publication and `DONE`, and we hold the lock.
    let Some(f) = job.f.with_mut(|f| unsafe { (*f).take() }) else {
        return;
    };
    // SAFETY: the holder has exclusive access to the data.
    let data = unsafe { &mut *job.data };
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| f(data)));
    // SAFETY: as for `f`.
    job.result.with_mut(|r| unsafe { *r = Some(outcome) });
}
