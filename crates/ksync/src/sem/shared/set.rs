//! [`SharedSemSet`]: a set in a shared file, opened by key like `semget`,
//! with the `semop` and `semctl` calls of [`SemSet`](crate::sem::SemSet).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::dir::{self, cstr, ensure_dir, errno, os_error, SEMMNI};
use super::engine::{count_live_sleepers_in, sweep_due, touch_otime, Locked};
use super::eval::{adjustment, evaluate, value, Outcome};
use super::layout::{
    header, proc_slot, sem_word, sleeper, Layout, APPOINTED, MAGIC, NPROC, NSLEEP, READY, REMOVED,
    SLEEPER_FREE, SLOT_LIVE, VERSION, WAITING,
};
use super::map::Mapping;
use super::privilege::{capable, CAP_IPC_OWNER, CAP_SYS_ADMIN};
use super::procs::{registry, ClaimLock, Me};
use super::share;
use super::wake::Change;
use crate::futex::{wait_shared, wake_shared};
use crate::sem::counters::Counters;
use crate::sem::error::check_num;
use crate::sem::queue::{learn, poll_before_queueing, spin_budget, wait_ended, Look, Polled};
use crate::sem::sleep_watch::Nap;
use crate::sem::stamp::{current_pid, now_secs, system_time};
use crate::sem::{SemBuf, SemCounters, SemError, IPC_NOWAIT, SEMMSL, SEMOPM, SEMVMX, SEM_UNDO};
use crate::sync::Ordering;

/// `semget` key for a set no other call can find by key.
pub const IPC_PRIVATE: i32 = 0;
/// `semget` flag: create the set if the key has none.
pub const IPC_CREAT: i32 = 0o1000;
/// `semget` flag, with [`IPC_CREAT`]: fail with `EEXIST` if the key has a set.
pub const IPC_EXCL: i32 = 0o2000;

/// How often a timed sleeper (each of a few, or a process's watch among
/// many: `crate::sem::sleep_watch`) looks for dead processes whose undo
/// could wake a sleeper, and for a waker that died before waking one.
const SLEEPER_POLL: Duration = Duration::from_millis(100);

/// How many sleepers of one process must sleep in a set before they sleep
/// without a timeout (but for their watch); `u32::MAX` until first read
/// from `KSYNC_UNTIMED_CROWD` or the default.
static UNTIMED_CROWD: AtomicU32 = AtomicU32::new(u32::MAX);

/// Sets how many sleepers of one process must sleep in a shared set before
/// all but one of them (the process's watch) sleep without a timeout, for
/// every shared set in this process; the default is 16, or
/// `KSYNC_UNTIMED_CROWD` from the environment. A sleeper with a timeout
/// wakes every 100 ms while nothing else wakes it, so an idle set with
/// many sleepers wakes far less without; but a watch that returns wakes
/// another sleeper to take its place, which comes often when few sleep.
/// (A sleeper without a timeout still arms a kernel timer, one that never
/// expires, so that a signal handler ends its call with `EINTR`.) 1 makes
/// every sleeper but the watch untimed (the tests
/// use it to run the untimed path with few threads); `u32::MAX - 1` keeps
/// every sleeper timed.
///
/// ```
/// ksync::sem::shared::set_untimed_crowd(32);
/// ```
pub fn set_untimed_crowd(sleepers: u32) {
    UNTIMED_CROWD.store(sleepers.min(u32::MAX - 1), Ordering::Relaxed);
}

/// [`set_untimed_crowd`]'s value.
fn untimed_crowd() -> u32 {
    let crowd = UNTIMED_CROWD.load(Ordering::Relaxed);
    if crowd != u32::MAX {
        return crowd;
    }
    let from_env = std::env::var("KSYNC_UNTIMED_CROWD")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(crate::sem::sleep_watch::CROWD);
    set_untimed_crowd(from_env);
    from_env.min(u32::MAX - 1)
}

/// A sleeper registered with its process's watch (`crate::sem::sleep_watch`)
/// until it leaves: explicitly before it returns, which a watch must do
/// before its slot can be reused, or on drop, for the error paths.
struct Asleep<'a> {
    map: &'a Mapping,
    slot: usize,
    left: core::cell::Cell<bool>,
}

impl<'a> Asleep<'a> {
    fn enter(map: &'a Mapping, slot: usize) -> Asleep<'a> {
        map.watch.enter();
        Asleep {
            map,
            slot,
            left: core::cell::Cell::new(false),
        }
    }

    /// Unregisters; a watch hands its role to another sleeper of this
    /// process, which it tells through its status word and wakes.
    fn leave(&self) {
        if self.left.replace(true) {
            return;
        }
        let layout = self.map.layout;
        let status = |slot| self.map.word(layout.sleeper(slot, sleeper::STATUS));
        // The queue's newest sleeper, if it is this process's, is likely
        // to sleep longest: each hand-over costs a wake-up.
        let newest = || (self.map.load(header::QUEUE_TAIL) as usize).checked_sub(1);
        let appointed = self.map.watch.leave(self.slot, newest, |next| {
            // Relaxed: the futex wait that reads it, and the wake below,
            // order it; a waker's release store of READY overwrites it, or
            // fails it, and the wake below goes out all the same (a
            // successor whose result is in may have lost its wake-up).
            let _ = status(next).compare_exchange(
                WAITING,
                APPOINTED,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        });
        if let Some(next) = appointed {
            wake_shared(status(next), 1);
            Counters::add(&self.map.counters.outside.wake_calls, 1);
        }
    }
}

impl Drop for Asleep<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}

/// What `IPC_STAT` reports for a shared set (`struct semid_ds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedSemStat {
    /// The key it was created with ([`IPC_PRIVATE`] for none).
    pub key: i32,
    /// Owner's user and group id.
    pub uid: u32,
    /// Owner's group id.
    pub gid: u32,
    /// Creator's user id.
    pub cuid: u32,
    /// Creator's group id.
    pub cgid: u32,
    /// The low nine bits of `sem_perm.mode`.
    pub mode: u32,
    /// Number of semaphores.
    pub nsems: usize,
    /// Time of the last successful `semop`, `None` if there was none.
    pub otime: Option<SystemTime>,
    /// Time of creation or of the last `SETVAL`, `SETALL` or `IPC_SET`.
    pub ctime: SystemTime,
}

/// How often a set recovered from a process that died in it, since it was
/// created ([`SharedSemSet::recovery_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Times the set's lock was taken over from a dead holder.
    pub takeovers: u32,
    /// Of those, times the holder died inside a transaction, which was rolled back.
    pub rollbacks: u32,
    /// Dead processes whose sleepers and undo adjustments were adopted.
    pub reaped: u32,
    /// Sleepers the periodic sweep (every 100 ms) completed or woke because
    /// no waker had: a waker died half way, or, with every process alive, a
    /// wake-up was lost (a sleeper the sweep found asleep on its result
    /// after every wake-up owed to it was made counts too). 0 in a healthy
    /// set whose processes all live.
    pub swept: u32,
    /// Wake-ups owed to sleepers whose results were published, and not
    /// made yet (wrapping). 0 whenever no waker is between publishing a
    /// result and waking its sleeper, unless a process died there; with
    /// every process alive and none of them in a call, anything else is a
    /// wake-up a waker forgot.
    pub wakes_owed: u32,
}

/// A process with undo adjustments in a set ([`SharedSemSet::undo_holders`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UndoHolder {
    /// The process.
    pub pid: i32,
    /// `(semaphore, adjustment)`: what its exit adds to each value.
    pub adjustments: Vec<(usize, i32)>,
}

/// The credentials a set's permissions are checked against.
struct Creds {
    euid: u32,
    egid: u32,
    groups: Vec<u32>,
}

impl Creds {
    fn current() -> Creds {
        // SAFETY: plain system calls; getgroups fills at most `n` entries.
        unsafe {
            let n = libc::getgroups(0, std::ptr::null_mut()).max(0) as usize;
            let mut groups = vec![0 as libc::gid_t; n];
            let got = libc::getgroups(n as i32, groups.as_mut_ptr()).max(0) as usize;
            groups.truncate(got);
            Creds {
                euid: libc::geteuid(),
                egid: libc::getegid(),
                groups,
            }
        }
    }

    fn in_group(&self, gid: u32) -> bool {
        self.egid == gid || self.groups.contains(&gid)
    }

    fn is_owner(&self, map: &Mapping) -> bool {
        self.euid == map.load(header::UID) || self.euid == map.load(header::CUID)
    }

    /// The three `rwx` bits the set's mode grants these credentials.
    fn granted(&self, map: &Mapping) -> u32 {
        let (gid, cgid) = (map.load(header::GID), map.load(header::CGID));
        class_bits(
            map.load(header::MODE),
            self.is_owner(map),
            self.in_group(gid) || self.in_group(cgid),
        )
    }
}

/// The three `rwx` bits of `mode` for a caller's class (the kernel's
/// `ipcperms`): the owner's for an owner or creator, else the group's for
/// a member of the set's group or creator's group, else the others'.
fn class_bits(mode: u32, owner: bool, in_group: bool) -> u32 {
    if owner {
        (mode >> 6) & 7
    } else if in_group {
        (mode >> 3) & 7
    } else {
        mode & 7
    }
}

/// Whether `granted` (three `rwx` bits) covers what `flag` asks: every
/// `rwx` bit of its nine mode bits, for any class (the kernel's
/// `ipcperms`; a caller with `CAP_IPC_OWNER` is not asked).
fn grants(granted: u32, flag: i32) -> bool {
    let requested = ((flag >> 6) | (flag >> 3) | flag) as u32 & 7;
    requested & !granted == 0
}

/// What [`SharedSemSet::get`] found: a set this process opened, or one
/// whose file's mode shuts it out.
#[derive(Debug)]
pub enum Got {
    /// The set, open.
    Open(SharedSemSet),
    /// A set this process may not open ([`SealedSemSet`]).
    Sealed(SealedSemSet),
}

impl Got {
    /// The set's id.
    pub fn id(&self) -> i32 {
        match self {
            Got::Open(set) => set.id(),
            Got::Sealed(sealed) => sealed.id(),
        }
    }

    fn nsems(&self) -> usize {
        match self {
            Got::Open(set) => set.nsems(),
            Got::Sealed(sealed) => sealed.nsems(),
        }
    }

