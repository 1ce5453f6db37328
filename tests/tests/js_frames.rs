//! JavaScript frames in `record`'s stacks (the kernel's V8 walker): Node 20 and 18 run
//! `fixtures/node/chain.js` (main, interpreted, calls outer, which calls inner, a hot loop
//! that TurboFan optimizes and inlines into outer). The main thread's samples must carry the
//! chain inner > outer > main > the script's top level (or the part of it from where the
//! sample was: outer's or main's own loop), named with the script's path and each caller at
//! its call's marked line, in every tier (Sparkplug's too). Read from the pprof output by the
//! independent decoder.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
};

use profiler_tests::{samplers::*, *};

const SCRIPT: &str = include_str!("../fixtures/node/chain.js");

fn script_path() -> PathBuf {
    std::fs::canonicalize(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/node/chain.js"
    ))
    .expect("fixture")
}

/// `node` running `script` for `secs`, once it has said it is ready (its work is next).
fn start(node: &Path, script: &Path, secs: u32) -> KillOnDrop {
    start_with(node, &[], script, secs)
}

/// [`start`] with V8 flags.
fn start_with(node: &Path, flags: &[&str], script: &Path, secs: u32) -> KillOnDrop {
    KillOnDrop(spawn_ready(
        Command::new(node)
            .args(flags)
            .arg(script)
            .arg(secs.to_string()),
    ))
}

/// The 1-based line of the marker comment `// L_NAME` in chain.js.
fn line_of(marker: &str) -> i64 {
    SCRIPT
        .lines()
        .position(|l| l.contains(&format!("// {marker}")))
        .map(|i| i as i64 + 1)
        .expect("marker in chain.js")
}

/// The 1-based lines of `function name(` to its closing brace.
fn lines_of(name: &str) -> std::ops::RangeInclusive<i64> {
    let lines: Vec<&str> = SCRIPT.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.starts_with(&format!("function {name}(")))
        .expect("function in chain.js");
    let last = first
        + lines[first..]
            .iter()
            .position(|l| *l == "}")
            .expect("its end");
    first as i64 + 1..=last as i64 + 1
}

/// A sample (see [`StackSample`]).
type Sample = StackSample;

fn samples(pprof: &Path) -> Vec<Sample> {
    stack_samples(pprof)
}

/// The main thread's samples running JavaScript (all, with the exact chain, with inner
/// innermost, with every caller at its marked line), those in node's native code alone (its
/// start: OpenSSL's certificates, the bootstrap's compilation), and one sample that missed.
struct Tally {
    all: u64,
    native: u64,
    /// Samples whose stack is the sampled address alone (not walked: see
    /// [`js_chain_in_a_started_command`]).
    unwalked: u64,
    exact: u64,
    inner: u64,
    marked_lines: u64,
    /// Of `exact`, those whose innermost frame has no line (in a builtin it called).
    lineless: u64,
    miss: Option<String>,
}

