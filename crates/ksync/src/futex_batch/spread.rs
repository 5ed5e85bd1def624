//! A bulk wake-up that the woken help finish.
//!
//! A poster that completes many parked sleepers owes each a futex wake, and
//! on a machine with idle CPUs those wakes are what it spends its call on:
//! each remote wake-up costs the waker about 0.5 to 0.7 us (an IPI, a VM
//! exit in a guest), so a post of 64 takes the poster 30 to 40 us however
//! the wakes are batched. The kernel's own `semtimedop` pays the same,
//! serially, in `wake_up_q`. Yet every sleeper it wakes is a thread on its
//! way back to user space on another CPU, idle for the rest of the post.
//!
//! So the wake-up is shared out. The poster writes the words it owes onto a
//! [`Board`] and, before it delivers a result to a sleeper, leaves that
//! sleeper a [`Handle`] to the board. The poster then claims words from the
//! board and wakes them (the first alone, so that a helper starts at once,
//! then a few at a time); every woken sleeper that holds a handle claims
//! words too, a few at a time, before it returns. Each word is claimed
//! exactly once, by a compare-and-swap on the board's cursor, and whoever
//! claims it wakes it.
//!
//! Nothing waits for a helper: the poster keeps claiming until nothing is
//! left, so its call ends when every word has been claimed, by it or by a
//! running helper. A helper preempted between its claim and its wakes delays
//! the few sleepers it claimed, never the poster and never the rest: there
//! is no hand-off to one specific thread, which a preempted thread would
//! stall (a chain of wakes, each sleeper waking the next, would). The
//! words themselves are futex keys only, as for any batched wake: a wake that
//! reaches a later call's word at the same address is spurious.
//!
//! Where no CPU is idle, sharing out costs more than it saves (the same
//! wakes, in more and smaller system calls), so it is on by default only
//! with 4 or more CPUs ([`sharing`], [`set_sharing`]).
//!
//! The board is reference-counted: the poster holds a large bias while it
//! drains, each handle one. The poster counts the handles it gives out in
//! its own variable and settles them when it drops its bias (it subtracts
//! the bias less the handles), so a delivery costs the poster no atomic
//! read-modify-write on a line that helpers may be working on; meanwhile
//! the bias keeps the count far above zero, however many handles come back.
//! Whoever drops the count to zero frees the board; a poster that finds no
//! handle outstanding keeps it for its thread's next post, so a post that
//! wakes one sleeper allocates nothing.
//!
//! Barriers: the release store of `len` in [`Spread::push`] pairs with the
//! acquire load of `len` in [`Board::claim`] (a claimed entry was written);
//! the handle is published by the caller's own release (for `ksync::sem`,
//! the status swap that delivers the result) and read after the sleeper's
//! acquire of that status; the reference count's `AcqRel` decrements order
//! every use of the board before its free, as for `Arc`.

use core::ops::Range;
use core::ptr::NonNull;

use crate::sync::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

/// Words a board holds; a post that owes more wakes the rest itself, batched.
#[cfg(not(loom))]
const CAPACITY: usize = 128;
#[cfg(loom)]
const CAPACITY: usize = 3;

/// Words the poster claims at a time after its first (one batched wake).
const POSTER_CHUNK: usize = 8;

/// Words a helper claims at a time: fewer than the poster, so that the work
/// spreads over many helpers, but batched, so that a helper's system call
/// is shared by a few wakes (on a machine with no idle CPU the wakes cost
/// their CPU time wherever they run).
const HELPER_CHUNK: usize = 4;

const MAX_CHUNK: usize = if POSTER_CHUNK > HELPER_CHUNK {
    POSTER_CHUNK
} else {
    HELPER_CHUNK
};

/// The poster's share of the reference count while its wake-up runs.
const POSTER_BIAS: usize = 1 << (usize::BITS - 2);

