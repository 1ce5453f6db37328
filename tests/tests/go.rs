//! Go binaries as fleets ship them: linked with `-s -w` (no `.symtab`, no DWARF), named from
//! Go's own function table (`.gopclntab`), compared with the same program built with its
//! symbols, and read back by `go tool pprof` with lines. Debian's Go (installed by
//! `cargo xtask setup`) builds the fixture `fixtures/go/chain.go`.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use profiler_tests::*;

/// `go tool pprof ARGS FILE`'s output (with `dir` as its HOME), asserting it succeeded.
fn go_pprof(dir: &Path, args: &[&str], file: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .env("HOME", dir)
        .output()
        .expect("go tool pprof");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Builds the fixture into `dir` as `name` with `ldflags`; `None` (said why) without Go.
fn build(dir: &Path, name: &str, ldflags: &str) -> Option<PathBuf> {
    build_as(dir, name, ldflags, "exe")
}

/// [`build`] with a `-buildmode` (`exe`, `pie`).
fn build_as(dir: &Path, name: &str, ldflags: &str, mode: &str) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/go/chain.go");
    let out = dir.join(name);
    let built = Command::new("go")
        .args(["build", "-buildmode", mode, "-ldflags", ldflags, "-o"])
        .arg(&out)
        .arg(&src)
        .env("GOCACHE", dir.join("gocache"))
        .env("HOME", dir)
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .output();
    match built {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) => panic!("go build: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "go is missing under CI ({e}): cargo xtask setup installs golang-go"
            );
            eprintln!("skipped: no go ({e})");
            None
        }
    }
}

/// Every function of the `.symtab` of `bin` against the name the Go table gives its entry:
/// (functions compared, names that differ).
fn symtab_against_table(bin: &Path) -> (usize, Vec<String>) {
    use object::{Object, ObjectSymbol, SymbolKind};
    let file = std::sync::Arc::new(std::fs::File::open(bin).unwrap());
    let data = std::fs::read(bin).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let table = profiler::symbolize::go::GoTable::read(&file)
        .expect("a readable Go table")
        .expect("a Go table");
    let mut compared = 0;
    let mut wrong = Vec::new();
    for sym in elf.symbols() {
        let Ok(name) = sym.name() else { continue };
        if sym.kind() != SymbolKind::Text || sym.size() == 0 {
            continue;
        }
        // Assembly functions carry their ABI in .symtab only.
        let name = name.trim_end_matches(".abi0");
        compared += 1;
        // The linker shortens type arguments in the table's names (`type..eq.[...]T`) and
        // writes `·` where the symbol has `.` before a local type's index, as Go's own
        // tracebacks print them.
        let same = |f: &str| match f.replace('·', ".").split_once("[...]") {
            Some((a, b)) => name.starts_with(a) && name.ends_with(b),
            None => f.replace('·', ".") == name,
        };
        match table.function(sym.address()) {
            Some(f) if same(&f) => {}
            other => wrong.push(format!("{name} at {:#x}: {other:?}", sym.address())),
        }
    }
    (compared, wrong)
}

/// Each distinct user stack (kernel frames and the command dropped) with its sample count.
fn user_stacks(folded: &[(Vec<String>, u64)]) -> BTreeMap<Vec<String>, u64> {
    let mut out = BTreeMap::new();
    for (frames, n) in folded {
        let user: Vec<String> = frames[1..]
            .iter()
            .filter(|f| !f.ends_with("_[k]"))
            .cloned()
            .collect();
        *out.entry(user).or_default() += n;
    }
    out
}

/// The line of `src` that holds `text`, 1-based.
fn line_of(src: &str, text: &str) -> usize {
    1 + src
        .lines()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("{text} not in the fixture"))
}

