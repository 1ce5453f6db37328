//! An opened perf event: an owned fd plus what it was opened for (for error messages).

use std::{
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd},
};

use super::attr::EventAttr;
use crate::kernel::{self, FLAG_FD_CLOEXEC, FLAG_PID_CGROUP, Ioctl, Kernel};

/// Where an event counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// One thread (or process, when inherit is set), on any CPU.
    Thread(i32),
    /// Everything on one CPU.
    Cpu(u32),
    /// One thread, only while on one CPU.
    ThreadOnCpu { tid: i32, cpu: u32 },
    /// Tasks of a cgroup (v2 directory fd, borrowed for the open) while on one CPU.
    CgroupOnCpu { cgroup_fd: i32, cpu: u32 },
}

impl Scope {
    fn pid_cpu(self) -> (i32, i32) {
        match self {
            Scope::Thread(tid) => (tid, -1),
            Scope::Cpu(cpu) => (-1, cpu as i32),
            Scope::ThreadOnCpu { tid, cpu } => (tid, cpu as i32),
            Scope::CgroupOnCpu { cgroup_fd, cpu } => (cgroup_fd, cpu as i32),
        }
    }

    fn flags(self) -> u64 {
        match self {
            Scope::CgroupOnCpu { .. } => FLAG_FD_CLOEXEC | FLAG_PID_CGROUP,
            _ => FLAG_FD_CLOEXEC,
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Thread(tid) => write!(f, "thread {tid}"),
            Scope::Cpu(cpu) => write!(f, "cpu {cpu}"),
            Scope::ThreadOnCpu { tid, cpu } => write!(f, "thread {tid} on cpu {cpu}"),
            Scope::CgroupOnCpu { cpu, .. } => write!(f, "cgroup on cpu {cpu}"),
        }
    }
}

/// Errors of the perf_event_open layer; each carries the call and the OS error (errno).
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("perf_event_open({event} on {scope}): {}", explain_open(.source))]
    Open {
        event: String,
        scope: Scope,
        source: io::Error,
    },
    #[error("{call} on perf event fd {fd}: {source}")]
    Ioctl {
        call: &'static str,
        fd: i32,
        source: io::Error,
    },
    #[error("read of perf event fd {fd}: {source}")]
    Read { fd: i32, source: io::Error },
}

impl PerfError {
    /// The errno behind this error.
    pub fn errno(&self) -> Option<i32> {
        match self {
            PerfError::Open { source, .. }
            | PerfError::Ioctl { source, .. }
            | PerfError::Read { source, .. } => source.raw_os_error(),
        }
    }
}

/// Turns the errnos perf_event_open is known for into advice a user can act on.
fn explain_open(err: &io::Error) -> String {
    let hint = match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => {
            "event not supported on this host (no hardware PMU, or unknown event)"
        }
        Some(libc::EACCES) | Some(libc::EPERM) => {
            "permission denied: needs root or CAP_PERFMON (see kernel.perf_event_paranoid)"
        }
        Some(libc::ESRCH) => "no such process or thread",
        Some(libc::EMFILE) => "too many open files (raise `ulimit -n`)",
        Some(libc::EINVAL) => "invalid event attributes for this kernel",
        _ => "",
    };
    if hint.is_empty() {
        err.to_string()
    } else {
        format!("{hint} ({err})")
    }
}

/// An open perf event. Dropping it closes the fd, which also detaches any BPF program the
/// kernel ran for it: nothing can outlive its owner.
#[derive(Debug)]
pub struct PerfEvent {
    fd: OwnedFd,
    /// The seam it was opened through; its ioctls and reads go the same way.
    kernel: &'static dyn Kernel,
}

impl PerfEvent {
    /// Opens `attr` on `scope`, optionally as a member of `group`'s group (through the seam
    /// the group was opened through; the running kernel otherwise).
    pub fn open(
        attr: &EventAttr,
        scope: Scope,
        group: Option<&PerfEvent>,
        describe: impl FnOnce() -> String,
    ) -> Result<Self, PerfError> {
        let kernel = group.map_or_else(kernel::linux, |g| g.kernel);
        Self::open_in(kernel, attr, scope, group, describe)
    }

    /// [`PerfEvent::open`] through the given seam.
    pub fn open_in(
        kernel: &'static dyn Kernel,
        attr: &EventAttr,
        scope: Scope,
        group: Option<&PerfEvent>,
        describe: impl FnOnce() -> String,
    ) -> Result<Self, PerfError> {
        let (pid, cpu) = scope.pid_cpu();
        kernel
            .perf_event_open(
                attr.raw(),
                pid,
                cpu,
                group.map(|g| g.fd.as_fd()),
                scope.flags(),
            )
            .map(|fd| Self { fd, kernel })
            .map_err(|source| PerfError::Open {
                event: describe(),
                scope,
                source,
            })
    }

    fn ioctl(&self, op: Ioctl) -> Result<(), PerfError> {
        self.kernel
            .perf_ioctl(self.fd.as_fd(), op)
            .map_err(|source| PerfError::Ioctl {
                call: op.name(),
                fd: self.fd.as_raw_fd(),
                source,
            })
    }

    /// Starts counting (the whole group when `group` is set and this is the leader).
    pub fn enable(&self, group: bool) -> Result<(), PerfError> {
        self.ioctl(Ioctl::Enable { group })
    }

    pub fn disable(&self, group: bool) -> Result<(), PerfError> {
        self.ioctl(Ioctl::Disable { group })
    }

    pub fn reset(&self, group: bool) -> Result<(), PerfError> {
        self.ioctl(Ioctl::Reset { group })
    }

    /// Allows `n` more overflows, then disables the event (libcpc's freeze emulation).
    pub fn refresh(&self, n: i32) -> Result<(), PerfError> {
        self.ioctl(Ioctl::Refresh(n))
    }

    /// Changes the sample period; applies immediately on current kernels.
    pub fn set_period(&self, period: u64) -> Result<(), PerfError> {
        self.ioctl(Ioctl::Period(period))
    }

    /// Runs the BPF program `prog_fd` at each overflow of this event.
    pub fn set_bpf(&self, prog_fd: BorrowedFd<'_>) -> Result<(), PerfError> {
        self.ioctl(Ioctl::SetBpf(prog_fd.as_raw_fd() as u32))
    }

    /// Reads the event (its `read_format` decides the layout of the u64 words) into `buf`;
    /// the byte count.
    #[inline]
    pub fn read_into(&self, buf: &mut [u64]) -> Result<usize, PerfError> {
        self.kernel
            .perf_read(self.fd.as_fd(), buf)
            .map_err(|source| PerfError::Read {
                fd: self.fd.as_raw_fd(),
                source,
            })
    }
}

impl AsFd for PerfEvent {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
