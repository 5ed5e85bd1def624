//! Shared helpers for the `ksync::sem` conformance suites: the machine's own
//! System V semaphore sets as the oracle, and one trait over both sides so a
//! scenario can run unchanged against `SemSet` and against the kernel.
//!
//! Availability: when `semget` fails with `ENOSYS` (kernel built without
//! SysV IPC), `ENOSPC` (no set left to create) or `EPERM`/`EACCES`
//! (a sandbox forbids it), the kernel side is *skipped loudly*: a banner on
//! stderr, and the test returns without checking anything against the
//! kernel (a test that goes on with its ksync halves says in the banner what
//! still runs). Setting `KSYNC_REQUIRE_SYSV=1` turns that skip into a failure
//! (for CI machines where the oracle must run). Any other `semget` error,
//! or a failure after the first set was created, fails the test: a run is
//! never reported as passed when only part of it ran. `KSYNC_SEM_NO_KERNEL=1`
//! takes the skip path on purpose.
#![allow(dead_code)]

use ksync::sem::{
    SemBuf, SemCounters, SemError, SemSet, SemUndo, SharedSemSet, IPC_CREAT, IPC_PRIVATE,
};
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::PATIENCE;

fn last_errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A kernel semaphore set (`semget(IPC_PRIVATE, n, 0600 | IPC_CREAT)`),
/// removed with `IPC_RMID` when dropped (also while unwinding from a
/// panic), so no set outlives the test.
pub struct KernelSet {
    id: libc::c_int,
    nsems: usize,
    removed: AtomicBool,
}

/// The errno of a failed call, or the value of a successful one.
pub type KResult<T> = Result<T, i32>;

impl KernelSet {
    pub fn new(nsems: usize) -> io::Result<KernelSet> {
        // SAFETY: plain syscall wrapper, no pointers.
        let id = unsafe {
            libc::semget(
                libc::IPC_PRIVATE,
                nsems as libc::c_int,
                0o600 | libc::IPC_CREAT,
            )
        };
        if id < 0 {
            return Err(io::Error::last_os_error());
        }
        LIVE.lock().unwrap_or_else(|p| p.into_inner()).push(id);
        Ok(KernelSet {
            id,
            nsems,
            removed: AtomicBool::new(false),
        })
    }

    /// Like `new`, for tests that already know SysV IPC works (checked with
    /// `sysv_available`): any failure now is a test failure.
    pub fn create(nsems: usize) -> KernelSet {
        KernelSet::new(nsems).unwrap_or_else(|e| panic!("semget({nsems}) failed mid-test: {e}"))
    }

    pub fn id(&self) -> libc::c_int {
        self.id
    }

    pub fn nsems(&self) -> usize {
        self.nsems
    }

    /// `sops` as the kernel's `struct sembuf`s.
    pub fn to_kernel(sops: &[SemBuf]) -> Vec<libc::sembuf> {
        sops.iter()
            .map(|s| libc::sembuf {
                sem_num: s.num,
                sem_op: s.op,
                sem_flg: s.flags,
            })
            .collect()
    }

    /// `semop(2)`; any nsops, also 0 and > SEMOPM (the kernel checks the
    /// count before it reads the array).
    pub fn semop(&self, sops: &[SemBuf]) -> KResult<()> {
        let mut k = Self::to_kernel(sops);
        // One spare element so the pointer is valid even for nsops 0.
        k.push(libc::sembuf {
            sem_num: 0,
            sem_op: 0,
            sem_flg: 0,
        });
        // SAFETY: `k` holds at least `sops.len()` valid sembufs.
        let r = unsafe { libc::semop(self.id, k.as_mut_ptr(), sops.len()) };
        if r == 0 {
            Ok(())
        } else {
            Err(last_errno())
        }
    }

    /// `semtimedop(2)` (raw syscall; glibc's wrapper is not in `libc`).
    /// `None` is a NULL timeout, i.e. plain `semop`.
    pub fn semtimedop(&self, sops: &[SemBuf], timeout: Option<Duration>) -> KResult<()> {
        kernel_semtimedop(self.id, sops, timeout)
    }

