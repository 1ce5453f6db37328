//! Bad input to every command: one clear line naming what is wrong and what to do, exit 2
//! for usage and 1 for runtime errors, nothing attached afterwards, no partial output file.
//! (The basics, `--bogus`, `-p 4999999`, a missing command and `-o /nonexistent-dir/..`, are
//! in cli.rs; the profile readers' first checks in profile.rs.)

use std::{process::Command, thread, time::Duration};

use profiler_tests::*;

/// Runs each case, asserting its exit status and stderr words, that nothing of ours stayed
/// loaded and that `dir` (the cases' output directory) is still empty.
fn refused(cases: &[(&[&str], i32, &[&str])], dir: &std::path::Path) {
    let before = our_programs();
    for (args, code, needles) in cases {
        let out = profiler(args);
        assert_fails(&out, *code, needles, &format!("{args:?}"));
        assert_eq!(our_programs(), before, "{args:?} left a program loaded");
        assert!(dir_entries(dir).is_empty(), "{args:?} left a file behind");
    }
}

#[test]
fn events_that_are_not_events_are_usage_errors_with_suggestions() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("bad-events");
    let out = dir.join("p.pb.gz");
    let o = out.to_str().unwrap();
    let max = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .unwrap()
        .trim()
        .parse::<u64>()
        .unwrap();
    let above = (max + 1).to_string();
    let limit = format!("-F {max} or less");
    refused(
        &[
            (
                &["record", "-e", "page-fault", "-a", "-d", "1", "-o", o],
                2,
                &["unknown event 'page-fault'", "did you mean page-faults"],
            ),
            (
                &["record", "-e", "cpu-clock:u", "-a", "-d", "1", "-o", o],
                2,
                &["malformed event 'cpu-clock:u'", "--user"],
            ),
            (
                &["record", "-e", "sched:no_such_tracepoint", "-a", "-o", o],
                2,
                &["unknown event 'sched:no_such_tracepoint'"],
            ),
            (
                &["record", "-e", "cpu-clock,cpu-clock", "-a", "-o", o],
                2,
                &["event 'cpu-clock' is given twice"],
            ),
            // The event is resolved before the command is started: it never runs.
            (
                &["record", "-e", "cpu-clok", "-o", o, "--", "/bin/true"],
                2,
                &["did you mean cpu-clock"],
            ),
            (
                &["record", "-F", &above, "-a", "-d", "1", "-o", o],
                2,
                &["kernel.perf_event_max_sample_rate", &limit],
            ),
            // The kernel refuses sample periods with the top bit set.
            (
                &["record", "-c", "9223372036854775808", "-a", "-o", o],
                2,
                &[
                    "period 9223372036854775808",
                    "-c 9223372036854775807 or less",
                ],
            ),
            (
                &["record", "-c", "0", "-a", "-o", o],
                2,
                &["period must be at least 1"],
            ),
            (
                &["record", "-m", "3", "-a", "-o", o],
                2,
                &["--mmap-pages 3", "power of two"],
            ),
            (
                &["record", "-m", "1048576", "-a", "-o", o],
                2,
                &["at most 1 GiB"],
            ),
            (
                &["track", "-c", "page-fault", "-o", o, "--", "/bin/true"],
                2,
                &["did you mean page-faults"],
            ),
            (
                &["stat", "-c", "page-fault", "1", "1"],
                2,
                &["did you mean page-faults"],
            ),
        ],
        &dir,
    );
}

#[test]
fn spec_tokens_and_attributes_out_of_range_are_usage_errors() {
    // Pure parsing: no privileges needed, nothing is ever attached.
    let npic = 8; // `profiler list`: 8 counters for software events
    let pic = format!("pic{npic}=page-faults");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["-c", &pic], "bad token 'pic8=page-faults'"),
        (
            vec!["-c", "pic0=page-faults,pic0=cpu-clock"],
            "repeated 'pic0' token",
        ),
        (vec!["-c", "page-faults,foo=1"], "bad token 'foo=1'"),
        (
            vec!["-c", "page-faults,nouser99"],
            "unknown event 'nouser99'",
        ),
        (vec!["-c", ""], "no event in specification"),
    ];
    for (spec, needle) in cases {
        for tool in ["track", "stat"] {
            let mut args = vec![tool];
            args.extend(&spec);
            if tool == "track" {
                args.extend(["--", "/bin/true"]);
            } else {
                args.extend(["1", "1"]);
            }
            let out = profiler(&args);
            assert_fails(&out, 2, &[needle], &format!("{args:?}"));
        }
    }
}