#[test]
fn stripped_go_is_named_as_the_build_with_symbols() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("go-stripped");
    let Some(full) = build(&dir, "full", "") else {
        return;
    };
    let stripped = build(&dir, "stripped", "-s -w").unwrap();
    // PIE: the table has no section of its own (it is inside .data.rel.ro).
    let pie = build_as(&dir, "pie", "-s -w", "pie").unwrap();
    let mut profiles = Vec::new();
    for bin in [&full, &stripped, &pie] {
        let folded = bin.with_extension("folded");
        let out = profiler(&[
            "record",
            "-F",
            "499",
            "-o",
            folded.to_str().unwrap(),
            "--",
            bin.to_str().unwrap(),
            "3",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        // Go keeps frame pointers: nothing alarming about its missing or compressed CFI.
        assert!(!stderr.contains("no unwind table"), "{stderr}");
        profiles.push(user_stacks(&read_folded(&folded)));
    }
    let full = &profiles[0];
    // The hot chain, the inlined call included, as the build with symbols names it.
    let chain = ["main.outer", "main.middle", "main.leaf"];
    for (what, p) in ["full", "stripped", "stripped PIE"].iter().zip(&profiles) {
        let sum = |keep: &dyn Fn(&[String]) -> bool| -> u64 {
            p.iter().filter(|(s, _)| keep(s)).map(|(_, n)| n).sum()
        };
        let total = sum(&|_| true);
        // Every frame named: no `[stripped]+0x...` address.
        let unnamed = sum(&|s| s.iter().any(|f| f.contains("+0x")));
        let leaf = sum(&|s| s.iter().any(|f| f == "main.leaf"));
        let whole = sum(&|s| s.windows(3).any(|w| w == chain));
        let mix = sum(&|s| s.ends_with(&["main.leaf".into(), "main.mix".into()]));
        // Samples in stacks the build with symbols never showed.
        let foreign = sum(&|s| !full.contains_key(s));
        eprintln!(
            "{what}: {total} samples, {unnamed} unnamed, leaf {leaf}, whole chain {whole}, \
             inlined mix {mix}, {foreign} in stacks the full build lacks"
        );
        assert!(total > 1000, "{what}: {total} samples");
        assert!(
            unnamed * 100 <= total,
            "{what}: {unnamed} of {total} samples have an address for a name: {p:?}"
        );
        assert!(
            leaf * 100 >= total * 90,
            "{what}: leaf {leaf} of {total}: {p:?}"
        );
        assert!(
            whole * 100 >= leaf * 99,
            "{what}: whole {whole} of {leaf}: {p:?}"
        );
        assert!(
            mix * 10 >= leaf,
            "{what}: inlined mix {mix} of {leaf}: {p:?}"
        );
        assert!(
            foreign * 100 <= total * 5,
            "{what}: {foreign} of {total} samples in stacks the full build lacks"
        );
    }
}

/// A leaf without a stack frame (`main.spin`): frame pointers skip its caller, the rows made
/// from the Go table's frame sizes do not; stripped or not.
#[test]
fn a_frameless_go_leaf_keeps_its_caller() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("go-frameless");
    let Some(full) = build(&dir, "full", "") else {
        return;
    };
    let stripped = build(&dir, "stripped", "-s -w").unwrap();
    let chain = ["main.outerFl", "main.middleFl", "main.spin"];
    for bin in [&full, &stripped] {
        let folded = bin.with_extension("folded");
        run_ok(&[
            "record",
            "-F",
            "499",
            "-q",
            "-o",
            folded.to_str().unwrap(),
            "--",
            bin.to_str().unwrap(),
            "2",
            "frameless",
        ]);
        let stacks = user_stacks(&read_folded(&folded));
        let sum = |keep: &dyn Fn(&[String]) -> bool| -> u64 {
            stacks.iter().filter(|(s, _)| keep(s)).map(|(_, n)| n).sum()
        };
        let spin = sum(&|s| s.last().is_some_and(|f| f == "main.spin"));
        let whole = sum(&|s| s.ends_with(&chain.map(String::from)) && s[0] == "runtime.goexit");
        eprintln!(
            "{}: {whole} of {spin} samples in main.spin whole",
            bin.display()
        );
        assert!(spin > 200, "{spin} samples in main.spin: {stacks:?}");
        assert!(
            whole * 100 >= spin * 99,
            "{whole} of {spin} whole: {stacks:?}"
        );
    }
}

/// The table's name of every function's entry is its `.symtab` name: Debian's Go 1.19 build
/// of the fixture (the 1.18-1.19 layout), and a Go 1.20+ binary where the machine has one
/// (`$PROFILER_TEST_GO_BINARY`, else this workplace's OpenTelemetry agent, built with Go
/// 1.26, whose table's start of text is 0 and whose module data has a section of its own:
/// 23,951 functions, every one named as its symbol).
#[test]
fn the_go_table_names_every_function_as_its_symbol_table() {
    let dir = scratch("go-symtab");
    let Some(full) = build(&dir, "full", "") else {
        return;
    };
    let mut bins = vec![full];
    // Beside this repository, the workplace keeps the OpenTelemetry agent (bench's peer).
    let agent = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/tools/otel-ebpf-profiler/ebpf-profiler");
    match std::env::var_os("PROFILER_TEST_GO_BINARY") {
        Some(other) => bins.push(PathBuf::from(other)),
        None if agent.exists() => bins.push(agent),
        None => eprintln!(
            "only Go 1.19: no PROFILER_TEST_GO_BINARY, no {}",
            agent.display()
        ),
    }
    for bin in bins {
        let (compared, wrong) = symtab_against_table(&bin);
        eprintln!(
            "{}: {compared} functions, {} differ",
            bin.display(),
            wrong.len()
        );
        assert!(compared > 1000, "{}: {compared} functions", bin.display());
        assert!(
            wrong.is_empty(),
            "{}: {} of {compared} differ: {:?}",
            bin.display(),
            wrong.len(),
            &wrong[..wrong.len().min(10)]
        );
    }
}

