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
//! Where no CPU is idle, sharing out that way costs more than it saves (the
//! same wakes, in more and smaller system calls). What does pay there is
//! where each wake is made. Waking a thread onto another CPU costs the
//! waker an IPI: on a 2-CPU KVM guest, 2 to 3 us of the waker's CPU per
//! wake, against 0.6 to 0.7 us for a wake onto its own CPU. And the thread
//! it wakes is about to run on that other CPU anyway.
//!
//! So [`SharingMode::Local`] keeps wake-ups on their CPU. Each sleeper says
//! where it sleeps ([`sleeper_cpu`], when its call queues), and the poster
//! hands the third sleeper of each other CPU a handle ([`LEADER_AT`]). That
//! leader, once running there, wakes the fourth and later sleepers of its
//! CPU, each a wake onto its own CPU: only those go on the board. The
//! poster makes two batched wakes: first, from a list of its own, the
//! leaders, then each CPU's first two sleepers (which may hold what others
//! wait for, so they are not kept waiting for a leader), its own CPU's
//! sleepers and those of CPUs with no leader; then whatever the leaders
//! have not taken from the board by then, so that nothing waits for a
//! leader the scheduler has not run. Each board entry is taken by swapping
//! its word out, so it is woken once, by whoever takes it first. A post
//! with at most three sleepers on each other CPU takes no board and makes
//! one batched wake, as a post without sharing does.
//!
//! [`sharing_mode`] says which way posts share: [`SharingMode::Any`] by
//! default with 4 or more CPUs, [`SharingMode::Local`] with 2 or 3, off
//! with one.
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
//! acquire loads of `len` in [`Board::claim`] and `Board::take_and_wake` (an entry
//! claimed or taken was written, its CPU included);
//! the handle is published by the caller's own release (for `ksync::sem`,
//! the status swap that delivers the result) and read after the sleeper's
//! acquire of that status; the reference count's `AcqRel` decrements order
//! every use of the board before its free, as for `Arc`.

use core::ops::Range;
use core::ptr::NonNull;

use crate::sync::{AtomicPtr, AtomicU32, AtomicUsize, Ordering, UnsafeCell};

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
/// wake-ups out with [`SharingMode::Any`] by default. That pays where the
/// woken land on idle CPUs; where every CPU is busy, the wakes cost their
/// CPU time wherever they run, and spread over many helpers they take more
/// system calls. On a 2-CPU guest, sembench with 250 workers fell from
/// 0.82x to 0.74x the kernel with it. On 4 and 8 CPUs of a 16-CPU guest
/// (the process bound to them, which is what the default sees) the lab's
/// floor rose from 0.84x-0.96x to 1.17x-1.38x the kernel (4) and from 0.97x
/// to 1.41x (8), and `SemSet` from 0.85x to 1.28x (8); on all 16 it rose
/// too (BENCHMARKS.md). 3 CPUs were not measured. Below this,
/// [`SharingMode::Local`]: on the 2-CPU guest it took sembench with 250
/// workers from 0.77x-0.81x to 1.38x-1.51x the kernel (`SemSet`) and the
/// floor from 0.82x-0.86x to 1.63x-1.74x; it has not been measured with
/// more CPUs yet.
const SHARING_MIN_CPUS: usize = 4;

/// The environment variable that decides sharing: `0` off, `local`
/// [`SharingMode::Local`], any other non-empty value [`SharingMode::Any`];
/// unset or empty, by [`SHARING_MIN_CPUS`].
const SHARING_ENV: &str = "KSYNC_WAKE_SHARING";

const SHARING_UNKNOWN: u32 = 0;
const SHARING_ON: u32 = 1;
const SHARING_OFF: u32 = 2;
const SHARING_LOCAL: u32 = 3;

static SHARING: crate::sync::unmodelled::AtomicU32 =
    crate::sync::unmodelled::AtomicU32::new(SHARING_UNKNOWN);

/// How a post's wake-ups are shared out ([`sharing_mode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharingMode {
    /// The poster wakes every sleeper itself, in one batched wake, as the
    /// kernel's `semtimedop` does.
    Off,
    /// Every woken sleeper that holds a handle claims a few of the words
    /// left, wherever their sleepers are, while the poster claims the rest.
    Any,
    /// Wake-ups stay on the CPU they are for: a leader woken on each other
    /// CPU wakes the third and later sleepers there, the poster the rest
    /// and whatever the leaders have not taken. See the module
    /// documentation.
    Local,
}

