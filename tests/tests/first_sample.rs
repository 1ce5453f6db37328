//! Whole stacks from a process's first sample (issue 31, item 2), the modules of processes
//! that are gone before their samples are read (issue 38, item 4), and a file's unwind
//! tables being its own (issue 38, item 6). Where perf can measure the same thing, it runs
//! beside us in the same test, on the same workload.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use profiler_tests::*;

const PERF: &str = "/usr/bin/perf";

/// Whether a stack is whole: it reaches libc's call of `main` (named from libc's symbols in
/// a stripped program), or the program's entry point (`_start`, before or after `main`), or
/// the dynamic loader's entry.
fn whole(frames: &[&str]) -> bool {
    frames.first() == Some(&"_start")
        || frames
            .iter()
            .any(|f| *f == "__libc_start_call_main" || f.starts_with("_dl_start"))
}

/// `record -q -o DIR/ours.folded ARGS -- /bin/sh SCRIPT`: the folded stacks and stderr.
fn record_script(dir: &Path, args: &[&str], script: &Path) -> (Vec<(Vec<String>, u64)>, String) {
    let folded = dir.join("ours.folded");
    let mut all = vec![
        "record",
        "-q",
        "--unwind-stats",
        "-o",
        folded.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "/bin/sh", script.to_str().unwrap()]);
    let out = profiler(&all);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "record failed: {stderr}");
    (read_folded(&folded), stderr)
}

/// `perf record ARGS -- /bin/sh SCRIPT`, then `perf script -F FIELDS`: one text block per
/// sample.
fn perf_script(dir: &Path, args: &[&str], script: &Path, fields: &str) -> Vec<String> {
    let data = dir.join("perf.data");
    let rec = Command::new(PERF)
        .arg("record")
        .args(args)
        .arg("-o")
        .arg(&data)
        .args(["--", "/bin/sh"])
        .arg(script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("perf record");
    assert!(rec.success(), "perf record failed");
    let out = Command::new(PERF)
        .args(["script", "-F", fields, "-i"])
        .arg(&data)
        .stderr(Stdio::null())
        .output()
        .expect("perf script");
    String::from_utf8_lossy(&out.stdout)
        .split("\n\n")
        .map(str::to_string)
        .filter(|s| !s.trim().is_empty())
        .collect()
}

fn write_script(dir: &Path, body: &str) -> PathBuf {
    let script = dir.join("run.sh");
    std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).expect("writing script");
    script
}

fn pct(n: u64, of: u64) -> f64 {
    n as f64 * 100.0 / of.max(1) as f64
}

/// 4 MB of base64 (what the issue compressed): random bytes, so gzip works for its time.
fn write_base64(path: &Path, bytes: usize) {
    let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut out = Vec::with_capacity(bytes + bytes / 76 + 1);
    for i in 0..bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(table[(x >> 58) as usize]);
        if i % 76 == 75 {
            out.push(b'\n');
        }
    }
    std::fs::write(path, out).expect("writing base64");
}

