//! Which processes use a set, and which of them have died.
//!
//! A process that alters a set claims one of its [`NPROC`] process slots: it
//! takes a POSIX byte-range write lock on byte `LIVENESS_BASE + slot` of the
//! set's file and bumps the slot's incarnation (`GEN`), in the order
//! [`Registry::claim`] gives. The kernel drops
//! POSIX locks when their process dies, however it dies, so another process
//! that can take the same lock knows the slot's owner is dead (the way LMDB
//! tracks its readers); a lock held is an owner alive. POSIX locks are not
//! inherited by `fork`, which gives a child its own slot and so its own undo
//! adjustments, as the kernel gives it an empty undo list.
//!
//! Two rules of POSIX locks shape this module:
//! * closing *any* descriptor of the file drops all of the process's locks
//!   on it, so each process opens a set's file once, in the [`Registry`],
//!   and keeps that descriptor (and its mapping) until it exits once it holds
//!   a slot;
//! * a process never conflicts with its own locks, so a process must never
//!   test its own slot, and the threads of one process take and test slot
//!   locks one at a time (the registry's mutex).

use std::sync::{Arc, Mutex, MutexGuard};

use super::layout::{owner_word, proc_slot, GEN_MASK, NPROC, SLOT_LIVE};
use super::map::Mapping;
use crate::sem::stamp::current_pid;
use crate::sem::SemError;
use crate::sync::Ordering;

/// The byte whose lock says slot 0 is alive; far past the end of any set
/// file, so it never overlaps data a tool might lock.
const LIVENESS_BASE: i64 = 1 << 40;

/// This process's incarnation in one set: its slot and generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Me {
    pub(super) slot: usize,
    pub(super) gen: u32,
}

impl Me {
    /// How sleepers and the lock name this process.
    pub(super) fn owner(self) -> u32 {
        owner_word(self.slot, self.gen)
    }
}

/// One set file this process has opened.
struct Entry {
    /// Its file's device and inode are `map.file()`.
    map: Arc<Mapping>,
    /// The process that filled `me`: after a `fork` the child finds its
    /// parent's pid here and claims a slot of its own.
    pid: i32,
    me: Option<Me>,
    /// A slot claimed but not yet adopted (`set.rs`): no other thread of
    /// this process may use it, nor take it for a dead process's.
    claiming: Option<Me>,
}

/// Every set file this process has open, one descriptor each.
pub(super) struct Registry {
    entries: Vec<Entry>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    entries: Vec::new(),
});

/// The registry, also held while this process takes or tests slot locks.
pub(super) fn registry() -> MutexGuard<'static, Registry> {
    hold_across_fork();
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes every `fork` take the registry's lock first and release it on
/// both sides. The lock is held across system calls (a set's open and
/// mapping, a search for the dead's slot locks), and a `fork` that copied
/// it taken would leave the child, where the holder does not exist,
/// waiting for ever on its first call that needs it.
fn hold_across_fork() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers plain functions, which take the registry's
        // lock in the forking thread (which holds none of ours: nothing in
        // the library forks) and release it on both sides.
        unsafe {
            libc::pthread_atfork(
                Some(take_for_fork),
                Some(release_after_fork),
                Some(release_after_fork),
            )
        };
    });
}

std::thread_local! {
    /// The registry's lock, held by the forking thread across its `fork`.
    static HELD_FOR_FORK: core::cell::RefCell<Option<MutexGuard<'static, Registry>>> =
        const { core::cell::RefCell::new(None) };
}

extern "C" fn take_for_fork() {
    let guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let _ = HELD_FOR_FORK.try_with(|held| *held.borrow_mut() = Some(guard));
}

extern "C" fn release_after_fork() {
    let _ = HELD_FOR_FORK.try_with(|held| drop(held.borrow_mut().take()));
}

impl Registry {
    /// The mapping already open for the file `(dev, ino)`, if any.
    pub(super) fn find(&self, dev: u64, ino: u64) -> Option<Arc<Mapping>> {
        self.entries
            .iter()
            .find(|e| e.map.file() == (dev, ino))
            .map(|e| Arc::clone(&e.map))
    }

    /// Keeps `map` for its file, or returns the one a racing thread kept
    /// first (whose descriptor must then be the only one).
    pub(super) fn insert(&mut self, map: Mapping) -> Arc<Mapping> {
        let (dev, ino) = map.file();
        if let Some(found) = self.find(dev, ino) {
            return found;
        }
        let map = Arc::new(map);
        self.entries.push(Entry {
            map: Arc::clone(&map),
            pid: current_pid(),
            me: None,
            claiming: None,
        });
        map
    }

