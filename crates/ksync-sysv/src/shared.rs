//! The backend that gives programs ksync's process-shared sets
//! ([`SharedSemSet`]): the library's default.
//!
//! It answers as the kernel does wherever a C program can tell, in the
//! kernel's order of checks (`ipc/sem.c`), with these mappings:
//!
//! * an id with no set, or whose set was removed before the call, is
//!   `EINVAL` for `semop` and `semctl` (the kernel no longer finds it); a
//!   call the removal overtakes (a sleeper, above all) gets `EIDRM`;
//! * `SEM_STAT` and `SEM_STAT_ANY` take an index into the sorted list of set
//!   ids, and `IPC_INFO`/`SEM_INFO` return the highest index in use;
//! * `semget`'s errors are `SharedSemSet::open`'s, which are the kernel's.
//!
//! Handles come from [`cache`], so a `semop` touches neither the file system
//! nor a lock before it reaches the set.

use core::time::Duration;

use libc::{c_int, key_t, sembuf, semid_ds, seminfo, timespec};

use ksync::sem::shared::{set_ids, Got, SealedSemSet};
use ksync::sem::{SemBuf, SemError, SharedSemSet, SharedSemStat, SEMMSL, SEMOPM, SEMVMX};

use crate::backend::Backend;
use crate::cache;
use crate::command::Command;
use crate::errno::Errno;
use crate::user::UserPtr;

/// ksync's process-shared sets, in files under `ksync::sem::shared::sem_dir()`.
pub struct SharedSets;

/// The kernel's default limits (`include/uapi/linux/sem.h`), which the
/// shared sets enforce, as `IPC_INFO` reports them.
mod limits {
    pub const SEMMNI: i32 = ksync::sem::shared::SEMMNI as i32;
    pub const SEMMSL: i32 = super::SEMMSL as i32;
    pub const SEMMNS: i32 = SEMMNI * SEMMSL;
    pub const SEMOPM: i32 = super::SEMOPM as i32;
    pub const SEMVMX: i32 = super::SEMVMX;
    pub const SEMAEM: i32 = SEMVMX;
    pub const SEMUME: i32 = SEMOPM;
    pub const SEMMNU: i32 = SEMMNS;
    pub const SEMMAP: i32 = SEMMNS;
    pub const SEMUSZ: i32 = 20;
}

/// Operations that fit here are copied without a heap allocation: the hot
/// path is one operation.
const INLINE_OPS: usize = 8;

// The library copies the caller's `struct sembuf`s straight into `SemBuf`s.
const _: () = {
    assert!(core::mem::size_of::<SemBuf>() == core::mem::size_of::<sembuf>());
    assert!(core::mem::align_of::<SemBuf>() == core::mem::align_of::<sembuf>());
};

fn errno(e: SemError) -> Errno {
    Errno(e.errno())
}

/// Runs `f` on set `semid` as a call by id must: `EINVAL` if there is no
/// such set or it was removed before the call (the id is then forgotten),
/// `f`'s own error otherwise, where a removal that overtook the call shows
/// as `EIDRM`. A set whose file this process may not open gets `sealed`'s
/// answer instead: the error the kernel gives before or instead of
/// `EACCES`, found from the file's attributes ([`SealedSemSet`]). Such a
/// set is not cached: the next call looks at the file again, and opens it
/// if an `IPC_SET` has opened it to this process meanwhile.
fn on_set<R>(
    semid: c_int,
    f: impl FnOnce(&SharedSemSet) -> Result<R, Errno>,
    sealed: impl FnOnce(&SealedSemSet) -> Errno,
) -> Result<R, Errno> {
    if semid < 0 {
        return Err(Errno::EINVAL);
    }
    let outcome = cache::with(semid, |set| {
        if set.is_removed() {
            return None;
        }
        Some(f(set))
    });
    match outcome {
        Ok(Some(Err(e))) if e.0 == libc::EIDRM => {
            cache::forget(semid);
            Err(e)
        }
        Ok(Some(done)) => done,
        Ok(None) => {
            cache::forget(semid);
            Err(Errno::EINVAL)
        }
        Err(SemError::NotFound | SemError::Removed) => Err(Errno::EINVAL),
        Err(SemError::Access) => match SealedSemSet::of(semid) {
            Ok(set) => Err(sealed(&set)),
            // Gone since the open failed.
            Err(SemError::NotFound) => Err(Errno::EINVAL),
            Err(e) => Err(errno(e)),
        },
        Err(e) => Err(errno(e)),
    }
}

