//! Where sets live: one file per set, `sem.<id>`, in one directory, and one
//! symbolic link per key, `key.<key in hex>`, naming its set's file.
//!
//! The directory is `$KSYNC_SEM_DIR`, or `/dev/shm/ksync-sem` (memory, like
//! the kernel's sets, and gone at reboot like them), or `/tmp/ksync-sem` on
//! a system without `/dev/shm`. It is created sticky and writable by
//! everyone, like `/tmp`, so any user may create sets and only a file's
//! owner (or a process with `CAP_FOWNER`) may remove it.
//!
//! Creating a set is atomic without a server: the file is built and
//! initialised under a temporary name, linked to its id's name (the link
//! fails if the id is taken) and only then bound to its key with a symbolic
//! link, whose creation fails if the key is taken: of two processes creating
//! the same key, exactly one wins, and the other opens the winner's set.

use std::ffi::{CStr, CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::layout::MAGIC;
use crate::sem::SemError;

/// The kernel's default `SEMMNI`: most sets in the directory.
pub const SEMMNI: usize = 32_000;

/// The directory that holds the sets: `$KSYNC_SEM_DIR`, else
/// `/dev/shm/ksync-sem`, else (no `/dev/shm`) `/tmp/ksync-sem`. Every
/// process must see the same one: they find each other's sets there.
pub fn sem_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KSYNC_SEM_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm/ksync-sem")
    } else {
        PathBuf::from("/tmp/ksync-sem")
    }
}

/// The directory, created (sticky, world-writable) if missing.
pub(super) fn ensure_dir() -> Result<PathBuf, SemError> {
    let dir = sem_dir();
    let c = cstr(&dir)?;
    // SAFETY: a valid C string.
    if unsafe { libc::mkdir(c.as_ptr(), 0o1777) } == 0 {
        // mkdir's mode is masked by the umask; the sticky world-writable mode is the point.
        // SAFETY: a valid C string.
        unsafe { libc::chmod(c.as_ptr(), 0o1777) };
    } else if errno() != libc::EEXIST {
        return Err(os_error(errno()));
    }
    Ok(dir)
}

pub(super) fn set_path(dir: &Path, id: i32) -> PathBuf {
    dir.join(format!("sem.{id}"))
}

pub(super) fn key_path(dir: &Path, key: i32) -> PathBuf {
    dir.join(format!("key.{:08x}", key as u32))
}

pub(super) fn cstr(path: &Path) -> Result<CString, SemError> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| SemError::Invalid)
}

pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The set error for a failed file-system call.
pub(super) fn os_error(errno: i32) -> SemError {
    match errno {
        libc::ENOENT => SemError::NotFound,
        libc::EACCES | libc::EROFS => SemError::Access,
        libc::EPERM => SemError::Permission,
        libc::EEXIST => SemError::Exists,
        libc::ENOSPC | libc::EDQUOT | libc::EMFILE | libc::ENFILE => SemError::NoSpace,
        libc::ENOMEM | libc::EFBIG => SemError::NoMemory,
        _ => SemError::Invalid,
    }
}

