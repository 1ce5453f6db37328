//! libcpc for C programs: the C test of every exported function, the man page's Examples 1
//! and 2, and the article's LD_PRELOAD profiler, each compiled with `cc` against the built
//! libcpc.so and run with exact expectations.

use std::process::{Command, Output};

use profiler_tests::*;

fn run(cmd: &mut Command) -> (String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("running a C program");
    let (out, err) = (
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    );
    assert!(status.success(), "{status}\nstdout:\n{out}\nstderr:\n{err}");
    (out, err)
}

#[test]
fn c_test_of_every_function_and_errno_case_passes() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("capi-test");
    let exe = dir.join("capi_test");
    compile_against_libcpc("tests/capi_test.c", &exe, &[]);
    let (out, err) = run(&mut Command::new(&exe));
    let summary = out.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("capi_test: ") && summary.ends_with(" checks, 0 failed"),
        "{out}"
    );
    let checks: u32 = summary["capi_test: ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("check count");
    assert!(checks >= 130, "{checks} checks ran: {out}");
    // The default error handler, restored with cpc_seterrhndlr(cpc, NULL).
    assert_eq!(
        err.trim(),
        "libcpc: cpc_set_add_request: Unknown event: unknown event 'default-handler-event'",
    );
}

/// The first overflow arrives while the bind is still returning (a 20 us first period):
/// the handler must find the set bound and restart it, in every one of 200 binds.
#[test]
fn an_overflow_during_the_bind_restarts_the_set_every_time() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("capi-bind-race");
    let exe = dir.join("bind_race");
    compile_against_libcpc("tests/bind_race.c", &exe, &[]);
    let (out, _) = run(&mut Command::new(&exe));
    let summary = out.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("bind_race: 200 binds, 0 failed, handler "),
        "{out}"
    );
    eprintln!("{summary}");
}

// Examples 1 and 2 as the man page runs them are the scenarios `libcpc-example1` and
// `libcpc-overflow` (profiler-scenarios), run here by tests/scenarios.rs and in every kernel
// guest; what follows is what only the host checks.

#[test]
fn example_1_takes_its_events_from_the_environment() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("capi-example1");
    let exe = dir.join("example1");
    compile_against_libcpc("examples/example1.c", &exe, &[]);
    // EVENT0/EVENT1 choose the events: task-clock twice gives two non-zero columns and
    // an unknown name is refused with libcpc's message.
    let (out, _) = run(Command::new(&exe)
        .env("EVENT0", "task-clock")
        .env("EVENT1", "task-clock"));
    assert!(
        out.lines().count() == 20 && out.lines().all(|l| !l.contains(" 0 ")),
        "{out}"
    );
    let o = Command::new(&exe).env("EVENT0", "EC_ref").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err.starts_with("libcpc: cpc_set_add_request: Unknown event: ")
            && err.contains("example1: could not add first request: Invalid argument"),
        "{err}"
    );
}

#[test]
fn dprof_preloaded_into_touch_finds_the_page_faults_in_run() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("capi-dprof");
    let so = dir.join("dprof.so");
    compile_against_libcpc("examples/dprof.c", &so, &["-shared", "-fPIC"]);
    // touch: one thread touching 10000 fresh pages in run(); a signal every 100 faults.
    let (_, err) = run(Command::new(fixture("touch"))
        .args(["10000", "1"])
        .env("LD_PRELOAD", &so));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"dprof: page-faults, a signal every 100 events"),
        "{err}"
    );
    assert!(
        lines.contains(&"dprof: 100 overflows, 0 restart failures"),
        "{err}"
    );
    let top = format!("dprof:    100 run ({})", fixture("touch").display());
    assert_eq!(lines.get(2), Some(&top.as_str()), "{err}");
}

#[test]
fn an_overflow_handler_reads_the_other_requests_values_at_the_overflow() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("capi-overflow-set");
    let exe = dir.join("overflow_set");
    compile_against_libcpc("tests/overflow_set.c", &exe, &[]);
    let (out, _) = run(&mut Command::new(&exe));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.last(), Some(&"10 overflows"), "{out}");
    assert_eq!(lines.len(), 11, "{out}");
    for l in &lines[..10] {
        let minor: u64 = l
            .split("minor=")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{l}"));
        // The whole set froze at the overflow: the plain request stopped with it.
        assert!((999..=1000).contains(&minor), "{out}");
        assert!(l.starts_with("page-faults=0x0 "), "{out}");
    }
}