#[test]
fn short_gzip_commands_reach_main_like_perf_dwarf() {
    if !privileged() {
        return;
    }
    if !Path::new("/usr/bin/gzip").exists() || !Path::new(PERF).exists() {
        eprintln!("SKIP: needs /usr/bin/gzip and {PERF}");
        return;
    }
    let _guard = serial();
    let dir = scratch("first-gzip");
    let input = dir.join("in.b64");
    write_base64(&input, 4 << 20);
    // Six processes of about 150 ms each, each sampled from its first moment.
    let script = write_script(
        &dir,
        &format!(
            "for i in 1 2 3 4 5 6; do /usr/bin/gzip -9 -c {} > /dev/null; done",
            input.display()
        ),
    );
    let (stacks, stderr) = record_script(&dir, &["-F", "499"], &script);
    let ours = user_stacks(&stacks, "gzip");
    let total: u64 = ours.iter().map(|(_, n)| n).sum();
    let reached: u64 = ours
        .iter()
        .filter(|(f, _)| whole(&f.iter().map(String::as_str).collect::<Vec<_>>()))
        .map(|(_, n)| n)
        .sum();
    let cut: Vec<String> = ours
        .iter()
        .filter(|(f, _)| !whole(&f.iter().map(String::as_str).collect::<Vec<_>>()))
        .take(5)
        .map(|(f, n)| format!("{n}: {}", f.join(" > ")))
        .collect();

    let samples = perf_script(
        &dir,
        &["-q", "-F", "499", "--call-graph", "dwarf"],
        &script,
        "comm,ip,sym",
    );
    let gzip: Vec<&String> = samples
        .iter()
        .filter(|s| s.trim_start().starts_with("gzip"))
        .collect();
    let perf_reached = gzip
        .iter()
        .filter(|s| {
            whole(
                &s.lines()
                    .filter_map(|l| l.split_whitespace().nth(1))
                    .collect::<Vec<_>>(),
            )
        })
        .count() as u64;
    let perf_total = gzip.len() as u64;
    let (ours_pct, perf_pct) = (pct(reached, total), pct(perf_reached, perf_total));
    eprintln!(
        "gzip: profiler {ours_pct:.2} % of {total} reach main, perf dwarf {perf_pct:.2} % of \
         {perf_total}; {}",
        stderr
            .lines()
            .find(|l| l.starts_with("unwind-stats"))
            .unwrap_or("")
    );
    assert!(
        total >= 200 && perf_total >= 200,
        "{total} and {perf_total} samples"
    );
    assert!(
        ours_pct >= 99.0 && ours_pct >= perf_pct - 1.0,
        "profiler {ours_pct:.2} % vs perf {perf_pct:.2} %; cut:\n{}",
        cut.join("\n")
    );
}

#[test]
fn a_50_ms_process_without_frame_pointers_has_whole_stacks() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("first-50ms");
    // Twenty processes of 50 ms (C at -O2 without frame pointers), each a new pid whose
    // tables the kernel cannot have before its first samples.
    let script = write_script(
        &dir,
        &format!(
            "for i in $(seq 20); do {} 0.05 > /dev/null; done",
            path("nofp")
        ),
    );
    let (stacks, stderr) = record_script(&dir, &["-F", "999"], &script);
    let ours = user_stacks(&stacks, "nofp");
    let (mut total, mut whole_n, mut leaf, mut chain) = (0, 0, 0, 0);
    let mut cut = Vec::new();
    for (f, n) in &ours {
        let frames: Vec<&str> = f.iter().map(String::as_str).collect();
        total += n;
        // nofp has symbols: main is named, and the whole chain ends in leaf. A sample in
        // the kernel's exec of it has no user stack yet: its stack is the kernel's alone.
        if whole(&frames) || frames.is_empty() {
            whole_n += n;
        } else if cut.len() < 5 {
            cut.push(format!("{n}: {}", frames.join(" > ")));
        }
        if frames.last() == Some(&"leaf") {
            leaf += n;
            if frames.ends_with(&["main", "outer", "middle", "leaf"]) {
                chain += n;
            }
        }
    }
    eprintln!(
        "nofp 50 ms x 30: {whole_n} of {total} whole, {chain} of {leaf} leaf samples with the \
         chain; {}",
        stderr
            .lines()
            .find(|l| l.starts_with("unwind-stats"))
            .unwrap_or("")
    );
    // 1500 at 999 Hz; fewer when the machine is busy (each run ends 50 ms after it began).
    assert!(total >= 300, "only {total} samples of nofp");
    // Issue 31 asks 99 %. The cuts were mostly a fork's child whose mappings were read
    // before its exec (its copies walked with the shell's tables until a retry); now read
    // again at once. Measured beside two helper builds (load 4-6): 99.5-100 % in 9 runs,
    // the rest the loader's lazy-binding trampoline (its CFA is in rbx, not copied).
    assert!(
        pct(whole_n, total) >= 99.0 && pct(chain, leaf) >= 99.0,
        "{whole_n} of {total} whole, {chain} of {leaf} with main > outer > middle > leaf; \
         cut:\n{}",
        cut.join("\n")
    );
}

