//! Counting scenarios: `list`, `stat` per cgroup, `track` per thread, and libcpc's C examples.

use std::{
    io::{BufRead, BufReader, Read},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use crate::{
    env::{Cpu, Env},
    run::{Failure, Outcome, ensure, first_line, program},
};

/// `profiler list`: the interface, the software events and the kernel features line.
pub fn list(env: &Env) -> Outcome {
    let out = env.run_profiler(&["list"])?;
    for needle in ["counter interface: ", "page-faults", "cpu-clock"] {
        if !out.contains(needle) {
            return Err(Failure::with(
                format!("`profiler list` lacks {needle:?}"),
                &out,
            ));
        }
    }
    let features = out
        .lines()
        .find(|l| l.starts_with("kernel features:"))
        .map(|f| format!("; {f}"))
        .unwrap_or_default();
    Ok(format!("{} lines{features}", out.lines().count()))
}

/// The cgroup v2 mount point.
fn cgroup2_root() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mount_point = left.split(' ').nth(4)?;
        right
            .starts_with("cgroup2 ")
            .then(|| PathBuf::from(mount_point))
    })
}

/// A child cgroup, removed on drop.
struct Cgroup(PathBuf);

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Starts `program args` inside cgroup `cg` from its first instruction.
fn spawn_in(cg: &Path, env: &Env, program: &str, args: &[&str]) -> Result<Child, Failure> {
    let procs = std::ffi::CString::new(cg.join("cgroup.procs").to_str().unwrap_or_default())
        .map_err(|e| Failure::new(format!("cgroup path: {e}")))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(&env.scratch)
        .stdout(Stdio::null());
    // SAFETY: between fork and exec the closure only calls open/write/close, which are
    // async-signal-safe; the path was allocated before the fork.
    unsafe {
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
    cmd.spawn()
        .map_err(|e| Failure::new(format!("starting {program}: {e}")))
}

/// Reads `from` to the end in a thread (so the child never blocks on a full pipe).
fn collect(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = from.read_to_string(&mut s);
        s
    })
}

/// `stat --for-each-cgroup` on two cgroups running `touch` with known page counts: each
/// cgroup's total is its pages plus the start-up faults of exec, ld.so and libc.
pub fn stat_cgroups(env: &Env) -> Outcome {
    let root = cgroup2_root().ok_or_else(|| Failure::new("no cgroup v2 mount"))?;
    let work = [("kernels-a", 10000u64, 2u64), ("kernels-b", 30000, 1)];
    let cgs: Vec<Cgroup> = work
        .iter()
        .map(|(name, _, _)| {
            let p = root.join(format!("{name}-{}", std::process::id()));
            std::fs::create_dir_all(&p).map(|()| Cgroup(p))
        })
        .collect::<Result<_, _>>()
        .map_err(|e| Failure::new(format!("creating cgroups: {e}")))?;
    let rel: Vec<String> = cgs
        .iter()
        .map(|c| format!("/{}", c.0.strip_prefix(&root).unwrap_or(&c.0).display()))
        .collect();
    let mut child = env
        .profiler_command()
        .args([
            "stat",
            "-c",
            "page-faults",
            &format!("--for-each-cgroup={}", rel.join(",")),
            "1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failure::new(format!("starting profiler stat: {e}")))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(Failure::new("profiler stat without its pipes"));
    };
    let stdout = collect(stdout);
    // The first stderr line says the counters are open; wait for it with a deadline (the
    // guests' emulated CPUs take seconds to start the profiler).
    let (tx, rx) = mpsc::channel();
    let stderr = std::thread::spawn(move || {
        let mut err = BufReader::new(stderr);
        let mut first = String::new();
        let _ = err.read_line(&mut first);
        let _ = tx.send(first.clone());
        let _ = err.read_to_string(&mut first);
        first
    });
    let started = rx
        .recv_timeout(Duration::from_secs(60))
        .is_ok_and(|l| l.contains("perf events"));
    if !started {
        let _ = child.kill();
        let _ = child.wait();
        let said = stderr.join().unwrap_or_default();
        return Err(Failure::with(
            format!("stat did not start counting: {}", first_line(&said)),
            &said,
        ));
    }
    let mut results = Vec::new();
    for (cg, (_, pages, threads)) in cgs.iter().zip(work) {
        let touch = env.fixture("touch");
        let waited = spawn_in(
            &cg.0,
            env,
            &touch,
            &[&pages.to_string(), &threads.to_string()],
        )
        .and_then(|mut c| {
            c.wait()
                .map_err(|e| Failure::new(format!("waiting for touch: {e}")))
        });
        match waited {
            Ok(status) => results.push(status.success()),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        }
    }
    // SAFETY: kill(2) on the child we started, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child
        .wait()
        .map_err(|e| Failure::new(format!("waiting for profiler stat: {e}")))?;
    let text = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    // Stopped by SIGINT, stat prints what it counted and exits 128 + 2 (as perf stat).
    if status.code() != Some(128 + libc::SIGINT) || results.contains(&false) {
        return Err(Failure::with(
            format!("stat exited with {status} (expected 130 after SIGINT), touch ok: {results:?}"),
            &format!("{text}\n{stderr}"),
        ));
    }
    let mut summary = Vec::new();
    for (name, (_, pages, threads)) in rel.iter().zip(work) {
        let count = text
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.first() == Some(&"total") && f.get(1) == Some(&name.as_str()))
            .and_then(|f| f.get(3)?.parse::<u64>().ok())
            .ok_or_else(|| Failure::with(format!("no total row for {name}"), &text))?;
        let expected = pages * threads;
        // Start-up faults (exec, ld.so, libc, thread stacks) are 50 to 150.
        if !(expected..expected + 250).contains(&count) {
            return Err(Failure::with(
                format!("{name}: {count} faults, expected {expected} + start-up (< 250)"),
                &text,
            ));
        }
        summary.push(format!("{expected}+{}", count - expected));
    }
    Ok(format!("faults per cgroup {}", summary.join(", ")))
}