    fn permits(&self, flag: i32) -> bool {
        match self {
            Got::Open(set) => set.permits(flag),
            Got::Sealed(sealed) => sealed.permits(flag),
        }
    }
}

/// A set whose file this process may not read (nor so map): the file's
/// mode, which is the set's for the group and others (`dir::file_mode`),
/// shuts it out. Its header is out of reach, but what the kernel checks
/// before (or instead of) the rights a call needs can be read from the
/// file's attributes, which `stat` gives without any right on the file:
/// the number of semaphores from its length, the group and the mode.
///
/// The file's owner is never shut out (its owner bits are always read and
/// write: `dir::file_mode`), so the caller is not the owner the file
/// names: every right it has comes from the group or other bits, which the
/// file shares with the set, and an `IPC_SET` or `IPC_RMID` is refused
/// with `EPERM` (see the module's list of differences for an owner or
/// creator the file does not name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealedSemSet {
    id: i32,
    nsems: usize,
    gid: u32,
    mode: u32,
}

impl SealedSemSet {
    /// What the attributes of set `id`'s file say: `ENOENT` if there is no
    /// such file, `EINVAL` if its length fits no set.
    pub fn of(id: i32) -> Result<SealedSemSet, SemError> {
        let (gid, mode, bytes) =
            dir::file_attributes(&dir::sem_dir(), id)?.ok_or(SemError::NotFound)?;
        let nsems = Layout::nsems_of_bytes(bytes).ok_or(SemError::Invalid)?;
        Ok(SealedSemSet {
            id,
            nsems,
            gid,
            mode,
        })
    }

    /// The set's id.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Number of semaphores in the set.
    pub fn nsems(&self) -> usize {
        self.nsems
    }

    /// Whether the set's mode grants the caller `flag`'s rights (the
    /// kernel's `ipcperms`, with the group or other bits, which the file
    /// carries, or `CAP_IPC_OWNER`): what `semget` checks.
    pub fn permits(&self, flag: i32) -> bool {
        let creds = Creds::current();
        grants(class_bits(self.mode, false, creds.in_group(self.gid)), flag)
            || capable(CAP_IPC_OWNER)
    }

    /// The answer to a call that needs read (`alter == false`) or alter
    /// permission: always `EACCES`. Where the mode refuses the right, it is
    /// the kernel's answer; where it grants alter but not read, the kernel
    /// would go on, but a file this process may not read cannot be mapped
    /// (see the module's list of differences).
    pub fn check_access(&self, _alter: bool) -> Result<(), SemError> {
        Err(SemError::Access)
    }

    /// `IPC_SET` and `IPC_RMID`'s check, which goes by ownership, not by
    /// mode: `EPERM`, since the file's owner is never shut out. A caller
    /// with `CAP_SYS_ADMIN`, which the kernel lets through, gets `EACCES`:
    /// the change needs the file open for writing (see the module's list
    /// of differences).
    pub fn owner_only(&self) -> Result<(), SemError> {
        if capable(CAP_SYS_ADMIN) {
            Err(SemError::Access)
        } else {
            Err(SemError::Permission)
        }
    }
}

/// How often a read-only handle's `GETNCNT`/`GETZCNT` walks the queue again
/// after meeting it half changed, before it calls the file corrupt.
const UNLOCKED_WALKS: usize = 16;

/// Read permission, for `IPC_STAT` and the `GET` commands.
const READ: i32 = 0o444;
/// Alter permission, for operations that change values and `SET` commands.
const ALTER: i32 = 0o222;

/// A process-shared System V semaphore set: any process that opens its key
/// (or id) sees the same set, with the kernel's `semget`, `semop` and
/// `semctl` semantics, including `SEM_UNDO` adjustments that belong to the
/// process and are applied when it dies, however it dies.
///
/// ```
/// use ksync::sem::{SemBuf, SharedSemSet, IPC_CREAT, IPC_PRIVATE, SEM_UNDO};
/// # let dir = std::env::temp_dir().join(format!("ksync-doc-{}", std::process::id()));
/// # std::env::set_var("KSYNC_SEM_DIR", &dir);
///
/// let set = SharedSemSet::open(IPC_PRIVATE, 1, IPC_CREAT | 0o600)?;
/// set.semop(&[SemBuf::new(0, 1, SEM_UNDO)])?;
/// assert_eq!(set.get_value(0)?, 1);
/// // Another process would find it with SharedSemSet::open_id(set.id()).
/// set.remove()?;
/// # let _ = std::fs::remove_dir(&dir);
/// # Ok::<(), ksync::sem::SemError>(())
/// ```
pub struct SharedSemSet {
    pub(super) map: Arc<Mapping>,
    id: i32,
    /// This process's slot, cached: `pid << 32 | owner word + 1`, 0 if none.
    me: AtomicU64,
    /// The caller's rights, cached: `perm generation << 32 | pid << 5 |
    /// RIGHTS_VALID | RIGHTS_PRIVILEGED (CAP_IPC_OWNER) | rwx bits
    /// granted`, for the process that computed them; recomputed after
    /// `IPC_SET` (which moves the generation on) and in a `fork` child
    /// (which may drop its privileges before it uses an inherited handle),
    /// so a call costs no system call for the credentials or capabilities.
    rights: AtomicU64,
}

const RIGHTS_PRIVILEGED: u64 = 1 << 3;
const RIGHTS_VALID: u64 = 1 << 4;
const RIGHTS_PID_SHIFT: u32 = 5;
/// Linux pids fit in 22 bits (`pid_max` is at most 2^22).
const RIGHTS_PID_MASK: u64 = (1 << 22) - 1;

impl SharedSemSet {
    /// `semget(key, nsems, flags)`: the set bound to `key`, created with mode
    /// `flags & 0o777` if there is none and `flags` has [`IPC_CREAT`];
    /// [`IPC_PRIVATE`] always creates a new set. Errors in the kernel's
    /// order: `EINVAL` for `nsems` above [`SEMMSL`] (or 0 when creating, or
    /// above an existing set's size), `EEXIST`, `ENOENT`, `EACCES`, `ENOSPC`
    /// when [`SEMMNI`] sets exist.
    ///
    /// A handle needs the set's file open: where [`get`](Self::get) finds
    /// a set whose file's mode shuts this process out, `open` answers
    /// `EACCES`, after the checks the kernel makes first.
    pub fn open(key: i32, nsems: usize, flags: i32) -> Result<SharedSemSet, SemError> {
        match SharedSemSet::get(key, nsems, flags)? {
            Got::Open(set) => Ok(set),
            Got::Sealed(_) => Err(SemError::Access),
        }
    }

