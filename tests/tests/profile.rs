//! The profile files and what reads them: pprof written by `record`, read back by `report`,
//! `flamegraph` and an independent decoder (Google's protobuf runtime in Python); SVG,
//! folded and speedscope output; JIT symbols; continuous mode; lost samples everywhere.

use std::process::{Command, Output, Stdio};

use profiler_tests::*;

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// (self %, self value as shown: events, or time such as `1.23s`) of `function` in a
/// report's table.
fn row(report: &str, function: &str) -> Option<(f64, String)> {
    report.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 4 && f[3] == function).then(|| {
            (
                f[0].trim_end_matches('%').parse().unwrap(),
                f[2].to_string(),
            )
        })
    })
}

/// `<title>NAME (N ns, P%)</title>` of an inferno SVG of cpu-clock (its frames count
/// nanoseconds): (N, P) summed over such frames.
fn svg_frame(svg: &str, name: &str) -> Option<(u64, f64)> {
    let prefix = format!("<title>{name} (");
    svg.match_indices(&prefix)
        .filter_map(|(i, _)| {
            let rest = &svg[i + prefix.len()..];
            let inner = &rest[..rest.find(")</title>")?];
            let (n, pct) = inner.split_once(" ns, ")?;
            Some((
                n.replace(',', "").parse().ok()?,
                pct.trim_end_matches('%').parse().ok()?,
            ))
        })
        // A function in several towers (stacks walked before and after a process's unwind
        // tables were loaded differ in their outer frames) counts in all of them.
        .reduce(|(n, p), (m, q)| (n + m, p + q))
}

#[test]
fn chain_pprof_reads_back_the_same_in_report_folded_svg_and_python() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("pprof");
    let pb = dir.join("chain.pb.gz");
    let pbs = pb.to_str().unwrap();
    let recorded = ok(
        profiler(&["record", "-F", "999", "-o", pbs, "--", &path("chain"), "2"]),
        "record",
    );
    let samples = reported_samples(&recorded);
    assert!(samples >= 400, "{recorded}");

    // Our reader: the same totals and the leaf on top.
    let report = run_ok(&["report", "-i", pbs, "--limit", "5"]);
    assert_eq!(reported_samples(&report), samples);
    let (leaf_pct, leaf_time) = row(&report, "leaf").expect("leaf row");
    assert!(leaf_pct >= 90.0, "{report}");
    assert!(
        report.contains("main > outer > middle > leaf"),
        "hottest stack lacks the chain:\n{report}"
    );

    // The independent decoder agrees on every total.
    let py = python_decode(&pb);
    assert_eq!(py["total"], samples, "{py}");
    assert_eq!(py["by_event"]["cpu-clock"], samples, "{py}");
    // cpu-clock at 999 Hz: each sample is 1001001 ns of CPU time, in its own column.
    let leaf_n = py["by_leaf"]["leaf"].as_u64().expect("leaf samples");
    assert_eq!(
        py["value_by_leaf"]["cpu-clock:leaf"],
        leaf_n * 1_001_001,
        "{py}"
    );
    let secs = leaf_n as f64 * 1_001_001.0 / 1e9;
    let shown = if secs >= 1.0 {
        format!("{secs:.2}s")
    } else {
        format!("{:.0}ms", secs * 1e3)
    };
    assert_eq!(leaf_time, shown, "{report}");
    assert_eq!(
        py["sample_types"][0],
        serde_json::json!(["samples", "count"])
    );
    for key in ["event", "pid", "tid", "comm", "cpu", "cgroup"] {
        assert!(
            py["label_keys"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k == key),
            "no {key} label: {py}"
        );
    }
    assert!(
        py["comments"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "profiler.lost=0"),
        "{py}"
    );
    let chain_path = fixture("chain");
    let build_id = py["mappings"][chain_path.to_str().unwrap()]
        .as_str()
        .unwrap_or_else(|| panic!("no mapping for chain: {py}"));
    let readelf = Command::new("readelf")
        .args(["-n", chain_path.to_str().unwrap()])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    if readelf.contains("Build ID") {
        assert!(
            readelf.contains(&format!("Build ID: {build_id}")),
            "build id {build_id} not in:\n{readelf}"
        );
    } else {
        assert_eq!(build_id.len(), 40, "{py}");
    }

    // Folded and SVG rendered from the file.
    let folded = dir.join("chain.folded");
    run_ok(&[
        "flamegraph",
        "-i",
        pbs,
        "--folded",
        "-o",
        folded.to_str().unwrap(),
    ]);
    let stacks = read_folded(&folded);
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    assert_eq!(total, samples);
    let leaf: u64 = stacks
        .iter()
        .filter(|(f, _)| {
            let user: Vec<&str> = f
                .iter()
                .filter(|x| !x.ends_with("_[k]"))
                .map(String::as_str)
                .collect();
            user.ends_with(&["main", "outer", "middle", "leaf"])
        })
        .map(|(_, n)| n)
        .sum();
    assert!(leaf * 100 >= total * 90, "{leaf} of {total} with the chain");

    let svg_path = dir.join("chain.svg");
    run_ok(&["flamegraph", "-i", pbs, "-o", svg_path.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let (n, pct) = svg_frame(&svg, "leaf").expect("leaf in the SVG");
    assert!(pct >= 90.0, "leaf {n} samples, {pct}%");
    for caller in ["middle", "outer", "main"] {
        let (m, _) = svg_frame(&svg, caller).unwrap_or_else(|| panic!("{caller} not in SVG"));
        assert!(m >= n, "{caller} ({m}) narrower than leaf ({n})");
    }
    assert!(svg.contains("lost 0"), "the SVG states the lost count");
}

#[test]
fn record_writes_svg_and_speedscope_directly() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("direct");
    for name in ["out.svg", "out.json"] {
        let file = dir.join(name);
        let out = ok(
            profiler(&[
                "record",
                "-F",
                "499",
                "-q",
                "-o",
                file.to_str().unwrap(),
                "--",
                &path("chain"),
                "1",
            ]),
            name,
        );
        assert!(!out.contains("samples of"), "-q prints no report: {out}");
        let text = std::fs::read_to_string(&file).unwrap();
        if name.ends_with(".svg") {
            let (_, pct) = svg_frame(&text, "leaf").expect("leaf");
            assert!(pct >= 90.0);
        } else {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let prof = &v["profiles"][0];
            let weights: u64 = prof["weights"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_u64().unwrap())
                .sum();
            // cpu-clock's nanoseconds: 1e9 / 499 ns a sample.
            assert_eq!(weights % 2_004_008, 0, "{weights} ns");
            assert!(weights / 2_004_008 >= 250, "{weights} ns");
            assert_eq!(prof["unit"], "nanoseconds");
            assert_eq!(prof["endValue"], weights);
            let frames = v["shared"]["frames"].as_array().unwrap();
            assert!(frames.iter().any(|f| f["name"] == "leaf"));
        }
    }
}

