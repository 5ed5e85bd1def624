//! The C conformance programs (`tests/c`), each compiled with the machine's C
//! compiler and run three times: against the kernel, with
//! `LD_PRELOAD=libksync_sysv.so` (ksync's shared sets, the library's
//! default), and preloaded with `KSYNC_SYSV_BACKEND=kernel` (the
//! pass-through). Each preloaded output must match the kernel's line by
//! line, every run must finish cleanly, and the shared sets' run must leave
//! no set behind.
//!
//! The programs print only what must not differ between two correct runs:
//! outcomes, errno names, values and counts, never ids, keys or pids. Where
//! the shared sets differ from the kernel's by design (the crate's
//! documentation lists how), the line is named in [`Difference`] with both
//! expected texts, and both are checked.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::{compile, library, run, scratch, sets_left, skipped, Run};

const LIMIT: Duration = Duration::from_secs(120);

/// Lines a program prints when it could not carry out its own checks.
const BROKEN: [&str; 3] = ["FATAL", "timed out", "child died"];

/// Which sets a run uses.
#[derive(Clone, Copy)]
enum Sets<'a> {
    /// The kernel's, without the library.
    Kernel,
    /// The library's default backend: ksync's shared sets, in files in the
    /// given folder (`KSYNC_SEM_DIR`).
    Shared(&'a Path),
    /// The library's pass-through to the kernel (`KSYNC_SYSV_BACKEND=kernel`).
    PassThrough,
    /// A program linked with the library, not preloaded: shared sets in
    /// the given folder.
    Linked(&'a Path),
}

fn run_program(program: &Path, dir: &Path, label: &str, sets: Sets) -> Run {
    let mut command = Command::new(program);
    // `cargo test` puts target/<profile> on LD_LIBRARY_PATH, where an older
    // libksync_sysv.so from `cargo build` may sit; a linked program would
    // load that one instead of the one its RUNPATH names.
    command
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .env_remove("KSYNC_SYSV_BACKEND")
        .env_remove("KSYNC_SEM_DIR");
    match sets {
        Sets::Kernel => {}
        Sets::Shared(folder) => {
            command
                .env("LD_PRELOAD", library())
                .env("KSYNC_SEM_DIR", folder);
        }
        Sets::PassThrough => {
            command
                .env("LD_PRELOAD", library())
                .env("KSYNC_SYSV_BACKEND", "kernel");
        }
        Sets::Linked(folder) => {
            command.env("KSYNC_SEM_DIR", folder);
        }
    }
    run(command, dir, label, LIMIT)
}

fn check_clean(name: &str, how: &str, result: &Run) {
    assert!(
        result.status.success(),
        "{name} {how} exited with {}\nstdout:\n{}\nstderr:\n{}",
        result.status,
        result.stdout,
        result.stderr
    );
    for line in result.stdout.lines() {
        assert!(
            !BROKEN.iter().any(|b| line.contains(b)),
            "{name} {how} could not finish its checks: {line}\n{}",
            result.stdout
        );
    }
}

/// A line the shared sets print differently from the kernel by design.
struct Difference {
    /// The kernel's line.
    kernel: &'static str,
    /// The line under the shared sets.
    shared: &'static str,
}

/// Checks `got` against the kernel's `expected`, line by line, allowing
/// exactly the `differences` named (each must appear as named, so a change
/// in either behaviour is caught).
fn assert_same(name: &str, how: &str, expected: &str, got: &str, differences: &[Difference]) {
    let want: Vec<&str> = expected.lines().collect();
    let have: Vec<&str> = got.lines().collect();
    for (number, (w, h)) in want.iter().zip(&have).enumerate() {
        let allowed = differences.iter().any(|d| d.kernel == *w && d.shared == *h);
        assert!(
            w == h || allowed,
            "{name}: line {} differs {how}\nkernel:\n{expected}\n{how}:\n{got}",
            number + 1
        );
    }
    assert_eq!(
        want.len(),
        have.len(),
        "{name}: the kernel's run printed {} lines, the run {how} {}",
        want.len(),
        have.len()
    );
    for d in differences {
        assert!(
            want.contains(&d.kernel) && have.contains(&d.shared),
            "{name}: the known difference `{}` -> `{}` no longer shows {how}\n{got}",
            d.kernel,
            d.shared
        );
    }
}

/// A folder for one test's shared sets, in memory like the default, empty.
fn sets_folder(name: &str) -> PathBuf {
    let folder = PathBuf::from(format!(
        "/dev/shm/ksync-sysv-test.{}.{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&folder);
    folder
}

/// Runs `tests/c/<name>.c` against the kernel, under the shared sets and
/// through the pass-through, and compares; returns the kernel's output.
fn compare(name: &str) -> String {
    compare_with(name, &[])
}

/// [`compare`], allowing the shared sets' documented `differences`.
fn compare_with(name: &str, differences: &[Difference]) -> String {
    let dir = scratch(name);
    let program = compile(name, &dir, &[]);
    let kernel = run_program(&program, &dir, "kernel", Sets::Kernel);
    check_clean(name, "against the kernel", &kernel);
    assert!(!kernel.stdout.is_empty(), "{name} printed nothing");

    let folder = sets_folder(name);
    let shared = run_program(&program, &dir, "shared", Sets::Shared(&folder));
    let left = sets_left(&folder);
    check_clean(name, "under LD_PRELOAD", &shared);
    assert_same(
        name,
        "under LD_PRELOAD",
        &kernel.stdout,
        &shared.stdout,
        differences,
    );
    assert!(left.is_empty(), "{name} left shared sets behind: {left:?}");

    let passed = run_program(&program, &dir, "pass-through", Sets::PassThrough);
    check_clean(name, "through the pass-through", &passed);
    assert_same(
        name,
        "through the pass-through",
        &kernel.stdout,
        &passed.stdout,
        &[],
    );
    kernel.stdout
}

fn has_line(output: &str, line: &str) -> bool {
    output.lines().any(|l| l == line)
}

#[test]
fn semget_cases() {
    let out = compare_with(
        "semget",
        &[Difference {
            // The shared sets' SEMMNI is the kernel's default, 32000; the
            // program lowers the kernel's to 4 through /proc/sys/kernel/sem,
            // which only the kernel reads.
            kernel: "05 semget past SEMMNI: -1 ENOSPC",
            shared: "05 semget past SEMMNI: ok",
        }],
    );
    assert!(
        has_line(&out, "02 semget IPC_CREAT|IPC_EXCL existing: -1 EEXIST"),
        "{out}"
    );
}

/// The library keeps a descriptor per set used; past the soft descriptor
/// limit it raises that limit instead of failing.
#[test]
fn more_sets_than_the_soft_descriptor_limit() {
    let out = compare("many_sets");
    if out.starts_with("00 skipped") {
        skipped(
            "conformance::more_sets_than_the_soft_descriptor_limit",
            out.trim(),
        );
        return;
    }
    assert!(has_line(&out, "04 sets removed: 200"), "{out}");
}

/// A fork child that closed the library's descriptor still uses the set,
/// and is not taken for dead while it lives.
#[test]
fn a_child_that_closed_its_descriptors() {
    let out = compare("closed_fds");
    assert!(has_line(&out, "03 value while the child lives: 2"), "{out}");
}

#[test]
fn semop_values_and_errors() {
    let out = compare("semop_basic");
    assert!(
        has_line(&out, "01 semop values: 0 1 4 9 0 0 0 0 0 0"),
        "{out}"
    );
}

/// The main thread calls `pthread_exit` and the worker it started goes on:
/// copies in and out of the caller's memory must still work.
#[test]
fn calls_after_the_main_thread_exited() {
    let out = compare("main_exited");
    assert!(has_line(&out, "IPC_STAT after main exited: ok"), "{out}");
    assert!(has_line(&out, "values: 0 2"), "{out}");
}

#[test]
fn semop_sleeping_eidrm_eintr_mutual_exclusion_and_thread_undo() {
    let out = compare("semop_wait");
    assert!(
        has_line(&out, "04 overlaps in the critical section: 0"),
        "{out}"
    );
}

/// A handler installed with `SA_RESTART` ends every sleeping `semop` with
/// EINTR, as the kernel's, also with 16 or more threads asleep in the set,
/// where all but one of them sleep without a timeout of their own
/// (`ksync::sem::sleep_watch`) and a futex wait without a timeout would be
/// restarted after the handler.
#[test]
fn a_restarting_handler_interrupts_every_sleeper_of_a_crowd() {
    let out = compare("eintr_crowd");
    for line in [
        "20 sleepers, GETNCNT after a SIGUSR1 each: 0",
        "20 sleepers, EINTR: 20",
    ] {
        assert!(has_line(&out, line), "{out}");
    }
}

/// A successful call leaves `errno` as the program had it, on every path
/// that makes system calls of its own (creating and finding sets, sleeping,
/// timing, undo).
#[test]
fn errno_is_left_alone_on_success() {
    let out = compare("errno_kept");
    let kept = out.lines().filter(|l| l.ends_with(": errno kept")).count();
    assert_eq!(kept, out.lines().count(), "{out}");
}

/// None of the calls is a cancellation point: a thread that cancelled
/// itself makes each call (creating, finding and opening sets, a lock-free
/// and a locked `semop`, sleeps that time out or are woken, `semctl`s) and
/// is cancelled at the `pthread_testcancel` after it; a caller's disabled
/// state stays disabled; and an asynchronous cancel while a call sleeps
/// ends the thread without the call returning to it. The library's own
/// work reaches cancellation points (`open`, `getrandom`, `nanosleep`),
/// where a pending cancel made glibc abort the process.
#[test]
fn calls_are_not_cancellation_points() {
    let out = compare("cancel");
    let at_testcancel = out
        .lines()
        .filter(|l| l.ends_with(": ok, cancelled at pthread_testcancel"))
        .count();
    assert_eq!(at_testcancel, 12, "{out}");
    assert!(
        has_line(
            &out,
            "07 semtimedop -1 past its timeout: -1 EAGAIN, cancelled at pthread_testcancel"
        ),
        "{out}"
    );
    assert!(
        has_line(
            &out,
            "14 semtimedop with cancellation disabled: EAGAIN, not cancelled while disabled, state kept: yes"
        ),
        "{out}"
    );
    assert!(has_line(&out, "14 cancelled once enabled: yes"), "{out}");
    assert!(
        has_line(
            &out,
            "15 asynchronous cancel during a sleeping semtimedop: cancelled, went past the call: no"
        ),
        "{out}"
    );
}

#[test]
fn semctl_every_command() {
    let out = compare("semctl_cmds");
    assert!(has_line(&out, "01 GETNCNT with 5 sleepers: 5"), "{out}");
}

#[test]
fn semctl_errors() {
    // nobody's SEM_STAT_ANY finds root's mode-0 set, whose file it may
    // not open, through the handle it inherited from root at fork.
    let out = compare("semctl_errors");
    assert!(has_line(&out, "03 IPC_STAT bad buffer: -1 EFAULT"), "{out}");
    assert!(has_line(&out, "03 IPC_SET uid -1: -1 EINVAL"), "{out}");
}

#[test]
fn semctl_multi_op_undo_stress() {
    let out = compare("semctl_stress");
    assert!(
        has_line(&out, "06 every process finished its rounds: 1"),
        "{out}"
    );
}

#[test]
fn semctl_info_and_stat_any() {
    compare_with(
        "semctl_info",
        &[Difference {
            // The shared sets' index is the position in the sorted list
            // of ids, so removing a set closes its gap; the kernel's
            // table keeps the hole until the index is reused.
            kernel: "09 root after removing the middle set SEM_INFO highest index: 2",
            shared: "09 root after removing the middle set SEM_INFO highest index: 1",
        }],
    );
}

#[test]
fn undo_across_sigkill_fork_and_exec() {
    let out = compare_with(
        "undo_kill",
        &[Difference {
            // exec closes the set's descriptors (close-on-exec), which ends
            // the process's hold on its slot: its undo is applied at exec,
            // where the kernel keeps it until the exec'd program exits.
            kernel: "the exec'd program saw its own +3: 1",
            shared: "the exec'd program saw its own +3: 0",
        }],
    );
    assert!(
        has_line(&out, "value after the holder was killed: 1"),
        "{out}"
    );
}

/// Processes forked without the `pthread_atfork` handlers (glibc's `_Fork`,
/// which a program forking in a signal handler calls) are processes of
/// their own: their undo, their `GETPID`, their wakes. A child that kept
/// its parent's cached pid took its parent's place in the set (its undo
/// was never given back) and died of `SIGSEGV` in its parent's io_uring.
#[test]
fn processes_forked_without_fork_handlers() {
    let out = compare("raw_fork");
    if has_line(&out, "no _Fork in this C library: nothing to check") {
        eprintln!("raw_fork: this C library has no _Fork; nothing checked");
        return;
    }
    assert!(
        has_line(&out, "semaphore 1 after the child's exit: 1"),
        "{out}"
    );
    assert!(
        has_line(&out, "a child wakes four with one call: 1"),
        "{out}"
    );
}

/// Checks the probe's report: every System V call answered by `object`
/// ("libc" or "libksync_sysv"), and the calls through it worked.
fn assert_probe(run: &Run, how: &str, object: &str) {
    check_clean("probe", how, run);
    for call in ["semget", "semop", "semtimedop", "semctl"] {
        let line = format!("{call}: {object}");
        assert!(
            has_line(&run.stdout, &line),
            "probe {how}: no `{line}`\n{}",
            run.stdout
        );
    }
    assert!(
        has_line(&run.stdout, "GETVAL after semop: 40"),
        "probe {how}:\n{}",
        run.stdout
    );
}

/// The comparisons above prove nothing unless the preloaded runs really went
/// through the library: the probe names the object behind each call.
#[test]
fn ld_preload_puts_the_library_in_front() {
    let dir = scratch("probe");
    let program = compile("probe", &dir, &["-ldl"]);
    let kernel = run_program(&program, &dir, "kernel", Sets::Kernel);
    assert_probe(&kernel, "against the kernel", "libc");
    let folder = sets_folder("probe");
    let preloaded = run_program(&program, &dir, "preload", Sets::Shared(&folder));
    let left = sets_left(&folder);
    assert_probe(&preloaded, "under LD_PRELOAD", "libksync_sysv");
    assert!(
        left.is_empty(),
        "the probe left shared sets behind: {left:?}"
    );
    let passed = run_program(&program, &dir, "pass-through", Sets::PassThrough);
    assert_probe(&passed, "through the pass-through", "libksync_sysv");
}

/// A program linked with `-lksync_sysv` gets the library without LD_PRELOAD.
#[test]
fn linking_puts_the_library_in_front() {
    let dir = scratch("probe-linked");
    let lib = library();
    let lib_dir = lib
        .parent()
        .expect("the library's folder")
        .to_str()
        .expect("a UTF-8 path");
    let link = [
        format!("-L{lib_dir}"),
        "-lksync_sysv".to_owned(),
        format!("-Wl,-rpath,{lib_dir}"),
        "-ldl".to_owned(),
    ];
    let link: Vec<&str> = link.iter().map(String::as_str).collect();
    let program = compile("probe", &dir, &link);
    let folder = sets_folder("probe-linked");
    let linked = run_program(&program, &dir, "linked", Sets::Linked(&folder));
    let left = sets_left(&folder);
    assert_probe(&linked, "linked", "libksync_sysv");
    assert!(
        left.is_empty(),
        "the probe left shared sets behind: {left:?}"
    );
}

/// The down + up benchmark program (its figure goes to stderr) gives the
/// same checks both ways, so the command BENCHMARKS.md names keeps working.
#[test]
fn down_up_benchmark_program_runs_both_ways() {
    let out = compare("sem_pair");
    assert!(has_line(&out, "every semop succeeded: 1"), "{out}");
}

/// Processes a set's mode shuts out, the owner among them, and a reader
/// whose rights an `IPC_SET` widens: the kernel's answers, in its order.
#[test]
fn permission_checks_for_shut_out_processes() {
    let out = compare_with(
        "perm",
        &[
            // A process the mode lets alter but not read cannot map the
            // set's file: the rights it has are of no use to it.
            Difference {
                kernel: "04 semop +1 at 0622: ok",
                shared: "04 semop +1 at 0622: -1 EACCES",
            },
            Difference {
                kernel: "04 SETVAL at 0622: ok",
                shared: "04 SETVAL at 0622: -1 EACCES",
            },
            // Only CAP_CHOWN changes a file's owner: the owner an IPC_SET
            // without it names has the file's other rights (none at 0600)
            // and is not the owner the file names.
            Difference {
                kernel: "05 GETVAL by the new owner: ok",
                shared: "05 GETVAL by the new owner: -1 EACCES",
            },
            Difference {
                kernel: "05 IPC_SET by the new owner: ok",
                shared: "05 IPC_SET by the new owner: -1 EPERM",
            },
        ],
    );
    if has_line(
        &out,
        "skipped: not root, so no child can become another user",
    ) {
        skipped(
            "conformance::permission_checks_for_shut_out_processes",
            "not root. Nothing was checked.",
        );
        return;
    }
    assert!(
        has_line(&out, "01 semget(key, 0, 0) is the set: 1"),
        "{out}"
    );
    assert!(
        has_line(&out, "03 the reader sleeps in the queue: 1"),
        "{out}"
    );
    // Root is not privileged by its user id: without CAP_IPC_OWNER and
    // CAP_SYS_ADMIN the mode bits and ownership decide, as for anybody.
    assert!(
        has_line(&out, "06 CAP_IPC_OWNER or CAP_SYS_ADMIN left: 0"),
        "{out}"
    );
    assert!(
        has_line(&out, "06 semop +1 on its own mode-0 set: -1 EACCES"),
        "{out}"
    );
    assert!(
        has_line(&out, "06 IPC_RMID of nobody's 0666 set: -1 EPERM"),
        "{out}"
    );
}
