//! The exit status of a run that did not fail itself. Precedence, highest first:
//! 1. the profiler's own errors: 2 for usage, 1 at run time (returned before this is asked);
//! 2. a terminating signal that ended the run (SIGINT, SIGTERM, SIGHUP): 128 + N;
//! 3. the command's own status: its exit code, or 128 + N when signal N killed it (what a
//!    shell reports), so a failing build or test run under the profiler still fails;
//! 4. 0.

use std::process::ExitCode;

/// How a started command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Killed(i32),
}

impl Ended {
    /// From waitpid's decoded status (record's command); `None` while it still runs.
    pub fn from_wait(status: nix::sys::wait::WaitStatus) -> Option<Ended> {
        use nix::sys::wait::WaitStatus;
        match status {
            WaitStatus::Exited(_, code) => Some(Ended::Exited(code)),
            WaitStatus::Signaled(_, sig, _) => Some(Ended::Killed(sig as i32)),
            _ => None,
        }
    }

    /// The status a shell would report for it.
    pub fn code(self) -> u8 {
        match self {
            Ended::Exited(code) => (code & 0xff) as u8,
            Ended::Killed(sig) => 128u8.wrapping_add(sig as u8),
        }
    }
}

/// The status of a run that ended without an error of its own.
pub fn status(interrupted: Option<i32>, command: Option<Ended>) -> ExitCode {
    ExitCode::from(code(interrupted, command))
}

fn code(interrupted: Option<i32>, command: Option<Ended>) -> u8 {
    match (interrupted, command) {
        (Some(sig), _) => 128u8.wrapping_add(sig as u8),
        (None, Some(ended)) => ended.code(),
        (None, None) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence() {
        assert_eq!(code(None, None), 0);
        assert_eq!(code(None, Some(Ended::Exited(0))), 0);
        assert_eq!(code(None, Some(Ended::Exited(3))), 3);
        assert_eq!(code(None, Some(Ended::Killed(libc::SIGKILL))), 137);
        assert_eq!(code(Some(libc::SIGINT), Some(Ended::Exited(0))), 130);
        assert_eq!(code(Some(libc::SIGTERM), None), 143);
    }
}
