//! The real client: `stress-ng --sem-sysv 4 --timeout 10s --metrics`, a
//! program no one here wrote, run against the kernel and under
//! `LD_PRELOAD=libksync_sysv.so` (ksync's shared sets). Each run must finish
//! with no failure and leave no set behind: the kernel's counted in a
//! private IPC namespace where there is one, the shared sets' as the files
//! left in their own `KSYNC_SEM_DIR`. The bogo-ops rates of both are
//! printed, never asserted (timings from a shared machine are not a test).
//!
//! stress-ng is Debian's package `stress-ng`; `.ci/run` installs it where
//! apt-get works. Where it is missing the test says so on the terminal and
//! passes. `KSYNC_SYSV_STRESS_SECONDS` shortens or lengthens the runs.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::{library, run, scratch, sets_left};

/// Writes past libtest's capture, so a skip is seen without --nocapture.
fn tell(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{message}");
}

fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Whether this process may make a private IPC namespace (root, usually):
/// then the sets left behind can be counted without other users' sets.
fn private_ipc_namespace() -> bool {
    Command::new("unshare")
        .args(["--ipc", "true"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The shell script one run executes: stress-ng (preloaded when `$PRELOAD`
/// is set), then, in a private namespace, how many sets are left.
const SCRIPT: &str = r#"
if [ -n "$PRELOAD" ]; then
  LD_PRELOAD="$PRELOAD" stress-ng --sem-sysv 4 --timeout "${SECONDS_TO_RUN}s" --metrics
else
  stress-ng --sem-sysv 4 --timeout "${SECONDS_TO_RUN}s" --metrics
fi
status=$?
if [ -n "$COUNT_SETS" ]; then
  echo "sets left: $(( $(wc -l < /proc/sysvipc/sem) - 1 ))"
fi
exit $status
"#;

struct Outcome {
    ops_per_second: f64,
}

fn stress(label: &str, preload: Option<&Path>, seconds: u64, namespaced: bool) -> Outcome {
    let dir = scratch("stress-ng");
    let mut command = if namespaced {
        let mut c = Command::new("unshare");
        c.args(["--ipc", "sh", "-c", SCRIPT]);
        c.env("COUNT_SETS", "1");
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", SCRIPT]);
        c
    };
    command
        .env_remove("LD_LIBRARY_PATH")
        .env("SECONDS_TO_RUN", seconds.to_string());
    let folder = PathBuf::from(format!(
        "/dev/shm/ksync-sysv-stress.{}.{label}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&folder);
    command
        .env_remove("KSYNC_SYSV_BACKEND")
        .env("KSYNC_SEM_DIR", &folder);
    match preload {
        Some(lib) => command.env("PRELOAD", lib),
        None => command.env_remove("PRELOAD"),
    };
    let result = run(command, &dir, label, Duration::from_secs(seconds + 60));
    let files_left = sets_left(&folder);
    let all = format!("{}{}", result.stdout, result.stderr);
    assert!(
        result.status.success(),
        "stress-ng {label} exited with {}:\n{all}",
        result.status
    );
    assert!(
        all.contains("successful run completed"),
        "stress-ng {label} did not complete:\n{all}"
    );
    for line in all.lines() {
        assert!(
            !line.contains(" fail:") && !line.contains(" error:"),
            "stress-ng {label} reported a failure: {line}\n{all}"
        );
    }
    if namespaced {
        assert!(
            all.lines().any(|l| l == "sets left: 0"),
            "stress-ng {label} left kernel sets behind:\n{all}"
        );
    }
    assert!(
        files_left.is_empty(),
        "stress-ng {label} left shared sets behind: {files_left:?}\n{all}"
    );
    // stress-ng: metrc: [pid] sem-sysv  <ops> <real> <usr> <sys> <ops/s real> ...
    let ops_per_second = all
        .lines()
        .filter(|l| l.contains("metrc:"))
        .find_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let at = fields.iter().position(|f| *f == "sem-sysv")?;
            fields.get(at + 5)?.parse::<f64>().ok()
        })
        .unwrap_or_else(|| panic!("no sem-sysv metrics line from stress-ng {label}:\n{all}"));
    Outcome { ops_per_second }
}

#[test]
fn stress_ng_sem_sysv_against_the_kernel_and_under_ld_preload() {
    if !installed("stress-ng") {
        tell(
            "\n*** SKIPPED stress_ng_sem_sysv: stress-ng is not installed \
             (Debian: apt-get install stress-ng; .ci/run does this where it can) ***\n",
        );
        return;
    }
    let seconds = std::env::var("KSYNC_SYSV_STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let namespaced = private_ipc_namespace();
    if !namespaced {
        tell(
            "\n*** stress_ng_sem_sysv: no private IPC namespace here (not root?), \
             so the sets left behind are not counted ***\n",
        );
    }
    let kernel = stress("kernel", None, seconds, namespaced);
    let preloaded = stress("preload", Some(&library()), seconds, namespaced);
    tell(&format!(
        "stress-ng --sem-sysv 4 --timeout {seconds}s: {:.0} bogo ops/s against the kernel, \
         {:.0} under LD_PRELOAD ({:.2}x)",
        kernel.ops_per_second,
        preloaded.ops_per_second,
        preloaded.ops_per_second / kernel.ops_per_second
    ));
}
