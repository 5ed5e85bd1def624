//! Smoke tests: every subcommand runs with tiny durations, the output files
//! round-trip, and impossible requests fail with a clear message instead of
//! a panic. No test asserts performance: the machines are shared and noisy.

mod common;

use common::{lab, lab_in, ok, paired, records, refused, report, scratch, stderr, stdout};

#[test]
fn list_names_every_lock_and_mix() {
    let text = ok(&["list"]);
    for name in [
        "tas",
        "ticket-auto-lock",
        "ticket-fixed-250",
        "mcs",
        "qspin",
        "pv-qspin",
        "parking_lot-fair",
        "spin-ticket",
        "pthread-spin",
        "busted",
        "rwsem",
        "spin-rwsem",
        "wo",
        "sysv",
        "ksync-sem",
        "ksync-shared",
        "futex-chain",
    ] {
        assert!(text.contains(name), "list lacks {name}:\n{text}");
    }
}

#[test]
fn uncontended_measures_and_repeats() {
    let json = scratch("uncontended-repeats.json");
    let text = ok(&[
        "--json",
        json.to_str().unwrap(),
        "uncontended",
        "--locks",
        "qspin,cas-floor",
        "--iters",
        "1000",
        "--rounds",
        "1",
        "--repeat",
        "3",
    ]);
    assert!(
        text.contains("| qspin") && text.contains("x cas-floor"),
        "{text}"
    );
    // Every point ran three times, and its row shows median [min-max]
    // unless all three agreed to the digits shown.
    let records = records(&json);
    assert_eq!(records.len(), 6, "{records:?}");
    for lock in ["qspin", "cas-floor"] {
        let shown: Vec<String> = records
            .iter()
            .filter(|r| r["lock"] == lock)
            .map(|r| format!("{:.2}", r["metrics"]["ns"].as_f64().expect("ns")))
            .collect();
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| {lock} ")))
            .unwrap_or_else(|| panic!("no row for {lock}: {text}"));
        let agreed = shown.iter().all(|v| *v == shown[0]);
        assert_eq!(row.contains('['), !agreed, "{shown:?}: {row}");
    }
}

