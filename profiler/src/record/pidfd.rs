//! pidfd_open(2): a file descriptor that becomes readable when a process exits, so waiting
//! for targets is one more branch of the event loop instead of a polling timer.

use std::{io, os::fd::OwnedFd};

use tokio::io::{Interest, unix::AsyncFd};

pub struct PidFd {
    fd: AsyncFd<OwnedFd>,
}

impl PidFd {
    pub fn open(pid: u32) -> io::Result<Self> {
        // Through the kernel seam, as every syscall.
        let fd = profiler_core::kernel::linux().pidfd_open(pid as i32)?;
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