#[test]
fn short_ls_processes_keep_their_modules_like_perf() {
    if !privileged() {
        return;
    }
    if !Path::new("/usr/bin/ls").exists() || !Path::new(PERF).exists() {
        eprintln!("SKIP: needs /usr/bin/ls and {PERF}");
        return;
    }
    let _guard = serial();
    let dir = scratch("first-ls");
    let script = write_script(
        &dir,
        "for i in $(seq 60); do /usr/bin/ls -la /usr/bin > /dev/null; done",
    );
    let (stacks, _) = record_script(&dir, &["-F", "4999", "--user"], &script);
    let ours = user_stacks(&stacks, "ls");
    let total: u64 = ours.iter().map(|(_, n)| n).sum();
    let named: u64 = ours
        .iter()
        .filter(|(f, _)| f.last().is_some_and(|leaf| !leaf.starts_with("[unknown]")))
        .map(|(_, n)| n)
        .sum();
    // perf's user-mode samples of the same loop, each leaf's module (dso).
    let samples = perf_script(
        &dir,
        &["-q", "-F", "4999", "-e", "cpu-clock:u"],
        &script,
        "comm,dso",
    );
    let lines: Vec<&str> = samples
        .iter()
        .flat_map(|s| s.lines())
        .filter(|l| l.trim_start().starts_with("ls "))
        .collect();
    let perf_total = lines.len() as u64;
    let perf_named = lines.iter().filter(|l| !l.contains("[unknown]")).count() as u64;
    let (ours_pct, perf_pct) = (pct(named, total), pct(perf_named, perf_total));
    eprintln!(
        "ls x 60: profiler names the module of {ours_pct:.2} % of {total} user leaves, perf \
         {perf_pct:.2} % of {perf_total}"
    );
    assert!(
        total >= 300 && perf_total >= 300,
        "{total} and {perf_total} samples"
    );
    let unnamed: Vec<String> = ours
        .iter()
        .filter(|(f, _)| f.last().is_none_or(|leaf| leaf.starts_with("[unknown]")))
        .take(8)
        .map(|(f, n)| format!("{n} x {}", f.join(";")))
        .collect();
    assert!(
        ours_pct >= 99.0 && ours_pct >= perf_pct - 1.0,
        "profiler {ours_pct:.2} % vs perf {perf_pct:.2} %; unnamed:\n{}",
        unnamed.join("\n")
    );
}

/// The file range of section `name` of a 64-bit little-endian ELF file.
fn section_range(elf: &[u8], name: &str) -> Option<(usize, usize)> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?));
    let shoff = u64_at(0x28)? as usize;
    let (shentsize, shnum, shstrndx) = (
        u16_at(0x3a)? as usize,
        u16_at(0x3c)? as usize,
        u16_at(0x3e)? as usize,
    );
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18)? as usize;
    (0..shnum).find_map(|i| {
        let h = header(i);
        let at = strtab + u32_at(h)? as usize;
        let end = at + elf.get(at..)?.iter().position(|&b| b == 0)?;
        (elf.get(at..end)? == name.as_bytes())
            .then(|| Some((u64_at(h + 0x18)? as usize, u64_at(h + 0x20)? as usize)))
            .flatten()
    })
}

