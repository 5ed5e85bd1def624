//! What the integration tests share: where the built library is, compiling
//! the C programs with the machine's C compiler, and running a program with a
//! time limit.

#![allow(dead_code)] // each test binary uses its own part

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Says on stderr, between two rows of `!` and straight to the stream (the
/// harness captures `eprintln!` output of passing tests), that `test`
/// skipped what it was for, and why.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write;
    let bang = "!".repeat(72);
    let _ = writeln!(
        std::io::stderr(),
        "\n{bang}\n!!! SKIPPED {test}:\n!!! {why}\n{bang}"
    );
}

/// `libksync_sysv.so` as cargo built it for this test run. `cargo test`
/// writes the cdylib into the `deps/` folder beside the test binary and does
/// not copy it up to `target/<profile>/`, where a `cargo build` puts it; the
/// copy up there may be older than the source under test.
pub fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let lib = deps.join("libksync_sysv.so");
    assert!(
        lib.is_file(),
        "{} is missing: cargo builds the cdylib before the integration tests",
        lib.display()
    );
    lib
}

/// A folder of its own for one test's files.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("ksync-sysv")
        .join(name);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// The C sources, in this crate's `tests/c`.
pub fn c_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"))
}

/// Compiles `tests/c/<name>.c` with `$CC` (or `cc`) into `dir`, adding
/// `extra` to the command line. Panics with the compiler's message.
pub fn compile(name: &str, dir: &Path, extra: &[&str]) -> PathBuf {
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = dir.join(name);
    let result = Command::new(&compiler)
        .args(["-O1", "-Wall", "-Wextra", "-pthread", "-o"])
        .arg(&out)
        .arg(c_source(name))
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{compiler}`: {e}"));
    assert!(
        result.status.success(),
        "{compiler} failed on {name}.c:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// What a finished run left: its exit status and what it printed.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `command` with stdout and stderr in files under `dir` (named after
/// `label`), killing it after `limit`.
pub fn run(mut command: Command, dir: &Path, label: &str, limit: Duration) -> Run {
    let out_path = dir.join(format!("{label}.stdout"));
    let err_path = dir.join(format!("{label}.stderr"));
    let mut child = command
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("stdout file"))
        .stderr(File::create(&err_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {label}: {e}"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{label} ran past {limit:?} and was killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        status,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    }
}

/// The set files left in `folder`, then removes it.
pub fn sets_left(folder: &Path) -> Vec<String> {
    let left = std::fs::read_dir(folder)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("sem."))
                .collect()
        })
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(folder);
    left
}
