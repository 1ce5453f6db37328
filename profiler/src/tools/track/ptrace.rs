//! The ptrace(2) and waitpid(2) edge of the tracker, and the /proc reads it needs.
//!
//! waitpid and the calls that pass a signal go through libc directly: nix decodes stop
//! signals into its `Signal` enum, which has no real-time signals, and a tracee stopped by
//! one (glibc uses SIGRTMIN internally) must still be reported and resumed with it.

use std::{fs, io};

use nix::{
    sys::ptrace::{self, Options},
    unistd::Pid,
};

/// What waitpid reported about one tracee.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// It exited (`_exit`, or the end of its thread).
    Exited { tid: i32, code: i32 },
    /// A signal killed it.
    Killed { tid: i32, signal: i32 },
    /// Signal-delivery-stop: `signal` is about to be delivered; resume with it to deliver it.
    Signal { tid: i32, signal: i32 },
    /// A `PTRACE_EVENT_*` stop (clone, fork, vfork, exec, exit, or the seize-mode stop).
    Event { tid: i32, event: i32, signal: i32 },
}

impl Report {
    pub fn tid(&self) -> i32 {
        match *self {
            Report::Exited { tid, .. }
            | Report::Killed { tid, .. }
            | Report::Signal { tid, .. }
            | Report::Event { tid, .. } => tid,
        }
    }
}

fn decode(tid: i32, status: i32) -> Option<Report> {
    if libc::WIFEXITED(status) {
        Some(Report::Exited {
            tid,
            code: libc::WEXITSTATUS(status),
        })
    } else if libc::WIFSIGNALED(status) {
        Some(Report::Killed {
            tid,
            signal: libc::WTERMSIG(status),
        })
    } else if libc::WIFSTOPPED(status) {
        let signal = libc::WSTOPSIG(status);
        Some(match status >> 16 {
            0 => Report::Signal { tid, signal },
            event => Report::Event { tid, event, signal },
        })
    } else {
        None
    }
}

/// waitpid(`pid`, __WALL [| WNOHANG]): `Ok(None)` when nothing is pending (with `nohang`);
/// ECHILD when there is no child or tracee left to wait for.
pub fn wait(pid: i32, nohang: bool) -> io::Result<Option<Report>> {
    let flags = libc::__WALL | if nohang { libc::WNOHANG } else { 0 };
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes one int through the valid pointer we pass.
        let got = unsafe { libc::waitpid(pid, &mut status, flags) };
        match got {
            0 => return Ok(None),
            -1 => {
                let err = io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(err);
            }
            tid => {
                if let Some(r) = decode(tid, status) {
                    return Ok(Some(r));
                }
            }
        }
    }
}

/// The options every tracee gets: new threads (and, to report them, new processes) are
/// stopped at birth; exec and exit stop the tracee.
pub fn options() -> Options {
    Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK
        | Options::PTRACE_O_TRACEEXEC
        | Options::PTRACE_O_TRACEEXIT
}

pub fn seize(tid: i32, options: Options) -> nix::Result<()> {
    ptrace::seize(Pid::from_raw(tid), options)
}

pub fn set_options(tid: i32, options: Options) -> nix::Result<()> {
    ptrace::setoptions(Pid::from_raw(tid), options)
}

/// PTRACE_INTERRUPT: makes a running tracee stop (reported as a `PTRACE_EVENT_STOP`).
pub fn interrupt(tid: i32) -> nix::Result<()> {
    ptrace::interrupt(Pid::from_raw(tid))
}

/// PTRACE_GETEVENTMSG: the new tid at clone/fork, the former tid at exec.
pub fn event_message(tid: i32) -> nix::Result<libc::c_long> {
    ptrace::getevent(Pid::from_raw(tid))
}