#[test]
fn jit_code_is_named_from_the_perf_map_even_after_exit() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    // The fixture deletes its perf map when it exits, before the report is built: the map
    // must have been read while it ran.
    let out = ok(
        profiler(&["record", "-F", "999", "--", &path("jit"), "1.5"]),
        "record",
    );
    let (pct, _) = row(&out, "jitted_spin_loop").unwrap_or_else(|| panic!("{out}"));
    assert!(pct >= 80.0, "{out}");
    assert!(out.contains(".map"), "module is the perf map: {out}");
}

#[test]
fn continuous_mode_writes_one_complete_file_per_interval() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("series");
    let series = dir.join("profiles");
    // --interval writes into an existing directory.
    std::fs::create_dir_all(&series).unwrap();
    let out = profiler(&[
        "record",
        "-F",
        "499",
        "-q",
        "--interval",
        "0.5",
        "-o",
        series.to_str().unwrap(),
        "--",
        &path("chain"),
        "2.2",
    ]);
    assert!(
        out.status.success(),
        "record --interval failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What the profiler says it wrote, file by file.
    let said: std::collections::BTreeMap<String, u64> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("profiler: wrote ")?;
            let (file, n) = rest.split_once(" (")?;
            Some((file.to_string(), n.split(' ').next()?.parse().ok()?))
        })
        .collect();
    let mut files: Vec<_> = std::fs::read_dir(&series)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files.iter().all(|f| f.to_str().unwrap().ends_with(".pb.gz")
            && !f.file_name().unwrap().to_str().unwrap().starts_with('.')),
        "only complete pprof files: {files:?}"
    );
    // 2.2 s of wall time at 0.5 s intervals: four or five files. (On a loaded machine the
    // command may get little CPU, so the sample count is not fixed; the files' are exact.)
    assert!(files.len() >= 3, "{} files for 2.2 s at 0.5 s", files.len());
    assert_eq!(said.len(), files.len(), "a line per file: {said:?}");
    let mut total = 0;
    for f in &files {
        let report = run_ok(&["report", "-i", f.to_str().unwrap()]);
        let n = reported_samples(&report);
        assert_eq!(said.get(f.to_str().unwrap()), Some(&n), "{}", f.display());
        total += n;
    }
    // Each file holds exactly the samples the profiler counted for its interval.
    assert!(total > 0);
}

