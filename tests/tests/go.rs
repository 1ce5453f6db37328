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

/// Builds the fixture into `dir` as `name` with `ldflags`; `None` (said why) without Go.
fn build(dir: &Path, name: &str, ldflags: &str) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/go/chain.go");
    let out = dir.join(name);
    let built = Command::new("go")
        .args(["build", "-ldflags", ldflags, "-o"])
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
    let mut profiles = Vec::new();
    for bin in [&full, &stripped] {
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
    let (full, stripped) = (&profiles[0], &profiles[1]);
    let total: u64 = stripped.values().sum();
    assert!(total > 1000, "{total} samples");
    // Every frame named: no `[stripped]+0x...` address.
    let unnamed: u64 = stripped
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f.contains("+0x")))
        .map(|(_, n)| n)
        .sum();
    assert!(
        unnamed * 100 <= total,
        "{unnamed} of {total} samples have an address for a name: {stripped:?}"
    );
    // The hot chain, the inlined call included, as the build with symbols names it.
    let chain = ["main.outer", "main.middle", "main.leaf"];
    for p in [full, stripped] {
        let leaf: u64 = p
            .iter()
            .filter(|(s, _)| s.iter().any(|f| f == "main.leaf"))
            .map(|(_, n)| n)
            .sum();
        let whole: u64 = p
            .iter()
            .filter(|(s, _)| s.windows(3).any(|w| w == chain))
            .map(|(_, n)| n)
            .sum();
        let mix: u64 = p
            .iter()
            .filter(|(s, _)| s.ends_with(&["main.leaf".into(), "main.mix".into()]))
            .map(|(_, n)| n)
            .sum();
        eprintln!("leaf {leaf}, whole chain {whole}, inlined mix {mix}");
        assert!(leaf * 100 >= total * 90, "leaf {leaf} of {total}: {p:?}");
        assert!(whole * 100 >= leaf * 99, "whole {whole} of {leaf}: {p:?}");
        assert!(mix * 10 >= leaf, "inlined mix {mix} of {leaf}: {p:?}");
    }
    // Samples in stacks the build with symbols never showed: at most 5 %.
    let foreign: u64 = stripped
        .iter()
        .filter(|(s, _)| !full.contains_key(*s))
        .map(|(_, n)| n)
        .sum();
    eprintln!("{unnamed} unnamed, {foreign} in stacks the full build lacks, of {total}");
    assert!(
        foreign * 100 <= total * 5,
        "{foreign} of {total} stripped samples in stacks the full build lacks"
    );
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
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-lines", "-symbolize=none"])
        .arg(&pb)
        .env("HOME", &dir)
        .output()
        .expect("go tool pprof");
    let top = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
}