    fn ctl(&self, num: libc::c_int, cmd: libc::c_int, arg: libc::c_ulong) -> KResult<i32> {
        // SAFETY: `arg` is an integer or a pointer the caller keeps valid for
        // the command (GETALL/SETALL: nsems u16s; IPC_STAT: a semid_ds).
        let r = unsafe { libc::semctl(self.id, num, cmd, arg) };
        if r < 0 {
            Err(last_errno())
        } else {
            Ok(r)
        }
    }

    pub fn get_value(&self, num: i32) -> KResult<i32> {
        self.ctl(num, libc::GETVAL, 0)
    }

    pub fn set_value(&self, num: i32, value: i32) -> KResult<()> {
        // semun.val: an int, sign-extended into the register the kernel reads.
        self.ctl(num, libc::SETVAL, value as libc::c_long as libc::c_ulong)
            .map(drop)
    }

    pub fn get_all(&self) -> KResult<Vec<u16>> {
        let mut v = vec![0u16; self.nsems];
        self.ctl(0, libc::GETALL, v.as_mut_ptr() as libc::c_ulong)?;
        Ok(v)
    }

    /// SETALL. The kernel reads exactly nsems values, so a slice of another
    /// length cannot be expressed here.
    pub fn set_all(&self, values: &[u16]) -> KResult<()> {
        assert_eq!(values.len(), self.nsems, "kernel SETALL needs nsems values");
        let mut v = values.to_vec();
        self.ctl(0, libc::SETALL, v.as_mut_ptr() as libc::c_ulong)
            .map(drop)
    }

    pub fn ncnt(&self, num: i32) -> KResult<i32> {
        self.ctl(num, libc::GETNCNT, 0)
    }

    pub fn zcnt(&self, num: i32) -> KResult<i32> {
        self.ctl(num, libc::GETZCNT, 0)
    }

    pub fn pid(&self, num: i32) -> KResult<i32> {
        self.ctl(num, libc::GETPID, 0)
    }

    /// IPC_STAT: (nsems, sem_otime in seconds, sem_ctime in seconds).
    pub fn stat(&self) -> KResult<(usize, i64, i64)> {
        // SAFETY: semid_ds is plain old data; all-zero is a valid value.
        let mut ds: libc::semid_ds = unsafe { std::mem::zeroed() };
        self.ctl(
            0,
            libc::IPC_STAT,
            &mut ds as *mut libc::semid_ds as libc::c_ulong,
        )?;
        Ok((
            ds.sem_nsems as usize,
            ds.sem_otime as i64,
            ds.sem_ctime as i64,
        ))
    }

    pub fn remove(&self) -> KResult<()> {
        let r = self.ctl(0, libc::IPC_RMID, 0).map(drop);
        if r.is_ok() {
            self.removed.store(true, Ordering::SeqCst);
            unregister(self.id);
        }
        r
    }
}

impl Drop for KernelSet {
    fn drop(&mut self) {
        if !self.removed.load(Ordering::SeqCst) {
            // SAFETY: plain syscall wrapper.
            unsafe { libc::semctl(self.id, 0, libc::IPC_RMID, 0 as libc::c_ulong) };
            unregister(self.id);
        }
    }
}

