//! The runtimes' own samplers, read for comparison with the profiler's runtime frames:
//! `node --cpu-prof`'s profile, JFR's execution samples, py-spy's raw output, and the same
//! shares (per innermost function) from our profiles. Shared by the frame tests and the
//! agreement checks (`tests/agreement.rs`).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
};

use crate::StackSample;

/// Self time per JS function (name, script's file name) in percent of the samples counted,
/// from `node --cpu-prof`'s profile: samples in V8's own code that has no script (builtins,
/// the regexp engine, JSON) are its caller's, as they are in ours; GC, idle and "program"
/// ticks are not counted (ours are under the JS that allocated, or not on the main thread).
pub fn cpu_prof_shares(path: &Path) -> HashMap<(String, String), f64> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("cpuprofile")).expect("json");
    let nodes: HashMap<u64, &serde_json::Value> = v["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| (n["id"].as_u64().expect("id"), n))
        .collect();
    let mut parent = HashMap::new();
    for (&id, n) in &nodes {
        for c in n["children"].as_array().into_iter().flatten() {
            parent.insert(c.as_u64().expect("child"), id);
        }
    }
    let skip = ["(garbage collector)", "(program)", "(idle)", "(root)"];
    let mut count: HashMap<(String, String), u64> = HashMap::new();
    let mut total = 0;
    for s in v["samples"].as_array().expect("samples") {
        let mut id = s.as_u64().expect("sample");
        let name = |id: u64| {
            nodes[&id]["callFrame"]["functionName"]
                .as_str()
                .unwrap_or("")
        };
        let url = |id: u64| nodes[&id]["callFrame"]["url"].as_str().unwrap_or("");
        if skip.contains(&name(id)) {
            continue;
        }
        while url(id).is_empty()
            && let Some(&p) = parent.get(&id)
        {
            id = p;
        }
        let function = match name(id) {
            "" => "(anonymous)",
            n => n,
        };
        let file = url(id).rsplit('/').next().unwrap_or("").to_string();
        *count.entry((function.to_string(), file)).or_default() += 1;
        total += 1;
    }
    assert!(total >= 500, "node --cpu-prof: {total} samples");
    count
        .into_iter()
        .map(|(k, n)| (k, n as f64 * 100.0 / total as f64))
        .collect()
}

/// The same from our profile, for thread `tid`: each sample's innermost JS frame with a
/// script (or unnamed JIT code at the leaf); also the share of samples with none (native
/// code alone), in percent.
pub fn js_shares(samples: &[StackSample], tid: u64) -> (HashMap<(String, String), f64>, f64) {
    js_shares_by(samples, tid, false)
}

/// [`js_shares`] as V8's sampler credits a builtin called without a frame: a frame that
/// stopped in code outside its function has no line in ours (in a run where V8 keeps its
/// lines: `--cpu-prof`), and V8 takes its PC for the frame's and drops the frame, so such
/// a sample goes to the JS frame after it (docs/javascript.md).
pub fn js_shares_as_v8(samples: &[StackSample], tid: u64) -> (HashMap<(String, String), f64>, f64) {
    js_shares_by(samples, tid, true)
}

fn js_shares_by(
    samples: &[StackSample],
    tid: u64,
    lineless_to_caller: bool,
) -> (HashMap<(String, String), f64>, f64) {
    let mut count: HashMap<(String, String), u64> = HashMap::new();
    let (mut total, mut none) = (0, 0);
    for s in samples.iter().filter(|s| s.tid == tid) {
        // A leaf in JIT code that is no JS frame (a function's first or last instructions,
        // its frame not built or already gone) is some function's we cannot name: not the
        // caller's (V8's sampler finds it by its code map).
        if s.frames
            .first()
            .is_some_and(|f| f.3.contains("[anon") || f.0.starts_with("[anon"))
        {
            *count
                .entry(("(unnamed JIT code)".into(), String::new()))
                .or_default() += s.n;
            total += s.n;
            continue;
        }
        let mut js = s
            .frames
            .iter()
            .filter(|f| f.3.is_empty() && !f.1.is_empty());
        let mut innermost = js.next();
        if lineless_to_caller && innermost.is_some_and(|f| f.2 == 0) {
            innermost = js.next().or(innermost);
        }
        match innermost {
            Some(f) => {
                let file = f.1.rsplit('/').next().unwrap_or("").to_string();
                *count.entry((f.0.clone(), file)).or_default() += s.n;
                total += s.n;
            }
            None => none += s.n,
        }
    }
    assert!(total >= 500, "profiler: {total} samples with JS frames");
    let shares = count
        .into_iter()
        .map(|(k, n)| (k, n as f64 * 100.0 / total as f64))
        .collect();
    (shares, none as f64 * 100.0 / (total + none) as f64)
}

