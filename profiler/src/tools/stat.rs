//! cpustat(1M) on Linux: system-wide counting, one binding per CPU (`cpc_bind_cpu`), a
//! `tick` row per CPU every interval, and a `total` row per set at the end whose `cpu`
//! column is the number of CPUs measured and whose values are the sums of the rows
//! printed. SIGINT (or SIGTERM, SIGHUP, SIGQUIT) ends the run early: the counters are read
//! once more (rows marked `partial`) and the totals, which include them, are printed. Unlike Solaris, one thread samples every CPU (perf reads need no processor
//! binding), and per-thread counting elsewhere is not invalidated.

use std::{
    io::{self, Write},
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;

use super::{
    counting::{Counting, Scope},
    format::{self, StatLayout},
    json,
    sample::Sample,
    signals::Signals,
    soak::Soakers,
    spec::SetSpec,
};
use crate::cpc::{Cpc, CpcError};

/// `-T u|d`: a time stamp before each sample row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// `u`: seconds since the epoch (`time_t`).
    Unix,
    /// `d`: as date(1) prints it.
    Date,
}

#[derive(Clone, Debug)]
pub struct StatOptions {
    pub sets: Vec<SetSpec>,
    pub interval: Duration,
    /// Samples to take (with `period`: cycles through the sets); `None`: until interrupted.
    pub count: Option<u64>,
    /// `-p`: after each cycle through the sets, rest `period - interval × nsets`.
    pub period: Option<Duration>,
    /// `-C` (Linux addition): these CPUs instead of every online one.
    pub cpus: Option<Vec<u32>>,
    /// `-s`: soak CPUs while a system-only set is bound.
    pub soak: bool,
    pub tick: bool,
    pub header: bool,
    pub json: bool,
    pub stamp: Option<Stamp>,
    /// The name per-CPU warnings start with (`cpustat`).
    pub prog: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum StatError {
    #[error("no event set to count")]
    NoSets,
    #[error("{0}")]
    Cpc(#[from] CpcError),
    #[error("{call}: {source}")]
    Sys {
        call: &'static str,
        source: io::Error,
    },
    #[error("writing the output: {0}")]
    Output(io::Error),
}

#[derive(Debug)]
pub struct StatOutcome {
    /// Some CPU could not be counted to the end (cpustat then exits with 1).
    pub errors: bool,
    pub interrupted: Option<Signal>,
}

struct Cpu {
    id: u32,
    counting: Option<Counting>,
    /// Per set: the sum of the rows printed.
    totals: Vec<Sample>,
}

/// Seconds since the epoch.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn stamp_line(stamp: Stamp) -> String {
    let now = unix_now();
    match stamp {
        Stamp::Unix => format!("{now}\n"),
        Stamp::Date => {
            // SAFETY: tm is plain data that localtime_r fills from the time_t we pass; the
            // format is NUL-terminated and strftime writes at most buf.len() bytes.
            let text = unsafe {
                let mut tm: libc::tm = std::mem::zeroed();
                libc::localtime_r(&(now as libc::time_t), &mut tm);
                let mut buf = [0u8; 128];
                let fmt = c"%a %b %e %H:%M:%S %Z %Y";
                let n = libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm);
                String::from_utf8_lossy(&buf[..n]).into_owned()
            };
            format!("{text}\n")
        }
    }
}

struct Printer {
    out: Box<dyn Write>,
    /// Where a CPU that stops counting is reported (the CLI's stderr).
    diag: Box<dyn Write>,
    json: bool,
    layout: StatLayout,
    /// hrtime of time 0.000.
    t0: u64,
}