    /// `semget(key, nsems, flags)` exactly as the kernel answers it, for a
    /// caller that needs only the id: as [`open`](Self::open), but a set
    /// whose file this process may not open is found too
    /// ([`Got::Sealed`]), and refused only for the rights `flags` asks for,
    /// after `EEXIST` and `EINVAL`, which the kernel checks first.
    pub fn get(key: i32, nsems: usize, flags: i32) -> Result<Got, SemError> {
        if nsems > SEMMSL {
            return Err(SemError::Invalid);
        }
        let dir = ensure_dir()?;
        // Each round either returns or lost a race (a key bound or unbound
        // meanwhile); a handful of rounds only matter under a storm of them.
        for _ in 0..64 {
            if key != IPC_PRIVATE {
                if let Some(id) = dir::id_of_key(&dir, key)? {
                    let found = match SharedSemSet::open_id(id) {
                        Ok(set) => Ok(Got::Open(set)),
                        Err(SemError::Access) => SealedSemSet::of(id).map(Got::Sealed),
                        Err(e) => Err(e),
                    };
                    let got = match found {
                        Ok(got) => got,
                        Err(SemError::NotFound) | Err(SemError::Removed) => {
                            dir::unbind_key(&dir, key, id);
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    // The kernel's order (`ipcget_public`, `sem_more_checks`,
                    // `ipcperms`): only the rights the flags name are checked.
                    if flags & IPC_CREAT != 0 && flags & IPC_EXCL != 0 {
                        return Err(SemError::Exists);
                    }
                    if nsems > got.nsems() {
                        return Err(SemError::Invalid);
                    }
                    if !got.permits(flags & 0o777) {
                        return Err(SemError::Access);
                    }
                    return Ok(got);
                }
                if flags & IPC_CREAT == 0 {
                    return Err(SemError::NotFound);
                }
            }
            if nsems == 0 {
                return Err(SemError::Invalid);
            }
            match create(&dir, key, nsems, (flags & 0o777) as u32) {
                Err(SemError::Exists) if key != IPC_PRIVATE => continue,
                other => return other.map(Got::Open),
            }
        }
        Err(SemError::NoSpace)
    }

    /// The set with id `id` (as [`id`](Self::id) returned in any process):
    /// `ENOENT` if there is none (a removed set's file is gone at once),
    /// `EIDRM` if it is being removed, `EINVAL` if the file is not a set.
    pub fn open_id(id: i32) -> Result<SharedSemSet, SemError> {
        let dir = dir::sem_dir();
        let path = dir::set_path(&dir, id);
        let mut reg = registry();
        // One descriptor per file per process (`procs.rs`): look before opening.
        let found = std::fs::metadata(&path).ok().and_then(|meta| {
            use std::os::unix::fs::MetadataExt;
            reg.find(meta.dev(), meta.ino())
        });
        let map = match found {
            Some(map) => map,
            None => {
                let (fd, writable) = dir::open_file(&dir, id)?.ok_or(SemError::NotFound)?;
                reg.insert(Mapping::new(fd, writable)?)
            }
        };
        // Not under the registry: a refused handle's drop takes it.
        drop(reg);
        let opened = SharedSemSet::from_map(Arc::clone(&map), id);
        if opened.as_ref().err() == Some(&SemError::Removed) {
            unlink_removed(&map, &path);
        }
        opened
    }

    fn from_map(map: Arc<Mapping>, id: i32) -> Result<SharedSemSet, SemError> {
        if map.load(header::ID) as i32 != id {
            return Err(SemError::Invalid);
        }
        let set = SharedSemSet {
            map,
            id,
            me: AtomicU64::new(0),
            rights: AtomicU64::new(0),
        };
        if set.is_removed() {
            return Err(SemError::Removed);
        }
        Ok(set)
    }

    /// The set's id: the same in every process, and its file's name.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// The key the set was created with ([`IPC_PRIVATE`] for none).
    pub fn key(&self) -> i32 {
        self.map.load(header::KEY) as i32
    }

    /// Number of semaphores in the set.
    pub fn nsems(&self) -> usize {
        self.map.nsems()
    }

    /// Whether the set was removed (`IPC_RMID`, by any process): one load,
    /// for callers that answer a removed set differently before and during
    /// a call, as the kernel does (`EINVAL` for a stale id, `EIDRM` for a
    /// sleeper).
    #[inline]
    pub fn is_removed(&self) -> bool {
        self.map.load(header::FLAGS) & REMOVED != 0
    }

    /// Whether this process's mapping of the set is writable, reopening
    /// the file for writing first if an `IPC_SET` since the last try may
    /// have let it (`Mapping::reopen_writable`): a handle opened read-only
    /// gains the rights the set's new mode gives, as in the kernel, where
    /// rights are checked at each call.
    fn writable(&self) -> bool {
        self.map.writable() || self.map.reopen_writable(self.id)
    }

    /// Whether the caller's credentials grant `flag`'s access (read or
    /// alter): the mode bits for its class, or `CAP_IPC_OWNER`. The
    /// credentials and the capability are read once per handle and process,
    /// and again after an `IPC_SET`: a thread that changes its process's
    /// user id or capabilities afterwards keeps the rights it had through
    /// handles already used, as with an open file.
    fn permits(&self, flag: i32) -> bool {
        let gen = u64::from(self.map.load(header::PERM_GEN));
        let pid = u64::from(current_pid() as u32) & RIGHTS_PID_MASK;
        let mut rights = self.rights.load(Ordering::Relaxed);
        if rights & RIGHTS_VALID == 0
            || rights >> 32 != gen
            || (rights >> RIGHTS_PID_SHIFT) & RIGHTS_PID_MASK != pid
        {
            let granted = Creds::current().granted(&self.map);
            // The capability matters only for a bit the mode refuses, so a
            // caller the mode grants everything is not asked for it.
            let privileged = granted != 7 && capable(CAP_IPC_OWNER);
            rights = (gen << 32)
                | (pid << RIGHTS_PID_SHIFT)
                | RIGHTS_VALID
                | u64::from(granted)
                | if privileged { RIGHTS_PRIVILEGED } else { 0 };
            self.rights.store(rights, Ordering::Relaxed);
        }
        rights & RIGHTS_PRIVILEGED != 0 || grants((rights & 7) as u32, flag)
    }

    /// The permission check a call makes first: read (`alter == false`) or
    /// alter permission for the calling process, `EACCES` if missing,
    /// `EIDRM` if the set was removed. For callers that must check
    /// permission before arguments, in the kernel's order.
    pub fn check_access(&self, alter: bool) -> Result<(), SemError> {
        self.check(if alter { ALTER } else { READ })
    }

    fn check(&self, flag: i32) -> Result<(), SemError> {
        if self.map.poisoned() {
            return Err(SemError::Invalid);
        }
        if !self.permits(flag) || (flag == ALTER && !self.writable()) {
            return Err(SemError::Access);
        }
        if self.is_removed() {
            return Err(SemError::Removed);
        }
        Ok(())
    }

    /// This process's slot, claimed (and a dead predecessor's leftovers in
    /// it adopted) on first use and again after a `fork`.
    pub(super) fn me(&self) -> Result<Me, SemError> {
        let pid = current_pid();
        let cached = self.me.load(Ordering::Relaxed);
        if cached != 0 && (cached >> 32) as i32 == pid {
            let (slot, gen) = super::layout::split_owner((cached as u32) - 1);
            return Ok(Me { slot, gen });
        }
        if !self.writable() {
            return Err(SemError::Access);
        }
        // Lock order: this process's claim first; then the set's claim lock
        // (between processes) or the set's lock, never both; the registry
        // last.
        let _claiming = self.map.claiming.lock();
        let known = registry().me(&self.map);
        let me = match known {
            Some(me) => me,
            None => {
                // A fork child's copy of the watch names its parent's
                // sleepers; no thread of this process sleeps in the set
                // before it has a slot.
                self.map.watch.reset();
                self.map.reopen_if_closed(self.id)?;
                let turn = ClaimLock::take(&self.map)?;
                let me = registry().claim(&self.map, &turn)?;
                drop(turn);
                // A slot a dead process left: its exit, as `reap` does it.
                let mut held = Locked::enter(&self.map, me)?;
                if held.clear_slot(me.slot, SLOT_LIVE) {
                    held.smart_update(Change::All);
                }
                drop(held);
                registry().publish(&self.map, me);
                me
            }
        };
        self.me.store(
            (u64::from(pid as u32) << 32) | u64::from(me.owner() + 1),
            Ordering::Relaxed,
        );
        Ok(me)
    }

    /// Performs `sops` atomically, blocking until that is possible, like
    /// `semop(2)`. `SEM_UNDO` adjustments belong to this process.
    #[inline]
    pub fn semop(&self, sops: &[SemBuf]) -> Result<(), SemError> {
        self.semtimedop(sops, None)
    }

    /// [`semop`](Self::semop) with a timeout, like `semtimedop(2)`; `None`
    /// waits forever, and an expired timeout fails with `EAGAIN`.
    pub fn semtimedop(&self, sops: &[SemBuf], timeout: Option<Duration>) -> Result<(), SemError> {
        if sops.len() > SEMOPM {
            return Err(SemError::TooBig);
        }
        if sops.is_empty() {
            return Err(SemError::Invalid);
        }
        if sops.iter().any(|s| usize::from(s.num) >= self.nsems()) {
            return Err(SemError::FileTooBig);
        }
        let alter = sops.iter().any(|s| s.op != 0);
        let single = sops.len() == 1 && sops[0].flags & SEM_UNDO == 0 && alter;
        if single {
            if let Some(done) = self.try_fast(sops[0]) {
                return done;
            }
        }
        self.slow_op(sops, timeout, alter, single)
    }

    /// The lock-free part of [`semtimedop`](Self::semtimedop) for one
    /// operation: `true` when it did `sop` (what `semtimedop(&[sop], _)`
    /// would have done, whatever the timeout), `false` with nothing done
    /// when the call needs more (the lock, a sleep, an error, `SEM_UNDO`).
    ///
    /// It makes no system call that blocks or opens a file, none that
    /// glibc makes a cancellation point in particular: a caller that must
    /// not be one (a C library's `semop`, which disables cancellation around
    /// everything else) can try this first at no cost.
    #[inline]
    pub fn try_semop_lock_free(&self, sop: SemBuf) -> bool {
        usize::from(sop.num) < self.nsems()
            && sop.flags & SEM_UNDO == 0
            && sop.op != 0
            && matches!(self.try_fast(sop), Some(Ok(())))
    }

    /// Every call the lock-free compare-and-swap did not finish: a single
    /// operation polls first, then the locked path. Kept out of line so that
    /// the lock-free path stays small.
    #[inline(never)]
    fn slow_op(
        &self,
        sops: &[SemBuf],
        timeout: Option<Duration>,
        alter: bool,
        single: bool,
    ) -> Result<(), SemError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        // A decrement that may block polls its word before it queues; if it
        // spent its budget there, it sleeps at once once queued.
        let mut polled = false;
        if single
            && sops[0].op < 0
            && sops[0].flags & IPC_NOWAIT == 0
            && timeout != Some(Duration::ZERO)
        {
            match self.poll_fast(sops[0], deadline) {
                Polled::Done(done) => return done,
                Polled::Spent => polled = true,
                Polled::Queue => {}
            }
        }
        let result = self.locked_op(sops, timeout, deadline, alter, polled);
        self.unless_poisoned(result)
    }

    /// Polls a blocked single operation's word before it queues, for the
    /// budget this thread learned, and does the operation lock-free as soon
    /// as the value allows it; as the in-process sets do
    /// (`SetShared::poll_lock_free`), and for the same reason: a post that
    /// comes meanwhile is one compare-and-swap on both sides, without the
    /// set's lock. [`Polled::Spent`]: the budget ran out or the deadline
    /// passed; [`Polled::Queue`]: a sleeper queued first (whose turn comes
    /// first), the set was removed, or the caller may not alter it, and the
    /// locked path answers.
    fn poll_fast(&self, sop: SemBuf, deadline: Option<Instant>) -> Polled<Result<(), SemError>> {
        // The locked path has the answer for these; polling would not help.
        if self.is_removed() || !self.map.writable() || !self.permits(ALTER) {
            return Polled::Queue;
        }
        let word = self.map.word(self.map.layout.sem(usize::from(sop.num)));
        let polled = poll_before_queueing(deadline, || {
            let w = word.load(Ordering::Relaxed);
            if w & sem_word::SLEEPERS != 0 || self.is_removed() {
                return Look::Queue;
            }
            // Under LOCKED alone the lock holder works on the value (a post,
            // perhaps): wait it out. Otherwise try once the value allows it.
            let value = (w & sem_word::VALUE) as i32 + i32::from(sop.op);
            if w & sem_word::LOCKED == 0 && value >= 0 {
                // `try_fast` fails when the word changed under it (look
                // again) or the caller's rights did (rare: the locked path
                // answers after the budget).
                self.try_fast(sop).map_or(Look::Again, Look::Done)
            } else {
                Look::Again
            }
        });
        self.count_polls(polled)
    }

    /// Polls the words of a call of several operations the locked path
    /// found blocked ([`polls_before_queueing`]) for the budget this thread
    /// learned, until their values would let it through ([`Polled::Done`]:
    /// the caller takes the lock again at once), the budget runs out
    /// ([`Polled::Spent`]: it queues and sleeps at once), or a word shows a
    /// sleeper queued first or the set was removed ([`Polled::Queue`]).
    /// Only calls found blocked poll, so a call that meets the lock holder
    /// but never blocks waits for the lock, not in a poll. Without it such
    /// a call queued and slept even when the semaphores it waited for were
    /// released a moment later (`ksync-lab dining`: two threads taking two
    /// of five semaphores, 0.55 sleeps per pair and 0.3x to 0.5x the
    /// kernel); the in-process sets poll the same way
    /// (`SetShared::poll_quiet`). Its caller, the locked path, has checked
    /// the caller's rights and that it may write the set.
    fn poll_values(&self, sops: &[SemBuf], deadline: Option<Instant>) -> Polled<()> {
        let polled = poll_before_queueing(deadline, || {
            if self.is_removed() {
                return Look::Queue;
            }
            let mut blocked = false;
            for sop in sops {
                let w = self.map.load(self.map.layout.sem(usize::from(sop.num)));
                if w & sem_word::SLEEPERS != 0 {
                    return Look::Queue;
                }
                // Under LOCKED the holder works on the value: look again.
                let value = (w & sem_word::VALUE) as i32;
                blocked |= w & sem_word::LOCKED != 0
                    || (sop.op < 0 && value + i32::from(sop.op) < 0)
                    || (sop.op == 0 && value != 0);
            }
            if blocked {
                Look::Again
            } else {
                Look::Done(())
            }
        });
        self.count_polls(polled)
    }

    /// Counts a poll's looks (`SharedSemSet::counters`) and passes on how
    /// it ended.
    fn count_polls<T>(&self, (polled, polls): (Polled<T>, u32)) -> Polled<T> {
        Counters::add(&self.map.counters.outside.polls, u64::from(polls));
        polled
    }

    /// `result`, unless the set's file was truncated under this process's
    /// mapping meanwhile (`sigbus.rs`): what was read or written then was
    /// private zero pages, and the answer is `EINVAL`.
    fn unless_poisoned<T>(&self, result: Result<T, SemError>) -> Result<T, SemError> {
        if self.map.poisoned() {
            Err(SemError::Invalid)
        } else {
            result
        }
    }

    /// The path of every call the lock-free one does not take.
    fn locked_op(
        &self,
        sops: &[SemBuf],
        timeout: Option<Duration>,
        deadline: Option<Instant>,
        alter: bool,
        mut polled: bool,
    ) -> Result<(), SemError> {
        self.check(if alter { ALTER } else { READ })?;
        if !self.writable() {
            return self.wait_for_zero_read_only(sops, timeout, deadline);
        }
        // A call on several semaphores found blocked polls once before it
        // queues (`poll_values`), then takes the lock again.
        let mut may_poll = polls_before_queueing(sops);
        // Whether this call already freed the dead's sleeper slots (once
        // is enough: what it left full is full of the living).
        let mut made_room = false;
        let (mut held, blocking) = loop {
            let mut held = Locked::enter(&self.map, self.me()?)?;
            if held.removed() {
                return Err(SemError::Removed);
            }
            // Under steady traffic no timed sleeper times out, and nobody
            // would sweep up what a dead process left (a wake-up it owed):
            // a call through the lock sweeps once a sweep is overdue.
            if sweep_due(&self.map, SLEEPER_POLL) {
                held.sweep()?;
            }
            let mut reaped = false;
            let blocking = loop {
                if held.removed() {
                    return Err(SemError::Removed);
                }
                // A dead process's undo may make it possible: look once.
                // Before failing with EAGAIN, always, at the processes that
                // hold adjustments for these semaphores, or for those of a
                // sleeper that could post them (`reach_of`): the kernel applies
                // a process's undo before its parent's `waitpid` returns,
                // and a call that will not wait answers at once. Before
                // sleeping, at everyone at most every 10 ms (`reap_if_due`):
                // a sleeper gets the undo from the next sweep anyway.
                let will_not_wait = timeout == Some(Duration::ZERO);
                let outcome = held.perform(sops);
                let fails_now = match outcome {
                    Outcome::Failed(e) => e == SemError::Again,
                    Outcome::Blocked(_) => will_not_wait,
                    Outcome::Done => false,
                };
                if fails_now && !reaped {
                    reaped = true;
                    if held.reap_adjusters_of(sops) {
                        continue;
                    }
                }
                match outcome {
                    Outcome::Done => return Ok(()),
                    Outcome::Failed(e) => return Err(e),
                    Outcome::Blocked(_) if !reaped && held.reap_if_due() => reaped = true,
                    Outcome::Blocked(_) if will_not_wait => return Err(SemError::Again),
                    // No slot to queue in: the table may be full of the
                    // dead's sleepers, which a reap done less than 10 ms ago
                    // (`reap_if_due`) did not see die. Free them before
                    // `enqueue` answers ENOSPC; their undo may also have
                    // made the call possible, so it is evaluated again.
                    Outcome::Blocked(_) if !made_room && !held.has_room() => {
                        made_room = true;
                        held.make_room();
                    }
                    Outcome::Blocked(at) => break at,
                }
            };
            if !may_poll {
                break (held, blocking);
            }
            may_poll = false;
            drop(held);
            polled = self.poll_values(sops, deadline) == Polled::Spent;
        };
        let slot = held.enqueue(sops, blocking)?;
        drop(held);
        let result = self.sleep(slot, sops, deadline, polled);
        // Woken, timed out or cut short, the wait is over (`poll_learner`).
        wait_ended();
        result
    }

    /// Wait-for-zero operations by a process that may read the set but not
    /// write its file: the kernel allows them with read permission alone.
    /// Such a process cannot queue itself, so it polls (1 ms, doubling to
    /// 64 ms); it is not counted by `GETZCNT`, and its success does not
    /// update `GETPID` or the operation time, which it cannot write.
    fn wait_for_zero_read_only(
        &self,
        sops: &[SemBuf],
        timeout: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<(), SemError> {
        let mut nap = Duration::from_millis(1);
        loop {
            if self.map.poisoned() {
                return Err(SemError::Invalid);
            }
            if self.is_removed() {
                return Err(SemError::Removed);
            }
            match evaluate(&self.map, sops, 0).outcome {
                Outcome::Done => return Ok(()),
                Outcome::Failed(e) => return Err(e),
                Outcome::Blocked(_) if timeout == Some(Duration::ZERO) => {
                    return Err(SemError::Again)
                }
                Outcome::Blocked(_) => {}
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                return Err(SemError::Again);
            }
            // Not `std::thread::sleep`, which sleeps on through signals: the
            // kernel's semop returns EINTR after a handler ran.
            let pause = deadline.map_or(nap, |d| nap.min(d - now));
            let ts = libc::timespec {
                tv_sec: pause.as_secs() as libc::time_t,
                tv_nsec: pause.subsec_nanos() as libc::c_long,
            };
            // SAFETY: a valid timespec; no remainder is asked for.
            if unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) } != 0 && errno() == libc::EINTR
            {
                return Err(SemError::Interrupted);
            }
            nap = (nap * 2).min(Duration::from_millis(64));
        }
    }