/// Each Java method's share of the main thread's samples stopped in Java code, by the
/// innermost frame (inlined frames count as their own methods, as JFR reports them).
pub fn java_top_methods(samples: &[StackSample], tid: u64) -> (u64, HashMap<String, u64>) {
    let mut total = 0;
    let mut by = HashMap::<String, u64>::new();
    for s in samples.iter().filter(|s| s.tid == tid) {
        // Innermost first; the kernel's frames (a fault, an interrupt) skipped. Only samples
        // stopped in Java code, as JFR's: it drops a thread in a VM stub (arraycopy, which
        // TimSort.binarySort calls for every insertion: 6.3 points of binarySort in one CI
        // run) or in the VM, whose stack it cannot walk.
        let user = s.frames.iter().find(|f| f.3 != "[kernel.kallsyms]");
        if let Some(f) = user.filter(|f| f.3.is_empty()) {
            total += s.n;
            *by.entry(f.0.clone()).or_default() += s.n;
        }
    }
    (total, by)
}

/// The same from JFR's `jdk.ExecutionSample` events of the thread named `main` (`jfr print
/// --json`): each sample's top frame, `class.method`.
pub fn jfr_top_methods(jfr: &Path, home: &str) -> (u64, HashMap<String, u64>) {
    let out = Command::new(Path::new(home).join("bin/jfr"))
        .args(["print", "--json", "--events", "jdk.ExecutionSample"])
        .arg(jfr)
        .output()
        .expect("running jfr");
    assert!(
        out.status.success(),
        "jfr print: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("jfr's JSON");
    let mut total = 0;
    let mut by = HashMap::<String, u64>::new();
    for e in v["recording"]["events"].as_array().expect("events") {
        let values = &e["values"];
        if values["sampledThread"]["javaName"] != "main" {
            continue;
        }
        let Some(top) = values["stackTrace"]["frames"].get(0) else {
            continue;
        };
        // Internal form (`java/util/TimSort`), dotted as JFR's text output prints it.
        let class = top["method"]["type"]["name"]
            .as_str()
            .unwrap_or("?")
            .replace('/', ".");
        let name = top["method"]["name"].as_str().unwrap_or("?");
        total += 1;
        *by.entry(format!("{class}.{name}")).or_default() += 1;
    }
    (total, by)
}

/// `target/tools-venv/bin/py-spy`, which `cargo xtask test` installs (xtask/src/venv.rs).
pub fn py_spy() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>
    let spy = exe
        .ancestors()
        .nth(3)
        .expect("target dir")
        .join("tools-venv/bin/py-spy");
    assert!(
        spy.exists(),
        "{} is missing: run `cargo xtask test` (it installs py-spy), or python3 -m venv \
         target/tools-venv && target/tools-venv/bin/pip install py-spy==0.4.3",
        spy.display()
    );
    spy
}

/// A Python frame of a folded line (`name (file:line)`), by its name.
pub fn python_name(frame: &str) -> Option<&str> {
    let (name, place) = frame.rsplit_once(" (")?;
    place.ends_with(')').then_some(name)
}