/// Turns sharing wake-ups out on or off for every later post in the
/// process, overriding the default (see [`sharing_mode`]). On is
/// [`SharingMode::Any`].
pub fn set_sharing(on: bool) {
    set_sharing_mode(if on {
        SharingMode::Any
    } else {
        SharingMode::Off
    });
}

/// Sets how every later post in the process shares its wake-ups out,
/// overriding the default (see [`sharing_mode`]).
pub fn set_sharing_mode(mode: SharingMode) {
    SHARING.store(encode(mode), Ordering::Relaxed);
}

fn encode(mode: SharingMode) -> u32 {
    match mode {
        SharingMode::Off => SHARING_OFF,
        SharingMode::Any => SHARING_ON,
        SharingMode::Local => SHARING_LOCAL,
    }
}

/// Whether posts share their wake-ups out in any way (see
/// [`sharing_mode`]).
pub fn sharing() -> bool {
    sharing_mode() != SharingMode::Off
}

/// How posts share their wake-ups out: as [`set_sharing_mode`] last said,
/// else as `KSYNC_WAKE_SHARING` says (`0` off, `local`
/// [`SharingMode::Local`], any other non-empty value
/// [`SharingMode::Any`]), else by the CPUs this process may run on:
/// [`SharingMode::Any`] with 4 or more, [`SharingMode::Local`] with 2 or
/// 3, off with one. Under loom always [`SharingMode::Any`], so that the
/// models check the helpers.
pub fn sharing_mode() -> SharingMode {
    if cfg!(loom) {
        return SharingMode::Any;
    }
    let mut decided = SHARING.load(Ordering::Relaxed);
    if decided == SHARING_UNKNOWN {
        let mode = match std::env::var(SHARING_ENV).as_deref() {
            Ok("0") => SharingMode::Off,
            Ok("local") => SharingMode::Local,
            Ok(v) if !v.is_empty() => SharingMode::Any,
            _ => match std::thread::available_parallelism().map_or(1, |n| n.get()) {
                n if n >= SHARING_MIN_CPUS => SharingMode::Any,
                2.. => SharingMode::Local,
                _ => SharingMode::Off,
            },
        };
        // A racing `set_sharing_mode` wins.
        let _ = SHARING.compare_exchange(
            SHARING_UNKNOWN,
            encode(mode),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        decided = SHARING.load(Ordering::Relaxed);
    }
    match decided {
        SHARING_OFF => SharingMode::Off,
        SHARING_LOCAL => SharingMode::Local,
        _ => SharingMode::Any,
    }
}

/// A CPU nobody runs on: the sleeper did not say where it sleeps.
pub const UNKNOWN_CPU: u32 = u32::MAX;

/// [`SharingMode::Local`]: who wakes a delivered sleeper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The poster, in its first batch: no leader is sent to the sleeper's
    /// CPU, or it is the poster's own, or it comes before its CPU's leader
    /// (woken at once, as without sharing: it may hold what others wait
    /// for).
    Poster,
    /// The poster, first of all: it holds a handle and wakes the later
    /// sleepers of its CPU.
    Leader,
    /// Its CPU's leader, or the poster's last batch: on the board.
    Led,
}

/// [`SharingMode::Local`]: which delivery to a CPU gets the handle. A
/// leader pays for its handle (a board that may not come back in time for
/// the poster's next post, a walk of it), which only pays if it has others
/// to wake: with the second as leader, sembench `-t 8 -w 4` on 2 CPUs (posts
/// of up to 4, about two per CPU) fell from 1.18x-1.21x to 1.16x the
/// kernel; with the third, it has a leader only on a CPU with at least
/// three sleepers in the post.
const LEADER_AT: u32 = 3;

/// The CPU the calling thread runs on, or [`UNKNOWN_CPU`]: for a sleeper
/// about to sleep, where the kernel will most likely wake it.
#[cfg(all(not(loom), target_os = "linux"))]
pub fn this_cpu() -> u32 {
    // glibc 2.35 and later read it from the thread's rseq area: a load, no
    // system call.
    // SAFETY: no arguments, no memory.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).unwrap_or(UNKNOWN_CPU)
}

/// The CPU the calling thread runs on, or [`UNKNOWN_CPU`].
#[cfg(all(not(loom), not(target_os = "linux")))]
pub fn this_cpu() -> u32 {
    UNKNOWN_CPU
}