#[test]
fn targets_that_do_not_exist_fail_before_attaching() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("bad-targets");
    let o = dir.join("p.folded");
    let o = o.to_str().unwrap();
    refused(
        &[
            (
                &["record", "-t", "4999999", "-o", o],
                1,
                &["thread 4999999 does not exist"],
            ),
            (
                &["record", "-p", "1,4999999", "-o", o],
                1,
                &["process 4999999 does not exist"],
            ),
            (
                &["record", "-G", "/sys/fs/cgroup/no-such-group", "-o", o],
                2,
                &["/sys/fs/cgroup/no-such-group is not a cgroup v2 directory"],
            ),
            // A cgroup path that is a file, not a directory.
            (
                &["record", "-G", "/etc/hostname", "-o", o],
                2,
                &["/etc/hostname is not a cgroup v2 directory"],
            ),
            (
                &["record", "-C", "4096", "-a", "-o", o],
                2,
                &["cpu 4096 is not online"],
            ),
            (
                &["record", "-C", "1-0", "-a", "-o", o],
                2,
                &["invalid CPU list"],
            ),
            (
                &["track", "-c", "page-faults", "-p", "4999999"],
                1,
                &["process 4999999 does not exist"],
            ),
            (
                &["stat", "-c", "cpu-clock", "-C", "4096", "1", "1"],
                1,
                &["cpu 4096 does not exist"],
            ),
        ],
        &dir,
    );
}

/// A pid that exists in /proc but has exited: a child of ours not yet waited for.
struct Zombie(std::process::Child);

impl Zombie {
    fn new() -> Zombie {
        let child = Command::new("/bin/true").spawn().unwrap();
        while trace_state(child.id()).1 != 'Z' {
            thread::sleep(Duration::from_millis(10));
        }
        Zombie(child)
    }
}

impl Drop for Zombie {
    fn drop(&mut self) {
        let _ = self.0.wait();
    }
}

#[test]
fn a_target_that_exits_before_or_during_the_run_is_not_an_error() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let before = our_programs();
    // Gone before the run: a report of nothing, at once (not after -d).
    let zombie = Zombie::new();
    let pid = zombie.0.id().to_string();
    let out = profiler(&["record", "-p", &pid, "-d", "60"]);
    assert_eq!(out.status.code(), Some(0), "{}", one_error_line(&out));
    assert_eq!(reported_samples(&String::from_utf8_lossy(&out.stdout)), 0);
    drop(zombie);
    // Exits during the run: the report covers what it ran, and the run ends with it. The
    // target is stopped until the profiler has attached; its 3 s are wall-clock seconds
    // from its start, so a busy host's slow attach (seconds) must leave some of them.
    let mut chain = Command::new(fixture("chain")).arg("3").spawn().unwrap();
    let pid = chain.id().to_string();
    let out = record_from_the_start(&mut chain, &["record", "-F", "499", "-p", &pid, "-d", "60"]);
    assert_eq!(out.status.code(), Some(0), "{}", one_error_line(&out));
    let n = reported_samples(&String::from_utf8_lossy(&out.stdout));
    assert!(n > 0, "the second it ran is in the report");
    // A started command that exits at once.
    let out = profiler(&["record", "--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(0));
    // track: a process that exits while tracked ends the run normally, with its exit row.
    let mut sleeper = Command::new("sleep").arg("0.5").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let out = profiler(&["track", "-c", "page-faults", "-p", &pid]);
    let _ = sleeper.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        table(&stdout).iter().any(|r| r.is(2, "exit")),
        "exit row:\n{stdout}"
    );
    assert_eq!(our_programs(), before);
}

#[test]
fn unwritable_outputs_are_refused_before_anything_runs() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("unwritable");
    let marker = dir.join("ran");
    let sh = format!("touch {}", marker.display());
    let sub = dir.join("subdir");
    std::fs::create_dir(&sub).unwrap();
    let sub = sub.to_str().unwrap();
    let before = our_programs();
    for (args, needle) in [
        (
            vec![
                "record",
                "-o",
                "/proc/no-such/x.pb.gz",
                "--",
                "sh",
                "-c",
                &sh,
            ],
            "cannot write /proc/no-such/x.pb.gz",
        ),
        (
            vec!["record", "-o", sub, "--", "sh", "-c", &sh],
            "is a directory",
        ),
        // The kernel's own files take no temporary files beside them.
        (
            vec![
                "record",
                "-o",
                "/proc/sys/kernel/x.folded",
                "--",
                "sh",
                "-c",
                &sh,
            ],
            "cannot write /proc/sys/kernel/x.folded",
        ),
        (
            vec![
                "track",
                "-c",
                "page-faults",
                "-o",
                "/proc/no-such/t",
                "--",
                "sh",
                "-c",
                &sh,
            ],
            "/proc/no-such/t",
        ),
    ] {
        let out = profiler(&args);
        assert_fails(&out, 1, &[needle], &format!("{args:?}"));
        assert!(!marker.exists(), "{args:?}: the command ran");
        assert_eq!(our_programs(), before);
    }
    assert_eq!(dir_entries(&dir), ["subdir".to_string()].into());
    // flamegraph: the output is checked before the input is read and rendered.
    let folded = dir.join("in.folded");
    std::fs::write(&folded, "a;b 3\n").unwrap();
    let out = profiler(&[
        "flamegraph",
        "-i",
        folded.to_str().unwrap(),
        "-o",
        "/proc/no-such/g.svg",
    ]);
    assert_fails(&out, 1, &["/proc/no-such/g.svg"], "flamegraph -o");
}

