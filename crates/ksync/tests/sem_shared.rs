//! Process-shared sets across real processes: `semget`'s key semantics,
//! sleeping and waking across processes, removal, permissions, undo applied
//! when a process exits, is signalled or is killed, a kill storm, and files
//! that are corrupt. Where the kernel can run the same script, it does, and
//! both must end the same.
//!
//! Other processes are this test binary run again with `child_role` as its
//! only test and the role in `KSYNC_SHARED_ROLE`; they talk to the parent in
//! lines marked `@@` on their stdout (the harness prints there too, which
//! the parent ignores).
#![cfg(all(not(loom), target_os = "linux"))]

mod common;
mod sem_common;

use common::{wait_until, PATIENCE};
use ksync::sem::shared::Got;
use ksync::sem::{
    SemBuf, SemError, SharedSemSet, IPC_CREAT, IPC_EXCL, IPC_NOWAIT, IPC_PRIVATE, SEMMSL, SEM_UNDO,
};
use sem_common::{sysv_available, KernelSet, Rng, Watchdog};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const ROLE: &str = "KSYNC_SHARED_ROLE";
const ARGS: &str = "KSYNC_SHARED_ARGS";

// ---------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------

/// The kernel's set or ksync's shared set, by id, as a child uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Kernel,
    Shared,
}

impl Side {
    fn code(self) -> &'static str {
        match self {
            Side::Kernel => "k",
            Side::Shared => "s",
        }
    }
}

/// A set as a child process reaches it: by id, on one side.
enum ChildSet {
    Kernel(i32),
    Shared(SharedSemSet),
}

impl ChildSet {
    fn open(side: &str, id: i32) -> ChildSet {
        match side {
            "k" => ChildSet::Kernel(id),
            _ => ChildSet::Shared(SharedSemSet::open_id(id).expect("child: open_id")),
        }
    }

    /// semtimedop; 0 or the errno.
    fn op(&self, sops: &[SemBuf], timeout: Option<Duration>) -> i32 {
        match self {
            ChildSet::Shared(s) => s.semtimedop(sops, timeout).err().map_or(0, |e| e.errno()),
            ChildSet::Kernel(id) => sem_common::kernel_semtimedop(*id, sops, timeout)
                .err()
                .unwrap_or(0),
        }
    }

    fn value(&self, num: usize) -> i32 {
        match self {
            ChildSet::Shared(s) => s.get_value(num).unwrap_or(-1),
            // SAFETY: plain system call.
            ChildSet::Kernel(id) => unsafe { libc::semctl(*id, num as i32, libc::GETVAL) },
        }
    }

    fn ncnt(&self, num: usize) -> i32 {
        match self {
            ChildSet::Shared(s) => s.ncnt(num).map_or(-1, |n| n as i32),
            // SAFETY: plain system call.
            ChildSet::Kernel(id) => unsafe { libc::semctl(*id, num as i32, libc::GETNCNT) },
        }
    }

    fn set_value(&self, num: usize, value: i32) {
        let ok = match self {
            ChildSet::Shared(s) => s.set_value(num, value).is_ok(),
            // SAFETY: plain system call; semun.val is an int.
            ChildSet::Kernel(id) => unsafe {
                libc::semctl(*id, num as i32, libc::SETVAL, value) == 0
            },
        };
        assert!(ok, "child: SETVAL");
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "@@{line}");
    let _ = out.flush();
}

fn read_stdin_line() -> String {
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    line.trim().to_string()
}