/// The CPU a sleeper about to sleep notes for its waker's
/// [`Spread::push_on`]: [`this_cpu`] where posts keep their wake-ups on
/// their CPU ([`SharingMode::Local`]), the only mode that reads it;
/// [`UNKNOWN_CPU`] otherwise, without asking. A post made after the mode
/// changed treats a sleeper of unknown CPU as the poster's to wake.
pub fn sleeper_cpu() -> u32 {
    cpu_to_note(sharing_mode())
}

/// [`sleeper_cpu`] under `mode`.
fn cpu_to_note(mode: SharingMode) -> u32 {
    if mode == SharingMode::Local {
        this_cpu()
    } else {
        UNKNOWN_CPU
    }
}

#[cfg(loom)]
std::thread_local! {
    /// The CPU a model's thread pretends to run on.
    static MODEL_CPU: core::cell::Cell<u32> = const { core::cell::Cell::new(UNKNOWN_CPU) };
}

/// Under loom: the CPU the model put this thread on ([`model_cpu`]).
#[cfg(loom)]
pub fn this_cpu() -> u32 {
    MODEL_CPU.with(|c| c.get())
}

/// Under loom: puts the calling thread on `cpu`, as far as [`this_cpu`] says.
#[cfg(all(test, loom))]
fn model_cpu(cpu: u32) {
    MODEL_CPU.with(|c| c.set(cpu));
}

/// Words owed a wake, and who has claimed how many.
pub struct Board {
    /// [`POSTER_BIAS`] less the handles already dropped while the poster
    /// posts and drains; afterwards, the handles still out.
    refs: AtomicUsize,
    /// Entries written; only the poster writes it.
    len: AtomicUsize,
    /// The next entry to claim: entries below it are someone's to wake
    /// ([`SharingMode::Any`]).
    next: AtomicUsize,
    /// Claims are by entry, each word swapped out by whoever takes it
    /// ([`SharingMode::Local`]). Written only while the poster owns the
    /// board alone, read by helpers after their handle's delivery.
    local: UnsafeCell<bool>,
    words: [AtomicPtr<AtomicU32>; CAPACITY],
    /// Per entry: the CPU its sleeper sleeps on ([`SharingMode::Local`]).
    /// Written before the entry is published (`len`), read only after.
    cpus: [UnsafeCell<u32>; CAPACITY],
}

impl Board {
    fn new() -> Self {
        Board {
            refs: AtomicUsize::new(POSTER_BIAS),
            len: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            local: UnsafeCell::new(false),
            words: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
            cpus: core::array::from_fn(|_| UnsafeCell::new(UNKNOWN_CPU)),
        }
    }