impl Printer {
    fn row(
        &mut self,
        cpu: i64,
        event: &str,
        s: &Sample,
        set: &SetSpec,
        stamp: Option<Stamp>,
    ) -> Result<(), StatError> {
        let at = if s.hrtime == 0 {
            crate::host::hrtime()
        } else {
            s.hrtime
        };
        let t = at.saturating_sub(self.t0) as f64 / 1e9;
        let line = if self.json {
            let ts = stamp.map(|_| unix_now());
            let tick = self.layout.tick_column;
            json::stat_row(t, cpu, event, s, set, tick, ts)
        } else {
            let stamp = stamp.map(stamp_line).unwrap_or_default();
            stamp + &format::stat_row(&self.layout, t, cpu, event, s, &set.text)
        };
        self.out
            .write_all(line.as_bytes())
            .map_err(StatError::Output)
    }
}

fn sys(call: &'static str) -> impl FnOnce(io::Error) -> StatError {
    move |source| StatError::Sys { call, source }
}

/// Sleeps until `goal`; returns the terminating signal that cut it short, if one did.
fn sleep_until(signals: &mut Signals, goal: Instant) -> Result<Option<Signal>, StatError> {
    while let Some(left) = goal
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
    {
        if let Some(sig) = signals.wait(Some(left)).map_err(sys("poll"))?.stop {
            return Ok(Some(sig));
        }
    }
    Ok(None)
}

/// Binds the first set on every CPU; a CPU that refuses is reported (to `diag`) and left
/// out.
fn bind_all(
    cpc: &Cpc,
    opts: &StatOptions,
    ids: &[u32],
    diag: &mut dyn Write,
) -> Result<(Vec<Cpu>, bool), StatError> {
    let mut cpus = Vec::new();
    let mut errors = Vec::new();
    for &id in ids {
        match Counting::bind(cpc, &opts.sets, Scope::Cpu(id)) {
            Ok((c, _)) => cpus.push(Cpu {
                id,
                counting: Some(c),
                totals: opts
                    .sets
                    .iter()
                    .map(|s| Sample::zero(s.requests.len()))
                    .collect(),
            }),
            Err(e) => errors.push((id, e)),
        }
    }
    if cpus.is_empty() {
        // Nothing counts: one error, not one per CPU.
        return Err(match errors.into_iter().next() {
            Some((_, e)) => e.into(),
            None => sys("cpus")(io::Error::other("no CPU to count")),
        });
    }
    for (id, e) in &errors {
        let _ = writeln!(diag, "{}: cpu{id} - {}", opts.prog, e.message);
    }
    Ok((cpus, !errors.is_empty()))
}

/// The event column of the rows of an interval cut short by a terminating signal.
pub const PARTIAL: &str = "partial";

/// One row per CPU of what its counters counted since its previous row, added to its
/// totals; true if some CPU could no longer be read (it is left out from then on).
fn sample_all(
    cpc: &Cpc,
    opts: &StatOptions,
    cpus: &mut [Cpu],
    p: &mut Printer,
    event: &str,
) -> Result<bool, StatError> {
    let mut errors = false;
    for cpu in cpus {
        let Some(c) = cpu.counting.as_mut() else {
            continue;
        };
        match c.tick(cpc, &opts.sets) {
            Ok((set, delta)) => {
                cpu.totals[set] = cpu.totals[set].plus(&delta);
                p.row(
                    i64::from(cpu.id),
                    event,
                    &delta,
                    &opts.sets[set],
                    opts.stamp,
                )?;
            }
            Err(e) => {
                let _ = writeln!(p.diag, "{}: cpu{} - {}", opts.prog, cpu.id, e.message);
                cpu.counting = None;
                errors = true;
            }
        }
    }
    Ok(errors)
}