/// What a child does, chosen by `KSYNC_SHARED_ROLE`; nothing in a normal run.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let args: Vec<String> = std::env::var(ARGS)
        .unwrap_or_default()
        .split(',')
        .map(str::to_string)
        .collect();
    let int = |i: usize| -> i32 { args[i].parse().expect("child: numeric argument") };
    let code = match role.as_str() {
        // side, id, num, op: one blocking call, its result reported.
        "wait" => {
            let set = ChildSet::open(&args[0], int(1));
            say("ready");
            let r = set.op(&[SemBuf::new(int(2) as u16, int(3) as i16, 0)], None);
            say(&format!("result {r}"));
            0
        }
        // id, threads: a fresh process whose threads all make their first
        // call at once, each sleeping on its own semaphore.
        "threads" => {
            let set = SharedSemSet::open_id(int(0)).expect("child: open_id");
            let n = int(1) as usize;
            let go = std::sync::Barrier::new(n);
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..n)
                    .map(|i| {
                        let (set, go) = (&set, &go);
                        s.spawn(move || {
                            go.wait();
                            set.semop(&[SemBuf::new(i as u16, -1, 0)])
                        })
                    })
                    .collect();
                say("ready");
                for h in handles {
                    let r = h.join().unwrap();
                    say(&format!("result {}", r.err().map_or(0, |e| e.errno())));
                }
            });
            0
        }
        // side, id, num, op: one SEM_UNDO call, then waits to be told to
        // exit, or to be killed.
        "hold" => {
            let set = ChildSet::open(&args[0], int(1));
            let r = set.op(&[SemBuf::new(int(2) as u16, int(3) as i16, SEM_UNDO)], None);
            say(&format!("held {r}"));
            read_stdin_line();
            0
        }
        // side, id: what an unprivileged process may do with a set; run as
        // root, it first becomes nobody.
        // side, id: as nobody (read access only), waits for semaphore 0
        // to be zero while a signal with a handler (no SA_RESTART) comes to
        // the waiting thread 50 ms in; reports the wait's errno.
        "nobody-zero" => {
            // SAFETY: plain system calls in a single-purpose child.
            let dropped = unsafe { libc::setgid(65534) == 0 && libc::setuid(65534) == 0 };
            assert!(dropped, "child: could not become nobody");
            extern "C" fn on_signal(_: libc::c_int) {}
            // SAFETY: plain old data, then a handler that does nothing.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
            }
            // SAFETY: no arguments.
            let me = unsafe { libc::pthread_self() };
            let signaller = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                // SAFETY: the waiting thread outlives this one (joined below).
                unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
            });
            let set = ChildSet::open(&args[0], int(1));
            let r = set.op(&[SemBuf::new(0, 0, 0)], Some(Duration::from_secs(20)));
            signaller.join().unwrap();
            say(&format!("result {r}"));
            0
        }
        // side, id, threads: that many threads sleep on a -1 of semaphore
        // 0 while a SIGUSR1 handler installed with SA_RESTART runs in each
        // in turn, 20 ms apart; reports how many still sleep 300 ms after
        // the last, then, after a SETVAL that wakes them, how the calls
        // ended.
        "interrupted-crowd" => {
            extern "C" fn on_signal(_: libc::c_int) {}
            // SAFETY: plain old data, then a handler that does nothing.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
            }
            let set = ChildSet::open(&args[0], int(1));
            let n = int(2);
            std::thread::scope(|s| {
                let (tx, threads) = channel();
                let sleepers: Vec<_> = (0..n)
                    .map(|_| {
                        let (set, tx) = (&set, tx.clone());
                        s.spawn(move || {
                            // SAFETY: no arguments.
                            tx.send(unsafe { libc::pthread_self() }).unwrap();
                            set.op(&[SemBuf::new(0, -1, 0)], None)
                        })
                    })
                    .collect();
                wait_until("every thread asleep", || set.ncnt(0) == n);
                // Past any polling before the sleep itself.
                std::thread::sleep(Duration::from_millis(20));
                for thread in threads.iter().take(sleepers.len()) {
                    // SAFETY: the thread is alive until joined below.
                    let rc = unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
                    assert_eq!(rc, 0, "child: pthread_kill");
                    std::thread::sleep(Duration::from_millis(20));
                }
                std::thread::sleep(Duration::from_millis(300));
                say(&format!("asleep {}", set.ncnt(0)));
                set.set_value(0, n);
                let results: Vec<i32> = sleepers.into_iter().map(|h| h.join().unwrap()).collect();
                let count = |errno| results.iter().filter(|&&r| r == errno).count();
                say(&format!("interrupted {}", count(libc::EINTR)));
                say(&format!("woken {}", count(0)));
            });
            0
        }
        // key, id: as nobody, what SharedSemSet::get and open answer for a
        // key whose set's file shuts nobody out (mode 0600, root's).
        "nobody-get" => {
            // SAFETY: plain system calls in a single-purpose child.
            let dropped = unsafe { libc::setgid(65534) == 0 && libc::setuid(65534) == 0 };
            assert!(dropped, "child: could not become nobody");
            let (key, id) = (int(0), int(1));
            let get = |nsems: usize, flags: i32| match SharedSemSet::get(key, nsems, flags) {
                Ok(Got::Sealed(sealed)) if sealed.id() == id => "sealed".to_string(),
                Ok(other) => format!("unexpected {other:?}"),
                Err(e) => e.errno().to_string(),
            };
            say(&format!("any {}", get(0, 0)));
            say(&format!("all {}", get(3, 0)));
            say(&format!("more {}", get(4, 0)));
            say(&format!("read {}", get(0, 0o400)));
            say(&format!("excl {}", get(0, IPC_CREAT | IPC_EXCL | 0o600)));
            let open = SharedSemSet::open(key, 0, 0);
            say(&format!("open {}", open.err().map_or(0, |e| e.errno())));
            0
        }
        // id: one process asleep twice in the set, to be killed: a thread
        // on a decrement of semaphore 0 (GETNCNT), another waiting for
        // semaphore 1 to be zero (GETZCNT). One process, so that one kill
        // leaves no sleeper of it alive to sweep up the other.
        "two-sleepers" => {
            let set = SharedSemSet::open_id(int(0)).expect("child: open_id");
            std::thread::scope(|s| {
                s.spawn(|| set.semop(&[SemBuf::new(1, 0, 0)]));
                say("ready");
                let _ = set.semop(&[SemBuf::new(0, -1, 0)]);
            });
            0
        }
        // id: as nobody (a read-only handle), GETNCNT of semaphore 0 and
        // GETZCNT of semaphore 1, then again once told.
        "nobody-count" => {
            // SAFETY: plain system calls in a single-purpose child.
            let dropped = unsafe { libc::setgid(65534) == 0 && libc::setuid(65534) == 0 };
            assert!(dropped, "child: could not become nobody");
            let set = SharedSemSet::open_id(int(0)).expect("child: open_id");
            let counts = || format!("{:?} {:?}", set.ncnt(0), set.zcnt(1));
            say(&format!("first {}", counts()));
            read_stdin_line();
            say(&format!("then {}", counts()));
            0
        }
        // id: as nobody, a set it may read (0644) but not alter, through
        // one handle, before and after the owner's IPC_SET makes it 0666.
        "nobody-grows" => {
            // SAFETY: plain system calls in a single-purpose child.
            let dropped = unsafe { libc::setgid(65534) == 0 && libc::setuid(65534) == 0 };
            assert!(dropped, "child: could not become nobody");
            let set = SharedSemSet::open_id(int(0)).expect("child: open_id");
            let r = |x: Result<(), SemError>| x.err().map_or(0, |e| e.errno());
            say(&format!("before {}", r(set.set_value(0, 1))));
            read_stdin_line();
            say(&format!("setval {}", r(set.set_value(0, 1))));
            say(&format!(
                "semop {}",
                r(set.semop(&[SemBuf::new(0, 1, IPC_NOWAIT)]))
            ));
            0
        }
        "nobody" => {
            // SAFETY: plain system calls in a single-purpose child.
            let dropped = unsafe { libc::setgid(65534) == 0 && libc::setuid(65534) == 0 };
            assert!(dropped, "child: could not become nobody");
            let id = int(1);
            let shared = if args[0] == "s" {
                match SharedSemSet::open_id(id) {
                    Err(e) => {
                        say(&format!("open {}", e.errno()));
                        std::process::exit(0);
                    }
                    Ok(set) => Some(set),
                }
            } else {
                None
            };
            say("open 0");
            let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
            let r = |x: Result<(), SemError>| x.err().map_or(0, |e| e.errno());
            // SAFETY (kernel side): plain system calls with valid arguments.
            let kernel_ctl = |cmd: i32, arg: libc::c_ulong| unsafe {
                if libc::semctl(id, 0, cmd, arg) < 0 {
                    errno()
                } else {
                    0
                }
            };
            let kernel_op = |op: i16| {
                let mut sb = libc::sembuf {
                    sem_num: 0,
                    sem_op: op,
                    sem_flg: IPC_NOWAIT,
                };
                // SAFETY: one valid sembuf.
                if unsafe { libc::semop(id, &mut sb, 1) } < 0 {
                    errno()
                } else {
                    0
                }
            };
            let results: Vec<(&str, i32)> = match &shared {
                Some(set) => vec![
                    ("getval", r(set.get_value(0).map(drop))),
                    ("alter", r(set.semop(&[SemBuf::new(0, 1, IPC_NOWAIT)]))),
                    ("zero", r(set.semop(&[SemBuf::new(0, 0, IPC_NOWAIT)]))),
                    ("setval", r(set.set_value(0, 3))),
                    ("ipcset", r(set.set_perm(65534, 65534, 0o666))),
                    ("rmid", r(set.remove())),
                ],
                None => {
                    // SAFETY: plain old data, filled by IPC_STAT first.
                    let mut ds: libc::semid_ds = unsafe { std::mem::zeroed() };
                    let ds_arg = &mut ds as *mut libc::semid_ds as libc::c_ulong;
                    kernel_ctl(libc::IPC_STAT, ds_arg);
                    vec![
                        ("getval", kernel_ctl(libc::GETVAL, 0)),
                        ("alter", kernel_op(1)),
                        ("zero", kernel_op(0)),
                        ("setval", kernel_ctl(libc::SETVAL, 3)),
                        ("ipcset", kernel_ctl(libc::IPC_SET, ds_arg)),
                        ("rmid", kernel_ctl(libc::IPC_RMID, 0)),
                    ]
                }
            };
            for (what, e) in results {
                say(&format!("{what} {e}"));
            }
            0
        }
        // id: uses the set as root, then forks a child that becomes nobody
        // and alters the set through the inherited handle: the child's
        // errno is the exit status.
        "fork-drop" => {
            let set = SharedSemSet::open_id(int(0)).expect("child: open_id");
            assert_eq!(set.semop(&[SemBuf::new(0, 1, 0)]), Ok(()));
            // SAFETY: the child only makes system calls and uses the handle
            // (no locks are held by other threads of this process: the
            // harness's threads do not touch sets).
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: plain system calls in the child.
                unsafe {
                    if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                        libc::_exit(255);
                    }
                }
                let r = set.semop(&[SemBuf::new(0, 1, IPC_NOWAIT)]);
                // SAFETY: ends the child without running the parent's exit path.
                unsafe { libc::_exit(r.err().map_or(0, |e| e.errno())) };
            }
            let mut status = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            say(&format!("child {}", libc::WEXITSTATUS(status)));
            0
        }
        // id: maps the set (which installs ksync's SIGBUS handler), then
        // faults on a truncated file of its own: it must die of SIGBUS.
        "foreign-sigbus" => {
            let set = SharedSemSet::open_id(int(0)).expect("child: open_id");
            assert_eq!(set.get_value(0), Ok(0));
            let path = std::env::temp_dir().join(format!("ksync-sigbus-{}", std::process::id()));
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .unwrap();
            file.set_len(4096).unwrap();
            // SAFETY: a fresh shared mapping of our own file.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    std::os::fd::AsRawFd::as_raw_fd(&file),
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            file.set_len(0).unwrap();
            let _ = std::fs::remove_file(&path);
            say("touching");
            // SAFETY: deliberately reads a page the file no longer backs.
            let byte = unsafe { std::ptr::read_volatile(p as *const u8) };
            say(&format!("survived {byte}"));
            0
        }
        // id: maps the set (which installs ksync's SIGBUS handler), then
        // sends itself SIGBUS: no fault, and no handler of its own, so it
        // must die of it.
        "raised-sigbus" => {
            default_sigbus();
            let set = SharedSemSet::open_id(int(0)).expect("child: open_id");
            assert_eq!(set.get_value(0), Ok(0));
            say("raising");
            // SAFETY: sends this thread a signal.
            unsafe { libc::raise(libc::SIGBUS) };
            say("survived");
            0
        }
        // id: ignores SIGBUS, then maps the set (ksync's handler goes in
        // front) and sends itself SIGBUS, which must stay ignored; then
        // truncates the set's file, which ksync's handler must still turn
        // into EINVAL.
        "ignored-sigbus" => {
            // SAFETY: plain sigaction with SIG_IGN.
            unsafe {
                let mut ign: libc::sigaction = std::mem::zeroed();
                ign.sa_sigaction = libc::SIG_IGN;
                assert_eq!(libc::sigaction(libc::SIGBUS, &ign, std::ptr::null_mut()), 0);
            }
            let set = SharedSemSet::open_id(int(0)).expect("child: open_id");
            assert_eq!(set.get_value(0), Ok(0));
            // SAFETY: sends this thread a signal.
            unsafe { libc::raise(libc::SIGBUS) };
            say("ignored");
            let path = ksync::sem::shared::sem_dir().join(format!("sem.{}", set.id()));
            // A sent signal whose address field points into the set's
            // mapping (a process may queue itself any siginfo) is not a
            // fault there: the set must not be poisoned.
            let start = mapping_start(&path);
            sigbus_to_self(libc::SI_QUEUE, start);
            assert_eq!(set.get_value(0), Ok(0));
            say("not poisoned");
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .unwrap()
                .set_len(0)
                .unwrap();
            let errno = set.get_value(0).err().map_or(0, |e| e.errno());
            say(&format!("after truncation {errno}"));
            0
        }
        // id: as "raised-sigbus", but the SIGBUS is the kernel's report of a
        // memory error found in the background (BUS_MCEERR_AO), which no
        // access repeats: it must kill as without ksync, even with its
        // address in the set.
        "background-sigbus" => {
            default_sigbus();
            let set = SharedSemSet::open_id(int(0)).expect("child: open_id");
            assert_eq!(set.get_value(0), Ok(0));
            let path = ksync::sem::shared::sem_dir().join(format!("sem.{}", set.id()));
            say("sending");
            sigbus_to_self(libc::BUS_MCEERR_AO, mapping_start(&path));
            say("survived");
            0
        }
        // side, id, nsems, seed, stop-id: the kill storm's worker, until the
        // stop set's semaphore 0 is non-zero.
        "worker" => {
            let set = ChildSet::open(&args[0], int(1));
            let stop = ChildSet::open(&args[0], int(4));
            let n = int(2) as u64;
            let mut rng = Rng::new(int(3) as u64 ^ u64::from(std::process::id()));
            say("ready");
            while stop.value(0) == 0 {
                // Take one unit of two different semaphores (or two of one),
                // maybe with a timeout, then give them back: balanced, and
                // balanced again by undo if killed in between.
                let a = rng.below(n) as u16;
                let b = rng.below(n) as u16;
                let take = [SemBuf::new(a, -1, SEM_UNDO), SemBuf::new(b, -1, SEM_UNDO)];
                let give = [SemBuf::new(a, 1, SEM_UNDO), SemBuf::new(b, 1, SEM_UNDO)];
                let timeout = rng
                    .percent(30)
                    .then(|| Duration::from_micros(rng.below(2000)));
                let r = set.op(&take, timeout);
                if r == 0 {
                    for _ in 0..rng.below(50) {
                        std::hint::spin_loop();
                    }
                    assert_eq!(set.op(&give, None), 0, "child: give back");
                } else {
                    assert_eq!(r, libc::EAGAIN, "child: take");
                }
            }
            0
        }
        other => panic!("child: unknown role {other}"),
    };
    std::process::exit(code);
}

