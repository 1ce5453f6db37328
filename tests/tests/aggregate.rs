//! `record --aggregate` (samples counted in the kernel) keeps the stacks of the default
//! mode: user stacks walked with unwind tables, so code built without frame pointers has
//! its whole chain; a process whose tables are not in the kernel yet is walked in user
//! space from the ring as in the default mode; a command that ends before the run keeps its
//! names; every sample is counted once (in the kernel, or from the ring).

use std::process::Output;

use profiler_tests::*;

/// `record ARGS -F 999 --unwind-stats -o DIR/out.folded -- argv`: the folded stacks, the
/// summary's sample count and stderr.
fn record(name: &str, args: &[&str], argv: &[&str]) -> (Vec<(Vec<String>, u64)>, u64, String) {
    let dir = scratch(name);
    let folded = dir.join("out.folded");
    let mut all = vec!["record", "-F", "999", "--unwind-stats", "-o"];
    all.push(folded.to_str().unwrap());
    all.extend_from_slice(args);
    all.push("--");
    all.extend_from_slice(argv);
    let out: Output = profiler(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "record {args:?} failed: {stderr}");
    (read_folded(&folded), reported_samples(&stdout), stderr)
}

/// A figure of the `unwind-stats` line.
fn stat(stderr: &str, key: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("unwind-stats "))
        .and_then(|l| {
            l.split(' ')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in the unwind-stats line:\n{stderr}"))
}

/// Every sample is counted once: in the kernel's map, or from a ring record (none lost on
/// this light a run).
fn assert_exact_totals(what: &str, samples: u64, stderr: &str) {
    let (ring, aggregated) = (stat(stderr, "samples"), stat(stderr, "aggregated"));
    assert!(aggregated > 0, "{what}: nothing aggregated:\n{stderr}");
    assert_eq!(
        samples,
        aggregated + ring,
        "{what}: the profile's samples are not the kernel's {aggregated} aggregated and \
         {ring} ring records:\n{stderr}"
    );
}

/// (samples of `comm`, those whose user frames satisfy `good`, up to 5 others).
fn share(
    stacks: &[(Vec<String>, u64)],
    comm: &str,
    good: impl Fn(&[String]) -> bool,
) -> (u64, u64, Vec<String>) {
    let (mut all, mut ok) = (0, 0);
    let mut bad = Vec::new();
    for (user, n) in user_stacks(stacks, comm) {
        all += n;
        if good(&user) {
            ok += n;
        } else if bad.len() < 5 {
            bad.push(format!("{n}: {}", user.join(";")));
        }
    }
    (all, ok, bad)
}

fn assert_share(what: &str, (all, ok, bad): (u64, u64, Vec<String>), min: u64) {
    assert!(all >= min, "{what}: only {all} samples");
    assert!(
        ok * 100 >= all * 99,
        "{what}: {ok} of {all} samples; others:\n{}",
        bad.join("\n")
    );
}

/// The user frames of nofp's chain, outermost first.
const CHAIN: [&str; 4] = ["main", "outer", "middle", "leaf"];

fn reaches_main(user: &[String]) -> bool {
    user.iter().any(|f| f == "main")
}

fn whole_chain(user: &[String]) -> bool {
    user.len() >= CHAIN.len() && user[user.len() - CHAIN.len()..] == CHAIN
}

#[test]
fn aggregated_stacks_of_code_without_frame_pointers_are_the_default_modes() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let argv = [path("nofp"), "2".to_string()];
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let (ring, _, _) = record("aggregate-nofp-ring", &[], &argv);
    let (agg, samples, stderr) = record("aggregate-nofp", &["--aggregate"], &argv);
    assert_exact_totals("nofp", samples, &stderr);
    assert!(!stderr.contains("frame pointers"), "{stderr}");
    for (what, stacks) in [("ring", &ring), ("--aggregate", &agg)] {
        assert_share(
            &format!("{what}: nofp's samples reaching main"),
            share(stacks, "nofp", reaches_main),
            300,
        );
        let leaves: Vec<_> = user_stacks(stacks, "nofp")
            .into_iter()
            .filter(|(u, _)| u.last().is_some_and(|f| f == "leaf"))
            .map(|(u, n)| (std::iter::once("nofp".to_string()).chain(u).collect(), n))
            .collect();
        assert_share(
            &format!("{what}: nofp's leaf samples with main > outer > middle > leaf"),
            share(&leaves, "nofp", whole_chain),
            300,
        );
    }
    // The same hottest stack, whole: _start > ... > main > outer > middle > leaf.
    let hottest = |stacks: &[(Vec<String>, u64)]| {
        let mut mine = user_stacks(stacks, "nofp");
        mine.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        mine.first().map(|(u, _)| u.clone())
    };
    assert_eq!(hottest(&agg), hottest(&ring));
    assert!(hottest(&agg).is_some_and(|u| u[0] == "_start" && whole_chain(&u)));
}

#[test]
fn an_aggregated_command_that_ends_before_the_run_keeps_its_names() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    // spin (2 threads for 1 s) ends a second before the run; its process is new to the
    // kernel's tables, so its first samples come through the ring and are walked in user
    // space, the rest are counted in the kernel.
    // A second of two threads: 200 of its ~2000 samples are asked for, on a busy host too.
    let script = format!("{} 2 1; sleep 1", path("spin"));
    // The threads' stacks run through libc, whose table is built on the loader's worker at
    // the run's start: until it is, samples there are copied and walked in user space, not
    // guessed with frame pointers (which lost clone3 under start_thread).
    let (stacks, samples, stderr) =
        record("aggregate-short", &["--aggregate"], &["sh", "-c", &script]);
    assert_exact_totals("sh -c 'spin; sleep'", samples, &stderr);
    assert!(
        stat(&stderr, "samples") > 0,
        "spin's first samples (no tables yet) went through the ring:\n{stderr}"
    );
    // Every frame of its threads named, from clone3 down to run.
    let threads = |user: &[String]| {
        user.len() >= 3
            && user[..3] == ["clone3", "start_thread", "run"]
            && !user.iter().any(|f| f.contains("[unknown]"))
    };
    let (all, ok, bad) = share(&stacks, "spin", threads);
    // The main thread's few samples (the loader, thread creation) are named too.
    let named = share(&stacks, "spin", |u| {
        !u.is_empty() && !u.iter().any(|f| f.contains("[unknown]"))
    });
    assert_share("spin's samples with every frame named", named, 200);
    assert!(
        ok * 100 >= all * 95,
        "{ok} of spin's {all} samples in its threads' whole stacks; others:\n{}\n{stderr}",
        bad.join("\n")
    );
}

#[test]
fn aggregated_with_frame_pointers_says_so_at_the_start_and_the_end() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let (_, samples, stderr) = record(
        "aggregate-fp",
        &["--aggregate", "--call-graph", "fp"],
        &[&path("spin"), "1", "0.3"],
    );
    let note = "profiler: --aggregate walks user stacks with frame pointers (--call-graph fp): \
                code built without them loses its callers";
    assert_eq!(stderr.matches(note).count(), 2, "{stderr}");
    // Frame pointers alone: everything is counted in the kernel, nothing comes by the ring.
    assert_eq!(stat(&stderr, "samples"), 0, "{stderr}");
    assert_eq!(stat(&stderr, "aggregated"), samples, "{stderr}");
}