    /// One operation without `SEM_UNDO` on a semaphore nobody waits on and
    /// the lock holder is not working on: one compare-and-swap. `None` when
    /// the call needs the lock. Inlined into its callers (`semtimedop`,
    /// `poll_fast`, `try_semop_lock_free`): as a call of its own it cost the
    /// uncontended operation about two nanoseconds in twenty-two.
    ///
    /// Nothing here may block or be a cancellation point, which
    /// `try_semop_lock_free` promises: the only system calls fill caches
    /// (the credentials', `getgroups` and `geteuid`, when a handle's rights
    /// are stale; the process id's, `getpid` and `madvise`, once per
    /// process), besides the vDSO's `time`.
    #[inline(always)]
    fn try_fast(&self, sop: SemBuf) -> Option<Result<(), SemError>> {
        // The credentials come from the cache (`permits`), so a fork child
        // that dropped its privileges, or a mode taken away by IPC_SET, is
        // refused here as on the locked path.
        if self.is_removed() || !self.map.writable() || !self.permits(ALTER) {
            return None;
        }
        let layout = &self.map.layout;
        let word = self.map.word(layout.sem(usize::from(sop.num)));
        let w = word.load(Ordering::Relaxed);
        if w & (sem_word::LOCKED | sem_word::SLEEPERS) != 0 {
            return None;
        }
        let new = (w & sem_word::VALUE) as i32 + i32::from(sop.op);
        if !(0..=SEMVMX).contains(&new) {
            return None;
        }
        // Acquire pairs with the release in `Locked`'s drop (the lock
        // holder's last values); release publishes ours to the next one.
        word.compare_exchange(w, new as u32, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        let pid = self.map.word(layout.pid(usize::from(sop.num)));
        let me = current_pid() as u32;
        if pid.load(Ordering::Relaxed) != me {
            pid.store(me, Ordering::Relaxed);
        }
        touch_otime(&self.map);
        // A file truncated under the compare-and-swap faults it; the handler
        // (`sigbus.rs`) fences every semaphore word on the new pages, so the
        // restarted compare-and-swap fails and the call takes the locked
        // path, which says EINVAL.
        Some(Ok(()))
    }

    /// Waits in sleeper slot `slot`, queued for `sops`, until a waker
    /// publishes the result, the deadline passes, or the set is removed.
    /// `polled`: the caller spent this wait's polls before it queued
    /// (`poll_fast`), so it sleeps at once.
    fn sleep(
        &self,
        slot: usize,
        sops: &[SemBuf],
        deadline: Option<Instant>,
        polled: bool,
    ) -> Result<(), SemError> {
        let layout = self.map.layout;
        let status = self.map.word(layout.sleeper(slot, sleeper::STATUS));
        // Poll first, for the budget this thread learned (as the in-process
        // sets' sleepers do, `crate::sem::set_sleeper_spin`): a waker on
        // another CPU often decides the call sooner than a sleep and a
        // wake-up would take.
        let spins = if polled { 0 } else { spin_budget() };
        let counters = &self.map.counters.outside;
        for spin in 0..spins {
            // Pairs with the release store in `Locked`'s drop.
            if status.load(Ordering::Acquire) == READY {
                learn(spins, true);
                Counters::add(&counters.polls, u64::from(spin + 1));
                return self.collect_and_help(slot);
            }
            core::hint::spin_loop();
        }
        if spins > 0 {
            learn(spins, false);
            Counters::add(&counters.polls, u64::from(spins));
        }
        let asleep = Asleep::enter(&self.map, slot);
        loop {
            // Pairs with the release store in `Locked`'s drop.
            match status.load(Ordering::Acquire) {
                READY => {
                    asleep.leave();
                    return self.collect_and_help(slot);
                }
                // A watch that left named this sleeper its successor
                // (`Asleep::leave`): back to waiting, as the watch. A waker
                // that published meanwhile wins.
                APPOINTED => {
                    let _ = status.compare_exchange(
                        APPOINTED,
                        WAITING,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    // Back to waiting before `nap` reads the role: pairs
                    // with the fence in `SleepWatch::hand_over` between
                    // naming a successor and appointing it. A leaver whose
                    // appointment found this slot still APPOINTED (a stale
                    // one, from a leaver that named the slot's last
                    // sleeper) woke it anyway, perhaps before this sleep:
                    // then this sleeper sees itself named here.
                    fence(Ordering::SeqCst);
                    continue;
                }
                _ => {}
            }
            if self.map.poisoned() {
                // The file is gone from under the mapping: nothing will
                // ever wake this sleeper.
                return Err(SemError::Invalid);
            }
            // Among many sleepers of this process, only the watch sleeps
            // with a timeout when its call has none (`crate::sem::sleep_watch`):
            // the others save its wake-ups. Theirs never expires
            // (`wait_shared` with `None`), so that a signal handler still
            // ends the call with EINTR.
            let timed = self.map.watch.nap(slot, untimed_crowd()) != Nap::Untimed;
            let nap = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if d <= now {
                        asleep.leave();
                        let mut held = Locked::enter(&self.map, self.me()?)?;
                        // A dead process's undo, applied now, may complete
                        // this sleeper before it gives up, as in `locked_op`
                        // before an EAGAIN, and only the undo of a process
                        // with an adjustment in the call's reach can: those
                        // processes alone are probed (`reap_adjusters_of`),
                        // not every live one.
                        held.reap_adjusters_of(sops);
                        // Done meanwhile: its waker stored the status before
                        // releasing the lock, or died; either way the result
                        // stands.
                        return match held.cancel(slot)? {
                            Some(_) => self.collect(slot),
                            None => Err(SemError::Again),
                        };
                    }
                    Some(if timed {
                        (d - now).min(SLEEPER_POLL)
                    } else {
                        d - now
                    })
                }
                None => timed.then_some(SLEEPER_POLL),
            };
            Counters::add(&counters.parks, 1);
            let wake = wait_shared(status, WAITING, nap);
            if wake == crate::futex::Wake::Interrupted {
                // The kernel's semop is never restarted after a signal
                // handler, SA_RESTART or not (signal(7)): leave the queue
                // with EINTR, unless a waker decided the call meanwhile.
                asleep.leave();
                let mut held = Locked::enter(&self.map, self.me()?)?;
                return match held.cancel(slot)? {
                    Some(_) => self.collect(slot),
                    None => Err(SemError::Interrupted),
                };
            }
            if timed
                && wake == crate::futex::Wake::TimedOut
                && deadline.is_none_or(|d| Instant::now() < d)
            {
                // No wake-up for a while. Every SLEEPER_POLL one timed
                // sleeper of the set (whichever looks first) sweeps it:
                // adopts dead processes' leftovers, finishes what a waker or
                // a remover that died left undone, and wakes sleepers whose
                // wake-up a dead process claimed. The others go back to
                // sleep.
                if sweep_due(&self.map, SLEEPER_POLL) || self.is_removed() {
                    let mut held = Locked::enter(&self.map, self.me()?)?;
                    if sweep_due(&self.map, SLEEPER_POLL) || held.removed() {
                        held.sweep()?;
                    }
                }
            }
        }
    }