/// [`on_set`]'s answer for a sealed set to a call that needs read or alter
/// permission and checks it first: `EACCES`.
fn refused(set: &SealedSemSet) -> Errno {
    errno(set.check_access(false).err().unwrap_or(SemError::Access))
}

/// [`on_set`]'s answer for a sealed set to `IPC_SET` and `IPC_RMID`, which
/// go by ownership: `EPERM`.
fn not_owner(set: &SealedSemSet) -> Errno {
    errno(set.owner_only().err().unwrap_or(SemError::Permission))
}

/// `semnum` for a `GET` command: read permission first, then the number,
/// as the kernel checks them.
fn number(set: &SharedSemSet, semnum: c_int) -> Result<usize, Errno> {
    set.check_access(false).map_err(errno)?;
    usize::try_from(semnum)
        .ok()
        .filter(|&n| n < set.nsems())
        .ok_or(Errno::EINVAL)
}

fn seconds(time: std::time::SystemTime) -> libc::time_t {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as libc::time_t)
}

/// `struct semid_ds` from what a shared set reports; `__seq` and the
/// reserved words stay zero.
fn semid_ds_of(stat: &SharedSemStat) -> semid_ds {
    // SAFETY: semid_ds is a plain C structure; all zeroes is a valid value.
    let mut ds: semid_ds = unsafe { core::mem::zeroed() };
    ds.sem_perm.__key = stat.key;
    ds.sem_perm.uid = stat.uid;
    ds.sem_perm.gid = stat.gid;
    ds.sem_perm.cuid = stat.cuid;
    ds.sem_perm.cgid = stat.cgid;
    // `c_ushort` on x86-64, `c_uint` on AArch64.
    ds.sem_perm.mode = stat.mode as _;
    ds.sem_otime = stat.otime.map_or(0, seconds);
    ds.sem_ctime = seconds(stat.ctime);
    ds.sem_nsems = stat.nsems as _;
    ds
}

/// `IPC_INFO` (`usage == false`) or `SEM_INFO`: the limits, and for
/// `SEM_INFO` the sets (`semusz`) and semaphores (`semaem`) in use; returns
/// the highest index `SEM_STAT` accepts (0 with no set, as the kernel).
fn info(out: UserPtr<seminfo>, usage: bool) -> Result<c_int, Errno> {
    let ids = set_ids();
    let (semusz, semaem) = if usage {
        // A set this process cannot open (its file's mode) is counted as a
        // set but its semaphores are not: see the crate's documentation.
        let semaphores: usize = ids
            .iter()
            .filter_map(|&id| SharedSemSet::open_id(id).ok())
            .map(|set| set.nsems())
            .sum();
        (
            ids.len() as c_int,
            semaphores.min(c_int::MAX as usize) as c_int,
        )
    } else {
        (limits::SEMUSZ, limits::SEMAEM)
    };
    let info = seminfo {
        semmap: limits::SEMMAP,
        semmni: limits::SEMMNI,
        semmns: limits::SEMMNS,
        semmnu: limits::SEMMNU,
        semmsl: limits::SEMMSL,
        semopm: limits::SEMOPM,
        semume: limits::SEMUME,
        semusz,
        semvmx: limits::SEMVMX,
        semaem,
    };
    out.write(&info)?;
    Ok(ids.len().saturating_sub(1) as c_int)
}

