//! Faults mid-run: SIGINT, SIGTERM and SIGHUP end a recording with the report printed, the
//! output file complete, exit status 128 + N, and nothing of the process left in the kernel
//! (checked from outside: loaded programs and links, and /proc's fds). Two profilers at once
//! each get their own exact profile.

use std::{os::unix::process::CommandExt, process::Stdio, thread, time::Duration};

use profiler_tests::*;

#[test]
fn each_stop_signal_writes_the_report_and_leaves_nothing_attached() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("signals");
    let programs = our_programs();
    let links = our_links();
    let holders = holders_of_perf_or_bpf();
    let mut written = std::collections::BTreeSet::new();
    for (sig, name) in [
        (libc::SIGINT, "int"),
        (libc::SIGTERM, "term"),
        (libc::SIGHUP, "hup"),
    ] {
        let out = dir.join(format!("{name}.pb.gz"));
        let mut child = profiler_command()
            .args(["record", "-a", "-F", "199", "-d", "600", "-o"])
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let h = wait_attached(&mut child);
        assert_eq!(
            our_programs().len(),
            programs.len() + RECORD_PROGRAMS,
            "{h:?}"
        );
        // Some samples first: the report must hold what was collected.
        wait_for("the kernel to submit a few samples", 20, || {
            (kernel_records_submitted(child.id()) >= 5).then_some(())
        });
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, sig) };
        let pid = child.id();
        let result = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(result.status.code(), Some(128 + sig), "{name}: {stderr}");
        let n = reported_samples(&String::from_utf8_lossy(&result.stdout));
        assert!(n > 0, "{name}: samples before the signal");
        // The file is complete: it reads back with the same count.
        let back = run_ok(&["report", "-i", out.to_str().unwrap()]);
        assert_eq!(reported_samples(&back), n, "{name}");
        written.insert(format!("{name}.pb.gz"));
        assert_eq!(
            dir_entries(&dir),
            written,
            "{name}: only the finished files, no temporary one"
        );
        assert!(held(pid).is_none(), "reaped");
        assert_eq!(our_programs(), programs, "{name}: a program survived");
        assert_eq!(our_links(), links, "{name}: a link survived");
        assert!(
            holders_of_perf_or_bpf().is_subset(&holders),
            "{name}: a new holder of perf or BPF fds"
        );
    }
}

