//! Naming frames as they ship: stripped binaries with their debug information elsewhere
//! (a build-id tree, a debuglink, MiniDebugInfo), PLT stubs against perf, and naming later
//! (`record --symbolize none`, then `profiler symbolize`), read back by `go tool pprof`.

use std::{path::Path, process::Command};

use profiler_tests::*;
use serde_json::Value;

/// The line of `debugged.c` that holds leaf's loop.
fn leaf_line() -> u64 {
    let src = include_str!("../fixtures/debugged.c");
    src.lines().position(|l| l.contains("LEAF LINE")).unwrap() as u64 + 1
}

/// The heaviest stack of a speedscope file: (name, line) of each frame, outermost first.
fn heaviest(json: &Path) -> Vec<(String, Option<u64>)> {
    let v: Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    let frames = v["shared"]["frames"].as_array().unwrap();
    let p = &v["profiles"][0];
    let samples = p["samples"].as_array().unwrap();
    let weights = p["weights"].as_array().unwrap();
    let mut by_stack: std::collections::HashMap<Vec<u64>, f64> = Default::default();
    for (s, w) in samples.iter().zip(weights) {
        let ids: Vec<u64> = s
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap())
            .collect();
        *by_stack.entry(ids).or_default() += w.as_f64().unwrap();
    }
    let (ids, _) = by_stack
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .expect("samples");
    ids.iter()
        .map(|&i| {
            let f = &frames[i as usize];
            (f["name"].as_str().unwrap().to_string(), f["line"].as_u64())
        })
        .collect()
}

fn names(stack: &[(String, Option<u64>)]) -> Vec<&str> {
    stack.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn stripped_binaries_are_named_from_their_separate_debug_information() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("debuginfo");
    let root = fixture("debug-root");
    for (variant, lines) in [("buildid", true), ("debuglink", true), ("minidebug", false)] {
        let json = dir.join(format!("{variant}.json"));
        let bin = fixture(&format!("debugged_{variant}"));
        let mut args = vec!["record", "-F", "999", "-q", "-o", json.to_str().unwrap()];
        if variant == "buildid" {
            args.extend(["--debug-dir", root.to_str().unwrap()]);
        }
        args.extend(["--", bin.to_str().unwrap(), "1"]);
        run_ok(&args);
        let stack = heaviest(&json);
        let n = names(&stack);
        assert!(
            n.ends_with(&["main", "outer", "middle", "leaf"]),
            "{variant}: {n:?}"
        );
        let leaf = stack.last().unwrap().1;
        if lines {
            assert_eq!(leaf, Some(leaf_line()), "{variant}: leaf's line");
        } else {
            // MiniDebugInfo has symbols only.
            assert_eq!(leaf, None, "{variant}");
        }
    }
    // Without the debug directory the build-id variant has no names: the misses say where.
    let json = dir.join("none.json");
    let bin = fixture("debugged_buildid");
    run_ok(&[
        "record",
        "-F",
        "999",
        "-q",
        "-o",
        json.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
        "1",
    ]);
    let stack = heaviest(&json);
    let leaf = &stack.last().unwrap().0;
    assert!(leaf.starts_with("[debugged_buildid]+0x"), "{leaf}");
}

/// The share of samples whose leaf is a PLT stub, from our folded stacks.
fn our_plt_share(folded: &str) -> (f64, u64) {
    let (mut plt, mut all) = (0u64, 0u64);
    // The header comments (`# profiler-folded ...`) carry no stack.
    for line in folded.lines().filter(|l| !l.starts_with('#')) {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let n: u64 = n.parse().unwrap();
        all += n;
        if stack
            .rsplit(';')
            .next()
            .is_some_and(|f| f.ends_with("@plt"))
        {
            plt += n;
        }
    }
    (plt as f64 * 100.0 / all as f64, all)
}

