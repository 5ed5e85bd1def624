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
//! keeps a board for each other CPU with three or more sleepers in the
//! post: the fourth and later sleepers of that CPU go on it, and the third
//! ([`LEADER_AT`], the leader) and every later one get a handle to it. The
//! poster first wakes, in one batch of its own, the leaders, then each
//! CPU's first two sleepers (which may hold what others wait for, so they
//! are not kept waiting for a helper), its own CPU's sleepers and those of
//! CPUs with no board. Once running, a leader claims a few of its board's
//! words and wakes them, each a wake onto its own CPU; each sleeper it
//! wakes does the same before it returns, and so on, as under
//! [`SharingMode::Any`] but one CPU to a board. Meanwhile the poster claims
//! from the boards too, so that nothing waits for a helper the scheduler
//! has not run. (With a leader alone to help, a bulk wake-up of 4096
//! sleepers of one CPU left the poster nearly all of them: each batch the
//! leader woke ran before it on its CPU, so it seldom ran again before the
//! poster was done.) A post with at most two sleepers on each other CPU
//! takes no board and makes one batched wake, as a post without sharing
//! does.
//!
//! Those helpers are the post's own sleepers, so where their CPU is busy
//! running the sleepers of earlier posts, none of them runs before the
//! poster has claimed everything itself. So a post whose board for a CPU
//! fills past a chunk also leaves it in that CPU's open slot, and every
//! sleeper that returns on that CPU, of any post, takes one chunk from the
//! board there before it returns ([`help_open_board`]); the slot's
//! reference passes from one such sleeper to the next. Under
//! [`SharingMode::Any`] the same holds for a CPU crowded with a post's
//! sleepers (a chunk's worth of them, counted as they are delivered): the
//! post's one board is left in that CPU's slot too.
//!
//! A board holds a post to every semaphore of the largest set: its first
//! entries are in place, later ones in segments that double, allocated as
//! a post first reaches them and kept with the board.
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
//! Barriers: the release store of `len` in `Board::publish` pairs with the
//! acquire load of `len` in `Board::claim` (an entry claimed was written,
//! and its segment stored);
//! the handle is published by the caller's own release (for `ksync::sem`,
//! the status swap that delivers the result) and read after the sleeper's
//! acquire of that status; the reference count's `AcqRel` decrements order
//! every use of the board before its free, as for `Arc`; the release with
//! which a helper puts a board back in its open slot pairs with the
//! acquire with which the poster takes it back (`take_back`), before it
//! resets the board for reuse.

use core::ops::Range;
use core::ptr::NonNull;

use crate::sync::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};

/// Words a board holds: enough for a post to every semaphore of the largest
/// set ([`crate::sem::SEMMSL`]), so that a bulk wake-up is shared out whole.
/// A post that owes more wakes the rest itself, batched.
const CAPACITY: usize = FIRST << MORE;

/// Entries in a board's first segment, which the board holds in place: a
/// post that wakes a few sleepers allocates nothing more.
#[cfg(not(loom))]
const FIRST: usize = 128;
#[cfg(loom)]
const FIRST: usize = 2;

/// Segments after the first, allocated as a post first reaches them and
/// kept with the board: segment `k` holds `FIRST << k` entries, so each
/// doubles the board, and a post of `n` words touches about `n` entries'
/// worth of memory however large the board may grow.
#[cfg(not(loom))]
const MORE: usize = 8;
#[cfg(loom)]
const MORE: usize = 1;

/// Most words one batched wake takes from a board. Every batch sits in a
/// frame of its own (see [`Handle::help_board`]); a frame sized for the
/// whole board (64 KB for 8192 words) made each of 4096 helper threads
/// fault in fresh stack pages, which put the last sleeper's return of a
/// shared-out bulk wake-up at 5.5x the kernel's (`ksync-lab wake`).
#[cfg(not(loom))]
const BATCH: usize = 128;
#[cfg(loom)]
const BATCH: usize = 2;

// A post to every semaphore of the largest set fits on one board.
#[cfg(not(loom))]
const _: () = assert!(CAPACITY >= crate::sem::SEMMSL);

/// Words the poster claims at a time after its first (one batched wake).
const POSTER_CHUNK: usize = 8;

/// Words a helper claims at a time: fewer than the poster, so that the work
/// spreads over many helpers, but batched, so that a helper's system call
/// is shared by a few wakes (on a machine with no idle CPU the wakes cost
/// their CPU time wherever they run).
const HELPER_CHUNK: usize = 4;

/// [`HELPER_CHUNK`] under [`SharingMode::Local`], where every helper's
/// words sleep on its own CPU, so a wake costs it no IPI, and that CPU is
/// the one its wakes keep busy: larger, for fewer system calls. A helper
/// the scheduler stops between its claim and its wakes still delays no
/// more than this many, each on its own CPU.
const LOCAL_HELPER_CHUNK: usize = 16;

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
    /// Wake-ups stay on the CPU they are for: the woken on each other CPU
    /// claim a few of that CPU's later sleepers at a time, the poster wakes
    /// the rest and claims whatever they have not. See the module
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
/// [`SharingMode::Any`]), else by the CPUs this process could run on when
/// it started: [`SharingMode::Any`] with 4 or more, [`SharingMode::Local`]
/// with 2 or 3, off with one. Under loom always [`SharingMode::Any`], so
/// that the models check the helpers.
///
/// The process-shared sets (`ksync::sem::SharedSemSet`) follow the same
/// mode with marks in the set's file instead of boards, so that the woken
/// help in whatever process they sleep; each process posts and helps by
/// its own mode.
///
/// The CPUs are the process's, not the calling thread's: a program that
/// binds each thread to a CPU of its own still runs on all of them. (Asked
/// by the first thread to post or sleep, the default once depended on that
/// thread: `ksync-lab wake` binds its sleepers to one CPU, and the first of
/// them turned sharing off for the whole run.)
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
            _ => match process_cpus() {
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

/// The CPUs this process could run on when it started (see
/// [`sharing_mode`]), within its CPU quota; else, in a program that loaded
/// the library later, the calling thread's.
///
/// Only the affinity mask is noted before `main` (one system call): the
/// quota takes a walk through the cgroup files, which cost every process
/// that loads the library about 90 us at start-up, `LD_PRELOAD`ed C
/// programs included, whether or not it ever posts. The quota is read
/// here, once, by the first thread to ask: if it limits that thread below
/// its own mask, it limits the process to the same count. (A thread bound
/// to fewer CPUs than the quota cannot see the quota: then the process's
/// mask counts, which can only overstate a quota below it.)
fn process_cpus() -> usize {
    let available = available_cpus();
    #[cfg(all(not(loom), target_os = "linux"))]
    {
        let noted = start::CPUS.load(Ordering::Relaxed);
        if noted != 0 && available >= affinity_cpus() {
            return noted;
        }
    }
    available
}

/// The CPUs in the calling thread's affinity mask, 0 if it cannot be read
/// (a mask larger than `cpu_set_t`).
#[cfg(all(not(loom), target_os = "linux"))]
fn affinity_cpus() -> usize {
    // SAFETY: a zeroed cpu_set_t is an empty set; the call writes only the
    // set, whose size it is given.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        if libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 0;
        }
        usize::try_from(libc::CPU_COUNT(&set)).unwrap_or(0)
    }
}

