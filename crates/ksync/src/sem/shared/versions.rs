//! Set files of another layout version, made by an older or newer ksync:
//! naming their version and removing them.
//!
//! Reading a file's head must not close a descriptor of a set this process
//! has mapped: closing any descriptor of a file drops every POSIX lock the
//! process holds on it, its slot's liveness lock among them (`procs.rs`),
//! and the other processes would then take it for dead. So a file this
//! process has mapped is read through its mapping.

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use super::dir::{self, open_file, read_layout_version, sem_dir, set_path, unlink};
use super::layout::VERSION;
use super::privilege::{capable, CAP_SYS_ADMIN};
use super::procs::registry;
use crate::sem::SemError;

/// The layout version a set file of another ksync holds.
///
/// Each ksync reads one version of the set file's layout
/// ([`LAYOUT_VERSION`]) and refuses the others with `EINVAL`: a set made by
/// an older or a newer ksync. Those two words, the magic and the version,
/// sit at the head of every version's file.
pub fn file_layout_version(id: i32) -> Result<u32, SemError> {
    let dir = sem_dir();
    let path = set_path(&dir, id);
    // Held while the file is open here, so that no thread of this process
    // maps it (and takes its slot's lock) before the descriptor is closed.
    let reg = registry();
    if let Ok(meta) = std::fs::metadata(&path) {
        if let Some(map) = reg.find(meta.dev(), meta.ino()) {
            // Its descriptor may even be one the program closed
            // (`Mapping::reopen_if_closed`).
            use super::layout::{header, MAGIC};
            if map.load(header::MAGIC) != MAGIC {
                return Err(SemError::Invalid);
            }
            return Ok(map.load(header::VERSION));
        }
    }
    let (fd, _) = open_file(&dir, id)?.ok_or(SemError::NotFound)?;
    let version = read_layout_version(fd.as_raw_fd());
    drop(fd);
    drop(reg);
    version
}

/// The set file layout this ksync reads and writes: a file of another
/// version, made by an older or newer ksync, gives `EINVAL` when opened
/// ([`file_layout_version`] says which it is;
/// [`remove_other_version`] removes it).
pub const LAYOUT_VERSION: u32 = VERSION;

/// Removes set `id`, whose file holds another layout version than this
/// ksync's, and returns that version: unlinks the key links that name it and
/// the file. Only the file's owner or a process with `CAP_SYS_ADMIN` may,
/// as only they may remove a set of this version (`EPERM`); in the sticky
/// directory, one that does not own the links and the file also needs
/// `CAP_FOWNER` to unlink them. Processes that still use the set through
/// the ksync that made it keep it until they let go of it, and are not
/// told: stop them first. `EINVAL` when the file is of this
/// version (remove it with [`SharedSemSet::remove`](super::SharedSemSet::remove),
/// which tells its users) or is no ksync set at all.
pub fn remove_other_version(id: i32) -> Result<u32, SemError> {
    let version = file_layout_version(id)?;
    if version == VERSION {
        return Err(SemError::Invalid);
    }
    let dir = sem_dir();
    let path = set_path(&dir, id);
    let owner = std::fs::symlink_metadata(&path)
        .map_err(|e| dir::os_error(e.raw_os_error().unwrap_or(0)))?
        .uid();
    // SAFETY: no arguments.
    let euid = unsafe { libc::geteuid() };
    if euid != owner && !capable(CAP_SYS_ADMIN) {
        return Err(SemError::Permission);
    }
    dir::unbind_every_key(&dir, id)?;
    unlink(&path)?;
    Ok(version)
}