/// The fewest CPUs this process may run on for posts to share their
/// wake-ups out by default. Sharing out pays where the woken land on idle
/// CPUs; where every CPU is busy, the wakes cost their CPU time wherever
/// they run, and spread over many helpers they take more system calls. On
/// a 2-CPU guest, sembench with 250 workers fell from 0.82x to 0.74x the
/// kernel with sharing on. On 4 and 8 CPUs of a 16-CPU guest (the process
/// bound to them, which is what the default sees) the lab's floor rose
/// from 0.84x-0.96x to 1.17x-1.38x the kernel (4) and from 0.97x to 1.41x
/// (8), and `SemSet` from 0.85x to 1.28x (8); on all 16 it rose too
/// (BENCHMARKS.md). 3 CPUs were not measured.
const SHARING_MIN_CPUS: usize = 4;

/// The environment variable that decides sharing: `0` off, any other
/// non-empty value on; unset or empty, by [`SHARING_MIN_CPUS`].
const SHARING_ENV: &str = "KSYNC_WAKE_SHARING";

const SHARING_UNKNOWN: u32 = 0;
const SHARING_ON: u32 = 1;
const SHARING_OFF: u32 = 2;

static SHARING: crate::sync::unmodelled::AtomicU32 =
    crate::sync::unmodelled::AtomicU32::new(SHARING_UNKNOWN);

/// Turns sharing wake-ups out on or off for every later post in the
/// process, overriding the default (on with 4 or more CPUs, or as
/// `KSYNC_WAKE_SHARING` says). Off, a poster wakes all its sleepers itself
/// with one batched wake, as the kernel's `semtimedop` does.
pub fn set_sharing(on: bool) {
    SHARING.store(if on { SHARING_ON } else { SHARING_OFF }, Ordering::Relaxed);
}