/// The CPUs the calling thread may run on, within the process's CPU quota.
fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Notes the CPUs in this process's affinity mask as it starts (its quota
/// is read later, see [`process_cpus`]), from the loader's list of
/// initialisers (`.init_array`, which the loader runs before `main`, and as
/// a shared library is loaded), on the thread that starts it, before the
/// program can bind any thread to fewer.
#[cfg(all(not(loom), target_os = "linux"))]
mod start {
    use std::sync::atomic::AtomicUsize;

    /// 0 until noted.
    pub(super) static CPUS: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn note_cpus() {
        CPUS.store(super::affinity_cpus(), super::Ordering::Relaxed);
    }

    #[used]
    #[link_section = ".init_array"]
    static NOTE_CPUS: extern "C" fn() = note_cpus;
}

/// A CPU nobody runs on: the sleeper did not say where it sleeps.
pub const UNKNOWN_CPU: u32 = u32::MAX;

/// [`SharingMode::Local`]: who wakes a delivered sleeper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The poster, in its first batch: no board is kept for the sleeper's
    /// CPU, or it is the poster's own, or it comes before its CPU's leader
    /// (woken at once, as without sharing: it may hold what others wait
    /// for).
    Poster,
    /// The poster, first of all: it holds a handle to its CPU's board
    /// (`Spread::shares`, the index) and starts that CPU's wake-ups.
    Leader(usize),
    /// A sleeper after its CPU's leader: on its CPU's board, for the
    /// leader, those the leader wakes, or the poster to take, and holding a
    /// handle to it.
    Led(usize),
}

/// [`SharingMode::Local`]: which delivery to a CPU leads it. A board pays
/// only if its CPU has others to wake (a board that may not come back in
/// time for the poster's next post, a claim per helper): with the second as
/// leader, sembench `-t 8 -w 4` on 2 CPUs (posts of up to 4, about two per
/// CPU) fell from 1.18x-1.21x to 1.16x the kernel; with the third, a CPU
/// has a leader only with at least three sleepers in the post.
const LEADER_AT: u32 = 3;

/// [`SharingMode::Local`]: the other CPUs a post keeps a board for, the
/// first met; the sleepers of any further CPU are the poster's to wake.
/// [`SharingMode::Any`]: the CPUs a post counts its sleepers on. Either
/// way, [`Met`].
const SHARED_CPUS: usize = 8;

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
/// [`Spread::handle_on`]: [`this_cpu`] where posts share their wake-ups
/// out, which read it ([`SharingMode::Local`] to keep wake-ups on their
/// CPU, [`SharingMode::Any`] to find CPUs crowded with a post's sleepers);
/// [`UNKNOWN_CPU`] otherwise, without asking. A post made after the mode
/// changed treats a sleeper of unknown CPU as the poster's to wake.
pub fn sleeper_cpu() -> u32 {
    cpu_to_note(sharing_mode())
}

/// [`sleeper_cpu`] under `mode`.
fn cpu_to_note(mode: SharingMode) -> u32 {
    if mode == SharingMode::Off {
        UNKNOWN_CPU
    } else {
        this_cpu()
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
    /// The next entry to claim: entries below it are someone's to wake.
    next: AtomicUsize,
    /// Entries a helper claims at a time ([`HELPER_CHUNK`] or
    /// [`LOCAL_HELPER_CHUNK`]). Stored while the poster owns the board
    /// alone; a helper reads it after its handle's delivery.
    helper_chunk: AtomicUsize,
    /// Entries `0..FIRST`.
    first: [AtomicPtr<AtomicU32>; FIRST],
    /// Segment `k`: entries `FIRST << k` up to `FIRST << (k + 1)`, or null
    /// until a post first reaches them. Stored by the poster before it
    /// publishes an entry of the segment (`len`), read only after; freed
    /// with the board.
    more: [AtomicPtr<AtomicPtr<AtomicU32>>; MORE],
    /// Under loom, boards are marked freed and leaked instead of freed, so
    /// that a model fails on any use after the free ([`free`]).
    #[cfg(loom)]
    freed: crate::sync::AtomicBool,
}

/// Frees a board whose last reference the caller holds. Under loom it is
/// only marked freed (and leaked): every later use of it fails the model,
/// as would a second free.
///
/// # Safety
///
/// The board came from `Box::into_raw` (or `Box::leak`), and the caller
/// holds its last reference.
unsafe fn free(board: NonNull<Board>) {
    #[cfg(not(loom))]
    // SAFETY: passed on from our caller.
    drop(unsafe { Box::from_raw(board.as_ptr()) });
    #[cfg(loom)]
    {
        // SAFETY: leaked, never freed: alive for the rest of the model.
        let b = unsafe { board.as_ref() };
        b.check_alive();
        b.freed.store(true, Ordering::Relaxed);
    }
}

/// Where entry `i` (`FIRST` or later, below [`CAPACITY`]) lives: its
/// segment of [`Board::more`] and its place there.
fn segment_of(i: usize) -> (usize, usize) {
    debug_assert!((FIRST..CAPACITY).contains(&i));
    // Segment k starts at FIRST << k: the highest set bit of i / FIRST.
    let k = (usize::BITS - 1 - (i / FIRST).leading_zeros()) as usize;
    (k, i - (FIRST << k))
}

impl Board {
    fn new() -> Self {
        Board {
            refs: AtomicUsize::new(POSTER_BIAS),
            len: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            helper_chunk: AtomicUsize::new(HELPER_CHUNK),
            first: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
            more: core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut())),
            #[cfg(loom)]
            freed: crate::sync::AtomicBool::new(false),
        }
    }

    /// Under loom, fails the model if the board was freed: whoever uses it
    /// must hold a reference.
    fn check_alive(&self) {
        #[cfg(loom)]
        assert!(
            !self.freed.load(Ordering::Relaxed),
            "a board used after its free"
        );
    }

    /// Entry `i`, below an acquired `len` (or the poster's own).
    fn entry(&self, i: usize) -> &AtomicPtr<AtomicU32> {
        self.check_alive();
        if i < FIRST {
            return &self.first[i];
        }
        let (k, at) = segment_of(i);
        // Stored before `len` was released past `i`.
        let segment = self.more[k].load(Ordering::Relaxed);
        // SAFETY: segment `k` holds `FIRST << k` entries, `at` among them,
        // and lives as long as the board.
        unsafe { &*segment.add(at) }
    }

    /// Entry `i` (below [`CAPACITY`]), for the poster about to write it:
    /// its segment allocated if no post reached it before.
    fn entry_to_write(&self, i: usize) -> &AtomicPtr<AtomicU32> {
        if i < FIRST {
            return &self.first[i];
        }
        let (k, at) = segment_of(i);
        let mut segment = self.more[k].load(Ordering::Relaxed);
        if segment.is_null() {
            let entries: Box<[AtomicPtr<AtomicU32>]> = (0..FIRST << k)
                .map(|_| AtomicPtr::new(core::ptr::null_mut()))
                .collect();
            segment = Box::into_raw(entries).cast::<AtomicPtr<AtomicU32>>();
            // Published with the entry, by the release store of `len` in
            // `Board::publish`.
            self.more[k].store(segment, Ordering::Relaxed);
        }
        // SAFETY: as in `entry`.
        unsafe { &*segment.add(at) }
    }

    /// Writes entry `len` (below [`CAPACITY`]) and publishes it. Only the
    /// poster calls it.
    fn publish(&self, len: usize, word: *const AtomicU32) {
        self.entry_to_write(len)
            .store(word.cast_mut(), Ordering::Relaxed);
        // Pairs with the acquire load in `Board::claim`.
        self.len.store(len + 1, Ordering::Release);
    }

    /// Claims up to `most` entries not yet claimed. Empty when there are none.
    fn claim(&self, most: usize) -> Range<usize> {
        self.check_alive();
        let mut next = self.next.load(Ordering::Relaxed);
        loop {
            // Pairs with the release store in `Board::publish`: entries
            // below `len` are written, and their segments stored.
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

    /// The words of the entries `claimed` (at most `N`).
    fn words<const N: usize>(&self, claimed: Range<usize>) -> Taken<N> {
        let mut batch = Taken::<N>::new();
        for i in claimed {
            batch.push(self.entry(i).load(Ordering::Relaxed).cast_const());
        }
        batch
    }

    /// Wakes the entries `claimed` (at most [`BATCH`]) in one batched
    /// wake. Returns the system calls made.
    fn wake_claimed(
        &self,
        claimed: Range<usize>,
        wake: impl FnOnce(&[*const AtomicU32]) -> usize,
    ) -> usize {
        self.words::<BATCH>(claimed).wake(wake)
    }

    /// Claims up to `chunk` entries at a time (at most [`BATCH`]) and wakes
    /// them, each chunk in one batched wake, until none is left. Returns the
    /// system calls made.
    fn drain(&self, chunk: usize, mut wake: impl FnMut(&[*const AtomicU32]) -> usize) -> usize {
        let mut calls = 0;
        loop {
            let claimed = self.claim(chunk.clamp(1, BATCH));
            if claimed.is_empty() {
                return calls;
            }
            calls += self.wake_claimed(claimed, &mut wake);
        }
    }

    /// Drops one handle's reference, and frees the board if it was the
    /// last.
    ///
    /// # Safety
    ///
    /// The caller holds a reference to `board` (a handle's, or an open
    /// slot's) and uses the board no more.
    unsafe fn drop_handle(board: NonNull<Board>) {
        // SAFETY: the caller's reference keeps the board alive until the
        // decrement.
        let b = unsafe { board.as_ref() };
        b.check_alive();
        if b.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
            // SAFETY: the last reference; the board came from
            // `Box::into_raw`.
            unsafe { free(board) };
        }
    }

    /// Drops the poster's bias, settling the `handles` it gave out (each
    /// holds one reference from here on): true if none is outstanding, so
    /// the poster owns the board again.
    fn drop_bias(&self, handles: usize) -> bool {
        self.check_alive();
        let settled = POSTER_BIAS - handles;
        self.refs.fetch_sub(settled, Ordering::AcqRel) == settled
    }

    /// Makes a board the poster owns alone new again. Its segments stay:
    /// a thread that posted to many sleepers once is likely to again.
    fn reset(&self) {
        self.len.store(0, Ordering::Relaxed);
        self.next.store(0, Ordering::Relaxed);
        self.refs.store(POSTER_BIAS, Ordering::Relaxed);
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        for (k, segment) in self.more.iter().enumerate() {
            let segment = segment.load(Ordering::Relaxed);
            if !segment.is_null() {
                let entries = core::ptr::slice_from_raw_parts_mut(segment, FIRST << k);
                // SAFETY: allocated in `entry_to_write` as a boxed slice of
                // that length; the board's last owner drops it once.
                drop(unsafe { Box::from_raw(entries) });
            }
        }
    }
}