/// Runs cpustat until `count` samples were taken or a terminating signal came.
/// Counts, writing rows to `out` and CPUs that stop counting to `diag`.
pub fn stat(
    cpc: &Cpc,
    opts: &StatOptions,
    out: Box<dyn Write>,
    diag: Box<dyn Write>,
) -> Result<StatOutcome, StatError> {
    if opts.sets.is_empty() {
        return Err(StatError::NoSets);
    }
    let ids = match &opts.cpus {
        Some(list) => list.clone(),
        None => crate::host::online_cpus().map_err(sys("online cpus"))?,
    };
    let mut signals = Signals::block().map_err(sys("signalfd"))?;
    let layout = StatLayout {
        tick_column: opts.tick,
        several_sets: opts.sets.len() > 1,
    };
    let mut p = Printer {
        out,
        diag,
        json: opts.json,
        layout,
        t0: 0,
    };
    // Bound first, so that a CPU that cannot be counted is an error before any output.
    let (mut cpus, mut errors) = bind_all(cpc, opts, &ids, &mut p.diag)?;
    if opts.header && !opts.json {
        let h = format::stat_header(&layout, &opts.sets[0].pics());
        p.out.write_all(h.as_bytes()).map_err(StatError::Output)?;
    }
    p.t0 = crate::host::hrtime();
    for cpu in &mut cpus {
        if let Some(Err(e)) = cpu.counting.as_mut().map(|c| c.rebase(cpc)) {
            let _ = writeln!(p.diag, "{}: cpu{} - {}", opts.prog, cpu.id, e.message);
            cpu.counting = None;
            errors = true;
        }
    }
    let nsets = opts.sets.len();
    let soakers = match opts.soak && opts.sets.iter().any(SetSpec::is_system_only) {
        true => {
            let (soakers, warnings) = Soakers::start(&ids).map_err(sys("soaker threads"))?;
            for w in warnings {
                let _ = writeln!(p.diag, "{w}");
            }
            Some(soakers)
        }
        false => None,
    };
    let mut current = 0usize;
    if let Some(s) = &soakers {
        s.set_running(opts.sets[current].is_system_only());
    }
    // With -p the count is of cycles through the sets.
    let samples = opts.count.map(|c| match opts.period {
        Some(_) => c.saturating_mul(nsets as u64),
        None => c,
    });
    let rest = opts
        .period
        .map(|p| p.saturating_sub(opts.interval.saturating_mul(nsets as u32)))
        .filter(|r| !r.is_zero() && nsets > 1);
    let mut goal = Instant::now();
    let mut taken = 0u64;
    let mut interrupted = None;
    while samples.is_none_or(|n| taken < n) {
        goal += opts.interval;
        taken += 1;
        if goal <= Instant::now() {
            continue; // running behind: this sample is skipped, as cpustat does
        }
        if let Some(sig) = sleep_until(&mut signals, goal)? {
            // The counters are read once more: what they counted up to the signal, marked
            // as a partial interval, goes into the totals too.
            errors |= sample_all(cpc, opts, &mut cpus, &mut p, PARTIAL)?;
            interrupted = Some(sig);
            break;
        }
        errors |= sample_all(cpc, opts, &mut cpus, &mut p, "tick")?;
        current = (current + 1) % nsets;
        if let Some(rest) = rest.filter(|_| current == 0) {
            // Rest between cycles, uncounted: the next set starts counting afterwards.
            if let Some(s) = &soakers {
                s.set_running(false);
            }
            goal += rest;
            if let Some(sig) = sleep_until(&mut signals, goal)? {
                interrupted = Some(sig);
                break;
            }
            for c in cpus.iter_mut().filter_map(|c| c.counting.as_mut()) {
                if let Err(e) = c.restart(cpc, &opts.sets) {
                    let _ = writeln!(p.diag, "{}: {}", opts.prog, e.message);
                    errors = true;
                }
            }
        }
        if let Some(s) = &soakers {
            s.set_running(opts.sets[current].is_system_only());
        }
    }
    drop(soakers);
    for cpu in &mut cpus {
        cpu.counting = None; // unbind before the totals are printed
    }
    for (i, set) in opts.sets.iter().enumerate() {
        let zero = Sample::zero(set.requests.len());
        let total = cpus.iter().fold(zero, |acc, c| acc.plus(&c.totals[i]));
        p.row(cpus.len() as i64, "total", &total, set, None)?;
    }
    p.out.flush().map_err(StatError::Output)?;
    Ok(StatOutcome {
        errors,
        interrupted,
    })
}
