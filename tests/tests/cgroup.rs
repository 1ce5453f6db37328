//! Per-container counting and attribution on real cgroups: `stat --for-each-cgroup` (one set
//! of per-CPU counters for every cgroup, deltas attributed at context switches) checked
//! against the fixtures' known page faults and against `perf stat --for-each-cgroup` on the
//! same run; `track -G`; per-cgroup flame graphs of a system-wide recording; and the number of
//! perf events staying flat as cgroups are added.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read, Write},
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, ChildStdout, Command, Stdio},
};

use profiler_tests::*;

/// The profiler's perf event descriptors, seen from outside (/proc/PID/fd).
fn perf_event_fds(pid: u32) -> usize {
    held(pid).map_or(0, |h| h.perf_events)
}

fn online_cpus() -> usize {
    profiler::host::online_cpus().expect("online CPUs").len()
}

/// Starts `profiler ARGS` (per-cgroup counting) with stdout piped and returns once it has
/// said on stderr that counting has begun.
fn start_profiler(args: &[&str]) -> (Child, BufReader<ChildStdout>) {
    let mut child = profiler_command()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the profiler");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).expect("reading stderr");
    if !line.contains("perf events") {
        err.read_to_string(&mut line).ok();
        panic!("profiler {args:?} did not start counting: {line}");
    }
    // Keep draining stderr so the profiler never blocks on it.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

/// Sends SIGINT and collects the rest of stdout; the run must end with status 130 (128 +
/// SIGINT, its totals printed).
fn interrupt(mut child: Child, mut out: BufReader<ChildStdout>) -> String {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "profiler ended with {status}");
    rest
}

/// `total` rows: cgroup path -> values.
fn totals(table_text: &str) -> BTreeMap<String, Vec<i64>> {
    table(table_text)
        .into_iter()
        .filter(|r| r.is(0, "total"))
        .map(|r| {
            let values = (3..r.fields.len()).map(|i| r.num(i)).collect();
            (r.fields[1].clone(), values)
        })
        .collect()
}

/// Runs `program args` inside `cgroup` from its first instruction (the child joins the
/// cgroup between fork and exec).
fn run_in(cgroup: &TestCgroup, program: &str, args: &[&str]) -> Child {
    let procs = cgroup.path.join("cgroup.procs");
    let mut cmd = Command::new(path(program));
    cmd.args(args).stdout(Stdio::null());
    // SAFETY: the closure only calls open/write/close (async-signal-safe) between fork and
    // exec; the path is allocated before the fork.
    unsafe {
        let procs = std::ffi::CString::new(procs.to_str().unwrap()).unwrap();
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let rc = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
            if rc != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().expect("starting a fixture in its cgroup")
}

/// The cgroup's path relative to the cgroup v2 root, as the tools print it.
fn rel(cg: &TestCgroup) -> String {
    let root = cgroup2_root().unwrap();
    format!("/{}", cg.path.strip_prefix(&root).unwrap().display())
}

/// `perf stat -a --for-each-cgroup` started with its events disabled, enabled through its
/// control fifo once it is ready (it acknowledges), so it measures the same run as ours.
struct PerfStat {
    child: Child,
}

impl PerfStat {
    fn start(event: &str, cgroups: &[String]) -> PerfStat {
        let dir = scratch("perf-ctl");
        let (ctl, ack) = (dir.join("ctl"), dir.join("ack"));
        for fifo in [&ctl, &ack] {
            let _ = std::fs::remove_file(fifo);
            let st = Command::new("mkfifo").arg(fifo).status().unwrap();
            assert!(st.success(), "mkfifo");
        }
        let names: Vec<&str> = cgroups.iter().map(|c| c.trim_start_matches('/')).collect();
        let child = Command::new("perf")
            .args(["stat", "-a", "-x,", "-e", event, "--for-each-cgroup"])
            .arg(names.join(","))
            .arg("--delay=-1")
            .arg(format!(
                "--control=fifo:{},{}",
                ctl.display(),
                ack.display()
            ))
            .stderr(Stdio::piped())
            .spawn()
            .expect("running perf stat (.ci/run installs linux-perf)");
        // Both opens wait for perf to open its ends.
        let mut ctl_w = std::fs::OpenOptions::new().write(true).open(&ctl).unwrap();
        let mut ack_r = BufReader::new(std::fs::File::open(&ack).unwrap());
        ctl_w.write_all(b"enable\n").unwrap();
        let mut line = String::new();
        ack_r.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ack", "perf stat did not acknowledge enable");
        PerfStat { child }
    }

    /// Interrupts perf stat and returns its count per cgroup name (relative, no leading /).
    fn stop(mut self) -> BTreeMap<String, i64> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        self.child.wait().unwrap();
        err.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                let count = f.first()?.parse().ok()?;
                Some((f.get(3)?.to_string(), count))
            })
            .collect()
    }
}

