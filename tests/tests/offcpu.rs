//! `record --off-cpu` and `--wall` end to end: the `waits` fixture measures its own CPU and
//! wait times, and the profile must agree with them within 5 %, in the right stacks.

use std::process::{Command, Stdio};

use profiler_tests::*;

/// The sum of the counts of the stacks `keep` accepts.
fn total(stacks: &[(Vec<String>, u64)], keep: impl Fn(&[String]) -> bool) -> u64 {
    stacks.iter().filter(|(f, _)| keep(f)).map(|(_, n)| n).sum()
}

fn has(frames: &[String], name: &str) -> bool {
    frames.iter().any(|f| f == name)
}

fn blocked(frames: &[String]) -> bool {
    frames.last().is_some_and(|f| f == "[off-cpu]")
}

fn off_cpu(frames: &[String]) -> bool {
    frames.last().is_some_and(|f| f.starts_with("[off-cpu"))
}

fn assert_within(what: &str, got: u64, want: u64, pct: u64, context: &str) {
    let diff = got.abs_diff(want);
    assert!(
        diff * 100 <= want * pct,
        "{what}: profile says {got} ns, the fixture measured {want} ns (more than {pct} % \
         apart)\n{context}"
    );
}

fn folded_text(stacks: &[(Vec<String>, u64)]) -> String {
    stacks
        .iter()
        .map(|(f, n)| format!("{} {n}\n", f.join(";")))
        .collect()
}

/// Whether the unwinder's map of profiler `profiler` has rows for the executable mapping of
/// `pid` whose path ends in `module` (tables of large modules are built on a worker thread,
/// after the process joined the filter).
fn has_tables(profiler: u32, pid: u32, module: &str) -> bool {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return false;
    };
    let Some(start) = maps
        .lines()
        .filter(|l| l.ends_with(module) && l.split_whitespace().nth(1) == Some("r-xp"))
        .find_map(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
    else {
        return false;
    };
    unwind_entry(profiler, pid).is_some_and(|p| {
        p.mappings[..(p.count as usize).min(p.mappings.len())]
            .iter()
            .any(|m| m.start == start && m.rows_len > 0)
    })
}

#[test]
fn spin_sleep_and_pipe_read_times_are_in_their_stacks() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let before = our_programs();
    let dir = scratch("offcpu-wall");
    let folded = dir.join("wall.folded");
    // Attached to a running process, started by a signal once the profiler holds its events
    // and the process's unwind tables.
    let mut waits = Command::new(fixture("waits"))
        .args(["10", "1", "signal"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting waits");
    let lines = Lines::of(&mut waits);
    wait_for("waits to be ready", 30, || {
        lines.now().contains("ready").then_some(())
    });
    let pid = waits.id().to_string();
    let mut record = profiler_command()
        .args(["record", "-F", "999", "--wall", "-p", &pid, "-o"])
        .arg(&folded)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the profiler");
    let stderr = wait_recording(&mut record);
    // Started once the unwind tables of libc (whose wrappers keep no frame pointer) are in.
    wait_for("libc's unwind tables", 60, || {
        has_tables(record.id(), waits.id(), "/libc.so.6").then_some(())
    });
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(waits.id() as i32, libc::SIGUSR1) };
    assert!(waits.wait().expect("waits").success());
    let status = record.wait().expect("profiler");
    let stderr = stderr.finish();
    assert!(status.success(), "record failed: {stderr}");
    let stdout = lines.finish();
    let stacks = read_folded(&folded);
    let text = format!("{stderr}\n{}", folded_text(&stacks));

    // On-CPU: the spin phases' CPU time, from samples at 999 Hz (1001001 ns each).
    let spin = total(&stacks, |f| has(f, "spin_phase") && !off_cpu(f));
    assert_within(
        "spin_phase on CPU",
        spin,
        truth(&stdout, "spin_cpu_ns"),
        5,
        &text,
    );
    // Off-CPU: the nanosleeps, blocked under sleep_phase with the nanosleep frames.
    let sleeps = total(&stacks, |f| has(f, "sleep_phase") && blocked(f));
    assert_within(
        "sleep_phase off CPU",
        sleeps,
        truth(&stdout, "sleep_ns"),
        5,
        &text,
    );
    // The pipe read, blocked under wait_pipe in the read frames.
    let read = total(&stacks, |f| has(f, "wait_pipe") && blocked(f));
    assert_within(
        "wait_pipe off CPU",
        read,
        truth(&stdout, "read_ns"),
        5,
        &text,
    );
    for (frames, n) in stacks.iter().filter(|(f, _)| blocked(f)) {
        if has(frames, "sleep_phase") {
            assert!(
                frames.iter().any(|f| f.contains("nanosleep")),
                "{n} ns under sleep_phase without a nanosleep frame: {frames:?}"
            );
        }
        if has(frames, "wait_pipe") {
            assert!(
                frames.iter().any(|f| f.contains("pipe_read"))
                    && frames.iter().any(|f| f.contains("libc_read")),
                "{n} ns under wait_pipe without read frames: {frames:?}"
            );
        }
    }
    assert!(stderr.contains("waits recorded"), "{stderr}");
    let after = settle_programs(|p| p == &before);
    assert_eq!(before, after, "programs left loaded");
}