/// Samples per innermost Python function, and the samples with no Python frame.
pub fn innermost_shares(lines: &[(Vec<String>, u64)]) -> (HashMap<String, u64>, u64, u64) {
    let (mut by, mut total, mut none) = (HashMap::new(), 0, 0);
    for (frames, n) in lines {
        total += n;
        match frames.iter().rev().find_map(|f| python_name(f)) {
            Some(name) => *by.entry(name.to_string()).or_default() += n,
            None => none += n,
        }
    }
    (by, total, none)
}

/// py-spy's raw output: folded lines, outermost first, no header.
pub fn read_raw(path: &Path) -> Vec<(Vec<String>, u64)> {
    std::fs::read_to_string(path)
        .expect("py-spy's output")
        .lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((
                stack.split(';').map(str::to_string).collect(),
                n.parse().ok()?,
            ))
        })
        .collect()
}

/// `node FLAGS --cpu-prof` running `script SECS` to its end, its profile written into `dir`,
/// recorded by ours at 499 Hz into `pprof` the whole time: the `.cpuprofile`'s path. Both
/// samplers see one run, as V8's compilations differ from run to run (beside busy loops,
/// `querystring.parse` took 7.2 to 11.6 % of V8's own samples over 14 runs of
/// `services.js`; ours on the same runs within 2.4 points of it).
pub fn node_cpu_prof(
    node: &Path,
    flags: &[&str],
    script: &Path,
    secs: u32,
    dir: &Path,
    pprof: &Path,
) -> PathBuf {
    let mut command = vec![node.to_str().expect("node's path")];
    command.extend(flags);
    command.extend(["--cpu-prof", "--cpu-prof-dir", dir.to_str().expect("dir")]);
    let secs = secs.to_string();
    command.extend([script.to_str().expect("script"), &secs]);
    crate::record_command(&["-F", "499"], pprof, &command);
    std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "cpuprofile"))
        .expect("a .cpuprofile")
}

/// The thread with the most samples in JS code: the main thread of the one node recorded
/// (its helper threads compile and collect, outside JS).
pub fn js_main_thread(samples: &[StackSample]) -> u64 {
    let mut by: HashMap<u64, u64> = HashMap::new();
    for s in samples {
        if s.frames.iter().any(|f| f.3.is_empty() && !f.1.is_empty()) {
            *by.entry(s.tid).or_default() += s.n;
        }
    }
    by.into_iter()
        .max_by_key(|&(_, n)| n)
        .map(|(tid, _)| tid)
        .expect("samples with JS frames")
}

/// `target/tools-rbspy/bin/rbspy`, which `cargo xtask test` installs (xtask/src/tools.rs).
pub fn rbspy() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>
    let spy = exe
        .ancestors()
        .nth(3)
        .expect("target dir")
        .join("tools-rbspy/bin/rbspy");
    assert!(
        spy.exists(),
        "{} is missing: run `cargo xtask test` (it installs rbspy), or cargo install rbspy \
         --version 0.55.0 --locked --root target/tools-rbspy",
        spy.display()
    );
    spy
}

/// A Ruby method as both samplers can name it: rbspy (0.55, on 3.1) gives a frame's base
/// label (`parse`, `block in parse`), ours the full label (`CSV::Parser#parse`), so the
/// class path is dropped; with the file's name, or `(eval)` for code from a string (ours
/// says what Ruby says, `(erb)`; rbspy `unknown`).
pub fn ruby_method_key(label: &str, file: &str) -> (String, String) {
    let (block, method) = match label.find(" in ") {
        Some(i) if label.starts_with("block ") => label.split_at(i + 4),
        _ => ("", label),
    };
    let class_path = method
        .char_indices()
        .take_while(|&(i, c)| {
            c.is_ascii_alphanumeric() || c == '_' || c == ':' || (i == 0 && c.is_uppercase())
        })
        .last()
        .map_or(0, |(i, c)| i + c.len_utf8());
    let method = match method[class_path..].strip_prefix(['#', '.']) {
        Some(rest) if class_path > 0 && method.starts_with(|c: char| c.is_ascii_uppercase()) => {
            rest
        }
        _ => method,
    };
    let base = file.rsplit('/').next().unwrap_or(file);
    let file = if base.ends_with(".rb") {
        base
    } else {
        "(eval)"
    };
    (format!("{block}{method}"), file.to_string())
}