/// The leaf functions of a folded profile with the most weight, and their shares (printed
/// beside perf's own list: where a difference between the two samplers goes).
fn our_top_leaves(folded: &str, n: usize) -> Vec<(String, f64)> {
    let mut by: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    let mut all = 0;
    for line in folded.lines().filter(|l| !l.starts_with('#')) {
        let Some((stack, w)) = line.rsplit_once(' ') else {
            continue;
        };
        let w: u64 = w.parse().unwrap();
        all += w;
        *by.entry(stack.rsplit(';').next().unwrap_or(""))
            .or_default() += w;
    }
    let mut v: Vec<(String, f64)> = by
        .into_iter()
        .map(|(k, w)| (k.to_string(), w as f64 * 100.0 / all.max(1) as f64))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.truncate(n);
    v
}

/// perf's share of samples in the `plt` fixture's PLT stubs. perf names a stub `tiny@plt`,
/// or, on files with `.plt.sec`, after the symbol before the section (`_init`, never run
/// in this loop).
fn perf_plt_share(data: &Path) -> (f64, String) {
    let out = Command::new("perf")
        .args(["report", "--stdio", "-q", "--sort", "dso,sym", "-i"])
        .arg(data)
        .output()
        .expect("perf report");
    let text = String::from_utf8_lossy(&out.stdout);
    let share = text
        .lines()
        .filter(|l| l.contains(" plt ") && (l.contains("@plt") || l.ends_with("] _init")))
        .filter_map(|l| l.trim().split('%').next()?.trim().parse::<f64>().ok())
        .sum();
    let top = text.lines().take(6).collect::<Vec<_>>().join("\n");
    (share, top)
}

/// CLOCK_MONOTONIC in seconds, the clock `perf script` prints samples' times in.
fn monotonic_secs() -> f64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9
}

/// perf's sample count and the span of its samples' times (`perf script`), in seconds.
fn perf_window(data: &Path) -> (usize, f64, f64) {
    let out = Command::new("perf")
        .args(["script", "-F", "time", "-i"])
        .arg(data)
        .output()
        .expect("perf script");
    let times: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().trim_end_matches(':').parse().ok())
        .collect();
    let first = times.first().copied().unwrap_or(0.0);
    let last = times.last().copied().unwrap_or(0.0);
    (times.len(), first, last)
}

