//! Waiting for "something happened" in the tools' single-threaded loops: a child or tracee
//! changed state (SIGCHLD), the user asked us to stop (SIGINT, SIGTERM, SIGHUP, SIGQUIT),
//! or the next sample is due. The signals are blocked and read from a signalfd, so none is
//! lost between checking and sleeping, and no handler runs in the middle of a ptrace step.

use std::{io, os::fd::AsFd, time::Duration};

use nix::{
    poll::{PollFd, PollFlags, PollTimeout, poll},
    sys::{
        signal::{SigSet, SigmaskHow, Signal, pthread_sigmask},
        signalfd::{SfdFlags, SignalFd},
    },
};

/// The signals that end a run.
pub const TERMINATING: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// What a wait saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Woken {
    /// A child or tracee changed state: drain waitpid.
    pub child: bool,
    /// The first terminating signal received, if any.
    pub stop: Option<Signal>,
}

/// Blocks SIGCHLD and the terminating signals in this thread (threads started later
/// inherit the mask) until dropped. Block them only after forking any child that must not
/// inherit the mask (a mask survives exec).
pub struct Signals {
    fd: SignalFd,
    saved: SigSet,
}

impl Signals {
    pub fn block() -> io::Result<Signals> {
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGCHLD);
        for s in TERMINATING {
            mask.add(s);
        }
        let mut saved = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&mask), Some(&mut saved))?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .inspect_err(|_| {
                let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&saved), None);
            })?;
        Ok(Signals { fd, saved })
    }

    /// Waits until a signal arrives or `timeout` passes (`None`: no limit), then returns
    /// what arrived (possibly nothing, on a timeout).
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<Woken> {
        let ms = timeout.map(|d| d.as_millis().clamp(0, i32::MAX as u128) as i32);
        let timeout = match ms {
            Some(ms) => PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
            None => PollTimeout::NONE,
        };
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        self.drain()
    }

    /// Reads every pending signal without waiting.
    pub fn drain(&mut self) -> io::Result<Woken> {
        let mut woken = Woken::default();
        while let Some(info) = self.fd.read_signal()? {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGCHLD) => woken.child = true,
                Ok(s) => {
                    woken.stop.get_or_insert(s);
                }
                Err(_) => {}
            }
        }
        Ok(woken)
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&self.saved), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raised_signal_is_read_not_delivered() {
        let mut s = Signals::block().unwrap();
        nix::sys::signal::raise(Signal::SIGCHLD).unwrap();
        // raise() targets this thread, whose mask blocks the signal: it stays pending
        // until the signalfd reads it.
        let w = s.wait(Some(Duration::from_secs(5))).unwrap();
        assert!(w.child);
        assert_eq!(w.stop, None);
        let w = s.wait(Some(Duration::from_millis(10))).unwrap();
        assert_eq!(w, Woken::default(), "timeout with nothing pending");
    }
}