/// `semtimedop(2)` on kernel set `id` (raw syscall; glibc's wrapper is not
/// in `libc`), any nsops; `None` is a NULL timeout, i.e. plain `semop`.
pub fn kernel_semtimedop(
    id: libc::c_int,
    sops: &[SemBuf],
    timeout: Option<Duration>,
) -> KResult<()> {
    let mut k = KernelSet::to_kernel(sops);
    // One spare element so the pointer is valid even for nsops 0.
    k.push(libc::sembuf {
        sem_num: 0,
        sem_op: 0,
        sem_flg: 0,
    });
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `k` holds at least `sops.len()` sembufs, `tsp` is NULL or
    // points to a live timespec.
    let r = unsafe {
        libc::syscall(
            libc::SYS_semtimedop,
            id as libc::c_long,
            k.as_mut_ptr(),
            sops.len() as libc::c_long,
            tsp,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// Ids of the kernel sets this process created and has not removed yet, so
/// the watchdog can remove them before it aborts the process.
static LIVE: Mutex<Vec<libc::c_int>> = Mutex::new(Vec::new());

fn unregister(id: libc::c_int) {
    LIVE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|&x| x != id);
}

/// Aborts the whole test process if it is still armed after `limit`: a test
/// that hangs (a lost wakeup leaves a thread asleep that nothing can wake)
/// fails loudly instead of hanging the run. Before aborting it removes
/// every kernel set still alive, so none leaks. Disarmed when dropped.
pub struct Watchdog {
    armed: Arc<AtomicBool>,
}

impl Watchdog {
    pub fn arm(test: &'static str, limit: Duration) -> Watchdog {
        let armed = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&armed);
        thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < limit {
                if !flag.load(Ordering::SeqCst) {
                    return;
                }
                thread::sleep(Duration::from_millis(20));
            }
            if flag.load(Ordering::SeqCst) {
                // Straight to the stream: the test harness's capture of
                // eprintln! output would be lost with the abort.
                let _ = writeln!(
                    io::stderr(),
                    "!!! WATCHDOG: {test} still running after {limit:?}: hung; aborting"
                );
                for id in LIVE.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
                    // SAFETY: plain syscall wrapper.
                    unsafe { libc::semctl(id, 0, libc::IPC_RMID, 0 as libc::c_ulong) };
                }
                std::process::abort();
            }
        });
        Watchdog { armed }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.armed.store(false, Ordering::SeqCst);
    }
}

/// Removes the set if dropped while panicking, so sleepers blocked in it
/// get EIDRM and a `thread::scope` can join them instead of hanging. Create
/// it inside the scope closure, before spawning sleepers.
pub struct RmOnPanic<'a, S: Sems>(pub &'a S);

impl<S: Sems> Drop for RmOnPanic<'_, S> {
    fn drop(&mut self) {
        if thread::panicking() {
            let _ = self.0.rm();
        }
    }
}

/// Joins a scoped thread, failing (not hanging) if it does not finish
/// within [`PATIENCE`]; a panic in the thread is propagated.
pub fn finish<T>(what: &str, h: thread::ScopedJoinHandle<'_, T>) -> T {
    finish_within(what, h, PATIENCE)
}

/// `finish` with a longer limit, for threads that do a lot of work.
pub fn finish_within<T>(what: &str, h: thread::ScopedJoinHandle<'_, T>, limit: Duration) -> T {
    let start = Instant::now();
    while !h.is_finished() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for: {what}"
        );
        thread::sleep(Duration::from_micros(200));
    }
    match h.join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Whether the kernel oracle can run. Prints a loud banner on stderr and
/// returns false when SysV IPC is unavailable (see the module comment);
/// panics instead when `KSYNC_REQUIRE_SYSV` is set, or on an unexpected error.
pub fn sysv_available(test: &str) -> bool {
    kernel_or_banner(test, None)
}

/// [`sysv_available`] for a test that goes on without the kernel: its banner
/// names what still runs (`still_runs`), so a reader does not take the whole
/// test for skipped.
pub fn sysv_available_else_running(test: &str, still_runs: &str) -> bool {
    kernel_or_banner(test, Some(still_runs))
}

fn kernel_or_banner(test: &str, still_runs: Option<&str>) -> bool {
    // `KSYNC_SEM_NO_KERNEL=1` takes the skip path on purpose (to check it, or
    // to run only the ksync halves).
    let probe = if std::env::var_os("KSYNC_SEM_NO_KERNEL").is_some() {
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    } else {
        KernelSet::new(1)
    };
    match probe {
        Ok(_probe) => true,
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(0);
            let expected = [libc::ENOSYS, libc::ENOSPC, libc::EPERM, libc::EACCES];
            if !expected.contains(&errno) {
                panic!("{test}: semget failed unexpectedly: {e}");
            }
            if std::env::var_os("KSYNC_REQUIRE_SYSV").is_some() {
                panic!("{test}: SysV IPC unavailable ({e}) and KSYNC_REQUIRE_SYSV is set");
            }
            match still_runs {
                None => say_loudly(&format!(
                    "SKIPPED {test}: SysV semaphores unavailable here ({e}).\n\
                     Nothing was compared against the kernel. Set KSYNC_REQUIRE_SYSV=1\n\
                     to make this a failure."
                )),
                Some(runs) => say_loudly(&format!(
                    "KERNEL LEFT OUT of {test}: SysV semaphores unavailable here\n\
                     ({e}).\n\
                     Skipped: every comparison against the kernel.\n\
                     Still run: {runs}.\n\
                     Set KSYNC_REQUIRE_SYSV=1 to make the kernel's absence a failure."
                )),
            }
            false
        }
    }
}

