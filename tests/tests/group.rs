//! Counter groups (`record -e '{cpu-clock,page-faults}:S'`, `--read`): every counter's
//! increase lands on the stacks of the thread that caused it, by command, -p and -a, and the
//! totals equal what `track` counts for the same run. The `group` fixture's functions cause
//! known counts: `faulter` exactly PAGES page faults, `spinner` none, `blocker` one context
//! switch per loop (it prints its own count). The same holds with `--aggregate`, where the
//! kernel sums the counters' increases per stack.

use std::{
    io::Write as _,
    process::{Child, Command, Stdio},
};

use profiler_tests::*;

const PAGES: u64 = 20000;

/// Sum of the counts of `event`'s stacks (folded lines start with the event) that contain
/// `function`.
fn on(stacks: &[(Vec<String>, u64)], event: &str, function: &str) -> u64 {
    stacks
        .iter()
        .filter(|(f, _)| f[0] == event && f.iter().any(|x| x == function))
        .map(|(_, n)| n)
        .sum()
}

/// `(total, on stacks, unattributed)` of a counter's summary line
/// (`page-faults: T counted = S on stacks + U unattributed`).
fn totals(stdout: &str, counter: &str) -> (u64, u64, u64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("{counter}: ")))
        .unwrap_or_else(|| panic!("no {counter} totals line:\n{stdout}"));
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(n.len(), 3, "{line}");
    assert_eq!(n[0], n[1] + n[2], "{line}");
    (n[0], n[1], n[2])
}

fn within(value: u64, expected: u64, percent: u64) -> bool {
    value.abs_diff(expected) * 100 <= expected * percent
}