/// The id a key's link names, if the key is bound.
pub(super) fn id_of_key(dir: &Path, key: i32) -> Result<Option<i32>, SemError> {
    match std::fs::read_link(key_path(dir, key)) {
        Ok(target) => {
            let name = target.to_string_lossy().into_owned();
            let id = name
                .strip_prefix("sem.")
                .and_then(|id| id.parse::<i32>().ok())
                .ok_or(SemError::Invalid)?;
            Ok(Some(id))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(os_error(e.raw_os_error().unwrap_or(0))),
    }
}

/// The id of the set bound to `key` in the directory, if any: for a set
/// that cannot be opened by key ([`remove_other_version`](super::remove_other_version)).
pub fn key_id(key: i32) -> Result<Option<i32>, SemError> {
    id_of_key(&sem_dir(), key)
}

/// The mode a set's file gets for the set's mode `mode`: the group's and
/// others' bits as the set has them, so that the OS enforces them (their
/// execute bits too, which mean nothing to the file but which `semget`'s
/// check reads, as the kernel's does, for a process shut out), and read
/// and write for the file's owner whatever the set's owner bits say. The
/// file's owner (the set's creator, or the owner an `IPC_SET` with
/// `CAP_CHOWN` gave it) could `chmod` the file anyway, so the bits would
/// protect nothing from it; opened, it lets the owner do what the kernel
/// lets an owner its mode shuts out do (`IPC_SET`, `IPC_RMID`, and `semget`
/// without rights asked), while [`SharedSemSet`](super::SharedSemSet)
/// checks the set's own owner bits from the header.
pub(super) fn file_mode(mode: u32) -> libc::mode_t {
    ((mode & 0o777) | 0o600) as libc::mode_t
}

/// Opens set `id`'s file, read-write when the file's mode allows it, else
/// read-only; `None` when there is no such file, `EACCES` when the file's
/// mode shuts this process out (see [`SealedSemSet`](super::SealedSemSet)).
pub(super) fn open_file(dir: &Path, id: i32) -> Result<Option<(OwnedFd, bool)>, SemError> {
    let c = cstr(&set_path(dir, id))?;
    for (flags, writable) in [(libc::O_RDWR, true), (libc::O_RDONLY, false)] {
        match open_as(&c, flags) {
            Ok(fd) => return Ok(Some((fd, writable))),
            Err(libc::ENOENT) => return Ok(None),
            Err(libc::EACCES) => continue,
            Err(e) => return Err(os_error(e)),
        }
    }
    Err(SemError::Access)
}

/// Opens set `id`'s file for writing, if it exists and its mode lets this
/// process (a read-only handle's second try, after an `IPC_SET`).
pub(super) fn open_writable(dir: &Path, id: i32) -> Option<OwnedFd> {
    open_as(&cstr(&set_path(dir, id)).ok()?, libc::O_RDWR).ok()
}

/// Opens the set file at `path` with access `flags`, close-on-exec and
/// never through a link; the errno if it cannot.
fn open_as(path: &CStr, flags: i32) -> Result<OwnedFd, i32> {
    open_descriptor(path, flags | libc::O_NOFOLLOW, 0)
}

/// `open(2)`, close-on-exec, for a set's file; the errno if it fails.
pub(super) fn open_descriptor(path: &CStr, flags: i32, mode: libc::mode_t) -> Result<OwnedFd, i32> {
    // SAFETY: a valid C string.
    new_descriptor(|| unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, mode) })
}

/// A second descriptor, close-on-exec, for `fd`'s open file.
pub(super) fn duplicate(fd: &OwnedFd) -> Result<OwnedFd, i32> {
    // SAFETY: a descriptor we own.
    new_descriptor(|| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) })
}

