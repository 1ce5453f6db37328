//! User stacks of code built without frame pointers, walked in the kernel with unwind tables
//! from `.eh_frame` (`record --call-graph dwarf`, the default).

use std::{
    path::Path,
    process::{Command, Stdio},
};

use profiler_tests::*;

/// Runs `record -F 999 -o FILE.folded [extra] -- argv`, returns the folded stacks.
fn record(name: &str, extra: &[&str], argv: &[&str]) -> Vec<(Vec<String>, u64)> {
    let dir = scratch(name);
    let folded = dir.join("out.folded");
    let mut args = vec!["record", "-F", "999", "-q", "-o", folded.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(argv);
    let out = profiler(&args);
    assert!(
        out.status.success(),
        "record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    read_folded(&folded)
}

/// (samples whose innermost user frame satisfies `is_leaf`, of those the ones whose user
/// frames end with `chain`).
fn chain_share(
    stacks: &[(Vec<String>, u64)],
    is_leaf: impl Fn(&str) -> bool,
    chain: &[&str],
    matches: impl Fn(&str, &str) -> bool,
) -> (u64, u64, Vec<String>) {
    let (mut leaf, mut whole) = (0, 0);
    let mut bad = Vec::new();
    for (user, n) in stacks {
        if !user.last().is_some_and(|f| is_leaf(f)) {
            continue;
        }
        leaf += n;
        let tail = user.len().checked_sub(chain.len()).map(|i| &user[i..]);
        if tail.is_some_and(|t| t.iter().zip(chain).all(|(f, c)| matches(f, c))) {
            whole += n;
        } else if bad.len() < 5 {
            bad.push(format!("{n}: {}", user.join(" > ")));
        }
    }
    (leaf, whole, bad)
}

/// Samples a process started under a recording may have walked with frame pointers before
/// its tables were loaded: the reader sees its first record late when it is busy loading
/// other processes' tables and naming their frames (measured 50 to 80 ms at 999 Hz with a
/// debug build on a loaded 2-CPU VM; docs/limits.md).
const STARTUP_SAMPLES: u64 = 200;

/// As [`assert_whole`], allowing [`STARTUP_SAMPLES`] partial stacks first.
fn assert_whole_after_startup(what: &str, (leaf, whole, bad): (u64, u64, Vec<String>)) {
    assert!(leaf >= 300, "{what}: only {leaf} leaf samples");
    assert!(
        (whole + STARTUP_SAMPLES.min(leaf - whole)) * 100 >= leaf * 99,
        "{what}: {whole} of {leaf} leaf samples carry the whole chain \
         ({STARTUP_SAMPLES} partial ones allowed for the start); others:\n{}",
        bad.join("\n")
    );
}

fn assert_whole(what: &str, (leaf, whole, bad): (u64, u64, Vec<String>), min_pct: u64) {
    eprintln!("{what}: {whole} of {leaf} leaf samples carry the whole chain");
    assert!(leaf >= 300, "{what}: only {leaf} leaf samples");
    assert!(
        whole * 100 >= leaf * min_pct,
        "{what}: {whole} of {leaf} leaf samples carry the whole chain; others:\n{}",
        bad.join("\n")
    );
}

#[test]
fn c_without_frame_pointers_has_the_whole_chain() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let stacks = record("unwind-c", &[], &[&path("nofp"), "2"]);
    let mine = user_stacks(&stacks, "nofp");
    let share = chain_share(
        &mine,
        |f| f == "leaf",
        &["main", "outer", "middle", "leaf"],
        |f, c| f == c,
    );
    assert_whole("C -O2 -fomit-frame-pointer", share, 99);
}

/// [`chain_share`] of `chain_rs`'s stacks (its functions are named with their crate).
fn rust_chain_share(stacks: &[(Vec<String>, u64)]) -> (u64, u64, Vec<String>) {
    chain_share(
        &user_stacks(stacks, "chain_rs"),
        |f| f.ends_with("chain_rs::leaf"),
        &["main", "outer", "middle", "leaf"],
        |f, c| f == format!("chain_rs::{c}"),
    )
}

#[test]
fn rust_release_build_has_the_whole_chain() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let stacks = record("unwind-rs", &[], &[&path("chain_rs"), "2"]);
    let share = rust_chain_share(&stacks);
    assert_whole("Rust release", share, 99);
}

#[test]
fn frame_pointer_mode_still_walks_frame_pointer_code() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let stacks = record(
        "unwind-fp",
        &["--call-graph", "fp"],
        &[&path("chain"), "1.5"],
    );
    let mine = user_stacks(&stacks, "chain");
    let share = chain_share(
        &mine,
        |f| f == "leaf",
        &["main", "outer", "middle", "leaf"],
        |f, c| f == c,
    );
    assert_whole("chain with --call-graph fp", share, 99);
}