/// Up to `N` words claimed from a board, to wake in one batch.
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
#[must_use = "a handle dropped unused keeps its board from ever being freed"]
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
        let calls = unsafe { self.help_board() };
        #[cfg(loom)]
        note_helpers_calls(calls);
        calls
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
        let Some(board) = NonNull::new(self.0) else {
            return 0;
        };
        // SAFETY: our reference keeps the board alive until `drop_handle`.
        let b = unsafe { board.as_ref() };
        // Under `SharingMode::Local` every entry sleeps on this sleeper's
        // CPU (unless the scheduler has moved it since): its wakes cost no
        // IPI.
        let calls = b.drain(b.helper_chunk.load(Ordering::Relaxed), wake);
        // SAFETY: our reference, used no more.
        unsafe { Board::drop_handle(board) };
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
    /// The post's boards: [`SharingMode::Any`], one, for every sleeper;
    /// [`SharingMode::Local`], one per other CPU met, share `i` for `met`'s
    /// CPU `i`.
    shares: [Share; SHARED_CPUS],
    shares_len: usize,
    /// Deliveries so far (under [`SharingMode::Any`], the first gets no
    /// handle).
    deliveries: usize,
    /// Who wakes the last delivery's sleeper, if its word is pushed next.
    role: Role,
    /// [`SharingMode::Local`]: leaders at the front of `overflow`.
    leaders: usize,
    /// [`SharingMode::Local`]: the CPU the poster runs on, read at its first
    /// delivery ([`UNKNOWN_CPU`] before).
    me: u32,
    /// [`LEADER_AT`] (a model with fewer entries sets it lower; at least 2).
    leader_at: u32,
    /// The words a board holds when it is left open ([`OPEN_AT`]; under
    /// [`SharingMode::Any`], the deliveries to one CPU; a unit test's post
    /// of pretend CPUs sets it out of reach, so that no real sleeper takes
    /// from it).
    open_at: usize,
    /// The deliveries per CPU, and where a board was left open.
    met: Met,
    /// [`SharingMode::Any`]: the board entry of the first word whose
    /// sleeper can help. The first wake reaches it, with the words before
    /// it (the first delivery's, which has no handle): woken alone, that
    /// one would help nobody.
    first_helper: Option<usize>,
    /// Words the poster wakes itself, in one batch: every word when not
    /// sharing, [`Role::Poster`]'s and the leaders' under
    /// [`SharingMode::Local`], and any past a board's capacity.
    overflow: Overflow,
}

/// One board of a post, and the poster's count of it.
#[derive(Clone, Copy)]
struct Share {
    board: Option<NonNull<Board>>,
    /// Entries written (the poster's copy of the board's `len`).
    len: usize,
    /// Handles to the board given out, and references left in open slots
    /// ([`Met`]); settled in `finish_board`.
    handles: usize,
}

impl Share {
    const fn new() -> Self {
        Share {
            board: None,
            len: 0,
            handles: 0,
        }
    }

    /// The board, taken from the thread's spare on first use, for helpers
    /// that claim as `mode` says.
    fn board(&mut self, mode: SharingMode) -> NonNull<Board> {
        *self.board.get_or_insert_with(|| {
            let board = spare::take();
            let chunk = if mode == SharingMode::Local {
                LOCAL_HELPER_CHUNK
            } else {
                HELPER_CHUNK
            };
            // SAFETY: a board just taken is the poster's alone; its handles,
            // given out from here on, carry the store with the delivery.
            unsafe { board.as_ref() }
                .helper_chunk
                .store(chunk, Ordering::Relaxed);
            board
        })
    }

    /// A handle to the board, for a delivery.
    fn handle(&mut self, mode: SharingMode) -> Handle {
        // Settled in `finish_board`: the bias covers it until then. The
        // handle reaches its sleeper through the caller's release.
        self.handles += 1;
        Handle(self.board(mode).as_ptr())
    }

    /// Owes `word` a wake on the board; false, and nothing done, if it is
    /// full.
    fn push(&mut self, mode: SharingMode, word: *const AtomicU32) -> bool {
        if self.len == CAPACITY {
            return false;
        }
        let board = self.board(mode);
        // SAFETY: we hold the poster's bias, so the board is alive; entry
        // `len` is unpublished, so nobody else reads it.
        unsafe { board.as_ref() }.publish(self.len, word);
        self.len += 1;
        true
    }