/// Writes `lines` between two rows of `!`, each line after `!!! `, straight
/// to the process's stderr: the test harness captures `eprintln!` output of
/// passing tests, and what a test did not check must be seen.
pub fn say_loudly(lines: &str) {
    let bang = "!".repeat(72);
    let mut text = format!("\n{bang}\n");
    for line in lines.lines() {
        text += &format!("!!! {line}\n");
    }
    text += &bang;
    let _ = writeln!(io::stderr(), "{text}");
}

/// `std::process::id()` as GETPID reports it.
pub fn my_pid() -> i32 {
    std::process::id() as i32
}

/// One interface over a `SemSet` and a kernel set, errors as errno values, so
/// a scenario runs unchanged on both and asserts the same outcome.
///
/// Undo: on the ksync side `op_undo` records into the given `SemUndo`; on
/// the kernel side the undo list belongs to the process, so the `SemUndo`
/// argument is ignored there (and adjustments are only applied at process
/// exit, i.e. never while the set exists).
pub trait Sems: Sync {
    const NAME: &'static str;
    fn nsems(&self) -> usize;
    fn op(&self, sops: &[SemBuf], timeout: Option<Duration>) -> KResult<()>;
    fn op_undo(&self, sops: &[SemBuf], undo: &SemUndo, timeout: Option<Duration>) -> KResult<()>;
    fn val(&self, num: usize) -> KResult<i32>;
    fn setval(&self, num: usize, value: i32) -> KResult<()>;
    fn all(&self) -> KResult<Vec<u16>>;
    fn setall(&self, values: &[u16]) -> KResult<()>;
    fn ncnt(&self, num: usize) -> KResult<usize>;
    fn zcnt(&self, num: usize) -> KResult<usize>;
    fn pid(&self, num: usize) -> KResult<i32>;
    /// Whether a semop has succeeded yet (otime set).
    fn otime_set(&self) -> KResult<bool>;
    fn rm(&self) -> KResult<()>;
    /// The errno every call on a removed set gives (the kernel no longer
    /// finds the id: EINVAL; ksync keeps the set and says EIDRM).
    fn stale_errno() -> i32;
    /// ksync's counts of the set's work; the kernel keeps none.
    fn counters(&self) -> Option<SemCounters> {
        None
    }
    /// Sleepers a shared set's periodic sweep had to complete or wake
    /// (`RecoveryStats::swept`): with every process alive, wake-ups lost.
    /// The other sets have no sweep.
    fn swept(&self) -> u32 {
        0
    }
    /// Wake-ups a shared set's wakers owe and have not made
    /// (`RecoveryStats::wakes_owed`): once every thread is out of its calls,
    /// wake-ups forgotten. The other sets keep no count.
    fn wakes_owed(&self) -> u32 {
        0
    }
}

fn e(err: SemError) -> i32 {
    err.errno()
}