#[test]
fn stacks_through_a_signal_handler_reach_main() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let stacks = record("unwind-signal", &[], &[&path("nofp"), "2", "signal"]);
    let mine = user_stacks(&stacks, "nofp");
    // main > [the interrupted frame, if any] > __restore_rt > on_signal > outer > middle > leaf
    let (mut leaf, mut whole) = (0, 0);
    let mut bad = Vec::new();
    for (user, n) in &mine {
        if user.last().map(String::as_str) != Some("leaf") {
            continue;
        }
        leaf += n;
        let handler = user.iter().position(|f| f == "on_signal");
        let main = user.iter().position(|f| f == "main");
        if let (Some(h), Some(m)) = (handler, main)
            && m < h
            && user[h..].join(">") == "on_signal>outer>middle>leaf"
        {
            whole += n;
        } else if bad.len() < 5 {
            bad.push(format!("{n}: {}", user.join(" > ")));
        }
    }
    assert_whole("signal handler", (leaf, whole, bad), 95);
}

#[test]
fn library_dlopened_after_the_start_unwinds() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let lib = fixture("nofplib");
    let stacks = record(
        "unwind-dlopen",
        &[],
        &[&path("nofp"), "2.5", "dlopen", lib.to_str().unwrap()],
    );
    let mine = user_stacks(&stacks, "nofp");
    let share = chain_share(
        &mine,
        |f| f == "lib_leaf",
        &["main", "call_lib", "lib_outer", "lib_middle", "lib_leaf"],
        |f, c| f == c,
    );
    // The library's first samples (before the process's mappings are read again) are
    // copied and walked once they are: whole (2178 to 2196 of as many in 4 runs here); a
    // copy past the ring's share on a loaded host is cut (counted, never guessed).
    assert_whole("dlopen'ed library", share, 99);
}

#[test]
fn process_started_after_the_recording_began_has_whole_stacks() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("unwind-late");
    let folded = dir.join("out.folded");
    let mut rec = profiler_command()
        .args(["record", "-a", "-F", "999", "-d", "600", "-q", "-o"])
        .arg(&folded)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn record");
    // Started once the recording is attached, and the recording ends (SIGINT) when it has
    // exited, however long a loaded host took to load the programs.
    wait_attached(&mut rec);
    // 5 s, so its steady state is measured: its first samples are walked with frame
    // pointers until the reader has loaded its tables (tens of milliseconds on a busy
    // 2-CPU VM with a debug build; documented in docs/limits.md).
    let status = Command::new(fixture("nofp"))
        .arg("5")
        .stdout(Stdio::null())
        .status()
        .expect("run nofp");
    assert!(status.success());
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let out = rec.wait_with_output().expect("record");
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mine = user_stacks(&read_folded(&folded), "nofp");
    let share = chain_share(
        &mine,
        |f| f == "leaf",
        &["main", "outer", "middle", "leaf"],
        |f, c| f == c,
    );
    assert_whole_after_startup("process started during a system-wide recording", share);
}

/// Share (percent) of samples of `comm` whose stack passes through libc's call of `main`
/// (a stripped binary has no `main` symbol; its caller is named from libc's symbols).
fn reaching_main(stacks: &[(Vec<String>, u64)]) -> (u64, u64) {
    let total = stacks.iter().map(|(_, n)| n).sum();
    let reached = stacks
        .iter()
        .filter(|(f, _)| f.iter().any(|f| f == "__libc_start_call_main"))
        .map(|(_, n)| n)
        .sum();
    (reached, total)
}

/// Text that xz compresses slowly enough to sample: words from a small vocabulary.
fn write_corpus(path: &Path, bytes: usize) {
    let words = [
        "profiler", "stack", "frame", "unwind", "kernel", "sample", "table", "module", "row",
        "address", "return", "pointer", "signal", "process", "library",
    ];
    let mut out = String::with_capacity(bytes + 16);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while out.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(words[(x % words.len() as u64) as usize]);
        out.push(if x.is_multiple_of(11) { '\n' } else { ' ' });
        if x.is_multiple_of(5) {
            out.push_str(&(x % 100_000).to_string());
        }
    }
    std::fs::write(path, out).expect("writing corpus");
}

