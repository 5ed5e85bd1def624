//! The FIFO wait list both semaphores queue on, and the grant / wake handshake.
//!
//! A waiter is a [`Waiter`] node on the waiting thread's own stack. It is linked
//! into a doubly linked [`List`] that lives inside the semaphore's internal
//! spinlock, so every link, the `queued` flag and any per-lock field kept in a
//! [`ListCell`] are read and written only by a thread holding that spinlock.
//! The node's futex word is the one field touched without the lock.
//!
//! Futex word:
//!
//! | value | meaning | written by |
//! |---|---|---|
//! | `WAITING` | asleep or about to sleep | the owner, under the lock ([`Waiter::rearm`]) or at creation |
//! | `KICKED` | "look at the lock again": the node stays queued | a waker, under the lock ([`Wakeups::kick`]) |
//! | `GRANTED` | the waker did the accounting: the owner holds the lock | a waker, after dropping the lock ([`Wakeups::deliver`]) |
//!
//! A grant is two steps, as in the kernel's `rwsem_mark_wake`: under the lock
//! the waker unlinks the node into a private chain (`queued = false`) and does
//! the lock's accounting; after dropping the lock it walks the chain and, per
//! node, reads the next pointer, publishes `GRANTED` with a release store and
//! only then issues the futex wake. From the moment `GRANTED` is visible the
//! owner may return and its stack frame may be gone, so the waker never writes
//! to the node again, and the wake uses the word's address as a key only (it
//! goes straight to `FUTEX_WAKE` with a raw pointer, never through a reference;
//! a stray wake of a later node at the same address is a spurious wake-up,
//! which every sleeper tolerates by re-checking its word).
//!
//! A waiter whose deadline passes takes the lock and looks at `queued`: still
//! queued, it unlinks itself and reports a time-out; already unlinked, a
//! waker owns the node and a grant is on its way, so it waits for `GRANTED`
//! (without a deadline: the waker publishes it right after dropping the lock)
//! and reports success. Either way the node is never freed while
//! a waker may still write to it.
//!
//! Ordering: links and flags are ordered by the spinlock. `GRANTED` is a
//! release store read with acquire, so everything the waker did before the
//! grant (the lock accounting in particular) happens before the owner's
//! critical section. `KICKED` carries no data: the kicked owner re-reads the
//! lock state under the spinlock.

use core::ptr;

use crate::futex::{self, Wake};
use crate::sync::{AtomicU32, Ordering, UnsafeCell};
use std::time::Instant;

const WAITING: u32 = 0;
const KICKED: u32 = 1;
const GRANTED: u32 = 2;

/// The lock around a wait list (and whatever state the semaphore keeps with
/// it), held for a few dozen instructions at a time and never across a sleep
/// or a wake-up. `R` is the raw lock: the 2001 design spins
/// ([`RawTasLock`](crate::spin::RawTasLock)); the kernel design sleeps after a
/// short spin ([`RawSemLock`](crate::sem::RawSemLock)), so a holder that is
/// preempted does not make every waiter spin out its time slice.
///
/// Under loom it is loom's own `Mutex` instead, whatever `R`. The raw locks'
/// exclusion and ordering are model-checked on their own (`tests/loom/tas.rs`,
/// `tests/loom/sem.rs`); here loom checks the semaphores on top of a lock
/// with the same contract. With a spin wait inside the models, loom also
/// explores schedules in which two spinners keep yielding to each other
/// while the holder never runs again, which no fair scheduler produces and
/// which never terminate.
pub(super) struct WaitLock<R, T> {
    #[cfg(not(loom))]
    inner: lock_api::Mutex<R, T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(loom)]
    raw: core::marker::PhantomData<R>,
}

/// Proof of holding a [`WaitLock`] with raw lock `R`; dereferences to the
/// protected state.
#[cfg(not(loom))]
pub(super) type WaitGuard<'a, R, T> = lock_api::MutexGuard<'a, R, T>;
/// Proof of holding a [`WaitLock`]; dereferences to the protected state.
/// (Under loom the raw lock is not used, and a type alias cannot name an
/// unused parameter.)
#[cfg(loom)]
pub(super) type WaitGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<R: lock_api::RawMutex, T> WaitLock<R, T> {
    #[cfg(not(loom))]
    pub(super) const fn new(raw: R, value: T) -> Self {
        WaitLock {
            inner: lock_api::Mutex::from_raw(raw, value),
        }
    }

    #[cfg(loom)]
    pub(super) fn new(value: T) -> Self {
        WaitLock {
            inner: loom::sync::Mutex::new(value),
            raw: core::marker::PhantomData,
        }
    }

    #[cfg(not(loom))]
    #[inline]
    pub(super) fn lock(&self) -> WaitGuard<'_, R, T> {
        self.inner.lock()
    }

    #[cfg(loom)]
    pub(super) fn lock(&self) -> WaitGuard<'_, T> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What a waiter wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Read,
    Write,
}