/// Whether posts share their wake-ups out (see [`set_sharing`]). Under
/// loom always, so that the models check the helpers.
pub fn sharing() -> bool {
    if cfg!(loom) {
        return true;
    }
    match SHARING.load(Ordering::Relaxed) {
        SHARING_ON => true,
        SHARING_OFF => false,
        _ => {
            let on = match std::env::var(SHARING_ENV).as_deref() {
                Ok("0") => false,
                Ok(v) if !v.is_empty() => true,
                _ => {
                    std::thread::available_parallelism().is_ok_and(|n| n.get() >= SHARING_MIN_CPUS)
                }
            };
            // A racing `set_sharing` wins.
            let _ = SHARING.compare_exchange(
                SHARING_UNKNOWN,
                if on { SHARING_ON } else { SHARING_OFF },
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            SHARING.load(Ordering::Relaxed) == SHARING_ON
        }
    }
}

/// Words owed a wake, and who has claimed how many.
pub struct Board {
    /// [`POSTER_BIAS`] less the handles already dropped while the poster
    /// posts and drains; afterwards, the handles still out.
    refs: AtomicUsize,
    /// Entries written; only the poster writes it.
    len: AtomicUsize,
    /// The next entry to claim: entries below it are someone's to wake.
    next: AtomicUsize,
    words: [AtomicPtr<AtomicU32>; CAPACITY],
}

impl Board {
    fn new() -> Self {
        Board {
            refs: AtomicUsize::new(POSTER_BIAS),
            len: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            words: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
        }
    }

    /// Claims up to `most` entries not yet claimed. Empty when there are none.
    fn claim(&self, most: usize) -> Range<usize> {
        let mut next = self.next.load(Ordering::Relaxed);
        loop {
            // Pairs with the release store in `Spread::push`: entries below
            // `len` are written.
            let len = self.len.load(Ordering::Acquire);
            if next >= len {
                return next..next;
            }
            let end = len.min(next + most);
            match self
                .next
                .compare_exchange_weak(next, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next..end,
                Err(now) => next = now,
            }
        }
    }

    fn word(&self, i: usize) -> *const AtomicU32 {
        self.words[i].load(Ordering::Relaxed).cast_const()
    }

    /// Wakes the entries `claimed` (at most [`MAX_CHUNK`]) in one batched
    /// wake. Returns the system calls made.
    fn wake_claimed(
        &self,
        claimed: Range<usize>,
        wake: impl FnOnce(&[*const AtomicU32]) -> usize,
    ) -> usize {
        let mut batch = [core::ptr::null::<AtomicU32>(); MAX_CHUNK];
        let n = claimed.len();
        for (slot, i) in batch.iter_mut().zip(claimed) {
            *slot = self.word(i);
        }
        wake(&batch[..n])
    }

    /// Claims up to `chunk` entries at a time and wakes them, each chunk in
    /// one batched wake, until none is left. Returns the system calls made.
    fn drain(&self, chunk: usize, mut wake: impl FnMut(&[*const AtomicU32]) -> usize) -> usize {
        let mut calls = 0;
        loop {
            let claimed = self.claim(chunk.min(MAX_CHUNK));
            if claimed.is_empty() {
                return calls;
            }
            calls += self.wake_claimed(claimed, &mut wake);
        }
    }

    /// Drops one handle's reference: true if it was the last.
    fn drop_handle(&self) -> bool {
        self.refs.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Drops the poster's bias, settling the `handles` it gave out (each
    /// holds one reference from here on): true if none is outstanding, so
    /// the poster owns the board again.
    fn drop_bias(&self, handles: usize) -> bool {
        let settled = POSTER_BIAS - handles;
        self.refs.fetch_sub(settled, Ordering::AcqRel) == settled
    }

    /// Makes a board the poster owns alone new again.
    fn reset(&self) {
        self.len.store(0, Ordering::Relaxed);
        self.next.store(0, Ordering::Relaxed);
        self.refs.store(POSTER_BIAS, Ordering::Relaxed);
    }
}

/// What a delivered sleeper needs to help: null, or a counted reference to
/// its waker's board. Store it where the sleeper reads it after it sees its
/// result, and have the sleeper call [`Handle::help`] exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle(*mut Board);

// SAFETY: a handle is a counted reference to a board whose fields are all
// atomics; whoever holds it may use and drop it from any thread.
unsafe impl Send for Handle {}

impl Handle {
    /// No board: nothing to help with.
    pub const NONE: Handle = Handle(core::ptr::null_mut());

    /// The handle as a raw pointer, to keep in an `AtomicPtr`.
    pub fn into_raw(self) -> *mut Board {
        self.0
    }

    /// A handle kept with [`into_raw`](Self::into_raw).
    ///
    /// # Safety
    ///
    /// `raw` came from `into_raw` and its reference was not used since.
    pub unsafe fn from_raw(raw: *mut Board) -> Handle {
        Handle(raw)
    }

    /// Wakes words of the board until none is left to claim, then drops the
    /// reference. Returns the system calls made.
    ///
    /// # Safety
    ///
    /// The handle's reference is used once: this consumes it.
    pub unsafe fn help(self) -> usize {
        // SAFETY: passed on from our caller; the words are futex keys (see
        // `Spread::push`).
        unsafe { self.help_with(|words| super::wake_all(words)) }
    }

    /// [`help`](Self::help), with `wake` for the futex wake (loom's model
    /// records instead).
    unsafe fn help_with(self, wake: impl FnMut(&[*const AtomicU32]) -> usize) -> usize {
        let Some(board) = NonNull::new(self.0) else {
            return 0;
        };
        // SAFETY: our reference keeps the board alive until `drop_handle`.
        let b = unsafe { board.as_ref() };
        let calls = b.drain(HELPER_CHUNK, wake);
        if b.drop_handle() {
            // SAFETY: the last reference; the board came from `Box::into_raw`.
            drop(unsafe { Box::from_raw(board.as_ptr()) });
        }
        calls
    }
}

/// A poster's side of a shared-out wake-up: [`handle`](Self::handle) before
/// each delivery, [`push`](Self::push) each word that needs a wake, then
/// [`wake`](Self::wake) with no lock held. Dropped without `wake`, it wakes
/// what it holds.
///
/// ```
/// use ksync::futex_batch::Spread;
/// use std::sync::atomic::AtomicU32;
///
/// let word = AtomicU32::new(0);
/// let mut spread = Spread::new();
/// // The first delivery gets no handle: a post that wakes one sleeper
/// // shares nothing out.
/// assert_eq!(spread.handle(), ksync::futex_batch::Handle::NONE);
/// spread.push(&word);
/// assert_eq!(spread.len(), 1);
/// // Nobody sleeps on the word: the wake finds nobody, which is no error.
/// assert_eq!(spread.wake(), 1);
/// ```
pub struct Spread {
    /// Whether this post shares its wake-ups out ([`sharing`]); if not,
    /// every word goes to `overflow` and is woken in one batch.
    share: bool,
    board: Option<NonNull<Board>>,
    /// Entries written to the board (the poster's copy of `len`).
    len: usize,
    /// Deliveries so far (the first gets no handle).
    deliveries: usize,
    /// The last delivery got a handle: if its word is pushed next, its
    /// sleeper can help.
    handed: bool,
    /// The board entry of the first word whose sleeper can help. The first
    /// wake reaches it, with the words before it (the first delivery's,
    /// which has no handle): woken alone, that one would help nobody.
    first_helper: Option<usize>,
    /// Words past the board's capacity, or every word when not sharing.
    overflow: Overflow,
}

/// Words woken in one batch by the poster itself, the first [`INLINE`] in
/// place: a post without sharing (the default below 4 CPUs) usually wakes a
/// sleeper or two, and allocating for them cost a `malloc` and a `free` per
/// call (`ksync-lab dining`, 32 threads on 2 CPUs: 6% of user time).
struct Overflow {
    inline: [*const AtomicU32; INLINE],
    len: usize,
    /// Every word, once there were more than [`INLINE`].
    heap: Vec<*const AtomicU32>,
}

/// Words an [`Overflow`] holds without allocating.
const INLINE: usize = 8;

impl Overflow {
    const fn new() -> Self {
        Overflow {
            inline: [core::ptr::null(); INLINE],
            len: 0,
            heap: Vec::new(),
        }
    }

    fn push(&mut self, word: *const AtomicU32) {
        if self.len < INLINE {
            self.inline[self.len] = word;
        } else {
            if self.len == INLINE {
                self.heap.extend_from_slice(&self.inline);
            }
            self.heap.push(word);
        }
        self.len += 1;
    }

    fn as_slice(&self) -> &[*const AtomicU32] {
        if self.len <= INLINE {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn clear(&mut self) {
        self.len = 0;
        self.heap.clear();
    }
}

impl Default for Spread {
    fn default() -> Self {
        Self::new()
    }
}

impl Spread {
    /// An empty wake-up; its board is taken on the first delivery.
    pub fn new() -> Self {
        Spread {
            share: sharing(),
            board: None,
            len: 0,
            deliveries: 0,
            handed: false,
            first_helper: None,
            overflow: Overflow::new(),
        }
    }

    /// Handles given out: every delivery's but the first, when sharing.
    fn handles(&self) -> usize {
        if self.share {
            self.deliveries.saturating_sub(1)
        } else {
            0
        }
    }

    fn board(&mut self) -> NonNull<Board> {
        *self.board.get_or_insert_with(spare::take)
    }

    /// A handle for the sleeper about to be delivered. The first delivery of
    /// a post gets none, so a post that completes one sleeper costs nothing
    /// more; the sleepers after it help.
    pub fn handle(&mut self) -> Handle {
        self.deliveries += 1;
        self.handed = self.deliveries > 1 && self.share;
        if !self.handed {
            return Handle::NONE;
        }
        // Counted by `handles`, settled in `finish`: the bias covers it
        // until then. The handle reaches its sleeper through the caller's
        // release.
        Handle(self.board().as_ptr())
    }

    /// Owes `word` a wake. The word is a futex key only: it may be gone by
    /// the time it is woken.
    pub fn push(&mut self, word: &AtomicU32) {
        self.push_ptr(word);
    }

    pub(crate) fn push_ptr(&mut self, word: *const AtomicU32) {
        if core::mem::take(&mut self.handed) && self.first_helper.is_none() {
            self.first_helper = Some(self.len);
        }
        if self.len == CAPACITY || !self.share {
            self.overflow.push(word);
            return;
        }
        let board = self.board();
        // SAFETY: we hold the poster's bias, so the board is alive.
        let b = unsafe { board.as_ref() };
        b.words[self.len].store(word.cast_mut(), Ordering::Relaxed);
        self.len += 1;
        // Pairs with the acquire load in `Board::claim`.
        b.len.store(self.len, Ordering::Release);
    }

    /// Words owed a wake.
    pub fn len(&self) -> usize {
        self.len + self.overflow.len()
    }

    /// Whether no word is owed a wake.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wakes every word, with whatever help the woken give. Call it with no
    /// lock held. Returns the system calls this thread made.
    pub fn wake(mut self) -> usize {
        // SAFETY: the words are futex keys (see `push`).
        self.finish(|words| unsafe { super::wake_all(words) })
    }

    /// [`wake`](Self::wake), with `wake` for the futex wakes (loom's model
    /// records instead).
    fn finish(&mut self, mut wake: impl FnMut(&[*const AtomicU32]) -> usize) -> usize {
        let mut calls = 0;
        if let Some(board) = self.board.take() {
            // SAFETY: we hold the poster's bias until `drop_bias`.
            let b = unsafe { board.as_ref() };
            // The first helper's word first, with only the words before it,
            // so that its sleeper starts helping while the poster goes on;
            // then a few at a time, in one batched wake.
            let most = self.first_helper.map_or(1, |i| (i + 1).min(MAX_CHUNK));
            let first = b.claim(most);
            if !first.is_empty() {
                calls += b.wake_claimed(first, &mut wake);
            }
            calls += b.drain(POSTER_CHUNK, &mut wake);
            if b.drop_bias(self.handles()) {
                b.reset();
                spare::put(board);
            }
        }
        if !self.overflow.is_empty() {
            calls += wake(self.overflow.as_slice());
            self.overflow.clear();
        }
        self.len = 0;
        self.deliveries = 0;
        self.handed = false;
        self.first_helper = None;
        calls
    }
}

impl Drop for Spread {
    fn drop(&mut self) {
        if self.board.is_some() || !self.overflow.is_empty() {
            // SAFETY: as in `wake`.
            self.finish(|words| unsafe { super::wake_all(words) });
        }
    }
}

/// A thread's spare board, so that a post whose board came back allocates
/// nothing. Under loom every post allocates its own.
#[cfg(not(loom))]
mod spare {
    use super::Board;
    use core::cell::Cell;
    use core::ptr::NonNull;

    struct Spare(Cell<Option<NonNull<Board>>>);

    impl Drop for Spare {
        fn drop(&mut self) {
            if let Some(board) = self.0.take() {
                // SAFETY: a spare board is owned by its thread alone.
                drop(unsafe { Box::from_raw(board.as_ptr()) });
            }
        }
    }

    std::thread_local! {
        static SPARE: Spare = const { Spare(Cell::new(None)) };
    }

    pub(super) fn take() -> NonNull<Board> {
        SPARE
            .try_with(|s| s.0.take())
            .ok()
            .flatten()
            .unwrap_or_else(|| NonNull::from(Box::leak(Box::new(Board::new()))))
    }

    pub(super) fn put(board: NonNull<Board>) {
        let kept = SPARE.try_with(|s| match s.0.get() {
            None => {
                s.0.set(Some(board));
                true
            }
            Some(_) => false,
        });
        if kept != Ok(true) {
            // SAFETY: the poster owns the board alone (see `drop_bias`).
            drop(unsafe { Box::from_raw(board.as_ptr()) });
        }
    }
}

#[cfg(loom)]
mod spare {
    use super::Board;
    use core::ptr::NonNull;

    pub(super) fn take() -> NonNull<Board> {
        NonNull::from(Box::leak(Box::new(Board::new())))
    }

    pub(super) fn put(board: NonNull<Board>) {
        // SAFETY: the poster owns the board alone (see `drop_bias`).
        drop(unsafe { Box::from_raw(board.as_ptr()) });
    }
}

/// The model: a poster delivers three sleepers (the last two get handles)
/// and pushes each word right after its delivery, as `ksync::sem` does; the
/// two sleepers help as soon as they see their result, while the poster may
/// still be delivering. Every word must be woken exactly once, whatever the
/// interleaving, with nobody waiting for anybody.
#[cfg(all(test, loom))]
mod tests {
    use super::*;
    use loom::sync::{Arc, Notify};

    const SLEEPERS: usize = 3;

    struct Post {
        words: [AtomicU32; SLEEPERS],
        handles: [AtomicPtr<Board>; SLEEPERS],
        /// A sleeper's futex wait, as far as the model needs it: the
        /// delivery ends it. (A spinning wait would multiply the branches.)
        delivered: [Notify; SLEEPERS],
    }

    impl Post {
        /// Which sleeper `word` belongs to.
        fn index(&self, word: *const AtomicU32) -> usize {
            self.words
                .iter()
                .position(|w| core::ptr::eq(w, word))
                .expect("only pushed words are woken")
        }
    }

    #[test]
    fn every_word_is_woken_exactly_once() {
        loom::model(|| {
            let post = Arc::new(Post {
                words: core::array::from_fn(|_| AtomicU32::new(0)),
                handles: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
                delivered: core::array::from_fn(|_| Notify::new()),
            });
            let helpers: Vec<_> = (1..SLEEPERS)
                .map(|k| {
                    let post = Arc::clone(&post);
                    loom::thread::spawn(move || {
                        // Pairs with the poster's release "delivery" below.
                        while post.words[k].load(Ordering::Acquire) == 0 {
                            post.delivered[k].wait();
                        }
                        let raw = post.handles[k].load(Ordering::Relaxed);
                        assert!(
                            !raw.is_null(),
                            "every delivery after the first has a handle"
                        );
                        let mut woken = Vec::new();
                        // SAFETY: this sleeper's reference, used once.
                        unsafe {
                            Handle::from_raw(raw).help_with(|words| {
                                woken.extend(words.iter().map(|&w| post.index(w)));
                                words.len()
                            })
                        };
                        woken
                    })
                })
                .collect();
            let mut spread = Spread::new();
            for k in 0..SLEEPERS {
                let handle = spread.handle();
                assert_eq!(handle == Handle::NONE, k == 0);
                post.handles[k].store(handle.into_raw(), Ordering::Relaxed);
                // The delivery: the result, released with the handle.
                post.words[k].store(1, Ordering::Release);
                post.delivered[k].notify();
                spread.push_ptr(&post.words[k]);
            }
            // Each thread notes what it woke; no atomics, so that the model
            // explores the protocol's accesses only.
            let mut woken = Vec::new();
            spread.finish(|words| {
                woken.extend(words.iter().map(|&w| post.index(w)));
                words.len()
            });
            for helper in helpers {
                woken.extend(helper.join().unwrap());
            }
            woken.sort_unstable();
            assert_eq!(woken, (0..SLEEPERS).collect::<Vec<_>>());
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Delivers three sleepers and pushes their words; returns the handles.
    fn post(spread: &mut Spread, words: &[AtomicU32; 3]) -> [Handle; 3] {
        core::array::from_fn(|k| {
            let handle = spread.handle();
            spread.push(&words[k]);
            handle
        })
    }

    /// A post that shares out or not, whatever this machine's default.
    fn spread(share: bool) -> Spread {
        let mut spread = Spread::new();
        spread.share = share;
        spread
    }

    fn index(words: &[AtomicU32], word: *const AtomicU32) -> usize {
        words.iter().position(|w| core::ptr::eq(w, word)).unwrap()
    }

    #[test]
    fn helpers_and_the_poster_share_the_words_out_once_each() {
        let words: [AtomicU32; 3] = Default::default();
        let mut spread = spread(true);
        let handles = post(&mut spread, &words);
        assert_eq!(handles[0], Handle::NONE);
        assert!(handles[1..].iter().all(|&h| h != Handle::NONE));
        let mut woken = Vec::new();
        let mut record = |ws: &[*const AtomicU32]| {
            woken.extend(ws.iter().map(|&w| index(&words, w)));
            ws.len()
        };
        // A helper woken while the poster still delivers takes what is
        // there; the poster the rest; a late helper finds nothing.
        // SAFETY: each handle used once.
        assert_eq!(unsafe { handles[1].help_with(&mut record) }, 3);
        assert_eq!(spread.finish(&mut record), 0);
        // SAFETY: as above.
        assert_eq!(unsafe { handles[2].help_with(&mut record) }, 0);
        woken.sort_unstable();
        assert_eq!(woken, [0, 1, 2]);
    }

    #[test]
    fn the_first_wake_reaches_the_first_sleeper_that_can_help() {
        let words: [AtomicU32; 3] = Default::default();
        let mut spread = spread(true);
        let handles = post(&mut spread, &words);
        let mut batches = Vec::new();
        assert_eq!(
            spread.finish(|ws| {
                batches.push(ws.iter().map(|&w| index(&words, w)).collect::<Vec<_>>());
                1
            }),
            2
        );
        // The first delivery has no handle: woken alone it would help
        // nobody, so the first wake takes the second word with it.
        assert_eq!(batches, [vec![0, 1], vec![2]]);
        // The poster settled the two handles it counted: they hold the
        // board now, one reference each.
        // SAFETY: the outstanding handles keep the board alive.
        let board = unsafe { &*handles[1].into_raw() };
        assert_eq!(board.refs.load(Ordering::Relaxed), 2);
        for h in &handles[1..] {
            // SAFETY: each handle used once (the last one frees the board).
            assert_eq!(unsafe { h.help_with(|ws| ws.len()) }, 0);
        }
    }

    #[test]
    fn a_first_helper_that_did_not_park_leaves_the_first_wake_alone() {
        let words: [AtomicU32; 3] = Default::default();
        let mut spread = spread(true);
        // The first two deliveries find their sleepers awake: only the third
        // word is owed a wake, and it is the first on the board.
        let _ = spread.handle();
        let spinning = spread.handle();
        let parked = spread.handle();
        spread.push(&words[2]);
        let mut batches = Vec::new();
        spread.finish(|ws| {
            batches.push(ws.iter().map(|&w| index(&words, w)).collect::<Vec<_>>());
            1
        });
        assert_eq!(batches, [vec![2]]);
        for h in [spinning, parked] {
            // SAFETY: each handle used once.
            assert_eq!(unsafe { h.help_with(|ws| ws.len()) }, 0);
        }
    }

    #[test]
    fn without_sharing_the_poster_wakes_everything_in_one_batch() {
        let words: [AtomicU32; 3] = Default::default();
        let mut spread = spread(false);
        let handles = post(&mut spread, &words);
        assert_eq!(handles, [Handle::NONE; 3]);
        let mut batches = Vec::new();
        spread.finish(|ws| {
            batches.push(ws.iter().map(|&w| index(&words, w)).collect::<Vec<_>>());
            1
        });
        assert_eq!(batches, [vec![0, 1, 2]]);
    }

    #[test]
    fn without_sharing_a_post_past_the_inline_words_keeps_them_all_in_order() {
        let words: Vec<AtomicU32> = (0..2 * INLINE + 1).map(|_| AtomicU32::new(0)).collect();
        for n in [1, INLINE, INLINE + 1, words.len()] {
            let mut spread = spread(false);
            for word in &words[..n] {
                spread.push(word);
            }
            assert_eq!(spread.len(), n);
            let mut batches = Vec::new();
            spread.finish(|ws| {
                batches.push(ws.iter().map(|&w| index(&words, w)).collect::<Vec<_>>());
                1
            });
            assert_eq!(batches, [(0..n).collect::<Vec<_>>()], "{n} words");
            assert!(spread.is_empty(), "a finished post owes nothing");
        }
    }

    #[test]
    fn a_post_past_the_boards_capacity_wakes_the_rest_itself() {
        let words: Vec<AtomicU32> = (0..CAPACITY + 5).map(|_| AtomicU32::new(0)).collect();
        let mut spread = spread(true);
        let handles: Vec<Handle> = words
            .iter()
            .map(|w| {
                let handle = spread.handle();
                spread.push(w);
                handle
            })
            .collect();
        let mut woken = 0;
        woken += spread.finish(|ws| ws.len());
        for h in handles {
            // SAFETY: each handle used once.
            woken += unsafe { h.help_with(|ws| ws.len()) };
        }
        assert_eq!(woken, words.len());
    }
}