/// Tallies thread `tid`'s samples against the chain.
fn tally(samples: &[Sample], tid: u64) -> Tally {
    let script = script_path();
    let script = script.to_str().unwrap();
    // "(anonymous)": the module's top-level code, which calls main.
    let chain = ["inner", "outer", "main", "(anonymous)"];
    let marked: HashMap<&str, i64> = [
        ("inner", line_of("L_INNER")),
        ("outer", line_of("L_OUTER")),
        ("main", line_of("L_MAIN")),
        ("(anonymous)", line_of("L_TOP")),
    ]
    .into();
    let mut t = Tally {
        all: 0,
        native: 0,
        unwalked: 0,
        exact: 0,
        inner: 0,
        marked_lines: 0,
        lineless: 0,
        miss: None,
    };
    for s in samples.iter().filter(|s| s.tid == tid) {
        if s.frames.len() == 1 && !s.frames[0].3.is_empty() {
            t.unwalked += s.n;
            continue;
        }
        // Running JS: a runtime-named frame (no mapping), V8's builtins or JIT code (a
        // failed walk leaves those).
        let in_js = s.frames.iter().any(|f| {
            f.3.is_empty()
                || f.0.starts_with("Builtins_")
                || f.0.contains("[anon")
                || f.3.contains("[anon")
        });
        if !in_js {
            t.native += s.n;
            continue;
        }
        t.all += s.n;
        // The script's frames, innermost first (named by the runtime: no mapping).
        let js: Vec<&(String, String, i64, String)> = s
            .frames
            .iter()
            .filter(|f| f.3.is_empty() && f.1 == script)
            .collect();
        let names: Vec<&str> = js.iter().map(|f| f.0.as_str()).collect();
        let ok_names = !names.is_empty() && chain.ends_with(&names);
        // Each frame on a line of its function; the top level at its call of main. (Callers
        // at their calls' lines, in every tier, are counted as `marked_lines`.) The innermost
        // may have none: stopped in a builtin it called without a frame, whose call's
        // position is not known (Sparkplug code calls one for most bytecodes).
        let ok_lines = ok_names
            && js.iter().enumerate().all(|(i, f)| match f.0.as_str() {
                "(anonymous)" => f.2 == marked["(anonymous)"],
                _ if i == 0 && f.2 == 0 => true,
                name => lines_of(name).contains(&f.2),
            });
        if ok_names && ok_lines {
            t.exact += s.n;
            if names[0] == "inner" {
                t.inner += s.n;
            }
            if js.iter().skip(1).all(|f| f.2 == marked[f.0.as_str()]) {
                t.marked_lines += s.n;
            }
            if js[0].2 == 0 {
                t.lineless += s.n;
            }
        } else if t.miss.is_none() {
            t.miss = Some(describe(&s.frames));
        }
    }
    t
}

fn check(what: &str, t: &Tally) {
    eprintln!(
        "{what}: {}/{} main-thread samples in JS with the exact chain ({} with inner \
         innermost, {} with the callers at their marked lines, {} with the innermost in a builtin \
         it called: no line); {} in node's native code alone; {} not walked",
        t.exact, t.all, t.inner, t.marked_lines, t.lineless, t.native, t.unwalked
    );
    assert!(t.all >= 200, "{what}: only {} main-thread samples", t.all);
    assert!(
        t.exact * 100 >= t.all * 95,
        "{what}: {}/{} main-thread samples carry the exact chain; e.g. {}",
        t.exact,
        t.all,
        t.miss.as_deref().unwrap_or("")
    );
    // Every caller at its call's line: interpreted frames by their bytecode offset,
    // Sparkplug's by the bytecode their return address is in, optimized ones by their
    // code's source positions.
    assert!(
        t.marked_lines * 100 >= t.all * 95,
        "{what}: {}/{} with every caller at its call's line",
        t.marked_lines,
        t.all
    );
    // inner is where the time goes.
    assert!(
        t.inner * 100 >= t.all * 80,
        "{what}: {}/{} with inner innermost",
        t.inner,
        t.all
    );
}

/// `record -p` of a running node, and `record -a` beside it: the main thread's samples carry
/// the chain (inner optimized and inlined into outer, main interpreted), and -p's are all JS.
#[test]
fn js_chain_with_p_and_a() {
    let _serial = serial();
    let dir = scratch("js_frames");
    for (major, node) in nodes() {
        let js = start(&node, &script_path(), 60);
        let pid = js.0.id();
        let pprof = dir.join(format!("{major}-p.pb.gz"));
        record_pid(pid, 3, &pprof);
        let what = format!("Node {major} record -p");
        let t = tally(&samples(&pprof), u64::from(pid));
        check(&what, &t);
        assert_eq!(t.unwalked, 0, "{what}: samples not walked");
        assert!(
            t.native * 100 <= (t.all + t.native) * 5,
            "{what}: {} native",
            t.native
        );
        // System-wide: the intervals after the first are compared.
        let later = record_system_wide(&dir.join(format!("{major}-a")), &[]);
        check(
            &format!("Node {major} record -a"),
            &tally(&later, u64::from(pid)),
        );
    }
}

