//! Smoke tests for `sembench` and `wake`: every backend runs with tiny
//! durations and reports sembench's lines, the records reach `--json`, and
//! impossible requests fail with a clear message. No performance asserts.

use std::path::PathBuf;
use std::process::{Command, Output};

fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ksync-lab"))
        .args(args)
        .env("KSYNC_LAB_RESULTS", scratch("results"))
        .output()
        .expect("run ksync-lab")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ksync-lab-sembench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

fn ok(args: &[&str]) -> String {
    let out = lab(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed: {out:?}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails with status 2 and a message containing `needle`, without a panic.
fn refused(args: &[&str], needle: &str) {
    let out = lab(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    assert!(
        err.contains(needle),
        "{args:?}: stderr lacks '{needle}': {err}"
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn every_backend_prints_sembench_lines_and_a_comparison() {
    let json = scratch("sembench.json");
    let text = ok(&[
        "--json",
        json.to_str().unwrap(),
        "sembench",
        "-t",
        "8",
        "-w",
        "4",
        "-r",
        "0.5",
        "-o",
        "ipc,futex,posix,ksync",
    ]);
    for using in ["ipc sem", "futex", "posix sem", "ksync sem"] {
        assert!(
            text.contains(&format!("using {using} operations")),
            "no '{using}' block:\n{text}"
        );
    }
    assert_eq!(
        text.matches("8 threads, waking 4 at a time").count(),
        4,
        "{text}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("run time ") && l.ends_with(" worker burns per second"))
            .count(),
        4,
        "{text}"
    );
    assert!(text.contains("main thread burns: "), "{text}");
    assert!(text.contains("worker burn count total "), "{text}");
    assert!(text.contains("ksync counters: attempts "), "{text}");
    assert!(text.contains("| x ipc"), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("valid JSON");
    let records = report["records"].as_array().expect("records");
    assert_eq!(records.len(), 4, "{report}");
    for r in records {
        assert_eq!(r["experiment"], "sembench");
        assert_eq!(r["threads"], 8);
        let burns = r["metrics"]["burns_per_s"].as_f64().expect("burns_per_s");
        assert!(burns > 0.0, "{r}");
        assert!(r["metrics"]["main_burns"].as_f64().unwrap() >= 1.0, "{r}");
    }
    let ksync = records.iter().find(|r| r["ksync"] == true).expect("ksync");
    assert!(
        ksync["metrics"]["visited_per_burn"].as_f64().is_some(),
        "{ksync}"
    );
}

#[test]
fn more_workers_than_one_array_and_the_chained_variant() {
    // 300 workers: two arrays of 250, posting per array.
    let text = ok(&[
        "sembench",
        "-t",
        "300",
        "-w",
        "80",
        "-r",
        "0.3",
        "-o",
        "0,futex-chain",
    ]);
    assert!(text.contains("300 threads, waking 80 at a time"), "{text}");
    assert!(text.contains("using chained futex operations"), "{text}");
}

#[test]
fn impossible_sembench_requests_are_refused() {
    refused(&["sembench", "-w", "501", "-r", "0.1"], "SEMOPM");
    refused(&["sembench", "-w", "0", "-r", "0.1"], "-w");
    refused(&["sembench", "-t", "0", "-r", "0.1"], "-t needs");
    refused(&["sembench", "-r", "0"], "-r needs");
    refused(
        &["sembench", "-o", "bogus", "-r", "0.1"],
        "unknown sembench backend",
    );
    refused(&["sembench", "-o", "ipc,0", "-r", "0.1"], "named twice");
    refused(
        &["sembench", "--pin-main", "100000", "-r", "0.1"],
        "--pin-main",
    );
}

#[test]
fn wake_runs_both_experiments_with_tiny_sizes() {
    let text = ok(&[
        "wake",
        "--heads",
        "0,3",
        "--later",
        "2",
        "--seconds",
        "0.2",
        "--sizes",
        "8,16",
        "--rounds",
        "1",
    ]);
    assert!(text.contains("## deep wait list"), "{text}");
    assert!(text.contains("## bulk wake-up"), "{text}");
    for header in ["visited / cycle", "call ns / sleeper", "visited / sleeper"] {
        assert!(text.contains(header), "no '{header}':\n{text}");
    }
    // ksync rows carry counters (a waker looks at least at the sleeper it
    // completes), ipc rows a dash.
    let deep_row = |backend: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("| {backend} ")) && l.contains("|     3 |"))
            .unwrap_or_else(|| panic!("no {backend} 3-head row:\n{text}"));
        line.split('|').map(|c| c.trim().to_string()).collect()
    };
    // Columns: "", backend, post, heads, ns / cycle, attempts, visited, ...
    let visited: f64 = deep_row("ksync")[6].parse().expect("a number");
    assert!(visited >= 0.5, "{text}");
    assert_eq!(deep_row("ipc")[6], "-", "{text}");
    assert!(
        text.contains("per-sleeper time at 16 / at 8 sleepers"),
        "{text}"
    );
}

#[test]
fn impossible_wake_requests_are_refused() {
    refused(&["wake", "--experiments", "bogus"], "unknown experiment");
    refused(&["wake", "--sizes", "0"], "--sizes");
    refused(&["wake", "--later", "0"], "--later");
    refused(&["wake", "-o", "posix"], "unknown backend");
}

#[test]
fn sembench_prints_the_array_lock_statistics_for_ksync() {
    let text = ok(&["sembench", "-t", "4", "-w", "2", "-r", "0.2", "-o", "ksync"]);
    assert!(text.contains("array lock: lifetime"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("free ")),
        "no seed line:\n{text}"
    );
}

#[test]
fn semop_compares_uncontended_pairs_with_the_kernel() {
    let text = ok(&["semop", "--iters", "1000", "--rounds", "1"]);
    for backend in ["ksync-sem", "sysv-sem", "posix-sem"] {
        assert!(text.contains(backend), "no {backend} row:\n{text}");
    }
    refused(&["semop", "--iters", "0"], "--iters");
}
