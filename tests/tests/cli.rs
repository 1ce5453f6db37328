//! Command-line errors: one clear line, the right exit status, nothing attached.

use profiler_tests::*;

fn one_line(stderr: &[u8]) -> String {
    let s = String::from_utf8_lossy(stderr).into_owned();
    assert_eq!(
        s.trim_end().lines().count(),
        1,
        "expected one line, got:\n{s}"
    );
    s
}

#[test]
fn unknown_flag_exits_2_with_one_line() {
    let out = profiler(&["record", "--bogus", "-a"]);
    assert_eq!(out.status.code(), Some(2));
    let line = one_line(&out.stderr);
    assert!(line.contains("'--bogus'"), "{line}");
}

#[test]
fn missing_target_and_bad_values_are_usage_errors() {
    for args in [
        &["record"][..],
        &["record", "-p", "abc"],
        &["record", "-a", "-F", "0"],
        &["record", "-a", "-d", "-1"],
    ] {
        let out = profiler(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        one_line(&out.stderr);
    }
}

#[test]
fn nonexistent_pid_exits_1_and_attaches_nothing() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let before = our_programs();
    // Pids above pid_max cannot exist.
    let out = profiler(&["record", "-p", "4999999"]);
    assert_eq!(out.status.code(), Some(1));
    let line = one_line(&out.stderr);
    assert!(line.contains("process 4999999 does not exist"), "{line}");
    assert_eq!(our_programs(), before);
}

#[test]
fn missing_command_and_unwritable_output_fail_before_attaching() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let before = our_programs();
    let out = profiler(&["record", "--", "/nonexistent/cmd"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(one_line(&out.stderr).contains("command not found"));
    let out = profiler(&[
        "record",
        "-a",
        "-d",
        "1",
        "-o",
        "/nonexistent-dir/out.folded",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(one_line(&out.stderr).contains("/nonexistent-dir/out.folded"));
    assert_eq!(our_programs(), before);
}

/// Runs the profiler with stdout on a pipe whose reader is already closed, as `| head` ends.
fn with_closed_stdout(args: &[&str]) -> std::process::Output {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two fds we then own; the read end is closed at once.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
        libc::close(fds[0]);
    }
    // SAFETY: fds[1] is a valid pipe write end owned by nothing else.
    let stdout = unsafe { std::process::Stdio::from(std::os::fd::OwnedFd::from_raw_fd(fds[1])) };
    profiler_command()
        .args(args)
        .stdout(stdout)
        .output()
        .unwrap()
}

#[test]
fn a_closed_stdout_is_a_normal_end_not_a_panic() {
    for args in [
        &["stat", "-h"][..],
        &["track", "-h"],
        &["list"],
        &["list", "--json"],
    ] {
        let out = with_closed_stdout(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// `report FILE` and `flamegraph FILE` read FILE as `-i FILE` does; both spellings at once
/// are a usage error that names them.
#[test]
fn report_and_flamegraph_take_the_file_as_an_argument_or_with_i() {
    let dir = scratch("cli-input-file");
    let folded = dir.join("in.folded");
    std::fs::write(&folded, "main;outer;leaf 30\nmain;other 10\n").unwrap();
    let f = folded.to_str().unwrap();
    let positional = run_ok(&["report", f]);
    assert!(positional.contains("leaf"), "{positional}");
    assert_eq!(positional, run_ok(&["report", "-i", f]));
    assert_eq!(positional, run_ok(&["report", "--by", "function", f]));
    // Not the default input: a FILE that does not exist is named in the error.
    let missing = dir.join("missing.pb.gz");
    let out = profiler(&["report", missing.to_str().unwrap()]);
    assert_fails(&out, 1, &[missing.to_str().unwrap()], "report MISSING");

    let (a, b) = (dir.join("a.svg"), dir.join("b.svg"));
    run_ok(&["flamegraph", f, "-o", a.to_str().unwrap()]);
    run_ok(&["flamegraph", "-i", f, "-o", b.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&a).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("leaf"), "{svg}");
    assert_eq!(svg, std::fs::read_to_string(&b).unwrap());

    for args in [
        &["report", f, "-i", f][..],
        &["flamegraph", "-i", f, f, "-o", "-"],
    ] {
        let out = profiler(args);
        assert_fails(
            &out,
            2,
            &["'[FILE]'", "'--input <FILE>'"],
            &format!("{args:?}"),
        );
    }
    let out = profiler(&["flamegraph", "--diff", f, f, f]);
    assert_fails(
        &out,
        2,
        &["'--diff <BEFORE> <AFTER>'", "'[FILE]'"],
        "--diff with FILE",
    );
}

/// Every usage error names what is wrong or missing, on its one line, and exits 2.
#[test]
fn usage_errors_name_the_missing_arguments() {
    for (args, needles) in [
        // An interval goes to a directory or a store: neither is given.
        (
            &["record", "-a", "--interval", "10"][..],
            &["not provided", "--output <FILE|DIR>", "--export <URL>"][..],
        ),
        (
            &["record"],
            &["not provided", "--pid <PID", "--all-cpus", "CMD"],
        ),
        (
            &["record", "-a", "--export-header", "A=b"],
            &["not provided", "--export <URL>"],
        ),
        (
            &["symbolize", "-i", "x.pb.gz"],
            &["not provided", "--output <FILE>"],
        ),
        (&["stat", "-c"], &["'-c <SPEC>'"]),
        (
            &["record", "-a", "-p", "1"],
            &["'--all-cpus'", "'--pid <PID[,PID..]>'"],
        ),
    ] {
        let out = profiler(args);
        assert_fails(&out, 2, needles, &format!("{args:?}"));
        let line = one_error_line(&out);
        assert!(!line.contains("provided: (see"), "{args:?}: {line}");
    }
}