/// The fixture in `mode`, waiting for a byte on stdin before it works (`GROUP_WAIT`).
fn waiting_fixture(mode: &str) -> KillOnDrop {
    KillOnDrop(
        Command::new(fixture("group"))
            .args([mode, &PAGES.to_string(), "1"])
            .env("GROUP_WAIT", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the group fixture"),
    )
}

/// Starts `profiler ARGS` and returns once its events are enabled: its program has seen
/// (and filtered) overflows of other tasks, and the counters are enabled right after.
fn recording(args: &[&str]) -> KillOnDrop {
    let mut child = KillOnDrop(
        profiler_command()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the profiler"),
    );
    wait_attached(&mut child);
    let pid = child.id();
    wait_for("the leader's first overflows", 60, || {
        (kernel_stat(pid, profiler_common::stat::FILTERED)
            + kernel_stat(pid, profiler_common::stat::SUBMITTED)
            + kernel_stat(pid, profiler_common::stat::AGGREGATED)
            > 0)
        .then_some(())
    });
    child
}

/// Lets the waiting fixture work and returns its stdout once it has exited.
fn release(mut fixture: KillOnDrop) -> String {
    fixture
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(b"x")
        .expect("releasing the fixture");
    let out = output(fixture);
    assert!(out.status.success(), "fixture failed: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Waits for a child's exit and takes its output (a finished child is left to the guard).
fn output(mut child: KillOnDrop) -> std::process::Output {
    let done = Command::new("true").spawn().expect("spawning true");
    let c: Child = std::mem::replace(&mut child.0, done);
    c.wait_with_output().expect("output")
}

/// Asserts the pair fixture's threads each carry their own faults.
fn assert_pair(stacks: &[(Vec<String>, u64)], what: &str) {
    let faulter = on(stacks, "page-faults", "faulter");
    let spinner = on(stacks, "page-faults", "spinner");
    assert!(
        within(faulter, PAGES, 3),
        "{what}: faulter's stacks carry {faulter} faults, not {PAGES} within 3 %"
    );
    assert!(
        spinner * 100 < PAGES,
        "{what}: spinner's stacks carry {spinner} faults (it causes none)"
    );
    assert!(
        on(stacks, "cpu-clock", "spinner") > 200,
        "{what}: spinner sampled"
    );
}

#[test]
fn faults_land_on_the_faulting_function_and_totals_add_up() {
    faults_on_the_faulting_function(&[]);
}

#[test]
fn aggregated_in_the_kernel_faults_land_on_the_faulting_function_and_totals_add_up() {
    faults_on_the_faulting_function(&["--aggregate"]);
}

/// `record ARGS -e '{cpu-clock,page-faults}:S' -- group seq`: the faults on the faulting
/// function's stacks, none on the spinning one's, and the totals line adds up.
fn faults_on_the_faulting_function(args: &[&str]) {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("group-seq");
    let folded = dir.join("seq.folded");
    let before = our_programs();
    let pages = PAGES.to_string();
    let mut argv = vec!["record"];
    argv.extend_from_slice(args);
    argv.extend([
        "-F",
        "999",
        "-e",
        "{cpu-clock,page-faults}:S",
        "-o",
        folded.to_str().unwrap(),
        "--",
    ]);
    let group = path("group");
    argv.extend([group.as_str(), "seq", &pages, "1"]);
    let out = profiler(&argv);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stacks = read_folded(&folded);
    let faulter = on(&stacks, "page-faults", "faulter");
    let spinner = on(&stacks, "page-faults", "spinner");
    assert!(within(faulter, PAGES, 3), "faulter: {faulter}\n{stdout}");
    assert!(spinner * 100 < PAGES, "spinner: {spinner}\n{stdout}");
    // Both ran about a second of CPU: the samples say so too.
    let (fs, ss) = (
        on(&stacks, "cpu-clock", "faulter"),
        on(&stacks, "cpu-clock", "spinner"),
    );
    assert!(fs > 300 && ss > 300, "samples: faulter {fs}, spinner {ss}");
    // The stacks plus the unattributed rest are the counter's total: every fault of the
    // command (its start-up's too).
    let (total, attributed, _) = totals(&stdout, "page-faults");
    let all: u64 = stacks
        .iter()
        .filter(|(f, _)| f[0] == "page-faults")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(all, attributed, "{stdout}");
    assert!((PAGES..PAGES + 2000).contains(&total), "{stdout}");
    assert_eq!(
        settle_programs(|p| *p == before),
        before,
        "programs left loaded"
    );
}

/// Continuous mode: every interval's file has the counter (a pprof sample type and its
/// totals line), and the faults on the intervals' stacks add up to the fixture's.
#[test]
fn each_interval_has_its_counters_and_they_add_up() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("group-interval");
    let pages = PAGES.to_string();
    let group = path("group");
    let out = profiler(&[
        "record",
        "-F",
        "999",
        "-e",
        "{cpu-clock,page-faults}:S",
        "--interval",
        "0.5",
        "-o",
        dir.to_str().unwrap(),
        "--",
        &group,
        "seq",
        &pages,
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files = dir_entries(&dir);
    assert!(files.len() >= 3, "a profile per interval: {files:?}");
    let mut on_stacks = 0;
    for f in &files {
        let report = run_ok(&["report", "-i", dir.join(f).to_str().unwrap()]);
        let (_, attributed, _) = totals(&report, "page-faults");
        // Its own weight, not folded into the samples' (a column: the file's pprof sample
        // types), in intervals with no fault too.
        let f = dir.join(f);
        let by_event = run_ok(&["report", "-i", f.to_str().unwrap(), "--by", "event"]);
        assert!(
            by_event.lines().any(|l| l.split_whitespace().eq([
                "cpu-clock(ms)",
                "page-faults",
                "EVENT"
            ])),
            "{}: no page-faults column:\n{by_event}",
            f.display()
        );
        on_stacks += attributed;
    }
    assert!(
        (PAGES..PAGES + 2000).contains(&on_stacks),
        "faults on the intervals' stacks: {on_stacks} of {PAGES} and the start-up's"
    );
}

#[test]
fn totals_equal_what_track_counts_for_the_same_run() {
    totals_equal_track(&[]);
}

#[test]
fn aggregated_in_the_kernel_totals_equal_what_track_counts() {
    totals_equal_track(&["--aggregate"]);
}

/// `record ARGS -e cpu-clock --read page-faults -p PID` of the pair fixture: the totals
/// line's total is what `track` counts, and each thread's faults are on its own stacks.
fn totals_equal_track(args: &[&str]) {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("group-track");
    let folded = dir.join("p.folded");
    let fx = waiting_fixture("pair");
    let pid = fx.id().to_string();
    // track counts user and kernel mode (`sys`), as record's counters do.
    let track = KillOnDrop(
        profiler_command()
            .args(["track", "-T", "0", "-c", "page-faults,sys", "-p", &pid])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting track"),
    );
    let track_pid = track.id();
    wait_for("track's counters", 60, || {
        held(track_pid)
            .is_some_and(|h| h.perf_events > 0)
            .then_some(())
    });
    let mut argv = vec!["record"];
    argv.extend_from_slice(args);
    argv.extend([
        "-F",
        "999",
        "-e",
        "cpu-clock",
        "--read",
        "page-faults",
        "-o",
        folded.to_str().unwrap(),
        "-p",
        &pid,
    ]);
    let rec = recording(&argv);
    release(fx);
    let out = output(rec);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tracked = output(track);
    let tracked = String::from_utf8_lossy(&tracked.stdout).into_owned();
    let exit: u64 = tracked
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some("exit"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exit row from track:\n{tracked}"));
    let (total, _, _) = totals(&stdout, "page-faults");
    eprintln!("page faults: record {total}, track {exit}");
    // Equal in ~100 runs on a developer machine (quiet, beside faulting and spinning
    // loads), but a CI machine of the same kind measured record 2 above track in both
    // tests of one run (issue 31; scaling, missed switches and other tasks' faults were
    // measured and ruled out; counting now ends at a thread's exit, as a per-task
    // counter's does, which may have been it). Never below track's, at most 0.05 % above:
    // a window given to the wrong task (hundreds, seen before) still fails here.
    assert!(
        (exit..=exit + exit / 2000).contains(&total),
        "record's total {total} vs track's {exit}\n{stdout}\n{tracked}"
    );
    assert_pair(&read_folded(&folded), "-p");
}

#[test]
fn two_threads_keep_their_own_faults_by_command_and_system_wide() {
    two_threads_keep_their_own_faults(&[]);
}

#[test]
fn aggregated_in_the_kernel_two_threads_keep_their_own_faults() {
    two_threads_keep_their_own_faults(&["--aggregate"]);
}

/// The pair fixture recorded with `record ARGS` by command and with -a.
fn two_threads_keep_their_own_faults(args: &[&str]) {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("group-pair");
    // By command.
    let folded = dir.join("cmd.folded");
    let (group, pages) = (path("group"), PAGES.to_string());
    let mut argv = vec!["record"];
    argv.extend_from_slice(args);
    argv.extend([
        "-F",
        "999",
        "-e",
        "cpu-clock",
        "--read",
        "page-faults",
        "-o",
        folded.to_str().unwrap(),
        "--",
        &group,
        "pair",
        &pages,
        "1",
    ]);
    let out = profiler(&argv);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_pair(&read_folded(&folded), "command");
    // System-wide: per-CPU counters, split at every context switch.
    let folded = dir.join("all.folded");
    let fx = waiting_fixture("pair");
    let mut argv = vec!["record"];
    argv.extend_from_slice(args);
    argv.extend([
        "-a",
        "-F",
        "499",
        "-e",
        "{cpu-clock,page-faults}:S",
        "-o",
        folded.to_str().unwrap(),
    ]);
    let rec = recording(&argv);
    release(fx);
    // SAFETY: kill(2) on the profiler we started; SIGINT ends it with its report.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let out = output(rec);
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The threads are told apart by their names (the fixture names them after their
    // work): under -a, user frames of a process that started before the recording are not
    // always named (a limit of the symbolizer, not of the counters).
    let stacks = read_folded(&folded);
    let of = |event: &str, comm: &str| -> u64 {
        stacks
            .iter()
            .filter(|(f, _)| f[0] == event && f[1] == comm)
            .map(|(_, n)| n)
            .sum()
    };
    let (faulter, spinner) = (of("page-faults", "faulter"), of("page-faults", "spinner"));
    assert!(
        within(faulter, PAGES, 3),
        "-a: faulter's stacks carry {faulter}"
    );
    assert!(
        spinner * 100 < PAGES,
        "-a: spinner's stacks carry {spinner}"
    );
    assert!(of("cpu-clock", "spinner") > 100, "-a: spinner sampled");
}

#[test]
fn context_switches_land_on_the_blocking_function() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("group-switch");
    let folded = dir.join("switch.folded");
    let out = profiler(&[
        "record",
        "-F",
        "999",
        "-e",
        "cpu-clock",
        "--read",
        "context-switches",
        "-o",
        folded.to_str().unwrap(),
        "--",
        &path("group"),
        "switch",
        "0",
        "1",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let count = |who: &str| -> u64 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{who} switches=")))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count from the fixture:\n{stdout}"))
    };
    let own = count("blocker");
    assert!(own > 1000, "only {own} switches");
    let stacks = read_folded(&folded);
    let blocker = on(&stacks, "context-switches", "blocker");
    // The heaviest switch stacks without blocker, for a failure to show.
    let mut without: Vec<&(Vec<String>, u64)> = stacks
        .iter()
        .filter(|(f, _)| f[0] == "context-switches" && !f.iter().any(|x| x == "blocker"))
        .collect();
    without.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    assert!(
        within(blocker, own, 3),
        "blocker's stacks carry {blocker} switches; it switched {own} times\n{stdout}\n\
         heaviest without blocker: {:?}",
        &without[..without.len().min(5)]
    );
    let all: u64 = stacks
        .iter()
        .filter(|(f, _)| f[0] == "context-switches")
        .map(|(_, n)| n)
        .sum();
    // The spinner has no switches of its own, but a busy host preempts it (1,400 times in a
    // second beside a build): those are its, and none of the blocker's may land there.
    let spinner = on(&stacks, "context-switches", "spinner");
    let spinner_own = count("spinner");
    assert!(
        spinner <= spinner_own + own * 3 / 100,
        "spinner's stacks carry {spinner} switches; it was switched out {spinner_own} times"
    );
    assert!(
        (blocker + spinner) * 100 >= all * 90,
        "{blocker} on blocker + {spinner} on spinner of {all}"
    );
}

#[test]
fn pprof_has_a_sample_type_per_counter_for_go_tool_pprof() {
    pprof_sample_type_per_counter(&[]);
}

#[test]
fn aggregated_in_the_kernel_pprof_report_and_flamegraph_weigh_by_the_counter() {
    pprof_sample_type_per_counter(&["--aggregate"]);
}

/// `record ARGS` of a group to pprof: `go tool pprof`, `report --ratio` and
/// `flamegraph -e COUNTER` read the counter.
fn pprof_sample_type_per_counter(args: &[&str]) {
    if !privileged() {
        return;
    }
    if Command::new("go").arg("version").output().is_err() {
        eprintln!("SKIP: no go toolchain (golang-go) for `go tool pprof`");
        return;
    }
    let _guard = serial();
    let dir = scratch("group-pprof");
    let pb = dir.join("seq.pb.gz");
    let (group, pages) = (path("group"), PAGES.to_string());
    let mut argv = vec!["record"];
    argv.extend_from_slice(args);
    argv.extend([
        "-F",
        "999",
        "-e",
        "{cpu-clock,page-faults}:S",
        "-o",
        pb.to_str().unwrap(),
        "--",
        &group,
        "seq",
        &pages,
        "1",
    ]);
    let out = profiler(&argv);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, attributed, _) = totals(&stdout, "page-faults");
    let top = Command::new("go")
        .args(["tool", "pprof", "-top", "-cum", "-sample_index=page-faults"])
        .arg(&pb)
        .output()
        .expect("go tool pprof");
    let text = String::from_utf8_lossy(&top.stdout).into_owned();
    assert!(
        top.status.success(),
        "{}",
        String::from_utf8_lossy(&top.stderr)
    );
    assert!(
        text.contains(&format!("Total samples = {attributed}")),
        "pprof's page-faults total is not {attributed}:\n{text}"
    );
    let faulter: u64 = text
        .lines()
        .find(|l| l.trim_end().ends_with(" faulter"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no faulter row:\n{text}"));
    assert!(within(faulter, PAGES, 3), "{text}");
    // Our own report reads it back with a column per counter and a ratio.
    let report = run_ok(&[
        "report",
        "-i",
        pb.to_str().unwrap(),
        "--sort",
        "total",
        "--ratio",
        "page-faults/cpu-clock",
    ]);
    let row: Vec<&str> = report
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == "faulter"))
        .unwrap_or_else(|| panic!("no faulter row:\n{report}"))
        .split_whitespace()
        .collect();
    // cpu-clock in milliseconds of CPU time; the ratio is faults per millisecond.
    let (ms, faults): (f64, u64) = (row[0].parse().unwrap(), row[1].parse().unwrap());
    assert!(within(faults, PAGES, 3), "{report}");
    let ratio: f64 = row[2].parse().unwrap();
    assert!((ratio - faults as f64 / ms).abs() < 0.01, "{report}");
    // `flamegraph -e page-faults` weighs by the counter.
    let svg = dir.join("faults.folded");
    run_ok(&[
        "flamegraph",
        "-i",
        pb.to_str().unwrap(),
        "-e",
        "page-faults",
        "--folded",
        "-o",
        svg.to_str().unwrap(),
    ]);
    let weighted: u64 = read_folded(&svg).iter().map(|(_, n)| n).sum();
    assert_eq!(weighted, attributed);
}

#[test]
fn bad_groups_are_clear_one_line_errors() {
    for (args, code, needles) in [
        (
            vec!["record", "-e", "{cpu-clock,page-faults", "--", "true"],
            2,
            vec!["malformed event group"],
        ),
        (
            vec!["record", "-e", "{cpu-clock}:S", "--", "true"],
            2,
            vec!["no counter to read"],
        ),
        (
            vec![
                "record",
                "-e",
                "cpu-clock,task-clock",
                "--read",
                "page-faults",
                "--",
                "true",
            ],
            2,
            vec!["exactly one sampled event"],
        ),
        (
            vec!["record", "--read", "a,b,c,d,e,f,g,h,i", "--", "true"],
            2,
            vec!["at most 8"],
        ),
        (
            vec![
                "record",
                "--read",
                "page-faults",
                "--ratio",
                "cpu-clock",
                "--",
                "true",
            ],
            2,
            vec!["malformed ratio"],
        ),
        (
            vec!["record", "--ratio", "page-faults/cpu-clock", "--", "true"],
            2,
            vec!["malformed ratio", "not an event"],
        ),
    ] {
        let out = profiler(&args);
        let line = one_error_line(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {line}");
        assert!(
            needles.iter().any(|n| line.contains(n)),
            "{args:?}: {line:?} lacks {needles:?}"
        );
    }
}

#[test]
fn hardware_counters_say_there_is_no_pmu_here() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let out = profiler(&["record", "--read", "instructions", "--", "true"]);
    if std::path::Path::new("/sys/bus/event_source/devices/cpu").exists() {
        eprintln!("SKIP: this host has a cpu PMU");
        return;
    }
    assert_fails(
        &out,
        1,
        &["instructions", "no hardware PMU"],
        "--read instructions",
    );
}