/// `SEM_STAT` (`any == false`: read permission needed) and `SEM_STAT_ANY`:
/// the set at `index` in the sorted list of ids; returns its id.
fn stat_index(index: c_int, out: UserPtr<semid_ds>, any: bool) -> Result<c_int, Errno> {
    let id = usize::try_from(index)
        .ok()
        .and_then(|i| set_ids().get(i).copied())
        .ok_or(Errno::EINVAL)?;
    // SEM_STAT_ANY's lack of a check cannot go further than the file's
    // mode lets this process open it (a sealed set is refused), but a set
    // whose own mode shuts out a process that has its file open (an owner
    // at mode 0, root without CAP_IPC_OWNER, a child of a process that
    // used the set) is read, as the kernel reads it.
    let stat = on_set(
        id,
        |set| if any { set.stat_any() } else { set.stat() }.map_err(errno),
        refused,
    )?;
    out.write(&semid_ds_of(&stat))?;
    Ok(id)
}

/// A `timespec` as `semtimedop` takes it: `EINVAL` unless `tv_sec >= 0` and
/// `0 <= tv_nsec < 10^9`.
fn duration(ts: timespec) -> Result<Duration, Errno> {
    let secs = u64::try_from(ts.tv_sec).map_err(|_| Errno::EINVAL)?;
    let nanos = u32::try_from(ts.tv_nsec)
        .ok()
        .filter(|&n| n < 1_000_000_000)
        .ok_or(Errno::EINVAL)?;
    Ok(Duration::new(secs, nanos))
}

impl Backend for SharedSets {
    fn get(&self, key: key_t, nsems: c_int, flags: c_int) -> Result<c_int, Errno> {
        let nsems = usize::try_from(nsems).map_err(|_| Errno::EINVAL)?;
        match SharedSemSet::get(key, nsems, flags).map_err(errno)? {
            Got::Open(set) => {
                let id = set.id();
                cache::remember(set);
                Ok(id)
            }
            // Found, and the flags asked for no right the mode refuses:
            // the kernel answers with the id, which later calls look up.
            Got::Sealed(sealed) => Ok(sealed.id()),
        }
    }

    fn operate(
        &self,
        semid: c_int,
        sops: UserPtr<sembuf>,
        nsops: usize,
        timeout: Option<UserPtr<timespec>>,
    ) -> Result<(), Errno> {
        // The kernel's order (ipc/sem.c): the timeout is copied first
        // (EFAULT), then nsops is checked (E2BIG, then EINVAL for 0), the
        // operations are copied (EFAULT), semid is checked, the timeout's
        // value is checked, and only then is the set looked up.
        let timeout = timeout.map(UserPtr::read).transpose()?;
        // The system call takes nsops as an unsigned int: glibc's size_t
        // loses its high half on the way, and so it does here.
        let nsops = nsops as u32 as usize;
        if nsops > SEMOPM {
            return Err(Errno(libc::E2BIG));
        }
        if nsops == 0 {
            return Err(Errno::EINVAL);
        }
        let mut inline = [SemBuf::default(); INLINE_OPS];
        let mut heap = Vec::new();
        let ops: &mut [SemBuf] = if nsops <= INLINE_OPS {
            &mut inline[..nsops]
        } else {
            heap.resize(nsops, SemBuf::default());
            &mut heap
        };
        UserPtr::<SemBuf>::new(sops.addr()).read_into(ops)?;
        if semid < 0 {
            return Err(Errno::EINVAL);
        }
        let timeout = timeout.map(duration).transpose()?;
        let ops: &[SemBuf] = ops;
        on_set(
            semid,
            |set| set.semtimedop(ops, timeout).map_err(errno),
            // The kernel checks the numbers against the set's size before
            // the rights (EFBIG before EACCES).
            |sealed| {
                if ops.iter().any(|op| usize::from(op.num) >= sealed.nsems()) {
                    Errno(libc::EFBIG)
                } else {
                    refused(sealed)
                }
            },
        )
    }

