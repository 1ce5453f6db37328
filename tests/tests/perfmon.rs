//! FreeBSD perfmon(4) programs under LD_PRELOAD=libperfmon.so: the C test of every request
//! and errno case in each PERFMON_SCOPE, and the seed's usage (set up counter 0, start, run,
//! stop, read, tstamp) counting the page faults of a known workload exactly. Both programs
//! include only perfmon.h (<machine/perfmon.h> for the example) and open /dev/perfmon.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use profiler_tests::*;

/// target/<profile>/libperfmon.so (`cargo xtask test` builds it first).
fn shim() -> PathBuf {
    built("libperfmon.so", "libperfmon")
}

fn source(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../libperfmon")
        .join(rel)
}

/// `cc` with only the header directory: nothing of the shim is linked in.
fn compile(src: &str, out: &Path) {
    let o = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread", "-I"])
        .arg(source("include"))
        .arg("-o")
        .arg(out)
        .arg(source(src))
        .output()
        .expect("running cc");
    assert!(
        o.status.success(),
        "cc {src} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn preloaded(exe: &Path, scope: Option<&str>) -> Command {
    let mut c = Command::new(exe);
    c.env("LD_PRELOAD", shim()).env_remove("PERFMON_SCOPE");
    if let Some(s) = scope {
        c.env("PERFMON_SCOPE", s);
    }
    c
}

fn output(cmd: &mut Command) -> (bool, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("running a C program");
    (
        status.success(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

#[test]
fn c_test_of_every_request_and_errno_case_passes_in_each_scope() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let exe = scratch("perfmon-test").join("perfmon_test");
    compile("tests/perfmon_test.c", &exe);
    for scope in [Some("process"), Some("cpu"), Some("all"), None] {
        let (ok, out, err) = output(&mut preloaded(&exe, scope));
        let summary = out.lines().last().unwrap_or_default();
        assert!(
            ok && summary.starts_with("perfmon_test: ") && summary.ends_with(" checks, 0 failed"),
            "PERFMON_SCOPE={scope:?}:\n{out}\n{err}"
        );
        let checks: u32 = summary["perfmon_test: ".len()..]
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("check count");
        assert!(checks >= 117, "{scope:?}: {checks} checks ran: {out}");
        eprintln!("PERFMON_SCOPE={scope:?}: {summary}");
    }
}

/// Four threads open, ioctl and close other files and reader descriptors of the device
/// while the main thread counts its own page faults: every call answers for its own
/// descriptor, the 20 counts are exact, nothing leaks.
#[test]
fn the_descriptor_table_holds_under_threads() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let exe = scratch("perfmon-threads").join("threads");
    compile("tests/threads.c", &exe);
    let (ok, out, err) = output(&mut preloaded(&exe, Some("process")));
    let lines: Vec<&str> = out.lines().collect();
    assert!(ok, "{out}\n{err}");
    assert_eq!(
        lines[..lines.len() - 1],
        ["page faults: 10500 counted, 10500 touched"],
        "{out}"
    );
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("threads: ") && last.ends_with(" ops, 0 failed"),
        "{out}"
    );
    eprintln!("{last}");
}

/// Permissions are perf's: as an unprivileged user under `perf_event_paranoid` ≥ 1, the
/// CPU-wide default is refused with EACCES at PMIOSETUP, and user-mode counting of the
/// program itself (`process` scope, PMCF_USR) works, exactly.
#[test]
fn an_unprivileged_user_counts_its_own_user_mode_faults_and_no_cpu() {
    if !privileged() {
        return;
    }
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2);
    if paranoid < 1 {
        eprintln!("SKIP: perf_event_paranoid {paranoid} lets anyone count CPU-wide");
        return;
    }
    let _s = serial();
    let exe = scratch("perfmon-nobody").join("perfmon");
    compile("examples/perfmon.c", &exe);
    // The shim beside the program: the build tree may be where nobody can read (a clone
    // under /root or in a mktemp directory), and the loader ignores what it cannot open.
    let lib = exe.with_file_name("libperfmon.so");
    std::fs::copy(shim(), &lib).expect("copying libperfmon.so");
    let nobody = |scope: &str, args: &[&str]| {
        let mut c = preloaded(&exe, Some(scope));
        c.env("LD_PRELOAD", &lib);
        std::os::unix::process::CommandExt::uid(&mut c, 65534);
        std::os::unix::process::CommandExt::gid(&mut c, 65534);
        output(c.args(args))
    };
    let (ok, out, err) = nobody("process", &["-s", "-u", "-l", "2", "-p", "100", "2"]);
    assert!(ok, "{out}\n{err}");
    assert_eq!(
        out.lines().nth(1),
        Some("2 x 100 pages: 200 events"),
        "{out}"
    );
    let (ok, _, err) = nobody("cpu", &["-s", "-u", "2"]);
    assert!(!ok);
    assert_eq!(err.trim(), "perfmon: PMIOSETUP: Permission denied");
}

