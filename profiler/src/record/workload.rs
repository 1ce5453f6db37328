//! A command to profile, started only once the profiler is attached: it is forked at once,
//! waits on a pipe, and execs when `start` writes to it (perf does the same). Until then it
//! has run none of its own code, so no sample is missed and none belongs to anything else.

use std::{
    ffi::{CString, OsString},
    io,
    os::{
        fd::{AsRawFd, OwnedFd},
        unix::ffi::{OsStrExt, OsStringExt},
    },
    path::{Path, PathBuf},
};

use nix::{
    sys::{
        signal::{Signal, kill},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::{ForkResult, Pid, fork, pipe2},
};

use super::pidfd::PidFd;

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("command not found: {0}")]
    NotFound(String),
    #[error("command argument contains a NUL byte: {0:?}")]
    Nul(OsString),
    #[error("{call}: {source}")]
    Sys {
        call: &'static str,
        source: io::Error,
    },
    #[error("cannot run {cmd}: {source}")]
    Exec { cmd: String, source: io::Error },
}

fn sys(call: &'static str) -> impl FnOnce(nix::Error) -> WorkloadError {
    move |e| WorkloadError::Sys {
        call,
        source: io::Error::from(e),
    }
}

/// Finds `cmd` the way a shell would: as a path if it has a slash, else in `$PATH`.
pub fn resolve_command(cmd: &OsString) -> Result<PathBuf, WorkloadError> {
    let p = Path::new(cmd);
    let is_exec = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.as_bytes().contains(&b'/') {
        return if is_exec(p) {
            Ok(p.to_path_buf())
        } else {
            Err(WorkloadError::NotFound(p.display().to_string()))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(p))
        .find(|c| is_exec(c))
        .ok_or_else(|| WorkloadError::NotFound(p.display().to_string()))
}

/// A forked child parked before exec.
pub struct Workload {
    pid: Pid,
    /// The file it execs (`argv[0]` found on PATH).
    program: PathBuf,
    go: Option<OwnedFd>,
    exec_err: Option<OwnedFd>,
    reaped: bool,
    display: String,
}

impl Workload {
    /// Forks the child; it blocks until [`Workload::start`].
    pub fn prepare(argv: &[OsString]) -> Result<Self, WorkloadError> {
        Self::prepare_with(argv, false)
    }

    /// [`Workload::prepare`]; with `stdout_to_stderr` the command writes its standard
    /// output to our standard error (our stdout carries a profile: `-o -`).
    pub fn prepare_with(argv: &[OsString], stdout_to_stderr: bool) -> Result<Self, WorkloadError> {
        let program = resolve_command(&argv[0])?;
        let cstr = |s: &[u8]| {
            CString::new(s).map_err(|_| WorkloadError::Nul(OsString::from_vec(s.to_vec())))
        };
        let path = cstr(program.as_os_str().as_bytes())?;
        let args: Vec<CString> = argv
            .iter()
            .map(|a| cstr(a.as_bytes()))
            .collect::<Result<_, _>>()?;
        // Everything the child touches is prepared here: after fork it may only make
        // async-signal-safe calls (read, write, execv, _exit).
        let mut arg_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        arg_ptrs.push(std::ptr::null());
        let (go_r, go_w) = pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe2"))?;
        let (err_r, err_w) = pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe2"))?;
        let display = argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        // SAFETY: the child only calls async-signal-safe functions on memory prepared above
        // before it execs or exits.
        match unsafe { fork() }.map_err(sys("fork"))? {
            ForkResult::Child => {
                let mut b = 0u8;
                // SAFETY: raw read/dup2/write/execv/_exit on fds and buffers owned by this
                // process.
                unsafe {
                    if libc::read(go_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1) != 1 {
                        libc::_exit(127); // the profiler went away before starting us
                    }
                    if stdout_to_stderr {
                        libc::dup2(2, 1);
                    }
                    libc::execv(path.as_ptr(), arg_ptrs.as_ptr());
                    let errno = *libc::__errno_location();
                    libc::write(err_w.as_raw_fd(), (&errno as *const i32).cast(), 4);
                    libc::_exit(127);
                }
            }
            ForkResult::Parent { child } => {
                drop(go_r);
                drop(err_w);
                Ok(Self {
                    pid: child,
                    program,
                    go: Some(go_w),
                    exec_err: Some(err_r),
                    reaped: false,
                    display,
                })
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid.as_raw() as u32
    }

    /// The file the child will exec.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Lets the child exec; fails if the exec did.
    pub fn start(&mut self) -> Result<(), WorkloadError> {
        let go = self.go.take().expect("start called once");
        nix::unistd::write(&go, &[1]).map_err(sys("write"))?;
        drop(go);
        let err = self.exec_err.take().expect("start called once");
        let mut buf = [0u8; 4];
        // EOF (0 bytes) means the exec succeeded and closed the CLOEXEC write end.
        let n = nix::unistd::read(&err, &mut buf).map_err(sys("read"))?;
        if n == 4 {
            self.reap_blocking();
            return Err(WorkloadError::Exec {
                cmd: self.display.clone(),
                source: io::Error::from_raw_os_error(i32::from_ne_bytes(buf)),
            });
        }
        Ok(())
    }

    /// A pidfd that becomes readable when the child exits.
    pub fn pidfd(&self) -> io::Result<PidFd> {
        PidFd::open(self.pid())
    }

    /// Reaps the child if it has exited; returns its status then.
    pub fn try_reap(&mut self) -> Option<WaitStatus> {
        if self.reaped {
            return None;
        }
        match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => None,
            Ok(status) => {
                self.reaped = true;
                Some(status)
            }
            Err(_) => {
                self.reaped = true;
                None
            }
        }
    }

    fn reap_blocking(&mut self) {
        if !self.reaped {
            let _ = waitpid(self.pid, None);
            self.reaped = true;
        }
    }
}

impl Drop for Workload {
    /// A child that was never started is killed (it would otherwise run unprofiled); one that
    /// runs is left alone, as perf leaves it, but reaped if it already finished.
    fn drop(&mut self) {
        if self.go.is_some() {
            let _ = kill(self.pid, Signal::SIGKILL);
            self.reap_blocking();
        } else {
            self.try_reap();
        }
    }
}
