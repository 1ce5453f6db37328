//! cputrack(1) on Linux: per-thread counting that follows thread creation and exit, fork
//! (`-f`) and exec (`-e`), as cputrack does through its /proc agent.
//!
//! The mechanism is ptrace: the tracker is the tracer of every thread it counts. A new
//! thread is stopped at birth (PTRACE_O_TRACECLONE) and bound (`bind_pctx`) before it runs
//! any code; an exiting thread is stopped at PTRACE_EVENT_EXIT and sampled for its exact
//! totals; exec and fork stop their caller. Counters are per-thread perf events, so
//! sampling needs no stop. Every exit path detaches: on Ctrl-C or an output error the
//! tracer interrupts each tracee and detaches it at that stop, leaving it running,
//! untraced (and should the tracer die, the kernel detaches its tracees itself).

mod emit;
mod exits;
pub mod ptrace;
mod ticks;
mod tracer;

use std::{
    collections::BTreeSet,
    ffi::OsString,
    io::{self, Write},
    time::{Duration, Instant},
};

use nix::{errno::Errno, sys::signal::Signal};

use self::{emit::Emitter, ptrace::Report, tracer::Tracer};
use super::{
    format::TrackLayout,
    signals::{Signals, Woken},
    spec::SetSpec,
};
use crate::{
    cpc::{Cpc, CpcError},
    record::{Workload, WorkloadError},
};

/// What to track.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Start this command (argv) and track it from its exec.
    Command(Vec<OsString>),
    /// Attach to a running process (`-p`).
    Pid(i32),
}

/// cputrack's options.
#[derive(Clone, Debug)]
pub struct TrackOptions {
    /// One per `-c`; taken in turn, one per sample, when there are several.
    pub sets: Vec<SetSpec>,
    /// `-T`: time between samples; `None` for `-T 0` (no periodic rows).
    pub interval: Option<Duration>,
    /// `-N`: samples per process before it is let go; `None` for unlimited.
    pub samples: Option<u64>,
    pub follow_fork: bool,
    pub follow_exec: bool,
    /// `-v`: `init_lwp` and `fini_lwp` rows.
    pub verbose: bool,
    /// `-t`: the tick column.
    pub tick: bool,
    /// `-n` clears it.
    pub header: bool,
    pub json: bool,
    /// `-D`: error messages name the libcpc function.
    pub debug: bool,
    /// A line printed above the header (the default events when no `-c` was given).
    pub header_note: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TrackError {
    #[error("no event set to count")]
    NoSets,
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error("process {0} does not exist")]
    NoProcess(i32),
    #[error("cannot trace process {pid}: {source}")]
    Attach { pid: i32, source: Errno },
    #[error("{call}: {source}")]
    Sys {
        call: &'static str,
        source: io::Error,
    },
    #[error("writing the output: {0}")]
    Output(io::Error),
    /// The command or process could not be counted at all (nothing was left attached).
    #[error("{0}")]
    Bind(CpcError),
}

/// How a run ended.
#[derive(Debug)]
pub struct TrackOutcome {
    /// Some thread or process could not be counted (cputrack then exits with 1).
    pub errors: bool,
    /// The signal that ended it early, if any.
    pub interrupted: Option<Signal>,
    /// How the started command ended (`Exited` or `Killed`), if it did while we watched.
    pub command_end: Option<Report>,
}

fn sys(call: &'static str) -> impl FnOnce(io::Error) -> TrackError {
    move |source| TrackError::Sys { call, source }
}

