//! The C conformance programs (`tests/c`), each compiled with the machine's C
//! compiler and run twice: against the kernel, and with
//! `LD_PRELOAD=libksync_sysv.so`. The two outputs must match line by line,
//! and the kernel's run must have finished cleanly.
//!
//! The programs print only what must not differ between two correct runs:
//! outcomes, errno names, values and counts, never ids, keys or pids.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::{compile, library, run, scratch, Run};

const LIMIT: Duration = Duration::from_secs(120);

/// Lines a program prints when it could not carry out its own checks.
const BROKEN: [&str; 3] = ["FATAL", "timed out", "child died"];

fn run_program(program: &Path, dir: &Path, label: &str, preload: Option<&Path>) -> Run {
    let mut command = Command::new(program);
    // `cargo test` puts target/<profile> on LD_LIBRARY_PATH, where an older
    // libksync_sysv.so from `cargo build` may sit; a linked program would
    // load that one instead of the one its RUNPATH names.
    command.env_remove("LD_LIBRARY_PATH");
    if let Some(lib) = preload {
        command.env("LD_PRELOAD", lib);
    } else {
        command.env_remove("LD_PRELOAD");
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

/// Runs `tests/c/<name>.c` against the kernel and under the library and
/// compares; returns the kernel's output.
fn compare(name: &str) -> String {
    let dir = scratch(name);
    let program = compile(name, &dir, &[]);
    let lib = library();
    let kernel = run_program(&program, &dir, "kernel", None);
    check_clean(name, "against the kernel", &kernel);
    let preloaded = run_program(&program, &dir, "preload", Some(&lib));
    check_clean(name, "under LD_PRELOAD", &preloaded);

    let expected: Vec<&str> = kernel.stdout.lines().collect();
    let got: Vec<&str> = preloaded.stdout.lines().collect();
    for (number, (want, have)) in expected.iter().zip(&got).enumerate() {
        assert_eq!(
            want,
            have,
            "{name}: line {} differs under LD_PRELOAD\nkernel:\n{}\npreload:\n{}",
            number + 1,
            kernel.stdout,
            preloaded.stdout
        );
    }
    assert_eq!(
        expected.len(),
        got.len(),
        "{name}: the kernel's run printed {} lines, the preloaded run {}",
        expected.len(),
        got.len()
    );
    assert!(!expected.is_empty(), "{name} printed nothing");
    kernel.stdout
}

fn has_line(output: &str, line: &str) -> bool {
    output.lines().any(|l| l == line)
}

#[test]
fn semget_cases() {
    let out = compare("semget");
    assert!(
        has_line(&out, "02 semget IPC_CREAT|IPC_EXCL existing: -1 EEXIST"),
        "{out}"
    );
}

#[test]
fn semop_values_and_errors() {
    let out = compare("semop_basic");
    assert!(
        has_line(&out, "01 semop values: 0 1 4 9 0 0 0 0 0 0"),
        "{out}"
    );
}

#[test]
fn semop_sleeping_eidrm_eintr_mutual_exclusion_and_thread_undo() {
    let out = compare("semop_wait");
    assert!(
        has_line(&out, "04 overlaps in the critical section: 0"),
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
    let out = compare("semctl_errors");
    assert!(has_line(&out, "03 IPC_STAT bad buffer: -1 EFAULT"), "{out}");
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
    compare("semctl_info");
}

#[test]
fn undo_across_sigkill_fork_and_exec() {
    let out = compare("undo_kill");
    assert!(
        has_line(&out, "value after the holder was killed: 1"),
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
    let kernel = run_program(&program, &dir, "kernel", None);
    assert_probe(&kernel, "against the kernel", "libc");
    let preloaded = run_program(&program, &dir, "preload", Some(&library()));
    assert_probe(&preloaded, "under LD_PRELOAD", "libksync_sysv");
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
    let linked = run_program(&program, &dir, "linked", None);
    assert_probe(&linked, "linked", "libksync_sysv");
}

/// The down + up benchmark program (its figure goes to stderr) gives the
/// same checks both ways, so the command BENCHMARKS.md names keeps working.
#[test]
fn down_up_benchmark_program_runs_both_ways() {
    let out = compare("sem_pair");
    assert!(has_line(&out, "every semop succeeded: 1"), "{out}");
}