/// The example's lines: the PMIOGET line, the count line, the tstamp line.
fn example(exe: &Path, scope: Option<&str>, args: &[&str]) -> (i64, String, f64) {
    let (ok, out, err) = output(preloaded(exe, scope).args(args));
    assert!(ok, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let events: i64 = lines[1]
        .split(": ")
        .nth(1)
        .and_then(|s| s.strip_suffix(" events"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("count line: {out}"));
    let ms: f64 = lines[2]
        .strip_prefix("tsc: ")
        .and_then(|s| s.split(" = ").nth(1))
        .and_then(|s| s.strip_suffix(" ms"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("tsc line: {out}"));
    assert!(lines[2].contains(" ticks at 1000 MHz = "), "{out}");
    (events, lines[0].to_string(), ms)
}

#[test]
fn the_seed_example_counts_exactly_the_page_faults_of_its_workload() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let exe = scratch("perfmon-example").join("perfmon");
    compile("examples/perfmon.c", &exe);
    // Page faults (the software extension), user and kernel mode: 5 × 1000 fresh pages.
    for _ in 0..3 {
        let (n, config, ms) = example(&exe, Some("process"), &["-s", "-l", "5", "-p", "1000", "2"]);
        assert_eq!(config, "counter 0: event 0x2 unit 0 flags 0x23 mask 0");
        assert_eq!(n, 5000, "the program's own faults, exactly");
        assert!(ms > 0.0);
    }
    // User mode only, another size.
    let (n, config, _) = example(
        &exe,
        Some("process"),
        &["-s", "-u", "-l", "3", "-p", "333", "2"],
    );
    assert_eq!(config, "counter 0: event 0x2 unit 0 flags 0x21 mask 0");
    assert_eq!(n, 999);
    // CPU-wide (the seed's model): the workload's faults and whatever else ran there.
    for scope in [None, Some("cpu"), Some("all")] {
        let (n, _, _) = example(&exe, scope, &["-s", "-l", "5", "-p", "1000", "2"]);
        assert!(n >= 5000, "{scope:?}: {n}");
        eprintln!("PERFMON_SCOPE={scope:?}: {n} page faults for 5000 pages");
    }
}

#[test]
fn a_raw_event_without_a_pmu_is_enxio_and_nothing_works_without_the_shim() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let exe = scratch("perfmon-raw").join("perfmon");
    compile("examples/perfmon.c", &exe);
    if !Path::new("/sys/bus/event_source/devices/cpu").exists() {
        let (ok, _, err) = output(
            preloaded(&exe, Some("process"))
                .env("LIBPERFMON_DEBUG", "1")
                .arg("0xc0"),
        );
        assert!(!ok);
        let lines: Vec<&str> = err.lines().collect();
        // 0xc0 is P6 INST_RETIRED: the table counts it as `instructions`, which needs a PMU.
        assert!(
            lines[0].starts_with(
                "libperfmon: PMIOSETUP: event 0xc0 (P6 INST_RETIRED: instructions): this host has no hardware PMU"
            ),
            "{err}"
        );
        assert_eq!(lines[1], "perfmon: PMIOSETUP: No such device or address");
        // FLOPS (0xc1) has no generic counterpart: without a P6-compatible PMU, ENXIO.
        let (ok, _, err) = output(
            preloaded(&exe, Some("process"))
                .env("LIBPERFMON_DEBUG", "1")
                .arg("0xc1"),
        );
        assert!(!ok);
        assert!(
            err.starts_with(
                "libperfmon: PMIOSETUP: event 0xc1 is not one of perfmon(4)'s P6 events"
            ),
            "{err}"
        );
        assert!(
            err.ends_with("perfmon: PMIOSETUP: No such device or address\n"),
            "{err}"
        );
    }
    let o = Command::new(&exe).args(["-s", "2"]).output().unwrap();
    assert!(!o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "perfmon: /dev/perfmon: No such file or directory"
    );
    // A bad scope: the writer's open fails with EINVAL, explained under LIBPERFMON_DEBUG.
    let (ok, _, err) = output(
        preloaded(&exe, Some("thread"))
            .env("LIBPERFMON_DEBUG", "1")
            .args(["-s", "2"]),
    );
    assert!(!ok);
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "libperfmon: open: PERFMON_SCOPE=\"thread\": expected cpu, all or process",
            "perfmon: /dev/perfmon: Invalid argument"
        ]
    );
}

