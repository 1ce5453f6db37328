//! `profiler track` attached to a running process, its output options, and its errors.

use std::process::{Command, Stdio};

use profiler_tests::*;

#[test]
fn attach_with_p_and_detach_on_sigint_leaves_the_target_running() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let mut target = Command::new(fixture("spin"))
        .args(["2", "10"])
        .spawn()
        .unwrap();
    wait_for("spin's main thread and two spinners", 10, || {
        (thread_count(target.id()) == 3).then_some(())
    });
    let pid = target.id().to_string();
    let mut tracker = profiler_command()
        .args(["track", "-T", "0.2", "-c", "task-clock", "-p", &pid])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Lines::of(&mut tracker);
    // Rows of all three threads, and a spinner's CPU time in one of them.
    wait_for(
        "tick rows of three threads with the spinners' time",
        30,
        || {
            let rows = table(&lines.now());
            let ticks: Vec<_> = rows.iter().filter(|r| r.is(2, "tick")).collect();
            let threads: std::collections::BTreeSet<i64> = ticks.iter().map(|r| r.num(1)).collect();
            (threads.len() == 3 && ticks.iter().any(|r| r.num(3) > 10_000_000)).then_some(())
        },
    );
    // SAFETY: kill sends a signal to the tracker we spawned.
    unsafe { libc::kill(tracker.id() as i32, libc::SIGINT) };
    let status = tracker.wait().unwrap();
    assert_eq!(status.code(), Some(130), "128 + SIGINT");
    let stdout = lines.finish();
    let ticks: Vec<TableRow> = table(&stdout)
        .into_iter()
        .filter(|r| r.is(2, "tick"))
        .collect();
    let threads: std::collections::BTreeSet<i64> = ticks.iter().map(|r| r.num(1)).collect();
    assert_eq!(threads.len(), 3, "main and two spinners:\n{stdout}");
    // The spinners' CPU time shows in the ticks (10 ms of a 0.2 s tick: loose, because a
    // shared 2-CPU machine may give them far less than a full CPU).
    assert!(
        ticks.iter().any(|r| r.num(3) > 10_000_000),
        "spinners counted:\n{stdout}"
    );
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: u32 = task.unwrap().file_name().to_str().unwrap().parse().unwrap();
        let (tracer, state) = trace_state(tid);
        assert_eq!(tracer, 0, "thread {tid} is still traced");
        assert!(
            matches!(state, 'R' | 'S'),
            "thread {tid} is in state {state}"
        );
    }
    target.kill().unwrap();
    target.wait().unwrap();
}

#[test]
fn json_and_output_file() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("track-json");
    let file = dir.join("rows.jsonl");
    run_ok(&[
        "track",
        "--json",
        "-T",
        "0",
        "-c",
        "page-faults",
        "-o",
        file.to_str().unwrap(),
        "--",
        &path("touch"),
        "500",
        "1",
    ]);
    let text = std::fs::read_to_string(&file).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let events: Vec<&str> = rows.iter().map(|r| r["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["lwp_create", "lwp_exit", "exit"], "{text}");
    let worker = &rows[1]["counters"][0];
    assert_eq!(worker["event"], "page-faults");
    assert!(worker["value"].as_i64().unwrap() >= 500);
}

#[test]
fn bad_specs_and_targets_are_one_line_errors() {
    for (args, code, text) in [
        (
            &["track", "-c", "page-faults,foo=1", "--", "true"][..],
            2,
            "bad token 'foo=1'",
        ),
        (
            &["track", "-c", "pic0=task-clock,pic0=page-faults", "true"],
            2,
            "repeated 'pic0' token",
        ),
        (
            &["track", "-c", "page-fault", "true"],
            2,
            "unknown event 'page-fault' (did you mean page-faults",
        ),
        (&["track", "-c", "page-faults"], 2, "no command to start"),
        (
            &["track", "-c", "task-clock", "-p", "1", "--", "true"],
            2,
            "not both",
        ),
        (
            &["track", "-c", "task-clock", "-T", "x", "true"],
            2,
            "invalid interval",
        ),
        (
            &["track", "-c", "task-clock", "-N", "-2", "true"],
            2,
            "invalid count",
        ),
        (
            &["track", "-c", "task-clock", "--", "/nonexistent/cmd"],
            1,
            "command not found",
        ),
        (
            &["track", "-c", "task-clock", "-p", "4999999"],
            1,
            "process 4999999 does not exist",
        ),
    ] {
        let out = profiler(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(text), "{args:?}: {stderr}");
    }
    let out = profiler(&["track", "-D", "-c", "x=1", "true"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cpc_strtoset: bad token 'x=1'"),
        "-D names the function"
    );
}

#[test]
fn a_command_that_cannot_be_counted_never_runs() {
    if !privileged() {
        return;
    }
    // msr/tsc/ counts per CPU only: binding it to a thread fails (EINVAL) after the parse.
    if !std::path::Path::new("/sys/bus/event_source/devices/msr/events/tsc").exists() {
        eprintln!("SKIP: no msr/tsc/ event here");
        return;
    }
    let _guard = serial();
    let dir = scratch("never-runs");
    let marker = dir.join("ran");
    let script = format!("touch {}", marker.display());
    let out = profiler(&["track", "-c", "msr/tsc/", "--", "sh", "-c", &script]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("msr/tsc/"), "{stderr}");
    assert!(!marker.exists(), "the command ran uncounted");
}