#[test]
fn stripped_distribution_binary_reaches_main_like_perf_dwarf() {
    if !privileged() {
        return;
    }
    let xz = Path::new("/usr/bin/xz");
    let perf = Path::new("/usr/bin/perf");
    if !xz.exists() || !perf.exists() {
        eprintln!("SKIP: needs /usr/bin/xz and /usr/bin/perf");
        return;
    }
    let _guard = serial();
    let dir = scratch("unwind-xz");
    let corpus = dir.join("corpus.txt");
    write_corpus(&corpus, 4 << 20);
    let script = dir.join("xz.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec /usr/bin/xz -9 -T1 -c {} > /dev/null\n",
            corpus.display()
        ),
    )
    .unwrap();
    let folded = dir.join("xz.folded");
    let out = profiler(&[
        "record",
        "-F",
        "999",
        "-q",
        "-o",
        folded.to_str().unwrap(),
        "--",
        "/bin/sh",
        script.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours = user_stacks(&read_folded(&folded), "xz");
    let (reached, total) = reaching_main(
        &ours
            .iter()
            .map(|(f, n)| (f.clone(), *n))
            .collect::<Vec<_>>(),
    );
    assert!(total >= 300, "only {total} samples of xz");
    let ours_pct = reached as f64 * 100.0 / total as f64;

    let data = dir.join("perf.data");
    let rec = Command::new(perf)
        .args(["record", "-q", "-F", "999", "--call-graph", "dwarf", "-o"])
        .arg(&data)
        .args(["--", "/bin/sh"])
        .arg(&script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("perf record");
    assert!(rec.success(), "perf record failed");
    let script_out = Command::new(perf)
        .args(["script", "-F", "comm,ip,sym", "-i"])
        .arg(&data)
        .stderr(Stdio::null())
        .output()
        .expect("perf script");
    let text = String::from_utf8_lossy(&script_out.stdout);
    let (mut perf_total, mut perf_reached) = (0u64, 0u64);
    for sample in text.split("\n\n") {
        let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
        let Some(head) = lines.next() else { continue };
        if head.trim() != "xz" && !head.trim_start().starts_with("xz ") {
            continue;
        }
        perf_total += 1;
        if sample.contains("__libc_start_call_main") {
            perf_reached += 1;
        }
    }
    assert!(
        perf_total >= 300,
        "perf took only {perf_total} samples of xz"
    );
    let perf_pct = perf_reached as f64 * 100.0 / perf_total as f64;
    eprintln!(
        "xz: profiler {ours_pct:.2} % of {total}, perf dwarf {perf_pct:.2} % of {perf_total}"
    );
    assert!(ours_pct >= 95.0, "profiler: {ours_pct:.2} % reach main");
    assert!(
        ours_pct >= perf_pct - 2.0,
        "profiler {ours_pct:.2} % vs perf --call-graph dwarf {perf_pct:.2} %"
    );
}

type Stats = std::collections::HashMap<String, u64>;

/// The `key=value` fields of `record --unwind-stats`'s line.
fn unwind_stats(stderr: &[u8]) -> Stats {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("unwind-stats "))
        .unwrap_or_else(|| panic!("no unwind-stats line in:\n{text}"));
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

/// `record --unwind-stats --unwind-memory SIZE -o FILE.folded -- sh -c SCRIPT`: the folded
/// stacks and the stats.
fn record_script(name: &str, memory: &str, script: &str) -> (Vec<(Vec<String>, u64)>, Stats) {
    let folded = scratch(name).join("out.folded");
    let out = profiler(&[
        "record",
        "-F",
        "999",
        "-q",
        "--unwind-stats",
        "--unwind-memory",
        memory,
        "-o",
        folded.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert!(
        out.status.success(),
        "record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (read_folded(&folded), unwind_stats(&out.stderr))
}

#[test]
fn a_full_row_array_evicts_modules_of_exited_processes() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let rs = path("chain_rs");
    // Debian's python3 has about half a MiB of rows, chain_rs tens of KiB. Python runs long
    // enough for its tables to be built (0.4 s in a debug build) before chain_rs starts.
    let python =
        "/usr/bin/python3 -c 'import time\nend = time.time() + 1.5\nwhile time.time() < end: pass'";
    // What each program needs alone (with the profiler's own libraries and sh's).
    let (_, alone_py) = record_script("evict-py", "32M", python);
    let (_, alone_rs) = record_script("evict-rs", "32M", &format!("{rs} 0.3"));
    let need = alone_py["row_bytes"].max(alone_rs["row_bytes"]);
    // Room for either, not both: the second needs the first's rows back. It runs 5 s, as a
    // process started under a recording walks its first tens of milliseconds with frame
    // pointers (until its tables are loaded; docs/limits.md).
    let kib = need.div_ceil(1024) + 1;
    let (stacks, stats) = record_script(
        "evict-both",
        &format!("{kib}K"),
        &format!("{python}; {rs} 5"),
    );
    assert!(
        stats["modules_evicted"] >= 1,
        "nothing evicted in {kib} KiB: {stats:?}"
    );
    let share = rust_chain_share(&stacks);
    assert_whole_after_startup("chain_rs after python's modules were evicted", share);
}
