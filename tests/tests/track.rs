//! `profiler track` (cputrack) end to end: real ptrace, real per-thread perf events, real
//! workloads with known counts.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use profiler_tests::*;

/// `perf stat -e EVENT -x, CMD..` total, or None when perf is not installed.
fn perf_stat(event: &str, cmd: &[&str]) -> Option<i64> {
    let out = Command::new("perf")
        .args(["stat", "-e", event, "-x,"])
        .args(cmd)
        .stdout(Stdio::null())
        .output()
        .ok()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find(|l| l.contains(event))
        .and_then(|l| l.split(',').next()?.parse().ok())
}

#[test]
fn each_thread_is_counted_and_the_total_agrees_with_perf_stat() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let touch = path("touch");
    let stdout = run_ok(&["track", "-c", "page-faults", "--", &touch, "5000", "3"]);
    assert_eq!(
        stdout.lines().next(),
        Some("   time lwp      event      pic0 "),
        "{stdout}"
    );
    let rows = table(&stdout);
    let created: Vec<i64> = rows
        .iter()
        .filter(|r| r.is(2, "lwp_create"))
        .map(|r| r.num(1))
        .collect();
    assert_eq!(created.len(), 3, "{stdout}");
    let exits: Vec<&TableRow> = rows.iter().filter(|r| r.is(2, "lwp_exit")).collect();
    assert_eq!(exits.len(), 3, "one lwp_exit per worker thread:\n{stdout}");
    for r in &exits {
        assert!(created.contains(&r.num(1)), "{r:?}");
        let faults = r.num(3);
        assert!(
            (5000..5050).contains(&faults),
            "a worker touches 5000 pages plus a few: {faults}\n{stdout}"
        );
    }
    let exit: Vec<&TableRow> = rows.iter().filter(|r| r.is(2, "exit")).collect();
    assert_eq!(exit.len(), 1, "{stdout}");
    let total = exit[0].num(3);
    let workers: i64 = exits.iter().map(|r| r.num(3)).sum();
    assert!(
        total > workers && total - workers < 500,
        "the exit row is the process total (workers {workers} + main thread): {total}"
    );
    match perf_stat("page-faults", &[&touch, "5000", "3"]) {
        Some(perf) => {
            let diff = (total - perf).abs() as f64 / perf as f64;
            eprintln!("track {total} vs perf stat {perf}: {:.3}%", diff * 100.0);
            assert!(diff < 0.01, "track {total} vs perf stat {perf}");
        }
        None => eprintln!("SKIP perf comparison: perf not installed"),
    }
}

#[test]
fn fork_and_exec_are_followed_with_f_and_e() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let forker = path("forker");
    let stdout = run_ok(&[
        "track",
        "-f",
        "-e",
        "-c",
        "page-faults,task-clock",
        "--",
        &forker,
        "3",
    ]);
    assert_eq!(
        stdout.lines().next(),
        Some("   time    pid lwp      event      pic0      pic1 ")
    );
    let rows = table(&stdout);
    let children: Vec<i64> = rows
        .iter()
        .filter(|r| r.is(3, "fork"))
        .map(|r| r.note.as_deref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(children.len(), 3, "{stdout}");
    let parent = rows.iter().find(|r| r.is(3, "fork")).unwrap().num(1);
    for child in &children {
        let mine: Vec<&TableRow> = rows.iter().filter(|r| r.num(1) == *child).collect();
        let exec_totals = mine
            .iter()
            .find(|r| r.is(3, "exec") && r.note.is_none())
            .unwrap_or_else(|| panic!("no exec totals for {child}:\n{stdout}"));
        assert!(exec_totals.num(4) > 0, "the forked image faulted pages");
        let args = mine
            .iter()
            .find(|r| r.is(3, "exec") && r.note.is_some())
            .unwrap();
        assert_eq!(args.note.as_deref(), Some("'true'"));
        let exit = mine
            .iter()
            .find(|r| r.is(3, "exit"))
            .unwrap_or_else(|| panic!("-e: /bin/true is tracked to its exit:\n{stdout}"));
        assert!(exit.num(4) > 0 && exit.num(5) > 0, "{exit:?}");
    }
    let parent_exit = rows
        .iter()
        .find(|r| r.num(1) == parent && r.is(3, "exit"))
        .expect("the parent's exit row");
    assert!(parent_exit.num(4) > 0);
}