    /// [`collect`](Self::collect) for a sleeper its waker completed, which
    /// then makes the wake-ups its waker left to the sleepers of its CPU
    /// (`share.rs`) before it returns.
    fn collect_and_help(&self, slot: usize) -> Result<(), SemError> {
        let result = self.collect(slot);
        let calls = share::help(&self.map);
        if calls > 0 {
            Counters::add(&self.map.counters.outside.wake_calls, calls as u64);
        }
        result
    }

    /// The result a waker published in `slot`; frees the slot.
    fn collect(&self, slot: usize) -> Result<(), SemError> {
        let layout = self.map.layout;
        let code = self.map.load(layout.sleeper(slot, sleeper::RESULT));
        self.map
            .word(layout.sleeper(slot, sleeper::STATE))
            .store(SLEEPER_FREE, Ordering::Release);
        match code {
            0 => Ok(()),
            e => Err(SemError::from_errno(e as i32).unwrap_or(SemError::Invalid)),
        }
    }

    /// Runs `f` under the lock after adopting dead processes' leftovers, so
    /// what it reads includes their undo; a read-only handle reads without
    /// the lock (each word is read atomically, the whole is no snapshot).
    fn read<T>(&self, f: impl FnOnce(&Mapping) -> Result<T, SemError>) -> Result<T, SemError> {
        self.check(READ)?;
        if !self.writable() {
            let result = f(&self.map);
            return self.unless_poisoned(result);
        }
        let mut held = Locked::enter(&self.map, self.me()?)?;
        held.reap();
        if held.removed() {
            return Err(SemError::Removed);
        }
        let result = f(&self.map);
        drop(held);
        self.unless_poisoned(result)
    }

    /// `GETVAL`.
    pub fn get_value(&self, num: usize) -> Result<i32, SemError> {
        check_num(num, self.nsems())?;
        self.read(|map| Ok(value(map, num)))
    }

    /// `GETALL`.
    pub fn get_all(&self) -> Result<Vec<u16>, SemError> {
        self.read(|map| Ok((0..map.nsems()).map(|n| value(map, n) as u16).collect()))
    }

    /// `GETPID`: the process of the last change to semaphore `num`.
    pub fn pid(&self, num: usize) -> Result<i32, SemError> {
        check_num(num, self.nsems())?;
        self.read(|map| Ok(map.load(map.layout.pid(num)) as i32))
    }

    /// `GETNCNT`: sleepers blocked decrementing semaphore `num`.
    pub fn ncnt(&self, num: usize) -> Result<usize, SemError> {
        self.count(num, false)
    }

    /// `GETZCNT`: sleepers blocked waiting for semaphore `num` to be zero.
    pub fn zcnt(&self, num: usize) -> Result<usize, SemError> {
        self.count(num, true)
    }

    fn count(&self, num: usize, zero: bool) -> Result<usize, SemError> {
        check_num(num, self.nsems())?;
        self.check(READ)?;
        if !self.writable() {
            // A reader cannot take the lock (it has no process slot), so it
            // walks the queue as it stands, as its other reads do, and
            // cannot reap: it leaves the dead's sleepers out itself. A walk
            // that meets a queue being changed under it (a link or a
            // sleeper's operations half written) looks again; one that
            // keeps failing is a file that fails the checks. Its liveness
            // probes need the file's descriptor.
            {
                let _one = self.map.claiming.lock();
                self.map.reopen_if_closed(self.id)?;
            }
            let mut result = count_live_sleepers_in(&self.map, num, zero);
            for _ in 0..UNLOCKED_WALKS {
                if result.is_ok() {
                    break;
                }
                std::thread::yield_now();
                result = count_live_sleepers_in(&self.map, num, zero);
            }
            return self.unless_poisoned(result);
        }
        let mut held = Locked::enter(&self.map, self.me()?)?;
        held.reap();
        let result = held.count_sleepers(num, zero);
        drop(held);
        self.unless_poisoned(result)
    }

    /// `SETVAL`: sets semaphore `num` to `value` (0 ..= [`SEMVMX`]), clears
    /// its adjustment in every process, and completes the sleepers that can
    /// now run.
    pub fn set_value(&self, num: usize, value: i32) -> Result<(), SemError> {
        // The kernel checks the value before the number.
        if !(0..=SEMVMX).contains(&value) {
            return Err(SemError::Range);
        }
        check_num(num, self.nsems())?;
        self.set(&[(num, value)])
    }

    /// `SETALL`: sets every value (`values.len()` must equal
    /// [`nsems`](Self::nsems)), clears every adjustment, and completes the
    /// sleepers that can now run.
    pub fn set_all(&self, values: &[u16]) -> Result<(), SemError> {
        if values.len() != self.nsems() {
            return Err(SemError::Invalid);
        }
        if values.iter().any(|&v| i32::from(v) > SEMVMX) {
            return Err(SemError::Range);
        }
        let values: Vec<(usize, i32)> = values
            .iter()
            .enumerate()
            .map(|(n, &v)| (n, i32::from(v)))
            .collect();
        self.set(&values)
    }

    fn set(&self, values: &[(usize, i32)]) -> Result<(), SemError> {
        self.check(ALTER)?;
        let mut held = Locked::enter(&self.map, self.me()?)?;
        if held.removed() {
            return Err(SemError::Removed);
        }
        held.set_values(values);
        drop(held);
        self.unless_poisoned(Ok(()))
    }

    /// `IPC_STAT`.
    pub fn stat(&self) -> Result<SharedSemStat, SemError> {
        self.read(stat_of)
    }

    /// `SEM_STAT_ANY`'s `IPC_STAT`, which checks no right (the kernel's
    /// `semctl_stat` skips `ipcperms` for it): the set's mode does not
    /// stop a handle, only the file's, which let this process (or the
    /// parent it forked from) open it. A caller the mode refuses reads the
    /// header without the lock, as a read-only handle does, so that it
    /// takes no place in a set it has no right to. `EIDRM` if the set was
    /// removed.
    pub fn stat_any(&self) -> Result<SharedSemStat, SemError> {
        if self.permits(READ) {
            return self.stat();
        }
        if self.map.poisoned() {
            return Err(SemError::Invalid);
        }
        if self.is_removed() {
            return Err(SemError::Removed);
        }
        self.unless_poisoned(stat_of(&self.map))
    }

    /// The processes that hold undo adjustments in the set, with the
    /// adjustments (semaphore, amount) each would apply at exit: `ipcs -s -i`'s
    /// view, which the kernel cannot give.
    pub fn undo_holders(&self) -> Result<Vec<UndoHolder>, SemError> {
        self.read(|map| {
            let layout = map.layout;
            Ok((0..NPROC)
                .filter(|&s| map.load(layout.proc(s, proc_slot::STATE)) == SLOT_LIVE)
                .filter_map(|s| {
                    let adjs: Vec<(usize, i32)> = (0..map.nsems())
                        .map(|n| (n, adjustment(map, s, n)))
                        .filter(|&(_, a)| a != 0)
                        .collect();
                    let pid = map.load(layout.proc(s, proc_slot::PID)) as i32;
                    (!adjs.is_empty()).then_some(UndoHolder {
                        pid,
                        adjustments: adjs,
                    })
                })
                .collect())
        })
    }