impl Sems for SemSet {
    const NAME: &'static str = "ksync";
    fn nsems(&self) -> usize {
        SemSet::nsems(self)
    }
    fn op(&self, sops: &[SemBuf], timeout: Option<Duration>) -> KResult<()> {
        match timeout {
            None => self.semop(sops).map_err(e),
            t => self.semtimedop(sops, t).map_err(e),
        }
    }
    fn op_undo(&self, sops: &[SemBuf], undo: &SemUndo, timeout: Option<Duration>) -> KResult<()> {
        self.semop_undo(sops, undo, timeout).map_err(e)
    }
    fn val(&self, num: usize) -> KResult<i32> {
        self.get_value(num).map_err(e)
    }
    fn setval(&self, num: usize, value: i32) -> KResult<()> {
        self.set_value(num, value).map_err(e)
    }
    fn all(&self) -> KResult<Vec<u16>> {
        self.get_all().map_err(e)
    }
    fn setall(&self, values: &[u16]) -> KResult<()> {
        self.set_all(values).map_err(e)
    }
    fn ncnt(&self, num: usize) -> KResult<usize> {
        SemSet::ncnt(self, num).map_err(e)
    }
    fn zcnt(&self, num: usize) -> KResult<usize> {
        SemSet::zcnt(self, num).map_err(e)
    }
    fn pid(&self, num: usize) -> KResult<i32> {
        SemSet::pid(self, num).map_err(e)
    }
    fn otime_set(&self) -> KResult<bool> {
        self.stat().map(|s| s.otime.is_some()).map_err(e)
    }
    fn rm(&self) -> KResult<()> {
        self.remove().map_err(e)
    }
    fn stale_errno() -> i32 {
        libc::EIDRM
    }
    fn counters(&self) -> Option<SemCounters> {
        Some(SemSet::counters(self))
    }
}

impl Sems for KernelSet {
    const NAME: &'static str = "kernel";
    fn nsems(&self) -> usize {
        self.nsems
    }
    fn op(&self, sops: &[SemBuf], timeout: Option<Duration>) -> KResult<()> {
        match timeout {
            None => self.semop(sops),
            t => self.semtimedop(sops, t),
        }
    }
    fn op_undo(&self, sops: &[SemBuf], _undo: &SemUndo, timeout: Option<Duration>) -> KResult<()> {
        self.op(sops, timeout)
    }
    fn val(&self, num: usize) -> KResult<i32> {
        self.get_value(num as i32)
    }
    fn setval(&self, num: usize, value: i32) -> KResult<()> {
        self.set_value(num as i32, value)
    }
    fn all(&self) -> KResult<Vec<u16>> {
        self.get_all()
    }
    fn setall(&self, values: &[u16]) -> KResult<()> {
        self.set_all(values)
    }
    fn ncnt(&self, num: usize) -> KResult<usize> {
        KernelSet::ncnt(self, num as i32).map(|n| n as usize)
    }
    fn zcnt(&self, num: usize) -> KResult<usize> {
        KernelSet::zcnt(self, num as i32).map(|n| n as usize)
    }
    fn pid(&self, num: usize) -> KResult<i32> {
        KernelSet::pid(self, num as i32)
    }
    fn otime_set(&self) -> KResult<bool> {
        self.stat().map(|(_, otime, _)| otime != 0)
    }
    fn rm(&self) -> KResult<()> {
        self.remove()
    }
    fn stale_errno() -> i32 {
        libc::EINVAL
    }
}

/// A process-shared ksync set (`IPC_PRIVATE`, mode 0600), removed when
/// dropped, so no file outlives the test.
#[derive(Debug)]
pub struct SharedSet {
    pub set: SharedSemSet,
    removed: AtomicBool,
}

impl SharedSet {
    pub fn create(nsems: usize) -> SharedSet {
        let set = SharedSemSet::open(IPC_PRIVATE, nsems, IPC_CREAT | 0o600)
            .unwrap_or_else(|e| panic!("SharedSemSet::open({nsems}): {e}"));
        SharedSet {
            set,
            removed: AtomicBool::new(false),
        }
    }
}

impl Drop for SharedSet {
    fn drop(&mut self) {
        if !self.removed.load(Ordering::SeqCst) {
            let _ = self.set.remove();
        }
    }
}