#[test]
fn a_signal_during_set_up_still_leaves_nothing() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let programs = our_programs();
    let links = our_links();
    // At increasing delays, so the signal lands before, during and after attaching.
    for delay_ms in [0, 5, 20, 60, 150] {
        let child = profiler_command()
            .args(["record", "-a", "-F", "99", "-d", "600", "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let out = child.wait_with_output().unwrap();
        use std::os::unix::process::ExitStatusExt as _;
        // Before the handler is installed the default action ends it; after, it exits 143.
        assert!(
            out.status.code() == Some(143) || out.status.signal() == Some(libc::SIGTERM),
            "{delay_ms} ms: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(our_programs(), programs, "{delay_ms} ms");
        assert_eq!(our_links(), links, "{delay_ms} ms");
    }
}

/// Samples of `run` (the touching loop) in a folded page-fault profile.
fn touches(folded: &std::path::Path) -> u64 {
    read_folded(folded)
        .iter()
        .filter(|(frames, _)| innermost_user(frames) == Some("run"))
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn two_profilers_at_once_each_get_their_own_exact_profile() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("two");
    let programs = our_programs();
    // One sample per page fault: each touch process faults exactly pages × threads times in
    // its loop, whatever the other profiler does at the same time.
    let start = |name: &str, pages: &str, threads: &str| {
        profiler_command()
            .args(["record", "-q", "-e", "page-faults", "-c", "1", "-o"])
            .arg(dir.join(name))
            .args(["--", &path("touch"), pages, threads])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    for round in 0..2 {
        let a = start("a.folded", "3000", "1");
        let b = start("b.folded", "1000", "2");
        for (child, what) in [(a, "a"), (b, "b")] {
            let out = child.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{what}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(touches(&dir.join("a.folded")), 3000, "round {round}");
        assert_eq!(touches(&dir.join("b.folded")), 2000, "round {round}");
    }
    assert_eq!(our_programs(), programs);
}

/// Waits (bounded) until `pid` holds perf events.
fn wait_counting(pid: u32) {
    let start = std::time::Instant::now();
    while held(pid).is_none_or(|h| h.perf_events == 0) {
        assert!(start.elapsed() < Duration::from_secs(60), "never counted");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_counting_tools_end_on_each_stop_signal_with_their_totals() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let holders = holders_of_perf_or_bpf();
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // cpustat: the counts up to the signal (a partial row per CPU) and the totals are
        // printed; the status is 128 + N.
        let stat = profiler_command()
            .args(["stat", "-c", "cpu-clock", "0.2"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        wait_counting(stat.id());
        thread::sleep(Duration::from_millis(500));
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(stat.id() as i32, sig) };
        let out = stat.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(128 + sig), "stat, signal {sig}");
        let rows = table(&String::from_utf8_lossy(&out.stdout));
        assert!(rows.last().is_some_and(|r| r.is(2, "total")), "{rows:?}");
        assert!(rows.iter().any(|r| r.is(2, "partial")), "{rows:?}");

        // cputrack: the command it started gets the signal too; its rows are printed. The
        // signal's default action is restored for track (and so for its command): a test run
        // under `nohup` would otherwise start the command with SIGHUP ignored, as nohup asks
        // and track rightly keeps, and the command would outlive the hangup.
        let mut cmd = profiler_command();
        cmd.args(["track", "-c", "task-clock", "-T", "0.2", "--"])
            .arg(fixture("spin"))
            .args(["1", "600"])
            .stdout(Stdio::piped());
        // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
        unsafe {
            cmd.pre_exec(move || {
                libc::signal(sig, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut track = KillOnDrop(cmd.spawn().unwrap());
        let lines = Lines::of(&mut track);
        wait_for("cputrack's first tick row", 60, || {
            table(&lines.now())
                .iter()
                .any(|r| r.is(2, "tick"))
                .then_some(())
        });
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(track.id() as i32, sig) };
        // Bounded: a signal track missed would otherwise wait for the spinner's 600 s.
        let status = wait_for("cputrack to end after the signal", 60, || {
            track.try_wait().expect("try_wait")
        });
        // The spinner's pid is its main thread's tid, the smallest of its threads. Found
        // before the output's end is awaited: the spinner holds the pipe while it lives.
        let seen = lines.now();
        let spinner = table(&seen)
            .iter()
            .filter(|r| r.is(2, "tick"))
            .map(|r| r.num(1))
            .min()
            .expect("a tick row") as u32;
        let start = std::time::Instant::now();
        let gone = || {
            std::fs::read_to_string(format!("/proc/{spinner}/stat"))
                .map_or(true, |s| s.contains(") Z "))
        };
        while !gone() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "signal {sig}: the started command {spinner} outlived cputrack"
            );
            thread::sleep(Duration::from_millis(20));
        }
        let stdout = lines.finish();
        assert_eq!(
            status.code(),
            Some(128 + sig),
            "track, signal {sig}: {stdout}"
        );
        let rows = table(&stdout);
        assert!(
            rows.last().is_some_and(|r| r.is(2, "exit")),
            "the totals up to the signal:\n{stdout}"
        );
        let ticks: Vec<&TableRow> = rows.iter().filter(|r| r.is(2, "tick")).collect();
        assert!(!ticks.is_empty(), "ticks before the signal:\n{stdout}");
        assert!(
            holders_of_perf_or_bpf().is_subset(&holders),
            "signal {sig}: a perf fd holder survived"
        );
    }
}