#[test]
fn uncontended_shows_the_cost_of_lock_statistics() {
    let text = ok(&[
        "uncontended",
        "--locks",
        "qspin,qspin+stat,qspin+stat0,parking_lot,parking_lot+stat",
        "--iters",
        "1000",
        "--rounds",
        "1",
    ]);
    for needle in [
        "x bare lock",
        "qspin+stat / qspin = ",
        "qspin+stat0 / qspin = ",
        "parking_lot+stat / parking_lot = ",
        "(target <= 1.3x",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    // Without a bare lock beside it, no ratio.
    let alone = ok(&[
        "uncontended",
        "--locks",
        "tas+stat",
        "--iters",
        "1000",
        "--rounds",
        "1",
    ]);
    assert!(
        alone.contains("| tas+stat") && !alone.contains("x bare lock"),
        "{alone}"
    );
    // The defaults stay the bare locks.
    let list = ok(&["list"]);
    assert!(
        list.contains("qspin+stat") && list.contains("rwsem+stat"),
        "{list}"
    );
}

#[test]
fn spin_lock_stats_wraps_ksync_locks_and_prints_their_statistics() {
    let json = scratch("spin-lock-stats.json");
    let out = lab(&[
        "spin",
        "--lock-stats",
        "--locks",
        "qspin,parking_lot",
        "--threads",
        "2",
        "--loops",
        "2000",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    for needle in [
        "| qspin+stat",
        "| parking_lot ",
        "### Lock statistics",
        "qspin+stat:\nfree ",
        "contentions",
        "1/1000 cpu",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    assert!(text.lines().any(|l| l.starts_with("free ")), "{text}");
    // Only the wrapped lock has statistics.
    assert!(!text.contains("parking_lot:\nfree"), "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let records = report["records"].as_array().unwrap();
    let qspin = records
        .iter()
        .find(|r| r["lock"] == "qspin+stat")
        .expect("a qspin+stat record");
    assert_eq!(qspin["metrics"]["lockstat_acquisitions"], 4000.0);
    for key in [
        "lockstat_contended_fraction",
        "lockstat_wait_avg_ns",
        "lockstat_per_mille",
    ] {
        assert!(qspin["metrics"][key].is_number(), "{key}: {qspin}");
    }
    let peer = records.iter().find(|r| r["lock"] == "parking_lot").unwrap();
    assert!(
        peer["metrics"].get("lockstat_contended").is_none(),
        "{peer}"
    );

    // A `+stat` entry named directly prints its statistics without the flag.
    let named = ok(&[
        "spin",
        "--locks",
        "tas+stat",
        "--threads",
        "1",
        "--loops",
        "1000",
    ]);
    assert!(
        named.contains("tas+stat:\nfree 1000 contended 0 wait 0 avg 0 1/1000 cpu time 0"),
        "{named}"
    );
}

#[test]
fn rwsem_lock_stats_prints_reader_and_writer_rows() {
    let text = ok(&[
        "rwsem",
        "--lock-stats",
        "--mixes",
        "rw",
        "--locks",
        "rwsem,std",
        "--seconds",
        "0.05",
    ]);
    for needle in [
        "| rwsem+stat",
        "rwsem+stat:\nfree ",
        "rwsem+stat-W",
        "rwsem+stat-R",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    assert!(!text.contains("EXCLUSION FAILED"), "{text}");
}

#[test]
fn spin_loops_mode_reports_elapsed_ms_and_waits() {
    let text = ok(&[
        "spin",
        "--locks",
        "qspin,pv-qspin,parking_lot",
        "--threads",
        "1,3",
        "--loops",
        "2000",
        "--layout",
        "both",
        "--pin",
        "spread",
    ]);
    for needle in [
        "## 3 threads, 2000 rounds each, lock standalone",
        "elapsed ms",
        "longest wait us",
        "Waiman Long's table (unfair qspinlock v10, LKML, May 2014), lock embedded",
        "pv-qspin events per 1000 acquisitions",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    assert!(!text.contains("LOST UPDATES"), "{text}");
}

#[test]
fn spin_stops_a_run_past_its_time_limit() {
    let text = ok(&[
        "spin",
        "--locks",
        "ticket",
        "--threads",
        "6",
        "--loops",
        "100000000",
        "--time-limit",
        "0.2",
    ]);
    assert!(text.contains("DNF in 0.2 s"), "{text}");
}

#[test]
fn spin_timed_mode_runs_oversubscribed() {
    let text = ok(&[
        "spin",
        "--locks",
        "pv-qspin,std",
        "--threads",
        "8",
        "--seconds",
        "0.05",
        "--no-wait-clock",
    ]);
    assert!(
        text.contains("## 8 threads, 0.05 s") && text.contains("Mops/s"),
        "{text}"
    );
    assert!(!text.contains("longest wait"), "{text}");
}

#[test]
fn rwsem_runs_mixes_and_lists_them() {
    let text = ok(&[
        "rwsem",
        "--mixes",
        "rw,r1",
        "--locks",
        "rwsem,std,spin",
        "--seconds",
        "0.05",
    ]);
    for needle in [
        "rwsem mix rw",
        "reads taken",
        "writer share min-max",
        "longest write wait ms",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    assert!(!text.contains("EXCLUSION FAILED"), "{text}");
    let mixes = ok(&["rwsem", "--list-mixes"]);
    assert!(
        mixes.contains("| wo ") && mixes.contains("interval us"),
        "{mixes}"
    );
    let custom = ok(&[
        "rwsem",
        "--readers",
        "2",
        "--writers",
        "1",
        "--seconds",
        "0.05",
        "--locks",
        "rwsem",
    ]);
    assert!(
        custom.contains("mix custom: 2 readers, 1 writers"),
        "{custom}"
    );
}

/// Runs `args` with `--repeat 2` into a JSON report and checks that every
/// record of `locks` has, in each round, its ratio to each peer of `peers`
/// from that round.
fn ratios_within_rounds(name: &str, args: &[&str], locks: &[&str], peers: &[&str], key: &str) {
    let json = scratch(name);
    let mut all = vec!["--repeat", "2", "--json", json.to_str().unwrap()];
    all.extend_from_slice(args);
    ok(&all);
    let records = records(&json);
    assert_eq!(records.len(), 2 * locks.len(), "{records:?}");
    for lock in locks {
        for peer in peers {
            paired(&records, 2, lock, peer, key, &format!("x_{peer}"));
        }
    }
    // A ksync lock is nobody's peer.
    for r in &records {
        for ours in locks.iter().filter(|l| !peers.contains(l)) {
            assert!(r["metrics"].get(format!("x_{ours}")).is_none(), "{r}");
        }
    }
}

#[test]
fn spin_backoff_and_rwsem_take_their_ratios_within_a_round() {
    let spin = ["spin", "--locks", "qspin,std,parking_lot", "--threads", "2"];
    let quick = ["--seconds", "0.05", "--no-wait-clock"];
    let spin: Vec<&str> = spin.iter().chain(&quick).copied().collect();
    let locks = ["qspin", "std", "parking_lot"];
    ratios_within_rounds("spin-rounds.json", &spin, &locks, &locks[1..], "ops_per_s");
    let backoff = [
        "backoff",
        "--workloads",
        "two-lock",
        "--locks",
        "ticket,std",
        "--threads",
        "3",
        "--seconds",
        "0.05",
    ];
    let locks = ["ticket", "std"];
    ratios_within_rounds(
        "backoff-rounds.json",
        &backoff,
        &locks,
        &locks[1..],
        "ops_per_s",
    );
    let rwsem = [
        "rwsem",
        "--mixes",
        "w1",
        "--locks",
        "rwsem,std",
        "--seconds",
        "0.05",
    ];
    let locks = ["rwsem", "std"];
    ratios_within_rounds(
        "rwsem-rounds.json",
        &rwsem,
        &locks,
        &locks[1..],
        "ops_per_s",
    );
}

#[test]
fn backoff_runs_both_workloads() {
    let text = ok(&[
        "backoff",
        "--locks",
        "ticket,ticket-auto,ticket-auto-lock,spin-ticket",
        "--threads",
        "1,3",
        "--seconds",
        "0.05",
    ]);
    for needle in [
        "One relax (PAUSE) takes",
        "backoff, embedded lock",
        "backoff, two-lock mix",
        "cold mean ns",
        "| ticket-auto-lock",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
}

#[test]
fn torture_passes_real_locks_in_the_kernel_format() {
    let text = ok(&[
        "torture",
        "--locks",
        "qspin,parking_lot",
        "--rw-locks",
        "rwsem",
        "--seconds",
        "0.2",
        "--stutter",
        "0.05",
        "--long-hold-ms",
        "1",
    ]);
    assert!(text.contains("Writes:  Total: "), "{text}");
    assert!(text.contains("Reads :  Total: "), "{text}");
    assert!(text.contains("Fail: 0"), "{text}");
    assert!(
        text.contains("qspin-torture:--- End of test: SUCCESS"),
        "{text}"
    );
    assert!(!text.contains("FAILURE"), "{text}");
}

#[test]
fn torture_catches_the_busted_lock() {
    let out = lab(&[
        "torture",
        "--locks",
        "busted",
        "--seconds",
        "0.3",
        "--stutter",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("busted-torture:--- End of test: FAILURE"),
        "{text}"
    );
    assert!(text.contains("!!!"), "{text}");
    assert!(stderr(&out).contains("torture FAILED"), "{out:?}");
}

#[test]
fn compare_runs_quickly_and_ends_with_one_summary() {
    let text = ok(&["compare", "--seconds", "0.02"]);
    let summary = text
        .split("## Summary")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary:\n{text}"));
    for row in [
        "uncontended lock + unlock",
        "spin, 2 threads",
        "backoff two-lock",
        "rwsem wo",
    ] {
        assert!(summary.contains(row), "summary lacks {row}:\n{summary}");
    }
    assert!(
        summary.contains("best peer") && summary.contains("| qspin"),
        "{summary}"
    );
}

#[test]
fn json_and_csv_round_trip_through_show() {
    let json = scratch("spin.json");
    let csv = scratch("spin.csv");
    let csv_again = scratch("spin-again.csv");
    let (json_s, csv_s, csv2_s) = (
        json.to_str().unwrap(),
        csv.to_str().unwrap(),
        csv_again.to_str().unwrap(),
    );
    ok(&[
        "--json",
        json_s,
        "--csv",
        csv_s,
        "spin",
        "--locks",
        "qspin,std",
        "--threads",
        "1,2",
        "--loops",
        "1000",
        "--repeat",
        "2",
    ]);
    let value = report(&json);
    assert_eq!(value["tool"], "ksync-lab");
    assert_eq!(value["repeat"], 2);
    assert!(value["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(value["machine"].get("sem_limits").is_some());
    let records = value["records"].as_array().expect("records");
    assert_eq!(
        records.len(),
        2 * 2 * 2,
        "2 locks x 2 thread counts x 2 runs"
    );
    assert!(records[0]["metrics"]["elapsed_ms"].as_f64().unwrap() > 0.0);
    let lines = std::fs::read_to_string(&csv).expect("csv written");
    assert_eq!(lines.lines().count(), 1 + records.len());
    assert!(lines.starts_with("experiment,workload,lock,ksync,threads,repeat,cpu,cores,kernel"));
    // `show` parses the JSON back into the results model and writes the same CSV.
    let shown = ok(&["show", json_s, "--csv", csv2_s]);
    assert!(
        shown.contains("| spin") && shown.contains("qspin"),
        "{shown}"
    );
    assert_eq!(std::fs::read_to_string(&csv_again).unwrap(), lines);
}

#[test]
fn plots_are_drawn_as_svg_and_png() {
    for name in ["spin.svg", "spin.png"] {
        let path = scratch(name);
        ok(&[
            "spin",
            "--locks",
            "qspin,parking_lot",
            "--threads",
            "1,2",
            "--loops",
            "1000",
            "--plot",
            path.to_str().unwrap(),
        ]);
        let bytes = std::fs::read(&path).expect("plot written");
        if name.ends_with(".png") {
            assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
        } else {
            let svg = String::from_utf8_lossy(&bytes);
            assert!(svg.contains("<svg") && svg.contains("qspin"), "{svg}");
        }
    }
}

#[test]
fn relative_outputs_go_to_the_results_folder() {
    ok(&[
        "--json",
        "rel.json",
        "uncontended",
        "--locks",
        "qspin",
        "--iters",
        "100",
        "--rounds",
        "1",
    ]);
    assert!(scratch("results").join("rel.json").exists());
}

#[test]
fn impossible_requests_fail_cleanly() {
    for args in [
        &["spin", "--locks", "no-such-lock"][..],
        &["spin", "--threads", "0"],
        &["spin", "--seconds", "0"],
        &["spin", "--loops", "0"],
        &["spin", "--time-limit", "-1"],
        &["spin", "--pin", "99999"],
        &["spin", "--pin", "banana"],
        &["rwsem", "--mixes", "zz"],
        &["rwsem", "--locks", "nope"],
        &["rwsem", "--readers", "0", "--writers", "0"],
        &["backoff", "--threads", "0"],
        &["backoff", "--locks", "nope"],
        &["torture", "--locks", "nope"],
        &["torture", "--writers", "0"],
        &["torture", "--seconds", "nan"],
        &["uncontended", "--iters", "0"],
        &["--repeat", "0", "list"],
        &["--plot", "out.pdf", "list"],
        &["show", "/no/such/report.json"],
        &["ipcrm"],
        &["ipcrm", "-S", "0"],
        &["ipcrm", "-S", "0xnope"],
        &["ipcrm", "--all", "-s", "5"],
        &["--csv", "sets.csv", "ipcs"],
    ] {
        let err = refused(args);
        assert!(
            err.starts_with("ksync-lab: ") || err.starts_with("error: "),
            "{args:?}: {err}"
        );
    }
}

/// Runs `args` with shared sets in `dir`; it must succeed without a panic.
fn ok_in(dir: &std::path::Path, args: &[&str]) -> String {
    let out = lab_in(dir, args);
    assert!(out.status.success(), "{args:?} failed: {out:?}");
    assert!(!stderr(&out).contains("panicked"), "{args:?}: {out:?}");
    stdout(&out)
}

#[test]
fn ipcs_lists_shared_sets_and_ipcrm_removes_them() {
    use ksync::sem::{SemBuf, SharedSemSet, IPC_CREAT, IPC_PRIVATE, SEM_UNDO};
    let dir = scratch("sem-dir");
    let empty = format!("no ksync shared semaphore sets in {}", dir.display());
    assert!(ok_in(&dir, &["ipcs"]).contains(&empty));
    // The sets this test makes go to its own directory. No other test of
    // this binary opens shared sets, and their lab processes get the
    // variable only where they ask for it (`lab_in`).
    std::env::set_var("KSYNC_SEM_DIR", &dir);
    let set = SharedSemSet::open(0x4b53, 3, IPC_CREAT | 0o640).expect("create a set");
    set.semop(&[SemBuf::new(1, 2, SEM_UNDO)]).expect("semop");
    let id = set.id().to_string();

    let text = ok_in(&dir, &["ipcs"]);
    let row = text
        .lines()
        .find(|l| l.contains(&id))
        .unwrap_or_else(|| panic!("no row for {id}:\n{text}"));
    for cell in ["0x00004b53", "640", " 3 "] {
        assert!(row.contains(cell), "{cell} missing: {row}");
    }
    assert!(!row.contains("not set"), "semop set otime: {row}");

    let detail = ok_in(&dir, &["ipcs", "-i", &id]);
    let me = std::process::id().to_string();
    assert!(
        detail.contains(&format!("Semaphore Array semid={id}")),
        "{detail}"
    );
    assert!(detail.contains("nsems = 3"), "{detail}");
    let sem1 = detail
        .lines()
        .find(|l| l.starts_with("| 1 "))
        .unwrap_or_else(|| panic!("no semaphore 1:\n{detail}"));
    assert!(sem1.contains(" 2 ") && sem1.contains(&me), "{sem1}");
    // The test process holds the undo of its +2.
    assert!(
        detail
            .lines()
            .any(|l| l.contains(&me) && l.contains("1: -2")),
        "{detail}"
    );

    let json = scratch("ipcs.json");
    ok_in(&dir, &["--json", json.to_str().unwrap(), "ipcs"]);
    let listing: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(listing["sets"][0]["id"], set.id(), "{listing}");
    assert_eq!(listing["sets"][0]["key"], "0x00004b53", "{listing}");

    // A file that is no set gets a row with its errno, and no panic.
    let junk = dir.join("sem.1073741824");
    std::fs::write(&junk, b"not a semaphore set").unwrap();
    let text = ok_in(&dir, &["ipcs"]);
    assert!(
        text.lines()
            .any(|l| l.contains("1073741824") && l.contains("errno 22")),
        "{text}"
    );
    std::fs::remove_file(&junk).unwrap();

    let text = ok_in(&dir, &["ipcrm", "-S", "0x4b53"]);
    assert!(text.contains(&format!("removed set {id}")), "{text}");
    assert!(ok_in(&dir, &["ipcs"]).contains(&empty));
    assert!(set.get_value(0).is_err(), "the handle sees the removal");

    // Removing what is not there fails, naming it.
    let out = lab_in(&dir, &["ipcrm", "-s", &id]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr(&out).contains(&format!("id {id}: ")) && stderr(&out).contains("errno 2"),
        "{out:?}"
    );

    let a = SharedSemSet::open(IPC_PRIVATE, 1, IPC_CREAT | 0o600).unwrap();
    let b = SharedSemSet::open(0x77, 2, IPC_CREAT | 0o600).unwrap();
    let text = ok_in(&dir, &["ipcrm", "--all"]);
    assert_eq!(text.matches("removed set ").count(), 2, "{text}");
    assert!(ok_in(&dir, &["ipcs"]).contains(&empty));
    drop((a, b));

    // A set another version of ksync made (its file's version word, the
    // second, differs): ipcs names it and says how to remove it, and ipcrm
    // does, by key as by id.
    for how in ["-S", "-s"] {
        let old = SharedSemSet::open(0x4b54, 1, IPC_CREAT | 0o600).unwrap();
        let old_id = old.id().to_string();
        drop(old);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(format!("sem.{old_id}")))
            .unwrap();
        let other = ksync::sem::shared::LAYOUT_VERSION + 1;
        std::os::unix::fs::FileExt::write_all_at(&file, &other.to_ne_bytes(), 4).unwrap();
        let text = ok_in(&dir, &["ipcs"]);
        assert!(
            text.contains("made by another version of ksync")
                && text.contains(&format!("ipcrm -s {old_id}")),
            "{text}"
        );
        let name = if how == "-S" {
            "0x4b54".to_string()
        } else {
            old_id.clone()
        };
        let text = ok_in(&dir, &["ipcrm", how, &name]);
        assert!(
            text.contains(&format!("removed set {old_id}, made by another version")),
            "{text}"
        );
        assert!(ok_in(&dir, &["ipcs"]).contains(&empty));
    }
}