#[test]
fn a_damaged_copy_with_the_same_build_id_leaves_the_real_stacks_alone() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("first-damaged");
    // The same program, its .eh_frame overwritten: same build id, malformed CFI.
    let real = PathBuf::from(path("nofp"));
    let mut bytes = std::fs::read(&real).expect("reading nofp");
    let (at, len) = section_range(&bytes, ".eh_frame").expect("nofp has .eh_frame");
    bytes[at..at + len].fill(0xa5);
    let evil = dir.join("evil");
    std::fs::write(&evil, &bytes).expect("writing the copy");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();

    let folded = dir.join("out.folded");
    let mut rec = Command::new(profiler_bin())
        .args(["record", "-a", "-F", "999", "-d", "60", "-o"])
        .arg(&folded)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn record");
    let stderr = wait_recording(&mut rec);
    // The damaged copy first (its tables fail), then the real program.
    for (program, secs) in [(&evil, "0.5"), (&real, "2")] {
        let status = Command::new(program)
            .arg(secs)
            .stdout(Stdio::null())
            .status()
            .expect("run");
        assert!(status.success());
    }
    // Both ran whole under the recording: end it (SIGINT: the report, then exit 130).
    // SAFETY: kill(2) of our own child's pid.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let status = rec.wait().expect("record");
    let stderr = stderr.finish();
    assert!(status.success() || status.code() == Some(130), "{stderr}");
    let stacks = read_folded(&folded);
    assert!(
        !user_stacks(&stacks, "evil").is_empty(),
        "the damaged copy was not sampled"
    );
    let mine = user_stacks(&stacks, "nofp");
    let (mut leaf, mut chain, mut cut) = (0, 0, 0);
    let mut bad = Vec::new();
    for (f, n) in &mine {
        if f.last().map(String::as_str) != Some("leaf") {
            continue;
        }
        leaf += n;
        let names: Vec<&str> = f.iter().map(String::as_str).collect();
        if names.ends_with(&["__libc_start_call_main", "main", "outer", "middle", "leaf"]) {
            chain += n;
        } else if names == ["leaf"] {
            cut += n;
        } else if bad.len() < 5 {
            bad.push(format!("{n}: {}", names.join(" > ")));
        }
    }
    eprintln!("after the damaged copy: {chain} of {leaf} leaf samples whole, {cut} cut; {stderr}");
    // The real file's table is its own: no warning names it (poisoned, it said "REAL: no
    // unwind table, frame pointers used: EVIL: malformed call frame information").
    let real_warned = format!("profiler: warning: {}:", real.display());
    assert!(
        !stderr.lines().any(|l| l.starts_with(&real_warned)),
        "the real program was given the damaged copy's table:\n{stderr}"
    );
    // A sample cut for want of a stack copy (its process's tables not loaded yet, the ring's
    // share of copies spent by other new processes on a busy host) is its address alone,
    // counted: left out here. Every other one is whole.
    assert!(chain >= 100, "only {chain} whole leaf samples of {leaf}");
    assert!(
        (chain + cut) * 100 >= leaf * 99,
        "{chain} of {leaf} whole after the damaged copy ran ({cut} cut, unwalked); \
         others:\n{}",
        bad.join("\n")
    );
}

/// The off-CPU stacks of `folded` that wait in libc's read, as text, with their times.
fn read_waits(stacks: &[(Vec<String>, u64)]) -> Vec<(String, u64)> {
    stacks
        .iter()
        // A wait: its event's frame first (a file of several events) or its marker last.
        .filter(|(f, _)| {
            f.first().is_some_and(|c| c.starts_with("off-cpu"))
                || f.last().is_some_and(|l| l == "[off-cpu]")
        })
        .filter(|(f, _)| f.iter().any(|f| f == "__GI___libc_read"))
        .map(|(f, n)| {
            let user: Vec<&str> = f
                .iter()
                .filter(|f| !f.ends_with("_[k]"))
                .map(String::as_str)
                .collect();
            (user.join(";"), *n)
        })
        .collect()
}