/// Puts SIGBUS back to the default action in a child: Rust's runtime has a
/// SIGBUS handler of its own (for stack overflows), which swallows a SIGBUS
/// that no access repeats; a C program has none.
fn default_sigbus() {
    // SAFETY: plain sigaction with SIG_DFL.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        assert_eq!(libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut()), 0);
    }
}

/// Where this process mapped the file at `path` (from /proc/self/maps).
fn mapping_start(path: &std::path::Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps
        .lines()
        .find(|l| l.ends_with(path.to_str().unwrap()))
        .expect("the set's mapping");
    usize::from_str_radix(line.split('-').next().unwrap(), 16).unwrap()
}

/// Sends the calling thread a SIGBUS with `code` and address `addr` (a
/// process may queue itself any siginfo).
fn sigbus_to_self(code: i32, addr: usize) {
    // SAFETY: a zeroed siginfo with its number, code and address field
    // filled in, sent to this thread.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        info.si_signo = libc::SIGBUS;
        info.si_code = code;
        // The union after the three ints (at 16 on 64-bit Linux): si_addr,
        // or for a sent signal si_pid and si_uid.
        let fields = std::ptr::addr_of_mut!(info).cast::<u8>().add(16);
        fields.cast::<usize>().write_unaligned(addr);
        let rc = libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            libc::gettid(),
            libc::SIGBUS,
            &info,
        );
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    }
}

/// A child process and the `@` lines it says.
struct Kid {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Kid {
    fn spawn(role: &str, args: &[String]) -> Kid {
        Self::spawn_with(role, args, Stdio::inherit())
    }