/// Runs cputrack: writes the header, then rows to `out` (threads it cannot count to `diag`)
/// until every tracked process has exited or been let go (`-N`, exec without `-e`, a
/// terminating signal).
pub fn track(
    cpc: &Cpc,
    opts: &TrackOptions,
    target: &Target,
    out: Box<dyn Write>,
    diag: Box<dyn Write>,
) -> Result<TrackOutcome, TrackError> {
    if opts.sets.is_empty() {
        return Err(TrackError::NoSets);
    }
    let layout = TrackLayout {
        pid_column: opts.follow_fork,
        tick_column: opts.tick,
        several_sets: opts.sets.len() > 1,
    };
    let out = Emitter::new(out, opts.json, layout);
    let mut tracer = Tracer::new(cpc, opts, out, diag);
    // The command is forked before signals are blocked: a mask would survive its exec.
    let workload = match target {
        Target::Command(argv) => Some(Workload::prepare(argv)?),
        Target::Pid(_) => None,
    };
    let mut signals = Signals::block().map_err(sys("signalfd"))?;
    match (target, workload) {
        (Target::Command(_), Some(mut w)) => {
            start_command(&mut tracer, &mut w)?;
            // The workload is kept until the end: its drop reaps the child, which must not
            // happen while we still wait for its reports.
            let mut outcome = run(&mut tracer, &mut signals, true);
            if let Ok(o) = outcome.as_mut()
                && o.command_end.is_none()
            {
                // Let go before it ended (-N, exec without -e): its status if it has one now.
                o.command_end = w.try_reap().and_then(|status| {
                    use nix::sys::wait::WaitStatus;
                    let tid = w.pid() as i32;
                    match status {
                        WaitStatus::Exited(_, code) => Some(Report::Exited { tid, code }),
                        WaitStatus::Signaled(_, sig, _) => Some(Report::Killed {
                            tid,
                            signal: sig as i32,
                        }),
                        _ => None,
                    }
                });
            }
            drop(w);
            outcome
        }
        (Target::Pid(pid), _) => {
            if let Err(e) = attach(&mut tracer, *pid) {
                // Let go of whatever was seized before failing.
                tracer.release_all();
                let _ = run(&mut tracer, &mut signals, false);
                return Err(e);
            }
            run(&mut tracer, &mut signals, false)
        }
        (Target::Command(_), None) => unreachable!("prepared above"),
    }
}

/// Starts the held command and waits for it to reach its new image, stopped at the exec,
/// where it is bound before it runs an instruction of its own (as perf's enable-on-exec).
fn start_command(tracer: &mut Tracer<'_>, workload: &mut Workload) -> Result<(), TrackError> {
    let child = workload.pid() as i32;
    tracer.command = Some(child);
    ptrace::seize(child, nix::sys::ptrace::Options::PTRACE_O_TRACEEXEC)
        .map_err(|source| TrackError::Attach { pid: child, source })?;
    // start() blocks until the exec happened; meanwhile this (tracer) thread must answer
    // the child's stops, or a signal-delivery-stop before the exec would hang both.
    let (started, execd) = std::thread::scope(|s| {
        let starter = s.spawn(|| workload.start());
        let execd = wait_for_exec(child);
        (starter.join(), execd)
    });
    match started {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => return Err(sys("starting the command")(io::Error::other("panicked"))),
    }
    if !execd? {
        return Err(sys("exec")(io::Error::other(
            "the command exited before its exec",
        )));
    }
    if let Err(source) = ptrace::set_options(child, ptrace::options()) {
        // It would run uncounted: it goes, as cputrack's kill-on-last-close would have it.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child), Signal::SIGKILL);
        return Err(TrackError::Attach { pid: child, source });
    }
    begin(tracer);
    if let Err(e) = tracer.track_process(child, &[child]) {
        // It would run uncounted: it goes, before it ran any code of its own.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child), Signal::SIGKILL);
        while let Ok(Some(r)) = ptrace::wait(child, false) {
            match r {
                Report::Exited { .. } | Report::Killed { .. } => break,
                // Its exit stop (PTRACE_EVENT_EXIT happens even for SIGKILL).
                _ => {
                    let _ = ptrace::resume(child, 0);
                }
            }
        }
        return Err(TrackError::Bind(e));
    }
    let _ = ptrace::resume(child, 0);
    Ok(())
}

/// Waits for the child's exec stop, passing on any signal it gets first. False if it
/// exited instead (its exec failed).
fn wait_for_exec(child: i32) -> Result<bool, TrackError> {
    loop {
        match ptrace::wait(child, false) {
            Ok(Some(Report::Event { event, .. })) if event == libc::PTRACE_EVENT_EXEC => {
                return Ok(true);
            }
            Ok(Some(Report::Signal { signal, .. })) => {
                let _ = ptrace::resume(child, signal);
            }
            Ok(Some(Report::Event { .. })) => {
                let _ = ptrace::resume(child, 0);
            }
            Ok(Some(Report::Exited { .. } | Report::Killed { .. })) | Ok(None) => {
                return Ok(false);
            }
            Err(e) if e.raw_os_error() == Some(libc::ECHILD) => return Ok(false),
            Err(e) => return Err(sys("waitpid")(e)),
        }
    }
}