#[test]
fn truncated_and_garbage_profiles_fail_with_the_file_named() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("garbage");
    let good = dir.join("good.pb.gz");
    run_ok(&[
        "record",
        "-q",
        "-F",
        "999",
        "-o",
        good.to_str().unwrap(),
        "--",
        &path("chain"),
        "0.3",
    ]);
    let bytes = std::fs::read(&good).unwrap();
    let raw = gunzip(&good);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("half.pb.gz", bytes[..bytes.len() / 2].to_vec()),
        ("header.pb.gz", bytes[..10].to_vec()),
        ("raw-truncated.pb", raw[..raw.len() * 2 / 3].to_vec()),
        ("zeros.pb", vec![0u8; 4096]),
        ("binary.folded", vec![0xff, 0xfe, 0x00, 0x80, 0x0a]),
        (
            "overflow.folded",
            b"a;b 18446744073709551615\na;c 1\n".to_vec(),
        ),
        ("negative.folded", b"a;b -5\n".to_vec()),
        (
            "html.txt",
            b"<html><body>not found</body></html>\n".to_vec(),
        ),
        ("empty.pb.gz", Vec::new()),
    ];
    let out_dir = scratch("garbage-out");
    for (name, data) in &cases {
        let f = dir.join(name);
        std::fs::write(&f, data).unwrap();
        let fs = f.to_str().unwrap();
        let svg = out_dir.join("g.svg");
        for args in [
            vec!["report", "-i", fs],
            vec!["flamegraph", "-i", fs, "-o", svg.to_str().unwrap()],
            vec!["flamegraph", "--diff", fs, fs, "-o", svg.to_str().unwrap()],
        ] {
            let out = profiler(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!err.contains("panicked"), "{args:?}: {err}");
            assert_fails(&out, 1, &[fs], &format!("{args:?}"));
        }
        assert!(dir_entries(&out_dir).is_empty(), "{name}: output left");
    }
}

/// `path` decompressed by the system's gzip (the tests do not link flate2).
fn gunzip(path: &std::path::Path) -> Vec<u8> {
    let o = Command::new("gzip")
        .arg("-dc")
        .arg(path)
        .output()
        .expect("gzip");
    assert!(o.status.success());
    o.stdout
}

#[test]
fn garbage_perf_maps_do_not_break_a_recording() {
    if !privileged() {
        return;
    }
    let _s = serial();
    // The jit fixture names its code in /tmp/perf-PID.map; a map full of garbage (binary,
    // overlong lines, overflowing ranges, a truncated last line) is read by the profiler
    // as untrusted input: bad lines are skipped, the report still comes out.
    // chain runs for wall-clock seconds, stopped or not: 4, so that a busy host's slow
    // attach (the target is stopped meanwhile) leaves it time to run.
    let mut chain = Command::new(fixture("chain")).arg("4").spawn().unwrap();
    let map = std::path::PathBuf::from(format!("/tmp/perf-{}.map", chain.id()));
    let mut junk = Vec::new();
    junk.extend_from_slice(b"ffffffffffffffff ffffffffffffffff wraps\n");
    junk.extend_from_slice(&[0xff, 0x00, 0xfe, b'\n']);
    junk.extend_from_slice(&vec![b'a'; 1 << 20]);
    junk.extend_from_slice(b"\n0 0 empty\nzz 10 nothex\n1000 10 ");
    std::fs::write(&map, &junk).unwrap();
    let pid = chain.id().to_string();
    let out = record_from_the_start(&mut chain, &["record", "-F", "499", "-p", &pid, "-d", "10"]);
    let _ = std::fs::remove_file(&map);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(" leaf "),
        "still symbolized from the ELF file:\n{stdout}"
    );
}