    fn spawn_with(role: &str, args: &[String], stderr: Stdio) -> Kid {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(ARGS, args.join(","))
            // Every sleeper of a child but its watch sleeps without a
            // timeout (by default only 16 or more do), so that recovery
            // from the dead is tested without the sleepers' own timeouts.
            .env("KSYNC_UNTIMED_CROWD", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("child stdout");
        let stdin = child.stdin.take();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // The harness may have started the line ("test child_role ... ").
                if let Some(at) = line.find("@@") {
                    if tx.send(line[at + 2..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        Kid {
            child,
            stdin,
            lines,
        }
    }

    /// The next line the child says, which must start with `word`; the rest.
    fn expect(&self, word: &str) -> String {
        let line = self
            .lines
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("child said nothing for {PATIENCE:?}; wanted {word}"));
        line.strip_prefix(word)
            .unwrap_or_else(|| panic!("child said {line:?}, wanted {word}"))
            .trim()
            .to_string()
    }

    fn expect_errno(&self, word: &str) -> i32 {
        self.expect(word).parse().expect("an errno")
    }

    fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    fn signal(&self, sig: i32) {
        // SAFETY: plain system call on our own child.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// Tells a `hold` child to exit normally.
    fn release(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "exit");
        }
    }

    /// Waits for the child to end, failing the test after [`PATIENCE`].
    fn reap(mut self) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if start.elapsed() > PATIENCE {
                let _ = self.child.kill();
                panic!("child {} did not end within {PATIENCE:?}", self.pid());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn args(items: &[&dyn std::fmt::Display]) -> Vec<String> {
    items.iter().map(|x| x.to_string()).collect()
}

/// A shared set removed when dropped (also when a test fails).
struct Shared(SharedSemSet);

impl Shared {
    fn new(nsems: usize) -> Shared {
        Shared(SharedSemSet::open(IPC_PRIVATE, nsems, IPC_CREAT | 0o600).expect("create"))
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = self.0.remove();
    }
}

impl std::ops::Deref for Shared {
    type Target = SharedSemSet;
    fn deref(&self) -> &SharedSemSet {
        &self.0
    }
}

/// A key nobody else uses: random, never IPC_PRIVATE.
fn fresh_key() -> i32 {
    let mut rng = Rng::new(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64
            ^ u64::from(std::process::id()),
    );
    (rng.next() as i32 & 0x3fff_ffff) | 0x0100_0000
}

// ---------------------------------------------------------------------------
// Sets of another ksync's layout
// ---------------------------------------------------------------------------

/// Overwrites word `word` of set `id`'s file, as another ksync's file would
/// differ from ours; returns what it held.
fn poke_file_word(id: i32, word: u64, value: u32) -> u32 {
    use std::os::unix::fs::FileExt;
    let path = ksync::sem::shared::sem_dir().join(format!("sem.{id}"));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("set file");
    let mut old = [0u8; 4];
    file.read_exact_at(&mut old, 4 * word).expect("read");
    file.write_all_at(&value.to_ne_bytes(), 4 * word)
        .expect("write");
    u32::from_ne_bytes(old)
}

#[test]
fn a_set_file_of_another_layout_version_is_named_and_removed_by_id_and_by_key() {
    use ksync::sem::shared::{file_layout_version, key_id, remove_other_version, LAYOUT_VERSION};
    let key = fresh_key();
    let set = SharedSemSet::open(key, 1, IPC_CREAT | 0o600).expect("create");
    let id = set.id();
    assert_eq!(file_layout_version(id), Ok(LAYOUT_VERSION));
    // A set of this version is removed by IPC_RMID, which tells its users.
    assert_eq!(remove_other_version(id), Err(SemError::Invalid));
    drop(set);
    // The version word, second in every version's file.
    assert_eq!(poke_file_word(id, 1, LAYOUT_VERSION - 1), LAYOUT_VERSION);
    assert_eq!(SharedSemSet::open_id(id).err(), Some(SemError::Invalid));
    assert_eq!(SharedSemSet::open(key, 0, 0).err(), Some(SemError::Invalid));
    assert_eq!(file_layout_version(id), Ok(LAYOUT_VERSION - 1));
    assert_eq!(key_id(key), Ok(Some(id)));
    assert_eq!(remove_other_version(id), Ok(LAYOUT_VERSION - 1));
    assert_eq!(key_id(key), Ok(None));
    assert_eq!(file_layout_version(id), Err(SemError::NotFound));
    assert_eq!(remove_other_version(id), Err(SemError::NotFound));
    // The key is free again.
    let again = Shared(SharedSemSet::open(key, 1, IPC_CREAT | IPC_EXCL | 0o600).expect("key free"));
    assert_ne!(again.id(), id);
}

/// A process asks its own set's version while it holds a slot in it (an
/// undo adjustment): that must not drop its slot's liveness lock, which a
/// closed descriptor of the file would, or the next process to look would
/// take it for dead and apply its undo.
#[test]
fn asking_a_sets_version_keeps_the_askers_slot_alive() {
    use ksync::sem::shared::{file_layout_version, remove_other_version, LAYOUT_VERSION};
    let _dog = Watchdog::arm("asking_a_sets_version", Duration::from_secs(60));
    let set = Shared::new(1);
    let id = set.id();
    set.set_value(0, 1).unwrap();
    set.semop(&[SemBuf::new(0, -1, SEM_UNDO)]).unwrap();
    assert_eq!(file_layout_version(id), Ok(LAYOUT_VERSION));
    assert_eq!(remove_other_version(id), Err(SemError::Invalid));
    // Past the blocked call's search for the dead, which runs at most every
    // 10 ms: the child's blocked call looks.
    std::thread::sleep(Duration::from_millis(20));
    let kid = Kid::spawn("wait", &args(&[&"s", &id, &0, &-1]));
    kid.expect("ready");
    // Had this process looked dead, the child would have taken its undo's
    // unit and returned instead of sleeping.
    wait_until("the child asleep", || set.ncnt(0) == Ok(1));
    set.semop(&[SemBuf::new(0, 1, SEM_UNDO)]).unwrap();
    assert_eq!(kid.expect_errno("result"), 0);
    assert!(kid.reap().success());
    assert_eq!(set.get_value(0), Ok(0));
}

#[test]
fn a_file_that_is_no_ksync_set_is_not_removed_as_another_versions() {
    use ksync::sem::shared::{file_layout_version, remove_other_version};
    let set = Shared::new(1);
    let id = set.id();
    // A wrong magic word: not a set file of any version.
    let magic = poke_file_word(id, 0, 0x1234_5678);
    assert_eq!(file_layout_version(id), Err(SemError::Invalid));
    assert_eq!(remove_other_version(id), Err(SemError::Invalid));
    assert!(ksync::sem::shared::set_ids().contains(&id));
    // Put it back, so that the guard removes it.
    poke_file_word(id, 0, magic);
}

// ---------------------------------------------------------------------------
// semget
// ---------------------------------------------------------------------------

/// The same sequence of `semget` calls on one key, on the kernel and on
/// ksync: every errno (or success) must agree.
#[test]
fn semget_key_semantics_match_the_kernel() {
    let script: &[(usize, i32)] = &[
        (1, 0),                            // ENOENT: no set, no IPC_CREAT
        (SEMMSL + 1, IPC_CREAT | 0o600),   // EINVAL before anything else
        (0, IPC_CREAT | 0o600),            // EINVAL: creating needs nsems >= 1
        (3, IPC_CREAT | IPC_EXCL | 0o640), // created
        (3, IPC_CREAT | IPC_EXCL | 0o600), // EEXIST
        (0, 0),                            // found: 0 means "any size"
        (3, 0o600),                        // found
        (4, 0),                            // EINVAL: larger than the set
        (4, IPC_CREAT | IPC_EXCL),         // EEXIST comes before the size
        (2, IPC_CREAT | 0o600),            // found, smaller is fine
        (1, 0o400),                        // found, read requested: granted
    ];
    let key = fresh_key();
    let ours: Vec<i32> = {
        let mut made = Vec::new();
        let out = script
            .iter()
            .map(|&(n, flags)| match SharedSemSet::open(key, n, flags) {
                Ok(set) => {
                    made.push(set);
                    0
                }
                Err(e) => e.errno(),
            })
            .collect();
        if let Some(set) = made.first() {
            set.remove().unwrap();
            // The key is free at once.
            assert_eq!(
                SharedSemSet::open(key, 1, 0).err(),
                Some(SemError::NotFound)
            );
        }
        out
    };
    assert_eq!(ours[3], 0, "ksync created the set: {ours:?}");
    if !sysv_available("sem_shared::semget_key_semantics_match_the_kernel") {
        return;
    }
    let mut ids = Vec::new();
    let theirs: Vec<i32> = script
        .iter()
        .map(|&(n, flags)| {
            // SAFETY: plain system call.
            let id = unsafe { libc::semget(key, n as i32, flags) };
            if id >= 0 {
                ids.push(id);
                0
            } else {
                std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
            }
        })
        .collect();
    for id in ids {
        // SAFETY: plain system call.
        unsafe { libc::semctl(id, 0, libc::IPC_RMID) };
    }
    assert_eq!(ours, theirs, "semget errnos, ksync vs kernel");
}

#[test]
fn private_sets_are_distinct_and_found_by_id() {
    let a = Shared::new(2);
    let b = Shared::new(2);
    assert_ne!(a.id(), b.id());
    a.set_value(1, 5).unwrap();
    let again = SharedSemSet::open_id(a.id()).unwrap();
    assert_eq!(again.get_value(1), Ok(5));
    assert_eq!(b.get_value(1), Ok(0));
    assert_eq!(again.key(), IPC_PRIVATE);
    let st = again.stat().unwrap();
    // SAFETY: plain system call.
    assert_eq!(st.uid, unsafe { libc::geteuid() });
    assert_eq!((st.mode, st.nsems), (0o600, 2));
    assert_eq!(SharedSemSet::open_id(7).err(), Some(SemError::NotFound));
}

// ---------------------------------------------------------------------------
// Across processes
// ---------------------------------------------------------------------------

#[test]
fn a_sleeper_in_another_process_is_woken_in_fifo_order() {
    let _dog = Watchdog::arm("a_sleeper_in_another_process", Duration::from_secs(60));
    let set = Shared::new(1);
    let id = set.id();
    let kids: Vec<Kid> = (1..=3)
        .map(|k| {
            let kid = Kid::spawn("wait", &args(&[&"s", &id, &0, &-1]));
            kid.expect("ready");
            wait_until(&format!("{k} sleepers"), || set.ncnt(0) == Ok(k));
            kid
        })
        .collect();
    for (i, kid) in kids.iter().enumerate() {
        set.semop(&[SemBuf::new(0, 1, 0)]).unwrap();
        assert_eq!(kid.expect_errno("result"), 0, "sleeper {i} woken first");
        assert_eq!(set.ncnt(0), Ok(2 - i));
    }
    assert_eq!(set.get_value(0), Ok(0));
    for kid in kids {
        assert!(kid.reap().success());
    }
}

/// The threads of a process that has not used the set yet all make their
/// first call at once: one claims the process's slot, and none of the
/// others' sleepers may be lost while it adopts the slot's leftovers.
#[test]
fn first_calls_from_many_threads_of_a_new_process_all_sleep_and_wake() {
    let _dog = Watchdog::arm("first_calls_from_many_threads", Duration::from_secs(120));
    const THREADS: usize = 8;
    let set = Shared::new(THREADS);
    for round in 0..10 {
        let kid = Kid::spawn("threads", &args(&[&set.id(), &THREADS]));
        kid.expect("ready");
        wait_until(&format!("round {round}: every thread asleep"), || {
            (0..THREADS).all(|i| set.ncnt(i) == Ok(1))
        });
        set.set_all(&[1; THREADS]).unwrap();
        for _ in 0..THREADS {
            assert_eq!(kid.expect_errno("result"), 0, "round {round}");
        }
        assert!(kid.reap().success());
        assert_eq!(set.get_all(), Ok(vec![0; THREADS]));
    }
}

/// A signal handler installed with `SA_RESTART` ends every sleeping call
/// with EINTR, as it ends the kernel's `semop` (signal(7)), also a call
/// sleeping without a timeout of its own: in the child every sleeper but
/// the process's watch does (`KSYNC_UNTIMED_CROWD=1`; by default, once 16
/// sleep in the set), and a futex wait without a timeout is restarted
/// after such a handler, unseen.
#[test]
fn a_restarting_handler_interrupts_sleepers_without_a_timeout() {
    let _dog = Watchdog::arm("a_restarting_handler_interrupts", Duration::from_secs(60));
    const THREADS: usize = 6;
    let ends = |side: &str, id: i32| -> [usize; 3] {
        let kid = Kid::spawn("interrupted-crowd", &args(&[&side, &id, &THREADS]));
        let seen = ["asleep", "interrupted", "woken"].map(|w| kid.expect_errno(w) as usize);
        assert!(kid.reap().success());
        seen
    };
    let set = Shared::new(1);
    assert_eq!(
        ends("s", set.id()),
        [0, THREADS, 0],
        "ksync: asleep, EINTR, woken"
    );
    assert_eq!(set.get_value(0), Ok(THREADS as i32));
    if sysv_available("sem_shared::a_restarting_handler_interrupts_sleepers_without_a_timeout") {
        let k = KernelSet::create(1);
        assert_eq!(ends("k", k.id()), [0, THREADS, 0], "kernel");
    }
}

#[test]
fn removal_fails_sleepers_in_other_processes_with_eidrm() {
    let _dog = Watchdog::arm("removal_fails_sleepers", Duration::from_secs(60));
    let set = SharedSemSet::open(IPC_PRIVATE, 2, IPC_CREAT | 0o600).unwrap();
    let id = set.id();
    // Semaphore 1 is 1 before b starts, so b's wait for zero must sleep.
    set.set_value(1, 1).unwrap();
    let a = Kid::spawn("wait", &args(&[&"s", &id, &0, &-1]));
    let b = Kid::spawn("wait", &args(&[&"s", &id, &1, &0]));
    a.expect("ready");
    b.expect("ready");
    wait_until("both asleep", || {
        set.ncnt(0) == Ok(1) && set.zcnt(1) == Ok(1)
    });
    set.remove().unwrap();
    assert_eq!(a.expect_errno("result"), libc::EIDRM);
    assert_eq!(b.expect_errno("result"), libc::EIDRM);
    assert_eq!(set.get_value(0), Err(SemError::Removed));
    assert_eq!(SharedSemSet::open_id(id).err(), Some(SemError::NotFound));
    assert!(a.reap().success() && b.reap().success());
}

/// How a `hold` child ends.
#[derive(Clone, Copy, Debug)]
enum End {
    Exit,
    Signal,
    Kill,
}

/// A child takes a unit with SEM_UNDO and ends; its undo gives the unit
/// back, and a sleeper in this process waiting for it is woken: on the
/// kernel at once, on ksync within the sleepers' poll.
fn undo_at_end(side: Side, id: i32, value: &dyn Fn() -> i32, end: End) {
    let mut kid = Kid::spawn("hold", &args(&[&side.code(), &id, &0, &-1]));
    assert_eq!(kid.expect_errno("held"), 0, "{side:?} {end:?}");
    assert_eq!(value(), 0, "{side:?} {end:?}: the child holds the unit");
    let sleeper = std::thread::spawn({
        let side = side.code();
        move || ChildSet::open(side, id).op(&[SemBuf::new(0, -1, 0)], Some(PATIENCE))
    });
    std::thread::sleep(Duration::from_millis(20));
    match end {
        End::Exit => kid.release(),
        End::Signal => kid.signal(libc::SIGTERM),
        End::Kill => kid.signal(libc::SIGKILL),
    }
    let status = kid.reap();
    match end {
        End::Exit => assert!(status.success()),
        End::Signal | End::Kill => assert!(!status.success()),
    }
    assert_eq!(
        sleeper.join().unwrap(),
        0,
        "{side:?} {end:?}: the sleeper got the unit back through undo"
    );
    assert_eq!(value(), 0, "{side:?} {end:?}: and took it");
}

#[test]
fn undo_is_applied_when_a_process_exits_is_signalled_or_killed() {
    let _dog = Watchdog::arm("undo_at_exit", Duration::from_secs(120));
    let set = Shared::new(1);
    for end in [End::Exit, End::Signal, End::Kill] {
        set.set_value(0, 1).unwrap();
        undo_at_end(Side::Shared, set.id(), &|| set.get_value(0).unwrap(), end);
    }
    if sysv_available("sem_shared::undo_is_applied_when_a_process_exits") {
        let k = KernelSet::create(1);
        for end in [End::Exit, End::Signal, End::Kill] {
            k.set_value(0, 1).unwrap();
            undo_at_end(Side::Kernel, k.id(), &|| k.get_value(0).unwrap(), end);
        }
    }
}

/// A child takes a unit with SEM_UNDO and exits; once it is reaped, a call
/// that will not wait (IPC_NOWAIT, or a zero timeout) must find the unit
/// back: the kernel applies the undo before `waitpid` returns. The check of
/// the value just before the exit searches for the dead, so the next
/// search is not due for a while: the failing call must search anyway.
fn undo_seen_by_a_call_that_will_not_wait(side: Side, id: i32, value: &dyn Fn() -> i32) {
    let set = ChildSet::open(side.code(), id);
    for nowait in [true, false] {
        let mut kid = Kid::spawn("hold", &args(&[&side.code(), &id, &0, &-1]));
        assert_eq!(kid.expect_errno("held"), 0, "{side:?}");
        assert_eq!(value(), 0, "{side:?}: the child holds the unit");
        kid.release();
        assert!(kid.reap().success());
        let r = if nowait {
            set.op(&[SemBuf::new(0, -1, IPC_NOWAIT)], None)
        } else {
            set.op(&[SemBuf::new(0, -1, 0)], Some(Duration::ZERO))
        };
        assert_eq!(
            r, 0,
            "{side:?}, IPC_NOWAIT {nowait}: the undo was not applied"
        );
        set.op(&[SemBuf::new(0, 1, 0)], None);
    }
}

#[test]
fn a_call_that_will_not_wait_sees_an_exited_processs_undo() {
    let _dog = Watchdog::arm("undo_seen_by_a_call", Duration::from_secs(60));
    let set = Shared::new(1);
    set.set_value(0, 1).unwrap();
    undo_seen_by_a_call_that_will_not_wait(Side::Shared, set.id(), &|| set.get_value(0).unwrap());
    if sysv_available("sem_shared::a_call_that_will_not_wait") {
        let k = KernelSet::create(1);
        k.set_value(0, 1).unwrap();
        undo_seen_by_a_call_that_will_not_wait(Side::Kernel, k.id(), &|| k.get_value(0).unwrap());
    }
}

/// A child sleeps on a decrement without SEM_UNDO and is killed; a post
/// that comes after its death must not complete its sleeper, whose unit
/// would be lost with it: the kernel takes a killed sleeper off the queue
/// as it dies. The unit stays for a live caller.
fn a_dead_sleeper_gets_no_unit(
    side: Side,
    id: i32,
    value: &dyn Fn() -> i32,
    ncnt: &dyn Fn() -> usize,
) {
    let kid = Kid::spawn("wait", &args(&[&side.code(), &id, &0, &-1]));
    kid.expect("ready");
    wait_until(&format!("{side:?}: the child asleep"), || ncnt() == 1);
    kid.signal(libc::SIGKILL);
    assert!(!kid.reap().success());
    let set = ChildSet::open(side.code(), id);
    assert_eq!(set.op(&[SemBuf::new(0, 1, 0)], None), 0);
    assert_eq!(
        value(),
        1,
        "{side:?}: the post's unit went to the dead sleeper"
    );
    assert_eq!(
        set.op(&[SemBuf::new(0, -1, IPC_NOWAIT)], None),
        0,
        "{side:?}"
    );
}

#[test]
fn a_post_after_a_sleepers_death_leaves_its_unit_to_the_living() {
    let _dog = Watchdog::arm("a_dead_sleeper_gets_no_unit", Duration::from_secs(60));
    let set = Shared::new(1);
    a_dead_sleeper_gets_no_unit(
        Side::Shared,
        set.id(),
        &|| set.get_value(0).unwrap(),
        &|| set.ncnt(0).unwrap(),
    );
    if sysv_available("sem_shared::a_post_after_a_sleepers_death") {
        let k = KernelSet::create(1);
        a_dead_sleeper_gets_no_unit(Side::Kernel, k.id(), &|| k.get_value(0).unwrap(), &|| {
            k.ncnt(0).unwrap() as usize
        });
    }
}

/// Sleepers without a timeout: among 16 or more sleepers of a process only
/// one sleeps with one (its watch, which looks for the dead), and a watch
/// that returns hands the role to another. All but one of 20 are posted
/// (the first queued, which most often is the watch, among them), then the
/// child holding the last unit is killed: the one left must get it through
/// the child's undo.
#[test]
fn the_last_sleeper_without_a_timeout_gets_a_killed_processs_undo() {
    let _dog = Watchdog::arm("watch_hand_over", Duration::from_secs(60));
    let set = Shared::new(1);
    set.set_value(0, 1).unwrap();
    let id = set.id();
    let kid = Kid::spawn("hold", &args(&[&Side::Shared.code(), &id, &0, &-1]));
    assert_eq!(kid.expect_errno("held"), 0);
    const SLEEPERS: i16 = 20;
    let sleepers: Vec<_> = (0..SLEEPERS)
        .map(|_| {
            std::thread::spawn(move || {
                ChildSet::open(Side::Shared.code(), id).op(&[SemBuf::new(0, -1, 0)], None)
            })
        })
        .collect();
    wait_until("the sleepers queued", || {
        set.ncnt(0) == Ok(SLEEPERS as usize)
    });
    // Past their polls, asleep.
    std::thread::sleep(Duration::from_millis(20));
    set.semop(&[SemBuf::new(0, SLEEPERS - 1, 0)]).unwrap();
    wait_until("all but one returned", || set.ncnt(0) == Ok(1));
    // Past its polls, asleep.
    std::thread::sleep(Duration::from_millis(20));
    kid.signal(libc::SIGKILL);
    assert!(!kid.reap().success());
    for sleeper in sleepers {
        assert_eq!(sleeper.join().unwrap(), 0);
    }
    assert_eq!(set.get_value(0), Ok(0));
}

#[test]
fn undo_holders_name_the_process_and_its_adjustments() {
    let set = Shared::new(2);
    set.set_all(&[3, 3]).unwrap();
    let mut kid = Kid::spawn("hold", &args(&[&"s", &set.id(), &1, &-2]));
    assert_eq!(kid.expect_errno("held"), 0);
    let holders = set.undo_holders().unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].pid, kid.pid());
    assert_eq!(holders[0].adjustments, vec![(1, 2)]);
    kid.release();
    assert!(kid.reap().success());
    assert_eq!(set.get_all(), Ok(vec![3, 3]));
    assert_eq!(set.undo_holders(), Ok(vec![]));
}

/// Whether this test runs as root, which the tests whose children become
/// another user need; if not, says loudly on stderr that `test` checked
/// nothing.
fn root_or_skipped(test: &str) -> bool {
    // SAFETY: plain system call.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    sem_common::say_loudly(&format!(
        "SKIPPED sem_shared::{test}:\n\
         not root, so no child can become another user. Nothing was checked."
    ));
    false
}

#[test]
fn an_unprivileged_process_gets_the_kernels_permission_errors() {
    if !root_or_skipped("an_unprivileged_process_gets_the_kernels_permission_errors") {
        return;
    }
    // 0600: nobody cannot even open it.
    let closed = Shared::new(1);
    let kid = Kid::spawn("nobody", &args(&[&"s", &closed.id()]));
    assert_eq!(kid.expect_errno("open"), libc::EACCES);
    assert!(kid.reap().success());
    // 0644: nobody may read, not alter, and is not the owner.
    let open = Shared::new(1);
    open.set_perm(0, 0, 0o644).unwrap();
    let words = ["getval", "alter", "zero", "setval", "ipcset", "rmid"];
    let answers = |side: &str, id: i32| -> Vec<i32> {
        let kid = Kid::spawn("nobody", &args(&[&side, &id]));
        assert_eq!(kid.expect_errno("open"), 0, "{side}");
        let out = words.iter().map(|w| kid.expect_errno(w)).collect();
        assert!(kid.reap().success());
        out
    };
    let ours = answers("s", open.id());
    let want = [0, libc::EACCES, 0, libc::EACCES, libc::EPERM, libc::EPERM];
    assert_eq!(ours, want, "ksync: {words:?}");
    // Nobody may wait for zero, by polling (it cannot queue); a signal's
    // handler ends the wait with EINTR, as the kernel's semop does.
    let interrupted = |side: &str, id: i32| {
        let kid = Kid::spawn("nobody-zero", &args(&[&side, &id]));
        let r = kid.expect_errno("result");
        assert!(kid.reap().success());
        r
    };
    open.set_value(0, 1).unwrap();
    assert_eq!(interrupted("s", open.id()), libc::EINTR, "ksync");
    open.set_value(0, 0).unwrap();
    assert_eq!(open.get_value(0), Ok(0));
    // The kernel says the same to the same child.
    if sysv_available("sem_shared::an_unprivileged_process_gets_the_kernels_permission_errors") {
        let k = KernelSet::create(1);
        // SAFETY: plain old data for IPC_STAT / IPC_SET.
        let mut ds: libc::semid_ds = unsafe { std::mem::zeroed() };
        // SAFETY: a valid semid_ds for both commands.
        unsafe {
            let stat = &mut ds as *mut libc::semid_ds;
            assert_eq!(libc::semctl(k.id(), 0, libc::IPC_STAT, stat), 0);
            ds.sem_perm.mode = 0o644;
            let set = &mut ds as *mut libc::semid_ds;
            assert_eq!(libc::semctl(k.id(), 0, libc::IPC_SET, set), 0);
        }
        assert_eq!(answers("k", k.id()), ours, "kernel vs ksync: {words:?}");
        k.set_value(0, 1).unwrap();
        assert_eq!(interrupted("k", k.id()), libc::EINTR, "kernel");
    }
}

/// A process the set's file shuts out finds the set by key as the kernel's
/// semget does: only the rights its flags ask for are refused, after
/// EINVAL for the size and EEXIST, which the kernel checks first.
#[test]
fn a_process_shut_out_of_the_file_gets_semgets_answers() {
    if !root_or_skipped("a_process_shut_out_of_the_file_gets_semgets_answers") {
        return;
    }
    let key = 0x4b5e_0000 | (std::process::id() as i32 & 0xffff);
    let set = Shared(SharedSemSet::open(key, 3, IPC_CREAT | IPC_EXCL | 0o600).expect("create"));
    let kid = Kid::spawn("nobody-get", &args(&[&key, &set.id()]));
    assert_eq!(kid.expect("any"), "sealed");
    assert_eq!(kid.expect("all"), "sealed");
    assert_eq!(kid.expect_errno("more"), libc::EINVAL);
    assert_eq!(kid.expect_errno("read"), libc::EACCES);
    assert_eq!(kid.expect_errno("excl"), libc::EEXIST);
    assert_eq!(kid.expect_errno("open"), libc::EACCES);
    assert!(kid.reap().success());
}

/// A handle opened read-only writes once an IPC_SET lets its process write
/// the file, as the kernel, which checks rights at every call.
#[test]
fn a_read_only_handle_writes_once_ipc_set_allows_it() {
    if !root_or_skipped("a_read_only_handle_writes_once_ipc_set_allows_it") {
        return;
    }
    let set = Shared::new(1);
    set.set_perm(0, 0, 0o644).unwrap();
    let mut kid = Kid::spawn("nobody-grows", &args(&[&set.id()]));
    assert_eq!(kid.expect_errno("before"), libc::EACCES);
    set.set_perm(0, 0, 0o666).unwrap();
    kid.release();
    assert_eq!(kid.expect_errno("setval"), 0);
    assert_eq!(kid.expect_errno("semop"), 0);
    assert!(kid.reap().success());
    assert_eq!(set.get_value(0), Ok(2));
}

/// A read-only handle, which cannot take the lock and so cannot reap,
/// counts no sleeper of a killed process in GETNCNT or GETZCNT: the
/// kernel takes a dying process's sleepers off its queues, and a handle
/// that may write reaps them before it counts. Nothing alive may reap in
/// between: the dead process's sleepers are its only ones (a living
/// sleeper's periodic sweep would reap them), and this process makes no
/// call on the set until the reader has counted.
#[test]
fn a_read_only_handle_does_not_count_a_dead_processs_sleepers() {
    if !root_or_skipped("a_read_only_handle_does_not_count_a_dead_processs_sleepers") {
        return;
    }
    let _dog = Watchdog::arm("read_only_count_of_the_dead", Duration::from_secs(60));
    let set = Shared::new(2);
    set.set_perm(0, 0, 0o644).unwrap();
    set.set_value(1, 1).unwrap();
    let sleepers = Kid::spawn("two-sleepers", &args(&[&set.id()]));
    sleepers.expect("ready");
    wait_until("both asleep", || {
        set.ncnt(0) == Ok(1) && set.zcnt(1) == Ok(1)
    });
    let mut reader = Kid::spawn("nobody-count", &args(&[&set.id()]));
    // Alive, they count: the reader can tell the living from the dead.
    assert_eq!(reader.expect("first"), "Ok(1) Ok(1)");
    sleepers.signal(libc::SIGKILL);
    assert!(!sleepers.reap().success());
    reader.release();
    assert_eq!(reader.expect("then"), "Ok(0) Ok(0)");
    assert!(reader.reap().success());
    // And the locked count, which reaps, agrees.
    assert_eq!((set.ncnt(0), set.zcnt(1)), (Ok(0), Ok(0)));
}

/// A program forks while another of its threads keeps calling on a set
/// (each call searching for the dead under the library's registry of open
/// sets, whose lock is held across system calls): every child's own first
/// call, which claims a slot through that registry, must go through.
#[test]
fn a_fork_while_another_thread_is_in_the_library_leaves_the_child_working() {
    let _dog = Watchdog::arm("fork_while_in_the_library", Duration::from_secs(120));
    let set = Shared::new(1);
    set.set_value(0, 1).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = set.get_value(0);
            }
        });
        for round in 0..200 {
            // SAFETY: the child only calls into the library and exits.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let ok = set.get_value(0) == Ok(1);
                // SAFETY: ends the child without running the parent's
                // destructors or test harness.
                unsafe { libc::_exit(i32::from(!ok)) };
            }
            assert!(pid > 0, "fork failed");
            if reap_within(pid, Duration::from_secs(10)) != Some(0) {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                panic!("round {round}: the child's first call never returned, or failed");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

/// A program forks while another of its threads makes the process's first
/// call on a set, which claims the process's slot in it: the child's own
/// first call, which claims the child's slot, must go through.
#[test]
fn a_fork_during_another_threads_first_call_leaves_the_child_working() {
    let _dog = Watchdog::arm("fork_during_a_first_call", Duration::from_secs(120));
    for round in 0..200u64 {
        let set = Shared::new(1);
        let go = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            let first = s.spawn(|| {
                go.wait();
                set.get_value(0)
            });
            go.wait();
            // A few microseconds in, varied, to land within the claim.
            let until = std::time::Instant::now() + Duration::from_nanos(round % 40 * 1000);
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
            // SAFETY: the child only calls into the library and exits.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let ok = set.get_value(0) == Ok(0);
                // SAFETY: ends the child without the parent's destructors.
                unsafe { libc::_exit(i32::from(!ok)) };
            }
            assert!(pid > 0, "fork failed");
            assert_eq!(first.join().unwrap(), Ok(0));
            assert_eq!(
                reap_within(pid, Duration::from_secs(10)),
                Some(0),
                "round {round}"
            );
        });
    }
}

