//! Processes a run forks, each sending its result back through a pipe, and
//! reaped on every path: [`Children::collect`] reads and reaps them within a
//! bound, and dropping [`Children`] (an error, a panic unwinding) kills and
//! reaps whatever is left, so a run leaves neither zombies nor orphans.
//!
//! A child is the forking thread alone: other threads of the parent do not
//! exist in it, and a lock one of them held at the fork stays held there.
//! So the parent forks before it starts threads of its own for the run, and
//! the child's body takes no lock another thread of the parent could hold.
//! The child ends with `_exit`: it never returns into the parent's frames
//! or runs destructors of values it only has copies of (a semaphore set
//! dropped there would be removed under the parent's feet).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// One forked child: its pid, the read end of its pipe, whether reaped.
struct Child {
    pid: libc::pid_t,
    pipe: OwnedFd,
    reaped: bool,
}

/// The children of one run (see the module documentation).
#[derive(Default)]
pub struct Children {
    children: Vec<Child>,
}

/// How a child ended, in words.
fn ended(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("was killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("ended with wait status {status:#x}")
    }
}

/// Writes all of `bytes` to `fd`; false if the pipe broke.
fn write_all(fd: libc::c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

impl Children {
    pub fn new() -> Children {
        Children::default()
    }

    /// Children forked so far.
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// Forks a child that runs `body` and sends the bytes it returns to
    /// [`collect`](Self::collect). The child exits with status 0 once they
    /// are sent, 2 if the pipe broke, 101 if `body` panicked; it is killed
    /// if this thread ends first (`PR_SET_PDEATHSIG`).
    ///
    /// # Safety
    ///
    /// `body` runs in a copy of this process that has only the calling
    /// thread: it must take no lock that another thread of this process may
    /// hold at the time of the call (the allocator and `pthread_create` are
    /// fine: glibc makes them safe across `fork`).
    pub unsafe fn fork(&mut self, body: impl FnOnce() -> Vec<u8>) -> Result<(), String> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(format!("pipe: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: two descriptors pipe2 just made, owned here.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: plain system calls.
        let parent = unsafe { libc::getpid() };
        // SAFETY: see the function's contract; the child never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!(
                "fork (after {} children): {}",
                self.children.len(),
                std::io::Error::last_os_error()
            ));
        }
        if pid == 0 {
            drop(read);
            // SAFETY: plain system calls. If the parent died before the
            // prctl, getppid already names another process: leave.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
            }
            let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                Ok(bytes) if write_all(write.as_raw_fd(), &bytes) => 0,
                Ok(_) => 2,
                Err(_) => 101,
            };
            // SAFETY: ends the child without running the parent's exit
            // handlers or anything's destructor.
            unsafe { libc::_exit(code) };
        }
        // The parent keeps only the read end: the pipe ends when the child does.
        drop(write);
        self.children.push(Child {
            pid,
            pipe: read,
            reaped: false,
        });
        Ok(())
    }

    /// An error if a child has ended already: a run that waits on its
    /// children (for them to start, say) learns at once that one died.
    pub fn check_alive(&mut self) -> Result<(), String> {
        for c in self.children.iter_mut().filter(|c| !c.reaped) {
            let mut status = 0;
            // SAFETY: our own child; WNOHANG does not wait.
            if unsafe { libc::waitpid(c.pid, &mut status, libc::WNOHANG) } == c.pid {
                c.reaped = true;
                return Err(format!("child process {} {}", c.pid, ended(status)));
            }
        }
        Ok(())
    }

    /// Every child's bytes, in fork order, once each has sent them, ended
    /// with status 0 and been reaped, all within `limit`; otherwise the
    /// first failure, and every child is killed and reaped (by the drop).
    pub fn collect(mut self, limit: Duration) -> Result<Vec<Vec<u8>>, String> {
        let deadline = Instant::now() + limit;
        let mut all = Vec::with_capacity(self.children.len());
        for c in &mut self.children {
            let bytes = read_to_end(&c.pipe, deadline)
                .map_err(|e| format!("child process {}: {e}", c.pid))?;
            let status = reap(c, deadline)?;
            if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                return Err(format!("child process {} {}", c.pid, ended(status)));
            }
            all.push(bytes);
        }
        Ok(all)
    }
}

/// Reads `pipe` until its writer has closed it, or fails at `deadline`.
fn read_to_end(pipe: &OwnedFd, deadline: Instant) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut pfd = libc::pollfd {
            fd: pipe.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(60_000) as i32) };
        if ready < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(format!("poll: {}", std::io::Error::last_os_error()));
        }
        if ready == 0 {
            if Instant::now() >= deadline {
                return Err("sent no result in time (stuck workers?); killed".into());
            }
            continue;
        }
        // SAFETY: `buf` is valid for its length.
        let n = unsafe { libc::read(pipe.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => return Ok(out),
            n if n > 0 => out.extend_from_slice(&buf[..n as usize]),
            _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
            _ => return Err(format!("read: {}", std::io::Error::last_os_error())),
        }
    }
}

/// Waits for `c` to end until `deadline`; then kills it. Its wait status.
fn reap(c: &mut Child, deadline: Instant) -> Result<libc::c_int, String> {
    loop {
        let mut status = 0;
        // SAFETY: our own child; WNOHANG does not wait.
        let rc = unsafe { libc::waitpid(c.pid, &mut status, libc::WNOHANG) };
        if rc == c.pid {
            c.reaped = true;
            return Ok(status);
        }
        if rc < 0 {
            c.reaped = true;
            return Err(format!(
                "waitpid {}: {}",
                c.pid,
                std::io::Error::last_os_error()
            ));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "child process {} sent its result but did not exit; killed",
                c.pid
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for c in self.children.iter_mut().filter(|c| !c.reaped) {
            // SAFETY: our own child, not yet reaped, so the pid is still
            // ours; SIGKILL ends it wherever it is, and the wait reaps it.
            unsafe {
                libc::kill(c.pid, libc::SIGKILL);
                let mut status = 0;
                while libc::waitpid(c.pid, &mut status, 0) < 0
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
                {
                }
            }
            c.reaped = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_and_failures_are_named() {
        let mut kids = Children::new();
        for i in 0..3u8 {
            // SAFETY: the body only allocates.
            unsafe { kids.fork(move || vec![i; 100_000 * usize::from(i)]) }.unwrap();
        }
        let got = kids.collect(Duration::from_secs(10)).unwrap();
        assert_eq!(
            got.iter().map(Vec::len).collect::<Vec<_>>(),
            [0, 100_000, 200_000]
        );

        let mut kids = Children::new();
        // SAFETY: the body takes no lock.
        unsafe { kids.fork(|| std::process::abort()) }.unwrap();
        let err = kids.collect(Duration::from_secs(10)).unwrap_err();
        assert!(err.contains("killed by signal 6"), "{err}");

        let mut kids = Children::new();
        // SAFETY: the body only sleeps.
        unsafe {
            kids.fork(|| {
                std::thread::sleep(Duration::from_secs(60));
                Vec::new()
            })
        }
        .unwrap();
        let pid = kids.children[0].pid;
        let err = kids.collect(Duration::from_millis(50)).unwrap_err();
        assert!(err.contains("in time"), "{err}");
        // Killed and reaped by the drop: the pid is no child of ours any more.
        // SAFETY: plain system call.
        assert_eq!(
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) },
            -1
        );
    }
}
