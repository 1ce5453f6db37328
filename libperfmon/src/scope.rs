//! Where the counters count (`PERFMON_SCOPE`), and the pinning of the caller in the default
//! `cpu` scope.
//!
//! perfmon(4)'s counters are registers of the CPU: they count everything that CPU runs. On
//! Linux the faithful equivalent is a CPU-wide perf event; which CPU is this module's choice:
//!
//! - `cpu` (default): the CPU the thread calling the first PMIOSETUP runs on. That thread is
//!   pinned there until the writer closes the device, so the work it measures runs on the
//!   counted CPU, as on the seed's uniprocessors. Other tasks' events on that CPU count too.
//! - `all`: one event per online CPU, summed.
//! - `process` (extension): the calling thread and the threads and children it creates after
//!   PMIOSETUP, on any CPU. Only the program's own events: exact counts of a known workload.

use std::{ffi::OsStr, io};

use profiler_core::perf::Scope;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeMode {
    Cpu,
    All,
    Process,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("PERFMON_SCOPE={0:?}: expected cpu, all or process")]
pub struct BadScope(pub String);

impl ScopeMode {
    /// `PERFMON_SCOPE`'s value (unset: `cpu`).
    pub fn parse(value: Option<&OsStr>) -> Result<Self, BadScope> {
        match value.map(|v| v.to_str()) {
            None => Ok(ScopeMode::Cpu),
            Some(Some("cpu")) => Ok(ScopeMode::Cpu),
            Some(Some("all")) => Ok(ScopeMode::All),
            Some(Some("process")) => Ok(ScopeMode::Process),
            Some(_) => Err(BadScope(
                value.unwrap_or_default().to_string_lossy().into_owned(),
            )),
        }
    }

    pub fn from_env() -> Result<Self, BadScope> {
        Self::parse(std::env::var_os("PERFMON_SCOPE").as_deref())
    }

    pub fn inherit(self) -> bool {
        self == ScopeMode::Process
    }
}

/// The calling thread pinned to the CPU it runs on; Drop gives back its old affinity.
#[derive(Debug)]
pub struct Pinned {
    pub cpu: u32,
    tid: libc::pid_t,
    /// The process that pinned: a forked child's copy restores its own thread instead.
    pid: libc::pid_t,
    saved: libc::cpu_set_t,
}

impl Pinned {
    pub fn here() -> io::Result<Self> {
        // SAFETY: sched_getcpu has no preconditions.
        let cpu = unsafe { libc::sched_getcpu() };
        if cpu < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
        let mut saved: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: pid 0 is the calling thread; `saved` is a cpu_set_t of `size` bytes.
        if unsafe { libc::sched_getaffinity(0, size, &mut saved) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        let mut only: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `cpu` came from sched_getcpu, below CPU_SETSIZE; `only` is a cpu_set_t.
        unsafe { libc::CPU_SET(cpu as usize, &mut only) };
        // SAFETY: pid 0 is the calling thread; `only` holds the CPU it is running on.
        if unsafe { libc::sched_setaffinity(0, size, &only) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            cpu: cpu as u32,
            tid: profiler_core::host::gettid(),
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
            saved,
        })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // In a forked child the pinned thread is the calling one (the only thread fork
        // copies); the parent's pinning is the parent's to undo.
        // SAFETY: getpid has no preconditions.
        let tid = if unsafe { libc::getpid() } == self.pid {
            self.tid
        } else {
            0
        };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `saved` is the affinity read from the pinned thread; if that thread has
        // exited, the call fails with ESRCH and changes nothing.
        unsafe { libc::sched_setaffinity(tid, size, &self.saved) };
    }
}

/// The perf scopes of one counter.
pub fn scopes(mode: ScopeMode, pinned: Option<&Pinned>) -> io::Result<Vec<Scope>> {
    Ok(match (mode, pinned) {
        (ScopeMode::Cpu, Some(p)) => vec![Scope::Cpu(p.cpu)],
        (ScopeMode::Cpu, None) => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        (ScopeMode::All, _) => profiler_core::host::online_cpus()?
            .into_iter()
            .map(Scope::Cpu)
            .collect(),
        (ScopeMode::Process, _) => vec![Scope::Thread(0)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_parse_and_a_bad_one_says_what_is_expected() {
        assert_eq!(ScopeMode::parse(None), Ok(ScopeMode::Cpu));
        for (s, m) in [
            ("cpu", ScopeMode::Cpu),
            ("all", ScopeMode::All),
            ("process", ScopeMode::Process),
        ] {
            assert_eq!(ScopeMode::parse(Some(OsStr::new(s))), Ok(m));
        }
        let e = ScopeMode::parse(Some(OsStr::new("thread"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "PERFMON_SCOPE=\"thread\": expected cpu, all or process"
        );
    }

    #[test]
    fn pinning_holds_the_thread_on_its_cpu_and_drop_restores_the_mask() {
        std::thread::spawn(|| {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let mask = || {
                // SAFETY: reads the calling thread's mask into a zeroed cpu_set_t.
                let mut s: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                // SAFETY: `s` is a cpu_set_t of `size` bytes.
                let rc = unsafe { libc::sched_getaffinity(0, size, &mut s) };
                assert_eq!(rc, 0);
                (0..libc::CPU_SETSIZE as usize)
                    // SAFETY: c < CPU_SETSIZE.
                    .filter(|&c| unsafe { libc::CPU_ISSET(c, &s) })
                    .collect::<Vec<_>>()
            };
            let before = mask();
            let p = Pinned::here().unwrap();
            assert_eq!(mask(), [p.cpu as usize]);
            assert_eq!(
                scopes(ScopeMode::Cpu, Some(&p)).unwrap(),
                [Scope::Cpu(p.cpu)]
            );
            drop(p);
            assert_eq!(mask(), before);
        })
        .join()
        .unwrap();
        assert_eq!(
            scopes(ScopeMode::Process, None).unwrap(),
            [Scope::Thread(0)]
        );
        assert_eq!(
            scopes(ScopeMode::All, None).unwrap().len(),
            profiler_core::host::online_cpus().unwrap().len()
        );
    }
}
