//! The binary invoked as `cputrack` and `cpustat`: Solaris command lines and exit codes.

use std::process::Command;

use profiler_tests::*;

fn run(dir: &std::path::Path, name: &str, args: &[&str]) -> std::process::Output {
    Command::new(dir.join(name))
        .args(args)
        .output()
        .expect("running a persona")
}

#[test]
fn cputrack_takes_the_command_without_dashes() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = persona_links("cputrack");
    let touch = fixture("touch");
    let out = run(
        &dir,
        "cputrack",
        &[
            "-c",
            "page-faults",
            "-T",
            "0.5",
            touch.to_str().unwrap(),
            "1000",
            "2",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let rows = table(&stdout);
    assert_eq!(
        rows.iter().filter(|r| r.is(2, "lwp_exit")).count(),
        2,
        "{stdout}"
    );
    assert!(rows.iter().any(|r| r.is(2, "exit") && r.num(3) >= 2000));
}

#[test]
fn cpustat_takes_interval_and_count() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = persona_links("cpustat");
    let out = run(&dir, "cpustat", &["-c", "cpu-clock", "0.2", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let rows = table(&stdout);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(rows.len(), 2 * cpus + 1, "{stdout}");
}

#[test]
fn solaris_usage_errors_and_help() {
    let dir = persona_links("usage");
    for (name, args, text) in [
        (
            "cputrack",
            &["-r", "x", "-c", "task-clock", "true"][..],
            "option -r is not supported",
        ),
        (
            "cputrack",
            &["-x", "-c", "task-clock", "true"],
            "illegal option -- x",
        ),
        ("cputrack", &["-c"], "option requires an argument -- c"),
        (
            "cputrack",
            &["-c", "task-clock,bogus=1", "true"],
            "cputrack: bad token 'bogus=1'",
        ),
        ("cputrack", &["-c", "task-clock"], "no command to start"),
        ("cpustat", &["-c", "cpu-clock", "0"], "cpustat: "),
        (
            "cpustat",
            &["-c", "cpu-clock", "-T", "q", "1"],
            "invalid -T",
        ),
    ] {
        let out = run(&dir, name, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name} {args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(text), "{name} {args:?}: {stderr}");
    }
    for name in ["cputrack", "cpustat"] {
        let out = run(&dir, name, &["-h"]);
        assert_eq!(out.status.code(), Some(0));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.starts_with("Usage:\n"), "{stdout}");
        assert!(stdout.contains("CPU performance counter interface: "));
        assert!(stdout.contains("event specification syntax:"));
    }
}
