//! Overload and soak: a full ring buffer, 50k samples/s, thousands of short-lived processes
//! during a system-wide run. Loss is counted and reported; the profiler's memory (RSS) and
//! file descriptors, read from /proc while it runs, stay bounded. The bounds are generous
//! and about growth, not time. `soak_ten_minutes` (ignored by default) is the long version:
//! `cargo test -p profiler-tests --test overload -- --ignored --nocapture`.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use profiler_tests::*;

/// Processes the kernel has created since boot (/proc/stat `processes`).
fn forks_so_far() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("processes "))
        .and_then(|n| n.trim().parse().ok())
        .expect("processes line in /proc/stat")
}

/// `lost N` from the report's summary line.
fn reported_lost(stdout: &str) -> u64 {
    summary_field(stdout, "; lost ").unwrap_or_else(|| panic!("no lost count in:\n{stdout}"))
}

/// Records with `args` while `watch`ing it; the report, and what it held over time.
fn record_watched(args: &[&str]) -> (String, Vec<Held>) {
    let child = profiler_command()
        .arg("record")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, held) = watch(child, Duration::from_millis(250));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (stdout, held)
}

/// Prints at most 24 evenly spaced readings of fds and RSS (MiB), for the record.
fn show(what: &str, held: &[Held]) {
    let step = held.len().div_ceil(24);
    let pick = |f: fn(&Held) -> u64| -> Vec<u64> { held.iter().step_by(step).map(f).collect() };
    eprintln!("{what}: fds {:?}", pick(|h| h.fds as u64));
    eprintln!("{what}: RSS MiB {:?}", pick(|h| h.rss_kib / 1024));
}

/// While one profile is being collected: fds grow only by the files (executables) whose
/// code was sampled, and RSS by at most `slack_mib` over its value when attached.
fn assert_bounded(what: &str, held: &[Held], files: usize, slack_mib: u64) {
    show(what, held);
    let (first, max_fds) = (held[0], held.iter().map(|h| h.fds).max().unwrap());
    let max_rss = held.iter().map(|h| h.rss_kib).max().unwrap();
    assert!(
        max_fds <= first.fds + files,
        "{what}: fds grew to {max_fds}"
    );
    assert!(
        max_rss <= first.rss_kib + slack_mib * 1024,
        "{what}: RSS grew from {} to {max_rss} KiB",
        first.rss_kib
    );
}

/// Flat over a long run (in five intervals): after two fifths of it to warm up (the first
/// interval and its symbolization), the second half of the rest holds no more than the first
/// half (plus a little slack): fds by their peaks, RSS by its floor (the low tenth of the
/// readings). In continuous mode RSS is a sawtooth: each interval's symbolization (the files
/// and maps of the thousands of processes it saw) rises and is let go, and on a busy machine
/// it takes half of each interval, so a median lands on the tooth or the trough by chance (a
/// CI run: 87 then 147 MiB with the troughs at 72-83 MiB throughout). A leak raises the
/// floor between the teeth; a tooth does not. Before the first tooth RSS is lower still (a
/// fresh clone's run: 33 MiB 4.5 s in, its first symbolization late; troughs 82-83 MiB
/// after), so the warm-up takes in the first interval's symbolization.
fn assert_flat(what: &str, held: &[Held]) {
    show(what, held);
    let rest = &held[held.len() * 2 / 5..];
    let (early, late) = rest.split_at(rest.len() / 2);
    let peak = |hs: &[Held], f: fn(&Held) -> u64| hs.iter().map(f).max().unwrap();
    let floor = |hs: &[Held], f: fn(&Held) -> u64| {
        let mut v: Vec<u64> = hs.iter().map(f).collect();
        v.sort_unstable();
        v[v.len() / 10]
    };
    let (fds_early, fds_late) = (peak(early, |h| h.fds as u64), peak(late, |h| h.fds as u64));
    let (rss_early, rss_late) = (floor(early, |h| h.rss_kib), floor(late, |h| h.rss_kib));
    eprintln!(
        "{what}: peak fds {fds_early} then {fds_late}; RSS floor {} MiB then {} MiB \
         (peaks {} and {} MiB)",
        rss_early / 1024,
        rss_late / 1024,
        peak(early, |h| h.rss_kib) / 1024,
        peak(late, |h| h.rss_kib) / 1024
    );
    assert!(fds_late <= fds_early + 8, "{what}: fds grew");
    assert!(
        rss_late <= rss_early + rss_early / 4 + 16 * 1024,
        "{what}: RSS grew from a floor of {rss_early} to {rss_late} KiB"
    );
}