    /// One operation that the set's lock-free path does, on a set this
    /// thread used last, with its `sembuf` (and `timespec`) where the
    /// library may read it directly: the `semop` of a program's hot loop.
    /// Every check that could fail sends the call to `operate`, which
    /// answers in the kernel's order; a success has passed them all.
    #[inline]
    fn operate_at_once(
        &self,
        semid: c_int,
        sops: UserPtr<sembuf>,
        nsops: usize,
        timeout: Option<UserPtr<timespec>>,
    ) -> bool {
        if nsops != 1 || semid < 0 {
            return false;
        }
        if let Some(timeout) = timeout {
            // SAFETY: timespec is a plain C structure; all zeroes is valid.
            let mut ts = [unsafe { core::mem::zeroed::<timespec>() }];
            if !timeout.read_known(&mut ts) || duration(ts[0]).is_err() {
                return false;
            }
        }
        let mut op = [SemBuf::default()];
        if !UserPtr::<SemBuf>::new(sops.addr()).read_known(&mut op) {
            return false;
        }
        cache::with_recent(semid, |set| set.try_semop_lock_free(op[0])).unwrap_or(false)
    }

    fn control(&self, semid: c_int, semnum: c_int, command: Command) -> Result<c_int, Errno> {
        // The kernel rejects a negative id before it looks at the command.
        if semid < 0 {
            return Err(Errno::EINVAL);
        }
        match command {
            Command::Info(out) => info(out, false),
            Command::UsageInfo(out) => info(out, true),
            Command::StatIndex(out) => stat_index(semid, out, false),
            Command::StatIndexAny(out) => stat_index(semid, out, true),
            Command::Stat(out) => {
                let stat = on_set(semid, |set| set.stat().map_err(errno), refused)?;
                out.write(&semid_ds_of(&stat))?;
                Ok(0)
            }
            Command::Set(input) => {
                // Copied before the set is looked up, as the kernel does.
                let ds = input.read()?;
                on_set(
                    semid,
                    |set| {
                        let perm = ds.sem_perm;
                        set.set_perm(perm.uid, perm.gid, u32::from(perm.mode))
                            .map_err(errno)
                    },
                    not_owner,
                )?;
                Ok(0)
            }
            Command::Remove => {
                on_set(semid, |set| set.remove().map_err(errno), not_owner)?;
                cache::forget(semid);
                Ok(0)
            }
            Command::GetAll(out) => on_set(
                semid,
                |set| {
                    let values = set.get_all().map_err(errno)?;
                    out.write_slice(&values)?;
                    Ok(0)
                },
                refused,
            ),
            Command::SetAll(input) => on_set(
                semid,
                |set| {
                    // Alter permission before the array is read (EACCES before
                    // EFAULT), as the kernel checks them.
                    set.check_access(true).map_err(errno)?;
                    let values = input.read_slice(set.nsems())?;
                    set.set_all(&values).map_err(errno)?;
                    Ok(0)
                },
                refused,
            ),
            Command::GetValue => on_set(
                semid,
                |set| {
                    let num = number(set, semnum)?;
                    set.get_value(num).map_err(errno)
                },
                refused,
            ),
            Command::GetPid => on_set(
                semid,
                |set| {
                    let num = number(set, semnum)?;
                    set.pid(num).map_err(errno)
                },
                refused,
            ),
            Command::GetWaitingForIncrease => on_set(
                semid,
                |set| {
                    let num = number(set, semnum)?;
                    set.ncnt(num).map(|n| n as c_int).map_err(errno)
                },
                refused,
            ),
            Command::GetWaitingForZero => on_set(
                semid,
                |set| {
                    let num = number(set, semnum)?;
                    set.zcnt(num).map(|n| n as c_int).map_err(errno)
                },
                refused,
            ),
            Command::SetValue(value) => {
                // The value is checked before the set is looked up.
                if !(0..=SEMVMX).contains(&value) {
                    return Err(Errno(libc::ERANGE));
                }
                // A negative number is out of range, as in the kernel.
                let num = usize::try_from(semnum).unwrap_or(usize::MAX);
                on_set(
                    semid,
                    |set| set.set_value(num, value).map_err(errno),
                    // SETVAL checks the number before the rights.
                    |sealed| {
                        if num >= sealed.nsems() {
                            Errno::EINVAL
                        } else {
                            refused(sealed)
                        }
                    },
                )?;
                Ok(0)
            }
        }
    }
}