    /// Leaves the board in `cpu`'s [`open_slot`], with a reference of its
    /// own, unless the slot holds another's: true if it did.
    fn leave_open(&mut self, cpu: u32, mode: SharingMode) -> bool {
        let board = self.board(mode);
        let Some(slot) = open_slot(cpu) else {
            return false;
        };
        // Release pairs with the acquire swap in `help_open_board_on`: a
        // sleeper that takes the board from the slot sees it set up.
        let open = slot
            .compare_exchange(
                core::ptr::null_mut(),
                board.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok();
        // Settled with the bias, as a handle's.
        self.handles += usize::from(open);
        open
    }
}

/// Takes `board`'s reference back from `cpu`'s open slot, if no sleeper
/// holds it: 1 if it did (a reference the poster settles), else 0.
fn take_back(cpu: u32, board: NonNull<Board>) -> usize {
    let slot = open_slot(cpu).expect("an open board's CPU is known");
    // Acquire pairs with the release put-back in `help_open_board_on`: a
    // helper's claim and reads of the board happen before the poster
    // resets it for its next post.
    let taken = slot
        .compare_exchange(
            board.as_ptr(),
            core::ptr::null_mut(),
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .is_ok();
    usize::from(taken)
}

/// The CPUs a post's deliveries went to, the first [`SHARED_CPUS`] met: how
/// many each, and whether a board of the post was left in the CPU's
/// [`open_slot`] (a reference counted in that board's share's `handles`).
/// [`SharingMode::Local`]: entry `i` is share `i`'s CPU, the poster's own
/// not counted (its sleepers are the poster's), and a CPU's board is left
/// open once it holds [`OPEN_AT`] words. [`SharingMode::Any`]: every CPU,
/// for the post's one board, left open on a CPU crowded with the post's
/// sleepers ([`OPEN_AT`] of them).
///
/// Under [`SharingMode::Any`] a post's helpers are its own sleepers, and
/// where they all sleep on one CPU (a program that binds them there, as
/// `ksync-lab wake` does), that CPU runs them one at a time, behind the
/// sleepers of the poster's earlier posts: a waker of 4096 in nine `semop`
/// calls of up to 500 cost 1.18x the kernel per sleeper on 16 CPUs, where
/// local sharing, with its open boards, cost 0.49x. A post spread thin
/// over many CPUs (sembench's 64 over 16) crowds none of them and leaves
/// nothing open.
struct Met {
    cpu: [u32; SHARED_CPUS],
    deliveries: [u32; SHARED_CPUS],
    open: [bool; SHARED_CPUS],
    len: usize,
}

impl Met {
    const fn new() -> Self {
        Met {
            cpu: [UNKNOWN_CPU; SHARED_CPUS],
            deliveries: [0; SHARED_CPUS],
            open: [false; SHARED_CPUS],
            len: 0,
        }
    }

    /// Counts a delivery to `cpu`: its entry and the deliveries to it so
    /// far; `None` for an unknown CPU or one past the first
    /// [`SHARED_CPUS`] met.
    fn count(&mut self, cpu: u32) -> Option<(usize, u32)> {
        if cpu == UNKNOWN_CPU {
            return None;
        }
        let i = match self.cpu[..self.len].iter().position(|&c| c == cpu) {
            Some(i) => i,
            None if self.len < SHARED_CPUS => {
                self.cpu[self.len] = cpu;
                self.len += 1;
                self.len - 1
            }
            None => return None,
        };
        self.deliveries[i] += 1;
        Some((i, self.deliveries[i]))
    }
}

/// Per CPU (modulo), the board of a post with words that any sleeper
/// returning on that CPU may claim a few of ([`help_open_board`]), one
/// sleeper at a time: under [`SharingMode::Local`] a board of that CPU's
/// sleepers, under [`SharingMode::Any`] the post's one board, left in the
/// slot of each CPU crowded with its sleepers ([`Met`]).
///
/// A post's handles reach only the sleepers of that post, and a helper runs
/// only once the scheduler runs it. Where a CPU is busy with the sleepers of
/// earlier posts (a poster that posts again while its last post's woken
/// still queue for the CPU: `ksync-lab wake`'s nine `semop` calls of 500),
/// none of the new post's sleepers runs before the poster has claimed
/// everything itself. The sleepers of the earlier posts do run, one after
/// another: each takes the board from the slot, claims one chunk, puts the
/// board back and wakes its chunk. The slot holds one reference; whoever
/// swapped the board out holds it until it puts it back or drops it, so a
/// board is never used after its free. The poster takes the board back when
/// it has claimed the rest, if the slot still holds it; else a later sleeper
/// finds it with nothing left and drops it.
#[cfg(not(loom))]
static OPEN: [crossbeam_utils::CachePadded<AtomicPtr<Board>>; OPEN_SLOTS] =
    [const { crossbeam_utils::CachePadded::new(AtomicPtr::new(core::ptr::null_mut())) };
        OPEN_SLOTS];

#[cfg(loom)]
loom::lazy_static! {
    static ref OPEN: [AtomicPtr<Board>; OPEN_SLOTS] =
        core::array::from_fn(|_| AtomicPtr::new(core::ptr::null_mut()));
}

/// The words a board holds when its post leaves it open ([`OPEN`]; under
/// [`SharingMode::Any`], the post's sleepers on one CPU): a small post's
/// own woken suffice, and a slot written by every post would cost each
/// returning sleeper a cache miss to read. Leaving boards of one
/// word open made sembench `-t 8 -w 4` (posts of up to 4) fall from 2.65x-2.72x
/// the kernel to 1.55x-1.60x.
#[cfg(not(loom))]
const OPEN_AT: usize = LOCAL_HELPER_CHUNK;
#[cfg(loom)]
const OPEN_AT: usize = 1;

/// [`OPEN`]'s slots: CPUs past this share a slot with a lower one.
#[cfg(not(loom))]
const OPEN_SLOTS: usize = 64;
#[cfg(loom)]
const OPEN_SLOTS: usize = 2;

/// Unit tests' pretend CPUs, [`pretend_cpu`]`(0)` and up: numbers no CPU
/// has, each with an open slot of its own ([`PRETEND_OPEN`]), so that no
/// real sleeper (of the tests running beside, on a machine of any size)
/// meets a test's board, nor a test's helper a real post's.
#[cfg(all(test, not(loom)))]
const PRETEND_CPUS: usize = 8;

/// Unit tests' pretend CPU `i` (below [`PRETEND_CPUS`]).
#[cfg(all(test, not(loom)))]
const fn pretend_cpu(i: usize) -> u32 {
    UNKNOWN_CPU - PRETEND_CPUS as u32 + i as u32
}

/// The pretend CPUs' open slots, apart from the real ones, in test builds
/// alone: the real slots and their look-up stay as a build for use has
/// them (sembench `-t 8`'s floor moved by a third with a look-up that only
/// added a test-only branch, from the code's layout alone).
#[cfg(all(test, not(loom)))]
static PRETEND_OPEN: [AtomicPtr<Board>; PRETEND_CPUS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; PRETEND_CPUS];

/// `cpu`'s open slot, if the CPU is known.
fn open_slot(cpu: u32) -> Option<&'static AtomicPtr<Board>> {
    #[cfg(all(test, not(loom)))]
    if cpu >= pretend_cpu(0) && cpu != UNKNOWN_CPU {
        return Some(&PRETEND_OPEN[(cpu - pretend_cpu(0)) as usize]);
    }
    let slot = &OPEN[(cpu as usize) % OPEN_SLOTS];
    // Out of its `CachePadded` (under loom there is none).
    #[cfg(not(loom))]
    let slot = &**slot;
    (cpu != UNKNOWN_CPU).then_some(slot)
}

/// Wakes one chunk of the words left on the board a post left open for the
/// calling thread's CPU, if there is one (see the module documentation).
/// Call it once a woken sleeper has its result and has helped its own post
/// ([`Handle::help`]), with no lock held. Returns the system calls made.
pub fn help_open_board() -> usize {
    if !sharing() {
        return 0;
    }
    // SAFETY: the words are futex keys (see `Spread::push`).
    let calls = help_open_board_on(this_cpu(), |words| unsafe { super::wake_all(words) });
    #[cfg(loom)]
    note_helpers_calls(calls);
    calls
}

#[cfg(loom)]
std::thread_local! {
    /// [`helpers_wake_calls`]: per OS thread, which a test's model threads
    /// share, so tests run side by side count apart.
    static HELPERS_CALLS: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

#[cfg(loom)]
fn note_helpers_calls(calls: usize) {
    HELPERS_CALLS.with(|c| c.set(c.get() + calls));
}

/// Under loom: the wake calls that woken sleepers have made for posts shared
/// out to them ([`Handle::help`], [`help_open_board`]), in the calling test
/// so far. A model of a user of [`Spread`] reads it to show that a post was
/// shared out at all: what the woken wake, the poster would have woken
/// anyway, so nothing else tells the two apart.
#[cfg(loom)]
pub fn helpers_wake_calls() -> usize {
    HELPERS_CALLS.with(|c| c.get())
}

/// [`help_open_board`] for a sleeper on `cpu`, with `wake` for the futex
/// wake (loom's model records instead).
#[inline(never)]
fn help_open_board_on(cpu: u32, wake: impl FnOnce(&[*const AtomicU32]) -> usize) -> usize {
    let Some(slot) = open_slot(cpu) else {
        return 0;
    };
    if slot.load(Ordering::Relaxed).is_null() {
        return 0;
    }
    // Takes the slot's reference. Acquire pairs with the release of whoever
    // left the board there.
    let Some(board) = NonNull::new(slot.swap(core::ptr::null_mut(), Ordering::Acquire)) else {
        return 0;
    };
    // SAFETY: the slot's reference, ours now, keeps the board alive.
    let b = unsafe { board.as_ref() };
    // A helper's chunk for the board's mode (`Share::board`).
    let chunk = b.helper_chunk.load(Ordering::Relaxed);
    let claimed = b.claim(chunk.min(LOCAL_HELPER_CHUNK));
    // The words, read while the reference is ours.
    let batch = b.words::<LOCAL_HELPER_CHUNK>(claimed.clone());
    // The reference goes back to the slot for the next sleeper while words
    // are left; else, or if another post's board is there now, dropped. A
    // board put back with nothing left would stay in the slot until the
    // next sleeper on this CPU looked, and keep later posts' boards out;
    // words its poster publishes after this look, the poster wakes itself.
    // Relaxed: a stale length only drops a board that words published since
    // could have used.
    let left = claimed.end < b.len.load(Ordering::Relaxed);
    let back = left
        && slot
            .compare_exchange(
                core::ptr::null_mut(),
                board.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok();
    if !back {
        // SAFETY: the slot's reference, ours, used no more.
        unsafe { Board::drop_handle(board) };
    }
    batch.wake(wake)
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
    /// An empty wake-up; its boards are taken on the first deliveries that
    /// need them.
    pub fn new() -> Self {
        Spread {
            mode: sharing_mode(),
            shares: [Share::new(); SHARED_CPUS],
            shares_len: 0,
            deliveries: 0,
            role: Role::Poster,
            leaders: 0,
            me: UNKNOWN_CPU,
            leader_at: LEADER_AT,
            open_at: OPEN_AT,
            met: Met::new(),
            first_helper: None,
            overflow: Overflow::new(),
        }
    }

    /// A handle for the sleeper about to be delivered, which sleeps on a CPU
    /// nobody knows ([`handle_on`](Self::handle_on)).
    pub fn handle(&mut self) -> Handle {
        self.handle_on(UNKNOWN_CPU)
    }

    /// A handle for the sleeper about to be delivered, which sleeps on
    /// `cpu` (what [`sleeper_cpu`] said when it queued; [`UNKNOWN_CPU`] if
    /// it did not say). If its word is owed a wake, [`push`](Self::push) it
    /// next, before the next delivery.
    ///
    /// [`SharingMode::Any`]: every delivery gets one but the first, so a
    /// post that completes one sleeper costs nothing more; the sleepers
    /// after it help. [`SharingMode::Local`]: the third delivery to each CPU
    /// other than the poster's (`LEADER_AT`) and every later one get a
    /// handle to that CPU's board, where the later ones' words go. The
    /// poster wakes the third (the leader) and the two before it at once,
    /// so that a sleeper that holds what others wait for is not kept
    /// waiting for a helper; the leader, the sleepers it wakes and those
    /// they wake claim the rest a few at a time, each a wake onto their own
    /// CPU, which costs no IPI.
    pub fn handle_on(&mut self, cpu: u32) -> Handle {
        self.deliveries += 1;
        self.role = match self.mode {
            SharingMode::Off => Role::Poster,
            SharingMode::Any => {
                if let Some((at, n)) = self.met.count(cpu) {
                    if n as usize == self.open_at {
                        self.leave_open(0, at);
                    }
                }
                Role::Led(0)
            }
            SharingMode::Local => self.role_on(cpu),
        };
        match self.handed_share() {
            Some(i) => {
                self.shares_len = self.shares_len.max(i + 1);
                self.shares[i].handle(self.mode)
            }
            None => Handle::NONE,
        }
    }

    /// The board whose handle the last delivery's sleeper holds, if any:
    /// its role's, but under [`SharingMode::Any`] not the first delivery's.
    fn handed_share(&self) -> Option<usize> {
        match self.role {
            Role::Poster => None,
            Role::Led(_) if self.mode == SharingMode::Any && self.deliveries == 1 => None,
            Role::Led(i) | Role::Leader(i) => Some(i),
        }
    }

    /// [`SharingMode::Local`]: counts a delivery to `cpu` and says who
    /// wakes it: its CPU's board if it comes after the [`LEADER_AT`]th to a
    /// CPU other than the poster's, which leads; the poster for the others
    /// (the poster's own CPU, an unknown one, those past the
    /// [`SHARED_CPUS`] CPUs counted).
    fn role_on(&mut self, cpu: u32) -> Role {
        if self.me == UNKNOWN_CPU {
            self.me = this_cpu();
        }
        if cpu == UNKNOWN_CPU || cpu == self.me {
            return Role::Poster;
        }
        let Some((i, n)) = self.met.count(cpu) else {
            return Role::Poster;
        };
        match n.cmp(&self.leader_at) {
            core::cmp::Ordering::Less => Role::Poster,
            core::cmp::Ordering::Equal => Role::Leader(i),
            core::cmp::Ordering::Greater => Role::Led(i),
        }
    }

    /// Owes `word` a wake. The word is a futex key only: it may be gone by
    /// the time it is woken.
    pub fn push(&mut self, word: &AtomicU32) {
        self.push_ptr(word);
    }

    /// [`push`](Self::push) by address.
    pub(crate) fn push_ptr(&mut self, word: *const AtomicU32) {
        let helps = self.handed_share().is_some();
        let role = core::mem::replace(&mut self.role, Role::Poster);
        let share = match (self.mode, role) {
            // A word pushed without a delivery before it is on the board
            // too: whoever claims it wakes it.
            (SharingMode::Any, _) => 0,
            (SharingMode::Local, Role::Led(i)) => i,
            (SharingMode::Local, Role::Leader(_)) => {
                // The poster wakes leaders first of all.
                self.overflow.insert(self.leaders, word);
                self.leaders += 1;
                return;
            }
            _ => {
                self.overflow.push(word);
                return;
            }
        };
        self.shares_len = self.shares_len.max(share + 1);
        let at = self.shares[share].len;
        if !self.shares[share].push(self.mode, word) {
            self.overflow.push(word);
        } else if self.mode == SharingMode::Local && at + 1 == self.open_at {
            self.leave_open(share, share);
        } else if helps && self.mode == SharingMode::Any && self.first_helper.is_none() {
            self.first_helper = Some(at);
        }
    }

    /// Leaves share `share`'s board in the open slot of `met`'s CPU `at`
    /// (see [`OPEN`]).
    fn leave_open(&mut self, share: usize, at: usize) {
        self.shares_len = self.shares_len.max(share + 1);
        self.met.open[at] = self.shares[share].leave_open(self.met.cpu[at], self.mode);
    }

    /// Words owed a wake.
    pub fn len(&self) -> usize {
        let on_boards: usize = self.shares[..self.shares_len].iter().map(|s| s.len).sum();
        on_boards + self.overflow.len()
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
        // what the helpers have not claimed from each board; otherwise the
        // board, then the words past its capacity.
        if self.mode == SharingMode::Local {
            calls += self.overflow.wake_and_clear(&mut wake);
        }
        for i in 0..self.shares_len {
            calls += self.finish_board(i, &mut wake);
        }
        calls += self.overflow.wake_and_clear(&mut wake);
        self.shares_len = 0;
        self.deliveries = 0;
        self.role = Role::Poster;
        self.leaders = 0;
        self.me = UNKNOWN_CPU;
        self.met = Met::new();
        self.first_helper = None;
        calls
    }

    /// [`finish`](Self::finish)'s part for board `i`. Out of line, as
    /// [`Handle::help_board`] is: a post without sharing should not carry
    /// the batch this keeps on the stack.
    #[inline(never)]
    fn finish_board(
        &mut self,
        i: usize,
        mut wake: impl FnMut(&[*const AtomicU32]) -> usize,
    ) -> usize {
        let share = core::mem::replace(&mut self.shares[i], Share::new());
        let Some(board) = share.board else {
            return 0;
        };
        let mut calls = 0;
        // SAFETY: we hold the poster's bias until `drop_bias`.
        let b = unsafe { board.as_ref() };
        if share.handles == 0 {
            // Nobody else has the board: wake what it holds, in as few
            // batches as the frame allows, and keep it.
            calls += b.drain(BATCH, &mut wake);
            b.reset();
            spare::put(board);
            return calls;
        }
        if self.mode == SharingMode::Any {
            // The first helper's word first, with only the words before
            // it, so that its sleeper starts helping while the poster
            // goes on. (Under `Local` the poster's own batch woke the
            // leader.)
            let most = self.first_helper.map_or(1, |f| (f + 1).min(POSTER_CHUNK));
            let first = b.claim(most);
            if !first.is_empty() {
                calls += b.wake_claimed(first, &mut wake);
            }
        }
        // Then a few at a time, in one batched wake each, until the
        // helpers and the poster have claimed everything: nothing waits
        // for a helper the scheduler has not run.
        calls += b.drain(POSTER_CHUNK, &mut wake);
        // Each open slot's reference to this board (its CPU's under
        // `Local`, any CPU's under `Any`) comes back if no sleeper holds it.
        let mut handles = share.handles;
        for at in 0..self.met.len {
            let ours = self.mode == SharingMode::Any || at == i;
            if ours && self.met.open[at] {
                handles -= take_back(self.met.cpu[at], board);
            }
        }
        if b.drop_bias(handles) {
            b.reset();
            spare::put(board);
        }
        calls
    }
}

impl Drop for Spread {
    fn drop(&mut self) {
        if self.shares_len != 0 || !self.overflow.is_empty() {
            // SAFETY: as in `wake`.
            self.finish(|words| unsafe { super::wake_all(words) });
        }
    }
}

/// A thread's spare boards, so that a post whose boards came back allocates
/// nothing. Under loom every post allocates its own.
#[cfg(not(loom))]
mod spare {
    use super::Board;
    use core::cell::Cell;
    use core::ptr::NonNull;

    /// Boards a thread keeps: one per post under `SharingMode::Any`, one per
    /// other CPU with a leader under `SharingMode::Local`, where the default
    /// is for 2 or 3 CPUs.
    const KEPT: usize = 2;

    struct Spare([Cell<Option<NonNull<Board>>>; KEPT]);

    impl Drop for Spare {
        fn drop(&mut self) {
            for kept in &self.0 {
                if let Some(board) = kept.take() {
                    // SAFETY: a spare board is owned by its thread alone.
                    drop(unsafe { Box::from_raw(board.as_ptr()) });
                }
            }
        }
    }

    std::thread_local! {
        static SPARE: Spare = const { Spare([const { Cell::new(None) }; KEPT]) };
    }

    pub(super) fn take() -> NonNull<Board> {
        SPARE
            .try_with(|s| s.0.iter().find_map(Cell::take))
            .ok()
            .flatten()
            .unwrap_or_else(|| NonNull::from(Box::leak(Box::new(Board::new()))))
    }

    pub(super) fn put(board: NonNull<Board>) {
        let kept = SPARE.try_with(|s| match s.0.iter().find(|c| c.get().is_none()) {
            Some(free) => {
                free.set(Some(board));
                true
            }
            None => false,
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
        unsafe { super::free(board) };
    }
}

/// Which of `words` a woken `word` is: the tests and models record wakes by
/// index.
#[cfg(test)]
fn index(words: &[AtomicU32], word: *const AtomicU32) -> usize {
    words
        .iter()
        .position(|w| core::ptr::eq(w, word))
        .expect("only pushed words are woken")
}

/// A model's poster finishes its post, then the sleepers holding `handles`
/// help late, finding what is left, if anything: which of `words` they all
/// woke.
#[cfg(all(test, loom))]
fn finish_and_help_late(
    spread: &mut Spread,
    handles: Vec<Handle>,
    words: &[AtomicU32],
) -> Vec<usize> {
    let mut woken = Vec::new();
    let mut record = |ws: &[*const AtomicU32]| {
        woken.extend(ws.iter().map(|&w| index(words, w)));
        ws.len()
    };
    spread.finish(&mut record);
    for h in handles {
        // SAFETY: each handle used once.
        unsafe { h.help_with(&mut record) };
    }
    woken
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
            index(&self.words, word)
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

/// The model of [`SharingMode::Local`]: a poster on CPU 0 delivers four
/// sleepers of CPU 1 and pushes each word right after its delivery; the
/// second leads (a model's posts are small, so the leader comes one
/// delivery early) and, once it sees its result, claims from CPU 1's board
/// while the poster may still be delivering and then draining it; the
/// last two, on the board, help after the poster is done. Every word must
/// be woken exactly once, whatever the interleaving.
#[cfg(all(test, loom))]
mod local_model {
    use super::*;
    use loom::sync::{Arc, Notify};

    const SLEEPERS: usize = 4;
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
            let mut led = Vec::new();
            for k in 0..SLEEPERS {
                let h = spread.handle_on(1);
                assert_eq!(h != Handle::NONE, k >= LEADER);
                if k == LEADER {
                    handle.store(h.into_raw(), Ordering::Relaxed);
                } else if k > LEADER {
                    led.push(h);
                }
                // The delivery: the result, released with the handle.
                words[k].store(1, Ordering::Release);
                if k == LEADER {
                    delivered.notify();
                }
                spread.push_ptr(&words[k]);
            }
            let mut woken = finish_and_help_late(&mut spread, led, &words[..]);
            woken.extend(leader.join().unwrap());
            woken.sort_unstable();
            assert_eq!(woken, (0..SLEEPERS).collect::<Vec<_>>());
        });
    }
}

/// The models of a board left open ([`OPEN`]). A poster delivers three
/// sleepers and pushes each word right after its delivery, while a sleeper
/// of an earlier post returns on CPU 1 and takes a chunk from that CPU's
/// slot; then the handles help, and the next sleeper to return on each CPU
/// drops a board left behind. Every word must be woken exactly once, and
/// the slots must end empty, whatever the interleaving: a slot's reference
/// is held by one party at a time, so no board is used after its free.
#[cfg(all(test, loom))]
mod open_model {
    use super::*;
    use loom::sync::Arc;

    const SLEEPERS: usize = 3;

    /// Posts the words of sleepers on `cpus` as `spread` shares them, one
    /// sleeper returning on CPU 1 meanwhile (see the module documentation).
    fn post_while_one_returns(mut spread: Spread, cpus: [u32; SLEEPERS]) {
        let words: Arc<[AtomicU32; SLEEPERS]> =
            Arc::new(core::array::from_fn(|_| AtomicU32::new(0)));
        let returning = {
            let words = Arc::clone(&words);
            loom::thread::spawn(move || {
                let mut woken = Vec::new();
                help_open_board_on(1, |ws| {
                    woken.extend(ws.iter().map(|&w| index(&words[..], w)));
                    ws.len()
                });
                woken
            })
        };
        let mut handles = Vec::new();
        for (word, cpu) in words.iter().zip(cpus) {
            handles.push(spread.handle_on(cpu));
            spread.push_ptr(word);
        }
        let mut woken = finish_and_help_late(&mut spread, handles, &words[..]);
        let mut woken_there = returning.join().unwrap();
        for cpu in [0, 1] {
            help_open_board_on(cpu, |ws| {
                woken.extend(ws.iter().map(|&w| index(&words[..], w)));
                ws.len()
            });
            assert!(open_slot(cpu).unwrap().load(Ordering::Relaxed).is_null());
        }
        woken.append(&mut woken_there);
        woken.sort_unstable();
        assert_eq!(woken, (0..SLEEPERS).collect::<Vec<_>>());
    }

    /// [`SharingMode::Local`]: a poster on CPU 0, three sleepers of CPU 1,
    /// the third on CPU 1's board, which it leaves open (one word is enough
    /// under loom).
    #[test]
    fn a_board_left_open_is_woken_once_and_freed_once() {
        loom::model(|| {
            model_cpu(0);
            let mut spread = Spread::new();
            spread.mode = SharingMode::Local;
            spread.leader_at = 2;
            post_while_one_returns(spread, [1, 1, 1]);
        });
    }

    /// [`SharingMode::Any`]: sleepers on CPUs 0, 1 and 1; a model's posts are
    /// small, so each CPU's first sleeper makes it crowded, and the post's
    /// one board is left in both CPUs' slots, a reference in each.
    #[test]
    fn a_board_left_open_on_two_cpus_is_woken_once_and_freed_once() {
        loom::model(|| {
            let mut spread = Spread::new();
            spread.mode = SharingMode::Any;
            post_while_one_returns(spread, [0, 1, 1]);
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

    /// A post that shares out (or not) as `mode` says, whatever this
    /// machine's default.
    fn spread(mode: SharingMode) -> Spread {
        let mut spread = Spread::new();
        spread.mode = mode;
        spread.open_at = usize::MAX;
        spread
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
        // Each handle used once (the last one frees the board).
        help_late(handles[1..].iter().copied());
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
        help_late([spinning, parked]);
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
            spread.push(word);
        }
        handle
    }

    /// Each handle helps once, waking nothing: the poster took everything.
    fn help_late(handles: impl IntoIterator<Item = Handle>) {
        for h in handles {
            // SAFETY: each handle used once.
            assert_eq!(unsafe { h.help_with(|ws| ws.len()) }, 0);
        }
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
        #[cfg(target_os = "linux")]
        {
            assert_ne!(cpu_to_note(SharingMode::Any), UNKNOWN_CPU);
            assert_ne!(cpu_to_note(SharingMode::Local), UNKNOWN_CPU);
        }
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
        assert_eq!(
            handed,
            [2, 3, 4],
            "CPU 1's third sleeper leads, and those after it help"
        );
        // The leader first, then the two sleepers of its CPU before it and
        // everyone no leader is sent to; CPU 1's fourth and fifth are on
        // its board, and the poster claims them only once it has woken the
        // rest.
        assert_eq!(
            batches(&mut spread, &words),
            [vec![2, 0, 1, 5, 6, 7, 8], vec![3, 4]]
        );
        help_late(handles);
    }

    #[test]
    fn a_local_leader_wakes_the_sleepers_of_its_own_cpu_only() {
        let words: [AtomicU32; 8] = Default::default();
        let mut spread = spread(SharingMode::Local);
        spread.me = 0;
        // CPU 1: two parked, the third (the leader) still polling, so never
        // pushed, two more parked; CPU 2: three parked.
        assert_eq!(deliver(&mut spread, &words[0], 1, true), Handle::NONE);
        assert_eq!(deliver(&mut spread, &words[1], 1, true), Handle::NONE);
        let leader = deliver(&mut spread, &words[2], 1, false);
        let led = [
            deliver(&mut spread, &words[3], 1, true),
            deliver(&mut spread, &words[4], 1, true),
        ];
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
                leader.help_with(|ws| {
                    woken.extend(ws.iter().map(|&w| index(&words, w)));
                    1
                })
            },
            1
        );
        woken.sort_unstable();
        assert_eq!(woken, [3, 4]);
        // The poster wakes CPU 2's leader first, then CPU 1's first two and
        // the two before CPU 2's leader; nothing is left on the board.
        assert_eq!(batches(&mut spread, &words), [vec![7, 0, 1, 5, 6]]);
        help_late(led.into_iter().chain([other_leader]));
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
        let handles: Vec<Handle> = words
            .iter()
            .map(|w| deliver(&mut spread, w, 1, true))
            .collect();
        assert_eq!(batches(&mut spread, &words), [vec![2, 0, 1], vec![3]]);
        help_late(handles);
    }

    #[test]
    fn a_local_post_past_the_boards_capacity_wakes_every_word_once() {
        let words: Vec<AtomicU32> = (0..CAPACITY + 8).map(|_| AtomicU32::new(0)).collect();
        let mut spread = spread(SharingMode::Local);
        spread.me = 0;
        let handles: Vec<Handle> = words
            .iter()
            .map(|w| deliver(&mut spread, w, 1, true))
            .collect();
        let mut woken = vec![0; words.len()];
        let mut record = |ws: &[*const AtomicU32]| {
            for &w in ws {
                woken[index(&words, w)] += 1;
            }
            1
        };
        // The leader and a few of CPU 1's board help before the poster is
        // done, the rest after.
        let early = LEADER_AT as usize + 3;
        for (k, h) in handles.into_iter().enumerate() {
            if k == early {
                spread.finish(&mut record);
            }
            // SAFETY: each handle used once.
            unsafe { h.help_with(&mut record) };
        }
        assert!(woken.iter().all(|&n| n == 1));
    }

    #[test]
    fn a_boards_segments_double_and_cover_its_capacity_once() {
        let mut expect = (0, 0);
        for i in FIRST..CAPACITY {
            assert_eq!(segment_of(i), expect, "entry {i}");
            expect.1 += 1;
            if expect.1 == FIRST << expect.0 {
                expect = (expect.0 + 1, 0);
            }
        }
        assert_eq!(expect, (MORE, 0), "the last segment ends at the capacity");
    }

    /// A local post to pretend CPU `cpu` of its leader and the two before
    /// it, then `led` words on the CPU's board, which it leaves open there.
    fn post_left_open(cpu: u32, led: usize) -> (Vec<AtomicU32>, Spread, Vec<Handle>) {
        let words: Vec<AtomicU32> = (0..LEADER_AT as usize + led)
            .map(|_| AtomicU32::new(0))
            .collect();
        let mut spread = spread(SharingMode::Local);
        spread.open_at = OPEN_AT;
        spread.me = 0;
        let handles: Vec<Handle> = words
            .iter()
            .map(|w| deliver(&mut spread, w, cpu, true))
            .collect();
        let slot = open_slot(cpu).unwrap();
        assert!(!slot.load(Ordering::Relaxed).is_null(), "left open");
        (words, spread, handles)
    }

    #[test]
    fn a_board_left_open_gives_each_returning_sleeper_one_chunk() {
        const CPU: u32 = pretend_cpu(0);
        let led = OPEN_AT + 2 * LOCAL_HELPER_CHUNK + 3;
        let (words, mut spread, handles) = post_left_open(CPU, led);
        let slot = open_slot(CPU).unwrap();
        let mut woken = vec![0; words.len()];
        let mut record = |ws: &[*const AtomicU32]| {
            ws.iter().for_each(|&w| woken[index(&words, w)] += 1);
            ws.len()
        };
        // Two sleepers of earlier posts return on that CPU: a chunk each,
        // and the board goes back to the slot after each.
        for _ in 0..2 {
            assert_eq!(help_open_board_on(CPU, &mut record), LOCAL_HELPER_CHUNK);
            assert!(!slot.load(Ordering::Relaxed).is_null());
        }
        // The poster claims the rest and takes the board back.
        spread.finish(&mut record);
        assert!(slot.load(Ordering::Relaxed).is_null(), "taken back");
        assert_eq!(help_open_board_on(CPU, &mut record), 0);
        help_late(handles);
        assert!(woken.iter().all(|&n| n == 1), "{woken:?}");
    }

    #[test]
    fn a_sleeper_that_claims_a_left_open_boards_last_words_keeps_it_out_of_the_slot() {
        const CPU: u32 = pretend_cpu(1);
        let (words, mut spread, handles) = post_left_open(CPU, OPEN_AT);
        let slot = open_slot(CPU).unwrap();
        let mut woken = vec![0; words.len()];
        let mut record = |ws: &[*const AtomicU32]| {
            ws.iter().for_each(|&w| woken[index(&words, w)] += 1);
            ws.len()
        };
        // A sleeper of an earlier post returns there and claims every word
        // the board holds: nothing is left for the next, so the board does
        // not go back (where it would stay until some later sleeper on that
        // CPU looked, keeping other posts' boards out).
        assert_eq!(help_open_board_on(CPU, &mut record), OPEN_AT);
        assert!(slot.load(Ordering::Relaxed).is_null(), "put back empty");
        spread.finish(&mut record);
        assert!(slot.load(Ordering::Relaxed).is_null());
        help_late(handles);
        assert!(woken.iter().all(|&n| n == 1), "{woken:?}");
    }

    #[test]
    fn an_any_post_leaves_its_board_open_on_each_crowded_cpu() {
        // Two pretend CPUs crowded with the post's sleepers, one not.
        const CROWDED: [u32; 2] = [pretend_cpu(2), pretend_cpu(3)];
        const SPARSE: u32 = pretend_cpu(4);
        let mut cpus = vec![CROWDED[0]; OPEN_AT];
        cpus.extend([SPARSE; OPEN_AT - 1]);
        cpus.extend([CROWDED[1]; OPEN_AT + 5]);
        cpus.push(UNKNOWN_CPU);
        let words: Vec<AtomicU32> = cpus.iter().map(|_| AtomicU32::new(0)).collect();
        let mut spread = spread(SharingMode::Any);
        spread.open_at = OPEN_AT;
        let handles: Vec<Handle> = words
            .iter()
            .zip(&cpus)
            .map(|(w, &cpu)| deliver(&mut spread, w, cpu, true))
            .collect();
        let board = open_slot(CROWDED[0]).unwrap().load(Ordering::Relaxed);
        assert!(!board.is_null(), "left open");
        assert_eq!(
            open_slot(CROWDED[1]).unwrap().load(Ordering::Relaxed),
            board
        );
        assert!(open_slot(SPARSE).unwrap().load(Ordering::Relaxed).is_null());
        let mut woken = vec![0; words.len()];
        let mut record = |ws: &[*const AtomicU32]| {
            ws.iter().for_each(|&w| woken[index(&words, w)] += 1);
            ws.len()
        };
        // A sleeper of an earlier post returns on each crowded CPU: a
        // helper's chunk each.
        for cpu in CROWDED {
            assert_eq!(help_open_board_on(cpu, &mut record), HELPER_CHUNK);
        }
        spread.finish(&mut record);
        for cpu in CROWDED {
            assert!(open_slot(cpu).unwrap().load(Ordering::Relaxed).is_null());
        }
        help_late(handles);
        assert!(woken.iter().all(|&n| n == 1), "{woken:?}");
    }

    #[test]
    fn a_board_keeps_its_segments_for_the_next_post() {
        let words: Vec<AtomicU32> = (0..4 * FIRST).map(|_| AtomicU32::new(0)).collect();
        // A thread of its own, so that its spare boards are this test's.
        std::thread::spawn(move || {
            let mut segments = Vec::new();
            for _ in 0..2 {
                // Nobody gets a handle: the board comes back, segments and all.
                let mut spread = spread(SharingMode::Any);
                for w in &words {
                    spread.push(w);
                }
                let mut woken = vec![0; words.len()];
                let calls = spread.finish(|ws| {
                    ws.iter().for_each(|&w| woken[index(&words, w)] += 1);
                    1
                });
                assert_eq!(
                    calls,
                    words.len().div_ceil(BATCH),
                    "batches as large as a frame holds"
                );
                assert!(woken.iter().all(|&n| n == 1));
                let board = spare::take();
                // SAFETY: a spare board is this thread's alone.
                let more = unsafe { board.as_ref() }
                    .more
                    .iter()
                    .map(|m| m.load(Ordering::Relaxed))
                    .collect::<Vec<_>>();
                spare::put(board);
                segments.push(more);
            }
            // Entries up to 4 * FIRST: segments 0 and 1, allocated once.
            assert!(segments[0][..2].iter().all(|m| !m.is_null()));
            assert!(segments[0][2..].iter().all(|m| m.is_null()));
            assert_eq!(segments[0], segments[1], "the second post reused them");
        })
        .join()
        .unwrap();
    }
}