/// The exit status of child `pid`, or `None` (and the child killed) if it
/// has not exited within `limit`.
fn reap_within(pid: libc::pid_t, limit: Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + limit;
    let mut status = 0;
    // SAFETY: our own child; WNOHANG polls.
    while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
        if std::time::Instant::now() > deadline {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
}

/// A `fork` child that drops its privileges cannot alter a set through the
/// handle it inherited from its privileged parent, on the lock-free path
/// either (the parent's cached rights are not the child's).
#[test]
fn a_fork_child_that_drops_privileges_loses_the_parents_rights() {
    // SAFETY: plain system call.
    if unsafe { libc::geteuid() } != 0 {
        let _ = writeln!(
            std::io::stderr(),
            "!!! SKIPPED sem_shared::a_fork_child_that_drops_privileges_loses_the_parents_rights: not root"
        );
        return;
    }
    let set = Shared::new(1);
    let kid = Kid::spawn("fork-drop", &args(&[&set.id()]));
    assert_eq!(kid.expect_errno("child"), libc::EACCES);
    assert!(kid.reap().success());
    assert_eq!(set.get_value(0), Ok(1), "only the parent's +1");
}

// ---------------------------------------------------------------------------
// The kill storm
// ---------------------------------------------------------------------------

/// Workers make balanced SEM_UNDO calls (two semaphores at once, blocking
/// or timed) while this process kills random ones at random moments and
/// starts new ones. At the end every value is its start value and every
/// survivor stops when asked. The kernel runs the same script.
fn kill_storm(side: Side, id: i32, stop_id: i32, nsems: usize, deadline: Duration) -> u32 {
    const WORKERS: usize = 4;
    let seed = sem_common::stress_seed("sem_shared::kill_storm");
    let mut rng = Rng::new(seed);
    let spawn = |rng: &mut Rng| {
        Kid::spawn_with(
            "worker",
            &args(&[
                &side.code(),
                &id,
                &nsems,
                &(rng.next() as u32 & 0x7fff_ffff),
                &stop_id,
            ]),
            Stdio::inherit(),
        )
    };
    let mut workers: Vec<Kid> = (0..WORKERS).map(|_| spawn(&mut rng)).collect();
    for w in &workers {
        w.expect("ready");
    }
    let start = Instant::now();
    let mut kills = 0u32;
    while start.elapsed() < deadline && kills < 3000 {
        std::thread::sleep(Duration::from_micros(rng.below(3000)));
        let victim = rng.below(WORKERS as u64) as usize;
        workers[victim].signal(libc::SIGKILL);
        let dead = std::mem::replace(&mut workers[victim], spawn(&mut rng));
        assert!(
            !dead.reap().success(),
            "{side:?}: a killed worker exited normally"
        );
        kills += 1;
    }
    // Survivors: ask them to stop; each must, so none is stuck.
    let stop = ChildSet::open(side.code(), stop_id);
    assert_eq!(stop.op(&[SemBuf::new(0, 1, 0)], None), 0);
    for w in workers {
        let status = w.reap();
        assert!(status.success(), "{side:?}: a worker failed: {status:?}");
    }
    kills
}

#[test]
fn kill_storm_never_loses_or_invents_a_unit() {
    let _dog = Watchdog::arm("kill_storm", Duration::from_secs(240));
    const NSEMS: usize = 3;
    // At least 2 each: a worker may take two units of one semaphore.
    let start = [2u16, 2, 3];
    let run = Duration::from_secs(8);
    let set = Shared::new(NSEMS);
    let stop = Shared::new(1);
    set.set_all(&start).unwrap();
    let kills = kill_storm(Side::Shared, set.id(), stop.id(), NSEMS, run);
    assert_eq!(
        set.get_all(),
        Ok(start.to_vec()),
        "ksync after {kills} kills"
    );
    assert_eq!(
        set.ncnt(0).unwrap() + set.ncnt(1).unwrap() + set.ncnt(2).unwrap(),
        0
    );
    let stats = set.recovery_stats();
    eprintln!("sem_shared::kill_storm: ksync survived {kills} SIGKILLs: {stats:?}");
    if sysv_available("sem_shared::kill_storm_never_loses_or_invents_a_unit") {
        let k = KernelSet::create(NSEMS);
        let kstop = KernelSet::create(1);
        k.set_all(&start).unwrap();
        let kills = kill_storm(Side::Kernel, k.id(), kstop.id(), NSEMS, run);
        assert_eq!(
            k.get_all(),
            Ok(start.to_vec()),
            "kernel after {kills} kills"
        );
        eprintln!("sem_shared::kill_storm: the kernel survived {kills} SIGKILLs");
    }
}

// ---------------------------------------------------------------------------
// Hostile files
// ---------------------------------------------------------------------------

/// A process with write access shortens a set's file under everyone's
/// mappings: the next access faults, and instead of dying of SIGBUS this
/// process gets EINVAL from that call and every later one, sleepers
/// included. (The truncating "process" is this one, through another
/// descriptor: the mapping cannot tell.)
#[test]
fn a_set_truncated_under_its_mapping_gives_einval_not_sigbus() {
    let _dog = Watchdog::arm("a_set_truncated", Duration::from_secs(60));
    let set = Shared::new(2);
    set.set_all(&[1, 2]).unwrap();
    let id = set.id();
    let sleeper = std::thread::spawn(move || {
        let set = SharedSemSet::open_id(id).unwrap();
        set.semop(&[SemBuf::new(0, -5, 0)])
    });
    wait_until("the sleeper queued", || set.ncnt(0) == Ok(1));
    let path = ksync::sem::shared::sem_dir().join(format!("sem.{id}"));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    // The first access after the truncation is the lock-free path's.
    assert_eq!(set.semop(&[SemBuf::new(1, 1, 0)]), Err(SemError::Invalid));
    assert_eq!(set.get_all(), Err(SemError::Invalid));
    assert_eq!(
        set.semop(&[SemBuf::new(1, -1, SEM_UNDO)]),
        Err(SemError::Invalid)
    );
    assert_eq!(sleeper.join().unwrap(), Err(SemError::Invalid));
    // Other SIGBUSes still get the default action: not checked here (it
    // would kill the test process); the handler passes them on.
    let _ = std::fs::remove_file(&path);
}

/// Runs child `role` on a fresh set (which installs ksync's SIGBUS
/// handler there), waits for it to say `says`, and checks that it died of
/// SIGBUS.
fn dies_of_sigbus(role: &str, says: &str) {
    use std::os::unix::process::ExitStatusExt;
    let set = Shared::new(1);
    let kid = Kid::spawn(role, &args(&[&set.id()]));
    kid.expect(says);
    let status = kid.reap();
    assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
}

/// ksync's SIGBUS handler passes on the faults that are not in a set: a
/// process that touches a truncated file of its own still dies of SIGBUS.
#[test]
fn a_sigbus_outside_any_set_still_kills() {
    dies_of_sigbus("foreign-sigbus", "touching");
}

/// A SIGBUS that a process sends (`raise`, `kill`) is no fault: with no
/// handler of the program's own it takes the default action, as without
/// ksync, instead of disappearing into ksync's handler.
#[test]
fn a_sigbus_sent_by_a_process_still_kills() {
    dies_of_sigbus("raised-sigbus", "raising");
}

/// The kernel's report of a memory error found in the background
/// (`BUS_MCEERR_AO`) is no fault that recurs: it takes the default action,
/// as without ksync, though its address is in a set.
#[test]
fn a_background_memory_error_still_kills() {
    dies_of_sigbus("background-sigbus", "sending");
}

/// A program that ignores SIGBUS still ignores a sent one with ksync's
/// handler in front, even one whose address field points into a set (which
/// must not poison it), and the handler stays: a truncated set still gives
/// EINVAL.
#[test]
fn an_ignored_sigbus_stays_ignored_and_sets_stay_guarded() {
    let set = Shared::new(1);
    let path = ksync::sem::shared::sem_dir().join(format!("sem.{}", set.id()));
    let kid = Kid::spawn("ignored-sigbus", &args(&[&set.id()]));
    kid.expect("ignored");
    kid.expect("not poisoned");
    assert_eq!(kid.expect("after truncation"), libc::EINVAL.to_string());
    assert!(kid.reap().success());
    let _ = std::fs::remove_file(&path);
}

/// Overwrites random words of a set's file with random values and then
/// uses the set through a new handle and the old one: every call must
/// return (timeouts bound the blocking ones) with a value or an error, never
/// crash or hang.
#[test]
fn corrupt_files_give_errors_not_crashes() {
    use std::os::unix::fs::FileExt;
    let _dog = Watchdog::arm("corrupt_files", Duration::from_secs(240));
    let seed = sem_common::stress_seed("sem_shared::corrupt_files");
    let mut rng = Rng::new(seed);
    let dir = ksync::sem::shared::sem_dir();
    let short = Some(Duration::from_millis(2));
    for round in 0..300 {
        let set = Shared::new(1 + rng.below(4) as usize);
        set.set_value(0, 1).unwrap();
        let path = dir.join(format!("sem.{}", set.id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let len = file.metadata().unwrap().len();
        for _ in 0..1 + rng.below(8) {
            // Mostly the header and the first pages, where the state is.
            let limit = if rng.percent(70) { 4096 } else { len };
            let at = rng.below(limit / 4) * 4;
            let value: u32 = match rng.below(4) {
                0 => 0,
                1 => u32::MAX,
                2 => rng.below(8) as u32,
                _ => rng.next() as u32,
            };
            file.write_all_at(&value.to_ne_bytes(), at).unwrap();
        }
        let fresh = SharedSemSet::open_id(set.id());
        let handles: Vec<&SharedSemSet> = match &fresh {
            Ok(f) => vec![f, &set.0],
            Err(_) => vec![&set.0],
        };
        for s in handles {
            let _ = s.semtimedop(&[SemBuf::new(0, -1, 0)], short);
            // Blocks: queues a sleeper, times out, leaves the queue.
            let _ = s.semtimedop(&[SemBuf::new(0, -5, 0)], short);
            let _ = s.semtimedop(&[SemBuf::new(0, 1, 0)], short);
            let _ = s.semtimedop(&[SemBuf::new(0, 1, SEM_UNDO), SemBuf::new(0, -1, 0)], short);
            let _ = s.get_all();
            let _ = s.ncnt(0);
            let _ = s.zcnt(0);
            let _ = s.set_value(0, 2);
            let _ = s.stat();
            let _ = s.undo_holders();
        }
        drop(fresh);
        drop(set);
        // A set too corrupt to remove leaves its file: remove that too.
        let _ = std::fs::remove_file(&path);
        if round % 50 == 0 {
            eprintln!("sem_shared::corrupt_files: round {round}");
        }
    }
    // A file that is not a set at all.
    let bogus = dir.join("sem.1073741825");
    std::fs::write(&bogus, b"not a semaphore set").unwrap();
    assert_eq!(
        SharedSemSet::open_id(1_073_741_825).err(),
        Some(SemError::Invalid)
    );
    std::fs::remove_file(&bogus).unwrap();
}
