//! This process's open handles on shared sets, by id: what turns the `semid`
//! of every `semop` into a [`SharedSemSet`] without touching the file system.
//!
//! Two levels, so that the `semop` path reads only memory no other thread
//! writes:
//!
//! * **the process's table**, `id -> Arc<SharedSemSet>`, behind a reader-
//!   writer lock: filled by `semget` and by the first call naming an id
//!   (`SharedSemSet::open_id`), emptied of an id when its set is found
//!   removed;
//! * **each thread's recent sets**, a few slots indexed by id, each stamped
//!   with the process-wide *epoch* it was filled in. Removing an id from the
//!   table bumps the epoch, which makes every thread's slots stale at once;
//!   a hit costs one thread-local access and one load of the epoch, with no
//!   atomic read-modify-write and no lock.
//!
//! A stale slot keeps its `Arc` (and so the set's mapping) until the slot is
//! refilled or the thread exits; nothing is ever freed under a reader.
//!
//! Locks and `fork`: the table's lock is held only to look up, insert or
//! remove one entry, but a `fork` that caught another thread in that window
//! would leave the child, where that thread does not exist, waiting for ever
//! on its first call that misses its slots (as `fork` in a threaded server
//! may, while a thread opens a set). So `fork` takes the lock first and
//! releases it on both sides (`pthread_atfork`); the per-thread slots need
//! no lock.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once, RwLock, RwLockReadGuard, RwLockWriteGuard};

use ksync::sem::{SemError, SharedSemSet};

type Table = BTreeMap<i32, Arc<SharedSemSet>>;

/// The process's table (a `BTreeMap` because its constructor is `const`).
static TABLE: RwLock<Table> = RwLock::new(BTreeMap::new());

/// Bumped after every removal from [`TABLE`]: a thread's slot filled in an
/// older epoch may name a set this process no longer answers for.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// Slots per thread: enough for a program that alternates a few sets.
const SLOTS: usize = 4;

struct Recent {
    id: i32,
    epoch: u64,
    set: Arc<SharedSemSet>,
}

impl Recent {
    /// Whether this slot answers for `id` in `epoch`, the process-wide
    /// epoch read before the slot: filled since the last removal from the
    /// table, for that id.
    fn names(&self, id: i32, epoch: u64) -> bool {
        self.id == id && self.epoch == epoch
    }
}

thread_local! {
    static RECENT: RefCell<[Option<Recent>; SLOTS]> =
        const { RefCell::new([None, None, None, None]) };
}

fn slot_of(id: i32) -> usize {
    // Ids are random (2^30 .. 2^31): their low bits spread well enough.
    id as u32 as usize % SLOTS
}

// A panic elsewhere while holding the lock leaves the map itself sound (each
// change is one insert or remove), so a poisoned lock is used as it is.
fn read() -> RwLockReadGuard<'static, Table> {
    hold_across_fork();
    TABLE.read().unwrap_or_else(|p| p.into_inner())
}

fn write() -> RwLockWriteGuard<'static, Table> {
    hold_across_fork();
    TABLE.write().unwrap_or_else(|p| p.into_inner())
}

/// Makes every `fork` take the table's lock first and release it on both
/// sides, so no child copies it taken (the module's documentation).
fn hold_across_fork() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers plain functions, which take the table's lock in
        // the forking thread (the library never forks, so that thread holds
        // no lock of ours) and release it on both sides.
        unsafe {
            libc::pthread_atfork(
                Some(take_for_fork),
                Some(release_after_fork),
                Some(release_after_fork),
            )
        };
    });
}

thread_local! {
    /// The table's lock, held by the forking thread across its `fork`.
    static HELD_FOR_FORK: RefCell<Option<RwLockWriteGuard<'static, Table>>> =
        const { RefCell::new(None) };
}

extern "C" fn take_for_fork() {
    let guard = TABLE.write().unwrap_or_else(|p| p.into_inner());
    let _ = HELD_FOR_FORK.try_with(|held| *held.borrow_mut() = Some(guard));
}

extern "C" fn release_after_fork() {
    let _ = HELD_FOR_FORK.try_with(|held| drop(held.borrow_mut().take()));
}

/// The handle for `id` from the table, opening the set if this process has
/// not yet: `NotFound`, `Removed`, `Access`, ... as `open_id` says.
fn lookup(id: i32) -> Result<Arc<SharedSemSet>, SemError> {
    if let Some(set) = read().get(&id) {
        return Ok(Arc::clone(set));
    }
    let opened = Arc::new(SharedSemSet::open_id(id)?);
    Ok(insert(opened))
}

/// Puts `set` in the table unless a live handle for its id is there
/// already; returns the handle the table keeps.
fn insert(set: Arc<SharedSemSet>) -> Arc<SharedSemSet> {
    let id = set.id();
    let mut table = write();
    match table.get(&id) {
        Some(kept) if !kept.is_removed() => Arc::clone(kept),
        _ => {
            let replaced = table.insert(id, Arc::clone(&set));
            drop(table);
            if replaced.is_some() {
                EPOCH.fetch_add(1, Ordering::Release);
            }
            // Dropped outside the table's lock, as in `forget`: the last
            // handle's drop takes the process registry's lock, and `fork`
            // takes the two in the order their handlers were registered.
            drop(replaced);
            set
        }
    }
}

/// Keeps a set `semget` opened or created, so that its id is found at once.
pub fn remember(set: SharedSemSet) {
    insert(Arc::new(set));
}