/// A function entered once whose hot loop V8 optimizes by on-stack replacement: that code
/// is not the function's (V8 keeps it in the function's feedback vector), yet its frames
/// carry the loop's lines and the function TurboFan inlined there (`mix`), as frames in code
/// the function holds do. Node 18's V8 (10.2) keeps OSR code elsewhere: printed, not checked
/// (its frames name `hot` at its first line, docs/javascript.md).
#[test]
fn on_stack_replaced_code_has_its_lines_and_inlined_frames() {
    let _serial = serial();
    let dir = scratch("js_frames_osr");
    const OSR: &str = include_str!("../fixtures/node/osr.js");
    let line = |marker: &str| {
        OSR.lines()
            .position(|l| l.contains(&format!("// {marker}")))
            .map(|i| i as i64 + 1)
            .expect("marker in osr.js")
    };
    let loop_lines = line("L_LOOP_FIRST")..=line("L_LOOP_LAST");
    let (call, mix_line) = (line("L_CALL"), line("L_MIX"));
    let script =
        std::fs::canonicalize(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/node/osr.js"))
            .expect("fixture");
    for (major, node) in nodes() {
        let js = start(&node, &script, 30);
        let pid = js.0.id();
        let pprof = dir.join(format!("{major}.pb.gz"));
        record_pid(pid, 3, &pprof);
        let (mut hot, mut in_loop, mut inlined, mut with_mix) = (0, 0, 0, 0);
        for s in samples(&pprof).iter().filter(|s| s.tid == u64::from(pid)) {
            let js: Vec<_> = s.frames.iter().filter(|f| f.3.is_empty()).collect();
            let Some(i) = js.iter().position(|f| f.0 == "hot") else {
                continue;
            };
            hot += s.n;
            if loop_lines.contains(&js[i].2) {
                in_loop += s.n;
            }
            if js.iter().any(|f| f.0 == "mix") {
                with_mix += s.n;
            }
            if i == 1 && js[0].0 == "mix" && js[0].2 == mix_line && js[1].2 == call {
                inlined += s.n;
            }
        }
        let what = format!("Node {major}");
        eprintln!(
            "{what}: {hot} samples in hot, {in_loop} at its loop's lines, {inlined} in mix \
             inlined at the call (of {with_mix} with a mix frame)"
        );
        if major == "18" {
            continue;
        }
        assert!(hot >= 500, "{what}: only {hot} samples in hot");
        assert!(
            in_loop * 100 >= hot * 95,
            "{what}: {in_loop}/{hot} samples of hot at its loop's lines"
        );
        // How many land in mix's few inlined instructions is the compiled loop's doing (23 to
        // 453 of ~1497 over runs of 20.11.1): some must, each at mix's line under hot's call.
        assert!(
            inlined >= 10 && inlined * 100 >= with_mix * 99,
            "{what}: {inlined}/{hot} samples in mix inlined at hot's call, of {with_mix} with \
             a mix frame"
        );
    }
}

/// A node writing a perf map (`--perf-basic-prof`): the map's names are used, as the user
/// asked for them, the profiler says so in one line, and no frame comes from the V8 walker.
#[test]
fn a_perf_map_wins() {
    let _serial = serial();
    let dir = scratch("js_frames_perfmap");
    let Some((major, node)) = nodes().into_iter().next() else {
        return;
    };
    // V8 writes its isolate log into the working directory: keep it in the scratch one.
    let js = KillOnDrop(spawn_ready(
        Command::new(&node)
            .current_dir(&dir)
            .arg("--perf-basic-prof")
            .arg(script_path())
            .arg("30"),
    ));
    let pid = js.0.id();
    let main = record_beside_perf_map(
        &format!("Node {major} perf map"),
        pid,
        u64::from(pid),
        &dir.join("perfmap.pb.gz"),
        |f| ["inner", "outer"].iter().any(|n| f.contains(n)),
    );
    drop(js);
    let script = script_path();
    assert!(
        main.iter()
            .all(|s| s.frames.iter().all(|f| Path::new(&f.1) != script)),
        "a frame named by the V8 walker beside the perf map"
    );
}

/// Each tier on its own, V8 held to it by its flags: all interpreted (Ignition), Sparkplug
/// from the first call, Maglev as the top tier (Node 20; 18's V8 has none in its release
/// builds), and the default (TurboFan): `record -p`'s main-thread samples carry the chain in
/// each.
#[test]
fn js_chain_in_every_tier() {
    let _serial = serial();
    let dir = scratch("js_tiers");
    for (major, node) in nodes() {
        // Node 18's V8 (10.2) has no --max-opt.
        let tiers: Vec<(&str, &[&str])> = if major == "18" {
            vec![
                ("ignition", &["--no-opt", "--no-sparkplug"]),
                ("sparkplug", &["--no-opt", "--always-sparkplug"]),
                ("turbofan", &[]),
            ]
        } else {
            vec![
                ("ignition", &["--max-opt=0"]),
                ("sparkplug", &["--max-opt=1", "--always-sparkplug"]),
                ("maglev", &["--maglev", "--max-opt=2"]),
                ("turbofan", &[]),
            ]
        };
        for (tier, flags) in tiers {
            let js = start_with(&node, flags, &script_path(), 60);
            let pid = js.0.id();
            let pprof = dir.join(format!("{major}-{tier}.pb.gz"));
            record_pid(pid, 2, &pprof);
            drop(js);
            check(
                &format!("Node {major} {tier} (node {})", flags.join(" ")),
                &tally(&samples(&pprof), u64::from(pid)),
            );
        }
    }
}

/// `record -- node chain.js`: node's own start is in the main thread's samples too. Its
/// native part (no JS frame, builtin or JIT code) is counted apart; its JS part (the
/// bootstrap, walked from stack copies until the profiler has node's tables: JS frames are
/// found in copies too) counts against the chain, over a run long enough to keep it small.
/// Until node's tables are loaded (a debug build of the profiler takes most of a second for
/// node's 100 MB) copies are limited to a share of the ring per 100 ms; samples past it keep
/// their sampled address alone. Those are counted apart (at most a fifth of the run).
#[test]
fn js_chain_in_a_started_command() {
    let _serial = serial();
    let dir = scratch("js_frames_cmd");
    for (major, node) in nodes() {
        let pprof = dir.join(format!("{major}-cmd.pb.gz"));
        let script = script_path();
        record_command(
            &["-F", "199"],
            &pprof,
            &[node.to_str().unwrap(), script.to_str().unwrap(), "6"],
        );
        let ss = samples(&pprof);
        // The main thread: the one with the most samples (node's others mostly wait).
        let main = busiest_thread(&ss, |s| Some(s.n as i64));
        let t = tally(&ss, main);
        check(&format!("Node {major} record -- node"), &t);
        assert!(
            t.unwalked * 5 <= t.all + t.native + t.unwalked,
            "Node {major}: {} not walked",
            t.unwalked
        );
    }
}

/// Off-CPU time carries the same frames: `fixtures/node/wait.js` naps 100 times 20 ms in
/// `Atomics.wait` under nap > outer > the top level, recorded as a command with `--off-cpu`
/// (its waits named while node lives): at least 1.9 s asleep, 95 % of it under that chain
/// at the marked lines.
#[test]
fn js_frames_off_cpu() {
    let _serial = serial();
    let dir = scratch("js_frames_offcpu");
    let script = std::fs::canonicalize(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/node/wait.js"
    ))
    .expect("fixture");
    let source = std::fs::read_to_string(&script).expect("wait.js");
    let line = |marker: &str| {
        source
            .lines()
            .position(|l| l.contains(&format!("// {marker}")))
            .map(|i| i as i64 + 1)
            .expect("marker in wait.js")
    };
    let chain = [
        ("(anonymous)", line("L_TOP")),
        ("outer", line("L_OUTER")),
        ("nap", line("L_NAP")),
    ];
    let path = script.to_str().unwrap();
    // By default `outer` and the top level may run interpreted or in Sparkplug code (which
    // keeps no bytecode offset in its frame), as V8's batch compilation falls; with
    // --always-sparkplug both always do.
    let runs = nodes().into_iter().flat_map(|(v, node)| {
        [
            (v.clone(), node.clone(), None),
            (v, node, Some("--always-sparkplug")),
        ]
    });
    for (version, node, flag) in runs {
        let major = format!("{version} {}", flag.unwrap_or(""));
        let pprof = dir.join(format!("{version}{}.pb.gz", flag.unwrap_or("")));
        let mut command = vec![node.to_str().unwrap()];
        command.extend(flag);
        command.extend([path, "100"]);
        record_command(&["--off-cpu"], &pprof, &command);
        let (mut all, mut exact, mut miss) = (0, 0, None);
        for s in stack_samples(&pprof) {
            if s.event != "off-cpu" || !s.frames.iter().any(|f| f.0.contains("AtomicsWait")) {
                continue;
            }
            all += s.value;
            // The script's frames, outermost first.
            let js: Vec<(&str, i64)> = s
                .frames
                .iter()
                .rev()
                .filter(|f| f.3.is_empty() && f.1 == path)
                .map(|f| (f.0.as_str(), f.2))
                .collect();
            if js == chain {
                exact += s.value;
            } else if miss.is_none() {
                miss = Some(describe(&s.frames));
            }
        }
        eprintln!(
            "Node {major} --off-cpu: {:.3} of {:.3} s in Atomics.wait under the exact chain",
            exact as f64 / 1e9,
            all as f64 / 1e9
        );
        assert!(all >= 1_900_000_000, "Node {major}: only {all} ns asleep");
        assert!(
            exact * 100 >= all * 95,
            "Node {major}: {exact} of {all} ns under the chain; e.g. {}",
            miss.unwrap_or_default()
        );
    }
}

