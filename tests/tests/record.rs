//! `profiler record` end to end: real perf events, the real eBPF program, real workloads.

use std::process::{Command, Stdio};

use profiler_tests::*;

// `record -- chain` with frame pointers and with unwind tables, and `record -a`, are the
// scenarios `record-fp`, `record-dwarf` and `record-a` (profiler-scenarios), run by
// tests/scenarios.rs here and in every kernel guest.

/// Samples of `comm` whose innermost user frame is `leaf`, and all samples of `comm`.
fn leaf_share(stacks: &[(Vec<String>, u64)], comm: &str) -> (u64, u64) {
    let mine: Vec<_> = stacks.iter().filter(|(f, _)| f[0] == comm).collect();
    let total = mine.iter().map(|(_, n)| n).sum();
    let leaf = mine
        .iter()
        .filter(|(f, _)| innermost_user(f) == Some("leaf"))
        .map(|(_, n)| n)
        .sum();
    (leaf, total)
}

/// Whether the samples whose innermost user frame is `leaf` carry main > outer > middle >
/// leaf: 99 % of them, the share issue 31 asks of a process's first samples. A sample taken
/// while its process's tables are still being published, when its stack copy is refused
/// (the process's budget or the ring's share spent), keeps the frames walked so far: the
/// likely cause of the 1 of about 1000 samples kept as `leaf` alone in a CI run on a busy
/// host.
fn assert_full_chain(stacks: &[(Vec<String>, u64)]) {
    let (mut leaf, mut chain) = (0, 0);
    let mut cut = Vec::new();
    for (frames, n) in stacks
        .iter()
        .filter(|(f, _)| innermost_user(f) == Some("leaf"))
    {
        let user: Vec<&str> = frames
            .iter()
            .filter(|f| !f.ends_with("_[k]"))
            .map(String::as_str)
            .collect();
        leaf += n;
        if user.ends_with(&["main", "outer", "middle", "leaf"]) {
            chain += n;
        } else if cut.len() < 5 {
            cut.push(format!("{n}: {frames:?}"));
        }
    }
    assert!(
        chain * 100 >= leaf * 99,
        "{chain} of {leaf} leaf samples with main > outer > middle > leaf; cut:\n{}",
        cut.join("\n")
    );
}

#[test]
fn sleeping_process_gets_a_handful_of_samples() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let idle = fixture("idle");
    let out = profiler(&["record", "-F", "999", "--", idle.to_str().unwrap(), "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its start-up is CPU it really used (the loader; before that, the exec tearing down
    // the address space of the profiler's fork): 1 sample here, 7 once in a CI rehearsal on
    // a busy host. A sleeping second sampled as wall time would be 999.
    let samples = reported_samples(&String::from_utf8_lossy(&out.stdout));
    assert!(
        samples <= 15,
        "an idle process got {samples} samples at 999 Hz"
    );
}

#[test]
fn running_process_by_pid_only_that_process() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("pid");
    let folded = dir.join("pid.folded");
    let mut target = Command::new(fixture("chain"))
        .arg("4")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // A second busy process that must not appear: the filter is in the kernel.
    let mut other = Command::new(fixture("chain"))
        .arg("4")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("both chains to run", 10, || {
        (runs(target.id(), "chain") && runs(other.id(), "chain")).then_some(())
    });
    let pid = target.id().to_string();
    let rec = profiler_command()
        .args(["record", "-F", "499", "-d", "1.5", "-p", &pid, "-o"])
        .arg(&folded)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn record");
    // The CPU the target gets from the moment the program is loaded (the set-up before it,
    // which a busy host makes long, is not sampled) to the end: a busy host gives it less.
    wait_for("the recording to attach", 30, || {
        (!our_programs().is_empty()).then_some(())
    });
    let cpu_before = cpu_seconds(target.id());
    let out = rec.wait_with_output().expect("record");
    let cpu = cpu_seconds(target.id()) - cpu_before;
    let _ = (target.kill(), other.kill(), target.wait(), other.wait());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stacks = read_folded(&folded);
    let (leaf, total) = leaf_share(&stacks, "chain");
    // 499 Hz of the CPU time it got (at most 1.5 s of it; the set-up's share is not sampled).
    let expected = (cpu.min(1.5) * 499.0) as u64;
    assert!(
        total >= 100 && total * 100 >= expected * 50,
        "only {total} samples for {cpu:.2} s of CPU:\n{stdout}"
    );
    assert!(leaf * 100 >= total * 90, "leaf {leaf} of {total}");
    assert_full_chain(&stacks);
    // Both processes are busy on 2 CPUs; the other one's samples were filtered in the kernel.
    let filtered = summary_field(&stdout, "filtered in kernel ").expect("filtered count");
    assert!(
        filtered >= 300,
        "the other busy process should have been filtered: {stdout}"
    );
}

