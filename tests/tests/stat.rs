//! `profiler stat` (cpustat) and `profiler list` end to end, on real per-CPU counters.

use std::process::Stdio;

use profiler_tests::*;

fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn rounds_of_per_cpu_rows_then_a_total() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let out = profiler(&["stat", "-c", "cpu-clock,context-switches", "0.5", "4"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout.lines().next(),
        Some("   time cpu event      pic0      pic1 ")
    );
    let rows = table(&stdout);
    let ncpus = online_cpus();
    let ticks: Vec<&TableRow> = rows.iter().filter(|r| r.is(2, "tick")).collect();
    assert_eq!(ticks.len(), 4 * ncpus, "{stdout}");
    for (round, chunk) in ticks.chunks(ncpus).enumerate() {
        let mut cpus: Vec<i64> = chunk.iter().map(|r| r.num(1)).collect();
        cpus.sort_unstable();
        assert_eq!(cpus, (0..ncpus as i64).collect::<Vec<_>>(), "round {round}");
        for r in chunk {
            let t: f64 = r.fields[0].parse().unwrap();
            let expected = 0.5 * (round + 1) as f64;
            assert!((t - expected).abs() < 0.1, "row time {t} in round {round}");
            let ns = r.num(3);
            assert!(
                (400_000_000..600_000_000).contains(&ns),
                "cpu-clock counts the interval's 0.5 s: {ns}"
            );
        }
    }
    let total: Vec<&TableRow> = rows.iter().filter(|r| r.is(2, "total")).collect();
    assert_eq!(total.len(), 1);
    assert_eq!(total[0].num(1), ncpus as i64, "the cpu column counts CPUs");
    for col in [3, 4] {
        let sum: i64 = ticks.iter().map(|r| r.num(col)).sum();
        assert_eq!(total[0].num(col), sum, "totals are the sums of the rows");
    }
}

#[test]
fn sigint_ends_the_run_with_totals() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let mut child = profiler_command()
        .args(["stat", "-c", "cpu-clock", "0.2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Lines::of(&mut child);
    wait_for("two rounds of every CPU", 20, || {
        let rounds = table(&lines.now())
            .iter()
            .filter(|r| r.is(2, "tick"))
            .count();
        (rounds >= 2 * online_cpus()).then_some(())
    });
    // SAFETY: kill sends a signal to the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "128 + SIGINT");
    let rows = table(&lines.finish());
    let ticks = rows.iter().filter(|r| r.is(2, "tick")).count();
    assert!(ticks >= 2 * online_cpus(), "rounds before the signal");
    let total = rows.last().expect("rows");
    assert!(total.is(2, "total"), "{total:?}");
    // The totals hold the ticks and the partial interval read at the signal.
    let sum: i64 = rows
        .iter()
        .filter(|r| r.is(2, "tick") || r.is(2, "partial"))
        .map(|r| r.num(3))
        .sum();
    assert_eq!(total.num(3), sum);
}

#[test]
fn cpu_list_stamps_and_json() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let out = profiler(&["stat", "-C", "0", "-T", "u", "-c", "cpu-clock", "0.2", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    // header, then (stamp, row) twice, then the total.
    assert_eq!(lines.len(), 6, "{stdout}");
    for stamp in [lines[1], lines[3]] {
        let t: i64 = stamp.trim().parse().expect("a time_t line");
        assert!(t > 1_600_000_000);
    }
    assert!(
        lines[5].contains("  1 total "),
        "one CPU measured: {}",
        lines[5]
    );
    let out = profiler(&["stat", "--json", "-c", "cpu-clock", "0.2", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), online_cpus() + 1, "{text}");
    let total = rows.last().unwrap();
    assert_eq!(total["event"], "total");
    assert_eq!(total["cpus"], online_cpus());
}

#[test]
fn bad_operands_are_usage_errors() {
    for args in [
        &["stat", "-c", "cpu-clock", "0"][..],
        &["stat", "-c", "cpu-clock", "1", "0"],
        &["stat", "-c", "cpu-clock", "1", "2", "3"],
        &["stat", "-c", "cpu-clock", "-T", "x", "1"],
        &["stat", "-c", "cpu-clock", "-C", "3-1", "1"],
        &["stat", "1"],
    ] {
        let out = profiler(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    }
}

#[test]
fn list_shows_the_interface_events_and_reasons() {
    let out = profiler(&["list"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("counter interface: "), "{text}");
    for needle in [
        "counters (npic): ",
        "cpu-clock",
        "page-faults",
        "PAPI_tot_cyc",
        "kernel features: ring buffer (5.8) yes, attach cookies (5.15) ",
    ] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
    let out = profiler(&["list", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let features = doc["kernel_features"].as_array().expect("kernel_features");
    let names: Vec<&str> = features
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["ring buffer", "attach cookies", "task pt_regs", "bpf_loop"]
    );
    // The release this test runs on: every feature from its version on.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let version: Vec<u32> = release
        .split(|c: char| !c.is_ascii_digit())
        .take(2)
        .map(|n| n.parse().unwrap())
        .collect();
    for f in features {
        let since: Vec<u32> = f["since"]
            .as_str()
            .unwrap()
            .split('.')
            .map(|n| n.parse().unwrap())
            .collect();
        if version >= since && std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            assert_eq!(f["available"], true, "{f} on {release}");
        }
    }
    let events = doc["events"].as_array().unwrap();
    let find = |name: &str| events.iter().find(|e| e["name"] == name).cloned();
    assert_eq!(find("task-clock").unwrap()["available"], true);
    let cycles = find("cycles").unwrap();
    if std::path::Path::new("/sys/bus/event_source/devices/cpu").exists() {
        assert_eq!(cycles["available"], true);
    } else {
        assert_eq!(cycles["available"], false);
        assert!(cycles["note"].as_str().unwrap().contains("no hardware PMU"));
        assert!(text.contains("unavailable here:"));
    }
}