/// Undo belongs to the process, as on the kernel: the `SemUndo` argument is
/// ignored.
impl Sems for SharedSet {
    const NAME: &'static str = "ksync-shared";
    fn nsems(&self) -> usize {
        self.set.nsems()
    }
    fn op(&self, sops: &[SemBuf], timeout: Option<Duration>) -> KResult<()> {
        self.set.semtimedop(sops, timeout).map_err(e)
    }
    fn op_undo(&self, sops: &[SemBuf], _undo: &SemUndo, timeout: Option<Duration>) -> KResult<()> {
        self.op(sops, timeout)
    }
    fn val(&self, num: usize) -> KResult<i32> {
        self.set.get_value(num).map_err(e)
    }
    fn setval(&self, num: usize, value: i32) -> KResult<()> {
        self.set.set_value(num, value).map_err(e)
    }
    fn all(&self) -> KResult<Vec<u16>> {
        self.set.get_all().map_err(e)
    }
    fn setall(&self, values: &[u16]) -> KResult<()> {
        self.set.set_all(values).map_err(e)
    }
    fn ncnt(&self, num: usize) -> KResult<usize> {
        self.set.ncnt(num).map_err(e)
    }
    fn zcnt(&self, num: usize) -> KResult<usize> {
        self.set.zcnt(num).map_err(e)
    }
    fn pid(&self, num: usize) -> KResult<i32> {
        self.set.pid(num).map_err(e)
    }
    fn otime_set(&self) -> KResult<bool> {
        self.set.stat().map(|s| s.otime.is_some()).map_err(e)
    }
    fn rm(&self) -> KResult<()> {
        let r = self.set.remove().map_err(e);
        if r.is_ok() {
            self.removed.store(true, Ordering::SeqCst);
        }
        r
    }
    fn stale_errno() -> i32 {
        libc::EIDRM
    }
    fn counters(&self) -> Option<SemCounters> {
        Some(self.set.counters())
    }
    fn swept(&self) -> u32 {
        self.set.recovery_stats().swept
    }
    fn wakes_owed(&self) -> u32 {
        self.set.recovery_stats().wakes_owed
    }
}

/// Shorthand for a sembuf.
pub const fn sb(num: u16, op: i16, flags: i16) -> SemBuf {
    SemBuf::new(num, op, flags)
}

/// Kernel only: a forked child that ran one semop (typically with SEM_UNDO)
/// on a kernel set and waits for `exit()` to terminate, which makes the
/// kernel apply its undo list: the process-level counterpart of dropping a
/// `SemUndo`.
pub struct UndoChild {
    pid: libc::pid_t,
    go: libc::c_int,
}

/// Held while a test forks, so that a child does not inherit another test's
/// pipe ends.
pub static FORK_LOCK: Mutex<()> = Mutex::new(());

impl UndoChild {
    /// Forks; the child runs `sops` and reports the result; returns the
    /// child and the result (0 or errno).
    pub fn spawn(k: &KernelSet, sops: &[SemBuf]) -> (UndoChild, i32) {
        let mut ks = KernelSet::to_kernel(sops);
        let (mut go, mut res) = ([0; 2], [0; 2]);
        // Only one fork at a time in this process, so a child does not
        // inherit another test's pipe ends.
        let _g = FORK_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: plain syscalls on valid arrays. After fork the child only
        // calls async-signal-safe functions (semop, write, read, _exit) on
        // memory prepared before the fork.
        unsafe {
            // Close-on-exec: a child another test runs (a program, a
            // re-executed test binary) must not hold the writing end of
            // `go`, whose closing lets this child exit on a panic path.
            assert_eq!(libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC), 0);
            assert_eq!(libc::pipe2(res.as_mut_ptr(), libc::O_CLOEXEC), 0);
            let pid = libc::fork();
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                libc::close(go[1]);
                libc::close(res[0]);
                let r = libc::semop(k.id(), ks.as_mut_ptr(), ks.len());
                let errno: i32 = if r == 0 { 0 } else { *libc::__errno_location() };
                libc::write(res[1], &errno as *const i32 as *const libc::c_void, 4);
                let mut b = 0u8;
                libc::read(go[0], &mut b as *mut u8 as *mut libc::c_void, 1);
                libc::_exit(0);
            }
            libc::close(go[0]);
            libc::close(res[1]);
            let mut errno = -1i32;
            let got = libc::read(res[0], &mut errno as *mut i32 as *mut libc::c_void, 4);
            libc::close(res[0]);
            assert_eq!(got, 4, "child did not report");
            (UndoChild { pid, go: go[1] }, errno)
        }
    }

    /// Lets the child exit and reaps it.
    pub fn exit(self) {
        // SAFETY: plain syscalls.
        unsafe {
            libc::write(self.go, [1u8].as_ptr() as *const libc::c_void, 1);
            libc::close(self.go);
            let mut status = 0;
            assert_eq!(libc::waitpid(self.pid, &mut status, 0), self.pid);
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        }
        std::mem::forget(self);
    }
}