#[test]
fn a_thread_blocked_from_its_start_keeps_its_caller_off_cpu() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("first-blocked");
    // A new process (sh forks it: no tables in the kernel at its start) whose second thread
    // blocks in read() on a pipe as soon as it is created, for 300 ms.
    let script = write_script(&dir, &format!("{} 1 1 > /dev/null", path("waits")));
    let pprof = dir.join("out.pb.gz");
    let folded = dir.join("out.folded");
    let from_pprof = dir.join("from-pprof.folded");
    for out in [&pprof, &folded] {
        let rec = profiler(&[
            "record",
            "-F",
            "99",
            "--off-cpu",
            "-q",
            "-o",
            out.to_str().unwrap(),
            "--",
            "/bin/sh",
            script.to_str().unwrap(),
        ]);
        assert!(
            rec.status.success(),
            "{}",
            String::from_utf8_lossy(&rec.stderr)
        );
    }
    // flamegraph shows one event at a time: the waits.
    let conv = profiler(&[
        "flamegraph",
        "-i",
        pprof.to_str().unwrap(),
        "-e",
        "off-cpu",
        "--folded",
        "-o",
        from_pprof.to_str().unwrap(),
    ]);
    assert!(
        conv.status.success(),
        "{}",
        String::from_utf8_lossy(&conv.stderr)
    );
    for (what, path) in [("folded", &folded), ("pprof", &from_pprof)] {
        let waits = read_waits(&read_folded(path));
        eprintln!("{what}: {waits:?}");
        // The 300 ms read, under the function that called it, called by the thread's start.
        let whole = waits.iter().find(|(s, ns)| {
            *ns >= 250_000_000 && s.contains("start_thread;reader;wait_pipe;__GI___libc_read")
        });
        assert!(
            whole.is_some(),
            "{what}: no read wait under start_thread > reader > wait_pipe:\n{waits:#?}"
        );
    }
}

/// The `nofp` fixture (chain.c at -O2 without frame pointers) linked with 5000
/// one-instruction functions in assembly (24 bytes of CFI each), so its `.eh_frame` is over
/// the size the reader builds at once (64 KiB): the worker built its table while the
/// process's first samples waited, and those past the copy budget's share of the ring were
/// cut at their first frame (`leaf` alone; 71 and 78 of 384 leaf samples in 2 of 10 runs of
/// 0.4 s here, beside a build).
fn big_chain(dir: &Path) -> PathBuf {
    let mut pads = String::from(".text\n");
    for i in 0..5000 {
        pads.push_str(&format!("pad{i}: .cfi_startproc\n ret\n .cfi_endproc\n"));
    }
    let asm = dir.join("pads.s");
    let exe = dir.join("bigchain");
    std::fs::write(&asm, pads).unwrap();
    let nofp = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nofp.c");
    let out = Command::new("cc")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&nofp)
        .arg(&asm)
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn a_started_command_with_a_big_table_is_walked_whole_from_its_first_sample() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("first-big");
    let exe = big_chain(&dir);
    let folded = dir.join("ours.folded");
    // Three short runs: the start is what is tested, so each has one.
    let (mut leaf, mut whole_n) = (0, 0);
    let mut cut = Vec::new();
    let mut stats = Vec::new();
    for _ in 0..3 {
        let out = profiler(&[
            "record",
            "-q",
            "-F",
            "999",
            "--unwind-stats",
            "-o",
            folded.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
            "0.4",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "record failed: {stderr}");
        stats.extend(
            stderr
                .lines()
                .filter(|l| l.starts_with("unwind-stats"))
                .map(String::from),
        );
        for (f, n) in user_stacks(&read_folded(&folded), "bigchain") {
            let frames: Vec<&str> = f.iter().map(String::as_str).collect();
            if frames.last() != Some(&"leaf") {
                continue;
            }
            leaf += n;
            if frames.ends_with(&["main", "outer", "middle", "leaf"]) {
                whole_n += n;
            } else if cut.len() < 5 {
                cut.push(format!("{n}: {}", frames.join(" > ")));
            }
        }
    }
    eprintln!("bigchain 3 x 0.4 s: {whole_n} of {leaf} leaf samples whole; {stats:?}");
    assert!(leaf >= 150, "only {leaf} samples in leaf");
    assert!(
        pct(whole_n, leaf) >= 99.0,
        "{whole_n} of {leaf} leaf samples with main > outer > middle > leaf; cut:\n{}",
        cut.join("\n")
    );
}