fn request(req: libc::c_uint, tid: i32, signal: i32) -> nix::Result<()> {
    // SAFETY: CONT, DETACH and LISTEN take no address and an integer signal as data; no
    // memory of ours is read or written.
    let rc = unsafe {
        libc::ptrace(
            req,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            signal as libc::c_long as *mut libc::c_void,
        )
    };
    if rc == -1 {
        Err(nix::Error::last())
    } else {
        Ok(())
    }
}

/// PTRACE_CONT, delivering `signal` (0: none).
pub fn resume(tid: i32, signal: i32) -> nix::Result<()> {
    request(libc::PTRACE_CONT, tid, signal)
}

/// PTRACE_DETACH, delivering `signal` (0: none).
pub fn detach(tid: i32, signal: i32) -> nix::Result<()> {
    request(libc::PTRACE_DETACH, tid, signal)
}

/// PTRACE_LISTEN: lets a group-stopped tracee stay stopped while we keep waiting.
pub fn listen(tid: i32) -> nix::Result<()> {
    request(libc::PTRACE_LISTEN, tid, 0)
}

/// Whether a stop signal put the tracee in this `PTRACE_EVENT_STOP` (a group-stop).
pub fn is_group_stop(signal: i32) -> bool {
    matches!(
        signal,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
    )
}

/// `Tgid`, `PPid` and `TracerPid` of a task, from /proc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskIds {
    pub tgid: i32,
    pub ppid: i32,
    pub tracer: i32,
}

pub fn task_ids(tid: i32) -> io::Result<TaskIds> {
    let status = profiler_core::host::TaskStatus::read(tid)?;
    let field = |name: &str| -> io::Result<i32> {
        status
            .field(name)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| io::Error::other(format!("no {name} in /proc/{tid}/status")))
    };
    Ok(TaskIds {
        tgid: field("Tgid")?,
        ppid: field("PPid")?,
        tracer: field("TracerPid")?,
    })
}

/// The system call a stopped task is in, from /proc/TID/syscall (`None`: not in one).
pub fn current_syscall(tid: i32) -> Option<i64> {
    let text = fs::read_to_string(format!("/proc/{tid}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Whether a task stopped at its exit is leaving by `_lwp_exit` (SYS_exit: this thread
/// only), rather than with its process (exit_group, a fatal signal, exec).
pub fn exiting_alone(tid: i32) -> bool {
    current_syscall(tid) == Some(libc::SYS_exit)
}

/// Whether a task stopped at its exit called exit_group.
pub fn exiting_group(tid: i32) -> bool {
    current_syscall(tid) == Some(libc::SYS_exit_group)
}

/// A process's arguments joined by spaces (Solaris prints `pr_psargs`).
pub fn cmdline(pid: i32) -> String {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_wait_statuses() {
        // Exit code 3: (3 << 8); killed by SIGKILL: 9; stopped: 0x7f | sig << 8 | event << 16.
        assert_eq!(decode(5, 3 << 8), Some(Report::Exited { tid: 5, code: 3 }));
        assert_eq!(decode(5, 9), Some(Report::Killed { tid: 5, signal: 9 }));
        let rt = libc::SIGRTMIN();
        assert_eq!(
            decode(5, 0x7f | (rt << 8)),
            Some(Report::Signal { tid: 5, signal: rt }),
            "real-time signals are reported, not dropped"
        );
        let clone = 0x7f | (libc::SIGTRAP << 8) | (libc::PTRACE_EVENT_CLONE << 16);
        assert_eq!(
            decode(5, clone),
            Some(Report::Event {
                tid: 5,
                event: libc::PTRACE_EVENT_CLONE,
                signal: libc::SIGTRAP
            })
        );
        assert_eq!(decode(5, 0xffff), None, "continued");
    }

    #[test]
    fn reads_this_process_from_proc() {
        let me = std::process::id() as i32;
        let ids = task_ids(me).unwrap();
        assert_eq!(ids.tgid, me);

        assert!(cmdline(me).contains("profiler"), "{}", cmdline(me));
        assert!(!is_group_stop(libc::SIGTRAP));
        assert!(is_group_stop(libc::SIGTSTP));
    }
}
