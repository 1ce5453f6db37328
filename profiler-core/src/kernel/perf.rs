//! perf_event_open(2), its ioctls and read(2) of event fds, for [`super::Linux`].

use std::{
    io,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
};

use perf_event_open_sys::{bindings::perf_event_attr, ioctls};

use super::{IOC_FLAG_GROUP, Ioctl};

/// perf_event_open(2). Returns the owned event fd.
pub(super) fn perf_event_open(
    attr: &perf_event_attr,
    pid: i32,
    cpu: i32,
    group_fd: Option<BorrowedFd<'_>>,
    flags: u64,
) -> io::Result<OwnedFd> {
    let mut attr = *attr;
    let group = group_fd.map_or(-1, |fd| fd.as_raw_fd());
    // SAFETY: `attr` is a valid, initialised perf_event_attr whose `size` field describes it;
    // the kernel only reads it (and may write back `size` on E2BIG, into our local copy).
    let fd = unsafe {
        perf_event_open_sys::perf_event_open(&mut attr, pid, cpu, group, flags as libc::c_ulong)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn ioctl(fd: BorrowedFd<'_>, op: Ioctl) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    let group = |g: bool| if g { IOC_FLAG_GROUP } else { 0 };
    // SAFETY: `fd` is a live perf event fd borrowed from its owner; each ioctl takes a plain
    // integer argument, except PERIOD, which reads a u64 through the pointer we pass (the
    // crate's signature takes it by value and passes its address).
    let rc = unsafe {
        match op {
            Ioctl::Enable { group: g } => ioctls::ENABLE(fd, group(g)),
            Ioctl::Disable { group: g } => ioctls::DISABLE(fd, group(g)),
            Ioctl::Reset { group: g } => ioctls::RESET(fd, group(g)),
            Ioctl::Refresh(n) => ioctls::REFRESH(fd, n),
            Ioctl::Period(mut period) => libc::ioctl(
                fd,
                perf_event_open_sys::bindings::PERIOD as _,
                &mut period as *mut u64,
            ),
            Ioctl::SetBpf(prog_fd) => ioctls::SET_BPF(fd, prog_fd),
        }
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// read(2) of an event fd into `buf` (perf's read formats are u64 words); returns the byte
/// count.
#[inline]
pub(super) fn read(fd: BorrowedFd<'_>, buf: &mut [u64]) -> io::Result<usize> {
    // SAFETY: `buf` is valid writable memory of `size_of_val(buf)` bytes for the duration of
    // the call, and any bytes the kernel writes form valid u64s.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            std::mem::size_of_val(buf),
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
