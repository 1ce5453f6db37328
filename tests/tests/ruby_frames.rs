//! Ruby frames in `record`'s stacks (the kernel's CRuby walker on the runtime seam):
//! Debian's ruby3.1 runs `fixtures/ruby/chain.rb`, whose main thread spins in
//! `<main> > Object#main > Chain#outer > Chain#middle > Array#each > block in Chain#middle >
//! Chain.leaf > Integer#times > block in Chain.leaf` and whose second thread spins in
//! `block in Object#main > Object#worker > Object#spin`. Each thread's samples must carry its
//! chain, each Ruby frame at its `# at:` line, C methods (`Array#each`, `Integer#times`) in
//! their place. Read from the pprof output by the independent decoder.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use profiler_tests::{samplers::*, *};

const SCRIPT: &str = include_str!("../fixtures/ruby/chain.rb");
const RUBY: &str = "/usr/bin/ruby3.1";

fn script_path() -> PathBuf {
    std::fs::canonicalize(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/ruby/chain.rb"
    ))
    .expect("fixture")
}

/// The 1-based line marked `# at: what` in chain.rb.
fn at(what: &str) -> i64 {
    SCRIPT
        .lines()
        .position(|l| l.ends_with(&format!("# at: {what}")))
        .map(|i| i as i64 + 1)
        .unwrap_or_else(|| panic!("no `# at: {what}` in chain.rb"))
}

/// The main thread's Ruby frames from the outermost, with their lines (0: a C method).
fn main_chain() -> Vec<(&'static str, i64)> {
    vec![
        ("<main>", at("<main>")),
        ("Object#main", at("main")),
        ("Chain#outer", at("outer")),
        ("Chain#middle", at("middle")),
        ("Array#each", 0),
        ("block in Chain#middle", at("block in middle")),
        ("Chain.leaf", at("leaf")),
        ("Integer#times", 0),
        ("block in Chain.leaf", at("leaf")),
    ]
}

/// The second thread's.
fn worker_chain() -> Vec<(&'static str, i64)> {
    vec![
        ("block in Object#main", at("thread")),
        ("Object#worker", at("worker")),
        ("Object#spin", at("spin")),
        // The C method spin's loop calls.
        ("Process.clock_gettime", 0),
    ]
}

/// A thread's samples that reached its innermost method (`leaf`), and those of them whose
/// Ruby frames are the chain exactly (from the outermost down to wherever the sample was,
/// at least `leaf`, each at its line), with one that was not.
struct Tally {
    leaf: u64,
    exact: u64,
    miss: Option<String>,
}

/// Tallies thread `tid`'s samples against `chain`; `leaf` is the frame a sample must reach
/// to count.
fn tally(samples: &[StackSample], tid: u64, chain: &[(&str, i64)], leaf: &str) -> Tally {
    let script = script_path();
    let script = script.to_str().unwrap();
    let mut t = Tally {
        leaf: 0,
        exact: 0,
        miss: None,
    };
    for s in samples.iter().filter(|s| s.tid == tid) {
        // Ruby frames: named by the runtime (no module), the script's or C methods'.
        let mut ruby: Vec<(&str, i64)> = s
            .frames
            .iter()
            .filter(|f| f.3.is_empty() && (f.1 == script || f.1.is_empty()))
            .map(|f| (f.0.as_str(), if f.1.is_empty() { 0 } else { f.2 }))
            .collect();
        ruby.reverse();
        if !ruby.iter().any(|(name, _)| *name == leaf) {
            continue;
        }
        t.leaf += s.n;
        if chain.starts_with(&ruby) {
            t.exact += s.n;
        } else if t.miss.is_none() {
            let stack: Vec<String> = s
                .frames
                .iter()
                .map(|f| format!("{} ({}:{}) [{}]", f.0, f.1, f.2, f.3))
                .collect();
            t.miss = Some(stack.join(" < "));
        }
    }
    t
}

/// At least 200 samples reached `leaf`, and 99 % of them carry the exact chain (issue 46).
/// A sample between a block frame's push and its `vm_exec` call (in `rb_yield`) has one
/// run of Ruby frames more than `rb_vm_exec` frames: the kernel drops that run, so it counts
/// as the caller's (`Integer#times`), not as a miss here.
fn check(what: &str, t: &Tally) {
    eprintln!(
        "{what}: {}/{} samples in the innermost method with the exact chain",
        t.exact, t.leaf
    );
    assert!(t.leaf >= 200, "{what}: only {} samples", t.leaf);
    assert!(
        t.exact * 100 >= t.leaf * 99,
        "{what}: {}/{} carry the exact chain; e.g. {}",
        t.exact,
        t.leaf,
        t.miss.as_deref().unwrap_or("")
    );
}

