//! Bound sets: where a set counts (thread, process, CPU, cgroup), the perf groups that do the
//! counting, and libcpc's exclusivity rule between CPU and thread bindings.

use std::{
    path::PathBuf,
    sync::{
        Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use super::{
    buf::Buf,
    engine::Engine,
    error::{CpcError, Subcode},
    group::{Group, scale},
    sampling::period_for,
    sigsafe::Blocked,
};
use crate::perf::PerfError;

/// Which thread(s) of a process `bind_pctx` binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lwp {
    /// One thread, by its tid.
    Thread(i32),
    /// Every current thread; threads they create later count into their creator's context.
    All,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BindKind {
    CurLwp { tid: i32 },
    Pctx { pid: i32, lwp: Lwp },
    Cpu(u32),
    Cgroup(PathBuf),
}

impl BindKind {
    pub fn is_lwp(&self) -> bool {
        matches!(self, BindKind::CurLwp { .. } | BindKind::Pctx { .. })
    }
}

/// CPUs bound by any handle in this process. libcpc makes CPU bindings exclusive system-wide
/// through its driver; Linux has no such notion, so the rule holds within this library.
static CPU_CLAIMS: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// Bumped by every CPU binding: thread bindings made before it are invalidated (EAGAIN), as
/// libcpc invalidates per-LWP contexts when cpustat starts.
static CPU_EPOCH: AtomicU64 = AtomicU64::new(0);

fn claims() -> MutexGuard<'static, Vec<u32>> {
    CPU_CLAIMS.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn cpu_bindings_exist() -> bool {
    !claims().is_empty()
}

/// Exclusive use of one CPU, released on drop.
pub(crate) struct CpuClaim(u32);

impl CpuClaim {
    pub fn take(cpu: u32) -> Option<CpuClaim> {
        let mut c = claims();
        if c.contains(&cpu) {
            return None;
        }
        c.push(cpu);
        CPU_EPOCH.fetch_add(1, Ordering::SeqCst);
        Some(CpuClaim(cpu))
    }
}

impl Drop for CpuClaim {
    fn drop(&mut self) {
        claims().retain(|&c| c != self.0);
    }
}

#[inline]
pub(crate) fn cpu_epoch() -> u64 {
    CPU_EPOCH.load(Ordering::SeqCst)
}

/// The live part of a binding: dropped on unbind, which closes every perf fd.
pub(crate) struct Live {
    /// The overflow engine of notifying requests; first, so its links go before the events.
    pub engine: Option<Engine>,
    pub groups: Vec<Group>,
    /// Presets the counters run with (libcpc's kernel copy; the set keeps the originals).
    pub presets: Vec<u64>,
    /// Presets for the next `set_restart` (`request_preset` writes here).
    pub pending: Vec<u64>,
    /// Requests with overflow notification and a non-zero period.
    pub notify: Vec<usize>,
    /// Signal sent at each overflow (signal mode).
    pub signal: Option<i32>,
    /// Disabled by `cpc_disable` (or an overflow freeze): samples return the frozen values.
    pub frozen: bool,
    /// Converts the tick member's count to cycles (nanoseconds × MHz / 1000 without a PMU).
    pub tick_scale: Option<f64>,
    pub _claim: Option<CpuClaim>,
}

/// A set's binding, shared by the set (strongly) and its handle (weakly), so that closing
/// the handle can unbind every set it made, as `cpc_close` does.
pub struct Binding {
    pub(crate) kind: BindKind,
    pub(crate) binder_tid: i32,
    pub(crate) epoch: u64,
    /// The overflow signal, blocked while `live` is locked (see `sigsafe`).
    pub(crate) signal: Option<i32>,
    pub(crate) live: Mutex<Option<Live>>,
}

impl Live {
    /// Enables every group; under freeze, arms each notifying event for one overflow.
    pub(crate) fn enable(&self, func: &'static str) -> Result<(), CpcError> {
        for g in &self.groups {
            g.enable().map_err(|e| perf_error(func, e, None))?;
            if self.engine.as_ref().is_some_and(|e| e.freeze) {
                for &i in &self.notify {
                    g.event(i)
                        .refresh(1)
                        .map_err(|e| perf_error(func, e, None))?;
                }
            }
        }
        Ok(())
    }

    /// `set_restart`: counts back to the (pending) presets, periods re-armed, freeze cleared.
    /// Async-signal-safe on success: ioctls and BPF map updates only, no allocation (the
    /// caller holds the binding lock with the signal blocked).
    pub(crate) fn restart(&mut self, func: &'static str) -> Result<(), CpcError> {
        for g in &self.groups {
            g.disable().map_err(|e| perf_error(func, e, None))?;
        }
        for &i in &self.notify {
            // A preset of 0 never overflows: the longest period the kernel takes.
            let period = match period_for(self.pending[i]) {
                0 => (1 << 63) - 1,
                // request_preset refuses these; kept for presets of other origins.
                p if p >= 1 << 63 => {
                    return Err(CpcError::new(
                        func,
                        libc::EINVAL,
                        "the preset gives a period over 2^63",
                    ));
                }
                p => p,
            };
            // PERIOD also restarts the overflow countdown, which RESET alone does not.
            for g in &self.groups {
                g.event(i)
                    .set_period(period)
                    .map_err(|e| perf_error(func, e, None))?;
            }
        }
        if let Some(engine) = self.engine.as_mut() {
            engine.configure(func, &self.pending, self.signal)?;
        }
        for g in &self.groups {
            g.reset().map_err(|e| perf_error(func, e, None))?;
        }
        // No allocation: restart runs in signal handlers.
        self.presets.copy_from_slice(&self.pending);
        self.enable(func)?;
        self.frozen = false;
        Ok(())
    }
}

impl Binding {
    pub(crate) fn new(kind: BindKind, live: Live) -> Self {
        let binder_tid = crate::host::gettid();
        Self {
            kind,
            binder_tid,
            epoch: cpu_epoch(),
            signal: live.signal,
            live: Mutex::new(Some(live)),
        }
    }

    /// The live part, locked with the overflow signal blocked on this thread, so a handler
    /// calling `set_restart` can never wait for a lock its own thread holds.
    #[inline]
    pub(crate) fn lock(&self) -> Blocked<MutexGuard<'_, Option<Live>>> {
        Blocked::lock(self.signal, || {
            self.live.lock().unwrap_or_else(|p| p.into_inner())
        })
    }

    pub fn is_live(&self) -> bool {
        self.lock().is_some()
    }

    /// Unbinds: disables and closes every event. Idempotent.
    pub fn release(&self) {
        if let Some(live) = self.lock().take() {
            for g in &live.groups {
                let _ = g.disable();
            }
        }
    }

    /// Reads every context of the binding into `buf`.
    pub(crate) fn sample(&self, func: &'static str, buf: &mut Buf) -> Result<(), CpcError> {
        if self.kind.is_lwp() && self.epoch != cpu_epoch() && cpu_bindings_exist() {
            return Err(CpcError::new(
                func,
                libc::EAGAIN,
                "context invalidated by a CPU binding",
            ));
        }
        let mut guard = self.lock();
        let live = guard
            .as_mut()
            .ok_or_else(|| CpcError::new(func, libc::EINVAL, "set is not bound"))?;
        // Every group is read before `buf` changes: a failed sample leaves it as it was.
        for g in &mut live.groups {
            match g.read() {
                Ok(true) => {}
                Ok(false) => {
                    return Err(CpcError::new(
                        func,
                        libc::EAGAIN,
                        "the counters could not be scheduled",
                    ));
                }
                Err(e) => return Err(perf_error(func, e, None)),
            }
        }
        let n = live.presets.len();
        let starts = buf.values[..n].iter_mut().zip(&mut buf.scaled[..n]);
        for ((v, s), &p) in starts.zip(&live.presets) {
            (*v, *s) = (p, p);
        }
        let (mut tick, mut enabled, mut running) = (0u64, 0u64, 0u64);
        for g in &live.groups {
            // Every group was read completely just above.
            let Some(r) = g.last() else { continue };
            let (e, run, t) = (r.enabled(), r.running(), r.tick());
            let sums = buf.values[..n].iter_mut().zip(&mut buf.scaled[..n]);
            for (i, (v, s)) in sums.enumerate() {
                let c = g.count(i);
                *v = v.wrapping_add(c);
                *s = s.wrapping_add(scale(c, e, run));
            }
            tick = tick.wrapping_add(scale(t, e, run));
            enabled += e;
            running += run;
        }
        buf.tick = match live.tick_scale {
            Some(f) => (tick as f64 * f) as u64,
            None => tick,
        };
        buf.time_enabled = enabled;
        buf.time_running = running;
        buf.hrtime = crate::host::hrtime();
        Ok(())
    }
}

/// Maps a perf_event_open/ioctl/read failure to the errno (and subcode) libcpc would report.
pub(crate) fn perf_error(func: &'static str, err: PerfError, event: Option<&str>) -> CpcError {
    // PerfError's text already names the call and explains the errno; here only the errno
    // (and subcode) libcpc would report is chosen.
    let message = match event {
        Some(e) => format!("event '{e}': {err}"),
        None => err.to_string(),
    };
    match err.errno() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => CpcError::new(func, libc::ENOTSUP, message),
        Some(libc::EACCES) | Some(libc::EPERM) => CpcError::new(func, libc::EACCES, message),
        Some(libc::EINVAL) | Some(libc::ENOSPC) => {
            CpcError::with_subcode(func, libc::EINVAL, Subcode::ResourceUnavail, message)
        }
        Some(errno) => CpcError::new(func, errno, message),
        None => CpcError::new(func, libc::EIO, message),
    }
}