/// A program that cannot set PMCF_SW (the example without `-s`) counts page faults when
/// PERFMON_EVENTS points its event number at them; a bad mapping is one line on stderr.
#[test]
fn perfmon_events_points_a_bare_event_number_at_any_event() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let exe = scratch("perfmon-events").join("perfmon");
    compile("examples/perfmon.c", &exe);
    for _ in 0..2 {
        let mut c = preloaded(&exe, Some("process"));
        c.env("PERFMON_EVENTS", "2=page-faults,3=context-switches");
        let (n, config) = example_with(&mut c, &["-l", "5", "-p", "1000", "2"]);
        assert_eq!(config, "counter 0: event 0x2 unit 0 flags 0x3 mask 0");
        assert_eq!(n, 5000, "the program's own faults, exactly");
    }
    let mut c = preloaded(&exe, Some("process"));
    c.env("PERFMON_EVENTS", "0x79=page-faults");
    let (n, _) = example_with(&mut c, &["-u", "-l", "3", "-p", "333", "0x79"]);
    assert_eq!(n, 999, "a P6 number taken over, user mode only");
    for (mapping, line) in [
        (
            "2=page-fault",
            "libperfmon: PERFMON_EVENTS: '2=page-fault': unknown event 'page-fault' (did you mean page-faults?)",
        ),
        (
            "2=page-faults,2=cs",
            "libperfmon: PERFMON_EVENTS: event number 2 is mapped twice",
        ),
        (
            "page-faults",
            "libperfmon: PERFMON_EVENTS: 'page-faults': expected NUMBER=EVENT, e.g. 2=page-faults",
        ),
    ] {
        let (ok, out, err) = output(
            preloaded(&exe, Some("process"))
                .env("PERFMON_EVENTS", mapping)
                .arg("2"),
        );
        assert!(!ok && out.is_empty(), "{mapping}: {out}");
        assert_eq!(
            err.lines().collect::<Vec<_>>(),
            [line, "perfmon: /dev/perfmon: Invalid argument"],
            "{mapping}"
        );
    }
}

fn example_with(cmd: &mut Command, args: &[&str]) -> (i64, String) {
    let (ok, out, err) = output(cmd.args(args));
    assert!(ok, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let events: i64 = lines[1]
        .split(": ")
        .nth(1)
        .and_then(|s| s.strip_suffix(" events"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("count line: {out}"));
    (events, lines[0].to_string())
}

/// FreeBSD's own example, share/examples/perfmon/perfmon.c (1996), byte for byte: kept in
/// `fixtures/freebsd/` with its MIT notice (or taken from `FREEBSD_PERFMON_C`), checked
/// against the SHA-256 of FreeBSD's file. Built against the headers `cargo xtask install` installs, run under
/// LD_PRELOAD with PERFMON_EVENTS mapping event 2 to page-faults, each loop's count of
/// `touch 3000` is exactly 2000 more than the same loop's count of `touch 1000`.
#[test]
fn freebsd_s_perfmon_c_counts_the_touch_fixture_exactly() {
    if !privileged() {
        return;
    }
    const SHA256: &str = "bd00e4b1623b7a81f6903c4aff4f73888eba01da7cb69078f1b8ea09ac2551d2";
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let candidates: Vec<PathBuf> = std::env::var_os("FREEBSD_PERFMON_C")
        .map(PathBuf::from)
        .into_iter()
        .chain([root.join("tests/fixtures/freebsd/perfmon.c")])
        .collect();
    let src = candidates
        .iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("FreeBSD's perfmon.c not found at {candidates:?}"));
    let sum = Command::new("sha256sum")
        .arg(src)
        .output()
        .expect("sha256sum");
    assert!(
        String::from_utf8_lossy(&sum.stdout).starts_with(SHA256),
        "{} is not FreeBSD's perfmon.c unchanged",
        src.display()
    );
    let _s = serial();
    let dir = scratch("perfmon-freebsd");
    let exe = dir.join("perfmon");
    // As a user builds it: FreeBSD's code has warnings on Linux (%qd, an errx without its
    // argument), none of them errors.
    let cc = Command::new("cc")
        .args(["-O1", "-g", "-I"])
        .arg(source("include"))
        .arg("-o")
        .arg(&exe)
        .arg(src)
        .output()
        .expect("running cc");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let loops = 5;
    let counts = |pages: u32| -> Vec<i64> {
        // Address-space randomization moves the stack and mappings across page boundaries,
        // which changes a process's start-up faults by a few from run to run; without it
        // every run of a command faults the same.
        let mut c = Command::new("setarch");
        c.args(["-R"])
            .arg(&exe)
            .args(["-u", "-o", "-l", &loops.to_string(), "-c"])
            .arg(format!("{} {pages}", fixture("touch").display()))
            .arg("2")
            .env("LD_PRELOAD", shim())
            .env("PERFMON_SCOPE", "process")
            .env("PERFMON_EVENTS", "2=page-faults");
        let (ok, out, err) = output(&mut c);
        assert!(ok, "{out}\n{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), loops + 3, "{out}");
        assert!(
            lines[loops + 2].starts_with("clocks (at 1000-MHz): "),
            "{out}"
        );
        (1..=loops)
            .map(|i| {
                lines[i - 1]
                    .strip_prefix(&format!("{i}: "))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("loop line {i}: {out}"))
            })
            .collect()
    };
    let (small, big) = (counts(1000), counts(3000));
    eprintln!("touch 1000: {small:?}\ntouch 3000: {big:?}");
    assert!(small.iter().all(|&n| n > 1000), "{small:?}");
    let differences: Vec<i64> = big.iter().zip(&small).map(|(b, s)| b - s).collect();
    assert_eq!(
        differences,
        vec![2000; loops],
        "1000 vs 3000 pages, loop by loop"
    );
}