/// `track -c page-faults -- touch 5000 3`: each worker's exit row has its 5000 pages.
pub fn track_page_faults(env: &Env) -> Outcome {
    let touch = env.fixture("touch");
    let out = env.run_profiler(&["track", "-c", "page-faults", "--", &touch, "5000", "3"])?;
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| {
            l.split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect()
        })
        .collect();
    let value = |r: &Vec<&str>| r.get(3).and_then(|v| v.parse::<u64>().ok());
    let exits: Vec<u64> = rows
        .iter()
        .filter(|r| r.get(2) == Some(&"lwp_exit"))
        .filter_map(value)
        .collect();
    if exits.len() != 3 || exits.iter().any(|f| !(5000..5050).contains(f)) {
        return Err(Failure::with(
            format!("lwp_exit faults {exits:?}, expected three of 5000..5050"),
            &out,
        ));
    }
    let total = rows
        .iter()
        .find(|r| r.get(2) == Some(&"exit"))
        .and_then(value)
        .ok_or_else(|| Failure::with("no exit row", &out))?;
    let workers: u64 = exits.iter().sum();
    if !(total > workers && total - workers < 500) {
        return Err(Failure::with(
            format!("exit row {total} is not workers {workers} + main thread"),
            &out,
        ));
    }
    Ok(format!("workers {exits:?}, process {total}"))
}

/// libcpc(3CPC) Example 1: page faults of each iteration exactly 10 × iteration, task-clock
/// counting each iteration (all of them together on an emulated CPU, whose clock may tick
/// too coarsely for one short iteration).
pub fn example1(env: &Env) -> Outcome {
    let out = program(Command::new(env.fixture("example1")).current_dir(&env.scratch))?;
    let rows: Vec<(u64, u64, u64)> = out
        .lines()
        .filter_map(|line| {
            let (iter, rest) = line.split_once(':')?;
            let mut v = rest.split_whitespace().map(|x| x.parse::<u64>().ok());
            Some((iter.trim().parse().ok()?, v.next()??, v.next()??))
        })
        .collect();
    if rows.len() != 20 || out.lines().count() != 20 {
        return Err(Failure::with(
            format!("{} rows, expected 20", rows.len()),
            &out,
        ));
    }
    for (k, &(iter, faults, task_ns)) in rows.iter().enumerate() {
        if iter != k as u64 + 1 || faults != 10 * iter {
            return Err(Failure::with(
                format!("iteration {iter}: {faults} faults (expected {})", 10 * iter),
                &out,
            ));
        }
        if env.cpu == Cpu::Native && task_ns == 0 {
            return Err(Failure::with(
                format!("task-clock counted nothing in iteration {iter}"),
                &out,
            ));
        }
    }
    let task_ns: u64 = rows.iter().map(|r| r.2).sum();
    if task_ns == 0 {
        return Err(Failure::with("task-clock counted nothing", &out));
    }
    Ok(format!(
        "20 iterations, page faults exactly 10 x iteration, task-clock {task_ns} ns"
    ))
}

/// libcpc(3CPC) Example 2: an overflow every 1000 page faults (20 × 500 pages: 10), the set
/// frozen at 0 and restarted from the handler, always at the same instruction (the
/// page-touching store).
pub fn example2(env: &Env) -> Outcome {
    let out = program(Command::new(env.fixture("example2")).current_dir(&env.scratch))?;
    let lines: Vec<&str> = out.lines().collect();
    ensure(
        lines.len() == 21 && lines[20] == "10 overflows",
        "expected 20 lines and `10 overflows`",
        &out,
    )?;
    let mut pcs = Vec::new();
    for pair in lines[..20].chunks(2) {
        ensure(
            pair[0].starts_with("lwp") && pair[0].contains(" - si_addr (nil) ucontext: %pc 0x"),
            "handler line `lwp... - si_addr (nil) ucontext: %pc 0x...`",
            &out,
        )?;
        ensure(
            pair[1] == "0x0",
            "the frozen value is 0x0 (the counter wrapped past 0)",
            &out,
        )?;
        pcs.push(
            pair[0]
                .split("%pc ")
                .nth(1)
                .and_then(|s| s.split(' ').next()),
        );
    }
    ensure(
        pcs.windows(2).all(|w| w[0] == w[1]),
        "every overflow at one pc",
        &out,
    )?;
    Ok("10 overflows, frozen at 0x0, restarted, one pc".into())
}