#[test]
fn the_wall_view_of_threads_adds_up_to_their_lifetimes() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    // Four cycling threads, the reader and main: six threads, each accounted once, on CPU
    // (samples turned into time) or off it.
    let (stdout, stderr, stacks) = wall_of_waits("offcpu-threads", None);
    let wall = total(&stacks, |f| f[0] == "waits");
    assert_within(
        "wall time of all threads",
        wall,
        truth(&stdout, "wall_ns"),
        5,
        &format!("{stderr}\n{}", folded_text(&stacks)),
    );
    // The heading shows the wall time as time.
    assert!(stdout.contains(" s of wall in "), "{stdout}");
}

/// Some kernels do not run a `sched_switch` program at every switch (seen here: the switches
/// away from the sandbox's own agent threads never reach the tracepoint, so the return of
/// the thread they hand the CPU to goes unseen). A thread that leaves the CPU with its wait
/// still kept came back unseen; its wait is ended where the scheduler's run time of the
/// thread says. Injected here at every other return: the wall view must still add up.
#[test]
fn waits_whose_return_went_unseen_end_where_the_scheduler_says() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let (stdout, stderr, stacks) = wall_of_waits("offcpu-unseen", Some(2));
    let context = format!("{stderr}\n{}", folded_text(&stacks));
    let unseen = stderr
        .split("; ")
        .find_map(|part| {
            let (n, rest) = part.split_once(" whose return the kernel did not show")?;
            let ended = rest.split_once('(')?.1.split_whitespace().next()?;
            Some((n.trim().parse::<u64>().ok()?, ended.parse::<u64>().ok()?))
        })
        .unwrap_or_else(|| panic!("no unseen returns reported\n{stderr}"));
    // Every other return of 4 x 5 spins and sleeps, the naps and the pipe read: dozens,
    // every one ended (with BTF, none is dropped).
    assert!(unseen.0 >= 20, "{unseen:?}\n{stderr}");
    assert_eq!(unseen.0, unseen.1, "unseen returns dropped\n{stderr}");
    assert_within(
        "wall time of all threads",
        total(&stacks, |f| f[0] == "waits"),
        truth(&stdout, "wall_ns"),
        5,
        &context,
    );
    assert_within(
        "sleep_phase off CPU",
        total(&stacks, |f| has(f, "sleep_phase") && blocked(f)),
        truth(&stdout, "sleep_ns"),
        5,
        &context,
    );
}

/// `record --wall` of `waits 5 4` at 999 Hz, with every `skip`th return of a kept thread
/// ignored by the program (the tests' fault injection): its stdout, stderr and stacks.
fn wall_of_waits(name: &str, skip: Option<u32>) -> (String, String, Vec<(Vec<String>, u64)>) {
    let dir = scratch(name);
    let folded = dir.join("wall.folded");
    let mut cmd = profiler_command();
    cmd.args(["record", "-F", "999", "--wall", "-o"])
        .arg(&folded)
        .args(["--", &path("waits"), "5", "4"]);
    if let Some(n) = skip {
        cmd.env("PROFILER_TEST_SKIP_RETURNS", n.to_string());
    }
    let out = cmd.output().expect("running the profiler");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "record failed: {stderr}");
    (stdout, stderr, read_folded(&folded))
}