impl Drop for UndoChild {
    fn drop(&mut self) {
        // Only on a panic path: closing `go` makes the child's read return.
        // SAFETY: plain syscalls.
        unsafe {
            libc::close(self.go);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// Runs the scenario `$f` (a `fn<S: Sems>(&S, &SemUndo)`) on a fresh ksync
/// set, on a fresh process-shared ksync set and, when SysV IPC is
/// available, on a fresh kernel set of `$n`, with
/// the same assertions; a watchdog aborts the process if either side hangs.
#[macro_export]
macro_rules! on_both {
    ($test:expr, $n:expr, $f:ident) => {{
        let _dog = $crate::sem_common::Watchdog::arm($test, std::time::Duration::from_secs(90));
        {
            eprintln!("{}: ksync side", $test);
            let set = ksync::sem::SemSet::new($n).unwrap();
            let undo = ksync::sem::SemUndo::new();
            $f(&set, &undo);
        }
        {
            eprintln!("{}: ksync shared side", $test);
            let set = $crate::sem_common::SharedSet::create($n);
            let undo = ksync::sem::SemUndo::new();
            $f(&set, &undo);
            // A shared set's sleepers sweep it every 100 ms, which completes
            // and wakes what a waker missed long before `finish` gives up:
            // the scenario would pass with the wake-up lost. No scenario
            // here kills a process or fakes a dead waker, the only excuses
            // for a sweep's work, so it must have had none.
            let swept = $crate::sem_common::Sems::swept(&set);
            assert_eq!(swept, 0, "{}: the sweep did a waker's work", $test);
            // A timed sleeper whose wake-up was forgotten returns at its
            // next 100 ms timeout by itself, sweep or not; its waker's debt
            // stays. Every thread of the scenario has returned, so no
            // waker is between a publication and its wake-up.
            let owed = $crate::sem_common::Sems::wakes_owed(&set);
            assert_eq!(owed, 0, "{}: wake-ups forgotten", $test);
        }
        if $crate::sem_common::sysv_available_else_running(
            $test,
            "the scenario on a SemSet and on a process-shared set (run above)",
        ) {
            eprintln!("{}: kernel side", $test);
            let k = $crate::sem_common::KernelSet::create($n);
            let undo = ksync::sem::SemUndo::new();
            $f(&k, &undo);
        }
    }};
}

/// xorshift64*: small, seedable, good enough for the stress tests' amounts
/// and scripts.
pub struct Rng(pub u64);

impl Rng {
    /// A generator from any seed (xorshift needs a nonzero state).
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform enough in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True `p` times in 100.
    pub fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

/// A stress test's seed: `KSYNC_STRESS_SEED` if set, else the clock; printed
/// either way so that a failure can be replayed.
pub fn stress_seed(test: &str) -> u64 {
    let s = std::env::var("KSYNC_STRESS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (t.as_nanos() as u64) | 1
        });
    eprintln!("{test}: KSYNC_STRESS_SEED={s}");
    s
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes
    // inside it; sched_setaffinity reads it for the calling thread (0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let rc = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(rc, 0, "sched_setaffinity to CPU {cpu}");
    }
}

/// The CPUs this thread may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: as in `pin`; sched_getaffinity fills the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let rc = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        assert_eq!(rc, 0, "sched_getaffinity");
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// The first CPU this thread may run on.
pub fn first_allowed_cpu() -> usize {
    allowed_cpus().first().copied().unwrap_or(0)
}