/// A field of a queued node that only the holder of the wait-list lock may
/// touch. The `&List` argument of [`get`](Self::get) and [`set`](Self::set) is
/// the proof: a `List` is only reachable through its lock's guard, and a node
/// is only ever used with the list it was pushed onto.
pub(super) struct ListCell<T: Copy>(UnsafeCell<T>);

impl<T: Copy> ListCell<T> {
    pub(super) fn new(value: T) -> Self {
        ListCell(UnsafeCell::new(value))
    }

    #[inline]
    pub(super) fn get<X>(&self, _held: &List<X>) -> T {
        // SAFETY: the caller holds the wait-list lock, which serializes every
        // access to this cell (see the type's documentation).
        self.0.with(|p| unsafe { *p })
    }

    #[inline]
    pub(super) fn set<X>(&self, _held: &List<X>, value: T) {
        // SAFETY: as in `get`; the write cannot overlap another access.
        self.0.with_mut(|p| unsafe { *p = value })
    }

    /// Reads the field of a node that a waker has dequeued, without the lock.
    ///
    /// # Safety
    ///
    /// The caller is the waker that dequeued the node and has not yet
    /// published its grant: nobody else touches a dequeued node's links.
    #[inline]
    unsafe fn get_dequeued(&self) -> T {
        // SAFETY: exclusive by the caller's contract.
        self.0.with(|p| unsafe { *p })
    }
}

/// One waiting thread's node: a local of the waiting frame, only ever
/// borrowed, so it stays in place while it is queued.
pub(super) struct Waiter<X> {
    prev: ListCell<*const Waiter<X>>,
    next: ListCell<*const Waiter<X>>,
    queued: ListCell<bool>,
    kind: Kind,
    word: AtomicU32,
    extra: X,
}

impl<X> Waiter<X> {
    pub(super) fn new(kind: Kind, extra: X) -> Self {
        Waiter {
            prev: ListCell::new(ptr::null()),
            next: ListCell::new(ptr::null()),
            queued: ListCell::new(false),
            kind,
            word: AtomicU32::new(WAITING),
            extra,
        }
    }

    #[inline]
    pub(super) fn kind(&self) -> Kind {
        self.kind
    }

    /// The lock-specific part of the node.
    #[inline]
    pub(super) fn extra(&self) -> &X {
        &self.extra
    }

    /// Whether a waker has handed this waiter the lock.
    #[inline]
    pub(super) fn is_granted(&self) -> bool {
        // Pairs with the release store of `GRANTED` in `Wakeups::deliver`.
        self.word.load(Ordering::Acquire) == GRANTED
    }

    /// Forgets an earlier kick before the owner looks at the lock again. Call
    /// with the wait-list lock held (the `&List` proves it), so a kick is
    /// either erased here and the look that follows sees its cause, or comes
    /// later and makes the next [`sleep`](Self::sleep) return at once.
    #[inline]
    pub(super) fn rearm(&self, _held: &List<X>) {
        self.word.store(WAITING, Ordering::Relaxed);
    }

    /// Sleeps until kicked, granted or `deadline`; may return spuriously.
    #[inline]
    pub(super) fn sleep(&self, deadline: Option<Instant>) -> Wake {
        futex::wait(&self.word, WAITING, deadline)
    }

    /// Waits, without a deadline, for a grant that is known to be on its way.
    pub(super) fn wait_for_grant(&self) {
        while !self.is_granted() {
            futex::wait(&self.word, WAITING, None);
        }
    }
}

/// The queue: FIFO order, readers and writers together.
pub(super) struct List<X> {
    head: *const Waiter<X>,
    tail: *const Waiter<X>,
}

// SAFETY: the pointers name waiter nodes whose links, flags and `ListCell`
// fields are touched only by the holder of the lock that owns this list (and,
// for dequeued nodes, by the one waker that dequeued them), whichever thread
// that is; everything else in a node is immutable or atomic.
unsafe impl<X> Send for List<X> {}