    /// Forgets a set's file when its last handle goes, unless this process
    /// holds a slot in a live set: closing the descriptor would drop the
    /// slot's liveness lock, and others would apply its undo adjustments
    /// while it lives. A removed set's slots no longer matter.
    pub(super) fn release(&mut self, map: &Arc<Mapping>, removed: bool) {
        let pid = current_pid();
        self.entries.retain(|e| {
            !(Arc::ptr_eq(&e.map, map)
                && Arc::strong_count(&e.map) <= 2
                && (e.me.is_none() || e.pid != pid || removed))
        });
    }

    fn entry(&mut self, map: &Arc<Mapping>) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| Arc::ptr_eq(&e.map, map))
    }

    /// This process's slot in the set, if it has claimed one (and not in a
    /// parent it was forked from).
    pub(super) fn me(&mut self, map: &Arc<Mapping>) -> Option<Me> {
        let pid = current_pid();
        let entry = self.entry(map)?;
        if entry.pid != pid {
            entry.pid = pid;
            entry.me = None;
            entry.claiming = None;
        }
        entry.me
    }

    /// Claims a free slot for this process: the first whose liveness lock
    /// can be taken. The caller then takes the set's lock, adopts what a
    /// dead earlier owner left in the slot, and only then [`publish`]es it
    /// for the process's other threads: a thread that queued a sleeper in
    /// the slot before the adoption would see it dropped with the leftovers.
    /// `ENOSPC` when [`NPROC`] processes are alive in the set.
    ///
    /// [`publish`]: Registry::publish
    ///
    /// The slot changes hands in an order no prober can misread (see
    /// [`incarnation_alive`]): with the set's claim lock held ([`ClaimLock::take`],
    /// which the caller takes before this registry's lock), so that
    /// claimers go one at a time, the claimer takes the slot's liveness
    /// byte with a *read* lock (refused while a live owner holds its write
    /// lock), starts the new incarnation, and only then takes the write
    /// lock. Taking the write lock first, as this did, left a moment where
    /// the dead owner's incarnation was still current and its liveness byte
    /// locked: a post in that moment gave a unit to the dead process's
    /// sleeper, lost when the slot was adopted.
    pub(super) fn claim(&mut self, map: &Arc<Mapping>, _turn: &ClaimLock) -> Result<Me, SemError> {
        let layout = &map.layout;
        for slot in 0..NPROC {
            if !lock_byte(map, slot, libc::F_RDLCK)? {
                continue;
            }
            // A new incarnation: the previous owner's lock word and sleepers
            // now name a dead process (`lock.rs`, `engine.rs`). Stored
            // before the write lock that says the slot's owner lives: a
            // prober that sees that lock then sees this (`incarnation_alive`).
            let gen_word = map.word(layout.proc(slot, proc_slot::GEN));
            let mut gen = gen_word.load(Ordering::Acquire).wrapping_add(1) & GEN_MASK;
            if gen == 0 {
                gen = 1;
            }
            gen_word.store(gen, Ordering::Release);
            // Converts the read lock: no other process holds one (claimers
            // take turns, and a reaper's write lock would have refused
            // ours), so only an error (ENOLCK) refuses it; then the read
            // lock must not stay, or every later claimer would take the
            // slot with a read lock too and fail to convert it.
            match lock_byte(map, slot, libc::F_WRLCK) {
                Ok(true) => {}
                failed => {
                    let _ = lock_byte(map, slot, libc::F_UNLCK);
                    return Err(failed.err().unwrap_or(SemError::Invalid));
                }
            }
            map.word(layout.proc(slot, proc_slot::PID))
                .store(current_pid() as u32, Ordering::Relaxed);
            let me = Me { slot, gen };
            if let Some(entry) = self.entry(map) {
                entry.claiming = Some(me);
            }
            return Ok(me);
        }
        Err(SemError::NoSpace)
    }

    /// Makes a claimed and adopted slot this process's.
    pub(super) fn publish(&mut self, map: &Arc<Mapping>, me: Me) {
        if let Some(entry) = self.entry(map) {
            entry.me = Some(me);
            entry.claiming = None;
        }
    }

    /// Whether the owner of `slot` is dead, taking its liveness lock if so:
    /// the caller, holding the set's lock, then clears the slot and calls
    /// [`Registry::unlock_dead`]. Never true for this process's own slot.
    pub(super) fn lock_if_dead(&mut self, map: &Arc<Mapping>, slot: usize) -> bool {
        let claiming = self.entry(map).and_then(|e| e.claiming);
        if self.me(map).or(claiming).is_some_and(|me| me.slot == slot) {
            return false;
        }
        #[cfg(test)]
        super::test_counts::count(super::test_counts::Count::Probes);
        lock_byte(map, slot, libc::F_WRLCK).unwrap_or(false)
    }

    /// Drops the liveness lock [`Registry::lock_if_dead`] took.
    pub(super) fn unlock_dead(&mut self, map: &Arc<Mapping>, slot: usize) {
        let _ = lock_byte(map, slot, libc::F_UNLCK);
    }
}

