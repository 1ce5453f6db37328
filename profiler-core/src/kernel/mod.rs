//! The syscall seam: every perf_event_open(2), perf ioctl, counter read(2), bpf(2),
//! pidfd_open(2) and openat2(2) call the crates make themselves goes through a [`Kernel`] (aya makes the loader's own calls:
//! program load, map creation, map access). [`linux()`] is the real one; unit tests of the
//! binder and the loader pass a fake that records the calls and answers without a kernel.

mod bpf;
#[cfg(test)]
pub(crate) mod fake;
mod fs;
mod perf;

use std::{
    ffi::CStr,
    io,
    os::fd::{BorrowedFd, OwnedFd},
};

use perf_event_open_sys::bindings::perf_event_attr;

/// `PERF_FLAG_FD_CLOEXEC`: children we spawn must not inherit our event fds.
pub(crate) const FLAG_FD_CLOEXEC: u64 = 1 << 3;
/// `PERF_FLAG_PID_CGROUP`: `pid` is a cgroup directory fd.
pub(crate) const FLAG_PID_CGROUP: u64 = 1 << 2;
/// `PERF_IOC_FLAG_GROUP`: apply an ioctl to the whole group.
pub(crate) const IOC_FLAG_GROUP: u32 = 1;

/// The perf ioctls we use, by name (the name goes into error messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ioctl {
    Enable { group: bool },
    Disable { group: bool },
    Reset { group: bool },
    Refresh(i32),
    Period(u64),
    SetBpf(u32),
}

impl Ioctl {
    pub fn name(self) -> &'static str {
        match self {
            Ioctl::Enable { .. } => "PERF_EVENT_IOC_ENABLE",
            Ioctl::Disable { .. } => "PERF_EVENT_IOC_DISABLE",
            Ioctl::Reset { .. } => "PERF_EVENT_IOC_RESET",
            Ioctl::Refresh(_) => "PERF_EVENT_IOC_REFRESH",
            Ioctl::Period(_) => "PERF_EVENT_IOC_PERIOD",
            Ioctl::SetBpf(_) => "PERF_EVENT_IOC_SET_BPF",
        }
    }
}

/// The calls the crate makes to the kernel. Errors are the OS error (errno); callers wrap
/// them in their domain's error with the call's name.
pub trait Kernel: Send + Sync + std::fmt::Debug {
    /// perf_event_open(2); returns the owned event fd.
    fn perf_event_open(
        &self,
        attr: &perf_event_attr,
        pid: i32,
        cpu: i32,
        group: Option<BorrowedFd<'_>>,
        flags: u64,
    ) -> io::Result<OwnedFd>;

    /// One perf ioctl on an event fd.
    fn perf_ioctl(&self, fd: BorrowedFd<'_>, op: Ioctl) -> io::Result<()>;

    /// read(2) of an event fd (a counter or a whole group: perf returns u64 words) into
    /// `buf`; the byte count.
    fn perf_read(&self, fd: BorrowedFd<'_>, buf: &mut [u64]) -> io::Result<usize>;

    /// bpf(BPF_LINK_CREATE) of `prog` to a perf event, with an attach cookie.
    fn bpf_link_perf_event(
        &self,
        prog: BorrowedFd<'_>,
        event: BorrowedFd<'_>,
        cookie: u64,
    ) -> io::Result<OwnedFd>;

    /// bpf(BPF_MAP_UPDATE_ELEM) of a perf event at `index` of a PERF_EVENT_ARRAY.
    fn bpf_perf_event_array_set(
        &self,
        map: BorrowedFd<'_>,
        index: u32,
        event: BorrowedFd<'_>,
    ) -> io::Result<()>;

    /// bpf(BPF_PROG_GET_NEXT_ID): whether bpf(2) exists and we may use it.
    fn bpf_probe(&self) -> io::Result<()>;

    /// pidfd_open(2): an fd that becomes readable when process `pid` exits.
    fn pidfd_open(&self, pid: i32) -> io::Result<OwnedFd>;

    /// openat2(2) of `path` relative to `dir`, with `open_how.flags` (`O_*`) and
    /// `open_how.resolve` (`RESOLVE_*`); ENOSYS before Linux 5.6.
    fn openat2(
        &self,
        dir: BorrowedFd<'_>,
        path: &CStr,
        flags: u64,
        resolve: u64,
    ) -> io::Result<OwnedFd>;
}

/// The running kernel.
#[derive(Debug)]
pub struct Linux;

static LINUX: Linux = Linux;

/// The real seam, the default everywhere.
pub fn linux() -> &'static dyn Kernel {
    &LINUX
}

impl Kernel for Linux {
    fn perf_event_open(
        &self,
        attr: &perf_event_attr,
        pid: i32,
        cpu: i32,
        group: Option<BorrowedFd<'_>>,
        flags: u64,
    ) -> io::Result<OwnedFd> {
        perf::perf_event_open(attr, pid, cpu, group, flags)
    }

    fn perf_ioctl(&self, fd: BorrowedFd<'_>, op: Ioctl) -> io::Result<()> {
        perf::ioctl(fd, op)
    }

    #[inline]
    fn perf_read(&self, fd: BorrowedFd<'_>, buf: &mut [u64]) -> io::Result<usize> {
        perf::read(fd, buf)
    }

    fn bpf_link_perf_event(
        &self,
        prog: BorrowedFd<'_>,
        event: BorrowedFd<'_>,
        cookie: u64,
    ) -> io::Result<OwnedFd> {
        bpf::perf_event_link(prog, event, cookie)
    }

    fn bpf_perf_event_array_set(
        &self,
        map: BorrowedFd<'_>,
        index: u32,
        event: BorrowedFd<'_>,
    ) -> io::Result<()> {
        bpf::perf_event_array_set(map, index, event)
    }

    fn bpf_probe(&self) -> io::Result<()> {
        bpf::prog_get_next_id()
    }

    fn pidfd_open(&self, pid: i32) -> io::Result<OwnedFd> {
        fs::pidfd_open(pid)
    }

    fn openat2(
        &self,
        dir: BorrowedFd<'_>,
        path: &CStr,
        flags: u64,
        resolve: u64,
    ) -> io::Result<OwnedFd> {
        fs::openat2(dir, path, flags, resolve)
    }
}