/// Against `node --cpu-prof` (V8's own sampler) on Node's library code (util.inspect, URL
/// parsing, regular expressions, JSON, sort with a JS comparator), both sampling one run of
/// `fixtures/node/library.js`: every function the reference gives at least 8 % of the main
/// thread's self time is within 6 points in ours.
#[test]
fn js_functions_match_node_cpu_prof_on_library_code() {
    let _serial = serial();
    let dir = scratch("js_cpu_prof");
    let script = std::fs::canonicalize(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/node/library.js"
    ))
    .expect("fixture");
    for (major, node) in nodes() {
        let prof_dir = dir.join(&major);
        let pprof = dir.join(format!("{major}-ours.pb.gz"));
        let prof = node_cpu_prof(&node, &[], &script, 6, &prof_dir, &pprof);
        let reference = cpu_prof_shares(&prof);
        let all = samples(&pprof);
        let (ours, none) = js_shares(&all, js_main_thread(&all));
        let mut rows: Vec<_> = reference.iter().collect();
        rows.sort_by(|a, b| b.1.total_cmp(a.1));
        let mut bad = Vec::new();
        for &(key, &r) in rows.iter().take(12) {
            let (function, file) = key;
            let o = ours.get(key).copied().unwrap_or(0.0);
            eprintln!(
                "Node {major}: {r:5.1} % node --cpu-prof, {o:5.1} % ours: {function} ({file})"
            );
            if r >= 8.0 && (o - r).abs() > 6.0 {
                bad.push(format!("{function} ({file}): {r:.1} % vs {o:.1} %"));
            }
        }
        eprintln!("Node {major}: {none:.1} % of ours in native code alone");
        assert!(
            bad.is_empty(),
            "Node {major}: off by more than 6 points: {bad:?}"
        );
        assert!(
            none <= 10.0,
            "Node {major}: {none:.1} % of the main thread's samples without a JS frame"
        );
    }
}