    /// How often the set recovered from processes that died in it, and the
    /// wake-ups its wakers still owe.
    pub fn recovery_stats(&self) -> RecoveryStats {
        RecoveryStats {
            takeovers: self.map.load(header::TAKEOVERS),
            rollbacks: self.map.load(header::ROLLBACKS),
            reaped: self.map.load(header::REAPED),
            swept: self.map.load(header::SWEPT),
            wakes_owed: (0..NSLEEP).fold(0u32, |owed, slot| {
                owed.wrapping_add(
                    self.map
                        .load(self.map.layout.sleeper(slot, sleeper::WAKES_DUE)),
                )
            }),
        }
    }

    /// What this process's calls on the set did since it mapped the set
    /// (other processes count their own): the same counts as
    /// [`SemSet::counters`](crate::sem::SemSet::counters). `lock_waits`
    /// counts acquisitions of the set's lock that found it taken;
    /// `futex_wakes` equals `wakeups`, since a waker wakes the word of every
    /// sleeper it completed, asleep or still polling.
    ///
    /// ```
    /// use ksync::sem::{SemBuf, SharedSemSet, IPC_CREAT, IPC_PRIVATE};
    /// # let dir = std::env::temp_dir().join(format!("ksync-doc-n-{}", std::process::id()));
    /// # std::env::set_var("KSYNC_SEM_DIR", &dir);
    ///
    /// let set = SharedSemSet::open(IPC_PRIVATE, 1, IPC_CREAT | 0o600)?;
    /// set.semop(&[SemBuf::new(0, 1, 0)])?; // lock-free: nothing to count
    /// set.semop(&[SemBuf::new(0, -1, 0), SemBuf::new(0, 1, 0)])?; // under the lock
    /// assert_eq!(set.counters().attempts, 1);
    /// set.remove()?;
    /// # let _ = std::fs::remove_dir(&dir);
    /// # Ok::<(), ksync::sem::SemError>(())
    /// ```
    pub fn counters(&self) -> SemCounters {
        let mut sum = SemCounters::default();
        self.map.counters.add_to(&mut sum);
        sum
    }

    /// `IPC_SET`: new owner, group and mode (low nine bits), by the owner,
    /// the creator or a process with `CAP_SYS_ADMIN` (`EPERM` otherwise).
    /// The file's owner and mode follow, so the OS keeps enforcing them;
    /// changing the file's owner needs `CAP_CHOWN`, and its mode its owner
    /// or `CAP_FOWNER`: without them the file keeps what it had.
    pub fn set_perm(&self, uid: u32, gid: u32, mode: u32) -> Result<(), SemError> {
        self.owner_only()?;
        // `(uid_t)-1` names nobody: the kernel refuses it (`EINVAL`), where
        // `fchown` would read it as "leave unchanged".
        if uid == u32::MAX || gid == u32::MAX {
            return Err(SemError::Invalid);
        }
        let mut held = Locked::enter(&self.map, self.me()?)?;
        if held.removed() {
            return Err(SemError::Removed);
        }
        // The file first, then the header, whose new permission generation
        // tells read-only handles to try the file again
        // (`Mapping::reopen_writable`): a handle that sees the generation
        // move finds the file's new mode. Under the lock, so two `IPC_SET`s
        // leave the file and the header agreeing.
        let fd = self.map.fd();
        // SAFETY: plain system calls on our descriptor.
        unsafe {
            libc::fchmod(fd, dir::file_mode(mode));
            libc::fchown(fd, uid, gid);
        }
        held.set_perm(uid, gid, mode & 0o777);
        drop(held);
        Ok(())
    }

    fn owner_only(&self) -> Result<(), SemError> {
        if !Creds::current().is_owner(&self.map) && !capable(CAP_SYS_ADMIN) {
            return Err(SemError::Permission);
        }
        if !self.writable() {
            // The file's owner always may write it (`dir::file_mode`); an
            // owner or creator the file does not name (an `IPC_SET` that
            // could not change the file's owner) may not.
            return Err(SemError::Access);
        }
        Ok(())
    }

    /// `IPC_RMID`: removes the set, by the owner, the creator or a process
    /// with `CAP_SYS_ADMIN`. Every sleeper, in any process, fails with
    /// `EIDRM`, as does every later call through any handle; the key is
    /// free at once.
    pub fn remove(&self) -> Result<(), SemError> {
        if self.is_removed() {
            return Err(SemError::Removed);
        }
        self.owner_only()?;
        let mut held = Locked::enter(&self.map, self.me()?)?;
        if held.removed() {
            return Err(SemError::Removed);
        }
        self.map
            .word(header::FLAGS)
            .fetch_or(REMOVED, Ordering::AcqRel);
        held.fail_all()?;
        drop(held);
        // The set is removed for every process. Unlinking its key's link
        // and its file only tidies the folder, where only their owner (or
        // `CAP_FOWNER`) may, the folder being sticky: a remover the kernel
        // allows but the folder does not (an owner named by an `IPC_SET`
        // without `CAP_CHOWN`, a process with `CAP_SYS_ADMIN` alone) leaves
        // them to the owner's next look at the key or the id (`get`,
        // `open_id`), and succeeds, as on the kernel.
        let dir = dir::sem_dir();
        dir::unbind_key(&dir, self.key(), self.id);
        let _ = dir::unlink(&dir::set_path(&dir, self.id));
        Ok(())
    }
}

impl Drop for SharedSemSet {
    fn drop(&mut self) {
        let removed = self.is_removed();
        registry().release(&self.map, removed);
    }
}

impl std::fmt::Debug for SharedSemSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSemSet")
            .field("id", &self.id)
            .field("key", &self.key())
            .field("nsems", &self.nsems())
            .finish()
    }
}

/// What `IPC_STAT` reports of the set mapped as `map`.
fn stat_of(map: &Mapping) -> Result<SharedSemStat, SemError> {
    let otime = map.load(header::OTIME);
    Ok(SharedSemStat {
        key: map.load(header::KEY) as i32,
        uid: map.load(header::UID),
        gid: map.load(header::GID),
        cuid: map.load(header::CUID),
        cgid: map.load(header::CGID),
        mode: map.load(header::MODE) & 0o777,
        nsems: map.nsems(),
        otime: (otime != 0).then(|| system_time(u64::from(otime))),
        ctime: system_time(u64::from(map.load(header::CTIME))),
    })
}

/// Unlinks the file at `path` if it is `map`'s, a set marked removed: its
/// remover unlinks it last, and one killed before that left it in the
/// directory, where it would count against [`SEMMNI`] and keep its memory
/// for good. Best effort: only its owner or a process with `CAP_FOWNER`
/// may (the directory is sticky), and a remover still at work unlinks it
/// anyway.
fn unlink_removed(map: &Mapping, path: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let (dev, ino) = map.file();
    if std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == (dev, ino)) {
        let _ = dir::unlink(path);
    }
}

/// Creates a set file for `key` (bound only after it is complete).
/// `EEXIST` when another process bound the key first.
fn create(
    dir: &std::path::Path,
    key: i32,
    nsems: usize,
    mode: u32,
) -> Result<SharedSemSet, SemError> {
    if dir::set_ids().len() >= SEMMNI {
        return Err(SemError::NoSpace);
    }
    let layout = Layout::new(nsems);
    let tmp = dir.join(format!("tmp.{}.{:08x}", current_pid(), dir::random_id()));
    let c = cstr(&tmp)?;
    let fd = dir::open_descriptor(&c, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600)
        .map_err(os_error)?;
    let built = build(&fd, &tmp, layout, key, mode);
    let _ = dir::unlink(&tmp);
    let (id, map) = built.and_then(|id| Ok((id, Mapping::new_file(fd, layout)?)))?;
    if key != IPC_PRIVATE {
        let target = cstr(std::path::Path::new(&format!("sem.{id}")))?;
        let link = cstr(&dir::key_path(dir, key))?;
        // SAFETY: valid C strings.
        if unsafe { libc::symlink(target.as_ptr(), link.as_ptr()) } != 0 {
            let e = errno();
            let _ = dir::unlink(&dir::set_path(dir, id));
            return Err(os_error(e));
        }
    }
    let map = registry().insert(map);
    SharedSemSet::from_map(map, id)
}

/// Sizes and fills a new set's file and links it under a free id.
fn build(
    fd: &OwnedFd,
    tmp: &std::path::Path,
    layout: Layout,
    key: i32,
    mode: u32,
) -> Result<i32, SemError> {
    // SAFETY: plain system calls on our descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), layout.bytes() as libc::off_t) } != 0 {
        return Err(os_error(errno()));
    }
    let dup = dir::duplicate(fd).map_err(os_error)?;
    let map = Mapping::new_file(dup, layout)?;
    let put = |i: usize, v: u32| map.word(i).store(v, Ordering::Relaxed);
    // SAFETY: plain system calls.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    put(header::VERSION, VERSION);
    put(header::NSEMS, layout.nsems as u32);
    put(header::KEY, key as u32);
    put(header::UID, uid);
    put(header::GID, gid);
    put(header::CUID, uid);
    put(header::CGID, gid);
    put(header::MODE, mode);
    put(header::CTIME, now_secs() as u32);
    // Last, with release: a file with the magic is complete.
    map.word(header::MAGIC).store(MAGIC, Ordering::Release);
    // The OS enforces the set's read and alter permission on the file.
    // SAFETY: plain system call on our descriptor.
    unsafe { libc::fchmod(fd.as_raw_fd(), dir::file_mode(mode)) };
    let from = cstr(tmp)?;
    loop {
        let id = dir::random_id();
        put(header::ID, id as u32);
        let to = cstr(&dir::set_path(tmp.parent().unwrap_or(tmp), id))?;
        // SAFETY: valid C strings.
        if unsafe { libc::link(from.as_ptr(), to.as_ptr()) } == 0 {
            return Ok(id);
        }
        if errno() != libc::EEXIST {
            return Err(os_error(errno()));
        }
    }
}

/// The most operations a call may have to poll before it queues
/// ([`SharedSemSet::poll_values`]): a look reads every word it names.
const POLL_MAX_OPS: usize = 8;

