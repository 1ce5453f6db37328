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