#[test]
fn sigint_still_reports_and_detaches() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let before = our_programs();
    // Something to sample on an otherwise idle machine.
    let mut busy = Command::new(fixture("spin"))
        .args(["1", "30"])
        .spawn()
        .unwrap();
    let child = profiler_command()
        .args(["record", "-a", "-F", "99", "-d", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the program to be loaded while recording", 20, || {
        (our_programs().len() == before.len() + RECORD_PROGRAMS).then_some(())
    });
    wait_for("the kernel to submit a few samples", 20, || {
        (kernel_records_submitted(child.id()) >= 5).then_some(())
    });
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = busy.kill();
    let _ = busy.wait();
    assert!(reported_samples(&String::from_utf8_lossy(&out.stdout)) > 0);
    assert_eq!(
        our_programs(),
        before,
        "a BPF program outlived the profiler"
    );
}

#[test]
fn any_catalogue_event_by_period_with_user_only_stacks() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("pf");
    let folded = dir.join("pf.folded");
    let touch = fixture("touch");
    let out = profiler(&[
        "record",
        "-e",
        "page-faults",
        "-c",
        "100",
        "--user",
        "-o",
        folded.to_str().unwrap(),
        "--",
        touch.to_str().unwrap(),
        "20000",
        "1",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("samples of page-faults every 100 events"),
        "{stdout}"
    );
    let stacks = read_folded(&folded);
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let in_run: u64 = stacks
        .iter()
        .filter(|(f, _)| innermost_user(f) == Some("run"))
        .map(|(_, n)| n)
        .sum();
    // One sample per 100 faults of the per-CPU counters, standing for those 100: ~200
    // samples, 20000 faults, for the 20000 touches.
    assert!(
        in_run.is_multiple_of(100),
        "{in_run} faults: a hundred a sample"
    );
    assert!(
        (19_000..=21_500).contains(&in_run),
        "{in_run} faults in run:\n{stdout}"
    );
    assert!(in_run * 100 >= total * 90, "{in_run} of {total}");
    assert!(
        stacks
            .iter()
            .all(|(f, _)| f.iter().all(|x| !x.ends_with("_[k]"))),
        "--user: no kernel frames"
    );
}