#[test]
fn three_cgroups_count_their_own_page_faults_as_perf_stat_does() {
    if !privileged() {
        return;
    }
    let _s = serial();
    // (pages per thread, threads) for each cgroup.
    let work = [(10000u64, 2u64), (20000, 2), (30000, 1)];
    let cgs: Vec<TestCgroup> = (0..3)
        .map(|i| TestCgroup::create(&format!("c{i}")))
        .collect();
    let names: Vec<String> = cgs.iter().map(rel).collect();
    let list = names.join(",");
    // Kernel-mode faults too (`sys`), as perf stat counts them.
    let (ours, out) = start_profiler(&[
        "stat",
        "-c",
        "page-faults,sys",
        &format!("--for-each-cgroup={list}"),
        "1",
    ]);
    let perf = PerfStat::start("page-faults", &names);
    let mut children: Vec<Child> = cgs
        .iter()
        .zip(work)
        .map(|(cg, (n, t))| run_in(cg, "touch", &[&n.to_string(), &t.to_string()]))
        .collect();
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
    let rest = interrupt(ours, out);
    let theirs = perf.stop();
    let ours = totals(&rest);
    for ((name, (n, t)), _) in names.iter().zip(work).zip(&cgs) {
        let count = ours
            .get(name)
            .unwrap_or_else(|| panic!("no total for {name}: {rest}"))[0];
        let perf_count = theirs[name.trim_start_matches('/')];
        eprintln!("{name}: touch {n} {t}: ours {count}, perf stat {perf_count}");
        // N×T plus the start-up constant (exec, ld.so, libc, thread stacks: 50 to 150).
        let expected = (n * t) as i64 + 90;
        assert!(
            (count - expected).abs() * 100 <= expected,
            "{name}: {count} faults, expected {expected} ± 1%"
        );
        assert!(count >= (n * t) as i64, "{name}: {count} < {}", n * t);
        assert!(
            (count - perf_count).abs() * 100 <= perf_count,
            "{name}: ours {count} vs perf stat {perf_count}"
        );
    }
}

#[test]
fn track_g_counts_one_cgroup_and_json_names_it() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let cg = TestCgroup::create("track");
    let other = TestCgroup::create("other");
    let (ours, out) = start_profiler(&[
        "track",
        "--json",
        "-T",
        "0",
        "-c",
        "page-faults",
        "-G",
        cg.path.to_str().unwrap(),
    ]);
    assert_eq!(
        perf_event_fds(ours.id()),
        online_cpus(),
        "one event per CPU"
    );
    let mut a = run_in(&cg, "touch", &["4000", "1"]);
    let mut b = run_in(&other, "touch", &["9000", "1"]);
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    let text = interrupt(ours, out);
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect();
    assert_eq!(rows.len(), 1, "-T 0: only the total row: {text}");
    let row = &rows[0];
    assert_eq!(row["total"], true);
    assert_eq!(row["cgroup"], rel(&cg));
    assert_eq!(row["counters"][0]["event"], "page-faults");
    let v = row["counters"][0]["value"].as_i64().unwrap();
    // User-mode faults of touch 4000 1 (the other cgroup's 9000 are not there).
    assert!((4000..4000 + 150).contains(&v), "{v} faults");
    let missing = profiler(&["track", "-c", "page-faults", "-G", "/no-such-cgroup-here"]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("cgroup /no-such-cgroup-here does not exist"),
        "{err}"
    );
}