/// Whether Debian's ruby is here (under CI=true its absence is a failure).
fn ruby() -> bool {
    if !privileged() {
        return false;
    }
    let here = Path::new(RUBY).exists();
    assert!(
        here || std::env::var("CI").as_deref() != Ok("true"),
        "no {RUBY} under CI=true (cargo xtask test installs ruby3.1)"
    );
    if !here {
        eprintln!("SKIP: no {RUBY}");
    }
    here
}

/// Both threads' checks of one recording of process `pid`.
fn check_both(what: &str, samples: &[StackSample], pid: u32) {
    let main = tally(samples, u64::from(pid), &main_chain(), "Chain.leaf");
    check(&format!("{what}, main thread"), &main);
    // The worker thread: the busiest other thread of the process.
    let worker = samples
        .iter()
        .filter(|s| s.tid != u64::from(pid))
        .filter(|s| s.frames.iter().any(|f| f.0 == "Object#spin"))
        .map(|s| s.tid)
        .next()
        .unwrap_or_else(|| panic!("{what}: no sample of the worker thread in Object#spin"));
    let t = tally(samples, worker, &worker_chain(), "Object#spin");
    check(&format!("{what}, worker thread"), &t);
}

/// `record -- ruby3.1 chain.rb`: both threads' chains, from the start.
#[test]
fn ruby_chain_in_a_started_command() {
    if !ruby() {
        return;
    }
    let _serial = serial();
    let dir = scratch("ruby_frames");
    let out = dir.join("command.pb.gz");
    let script = script_path();
    record_command(&["-F", "499"], &out, &[RUBY, script.to_str().unwrap(), "4"]);
    let samples = stack_samples(&out);
    // The command is the process whose main thread runs Chain.leaf.
    let pid = samples
        .iter()
        .find(|s| s.frames.iter().any(|f| f.0 == "Chain.leaf"))
        .map(|s| s.tid)
        .expect("a sample in Chain.leaf");
    check_both("ruby3.1 as a command", &samples, pid as u32);
}

/// `record -p` of a running ruby, and `record -a` beside it.
#[test]
fn ruby_chain_with_p_and_a() {
    if !ruby() {
        return;
    }
    let _serial = serial();
    let dir = scratch("ruby_frames_p");
    let script = script_path();
    let rb = KillOnDrop(spawn_ready(Command::new(RUBY).arg(&script).arg("60")));
    let pid = rb.0.id();
    let out = dir.join("p.pb.gz");
    record_pid(pid, 3, &out);
    check_both("ruby3.1 record -p", &stack_samples(&out), pid);
    let later = record_system_wide(&dir.join("a"), &[]);
    check_both("ruby3.1 record -a", &later, pid);
}

/// Real standard-library work (CSV, ERB, Time, URI: `fixtures/ruby/stdlib_work.rb`) recorded
/// by the profiler and by rbspy, separately, at the same rate: at least 95 % of the
/// profiler's samples carry Ruby frames, and every method rbspy gives 10 % or more of its
/// samples (innermost Ruby method) has a share within 5 points of it in the profiler's.
#[test]
fn ruby_methods_match_rbspy_on_standard_library_work() {
    if !ruby() {
        return;
    }
    let _serial = serial();
    let spy = rbspy();
    let dir = scratch("ruby_vs_rbspy");
    let script = std::fs::canonicalize(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/ruby/stdlib_work.rb"
    ))
    .expect("fixture");
    let script = script.to_str().unwrap();
    let ours = dir.join("ours.folded");
    let out = profiler(&[
        "record",
        "-F",
        "199",
        "-q",
        "-o",
        ours.to_str().unwrap(),
        "--",
        RUBY,
        script,
        "6",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = dir.join("rbspy.txt");
    // -n: run the command as root, as ours does (rbspy drops to SUDO_UID otherwise).
    let out = Command::new(&spy)
        .args([
            "record",
            "-n",
            "--silent",
            "-r",
            "199",
            "-o",
            "collapsed",
            "-f",
        ])
        .arg(&theirs)
        .args(["--", RUBY, script, "6"])
        .output()
        .expect("rbspy");
    assert!(
        out.status.success(),
        "rbspy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ours, total, none) = ruby_innermost_shares(&read_folded(&ours));
    let (theirs, their_total) = rbspy_innermost_shares(&read_raw(&theirs));
    assert!(
        total >= 500 && their_total >= 500,
        "{total} and {their_total} samples"
    );
    eprintln!(
        "{:.1} % of {total} samples carry Ruby frames (rbspy: {their_total} samples)",
        100.0 * (total - none) as f64 / total as f64
    );
    assert!(
        none * 100 <= total * 5,
        "{none} of {total} samples have no Ruby frame"
    );
    check_big_shares(
        "ruby3.1",
        "rbspy",
        (&ours, total),
        (&theirs, their_total),
        |(method, file)| format!("{method} ({file})"),
    );
}