/// The descriptor `make` returns (or the errno it leaves).
///
/// A process out of descriptors (`EMFILE`) raises its soft `RLIMIT_NOFILE`
/// ([`raise_descriptor_limit`]) and makes it once more. Every set a process
/// has used keeps a descriptor open until it exits (its byte-range locks,
/// which say it is alive, live on it), where the kernel's sets take none:
/// without this, a program that uses more sets than the usual soft limit
/// of 1024 would fail where it works on the kernel. The raised limit stays,
/// and programs it executes inherit it, as they would had it raised the
/// limit itself. It tries again whether or not this thread raised the
/// limit: another thread may have, between this one's failure and its look.
fn new_descriptor(make: impl Fn() -> libc::c_int) -> Result<OwnedFd, i32> {
    let try_once = || match make() {
        fd if fd >= 0 => Ok(fd),
        _ => Err(errno()),
    };
    let fd = match try_once() {
        Err(libc::EMFILE) => {
            raise_descriptor_limit();
            try_once()
        }
        done => done,
    }?;
    // SAFETY: a descriptor just made, which nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Doubles the soft `RLIMIT_NOFILE`, up to the hard limit: in steps, not
/// at once to a hard limit that may be a million, which the programs this
/// one executes would inherit (a loop closing every descriptor up to the
/// limit, a table sized by it).
fn raise_descriptor_limit() {
    // SAFETY: plain old data, filled by getrlimit.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0
        || limit.rlim_cur >= limit.rlim_max
    {
        return;
    }
    limit.rlim_cur = limit.rlim_cur.saturating_mul(2).max(64).min(limit.rlim_max);
    // SAFETY: a valid pointer to the limit to set.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
}

/// What the attributes of set `id`'s file say, read without opening it
/// (`stat` needs no right on the file): `(group, mode, size)`; `None` when
/// there is no such file.
pub(super) fn file_attributes(dir: &Path, id: i32) -> Result<Option<(u32, u32, u64)>, SemError> {
    let c = cstr(&set_path(dir, id))?;
    // SAFETY: plain old data, filled by lstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and out-pointer.
    if unsafe { libc::lstat(c.as_ptr(), &mut st) } != 0 {
        return match errno() {
            libc::ENOENT => Ok(None),
            e => Err(os_error(e)),
        };
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(SemError::Invalid);
    }
    Ok(Some((st.st_gid, st.st_mode & 0o777, st.st_size as u64)))
}

/// The ids of every set file in the directory.
pub fn set_ids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(sem_dir()) else {
        return Vec::new();
    };
    let mut ids: Vec<i32> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = OsString::into_vec(e.file_name());
            let name = String::from_utf8(name).ok()?;
            name.strip_prefix("sem.")?.parse().ok()
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// Removes `path` if it still exists; a missing file is not an error.
pub(super) fn unlink(path: &Path) -> Result<(), SemError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(os_error(e.raw_os_error().unwrap_or(0))),
    }
}

/// Unbinds `key` if its link still names set `id` (a later set may have
/// taken the key already).
pub(super) fn unbind_key(dir: &Path, key: i32, id: i32) {
    if matches!(id_of_key(dir, key), Ok(Some(bound)) if bound == id) {
        let _ = unlink(&key_path(dir, key));
    }
}

/// The layout version in the head of a set file open as `fd`: the magic
/// and the version are the first two words of every version's file.
pub(super) fn read_layout_version(fd: RawFd) -> Result<u32, SemError> {
    let mut head = [0u8; 8];
    // SAFETY: reads at most 8 bytes into `head`, from a live descriptor.
    let got = unsafe { libc::pread(fd, head.as_mut_ptr().cast(), 8, 0) };
    if got != 8 {
        return Err(SemError::Invalid);
    }
    let word = |i: usize| u32::from_ne_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    if word(0) != MAGIC {
        return Err(SemError::Invalid);
    }
    Ok(word(4))
}

/// Unlinks the key links that name set `id` (of any version).
pub(super) fn unbind_every_key(dir: &Path, id: i32) -> Result<(), SemError> {
    let target = format!("sem.{id}");
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.filter_map(|e| e.ok()) {
            let is_key = entry.file_name().to_string_lossy().starts_with("key.");
            if is_key
                && std::fs::read_link(entry.path()).is_ok_and(|t| t.as_os_str() == target.as_str())
            {
                unlink(&entry.path())?;
            }
        }
    }
    Ok(())
}

/// A random id for a new set: in `2^30 .. 2^31`, a range the kernel's own
/// ids reach only after 32768 reuses of one index, so a program that mixes
/// both rarely sees the same number twice.
pub(super) fn random_id() -> i32 {
    let mut bytes = [0u8; 4];
    // SAFETY: writes at most 4 bytes into `bytes`.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), 4, 0) };
    let r = if got == 4 {
        u32::from_ne_bytes(bytes)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (t.subsec_nanos() ^ std::process::id().rotate_left(16)).wrapping_mul(0x9e37_79b9)
    };
    ((r & 0x3fff_ffff) | 0x4000_0000) as i32
}
