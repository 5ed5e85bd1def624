//! Smoke tests: every subcommand runs with tiny durations, and impossible
//! requests fail with a clear message instead of a panic.

use std::process::{Command, Output};

fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ksync-lab"))
        .args(args)
        .output()
        .expect("run ksync-lab")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn list_names_every_lock() {
    let out = lab(&["list"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for name in [
        "tas",
        "ticket-auto-lock",
        "mcs",
        "qspin",
        "pv-qspin",
        "parking_lot",
        "pthread",
        "rwsem",
    ] {
        assert!(text.contains(name), "list lacks {name}:\n{text}");
    }
}

#[test]
fn uncontended_measures_and_compares_to_the_floor() {
    let out = lab(&[
        "uncontended",
        "--locks",
        "qspin,cas-floor",
        "--iters",
        "1000",
        "--rounds",
        "1",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("| qspin") && text.contains("x cas-floor"),
        "{text}"
    );
}

#[test]
fn spin_runs_oversubscribed_and_checks_exactness() {
    let out = lab(&[
        "spin",
        "--locks",
        "pv-qspin,parking_lot",
        "--threads",
        "1,8",
        "--seconds",
        "0.05",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(text.contains("## 8 threads"), "{text}");
    assert!(!text.contains("LOST UPDATES"), "{text}");
}

#[test]
fn rwsem_runs_a_mix() {
    let out = lab(&[
        "rwsem",
        "--mixes",
        "rw",
        "--locks",
        "rwsem,std",
        "--seconds",
        "0.05",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("rwsem mix rw") && text.contains("reads taken"),
        "{text}"
    );
    assert!(!text.contains("EXCLUSION FAILED"), "{text}");
}

#[test]
fn impossible_requests_fail_cleanly() {
    for args in [
        &["spin", "--locks", "no-such-lock"][..],
        &["spin", "--threads", "0"],
        &["spin", "--seconds", "0"],
        &["rwsem", "--mixes", "zz"],
        &["rwsem", "--locks", "nope"],
    ] {
        let out = lab(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?} should fail with 2: {out:?}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("ksync-lab: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
