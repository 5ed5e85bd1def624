//! Privilege as the kernel's System V checks ask for it: a capability in
//! the calling thread's effective set (`capget(2)`), not user id 0.

/// `CAP_IPC_OWNER` (`linux/capability.h`): the kernel's `ipcperms` lets a
/// caller with it past the mode bits.
pub(super) const CAP_IPC_OWNER: u32 = 15;
/// `CAP_SYS_ADMIN`: the kernel's `ipcctl_obtain_check` lets a caller with
/// it `IPC_SET` and `IPC_RMID` a set it neither owns nor created.
pub(super) const CAP_SYS_ADMIN: u32 = 21;

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set of capabilities.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Whether the calling thread has capability `cap` in its effective set,
/// as the kernel's checks ask (`capget(2)`), not whether its user id is 0:
/// root without the capability is refused, and a process of another user
/// that holds it is let through. One system call: only for the paths that
/// need privilege, never for a call whose rights are cached.
pub(super) fn capable(cap: u32) -> bool {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: version 3 fills two data structures, which `data` holds.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    };
    // A failure (a kernel without version 3, a seccomp filter) grants
    // nothing: the mode bits and ownership still decide.
    rc == 0
        && data
            .get(cap as usize / 32)
            .is_some_and(|d| d.effective & (1 << (cap % 32)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `capable` reads the calling thread's effective set, in both of
    /// capget's words, as the kernel shows it in `CapEff`.
    #[test]
    fn capable_reads_the_effective_set() {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let effective = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
            .unwrap();
        for cap in [0, CAP_IPC_OWNER, CAP_SYS_ADMIN, 31, 32, 40] {
            assert_eq!(
                capable(cap),
                effective & (1 << cap) != 0,
                "capability {cap}"
            );
        }
    }
}