/// Whether process slot `slot` (below [`NPROC`]) is live and still holds
/// incarnation `gen`: what a sleeper or a lock word naming `(slot, gen)`
/// needs for its process to be the slot's holder, not a predecessor whose
/// slot was freed or taken by a later process. Whether that holder is
/// alive is [`is_alive`]'s question.
pub(super) fn holds_incarnation(map: &Mapping, slot: usize, gen: u32) -> bool {
    let layout = map.layout;
    map.load(layout.proc(slot, proc_slot::STATE)) == SLOT_LIVE
        && map.load(layout.proc(slot, proc_slot::GEN)) & GEN_MASK == gen
}

/// Whether incarnation `gen` of process slot `slot` (below [`NPROC`]) is
/// current and its process alive: [`holds_incarnation`], then
/// [`is_alive`], then the incarnation again. A claimer starts the new
/// incarnation before it takes the write lock ([`Registry::claim`]), so a
/// write lock seen with the incarnation unchanged afterwards is the old
/// owner's. The caller never asks about its own process's slot.
pub(super) fn incarnation_alive(map: &Mapping, slot: usize, gen: u32) -> bool {
    holds_incarnation(map, slot, gen) && is_alive(map, slot) && holds_incarnation(map, slot, gen)
}

/// Whether a live process holds slot `slot`'s write lock, without taking
/// anything; false for a slot nobody holds, or one a claimer is taking
/// over (a read lock: its previous owner is dead). Only
/// [`incarnation_alive`] says which incarnation lives. The caller never
/// asks about its own process's slot.
pub(super) fn is_alive(map: &Mapping, slot: usize) -> bool {
    let mut fl = flock(LIVENESS_BASE + slot as i64, libc::F_WRLCK);
    // SAFETY: a valid descriptor and a valid flock.
    let rc = unsafe { libc::fcntl(map.fd(), libc::F_GETLK, &mut fl) };
    // If the test itself fails, assume alive: waiting longer is safe,
    // taking over a live holder's lock is not.
    rc != 0 || fl.l_type == libc::F_WRLCK as libc::c_short
}

/// The byte whose lock a claimer holds while it takes a slot: claimers of
/// one set take turns.
const CLAIM_BYTE: i64 = LIVENESS_BASE - 1;

/// The set's claim lock, held; released on drop (or by the kernel, if the
/// claimer dies).
pub(super) struct ClaimLock<'a>(&'a Mapping);

impl<'a> ClaimLock<'a> {
    /// Waits for the set's other claimers, a few system calls each, and
    /// returns the set's claim lock for [`Registry::claim`]. Taken before
    /// the registry's lock, never under it: a claimer stopped (`SIGSTOP`, a
    /// debugger) while it holds the claim lock makes this wait, and the
    /// registry's lock must stay free meanwhile for the process's other
    /// sets, its reaps and its `fork`s.
    pub(super) fn take(map: &'a Mapping) -> Result<ClaimLock<'a>, SemError> {
        let fl = flock(CLAIM_BYTE, libc::F_WRLCK);
        loop {
            // SAFETY: a valid descriptor and a valid flock. The raw system
            // call: glibc's fcntl makes F_SETLKW a cancellation point, which
            // no System V call is.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_fcntl,
                    map.fd(),
                    libc::F_SETLKW,
                    &fl as *const libc::flock,
                )
            };
            if rc == 0 {
                return Ok(ClaimLock(map));
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOLCK) => return Err(SemError::NoSpace),
                _ => return Err(SemError::Invalid),
            }
        }
    }
}

impl Drop for ClaimLock<'_> {
    fn drop(&mut self) {
        let fl = flock(CLAIM_BYTE, libc::F_UNLCK);
        // SAFETY: a valid descriptor and a valid flock.
        unsafe { libc::fcntl(self.0.fd(), libc::F_SETLK, &fl) };
    }
}

fn flock(byte: i64, kind: i32) -> libc::flock {
    // SAFETY: plain old data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = byte;
    fl.l_len = 1;
    fl
}

/// Takes (`F_RDLCK`, `F_WRLCK`) or drops (`F_UNLCK`) slot `slot`'s liveness
/// lock without waiting; `Ok(false)` when another process holds it.
fn lock_byte(map: &Mapping, slot: usize, kind: i32) -> Result<bool, SemError> {
    let fl = flock(LIVENESS_BASE + slot as i64, kind);
    // SAFETY: a valid descriptor and a valid flock.
    let rc = unsafe { libc::fcntl(map.fd(), libc::F_SETLK, &fl) };
    if rc == 0 {
        return Ok(true);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        Some(libc::ENOLCK) => Err(SemError::NoSpace),
        _ => Err(SemError::Invalid),
    }
}