/// Forgets `id`: its set was removed, and the id now means no set.
pub fn forget(id: i32) {
    let gone = write().remove(&id);
    if gone.is_some() {
        // After the removal: a thread that read the old epoch and then
        // missed the id in the table does not keep a slot for it either.
        EPOCH.fetch_add(1, Ordering::Release);
    }
    // `gone` (the last handle but the threads' stale slots) is dropped here,
    // outside the lock: dropping a handle may unmap the set.
}

/// Runs `f` on the set with id `id`, from this thread's recent sets when it
/// is there, else from the table (opening the set if need be).
///
/// `f` may block (a sleeping `semop`); a call that re-enters meanwhile on
/// this thread, from a signal handler, finds the slots busy and goes to the
/// table instead.
pub fn with<R>(id: i32, f: impl FnOnce(&SharedSemSet) -> R) -> Result<R, SemError> {
    let mut f = Some(f);
    let mut result = None;
    let _ = RECENT.try_with(|cell| {
        let Ok(mut slots) = cell.try_borrow_mut() else {
            return;
        };
        let slot = &mut slots[slot_of(id)];
        // Read before the table: see `forget`.
        let epoch = EPOCH.load(Ordering::Acquire);
        if !slot.as_ref().is_some_and(|r| r.names(id, epoch)) {
            match lookup(id) {
                Ok(set) => *slot = Some(Recent { id, epoch, set }),
                Err(e) => {
                    result = Some(Err(e));
                    return;
                }
            }
        }
        if let (Some(recent), Some(f)) = (slot.as_ref(), f.take()) {
            result = Some(Ok(f(&recent.set)));
        }
    });
    match (result, f) {
        (Some(done), _) => done,
        // The thread's slots are gone (thread exit) or busy (re-entered).
        (None, Some(f)) => lookup(id).map(|set| f(&set)),
        // `f` was taken only where `result` was set.
        (None, None) => Err(SemError::Invalid),
    }
}

/// Runs `f` on the set with id `id` if this thread's recent sets hold it,
/// current: `None` otherwise, with nothing done. Unlike [`with`] it never
/// goes to the table, whose lock may wait and whose misses open files: the
/// call that tries this first must not reach a cancellation point.
#[inline]
pub fn with_recent<R>(id: i32, f: impl FnOnce(&SharedSemSet) -> R) -> Option<R> {
    RECENT
        .try_with(|cell| {
            let slots = cell.try_borrow().ok()?;
            let epoch = EPOCH.load(Ordering::Acquire);
            let recent = slots[slot_of(id)].as_ref()?;
            recent.names(id, epoch).then(|| f(&recent.set))
        })
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ksync::sem::{IPC_CREAT, IPC_PRIVATE};
    use std::sync::mpsc::channel;

    #[test]
    fn a_set_is_found_until_forgotten_then_reopened_or_gone() {
        let set = SharedSemSet::open(IPC_PRIVATE, 2, IPC_CREAT | 0o600).unwrap();
        let id = set.id();
        remember(set);
        assert_eq!(with(id, |s| s.nsems()), Ok(2));
        // Forgetting drops only this process's handle: the set still
        // exists, so the next call opens its file again.
        forget(id);
        assert_eq!(with(id, |s| s.nsems()), Ok(2));
        with(id, |s| s.remove()).unwrap().unwrap();
        forget(id);
        assert_eq!(with(id, |_| ()).unwrap_err(), SemError::NotFound);
    }

    #[test]
    fn another_threads_slot_is_stale_after_a_forget() {
        let set = SharedSemSet::open(IPC_PRIVATE, 1, IPC_CREAT | 0o600).unwrap();
        let id = set.id();
        remember(set);
        let (to_main, from_thread) = channel();
        let (to_thread, from_main) = channel::<()>();
        let thread = std::thread::spawn(move || {
            to_main.send(with(id, |s| s.id())).unwrap();
            from_main.recv().unwrap();
            with(id, |_| ())
        });
        assert_eq!(from_thread.recv().unwrap(), Ok(id));
        // Removed behind the cache's back, as by another process, then
        // forgotten: the thread's slot, filled before, must not answer.
        SharedSemSet::open_id(id).unwrap().remove().unwrap();
        forget(id);
        to_thread.send(()).unwrap();
        assert_eq!(thread.join().unwrap().unwrap_err(), SemError::NotFound);
    }

    /// A thread holds the table's lock while another forks: the child must
    /// still be able to take it (the fork waits for the holder). A child
    /// that copied the lock taken waits for ever; the parent gives it ten
    /// seconds.
    #[test]
    fn a_fork_does_not_copy_the_tables_lock_taken() {
        use std::time::{Duration, Instant};
        drop(read());
        let (held, holding) = channel();
        let holder = std::thread::spawn(move || {
            let table = write();
            held.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            drop(table);
        });
        holding.recv().unwrap();
        // SAFETY: the child only takes and drops the table's lock (futex
        // operations, no allocation) and leaves with _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
        if child == 0 {
            drop(read());
            // SAFETY: leaves at once, running nothing of the parent's.
            unsafe { libc::_exit(0) };
        }
        holder.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut status = 0;
        loop {
            // SAFETY: our own child; `status` is ours.
            let done = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
            if done == child {
                break;
            }
            if Instant::now() > deadline {
                // SAFETY: our own child, not yet reaped.
                unsafe {
                    libc::kill(child, libc::SIGKILL);
                    libc::waitpid(child, &mut status, 0);
                }
                panic!("the child waited for a table lock its parent's thread held");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
}