#[test]
fn perf_events_do_not_grow_with_the_number_of_cgroups() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let cgs: Vec<TestCgroup> = (0..50)
        .map(|i| TestCgroup::create(&format!("many{i:02}")))
        .collect();
    let before = our_programs();
    let prefix = rel(&cgs[0]).trim_end_matches("00").to_string();
    let mut seen = Vec::new();
    for pattern in [rel(&cgs[7]), format!("{prefix}*")] {
        let arg = format!("--for-each-cgroup={pattern}");
        let (ours, out) =
            start_profiler(&["stat", "-c", "page-faults,context-switches", &arg, "60"]);
        seen.push(perf_event_fds(ours.id()));
        let mut a = run_in(&cgs[7], "touch", &["1500", "1"]);
        let mut b = run_in(&cgs[42], "touch", &["2500", "1"]);
        assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
        let t = totals(&interrupt(ours, out));
        let faults = |i: usize| t.get(&rel(&cgs[i])).map(|v| v[0]);
        assert!(
            faults(7).is_some_and(|f| (1500..1650).contains(&f)),
            "{t:?}"
        );
        if pattern.ends_with('*') {
            assert_eq!(t.len(), 50, "a total row per cgroup: {t:?}");
            assert!(faults(42).is_some_and(|f| (2500..2650).contains(&f)));
            assert_eq!(faults(13), Some(0), "an idle cgroup counts nothing");
        }
    }
    assert_eq!(
        settle_programs(|now| *now == before),
        before,
        "cg_switch detached at exit"
    );
    // Two events on every CPU, for one cgroup as for fifty.
    assert_eq!(
        seen,
        vec![2 * online_cpus(); 2],
        "perf events for 1 and 50 cgroups"
    );
}

#[test]
fn each_containers_flame_graph_holds_only_its_own_workload() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let a = TestCgroup::create("flame-a");
    let b = TestCgroup::create("flame-b");
    let dir = scratch("cgroup-flame");
    let file = dir.join("all.pb.gz");
    let mut rec = profiler_command()
        .args(["record", "-a", "-F", "499", "-d", "600", "-q", "-o"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The workloads start once the perf events and links are in place, and the recording
    // ends when they have (SIGINT), however long a loaded host took to load the programs.
    wait_attached(&mut rec);
    let mut x = run_in(&a, "chain", &["1.5"]);
    let mut y = run_in(&b, "spin", &["1", "1.5"]);
    assert!(x.wait().unwrap().success() && y.wait().unwrap().success());
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let out = rec.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "record: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let by = run_ok(&["report", "-i", file.to_str().unwrap(), "--by", "cgroup"]);
    assert!(by.contains(&rel(&a)) && by.contains(&rel(&b)), "{by}");
    for (cg, comm, own, foreign) in [(&a, "chain", "leaf", "spin"), (&b, "spin", "run", "chain")] {
        let folded = dir.join("one.folded");
        run_ok(&[
            "flamegraph",
            "-i",
            file.to_str().unwrap(),
            "--cgroup",
            &rel(cg),
            "--folded",
            "-o",
            folded.to_str().unwrap(),
        ]);
        let stacks = read_folded(Path::new(&folded));
        assert!(!stacks.is_empty());
        assert!(
            stacks.iter().all(|(f, _)| !f.iter().any(|x| x == foreign)),
            "{own}'s cgroup has {foreign}'s stacks"
        );
        // Samples the ring lost (a starved reader on a loaded host) are counted, in their
        // own `[lost samples]` frame: they are no other workload's, so not in the share.
        let sum = |keep: &dyn Fn(&[String]) -> bool| -> u64 {
            stacks.iter().filter(|(f, _)| keep(f)).map(|(_, n)| n).sum()
        };
        let total = sum(&|f| !f.iter().any(|x| x == "[lost samples]"));
        let mine = sum(&|f| f.first().is_some_and(|c| c == comm));
        let whole = sum(&|f| f.iter().any(|x| x == own));
        assert!(
            total > 0,
            "{own}'s cgroup has only lost samples: {stacks:?}"
        );
        // The cgroup's samples are its workload's (the test's fork before its exec: a few).
        assert!(
            mine * 10 >= total * 9,
            "{comm}: {mine} of {total} samples: {:?}",
            &stacks[..stacks.len().min(5)]
        );
        // Most reach the workload's function; a process's first samples recorded system-wide
        // on a busy host can find the ring's share of stack copies spent and be cut (counted:
        // a fresh CI clone had 198 of 306 whole; a developer machine 92-100 %).
        assert!(
            whole * 2 >= mine,
            "{own}: {whole} of {mine} samples whole: {:?}",
            &stacks[..stacks.len().min(5)]
        );
        let svg = dir.join("one.svg");
        run_ok(&[
            "flamegraph",
            "-i",
            file.to_str().unwrap(),
            "--cgroup",
            &rel(cg),
            "-o",
            svg.to_str().unwrap(),
        ]);
        let svg = std::fs::read_to_string(svg).unwrap();
        assert!(svg.contains(own) && !svg.contains(&format!(">{foreign}")));
    }
}