#[test]
fn hardware_events_fail_clearly_without_a_pmu() {
    if !privileged() || std::path::Path::new("/sys/bus/event_source/devices/cpu").exists() {
        return;
    }
    let _guard = serial();
    for event in ["cycles", "PAPI_tot_ins", "L1-dcache-load-misses", "r01c2"] {
        let out = profiler(&["record", "-e", event, "-a", "-d", "1"]);
        assert_eq!(out.status.code(), Some(1), "{event}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("no hardware PMU"), "{event}: {err}");
    }
    let out = profiler(&["record", "-e", "cyles", "-a", "-d", "1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("did you mean cycles"));
}

#[test]
fn tid_and_cgroup_targets_sample_only_their_tasks() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("targets");
    // Long enough to outlive both recordings on a loaded machine (a 1.5 s `record -t` took
    // 3-5 s of wall time there); killed when the test ends.
    let chain = KillOnDrop(
        Command::new(fixture("chain"))
            .arg("60")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let other = KillOnDrop(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap(),
    );
    wait_for("chain and sh to run", 10, || {
        (runs(chain.0.id(), "chain") && runs(other.0.id(), "sh")).then_some(())
    });
    let check = |args: &[&str], name: &str| {
        let folded = dir.join(format!("{name}.folded"));
        let mut all = args.to_vec();
        all.extend(["-F", "499", "-d", "1.5", "-o", folded.to_str().unwrap()]);
        let cpu_before = cpu_seconds(chain.0.id());
        let out = profiler(&all);
        let cpu = cpu_seconds(chain.0.id()) - cpu_before;
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stacks = read_folded(&folded);
        let total: u64 = stacks.iter().map(|(_, n)| n).sum();
        // 750 on an idle machine; chain shares the CPUs with the spinning sh (and, on a busy
        // machine, with everything else: 148 samples seen while two compilers ran). What
        // this test checks is whose samples they are, so a real profile is enough.
        assert!(
            total >= 20,
            "{name}: {total} samples ({cpu:.2} s of CPU while the profiler ran)"
        );
        assert!(
            stacks.iter().all(|(f, _)| f[0] == "chain"),
            "{name}: only chain: {stacks:?}"
        );
        let (leaf, total) = leaf_share(&stacks, "chain");
        assert!(leaf * 100 >= total * 90, "{name}: leaf {leaf} of {total}");
    };
    check(&["record", "-t", &chain.0.id().to_string()], "tid");
    let cg = TestCgroup::create("record");
    cg.add(chain.0.id());
    check(&["record", "-G", cg.path.to_str().unwrap()], "cgroup");
    drop((chain, other));
    let out = profiler(&["record", "-G", "/nonexistent-cgroup", "-d", "1"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_started_commands_children_are_profiled_too() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("children");
    let folded = dir.join("children.folded");
    let chain = fixture("chain");
    // The shell only waits; the CPU time is in two chain processes it forks.
    let script = format!("{c} 1 >/dev/null; {c} 1 >/dev/null", c = chain.display());
    let out = profiler(&[
        "record",
        "-F",
        "499",
        "-o",
        folded.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("warning"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stacks = read_folded(&folded);
    let (leaf, total) = leaf_share(&stacks, "chain");
    assert!(total >= 200, "the children's samples: {total}");
    assert!(leaf * 100 >= total * 90, "leaf {leaf} of {total}");
    assert_full_chain(&stacks);
}

#[test]
fn cpu_list_samples_only_those_cpus() {
    if !privileged() || aya::util::online_cpus().map_or(true, |c| c.len() < 2) {
        return;
    }
    let _guard = serial();
    let dir = scratch("cpus");
    let mut chain = KillOnDrop(
        Command::new("taskset")
            .args(["-c", "1", fixture("chain").to_str().unwrap(), "60"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("chain to run", 10, || {
        runs(chain.id(), "chain").then_some(())
    });
    let run = |cpu: &str| {
        let folded = dir.join(format!("cpu{cpu}.folded"));
        let out = profiler(&[
            "record",
            "-a",
            "-C",
            cpu,
            "-F",
            "199",
            "-d",
            "1",
            "-o",
            folded.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        read_folded(&folded)
    };
    let (on1, on0) = (run("1"), run("0"));
    let _ = (chain.kill(), chain.wait());
    let (leaf, total) = leaf_share(&on1, "chain");
    // At least a tenth of the CPU's 199 samples: chain shares CPU 1 with whatever else runs
    // there (62 of 199 beside a release build).
    assert!(
        total >= 20 && leaf * 100 >= total * 90,
        "cpu 1 runs chain: {leaf} of {total}"
    );
    assert!(
        on0.iter().all(|(f, _)| f[0] != "chain"),
        "chain is pinned to cpu 1: {on0:?}"
    );
    let out = profiler(&["record", "-a", "-C", "4096", "-d", "1"]);
    assert_eq!(out.status.code(), Some(2));
}
