//! pidfd_open(2): a file descriptor that becomes readable when a process exits, so waiting
//! for targets is one more branch of the event loop instead of a polling timer.

use std::{
    io,
    os::fd::{FromRawFd, OwnedFd},
};

use tokio::io::{Interest, unix::AsyncFd};

pub struct PidFd {
    fd: AsyncFd<OwnedFd>,
}

impl PidFd {
    pub fn open(pid: u32) -> io::Result<Self> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this fd to us; we are its only owner.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: the OwnedFd moves into the AsyncFd and stays open, unchanged, until it drops.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Self { fd })
    }

    /// Completes when the process has exited.
    pub async fn exited(&self) {
        if let Ok(mut guard) = self.fd.readable().await {
            guard.retain_ready();
        }
    }
}
