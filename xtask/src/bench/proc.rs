//! Running the measured processes: wall time, peak RSS and CPU time from wait4(2), output to
//! files (so a chatty tool never blocks on a full pipe), background runs stopped by a signal.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use crate::util::show;

/// A finished process.
#[derive(Debug)]
pub struct Finished {
    pub command: String,
    pub wall_s: f64,
    /// When it was reaped, CLOCK_MONOTONIC seconds (the clock `work` prints its end in).
    pub ended_s: f64,
    pub cpu_s: f64,
    pub stdout: String,
    pub stderr: String,
}

/// A process started in the background.
pub struct Running {
    pid: i32,
    command: String,
    started: Instant,
    out: PathBuf,
    err: PathBuf,
}

/// Starts `cmd` with stdout and stderr going to `<log>.out` and `<log>.err`.
pub fn start(cmd: &mut Command, log: &Path) -> anyhow::Result<Running> {
    let out = log.with_extension("out");
    let err = log.with_extension("err");
    let command = show(cmd);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out)?)
        .stderr(fs::File::create(&err)?)
        .spawn()
        .with_context(|| format!("cannot start {command}"))?;
    // The child is reaped by wait4 below, not by std (which would lose the rusage).
    let pid = child.id() as i32;
    Ok(Running {
        pid,
        command,
        started: Instant::now(),
        out,
        err,
    })
}

/// Runs `cmd` to its end; fails unless it exits with one of `ok` codes.
pub fn run(cmd: &mut Command, log: &Path, ok: &[i32]) -> anyhow::Result<Finished> {
    start(cmd, log)?.wait(ok)
}

/// [`run`], also noting when `file` appears (CLOCK_MONOTONIC seconds; `None` if the process
/// ended without it). The caller removes `file` first; writers that rename a finished
/// temporary file into place make it appear whole.
pub fn run_until_file(
    cmd: &mut Command,
    log: &Path,
    ok: &[i32],
    file: &Path,
) -> anyhow::Result<(Finished, Option<f64>)> {
    let running = start(cmd, log)?;
    let stat = format!("/proc/{}/stat", running.pid);
    let appeared = loop {
        if file.exists() {
            break Some(monotonic_s());
        }
        let state = fs::read_to_string(&stat).unwrap_or_default();
        if state
            .rsplit_once(") ")
            .is_none_or(|(_, r)| r.starts_with('Z'))
        {
            break file.exists().then(monotonic_s);
        }
        sleep(Duration::from_millis(1));
    };
    Ok((running.wait(ok)?, appeared))
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn signal(&self, sig: Signal) -> anyhow::Result<()> {
        kill(Pid::from_raw(self.pid), sig).with_context(|| format!("kill {sig} {}", self.command))
    }

    /// Sends `sig` and waits for the end.
    pub fn stop(self, sig: Signal, ok: &[i32]) -> anyhow::Result<Finished> {
        self.signal(sig)?;
        self.wait(ok)
    }

    pub fn wait(self, ok: &[i32]) -> anyhow::Result<Finished> {
        let mut status = 0;
        // SAFETY: rusage is plain data the kernel fills in; the pid is our own unreaped child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 on our child with valid pointers to locals.
        let rc = unsafe { libc::wait4(self.pid, &mut status, 0, &mut usage) };
        if rc != self.pid {
            bail!(
                "wait4({}) for {}: {}",
                self.pid,
                self.command,
                std::io::Error::last_os_error()
            );
        }
        let wall_s = self.started.elapsed().as_secs_f64();
        let ended_s = monotonic_s();
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        let done = Finished {
            command: self.command,
            wall_s,
            ended_s,
            cpu_s: tv(usage.ru_utime) + tv(usage.ru_stime),

            stdout: fs::read_to_string(&self.out).unwrap_or_default(),
            stderr: fs::read_to_string(&self.err).unwrap_or_default(),
        };
        if !ok.contains(&code) {
            let tail: Vec<&str> = done.stderr.lines().rev().take(5).collect();
            bail!(
                "`{}` exited with {code}: {}",
                done.command,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        Ok(done)
    }

    /// Waits until the process holds at least `n` perf event fds (it has attached), then lets
    /// it settle; fails if it exits or takes more than 60 s.
    pub fn wait_attached(&self, n: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while fds_of(self.pid, "anon_inode:[perf_event]").len() < n {
            if Instant::now() > deadline || !Path::new(&format!("/proc/{}", self.pid)).exists() {
                bail!("`{}` did not attach its perf events", self.command);
            }
            sleep(Duration::from_millis(20));
        }
        sleep(Duration::from_millis(500));
        Ok(())
    }
}

/// The fd numbers of `pid` whose link target is `target`.
pub fn fds_of(pid: i32, target: &str) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy() == target))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The fields of `work`'s last line, `work-seconds WALL CPU END`.
fn work_fields(f: &Finished) -> anyhow::Result<Vec<&str>> {
    f.stderr
        .lines()
        .find_map(|l| l.strip_prefix("work-seconds "))
        .map(|l| l.split_whitespace().collect())
        .with_context(|| format!("no work-seconds line from `{}`", f.command))
}

/// `work`'s own wall and CPU seconds.
pub fn work_seconds(f: &Finished) -> anyhow::Result<(f64, f64)> {
    let fields = work_fields(f)?;
    match (
        fields.first().map(|w| w.parse()),
        fields.get(1).map(|c| c.parse()),
    ) {
        (Some(Ok(w)), Some(Ok(c))) => Ok((w, c)),
        _ => bail!("bad work-seconds line `{}`", fields.join(" ")),
    }
}

/// When `work` ended (the third field of its `work-seconds` line, CLOCK_MONOTONIC).
pub fn work_end(f: &Finished) -> anyhow::Result<f64> {
    work_fields(f)?
        .get(2)
        .and_then(|e| e.parse().ok())
        .with_context(|| format!("no end time in the work-seconds line of `{}`", f.command))
}

/// CLOCK_MONOTONIC now, in seconds.
fn monotonic_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills in the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// A workload that runs until stopped (`work 0 THREADS`), killed when dropped.
pub struct Background(Option<Running>);

impl Background {
    pub fn start(cmd: &mut Command, log: &Path) -> anyhow::Result<Self> {
        Ok(Self(Some(start(cmd, log)?)))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            let _ = r.stop(Signal::SIGKILL, &[128 + 9, 0]);
        }
    }
}

pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}