    /// [`SharingMode::Local`]: takes every entry nobody has taken whose CPU
    /// `pick` accepts, each by swapping its word out, so that it is taken
    /// once, and wakes them in one batched wake. Returns the system calls
    /// made.
    fn take_and_wake(
        &self,
        pick: impl Fn(u32) -> bool,
        wake: impl FnOnce(&[*const AtomicU32]) -> usize,
    ) -> usize {
        let mut taken = Taken::<CAPACITY>::new();
        // Pairs with the release store in `Spread::push_ptr_on`: entries
        // below `len` are written, CPUs included.
        let len = self.len.load(Ordering::Acquire);
        for i in 0..len {
            // A taken entry is passed over without a read-modify-write.
            if self.words[i].load(Ordering::Relaxed).is_null() || !pick(self.cpu(i)) {
                continue;
            }
            let word = self.words[i].swap(core::ptr::null_mut(), Ordering::Relaxed);
            if !word.is_null() {
                taken.push(word.cast_const());
            }
        }
        taken.wake(wake)
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

    /// Entry `i`'s CPU; `i` is below an acquired `len`.
    fn cpu(&self, i: usize) -> u32 {
        // SAFETY: written before `len` was released past it, never while
        // anyone but the poster can see the board.
        self.cpus[i].with(|c| unsafe { *c })
    }

    /// Whether claims are by entry ([`SharingMode::Local`]).
    fn is_local(&self) -> bool {
        // SAFETY: written only while the poster owns the board alone; a
        // helper reads it after its handle's delivery.
        self.local.with(|l| unsafe { *l })
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
        let mut batch = Taken::<MAX_CHUNK>::new();
        for i in claimed {
            batch.push(self.word(i));
        }
        batch.wake(wake)
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

/// Up to `N` words taken or claimed from a board, to wake in one batch.
struct Taken<const N: usize> {
    words: [*const AtomicU32; N],
    len: usize,
}

impl<const N: usize> Taken<N> {
    fn new() -> Self {
        Taken {
            words: [core::ptr::null(); N],
            len: 0,
        }
    }

    fn push(&mut self, word: *const AtomicU32) {
        self.words[self.len] = word;
        self.len += 1;
    }

    /// One batched wake, if anything was taken. Returns the system calls
    /// made.
    fn wake(&self, wake: impl FnOnce(&[*const AtomicU32]) -> usize) -> usize {
        if self.len == 0 {
            0
        } else {
            wake(&self.words[..self.len])
        }
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
        if self.0.is_null() {
            return 0;
        }
        // SAFETY: passed on from our caller.
        unsafe { self.help_board() }
    }

    /// [`help`](Self::help) with a board. Out of line: the walk keeps a
    /// batch of words on the stack, which every woken caller's frame would
    /// otherwise carry (a thread on a small stack faulted in a page for it:
    /// `ksync-lab wake`, 4096 sleepers, 2 us each).
    #[inline(never)]
    unsafe fn help_board(self) -> usize {
        // SAFETY: passed on from our caller; the words are futex keys (see
        // `Spread::push`).
        unsafe { self.help_with(|words| super::wake_all(words)) }
    }

    /// [`help`](Self::help), with `wake` for the futex wake (loom's model
    /// records instead).
    unsafe fn help_with(self, wake: impl FnMut(&[*const AtomicU32]) -> usize) -> usize {
        // SAFETY: passed on from our caller.
        unsafe { self.help_on(this_cpu, wake) }
    }

    /// [`help_with`](Self::help_with) for a helper that runs on the CPU
    /// `me` says (asked only on a [`SharingMode::Local`] board).
    unsafe fn help_on(
        self,
        me: impl FnOnce() -> u32,
        wake: impl FnMut(&[*const AtomicU32]) -> usize,
    ) -> usize {
        let Some(board) = NonNull::new(self.0) else {
            return 0;
        };
        // SAFETY: our reference keeps the board alive until `drop_handle`.
        let b = unsafe { board.as_ref() };
        let calls = if b.is_local() {
            // This CPU's sleepers only: waking them here costs no IPI.
            let me = me();
            b.take_and_wake(|cpu| cpu == me, wake)
        } else {
            b.drain(HELPER_CHUNK, wake)
        };
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
    /// How this post shares its wake-ups out ([`sharing_mode`]); if not at
    /// all, every word goes to `overflow` and is woken in one batch.
    mode: SharingMode,
    board: Option<NonNull<Board>>,
    /// Entries written to the board (the poster's copy of `len`).
    len: usize,
    /// Deliveries so far (the first gets no handle).
    deliveries: usize,
    /// Handles given out.
    handles: usize,
    /// The last delivery got a handle: if its word is pushed next, its
    /// sleeper can help.
    handed: bool,
    /// [`SharingMode::Local`]: who wakes the last delivery's sleeper.
    role: Role,
    /// [`SharingMode::Local`]: leaders at the front of `overflow`.
    leaders: usize,
    /// [`SharingMode::Local`]: the CPU the poster runs on, read at its first
    /// delivery ([`UNKNOWN_CPU`] before), and the deliveries so far to each
    /// other CPU (the first [`MAX_CHUNK`] CPUs met).
    me: u32,
    met: [(u32, u32); MAX_CHUNK],
    met_len: usize,
    /// [`LEADER_AT`] (a model with fewer entries sets it lower; at least 2).
    leader_at: u32,
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

    /// Puts `word` at position `at` (at most `len`), the words from there
    /// one further on: for the few leaders of a post, at its front.
    fn insert(&mut self, at: usize, word: *const AtomicU32) {
        debug_assert!(at <= self.len);
        self.push(word);
        let words = if self.len <= INLINE {
            &mut self.inline[..self.len]
        } else {
            &mut self.heap[..]
        };
        words[at..].rotate_right(1);
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

    /// One batched wake of every word, if there is any, and none left.
    /// Returns the system calls made.
    fn wake_and_clear(&mut self, wake: impl FnOnce(&[*const AtomicU32]) -> usize) -> usize {
        if self.is_empty() {
            return 0;
        }
        let calls = wake(self.as_slice());
        self.len = 0;
        self.heap.clear();
        calls
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
            mode: sharing_mode(),
            board: None,
            len: 0,
            deliveries: 0,
            handles: 0,
            handed: false,
            role: Role::Poster,
            leaders: 0,
            me: UNKNOWN_CPU,
            met: [(UNKNOWN_CPU, 0); MAX_CHUNK],
            met_len: 0,
            leader_at: LEADER_AT,
            first_helper: None,
            overflow: Overflow::new(),
        }
    }

    fn shares(&self) -> bool {
        self.mode != SharingMode::Off
    }

    fn board(&mut self) -> NonNull<Board> {
        let local = self.mode == SharingMode::Local;
        *self.board.get_or_insert_with(|| {
            let board = spare::take();
            // SAFETY: a board just taken is the poster's alone; its handles,
            // given out from here on, carry the write with the delivery.
            unsafe { board.as_ref() }
                .local
                .with_mut(|l| unsafe { *l = local });
            board
        })
    }

    /// A handle for the sleeper about to be delivered, which sleeps on a CPU
    /// nobody knows ([`handle_on`](Self::handle_on)).
    pub fn handle(&mut self) -> Handle {
        self.handle_on(UNKNOWN_CPU)
    }

    /// A handle for the sleeper about to be delivered, which sleeps on
    /// `cpu` (what [`sleeper_cpu`] said when it queued; [`UNKNOWN_CPU`] if
    /// it did not say). Pass the same `cpu` to [`push_on`](Self::push_on) if its word
    /// is owed a wake.
    ///
    /// [`SharingMode::Any`]: every delivery gets one but the first, so a
    /// post that completes one sleeper costs nothing more; the sleepers
    /// after it help. [`SharingMode::Local`]: only the third delivery to
    /// each CPU other than the poster's gets one (`LEADER_AT`). Its
    /// sleeper wakes the fourth and later of that CPU, which costs no IPI
    /// there; the poster wakes it and the two before it at once, so that a
    /// sleeper that holds what others wait for is not kept waiting for a
    /// helper.
    pub fn handle_on(&mut self, cpu: u32) -> Handle {
        self.deliveries += 1;
        self.handed = match self.mode {
            SharingMode::Off => false,
            SharingMode::Any => self.deliveries > 1,
            SharingMode::Local => {
                self.role = self.role_on(cpu);
                self.role == Role::Leader
            }
        };
        if !self.handed {
            return Handle::NONE;
        }
        // Settled in `finish`: the bias covers it until then. The handle
        // reaches its sleeper through the caller's release.
        self.handles += 1;
        Handle(self.board().as_ptr())
    }

    /// [`SharingMode::Local`]: counts a delivery to `cpu` and says who
    /// wakes it: its leader if it comes after the [`LEADER_AT`]th to a CPU
    /// other than the poster's, which leads; the poster for the others (the
    /// poster's own CPU, an unknown one, those past the [`MAX_CHUNK`] CPUs
    /// counted).
    fn role_on(&mut self, cpu: u32) -> Role {
        if self.me == UNKNOWN_CPU {
            self.me = this_cpu();
        }
        if cpu == UNKNOWN_CPU || cpu == self.me {
            return Role::Poster;
        }
        let met = &mut self.met[..self.met_len];
        if let Some((_, n)) = met.iter_mut().find(|(c, _)| *c == cpu) {
            *n += 1;
            return match (*n).cmp(&self.leader_at) {
                core::cmp::Ordering::Less => Role::Poster,
                core::cmp::Ordering::Equal => Role::Leader,
                core::cmp::Ordering::Greater => Role::Led,
            };
        }
        if self.met_len < MAX_CHUNK {
            self.met[self.met_len] = (cpu, 1);
            self.met_len += 1;
        }
        Role::Poster
    }

    /// Owes `word` a wake. The word is a futex key only: it may be gone by
    /// the time it is woken.
    pub fn push(&mut self, word: &AtomicU32) {
        self.push_ptr(word);
    }

    pub(crate) fn push_ptr(&mut self, word: *const AtomicU32) {
        self.push_ptr_on(word, UNKNOWN_CPU);
    }

    /// Owes `word` a wake, for a sleeper that sleeps on `cpu` (what
    /// [`sleeper_cpu`] said before it slept; [`UNKNOWN_CPU`] if it did not
    /// say). The word is a futex key only, as for [`push`](Self::push).
    pub fn push_on(&mut self, word: &AtomicU32, cpu: u32) {
        self.push_ptr_on(word, cpu);
    }

    pub(crate) fn push_ptr_on(&mut self, word: *const AtomicU32, cpu: u32) {
        let helps = core::mem::take(&mut self.handed);
        let role = core::mem::replace(&mut self.role, Role::Poster);
        if helps && self.first_helper.is_none() {
            self.first_helper = Some(self.len);
        }
        if self.mode == SharingMode::Local {
            // Only the words a leader may take go on the board; the poster
            // wakes the others, leaders first, in one batch of its own.
            match role {
                Role::Leader => {
                    self.overflow.insert(self.leaders, word);
                    self.leaders += 1;
                    return;
                }
                Role::Poster => {
                    self.overflow.push(word);
                    return;
                }
                Role::Led => {}
            }
        }
        if self.len == CAPACITY || !self.shares() {
            self.overflow.push(word);
            return;
        }
        let board = self.board();
        // SAFETY: we hold the poster's bias, so the board is alive.
        let b = unsafe { board.as_ref() };
        // SAFETY: entry `len` is unpublished: nobody else reads it until
        // the release store of `len` below.
        b.cpus[self.len].with_mut(|c| unsafe { *c = cpu });
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
        // Local: the poster's own batch first, leaders at its front, then
        // what the leaders have not taken from the board; otherwise the
        // board, then the words past its capacity.
        if self.mode == SharingMode::Local {
            calls += self.overflow.wake_and_clear(&mut wake);
        }
        if let Some(board) = self.board.take() {
            calls += self.finish_board(board, &mut wake);
        }
        calls += self.overflow.wake_and_clear(&mut wake);
        self.len = 0;
        self.deliveries = 0;
        self.handles = 0;
        self.handed = false;
        self.role = Role::Poster;
        self.leaders = 0;
        self.me = UNKNOWN_CPU;
        self.met_len = 0;
        self.first_helper = None;
        calls
    }

    /// [`finish`](Self::finish)'s part for the board. Out of line, as
    /// [`Handle::help_board`] is: a post without sharing should not carry
    /// the batches this keeps on the stack.
    #[inline(never)]
    fn finish_board(
        &mut self,
        board: NonNull<Board>,
        mut wake: impl FnMut(&[*const AtomicU32]) -> usize,
    ) -> usize {
        let mut calls = 0;
        // SAFETY: we hold the poster's bias until `drop_bias`.
        let b = unsafe { board.as_ref() };
        if self.handles == 0 {
            // Nobody else has the board: wake what it holds in one batch,
            // without claiming, and keep it.
            let mut all = Taken::<CAPACITY>::new();
            for i in 0..self.len {
                all.push(b.word(i));
            }
            calls += all.wake(&mut wake);
            b.reset();
            spare::put(board);
        } else if self.mode == SharingMode::Local {
            // The poster's batch is gone: take what the leaders have
            // not, so that nothing waits for a leader the scheduler has
            // not run.
            calls += b.take_and_wake(|_| true, &mut wake);
        } else {
            // The first helper's word first, with only the words before
            // it, so that its sleeper starts helping while the poster
            // goes on; then a few at a time, in one batched wake.
            let most = self.first_helper.map_or(1, |i| (i + 1).min(MAX_CHUNK));
            let first = b.claim(most);
            if !first.is_empty() {
                calls += b.wake_claimed(first, &mut wake);
            }
            calls += b.drain(POSTER_CHUNK, &mut wake);
        }
        if self.handles != 0 && b.drop_bias(self.handles) {
            b.reset();
            spare::put(board);
        }
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

/// The model of [`SharingMode::Local`]: a poster on CPU 0 delivers three
/// sleepers of CPU 1 and pushes each word right after its delivery; the
/// second gets the handle (the board holds three entries under loom, so
/// the leader comes one delivery early) and, once it sees its result, wakes
/// what it can take on CPU 1 while the poster may still be delivering.
/// Every word must be woken exactly once, whatever the interleaving.
#[cfg(all(test, loom))]
mod local_model {
    use super::*;
    use loom::sync::{Arc, Notify};

    const SLEEPERS: usize = 3;
    const LEADER: usize = 1;

    #[test]
    fn every_word_is_woken_exactly_once_by_cpu() {
        loom::model(|| {
            let words: Arc<[AtomicU32; SLEEPERS]> =
                Arc::new(core::array::from_fn(|_| AtomicU32::new(0)));
            let handle = Arc::new(AtomicPtr::<Board>::new(core::ptr::null_mut()));
            let delivered = Arc::new(Notify::new());
            let leader = {
                let (words, handle, delivered) = (
                    Arc::clone(&words),
                    Arc::clone(&handle),
                    Arc::clone(&delivered),
                );
                loom::thread::spawn(move || {
                    model_cpu(1);
                    // Pairs with the poster's release "delivery" below.
                    while words[LEADER].load(Ordering::Acquire) == 0 {
                        delivered.wait();
                    }
                    let raw = handle.load(Ordering::Relaxed);
                    assert!(!raw.is_null(), "the second sleeper of CPU 1 leads here");
                    let mut woken = Vec::new();
                    // SAFETY: the leader's reference, used once.
                    unsafe {
                        Handle::from_raw(raw).help_with(|ws| {
                            woken.extend(ws.iter().map(|&w| index(&words[..], w)));
                            ws.len()
                        })
                    };
                    woken
                })
            };
            model_cpu(0);
            let mut spread = Spread::new();
            spread.mode = SharingMode::Local;
            spread.leader_at = 2;
            for k in 0..SLEEPERS {
                let h = spread.handle_on(1);
                assert_eq!(h != Handle::NONE, k == LEADER);
                if k == LEADER {
                    handle.store(h.into_raw(), Ordering::Relaxed);
                }
                // The delivery: the result, released with the handle.
                words[k].store(1, Ordering::Release);
                if k == LEADER {
                    delivered.notify();
                }
                spread.push_on(&words[k], 1);
            }
            let mut woken = Vec::new();
            spread.finish(|ws| {
                woken.extend(ws.iter().map(|&w| index(&words[..], w)));
                ws.len()
            });
            woken.extend(leader.join().unwrap());
            woken.sort_unstable();
            assert_eq!(woken, (0..SLEEPERS).collect::<Vec<_>>());
        });
    }

    fn index(words: &[AtomicU32], word: *const AtomicU32) -> usize {
        words
            .iter()
            .position(|w| core::ptr::eq(w, word))
            .expect("only pushed words are woken")
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

    /// A post that shares out (or not) as `mode` says, whatever this
    /// machine's default.
    fn spread(mode: SharingMode) -> Spread {
        let mut spread = Spread::new();
        spread.mode = mode;
        spread
    }

    fn index(words: &[AtomicU32], word: *const AtomicU32) -> usize {
        words.iter().position(|w| core::ptr::eq(w, word)).unwrap()
    }

    #[test]
    fn helpers_and_the_poster_share_the_words_out_once_each() {
        let words: [AtomicU32; 3] = Default::default();
        let mut spread = spread(SharingMode::Any);
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
        let mut spread = spread(SharingMode::Any);
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
        let mut spread = spread(SharingMode::Any);
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
        let mut spread = spread(SharingMode::Off);
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
            let mut spread = spread(SharingMode::Off);
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
        let mut spread = spread(SharingMode::Any);
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

    /// Delivers a sleeper on `cpu` (its word pushed if it parked) and
    /// returns its handle.
    fn deliver(spread: &mut Spread, word: &AtomicU32, cpu: u32, parked: bool) -> Handle {
        let handle = spread.handle_on(cpu);
        if parked {
            spread.push_on(word, cpu);
        }
        handle
    }

    /// Runs `finish`, returning the batches as indices into `words`.
    fn batches(spread: &mut Spread, words: &[AtomicU32]) -> Vec<Vec<usize>> {
        let mut batches = Vec::new();
        spread.finish(|ws| {
            batches.push(ws.iter().map(|&w| index(words, w)).collect::<Vec<_>>());
            1
        });
        batches
    }

    #[test]
    fn a_sleeper_notes_its_cpu_only_where_posts_read_it() {
        assert_eq!(cpu_to_note(SharingMode::Off), UNKNOWN_CPU);
        assert_eq!(cpu_to_note(SharingMode::Any), UNKNOWN_CPU);
        #[cfg(target_os = "linux")]
        assert_ne!(cpu_to_note(SharingMode::Local), UNKNOWN_CPU);
    }

    #[test]
    fn local_sharing_hands_each_other_cpu_to_its_third_sleeper() {
        let words: [AtomicU32; 9] = Default::default();
        let mut spread = spread(SharingMode::Local);
        spread.me = 0;
        // Five sleepers on CPU 1, two on the poster's CPU 0, one on CPU 2,
        // one nobody knows where.
        let cpus = [1, 1, 1, 1, 1, 0, 0, 2, UNKNOWN_CPU];
        let handles: Vec<Handle> = words
            .iter()
            .zip(cpus)
            .map(|(w, cpu)| deliver(&mut spread, w, cpu, true))
            .collect();
        let handed: Vec<usize> = (0..9).filter(|&k| handles[k] != Handle::NONE).collect();
        assert_eq!(handed, [2], "only CPU 1's third sleeper leads");
        // The leader first, then the two sleepers of its CPU before it and
        // everyone no leader is sent to; CPU 1's fourth and fifth are the
        // leader's, and the poster takes them only once it has woken the
        // rest.
        assert_eq!(
            batches(&mut spread, &words),
            [vec![2, 0, 1, 5, 6, 7, 8], vec![3, 4]]
        );
        // SAFETY: the handle used once; the poster took everything.
        assert_eq!(unsafe { handles[2].help_on(|| 1, |ws| ws.len()) }, 0);
    }

    #[test]
    fn a_local_leader_wakes_the_sleepers_of_its_own_cpu_only() {
        let words: [AtomicU32; 8] = Default::default();
        let mut spread = spread(SharingMode::Local);
        spread.me = 0;
        // CPU 1: two parked, the third (the leader) still polling, so never
        // pushed, two more parked; CPU 2: three parked.
        deliver(&mut spread, &words[0], 1, true);
        deliver(&mut spread, &words[1], 1, true);
        let leader = deliver(&mut spread, &words[2], 1, false);
        deliver(&mut spread, &words[3], 1, true);
        deliver(&mut spread, &words[4], 1, true);
        for word in &words[5..7] {
            assert_eq!(deliver(&mut spread, word, 2, true), Handle::NONE);
        }
        let other_leader = deliver(&mut spread, &words[7], 2, true);
        let mut woken = Vec::new();
        // The polling leader sees its result at once and helps while the
        // poster still delivers: CPU 1's words after it, and nobody else's
        // (the two before it are the poster's).
        // SAFETY: each handle used once.
        assert_eq!(
            unsafe {
                leader.help_on(
                    || 1,
                    |ws| {
                        woken.extend(ws.iter().map(|&w| index(&words, w)));
                        1
                    },
                )
            },
            1
        );
        woken.sort_unstable();
        assert_eq!(woken, [3, 4]);
        // The poster wakes CPU 2's leader first, then CPU 1's first two and
        // the two before CPU 2's leader; nothing is left on the board.
        assert_eq!(batches(&mut spread, &words), [vec![7, 0, 1, 5, 6]]);
        // SAFETY: as above.
        assert_eq!(unsafe { other_leader.help_on(|| 2, |ws| ws.len()) }, 0);
    }

    #[test]
    fn a_local_post_with_nothing_to_share_wakes_everything_in_one_batch() {
        let words: [AtomicU32; 6] = Default::default();
        let mut spread = spread(SharingMode::Local);
        spread.me = 0;
        // Two on the poster's CPU, two on CPU 1, one on CPU 2, one nobody
        // knows where: no other CPU has a third sleeper, so nobody gets a
        // handle.
        for (w, cpu) in words.iter().zip([0, 0, 1, 1, 2, UNKNOWN_CPU]) {
            assert_eq!(deliver(&mut spread, w, cpu, true), Handle::NONE);
        }
        assert_eq!(batches(&mut spread, &words), [vec![0, 1, 2, 3, 4, 5]]);
        // The board went back to the thread's spare, ready for the next post.
        let words: [AtomicU32; 4] = Default::default();
        spread.me = 0;
        for w in &words {
            deliver(&mut spread, w, 1, true);
        }
        assert_eq!(batches(&mut spread, &words), [vec![2, 0, 1], vec![3]]);
    }

    #[test]
    fn a_local_post_past_the_boards_capacity_wakes_every_word_once() {
        let words: Vec<AtomicU32> = (0..CAPACITY + 5).map(|_| AtomicU32::new(0)).collect();
        let mut spread = spread(SharingMode::Local);
        spread.me = 0;
        let handles: Vec<Handle> = words
            .iter()
            .enumerate()
            .map(|(k, w)| deliver(&mut spread, w, (k % 3) as u32, true))
            .collect();
        let mut woken = vec![0; words.len()];
        let mut record = |ws: &[*const AtomicU32]| {
            for &w in ws {
                woken[index(&words, w)] += 1;
            }
            1
        };
        // CPU 2's leader helps first; CPU 1's after the poster.
        let leaders: Vec<usize> = (0..words.len())
            .filter(|&k| handles[k] != Handle::NONE)
            .collect();
        assert_eq!(leaders, [7, 8]);
        // SAFETY: each handle used once.
        unsafe { handles[8].help_on(|| 2, &mut record) };
        spread.finish(&mut record);
        // SAFETY: as above.
        unsafe { handles[7].help_on(|| 1, &mut record) };
        assert!(woken.iter().all(|&n| n == 1), "{woken:?}");
    }
}
