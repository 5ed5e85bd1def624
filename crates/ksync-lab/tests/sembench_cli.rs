//! Smoke tests for `sembench` and `wake`: every backend runs with tiny
//! durations and reports sembench's lines, the records reach `--json`, and
//! impossible requests fail with a clear message. No performance asserts.

mod common;

use common::{lab, lab_in, ok, paired, records, refused, report, scratch, stderr, stdout};

/// Fails with status 2 and a message containing `needle`, without a panic.
fn refused_with(args: &[&str], needle: &str) {
    let err = refused(args);
    assert!(
        err.contains(needle),
        "{args:?}: stderr lacks '{needle}': {err}"
    );
}

/// Every record names its backend the one way the registry does, in the
/// record's `lock` and in its `backend` parameter.
fn named_by_the_registry(records: &[serde_json::Value], known: &[&str]) {
    for r in records {
        let lock = r["lock"].as_str().expect("a lock name");
        assert!(known.contains(&lock), "{lock}: {r}");
        assert_eq!(r["params"]["backend"], lock, "{r}");
    }
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
    for using in ["sysv", "futex", "posix-sem", "ksync-sem"] {
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
    assert!(text.contains("| x sysv"), "{text}");
    let records = records(&json);
    assert_eq!(records.len(), 4, "{records:?}");
    named_by_the_registry(&records, &["sysv", "futex", "posix-sem", "ksync-sem"]);
    for r in &records {
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
fn every_backend_gets_a_per_burn_breakdown_and_the_floor_runs() {
    let json = scratch("sembench-breakdown.json");
    let text = ok(&[
        "--json",
        json.to_str().unwrap(),
        "sembench",
        "-t",
        "8",
        "-w",
        "4",
        "-r",
        "0.3",
        "-o",
        "sysv,futex-batch",
    ]);
    assert!(text.contains("using futex-batch operations"), "{text}");
    assert!(text.contains("what one worker burn cost"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("per worker burn: cpu "))
            .count(),
        2,
        "{text}"
    );
    let row = |name: &str| -> Vec<String> {
        text.lines()
            .rfind(|l| l.starts_with(&format!("| {name} ")))
            .unwrap_or_else(|| panic!("no {name} row:\n{text}"))
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    // Columns: "", backend, cpu us, kernel us, vol, invol, sleeps, wake
    // calls, lock waits, polls.
    let (kernel, floor) = (row("sysv"), row("futex-batch"));
    assert!(kernel[2].parse::<f64>().is_ok(), "{text}");
    assert_eq!(kernel[6], "-", "{text}");
    assert!(floor[9].parse::<f64>().is_ok(), "{text}");
    let records = records(&json);
    for r in &records {
        assert!(
            r["metrics"]["voluntary_switches_per_burn"]
                .as_f64()
                .is_some(),
            "{r}"
        );
    }
    let floor = records
        .iter()
        .find(|r| r["lock"] == "futex-batch")
        .expect("floor");
    assert!(
        floor["metrics"]["polls_per_burn"].as_f64().is_some(),
        "{floor}"
    );
}

/// A run whose ksync locks waited names the spin budget they waited with
/// (one context switch, measured in the run's process), in the report and
/// on stderr: a figure taken while the machine was busy shows there.
#[test]
fn the_report_names_the_spin_budget_of_the_runs_locks() {
    let json = scratch("sembench-switch.json");
    let out = lab(&[
        "--json",
        json.to_str().unwrap(),
        "sembench",
        "-t",
        "8",
        "-w",
        "4",
        "-r",
        "0.3",
        "-o",
        "ksync",
    ]);
    assert!(out.status.success(), "{out:?}");
    let ns = report(&json)["switch_ns"]
        .as_u64()
        .expect("switch_ns in the report");
    assert!((200..=200_000).contains(&ns), "{ns}");
    assert!(
        stderr(&out).contains("ksync's spin budget in this run: one context switch, "),
        "{out:?}"
    );
}

#[test]
fn repeats_run_in_rounds_and_ratios_pair_runs_of_the_same_round() {
    let json = scratch("sembench-rounds.json");
    let text = ok(&[
        "--json",
        json.to_str().unwrap(),
        "--repeat",
        "2",
        "sembench",
        "-t",
        "8",
        "-w",
        "4",
        "-r",
        "0.2",
        "-o",
        "sysv,ksync,futex-batch",
    ]);
    // Every backend once per round, in the order given.
    let order: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("using ")?.strip_suffix(" operations"))
        .collect();
    assert_eq!(
        order,
        [
            "sysv",
            "ksync-sem",
            "futex-batch",
            "sysv",
            "ksync-sem",
            "futex-batch"
        ],
        "{text}"
    );
    assert!(text.contains("ratios to sysv and the floor"), "{text}");
    assert!(text.contains("| x floor"), "{text}");
    let records = records(&json);
    assert_eq!(records.len(), 6, "{records:?}");
    for backend in ["sysv", "ksync-sem", "futex-batch"] {
        paired(&records, 2, backend, "sysv", "burns_per_s", "x_sysv");
        paired(
            &records,
            2,
            backend,
            "futex-batch",
            "burns_per_s",
            "x_floor",
        );
    }
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
    assert!(text.contains("using futex-chain operations"), "{text}");
}

#[test]
fn impossible_sembench_requests_are_refused() {
    refused_with(&["sembench", "-w", "501", "-r", "0.1"], "SEMOPM");
    refused_with(&["sembench", "-w", "0", "-r", "0.1"], "-w");
    refused_with(&["sembench", "-t", "0", "-r", "0.1"], "-t needs");
    refused_with(&["sembench", "-r", "0"], "-r needs");
    refused_with(
        &["sembench", "-o", "bogus", "-r", "0.1"],
        "unknown sembench backend",
    );
    refused_with(&["sembench", "-o", "ipc,0", "-r", "0.1"], "named twice");
    refused_with(
        &["sembench", "--pin-main", "100000", "-r", "0.1"],
        "--pin-main",
    );
    refused_with(
        &[
            "sembench",
            "-o",
            "sysv,futex",
            "--processes",
            "2",
            "-r",
            "0.1",
        ],
        "futex live in one process",
    );
    refused_with(
        &["sembench", "--processes", "0", "-r", "0.1"],
        "--processes needs",
    );
    refused_with(
        &["sembench", "-t", "4", "--processes", "5", "-r", "0.1"],
        "at most one per worker thread",
    );
}

#[test]
fn workers_in_child_processes_on_the_process_shared_backends() {
    let dir = scratch("sembench-sem-dir");
    let json = scratch("sembench-processes.json");
    let out = lab_in(
        &dir,
        &[
            "--json",
            json.to_str().unwrap(),
            "sembench",
            "-t",
            "8",
            "-w",
            "4",
            "-r",
            "0.3",
            "-o",
            "sysv,ksync-shared",
            "--processes",
            "2",
        ],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(!stderr(&out).contains("panicked"), "{out:?}");
    assert_eq!(
        text.matches("workers in 2 child processes, the main thread in the parent")
            .count(),
        2,
        "{text}"
    );
    for using in ["sysv", "ksync-shared"] {
        assert!(
            text.contains(&format!("using {using} operations")),
            "{text}"
        );
    }
    assert!(
        text.contains("--processes 2: worker burns per second"),
        "{text}"
    );
    let records = records(&json);
    named_by_the_registry(&records, &["sysv", "ksync-shared"]);
    for r in &records {
        assert_eq!(r["params"]["processes"], "2", "{r}");
        assert!(r["metrics"]["burns_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(
            r["metrics"]["worker_burns"].as_f64().map(|b| b > 0.0),
            Some(true)
        );
        // Each process counts its own calls: the parent's alone would
        // pass for the run's.
        assert!(r["metrics"].get("sleeps_per_burn").is_none(), "{r}");
        assert!(r["metrics"].get("attempts_per_burn").is_none(), "{r}");
    }
    // Every set the run made is gone with it.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn wake_runs_both_experiments_with_tiny_sizes() {
    let json = scratch("wake.json");
    let text = ok(&[
        "--json",
        json.to_str().unwrap(),
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
    // completes), the kernel's rows a dash.
    let deep_row = |backend: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("| {backend} ")) && l.contains("|     3 |"))
            .unwrap_or_else(|| panic!("no {backend} 3-head row:\n{text}"));
        line.split('|').map(|c| c.trim().to_string()).collect()
    };
    // Columns: "", backend, post, heads, ns / cycle, attempts, visited, ...
    let visited: f64 = deep_row("ksync-sem")[6].parse().expect("a number");
    assert!(visited >= 0.5, "{text}");
    assert_eq!(deep_row("sysv")[6], "-", "{text}");
    assert!(
        text.contains("per-sleeper time at 16 / at 8 sleepers"),
        "{text}"
    );
    // The floor runs the bulk wake-up by semop only: no deep row, no setall
    // row, a semop row per size.
    let (deep, bulk) = text
        .split_once("## bulk wake-up")
        .expect("a deep table, then a bulk table");
    assert!(!deep.contains("| futex-batch "), "{text}");
    assert!(bulk.contains("| futex-batch | semop "), "{text}");
    assert!(!bulk.contains("| futex-batch | setall"), "{text}");
    let records = records(&json);
    assert!(!records.is_empty());
    named_by_the_registry(&records, &["sysv", "ksync-sem", "futex-batch"]);
    // Each bulk call over the kernel's with the same waker and sleepers.
    assert!(bulk.contains("call / sysv's"), "{text}");
    let bulk: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["params"]["waker"].is_string())
        .collect();
    assert_eq!(bulk.len(), 10, "{records:?}");
    for r in &bulk {
        let kernel = bulk
            .iter()
            .find(|k| {
                k["lock"] == "sysv"
                    && k["params"]["waker"] == r["params"]["waker"]
                    && k["threads"] == r["threads"]
            })
            .unwrap_or_else(|| panic!("no kernel row for {r}"));
        let call = |r: &serde_json::Value| r["metrics"]["call_ns_per_sleeper"].as_f64().unwrap();
        let got = r["metrics"]["call_x_sysv"].as_f64().unwrap();
        let want = call(r) / call(kernel);
        assert!(
            (got - want).abs() <= 1e-9 * want.max(1.0),
            "{got} != {want}: {r}"
        );
    }
}

#[test]
fn impossible_wake_requests_are_refused() {
    refused_with(&["wake", "--experiments", "bogus"], "unknown experiment");
    refused_with(&["wake", "--sizes", "0"], "--sizes");
    refused_with(&["wake", "--later", "0"], "--later");
    refused_with(&["wake", "-o", "posix"], "unknown backend");
    // The floor has neither the deep list's heads nor SETALL.
    refused_with(
        &["wake", "-o", "futex-batch", "--experiments", "deep"],
        "runs only the bulk wake-up by semop",
    );
    refused_with(
        &["wake", "-o", "futex-batch", "--waker", "setall"],
        "runs only the bulk wake-up by semop",
    );
}

#[test]
fn sembench_prints_the_array_lock_statistics_for_ksync() {
    let text = ok(&["sembench", "-t", "4", "-w", "2", "-r", "0.2", "-o", "ksync"]);
    assert!(text.contains("array lock: lifetime"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("free ")),
        "no lock statistics line:\n{text}"
    );
}

#[test]
fn semop_compares_uncontended_pairs_with_the_kernel() {
    let json = scratch("semop.json");
    let text = ok(&[
        "--json",
        json.to_str().unwrap(),
        "semop",
        "--iters",
        "1000",
        "--rounds",
        "1",
    ]);
    let rows = [
        "two-cas-floor",
        "ksync-sem",
        "ksync-shared",
        "sysv",
        "posix-sem",
    ];
    for backend in rows {
        assert!(
            text.lines().any(|l| l.contains(&format!("| {backend} "))),
            "no {backend} row:\n{text}"
        );
    }
    assert!(text.contains("x two CAS"), "{text}");
    let records = records(&json);
    // The floor, four backends with one semaphore per call, three with two.
    assert_eq!(records.len(), 8, "{records:?}");
    let ns = |lock: &str, sems: &str| {
        let r = records
            .iter()
            .find(|r| {
                r["lock"] == lock && (lock == "two-cas-floor" || r["params"]["semaphores"] == sems)
            })
            .unwrap_or_else(|| panic!("no {lock} x{sems}: {records:?}"));
        (r["metrics"]["ns"].as_f64().unwrap(), r)
    };
    let (floor, _) = ns("two-cas-floor", "1");
    for r in &records {
        let lock = r["lock"].as_str().unwrap();
        assert!(rows.contains(&lock), "{r}");
        // Ratios to the floor and to the kernel's call on as many
        // semaphores, from the same round (the only one here).
        let sems = r["params"]["semaphores"].as_str().unwrap_or("1");
        let own = r["metrics"]["ns"].as_f64().unwrap();
        let (kernel, _) = ns("sysv", sems);
        let close = |key: &str, want: f64| {
            let got = r["metrics"][key].as_f64().unwrap();
            assert!(
                (got - want).abs() < 1e-9 * want.max(1.0),
                "{key} {got} != {want}: {r}"
            );
        };
        close("x_cas", own / floor);
        close("x_sysv", kernel / own);
    }
    refused_with(&["semop", "--iters", "0"], "--iters");
}

#[test]
fn dining_pairs_its_ratios_to_the_kernel_within_a_round() {
    let json = scratch("dining-rounds.json");
    let text = ok(&[
        "--json",
        json.to_str().unwrap(),
        "--repeat",
        "2",
        "dining",
        "--mode",
        "take",
        "--threads",
        "2",
        "--seconds",
        "0.1",
        "-o",
        "sysv,ksync",
    ]);
    assert!(text.contains("| x sysv"), "{text}");
    let records = records(&json);
    assert_eq!(records.len(), 4, "{records:?}");
    for backend in ["sysv", "ksync-sem"] {
        paired(&records, 2, backend, "sysv", "pairs_per_s", "x_sysv");
    }
}