#[test]
fn plt_stubs_are_named_and_counted_as_perf_counts_them() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("plt");
    let mut work = Command::new(fixture("plt")).arg("30").spawn().unwrap();
    let pid = work.id().to_string();
    let folded = dir.join("plt.folded");
    let data = dir.join("plt.data");
    // Both tools sample the same seconds of the same process, at rates apart: at one rate
    // their timers keep one phase for the whole run, and whichever fires just after the
    // other's interrupt returns likely finds the branch predictors it left cold (the stub's
    // indirect jump slower then). CI saw 11.18 % (ours) vs 13.99 % (perf)
    // with both at 4999 Hz, and here ours was below perf's in 4 runs of 4 (0.1-1.4 points);
    // at 3989 and 4999 Hz the differences were -0.7 to +0.5 points, either way.
    let perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-F",
            "4999",
            "-p",
            &pid,
            "-o",
        ])
        .arg(&data)
        .args(["--", "sleep", "6"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let began = monotonic_secs();
    let ours = profiler(&[
        "record",
        "-F",
        "3989",
        "-p",
        &pid,
        "-d",
        "6",
        "-o",
        folded.to_str().unwrap(),
    ]);
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    assert!(perf.wait_with_output().unwrap().status.success());
    let _ = work.kill();
    let _ = work.wait();
    let text = std::fs::read_to_string(&folded).unwrap();
    assert!(text.contains("tiny@plt"), "named after its relocation");
    let (share, samples) = our_plt_share(&text);
    let (theirs, perf_top) = perf_plt_share(&data);
    eprintln!("plt stub share: profiler {share:.2} % of {samples}, perf {theirs:.2} %");
    // Where a difference goes, for the next failure to show: both tools' windows and
    // counts (ours: its summary line, started at `began`) and their hottest leaves.
    let (n, first, last) = perf_window(&data);
    eprintln!(
        "perf: {n} samples from {first:.3} to {last:.3} s (CLOCK_MONOTONIC), {:.0}/s; \
         profiler started at {began:.3} s: {}",
        n as f64 / (last - first).max(1e-9),
        [&ours.stdout, &ours.stderr]
            .iter()
            .flat_map(|o| String::from_utf8_lossy(o)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>())
            .find(|l| l.contains(" samples of "))
            .unwrap_or_else(|| "(no summary)".into())
    );
    eprintln!("profiler's leaves: {:?}", our_top_leaves(&text, 6));
    eprintln!("perf's:\n{perf_top}");
    assert!(samples > 2000, "{samples} samples");
    // The stub's share depends on the CPU and the load (3.6 to 10.8 % measured on these
    // machines, 37 % in one CI run on an EPYC): at 2 % of these samples, thousands of them
    // are in the stubs. The two samplers agree within 2 points or a tenth of perf's share
    // (that CI run: 35.01 % vs 37.12 %).
    assert!(theirs > 2.0, "perf sees the stubs: {theirs}");
    assert!(
        (share - theirs).abs() <= (theirs / 10.0).max(2.0),
        "profiler {share:.2} % vs perf {theirs:.2} %"
    );
}

/// `go tool pprof -top` reads `file` (without symbolizing it itself).
fn go_pprof_top(file: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-symbolize=none"])
        .arg(file)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("go tool pprof (Debian's golang-go)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "go tool pprof on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The report's hottest-stack line, without its share (which differs between runs).
fn hottest(report: &str) -> String {
    let line = report
        .lines()
        .find(|l| l.starts_with("hottest stack"))
        .unwrap_or_else(|| panic!("{report}"));
    line.split_once("): ").unwrap().1.to_string()
}

#[test]
fn symbolizing_later_gives_the_report_symbolizing_at_once_gives() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("later");
    let root = fixture("debug-root");
    // A copy recorded, then removed: only its debug file (by build id) is left to name it.
    let gone = dir.join("debugged_buildid");
    std::fs::copy(fixture("debugged_buildid"), &gone).unwrap();
    for (bin, remove) in [(fixture("debugged_debuglink"), false), (gone.clone(), true)] {
        let now = dir.join("now.pb.gz");
        let raw = dir.join("raw.pb.gz");
        let named = dir.join("named.pb.gz");
        let record = |out: &Path, extra: &[&str]| {
            let mut args = vec!["record", "-F", "999", "-q", "-o", out.to_str().unwrap()];
            args.extend(["--debug-dir", root.to_str().unwrap()]);
            args.extend(extra);
            args.extend(["--", bin.to_str().unwrap(), "1"]);
            run_ok(&args);
        };
        record(&now, &[]);
        record(&raw, &["--symbolize", "none"]);
        if remove {
            std::fs::remove_file(&bin).unwrap();
        }
        let raw_report = run_ok(&["report", "-i", raw.to_str().unwrap()]);
        assert!(
            !raw_report.contains(" leaf "),
            "nothing is named yet:\n{raw_report}"
        );
        let out = profiler(&[
            "symbolize",
            "-i",
            raw.to_str().unwrap(),
            "-o",
            named.to_str().unwrap(),
            "--debug-dir",
            root.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("locations named"), "{stderr}");
        let at_once = run_ok(&["report", "-i", now.to_str().unwrap()]);
        let later = run_ok(&["report", "-i", named.to_str().unwrap()]);
        assert_eq!(
            hottest(&later),
            hottest(&at_once),
            "{}:\n{later}\n{at_once}",
            bin.display()
        );
        assert!(
            hottest(&later).ends_with("main > outer > middle > leaf"),
            "{later}"
        );
        // Another reader takes all three files.
        assert!(go_pprof_top(&raw).contains("flat%"));
        assert!(go_pprof_top(&now).contains("leaf"));
        assert!(go_pprof_top(&named).contains("leaf"));
    }
}