#[test]
fn a_full_ring_at_50k_samples_per_second_is_counted_as_loss() {
    if !privileged() {
        return;
    }
    let _s = serial();
    // 50k/s over the CPUs (the kernel may have lowered its maximum on a slow VM).
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let hz = (50_000 / cpus).min(max).to_string();
    let mut spin = Command::new(fixture("spin"))
        .args([&cpus.to_string(), "5"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // A one-page ring cannot keep up; the default one (a quarter of a second of samples)
    // takes what the reader drains.
    // Without naming user frames: what is measured is what loss costs, and naming at the end
    // reads the DWARF of whatever ran (this test's own debug build of the profiler, which
    // samples itself: 100 MiB of file pages).
    let unnamed = ["--symbolize", "none"];
    let (small, small_held) =
        record_watched(&[&["-a", "-F", &hz, "-m", "1", "-d", "1"][..], &unnamed].concat());
    let (big, big_held) = record_watched(&[&["-a", "-F", &hz, "-d", "1"][..], &unnamed].concat());
    let _ = (spin.kill(), spin.wait());
    let (n, lost) = (reported_samples(&small), reported_lost(&small));
    eprintln!("-m 1 at {hz} Hz x {cpus} CPUs: {n} samples, {lost} lost");
    eprintln!(
        "default ring: {} samples, {} lost",
        reported_samples(&big),
        reported_lost(&big)
    );
    assert!(
        lost > 0,
        "a one-page ring at {hz} Hz lost nothing:\n{small}"
    );
    assert!(n > 0, "some samples still arrive:\n{small}");
    // Loss costs nothing: neither ring size makes the reader hold more than what it kept
    // (fds: one per ELF file sampled, system-wide; memory: the distinct stacks of the
    // samples kept, up to 1 KiB each with their names, which only varies with what else
    // runs: a build beside the test has deep, distinct stacks).
    let kept = |report: &str| reported_samples(report) / 1024;
    assert_bounded("-m 1", &small_held, 32, 64 + kept(&small));
    assert_bounded("default ring", &big_held, 32, 64 + kept(&big));
}

/// The kernel's `perf_event_max_sample_rate`, set for a test and put back after it.
struct MaxSampleRate(String);

const MAX_SAMPLE_RATE: &str = "/proc/sys/kernel/perf_event_max_sample_rate";

impl MaxSampleRate {
    fn set(rate: u64) -> Self {
        let old = std::fs::read_to_string(MAX_SAMPLE_RATE).unwrap();
        std::fs::write(MAX_SAMPLE_RATE, rate.to_string())
            .unwrap_or_else(|e| panic!("setting {MAX_SAMPLE_RATE} to {rate}: {e}"));
        Self(old)
    }
}

impl Drop for MaxSampleRate {
    fn drop(&mut self) {
        let _ = std::fs::write(MAX_SAMPLE_RATE, self.0.trim());
    }
}

#[test]
fn samples_the_kernel_throttled_are_reported_as_skipped() {
    if !privileged() {
        return;
    }
    let _s = serial();
    // The kernel takes at most 1000 samples a second per CPU; the clock asks for 10,000
    // on every (busy) CPU: it is throttled each tick, its timer stopped until the next.
    let _rate = MaxSampleRate::set(1000);
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    let mut spin = Command::new(fixture("spin"))
        .args([&cpus.to_string(), "5"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let period = 100_000u64;
    let (report, _) = record_watched(&[
        "-a",
        "-e",
        "cpu-clock",
        "-c",
        &period.to_string(),
        "-d",
        "2",
        "--symbolize",
        "none",
    ]);
    let _ = (spin.kill(), spin.wait());
    let samples = reported_samples(&report);
    let lost = reported_lost(&report);
    let skipped = summary_count(&report, "; skipped by the kernel ");
    let secs: f64 = report
        .split(" in ")
        .nth(1)
        .and_then(|r| r.split(" s;").next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no duration in:\n{report}"));
    let called_for = (cpus as f64 * secs * 1e9 / period as f64) as u64;
    eprintln!(
        "{cpus} CPUs x {secs} s every {period} ns: {called_for} called for; \
         {samples} samples, {lost} lost, {skipped} skipped"
    );
    assert!(
        skipped > samples,
        "throttled to a tenth, most samples were never taken, and said so:\n{report}"
    );
    // Every sample the clock's time called for is a sample, a loss or a skip (within the
    // recording's edges).
    let accounted = samples + lost + skipped;
    assert!(
        accounted.abs_diff(called_for) * 20 < called_for,
        "{accounted} accounted for of {called_for}:\n{report}"
    );
}

#[test]
fn thousands_of_short_lived_processes_during_a_system_wide_run() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let before = forks_so_far();
    let churn = Churn::start();
    let (report, held) = record_watched(&["-a", "-F", "999", "-d", "5", "--by", "comm"]);
    drop(churn);
    let forks = forks_so_far() - before;
    eprintln!("{forks} processes created during the run");
    assert!(forks >= 1000, "only {forks} processes were created");
    for comm in ["forker", "true"] {
        assert!(
            report.lines().any(|l| l.ends_with(&format!(" {comm}"))),
            "the short-lived {comm} processes are in the report:\n{report}"
        );
    }
    // One profile keeps each sampled process's maps and stacks until the end (pid labels),
    // and fds for the distinct files sampled. Since short-lived processes are named from
    // the kernel's mmap records (not left `[unknown]`), each of the ~5,000 gone processes
    // is symbolized through its own maps at the end: measured +208 MiB at that peak (a
    // debug build; +90 MiB while recording), against +128 before they were named. The
    // continuous mode's soak below keeps its bound: intervals let their processes go.
    assert_bounded("churn", &held, 32, 256);
}

/// `secs` system-wide at 999 Hz with constant process churn, in continuous mode (a profile
/// every `secs / 5` seconds, the mode for long runs): fds and RSS flat.
fn soak(secs: u64) {
    let dir = scratch("soak");
    let before = forks_so_far();
    let churn = Churn::start();
    let (report, held) = record_watched(&[
        "-a",
        "-F",
        "999",
        "-d",
        &secs.to_string(),
        "--interval",
        &(secs as f64 / 5.0).to_string(),
        "-o",
        dir.to_str().unwrap(),
    ]);
    drop(churn);
    eprintln!(
        "soak {secs} s: {} processes created; last interval: {}",
        forks_so_far() - before,
        report.lines().next().unwrap_or_default()
    );
    let files = dir_entries(&dir);
    assert!(files.len() >= 5, "a profile per interval: {files:?}");
    let (mut samples, mut lost) = (0, 0);
    for f in &files {
        let r = run_ok(&["report", "-i", dir.join(f).to_str().unwrap()]);
        samples += reported_samples(&r);
        lost += reported_lost(&r);
    }
    eprintln!(
        "soak {secs} s: {samples} samples, {lost} lost in {} files",
        files.len()
    );
    assert!(samples > 0);
    // Every loss is counted; the share is bounded too. Intervals are symbolized on their
    // own thread, so the reader never pauses: 0 lost of 37,418 with the machine's load at 5
    // (two compilers beside it; 12 % were lost when the reader symbolized). The bound leaves
    // room for a busy machine, not for a reader that stops.
    assert!(
        lost * 100 <= (samples + lost) * 5,
        "soak {secs} s lost {lost} of {} samples (over 5 %)",
        samples + lost
    );
    assert_flat(&format!("soak {secs} s"), &held);
}

#[test]
fn soak_twenty_seconds() {
    if !privileged() {
        return;
    }
    let _s = serial();
    soak(20);
}

#[test]
#[ignore = "10 minutes: run by hand (see docs/reliability.md)"]
fn soak_ten_minutes() {
    if !privileged() {
        return;
    }
    let _s = serial();
    soak(600);
}