/// Samples per innermost Ruby method (a frame with a file: C methods are their caller's,
/// as rbspy counts them) of our folded stacks, the total, and the samples with no Ruby frame
/// at all (C methods included).
pub fn ruby_innermost_shares(
    lines: &[(Vec<String>, u64)],
) -> (HashMap<(String, String), u64>, u64, u64) {
    let (mut by, mut total, mut none) = (HashMap::new(), 0, 0);
    for (frames, n) in lines {
        total += n;
        let method = frames.iter().rev().find_map(|f| {
            let (label, place) = f.rsplit_once(" (")?;
            let (file, line) = place.strip_suffix(')')?.rsplit_once(':')?;
            line.parse::<u32>().ok()?;
            Some(ruby_method_key(label, file))
        });
        match method {
            Some(key) => *by.entry(key).or_default() += n,
            None if frames
                .iter()
                .any(|f| f.contains('#') || f == "[unnamed Ruby]") =>
            {
                // Only C methods (`Kernel#require`) or frames not named: Ruby's, no method.
                *by.entry(("(C)".into(), String::new())).or_default() += n
            }
            None => none += n,
        }
    }
    (by, total, none)
}

/// Samples per innermost Ruby method of rbspy's collapsed output (`label - path:line`
/// frames, C functions `(unknown) [c function] - (unknown)`), and the total.
pub fn rbspy_innermost_shares(
    lines: &[(Vec<String>, u64)],
) -> (HashMap<(String, String), u64>, u64) {
    let (mut by, mut total) = (HashMap::new(), 0);
    for (frames, n) in lines {
        total += n;
        let key = frames
            .iter()
            .rev()
            .filter(|f| !f.contains("[c function]"))
            .find_map(|f| {
                let (label, place) = f.rsplit_once(" - ")?;
                let file = place.rsplit_once(':').map_or(place, |(f, _)| f);
                Some(ruby_method_key(label, file))
            })
            .unwrap_or_else(|| ("(C)".into(), String::new()));
        *by.entry(key).or_default() += n;
    }
    (by, total)
}

/// Every key `reference` gives 10 % or more of its samples (`theirs` of `their_total`) has a
/// share of ours (`ours` of `total`) within 4 sigma of the difference of two shares, 5
/// points at least: two runs of the program, about 1,200 samples each, a share's sampling
/// error alone is about 2 points (sigma of the difference at 60 %), and some 20 shares are
/// compared per run (a fixed 5 failed one run in a few on sampling noise). `name` shows a
/// key in the messages.
pub fn check_big_shares<K: Eq + std::hash::Hash + Ord>(
    tag: &str,
    reference: &str,
    (ours, total): (&HashMap<K, u64>, u64),
    (theirs, their_total): (&HashMap<K, u64>, u64),
    name: impl Fn(&K) -> String,
) {
    let share = |m: &HashMap<K, u64>, k: &K, t: u64| {
        100.0 * m.get(k).copied().unwrap_or(0) as f64 / t as f64
    };
    let mut big: Vec<&K> = theirs
        .keys()
        .filter(|k| share(theirs, k, their_total) >= 10.0)
        .collect();
    big.sort();
    assert!(!big.is_empty(), "{tag}: {reference} gives nothing 10 %");
    for k in big {
        let (a, b) = (share(ours, k, total), share(theirs, k, their_total));
        let p = (a + b) / 200.0;
        let sigma =
            100.0 * (p * (1.0 - p) * (1.0 / total as f64 + 1.0 / their_total as f64)).sqrt();
        let bound = (4.0 * sigma).max(5.0);
        let f = name(k);
        eprintln!("{tag}: {f}: {a:.1} % vs {reference} {b:.1} % (bound {bound:.1})");
        assert!(
            (a - b).abs() <= bound,
            "{tag}: {f}: {a:.1} % vs {reference}'s {b:.1} % (bound {bound:.1} points)"
        );
    }
}