#[test]
fn without_f_forks_are_reported_but_not_followed() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let stdout = run_ok(&["track", "-c", "page-faults", "--", &path("forker"), "2"]);
    let rows = table(&stdout);
    assert_eq!(
        rows.iter().filter(|r| r.is(2, "fork")).count(),
        2,
        "{stdout}"
    );
    assert_eq!(
        rows.iter().filter(|r| r.is(2, "exec")).count(),
        0,
        "{stdout}"
    );
    assert_eq!(
        rows.iter().filter(|r| r.is(2, "exit")).count(),
        1,
        "{stdout}"
    );
}

#[test]
fn ticks_init_and_fini_rows_account_for_every_fault() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let stdout = run_ok(&[
        "track",
        "-v",
        "-t",
        "-T",
        "0.05",
        "-c",
        "page-faults",
        "--",
        &path("touch"),
        "3000",
        "2",
    ]);
    assert!(stdout.starts_with("   time lwp      event       tsc      pic0 \n"));
    let rows = table(&stdout);
    let workers: Vec<i64> = rows
        .iter()
        .filter(|r| r.is(2, "lwp_create"))
        .map(|r| r.num(1))
        .collect();
    assert_eq!(workers.len(), 2);
    for w in workers {
        let of = |event: &str| -> Vec<&TableRow> {
            rows.iter()
                .filter(|r| r.num(1) == w && r.is(2, event))
                .collect()
        };
        let init = of("init_lwp")[0].num(4);
        let ticks: i64 = of("tick").iter().map(|r| r.num(4)).sum();
        let fini = of("fini_lwp")[0].num(4);
        let exit = of("lwp_exit")[0].num(4);
        assert_eq!(fini, exit, "fini_lwp and lwp_exit carry the thread's total");
        assert!(
            init + ticks <= fini && fini - (init + ticks) < 20,
            "ticks are deltas of the running total: init {init} + ticks {ticks} vs {fini}"
        );
        assert!(fini >= 3000);
        assert!(of("tick").iter().any(|r| r.num(3) > 0), "tsc column counts");
    }
}

#[test]
fn several_sets_take_turns_and_are_named() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let stdout = run_ok(&[
        "track",
        "-T",
        "0.1",
        "-c",
        "task-clock",
        "-c",
        "page-faults,task-clock",
        "--",
        &path("chain"),
        "0.65",
    ]);
    let rows = table(&stdout);
    let ticks: Vec<&str> = rows
        .iter()
        .filter(|r| r.is(2, "tick"))
        .map(|r| r.note.as_deref().expect("set named"))
        .collect();
    assert!(ticks.len() >= 4, "{stdout}");
    for pair in ticks.windows(2) {
        assert_ne!(pair[0], pair[1], "sets alternate:\n{stdout}");
    }
    let exits: Vec<&str> = rows
        .iter()
        .filter(|r| r.is(2, "exit"))
        .map(|r| r.note.as_deref().unwrap())
        .collect();
    assert_eq!(exits, ["task-clock", "page-faults,task-clock"], "{stdout}");
}

#[test]
fn n_samples_then_the_process_runs_on_untraced() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("track-n");
    let file = dir.join("rows.txt");
    let start = Instant::now();
    // The rows go to a file: chain, let go, keeps running (and would hold a stdout pipe).
    let status = profiler_command()
        .args(["track", "-N", "2", "-T", "0.1", "-c", "task-clock"])
        .args(["-o", file.to_str().unwrap(), "--", &path("chain"), "1.5"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "let go after 2 samples"
    );
    let stdout = std::fs::read_to_string(&file).unwrap();
    let rows = table(&stdout);
    assert_eq!(
        rows.iter().filter(|r| r.is(2, "tick")).count(),
        2,
        "{stdout}"
    );
    assert!(!rows.iter().any(|r| r.is(2, "exit")), "{stdout}");
}

#[test]
fn exec_without_e_ends_tracking_at_the_exec() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let script = format!("exec {} 100 1", path("touch"));
    let stdout = run_ok(&["track", "-c", "page-faults", "--", "sh", "-c", &script]);
    let rows = table(&stdout);
    let exec: Vec<&TableRow> = rows.iter().filter(|r| r.is(2, "exec")).collect();
    assert_eq!(exec.len(), 2, "totals and arguments:\n{stdout}");
    assert!(exec[1].note.as_deref().unwrap().contains("touch 100 1"));
    assert!(
        !rows
            .iter()
            .any(|r| r.is(2, "exit") || r.is(2, "lwp_create"))
    );
}