#[test]
fn short_waits_are_dropped_and_counted_and_events_stay_apart() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("offcpu-min-block");
    let folded = dir.join("min.folded");
    let out = profiler(&[
        "record",
        "-F",
        "999",
        "--off-cpu",
        "--min-block",
        "50000",
        "-o",
        folded.to_str().unwrap(),
        "--",
        &path("waits"),
        "3",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "record failed: {stderr}");
    // The twenty 1 ms naps are below 50 ms: dropped, and said so.
    let dropped: u64 = stderr
        .lines()
        .filter(|l| l.starts_with("profiler: off-cpu:"))
        .flat_map(|l| l.split("; "))
        .find(|p| p.contains("shorter than --min-block 50000 us dropped"))
        .and_then(|p| p.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no dropped count: {stderr}"));
    assert!(dropped >= 20, "{dropped} short waits dropped: {stderr}");
    let stacks = read_folded(&folded);
    let text = folded_text(&stacks);
    // Two events, each line under its own: samples of cpu-clock, nanoseconds of off-cpu.
    assert!(
        stacks
            .iter()
            .all(|(f, _)| f[0] == "cpu-clock" || f[0] == "off-cpu"),
        "{text}"
    );
    assert_eq!(
        total(&stacks, |f| f[0] == "off-cpu" && has(f, "short_naps")),
        0,
        "{text}"
    );
    let sleeps = total(&stacks, |f| {
        f[0] == "off-cpu" && has(f, "sleep_phase") && blocked(f)
    });
    assert_within(
        "sleep_phase off CPU",
        sleeps,
        truth(&stdout, "sleep_ns"),
        5,
        &text,
    );
    assert!(
        total(&stacks, |f| f[0] == "cpu-clock" && off_cpu(f)) == 0,
        "off-CPU frames among the samples:\n{text}"
    );
}

#[test]
fn wall_needs_a_clock_event_and_min_block_needs_off_cpu() {
    let out = profiler(&["record", "--wall", "-e", "page-faults", "--", "true"]);
    assert_fails(
        &out,
        2,
        &["--wall", "page-faults"],
        "--wall with page-faults",
    );
    let out = profiler(&["record", "--min-block", "10", "--", "true"]);
    assert_fails(
        &out,
        2,
        &["--min-block needs --off-cpu"],
        "--min-block alone",
    );
    let out = profiler(&["record", "--off-cpu", "--aggregate", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--aggregate"), "{stderr}");
}

#[test]
fn waits_past_the_kernel_totals_go_through_the_ring() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("offcpu-crowd");
    let folded = dir.join("crowd.folded");
    // 5000 threads waiting on one barrier: 5000 (thread, stack) pairs, more than the 4096
    // totals the kernel keeps.
    let out = profiler(&[
        "record",
        "--off-cpu",
        "-o",
        folded.to_str().unwrap(),
        "--",
        &path("crowd"),
        "5000",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "record failed: {stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("profiler: off-cpu:"))
        .unwrap_or_else(|| panic!("no off-cpu line: {stderr}"));
    let number = |after: &str| -> u64 {
        line.split(after)
            .next()
            .and_then(|p| p.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count before {after:?}: {line}"))
    };
    let recorded = number(" waits recorded");
    let through_ring = number(" through the ring");
    assert!(recorded >= 5000, "{line}");
    assert!(through_ring > 0 && through_ring < recorded, "{line}");
    // Every thread's barrier wait is there, whichever way it came.
    let stacks = read_folded(&folded);
    let waited: Vec<&(Vec<String>, u64)> = stacks
        .iter()
        .filter(|(f, _)| f[0] == "off-cpu" && has(f, "wait_for_all") && off_cpu(f))
        .collect();
    assert!(!waited.is_empty(), "{}", folded_text(&stacks));
    assert!(
        !stderr.contains("lost") && !stderr.contains("not kept"),
        "{stderr}"
    );
}