/// Whether a call of several operations polls its semaphores' words before
/// it queues: 2 to [`POLL_MAX_OPS`] operations on distinct semaphores (with a
/// repeat, whether it blocks depends on the order), one of which may block,
/// none with `IPC_NOWAIT`.
fn polls_before_queueing(sops: &[SemBuf]) -> bool {
    (2..=POLL_MAX_OPS).contains(&sops.len())
        && sops.iter().any(|s| s.op <= 0)
        && sops.iter().all(|s| s.flags & IPC_NOWAIT == 0)
        && sops
            .iter()
            .enumerate()
            .all(|(i, s)| sops[..i].iter().all(|t| t.num != s.num))
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::journal::Tx;
    use super::super::layout::owner_word;
    use super::*;

    /// Leaves the set as a process killed inside a transaction leaves it:
    /// the lock held in the name of a dead incarnation of this process's
    /// slot, the journal open, two values overwritten.
    fn die_mid_transaction(set: &SharedSemSet) {
        let me = set.me().unwrap();
        let held = Locked::enter(&set.map, me).unwrap();
        let layout = set.map.layout;
        let mut tx = Tx::begin(&set.map);
        tx.write(layout.sem(0), 5);
        tx.write(layout.sem(1), 7);
        std::mem::forget(tx);
        std::mem::forget(held);
        set.map.lockers_here.fetch_sub(1, Ordering::SeqCst);
        let dead = owner_word(me.slot, me.gen.wrapping_add(1));
        set.map
            .word(header::LOCK)
            .store((1 << 30) | dead, Ordering::SeqCst);
    }

    /// A new private set whose file is deleted when the test ends, passed or not.
    pub(in crate::sem::shared) struct Scratch(pub(in crate::sem::shared) SharedSemSet);

    impl Scratch {
        pub(in crate::sem::shared) fn new(nsems: usize) -> Scratch {
            Scratch(SharedSemSet::open(IPC_PRIVATE, nsems, IPC_CREAT | 0o600).unwrap())
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(dir::set_path(&dir::sem_dir(), self.0.id()));
        }
    }

    /// `try_semop_lock_free` does what `semtimedop` would when it says so,
    /// and nothing at all when it declines.
    #[test]
    fn the_lock_free_try_does_the_operation_or_nothing() {
        let scratch = Scratch::new(2);
        let set = &scratch.0;
        assert!(set.try_semop_lock_free(SemBuf::new(1, 2, 0)));
        assert!(set.try_semop_lock_free(SemBuf::new(1, -1, IPC_NOWAIT)));
        // A block, an error, undo and wait-for-zero are the full call's.
        assert!(!set.try_semop_lock_free(SemBuf::new(0, -1, 0)));
        assert!(!set.try_semop_lock_free(SemBuf::new(2, 1, 0)));
        assert!(!set.try_semop_lock_free(SemBuf::new(1, 1, SEM_UNDO)));
        assert!(!set.try_semop_lock_free(SemBuf::new(0, 0, 0)));
        assert!(!set.try_semop_lock_free(SemBuf::new(1, SEMVMX as i16, 0)));
        assert_eq!(set.get_all(), Ok(vec![0, 1]));
        assert_eq!(set.pid(1), Ok(current_pid()));
        set.remove().unwrap();
        assert!(!set.try_semop_lock_free(SemBuf::new(1, 1, 0)));
    }

    #[test]
    fn a_transaction_cut_short_is_rolled_back_by_the_next_holder() {
        let scratch = Scratch::new(3);
        let set = &scratch.0;
        set.set_all(&[1, 2, 3]).unwrap();
        die_mid_transaction(set);
        // The half-written values are there until someone takes the lock.
        assert_eq!(value(&set.map, 0), 5);
        assert_eq!(set.get_all(), Ok(vec![1, 2, 3]));
        let stats = set.recovery_stats();
        assert_eq!((stats.takeovers, stats.rollbacks), (1, 1));
        // And the set works on.
        set.semop(&[SemBuf::new(0, -1, 0), SemBuf::new(2, 1, 0)])
            .unwrap();
        assert_eq!(set.get_all(), Ok(vec![0, 2, 4]));
        set.remove().unwrap();
    }

    #[test]
    fn the_counters_count_a_wait_for_the_lock_and_a_wake_up() {
        let scratch = Scratch::new(1);
        let set = &scratch.0;
        let before = set.counters();
        std::thread::scope(|s| {
            // Held here, the lock makes the sleeper's call wait for it.
            let held = Locked::enter(&set.map, set.me().unwrap()).unwrap();
            let sleeper = s.spawn(|| set.semop(&[SemBuf::new(0, -1, 0)]));
            // The count comes first; WAITERS, after the waiter's spins, ends
            // the wait for a build that does not count.
            while set.map.load(header::LOCK) & owner_lock_waiters() == 0
                && set.counters().lock_waits == before.lock_waits
            {
                std::thread::yield_now();
            }
            drop(held);
            while set.ncnt(0) != Ok(1) {
                std::thread::yield_now();
            }
            // SLEEPERS sends the post through the lock, which completes the sleeper.
            set.semop(&[SemBuf::new(0, 1, 0)]).unwrap();
            sleeper.join().unwrap().unwrap();
        });
        let after = set.counters();
        // The sleeper's wait, and any between its call and `ncnt`'s.
        assert!(after.lock_waits - before.lock_waits >= 1);
        assert_eq!(after.wakeups - before.wakeups, 1);
        assert_eq!(after.futex_wakes - before.futex_wakes, 1);
        assert_eq!(after.wake_calls - before.wake_calls, 1);
        // The sleeper's blocked try (twice if a search for dead processes
        // came due: `reap_if_due`), the post's, and its retry of the sleeper.
        assert!((3..=4).contains(&(after.attempts - before.attempts)));
        assert_eq!(after.visited - before.visited, 1);
        set.remove().unwrap();
    }

    /// A second handle on `scratch`'s mapping, with a crowd of phantom
    /// sleepers the watch counts but that never nap, so that real sleepers
    /// nap untimed; entered after the process's slot is claimed, which
    /// resets the watch.
    fn crowded(scratch: &Scratch) -> SharedSemSet {
        let set = SharedSemSet::open_id(scratch.0.id()).unwrap();
        set.me().unwrap();
        for _ in 0..untimed_crowd().min(1000) {
            set.map.watch.enter();
        }
        set
    }

    type Sleeper = std::thread::JoinHandle<Result<(), SemError>>;

    /// `n` threads of this process asleep on a decrement of semaphore 0,
    /// past their polls.
    fn asleep_on_0(set: &SharedSemSet, n: usize) -> Vec<Sleeper> {
        let (id, parks) = (set.id(), set.counters().parks);
        let sleepers = (0..n)
            .map(|_| {
                std::thread::spawn(move || {
                    SharedSemSet::open_id(id)
                        .unwrap()
                        .semop(&[SemBuf::new(0, -1, 0)])
                })
            })
            .collect();
        while set.counters().parks < parks + n as u64 {
            std::thread::yield_now();
        }
        sleepers
    }

    /// Sets semaphore 0 to `value` and publishes the results of the
    /// sleepers that completes without waking them, as a waker killed
    /// between the two (or a helper killed after claiming their wake-ups)
    /// leaves them; returns their slots.
    fn complete_without_waking(set: &SharedSemSet, value: i32) -> Vec<usize> {
        let mut held = Locked::enter(&set.map, set.me().unwrap()).unwrap();
        held.set_values(&[(0, value)]);
        let lost = std::mem::take(&mut held.woken);
        for &slot in &lost {
            super::super::engine::publish(&set.map, slot);
        }
        lost
    }

    /// Joins `sleepers`, each successful, failing after a bound only a
    /// hang reaches (a sweep comes within about 100 ms).
    fn join_unless_asleep(sleepers: Vec<Sleeper>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !sleepers.iter().all(|s| s.is_finished()) {
            assert!(
                Instant::now() < deadline,
                "a sleeper whose wake-up was lost is still asleep"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        for sleeper in sleepers {
            sleeper.join().unwrap().unwrap();
        }
    }

    /// Records the set's last sweep `ago_ms` ago.
    fn swept(set: &SharedSemSet, ago_ms: u32) {
        let at = super::super::engine::coarse_ms().wrapping_sub(ago_ms);
        set.map
            .word(header::LAST_SWEEP)
            .store(at, Ordering::Relaxed);
    }

    /// A waker that publishes its sleepers' results and dies before waking
    /// them: in a crowd only the process's watch sleeps with a timeout, and
    /// its sweep wakes the rest.
    #[test]
    fn sleepers_whose_wake_ups_were_lost_are_woken_by_the_watchs_sweep() {
        lost_wake_ups_end(false);
    }

    /// As above, but a sweep ran just before the watch's timeout, so the
    /// watch returns without sweeping. The sleeper it names its successor
    /// has its result and no wake-up coming: the watch must wake it, or
    /// the process is left with an untimed watch and nobody sweeps.
    #[test]
    fn a_watch_that_returns_without_sweeping_wakes_a_successor_whose_wake_up_was_lost() {
        lost_wake_ups_end(true);
    }

    /// Three sleepers whose wake-ups are lost; `swept_just_before`: a sweep
    /// is recorded at the publication, about 20 ms into the watch's 100 ms
    /// sleep.
    fn lost_wake_ups_end(swept_just_before: bool) {
        const SLEEPERS: usize = 3;
        let scratch = Scratch::new(1);
        let set = &crowded(&scratch);
        let sleepers = asleep_on_0(set, SLEEPERS);
        if swept_just_before {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            complete_without_waking(set, SLEEPERS as i32).len(),
            SLEEPERS
        );
        if swept_just_before {
            swept(set, 0);
        }
        join_unless_asleep(sleepers);
        assert_eq!(set.get_value(0), Ok(0));
        set.remove().unwrap();
    }

    /// Whether thread `tid` of this process is asleep in a futex wait.
    fn in_futex_wait(tid: libc::pid_t) -> bool {
        let read = |what| std::fs::read_to_string(format!("/proc/self/task/{tid}/{what}"));
        let asleep = read("stat").is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
        });
        let call = read("syscall").ok().and_then(|call| {
            call.split_whitespace()
                .next()
                .and_then(|nr| nr.parse::<libc::c_long>().ok())
        });
        asleep && call == Some(libc::SYS_futex)
    }

    /// A sleeper on a decrement of semaphore 0, asleep in the kernel
    /// without a timeout (the process's watch is a phantom that never
    /// sleeps), is completed and its result published; `made`: the wake-up
    /// it is owed counts as made, as after a wake-up that went astray.
    /// Then a sweep: returns what it counted, once the sleeper is back.
    fn sweep_a_sleeper_published_unwoken(made: bool) -> u32 {
        let scratch = Scratch::new(1);
        let set = &crowded(&scratch);
        const PHANTOM: usize = crate::sem::shared::NSLEEP - 1;
        set.map.watch.enter();
        assert_eq!(set.map.watch.nap(PHANTOM, untimed_crowd()), Nap::Watch);
        let (id, parks) = (set.id(), set.counters().parks);
        let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let sleeper = {
            let tid = Arc::clone(&tid);
            std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tid.store(unsafe { libc::gettid() }, Ordering::SeqCst);
                SharedSemSet::open_id(id)
                    .unwrap()
                    .semop(&[SemBuf::new(0, -1, 0)])
            })
        };
        // Its park is counted just before its futex wait, its only sleep.
        while set.counters().parks == parks || !in_futex_wait(tid.load(Ordering::SeqCst)) {
            std::thread::yield_now();
        }
        let slots = complete_without_waking(set, 1);
        assert_eq!(slots.len(), 1);
        let due = set
            .map
            .word(set.map.layout.sleeper(slots[0], sleeper::WAKES_DUE));
        if made {
            due.fetch_sub(1, Ordering::Release);
        }
        Locked::enter(&set.map, set.me().unwrap())
            .unwrap()
            .sweep()
            .unwrap();
        join_unless_asleep(vec![sleeper]);
        let stats = set.recovery_stats();
        assert_eq!(stats.wakes_owed, u32::from(!made));
        set.map.watch.leave(PHANTOM, || None, |_| ());
        set.remove().unwrap();
        stats.swept
    }

    /// A sleeper still asleep on its result after its wake-up was made
    /// lost that wake-up: the sweep that wakes it counts it.
    #[test]
    fn a_sweep_counts_a_sleeper_asleep_after_its_wake_up_was_made() {
        assert_eq!(sweep_a_sleeper_published_unwoken(true), 1);
    }

    /// A sleeper whose waker has yet to wake it (here: never will, as if it
    /// died) is woken by the sweep, but not counted: a live waker may be on
    /// its way.
    #[test]
    fn a_sweep_wakes_but_does_not_count_a_sleeper_whose_wake_up_is_owed() {
        assert_eq!(sweep_a_sleeper_published_unwoken(false), 0);
    }

    /// A sleeper in a crowd whose wake-up is lost, while the process's
    /// watch is kept busy (here: a phantom that never sleeps), so that no
    /// timed sleeper times out to sweep: the next call through the lock
    /// finds the sweep overdue and wakes it.
    #[test]
    fn a_call_through_the_lock_sweeps_when_no_timed_sleeper_has() {
        let scratch = Scratch::new(2);
        let set = &crowded(&scratch);
        const PHANTOM: usize = crate::sem::shared::NSLEEP - 1;
        set.map.watch.enter();
        assert_eq!(set.map.watch.nap(PHANTOM, untimed_crowd()), Nap::Watch);
        let sleepers = asleep_on_0(set, 1);
        assert_eq!(complete_without_waking(set, 1).len(), 1);
        swept(set, 1000);
        // Through the lock (two operations), on the other semaphore.
        set.semop(&[SemBuf::new(1, 1, 0), SemBuf::new(1, -1, 0)])
            .unwrap();
        join_unless_asleep(sleepers);
        set.map.watch.leave(PHANTOM, || None, |_| ());
        set.remove().unwrap();
    }

    /// A SETVAL clears every undo adjustment by moving the semaphore's
    /// 16-bit generation on; 65,536 of them bring it back round, and the
    /// adjustment they cleared must not count again.
    #[test]
    fn an_adjustment_cleared_by_setval_stays_cleared_when_the_generation_wraps() {
        let scratch = Scratch::new(1);
        let set = &scratch.0;
        set.set_value(0, 1).unwrap();
        set.semop(&[SemBuf::new(0, -1, SEM_UNDO)]).unwrap();
        assert_eq!(set.undo_holders().unwrap().len(), 1);
        for _ in 0..=u16::MAX {
            set.set_value(0, 0).unwrap();
        }
        assert_eq!(set.undo_holders(), Ok(vec![]));
        set.remove().unwrap();
    }

    /// A remover killed after marking the set removed, before unlinking
    /// its file: the next process to open it by id unlinks it.
    #[test]
    fn a_set_its_remover_left_behind_is_unlinked_by_the_next_to_open_it() {
        let scratch = Scratch::new(1);
        let id = scratch.0.id();
        scratch
            .0
            .map
            .word(header::FLAGS)
            .fetch_or(REMOVED, Ordering::AcqRel);
        let path = dir::set_path(&dir::sem_dir(), id);
        assert!(path.exists());
        assert_eq!(SharedSemSet::open_id(id).err(), Some(SemError::Removed));
        assert!(!path.exists());
        assert!(!dir::set_ids().contains(&id));
        assert_eq!(SharedSemSet::open_id(id).err(), Some(SemError::NotFound));
    }

    #[test]
    fn a_sleeper_whose_waits_are_long_stops_probing() {
        use crate::poll_learner::{MIN_POLLS, PROBE_EVERY, PROBE_POLLS};
        // As for the in-process sets (`mode.rs`): waits far longer than
        // eight of the longest context switch the learner believes (200 us),
        // so the second probe-due wait skips its probe, but only if each
        // wait's end is recorded (`locked_op`).
        let scratch = Scratch::new(1);
        let set = &scratch.0;
        let waits = 1 + 2 * PROBE_EVERY;
        std::thread::scope(|s| {
            // A fresh thread, which polls MIN_POLLS times on its first wait.
            let waiter = s.spawn(|| {
                for _ in 0..waits {
                    set.semop(&[SemBuf::new(0, -1, 0)]).unwrap();
                }
            });
            for _ in 0..waits {
                // Queued: its polls are over.
                crate::test_common::wait_until("the waiter queued", || set.ncnt(0) == Ok(1));
                std::thread::sleep(std::time::Duration::from_millis(10));
                set.semop(&[SemBuf::new(0, 1, 0)]).unwrap();
            }
            waiter.join().unwrap();
        });
        assert_eq!(set.counters().polls, u64::from(MIN_POLLS + PROBE_POLLS));
        set.remove().unwrap();
    }

    fn owner_lock_waiters() -> u32 {
        crate::sem::owner_lock::WAITERS
    }

    #[test]
    fn a_poller_never_overtakes_a_queued_sleeper() {
        // The word as a post leaves it for a queued sleeper the post has not
        // completed yet: one unit, SLEEPERS set. A poller that took the unit
        // would overtake that sleeper; it must look once and go to queue.
        let scratch = Scratch::new(1);
        let set = &scratch.0;
        let word = set.map.word(set.map.layout.sem(0));
        let down = SemBuf::new(0, -1, 0);
        // Without the flag the unit is the poller's.
        word.store(1, Ordering::SeqCst);
        assert_eq!(set.poll_fast(down, None), Polled::Done(Ok(())));
        assert_eq!(word.load(Ordering::SeqCst), 0);
        word.store(sem_word::SLEEPERS | 1, Ordering::SeqCst);
        assert_eq!(set.poll_fast(down, None), Polled::Queue);
        assert_eq!(word.load(Ordering::SeqCst), sem_word::SLEEPERS | 1);
        word.store(0, Ordering::SeqCst);
        set.remove().unwrap();
    }

    #[test]
    fn a_call_on_two_semaphores_polls_until_both_let_it_through_but_never_past_a_sleeper() {
        let scratch = Scratch::new(2);
        let set = &scratch.0;
        let words = [0, 1].map(|n| set.map.word(set.map.layout.sem(n)));
        let take = [SemBuf::new(1, -1, 0), SemBuf::new(0, -1, 0)];
        assert!(polls_before_queueing(&take));
        // Both there: the poll says go, and takes nothing itself.
        words[0].store(1, Ordering::SeqCst);
        words[1].store(1, Ordering::SeqCst);
        assert_eq!(set.poll_values(&take, None), Polled::Done(()));
        assert_eq!(set.get_all(), Ok(vec![1, 1]));
        // A sleeper queued on one of them: one look, then queue.
        words[1].store(sem_word::SLEEPERS | 1, Ordering::SeqCst);
        assert_eq!(set.poll_values(&take, None), Polled::Queue);
        // One short: the budget runs out (a deadline already passed ends it
        // after the first look).
        words[1].store(0, Ordering::SeqCst);
        assert_eq!(set.poll_values(&take, Some(Instant::now())), Polled::Spent);
        set.remove().unwrap();
    }

    #[test]
    fn only_calls_that_may_block_on_distinct_semaphores_poll() {
        let (down, up) = (SemBuf::new(0, -1, 0), SemBuf::new(1, 1, 0));
        assert!(polls_before_queueing(&[down, up]));
        assert!(polls_before_queueing(&[SemBuf::new(0, 0, 0), up]));
        assert!(polls_before_queueing(&[down, SemBuf::new(1, 1, SEM_UNDO)]));
        assert!(
            !polls_before_queueing(&[down]),
            "a single operation polls lock-free"
        );
        assert!(
            !polls_before_queueing(&[up, SemBuf::new(2, 1, 0)]),
            "posts never block"
        );
        assert!(!polls_before_queueing(&[
            down,
            SemBuf::new(1, 1, IPC_NOWAIT)
        ]));
        assert!(
            !polls_before_queueing(&[down, SemBuf::new(0, 1, 0)]),
            "a repeat"
        );
        assert!(!polls_before_queueing(&[down; POLL_MAX_OPS + 1]));
    }

    #[test]
    fn a_journal_that_names_words_outside_the_file_is_refused() {
        let scratch = Scratch::new(1);
        let set = &scratch.0;
        die_mid_transaction(set);
        let layout = set.map.layout;
        set.map
            .word(layout.journal)
            .store(u32::MAX, Ordering::SeqCst);
        assert_eq!(set.get_all(), Err(SemError::Invalid));
        // Nothing was written, and the lock was released.
        assert_eq!(value(&set.map, 0), 5);
        assert_eq!(set.map.load(header::LOCK), 0);
    }
}
