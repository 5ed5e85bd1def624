//! What the lab's command-line tests share: running the binary, scratch
//! paths, and the checks every run gets (no panic; the right exit status).

// Each test binary includes this module and uses a different part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `ksync-lab` with `args`, writing relative outputs under the
/// scratch folder (never into the source tree, whatever a test forgets).
/// ksync's shared semaphore sets go to a scratch folder of their own: a
/// run that makes some (`compare`'s sembench) must not make them where a
/// test that counts sets looks, even after that test set `KSYNC_SEM_DIR`
/// for its own process ([`lab_in`]).
pub fn lab(args: &[&str]) -> Output {
    lab_in(&scratch("sem-sets"), args)
}

/// [`lab`] with ksync's shared semaphore sets in `sem_dir`
/// (`$KSYNC_SEM_DIR`), so that a test sees only the sets it made.
pub fn lab_in(sem_dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ksync-lab"))
        .args(args)
        .env("KSYNC_LAB_RESULTS", scratch("results"))
        .env("KSYNC_SEM_DIR", sem_dir)
        .output()
        .expect("run ksync-lab")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh path under the system's temporary folder, one folder per test
/// process, removed when the process exits.
pub fn scratch(name: &str) -> PathBuf {
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir).expect("temp dir");
    static CLEAN_UP: std::sync::Once = std::sync::Once::new();
    CLEAN_UP.call_once(|| {
        // The tests share the folder from parallel threads, so none of
        // them can remove it; the process can, once they are all done (the
        // harness exits through `exit`, which runs `atexit` handlers).
        extern "C" fn remove_scratch() {
            let _ = std::fs::remove_dir_all(scratch_dir());
        }
        // SAFETY: registers a function that takes nothing and returns.
        unsafe { libc::atexit(remove_scratch) };
    });
    dir.join(name)
}

fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("ksync-lab-tests-{}", std::process::id()))
}

/// Runs `args`, which must succeed without a panic; returns stdout.
pub fn ok(args: &[&str]) -> String {
    let out = lab(args);
    assert!(out.status.success(), "{args:?} failed: {out:?}");
    assert!(!stderr(&out).contains("panicked"), "{args:?}: {out:?}");
    stdout(&out)
}

/// Runs `args`, which must be refused as a usage error (status 2) without
/// a panic; returns stderr.
pub fn refused(args: &[&str]) -> String {
    let out = lab(args);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?} should fail with 2: {out:?}"
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    err
}

/// The JSON report at `path`.
pub fn report(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("json written");
    serde_json::from_str(&text).expect("valid JSON")
}

/// The records of the JSON report at `path`.
pub fn records(path: &std::path::Path) -> Vec<serde_json::Value> {
    report(path)["records"].as_array().expect("records").clone()
}

/// Metric `key` of `backend`'s record from round `round` (`--repeat`).
pub fn metric(records: &[serde_json::Value], backend: &str, round: u64, key: &str) -> f64 {
    records
        .iter()
        .find(|r| r["lock"] == backend && r["repeat"] == round)
        .and_then(|r| r["metrics"][key].as_f64())
        .unwrap_or_else(|| panic!("{backend} round {round} lacks {key}: {records:?}"))
}

/// In each of `rounds` rounds, `backend`'s metric `ratio` is its `key` over
/// `base`'s from the same round: a ratio paired within the round.
pub fn paired(
    records: &[serde_json::Value],
    rounds: u64,
    backend: &str,
    base: &str,
    key: &str,
    ratio: &str,
) {
    for round in 0..rounds {
        let got = metric(records, backend, round, ratio);
        let want = metric(records, backend, round, key) / metric(records, base, round, key);
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1.0),
            "{backend} round {round}: {ratio} {got}, not {want}: {records:?}"
        );
    }
}