impl<X> List<X> {
    pub(super) const fn new() -> Self {
        List {
            head: ptr::null(),
            tail: ptr::null(),
        }
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// Exactly one waiter queued.
    #[inline]
    pub(super) fn is_singular(&self) -> bool {
        !self.head.is_null() && self.head == self.tail
    }

    #[inline]
    pub(super) fn front(&self) -> Option<&Waiter<X>> {
        // SAFETY: a queued node stays alive and in place until it is unlinked,
        // which needs `&mut self`; the returned borrow of `self` ends before.
        unsafe { self.head.as_ref() }
    }

    #[inline]
    pub(super) fn is_front(&self, waiter: &Waiter<X>) -> bool {
        ptr::eq(self.head, waiter)
    }

    /// Whether `waiter` is still on the list (a waker may have dequeued it to
    /// grant it the lock).
    #[inline]
    pub(super) fn is_queued(&self, waiter: &Waiter<X>) -> bool {
        waiter.queued.get(self)
    }

    /// Appends `waiter` at the tail.
    ///
    /// # Safety
    ///
    /// `waiter` is not queued anywhere, is used with this list only, and stays
    /// alive and in place until it is dequeued: by [`remove`](Self::remove), or
    /// by a waker that dequeued it and then published its grant (the owner must
    /// see [`Waiter::is_granted`] before it lets the node go).
    pub(super) unsafe fn push_back(&mut self, waiter: &Waiter<X>) {
        let node: *const Waiter<X> = waiter;
        waiter.prev.set(self, self.tail);
        waiter.next.set(self, ptr::null());
        waiter.queued.set(self, true);
        // SAFETY: the old tail is null or a queued node, alive under the lock.
        match unsafe { self.tail.as_ref() } {
            Some(tail) => tail.next.set(self, node),
            None => self.head = node,
        }
        self.tail = node;
    }

    /// Unlinks `waiter` if it is still queued; returns whether it was.
    pub(super) fn remove(&mut self, waiter: &Waiter<X>) -> bool {
        if !self.is_queued(waiter) {
            return false;
        }
        self.unlink(waiter);
        true
    }

    /// Dequeues up to `limit` readers into `wakeups`, in queue order, and
    /// returns how many. Walks past writers when `skip_writers` (the kernel's
    /// phase-fair batch: every queued reader, writers keep their order), else
    /// stops at the first writer (readers at the front only).
    pub(super) fn grant_readers(
        &mut self,
        limit: usize,
        skip_writers: bool,
        wakeups: &mut Wakeups<X>,
    ) -> usize {
        let mut granted = 0;
        let mut cursor = self.head;
        while granted < limit {
            // SAFETY: `cursor` is null or a queued node, alive under the lock.
            let Some(node) = (unsafe { cursor.as_ref() }) else {
                break;
            };
            cursor = node.next.get(self);
            match node.kind {
                Kind::Read => {
                    self.unlink(node);
                    wakeups.push_grant(self, node);
                    granted += 1;
                }
                Kind::Write if skip_writers => {}
                Kind::Write => break,
            }
        }
        granted
    }

    /// Dequeues the front waiter into `wakeups` (a direct grant).
    pub(super) fn grant_front(&mut self, wakeups: &mut Wakeups<X>) {
        // SAFETY: `head` is null or a queued node, alive under the lock.
        if let Some(node) = unsafe { self.head.as_ref() } {
            self.unlink(node);
            wakeups.push_grant(self, node);
        }
    }

    fn unlink(&mut self, waiter: &Waiter<X>) {
        let prev = waiter.prev.get(self);
        let next = waiter.next.get(self);
        // SAFETY: the neighbours of a queued node are null or queued nodes,
        // alive under the lock.
        match unsafe { prev.as_ref() } {
            Some(prev) => prev.next.set(self, next),
            None => self.head = next,
        }
        // SAFETY: as above.
        match unsafe { next.as_ref() } {
            Some(next) => next.prev.set(self, prev),
            None => self.tail = prev,
        }
        waiter.queued.set(self, false);
    }
}

/// Wake-ups collected under the wait-list lock and delivered after it is
/// dropped (the kernel's `wake_q`): dequeued waiters to grant, in queue order,
/// and at most one queued writer to kick.
#[must_use = "undelivered wake-ups leave waiters asleep forever"]
pub(super) struct Wakeups<X> {
    first: *const Waiter<X>,
    last: *const Waiter<X>,
    kick: *const AtomicU32,
}

impl<X> Wakeups<X> {
    pub(super) const fn new() -> Self {
        Wakeups {
            first: ptr::null(),
            last: ptr::null(),
            kick: ptr::null(),
        }
    }

    /// Nothing to deliver.
    pub(super) fn is_empty(&self) -> bool {
        self.first.is_null() && self.kick.is_null()
    }

    /// Tells the queued `waiter` to look at the lock again; it stays queued.
    /// Call with the wait-list lock held (the `&List` proves it).
    pub(super) fn kick(&mut self, held: &List<X>, waiter: &Waiter<X>) {
        debug_assert!(held.is_queued(waiter));
        debug_assert!(self.kick.is_null());
        waiter.word.store(KICKED, Ordering::Relaxed);
        self.kick = &waiter.word;
    }