#[test]
fn lost_samples_are_reported_in_every_format() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("lost");
    // A one-page ring at 20 kHz per CPU with every CPU busy cannot keep up.
    let spin = |secs: &str| {
        Command::new(fixture("spin"))
            .args(["2", secs])
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut busy = spin("3");
    let pb = dir.join("lost.pb.gz");
    let report = ok(
        profiler(&[
            "record",
            "-m",
            "1",
            "-F",
            "20000",
            "-a",
            "-d",
            "1",
            "-o",
            pb.to_str().unwrap(),
        ]),
        "record",
    );
    let _ = (busy.kill(), busy.wait());
    let lost = summary_field(&report, "; lost ").unwrap_or_else(|| panic!("{report}"));
    assert!(lost > 0, "no loss with a one-page ring: {report}");
    let pbs = pb.to_str().unwrap();
    assert!(run_ok(&["report", "-i", pbs]).contains(&format!("; lost {lost};")));
    let py = python_decode(&pb);
    assert!(
        py["comments"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == &format!("profiler.lost={lost}")),
        "{py}"
    );
    let folded = dir.join("lost.folded");
    let svg = dir.join("lost.svg");
    let json = dir.join("lost.json");
    run_ok(&[
        "flamegraph",
        "-i",
        pbs,
        "--folded",
        "-o",
        folded.to_str().unwrap(),
    ]);
    run_ok(&["flamegraph", "-i", pbs, "-o", svg.to_str().unwrap()]);
    let folded = std::fs::read_to_string(folded).unwrap();
    // The header has the lost samples; their tower weighs them as the others (50000 ns
    // each at 20 kHz), so it is drawn in the graph's unit.
    // (then ` skipped=N` when the kernel skipped samples at this rate)
    let header = folded.lines().next().unwrap_or_default();
    let lost_field = format!("lost={lost}");
    assert!(
        header.split(' ').any(|kv| kv == lost_field),
        "folded: {header}"
    );
    assert!(
        folded.contains(&format!("[lost samples] {}\n", lost * 50_000)),
        "folded"
    );
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.contains(&format!("lost {lost}")), "svg subtitle");
    assert!(svg.contains("[lost samples] ("), "svg tower");
    // speedscope straight from record (one more short, lossy run).
    let mut busy = spin("2");
    ok(
        profiler(&[
            "record",
            "-m",
            "1",
            "-F",
            "20000",
            "-a",
            "-d",
            "0.5",
            "-q",
            "-o",
            json.to_str().unwrap(),
        ]),
        "record speedscope",
    );
    let _ = (busy.kill(), busy.wait());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let name = v["name"].as_str().unwrap();
    let lost: u64 = name.rsplit("lost ").next().unwrap().parse().unwrap();
    assert!(lost > 0, "speedscope names the loss: {name}");
}

#[test]
fn differential_flame_graph_and_bad_inputs() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("diff");
    let before = dir.join("before.folded");
    let after = dir.join("after.folded");
    std::fs::write(&before, "chain;main;leaf 50\nchain;main;other 50\n").unwrap();
    std::fs::write(&after, "chain;main;leaf 90\nchain;main;other 10\n").unwrap();
    let svg = dir.join("diff.svg");
    run_ok(&[
        "flamegraph",
        "--diff",
        before.to_str().unwrap(),
        after.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("leaf (90 samples") && text.contains("+40.00%"));

    // Files that are not profiles: one line naming the file, exit 1, no output left.
    let junk = dir.join("junk.pb.gz");
    std::fs::write(&junk, [0x1f, 0x8b, 0x08, 0x00, 0x01]).unwrap();
    let text = dir.join("prose.txt");
    std::fs::write(&text, "this is not a profile\n").unwrap();
    for bad in [&junk, &text, &dir.join("missing.pb.gz")] {
        let out_svg = dir.join("never.svg");
        for args in [
            vec!["report", "-i", bad.to_str().unwrap()],
            vec![
                "flamegraph",
                "-i",
                bad.to_str().unwrap(),
                "-o",
                out_svg.to_str().unwrap(),
            ],
        ] {
            let out = profiler(&args);
            assert_eq!(out.status.code(), Some(1), "{args:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
            assert!(err.contains(bad.to_str().unwrap()), "{err}");
            assert!(!out_svg.exists());
        }
    }
}

#[test]
fn aggregate_mode_counts_in_the_kernel_with_the_same_profile() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("aggregate");
    let before = our_programs();
    let pb = dir.join("agg.pb.gz");
    let pbs = pb.to_str().unwrap();
    let out = ok(
        profiler(&[
            "record",
            "--aggregate",
            "-F",
            "999",
            "-o",
            pbs,
            "--",
            &path("chain"),
            "1.5",
        ]),
        "record --aggregate",
    );
    let samples = reported_samples(&out);
    assert!(samples >= 300, "{out}");
    assert!(!out.contains("stack walk errors"), "{out}");
    let (pct, _) = row(&out, "leaf").unwrap_or_else(|| panic!("{out}"));
    assert!(pct >= 90.0, "{out}");
    // main > outer > leaf at least (the frameless-caller recovery of ring mode needs the
    // word at the stack pointer, which aggregation does not keep).
    assert!(out.contains("main > outer > "), "{out}");
    let py = python_decode(&pb);
    assert_eq!(py["total"], samples, "{py}");
    // The kernel summed the samples' periods: 1e9 / 999 ns each for cpu-clock.
    assert_eq!(
        py["value_by_event"]["cpu-clock"],
        samples * 1_001_001,
        "{py}"
    );
    assert_eq!(
        run_ok(&["report", "-i", pbs]).lines().next(),
        out.lines().find(|l| l.contains(" samples of "))
    );
    assert_eq!(our_programs(), before, "nothing left loaded");
}