#[test]
fn stripped_go_has_files_and_lines_in_pprof() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("go-lines");
    let Some(bin) = build(&dir, "stripped", "-s -w") else {
        return;
    };
    let pb = dir.join("out.pb.gz");
    run_ok(&[
        "record",
        "-F",
        "499",
        "-q",
        "-o",
        pb.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
        "2",
    ]);
    let top = go_pprof(&dir, &["-top", "-lines", "-symbolize=none"], &pb);
    let src =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/go/chain.go"))
            .unwrap();
    // mix's only line, inlined into leaf; and leaf's loop.
    let mix = format!("main.mix {}:{}", "chain.go", line_of(&src, "return (i*7"));
    assert!(
        top.lines().any(|l| l.contains("main.mix")
            && l.contains(&format!("chain.go:{}", line_of(&src, "return (i*7")))),
        "no `{mix}` in:\n{top}"
    );
    let leaf_lines: Vec<usize> = ["for i := 0; i < n", "buf[i&31] += mix", "s += buf"]
        .iter()
        .map(|t| line_of(&src, t))
        .collect();
    assert!(
        top.lines().any(|l| l.contains("main.leaf")
            && leaf_lines
                .iter()
                .any(|n| l.contains(&format!("chain.go:{n}")))),
        "no main.leaf at lines {leaf_lines:?} in:\n{top}"
    );
    // Named later from the same table: `record --symbolize none`, then `profiler symbolize`.
    let (raw, named) = (dir.join("raw.pb.gz"), dir.join("named.pb.gz"));
    run_ok(&[
        "record",
        "-F",
        "499",
        "-q",
        "--symbolize",
        "none",
        "-o",
        raw.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
        "1",
    ]);
    run_ok(&[
        "symbolize",
        "-i",
        raw.to_str().unwrap(),
        "-o",
        named.to_str().unwrap(),
    ]);
    let report = run_ok(&["report", "-i", named.to_str().unwrap()]);
    assert!(
        report.lines().any(|l| l.starts_with("hottest stack")
            && l.contains("main.outer > main.middle > main.leaf")),
        "{report}"
    );
    // The profile names the binary by Go's build id (it has no GNU one): another build at
    // the recorded path is not taken for it, and the binary itself, moved and renamed
    // under a `--debug-dir`, is found again.
    let moved = dir.join("shipped/bin");
    std::fs::create_dir_all(&moved).unwrap();
    std::fs::rename(&bin, moved.join("app-1.0")).unwrap();
    build(&dir, "stripped", "-s -w -buildid=another-build").unwrap();
    let other = Command::new(profiler_bin())
        .args(["symbolize", "-i", raw.to_str().unwrap(), "-o"])
        .arg(dir.join("other.pb.gz"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(
        stderr.contains("no file or debug file here for") && stderr.contains("(build id "),
        "{stderr}"
    );
    let found = dir.join("found.pb.gz");
    run_ok(&[
        "symbolize",
        "-i",
        raw.to_str().unwrap(),
        "-o",
        found.to_str().unwrap(),
        "--debug-dir",
        dir.join("shipped").to_str().unwrap(),
    ]);
    let report = run_ok(&["report", "-i", found.to_str().unwrap()]);
    assert!(
        report.lines().any(|l| l.starts_with("hottest stack")
            && l.contains("main.outer > main.middle > main.leaf")),
        "{report}"
    );
}

/// Goroutine labels (`pprof.Do`) on samples, stripped or not: each goroutine's work carries
/// its own route and tenant, main's (no labels) none; `report --by label:route` splits by
/// them, as `go tool pprof -tagfocus` does.
#[test]
fn goroutine_labels_are_on_their_goroutines_samples() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("go-labels");
    let Some(full) = build(&dir, "full", "") else {
        return;
    };
    let stripped = build(&dir, "stripped", "-s -w").unwrap();
    // Go's own CPU profiler samples the build with symbols in the same run.
    let theirs = dir.join("go.pb.gz");
    let env = format!("CHAIN_CPUPROFILE={}", theirs.display());
    for bin in [&full, &stripped] {
        let pb = bin.with_extension("pb.gz");
        let mut args = vec!["record", "-F", "499", "-o", pb.to_str().unwrap(), "--"];
        if bin == &full {
            args.extend(["env", &env]);
        }
        args.extend([bin.to_str().unwrap(), "3", "labels"]);
        let out = profiler(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let samples = stack_samples(&pb);
        let want = [
            ("main.leaf", Some(("/checkout", "t1"))),
            ("main.spin", Some(("/search", "t2"))),
            ("main.plain", None),
        ];
        for (func, labels) in want {
            let with: Vec<&StackSample> = samples
                .iter()
                .filter(|s| s.frames.iter().any(|f| f.0 == func))
                .collect();
            let total: u64 = with.iter().map(|s| s.n).sum();
            let right: u64 = with
                .iter()
                .filter(|s| {
                    let got = (s.labels.get("route"), s.labels.get("tenant"));
                    match labels {
                        Some((route, tenant)) => {
                            got == (Some(&route.to_string()), Some(&tenant.to_string()))
                        }
                        None => got == (None, None),
                    }
                })
                .map(|s| s.n)
                .sum();
            eprintln!(
                "{}: {func}: {right} of {total} samples labelled {labels:?}",
                bin.display()
            );
            assert!(total >= 200, "{func}: {total} samples");
            assert!(
                right * 100 >= total * 95,
                "{func}: {right} of {total} samples labelled {labels:?}"
            );
        }
        let table = run_ok(&["report", "--by", "label:route", pb.to_str().unwrap()]);
        for row in ["/checkout", "/search", "[none]"] {
            assert!(table.contains(row), "no {row} row in:\n{table}");
        }
        assert!(table.contains("LABEL route"), "{table}");
        // Go's own reader: the labels by value, and a focus on one keeps its work only.
        let tags = go_pprof(&dir, &["-tags"], &pb);
        for want in ["route:", "/checkout", "/search", "tenant:", "t1", "t2"] {
            assert!(
                tags.contains(want),
                "no {want} in go tool pprof -tags:\n{tags}"
            );
        }
        let focused = go_pprof(&dir, &["-top", "-tagfocus", "route=/search"], &pb);
        assert!(
            focused.contains("main.spin") && !focused.contains("main.plain"),
            "-tagfocus route=/search:\n{focused}"
        );
        if bin == &full {
            let (ours, go) = (
                route_shares(&samples),
                route_shares(&stack_samples(&theirs)),
            );
            eprintln!("route shares: ours {ours:?}, Go's runtime/pprof {go:?}");
            for ((route, a), (_, b)) in ours.iter().zip(&go) {
                assert!(
                    (a - b).abs() <= 5.0,
                    "{route}: {a:.1} % of our samples, {b:.1} % of Go's"
                );
            }
        }
    }
}

/// `--no-go-labels` (and `--no-runtime go`): the same program's samples carry no labels.
#[test]
fn no_go_labels_leaves_samples_unlabelled() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("go-no-labels");
    let Some(bin) = build(&dir, "stripped", "-s -w") else {
        return;
    };
    for flag in ["--no-go-labels", "--no-runtime=go"] {
        let pb = dir.join("out.pb.gz");
        let out = profiler(&[
            "record",
            "-F",
            "499",
            flag,
            "-o",
            pb.to_str().unwrap(),
            "--",
            bin.to_str().unwrap(),
            "1",
            "labels",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let samples = stack_samples(&pb);
        let total: u64 = samples.iter().map(|s| s.n).sum();
        let labelled: u64 = samples
            .iter()
            .filter(|s| s.labels.contains_key("route"))
            .map(|s| s.n)
            .sum();
        assert!(total >= 200, "{flag}: {total} samples");
        assert_eq!(
            labelled, 0,
            "{flag}: {labelled} of {total} samples labelled"
        );
    }
}

/// The share (%) of the fixture's work samples (in `main.leaf`, `main.spin` or
/// `main.plain`) under each route: /checkout, /search and none.
fn route_shares(samples: &[StackSample]) -> [(&'static str, f64); 3] {
    let work: Vec<&StackSample> = samples
        .iter()
        .filter(|s| {
            s.frames
                .iter()
                .any(|f| ["main.leaf", "main.spin", "main.plain"].contains(&f.0.as_str()))
        })
        .collect();
    let total: u64 = work.iter().map(|s| s.n).sum();
    assert!(total >= 200, "{total} work samples");
    ["/checkout", "/search", ""].map(|route| {
        let n: u64 = work
            .iter()
            .filter(|s| s.labels.get("route").map_or("", String::as_str) == route)
            .map(|s| s.n)
            .sum();
        (route, 100.0 * n as f64 / total as f64)
    })
}