/// Seizes every thread of `pid` (again until no new one appears: threads may be created
/// meanwhile), then binds them all; they are never stopped for it.
fn attach(tracer: &mut Tracer<'_>, pid: i32) -> Result<(), TrackError> {
    if pid <= 0 || crate::host::threads(pid).is_err() {
        return Err(TrackError::NoProcess(pid));
    }
    let me = std::process::id() as i32;
    let mut seized = BTreeSet::new();
    let mut skipped = BTreeSet::new();
    loop {
        let tids = crate::host::threads(pid).map_err(|_| TrackError::NoProcess(pid))?;
        let new: Vec<i32> = tids
            .into_iter()
            .filter(|t| !seized.contains(t) && !skipped.contains(t))
            .collect();
        if new.is_empty() {
            break;
        }
        for tid in new {
            match ptrace::seize(tid, ptrace::options()) {
                Ok(()) => {
                    seized.insert(tid);
                }
                // Already ours: a seized thread created it (auto-attached).
                Err(Errno::EPERM) if ptrace::task_ids(tid).is_ok_and(|i| i.tracer == me) => {
                    seized.insert(tid);
                }
                Err(Errno::ESRCH) => {
                    skipped.insert(tid);
                }
                Err(source) if seized.is_empty() => {
                    return Err(TrackError::Attach { pid, source });
                }
                Err(e) => {
                    let _ = writeln!(tracer.diag, "{pid:6}: cannot trace lwp{tid}: {e}");
                    tracer.errors = true;
                    skipped.insert(tid);
                }
            }
        }
    }
    if seized.is_empty() {
        return Err(TrackError::NoProcess(pid));
    }
    begin(tracer);
    let tids: Vec<i32> = seized.into_iter().collect();
    tracer.track_process(pid, &tids).map_err(TrackError::Bind)
}

/// The header, then time 0.
fn begin(tracer: &mut Tracer<'_>) {
    if tracer.opts.header {
        tracer
            .out
            .header(&tracer.opts.sets[0], tracer.opts.header_note.as_deref());
    }
    tracer.out.zero_time();
}

/// How long to wait for tracees to report once everything is being let go; past it the
/// tracer exits, and the kernel detaches what is left.
const RELEASE_GRACE: Duration = Duration::from_secs(5);

/// The event loop: reports, ticks and signals until nothing is tracked.
fn run(
    tracer: &mut Tracer<'_>,
    signals: &mut Signals,
    started_command: bool,
) -> Result<TrackOutcome, TrackError> {
    let interval = tracer.opts.interval;
    let mut next_tick = interval.map(|i| Instant::now() + i);
    let mut interrupted: Option<Signal> = None;
    let mut give_up: Option<Instant> = None;
    // The processes that get the signal once they are let go.
    let mut pass_on: Vec<i32> = Vec::new();
    loop {
        loop {
            match ptrace::wait(-1, true) {
                Ok(Some(report)) => tracer.handle(report),
                Ok(None) => break,
                Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
                    // Nothing is traced any more.
                    tracer.threads.clear();
                    tracer.procs.clear();
                    break;
                }
                Err(e) => {
                    tracer.release_all();
                    return Err(sys("waitpid")(e));
                }
            }
        }
        // The output is gone (a closed pipe): nothing more can be shown, so let go.
        if tracer.out.failed.is_some() && give_up.is_none() {
            tracer.release_all();
            next_tick = None;
            give_up = Some(Instant::now() + RELEASE_GRACE);
            continue;
        }
        if tracer.is_done() || give_up.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        let now = Instant::now();
        if let (Some(due), Some(every)) = (next_tick, interval)
            && now >= due
        {
            tracer.tick();
            let mut next = due + every;
            while next <= now {
                next += every; // running behind: skip to the next goal
            }
            next_tick = Some(next);
            continue;
        }
        let deadline = [next_tick, give_up].into_iter().flatten().min();
        let timeout = deadline.map(|d| d.saturating_duration_since(now));
        let Woken { stop, .. } = signals.wait(timeout).map_err(sys("poll"))?;
        if let Some(sig) = stop {
            if interrupted.is_some() {
                break; // a second signal: leave now; the kernel detaches the rest
            }
            interrupted = Some(sig);
            // The counters are read once more: what each process counted up to the signal.
            tracer.final_rows();
            if started_command {
                pass_on = tracer.procs.keys().copied().collect();
            }
            tracer.release_all();
            next_tick = None;
            give_up = Some(Instant::now() + RELEASE_GRACE);
        }
    }
    // As cputrack's kill-on-last-close: what we started gets the signal too. Sent after
    // they are let go, not before: a signal a traced thread took stops it for us first,
    // and was lost now and then when it was detached without it (its command then ran on).
    if let Some(sig) = interrupted {
        for pid in pass_on {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }
    tracer.out.flush();
    if let Some(e) = tracer.out.failed.take()
        && e.kind() != io::ErrorKind::BrokenPipe
    {
        return Err(TrackError::Output(e));
    }
    Ok(TrackOutcome {
        errors: tracer.errors,
        interrupted,
        command_end: tracer.command_end,
    })
}