    /// Adds a just-dequeued node to the chain, through its own `next` link,
    /// which nobody else looks at once the node is off the list.
    fn push_grant(&mut self, held: &List<X>, waiter: &Waiter<X>) {
        let node: *const Waiter<X> = waiter;
        waiter.next.set(held, ptr::null());
        // SAFETY: `last` is null or a node this waker dequeued and has not
        // granted yet, so alive.
        match unsafe { self.last.as_ref() } {
            Some(last) => last.next.set(held, node),
            None => self.first = node,
        }
        self.last = node;
    }

    /// Publishes the grants and issues the futex wakes. Call after dropping the
    /// wait-list lock.
    pub(super) fn deliver(self) -> Delivered {
        let mut delivered = Delivered::default();
        let mut cursor = self.first;
        // SAFETY: each chained node was dequeued by us and its owner waits for
        // `GRANTED` before it lets the node go, so the node is alive until the
        // grant below. After that store we only use the word's address.
        while let Some(node) = unsafe { cursor.as_ref() } {
            // SAFETY: we dequeued the node and have not granted it yet.
            cursor = unsafe { node.next.get_dequeued() };
            let word: *const AtomicU32 = &node.word;
            // Pairs with the owner's acquire load in `Waiter::is_granted`.
            node.word.store(GRANTED, Ordering::Release);
            // SAFETY: `word` was the node's futex word; see `wake_ptr`.
            unsafe { futex::wake_ptr(word, 1) };
            delivered.grants += 1;
        }
        if !self.kick.is_null() {
            // SAFETY: `kick` is a waiter's futex word; see `wake_ptr`.
            unsafe { futex::wake_ptr(self.kick, 1) };
            delivered.kicks += 1;
        }
        delivered
    }
}

/// What [`Wakeups::deliver`] did: one `FUTEX_WAKE` per grant and per kick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Delivered {
    pub(super) grants: u64,
    pub(super) kicks: u64,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_order_reader_batches_and_removal() {
        let r1 = Waiter::new(Kind::Read, 1);
        let w1 = Waiter::new(Kind::Write, 2);
        let r2 = Waiter::new(Kind::Read, 3);
        let w2 = Waiter::new(Kind::Write, 4);
        let r3 = Waiter::new(Kind::Read, 5);
        let mut list = List::new();
        assert!(list.is_empty() && !list.is_singular());
        for node in [&r1, &w1, &r2, &w2, &r3] {
            // SAFETY: every node outlives the list's use of it, on this frame.
            unsafe { list.push_back(node) };
        }
        assert!(list.is_front(&r1));

        // The kernel's batch: readers from anywhere in the queue, in order.
        let mut wakeups = Wakeups::new();
        assert_eq!(list.grant_readers(2, true, &mut wakeups), 2);
        assert!(!list.is_queued(&r1) && !list.is_queued(&r2) && list.is_queued(&r3));
        assert!(list.is_front(&w1));
        assert!(!r1.is_granted() && !r2.is_granted());
        wakeups.deliver();
        assert!(r1.is_granted() && r2.is_granted() && !r3.is_granted());

        // Readers at the front only: a writer first stops the batch.
        let mut wakeups = Wakeups::new();
        assert_eq!(list.grant_readers(usize::MAX, false, &mut wakeups), 0);
        assert!(wakeups.is_empty());

        // A waiter leaves from the middle; a second removal is a no-op.
        assert!(list.remove(&w2));
        assert!(!list.remove(&w2));
        assert_eq!(list.front().map(|w| *w.extra()), Some(2));

        // Direct grant of the front writer, then the last reader.
        let mut wakeups = Wakeups::new();
        list.grant_front(&mut wakeups);
        assert!(list.is_singular() && list.is_front(&r3));
        assert_eq!(list.grant_readers(usize::MAX, false, &mut wakeups), 1);
        assert!(list.is_empty());
        wakeups.deliver();
        assert!(w1.is_granted() && r3.is_granted() && !w2.is_granted());
    }

    #[test]
    fn kick_leaves_the_waiter_queued() {
        let w = Waiter::new(Kind::Write, ());
        let mut list = List::new();
        // SAFETY: `w` outlives the list's use of it.
        unsafe { list.push_back(&w) };
        let mut wakeups = Wakeups::new();
        wakeups.kick(&list, &w);
        assert!(!wakeups.is_empty());
        wakeups.deliver();
        assert!(list.is_queued(&w) && !w.is_granted());
        // A kicked waiter does not sleep until re-armed.
        assert_eq!(w.sleep(None), Wake::Woken);
        w.rearm(&list);
        let soon = Instant::now() + std::time::Duration::from_millis(5);
        assert_eq!(w.sleep(Some(soon)), Wake::TimedOut);
        assert!(list.remove(&w));
    }
}
