//! Linux stand-ins for what Solaris has and Linux lacks: SIGEMT (a real-time signal), the
//! overflow PC (from the handler's ucontext, since the signal carries none), and libpctx's
//! process handle (perf needs no stopped process, so it only names the pid).

use std::ffi::{c_int, c_void};

/// libcpc.h's `SIGEMT` where the system has none: `SIGRTMIN + 4`.
pub fn sigemt() -> c_int {
    libc::SIGRTMIN() + 4
}

/// `cpc_overflow_pc`: the interrupted PC in an SA_SIGINFO handler's ucontext (the third
/// argument): for an overflow signal, where the counter overflowed (Solaris's si_addr).
/// NULL for NULL. Async-signal-safe.
///
/// # Safety
/// `ucontext` is NULL or the `ucontext_t` the kernel passed to the handler.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_overflow_pc(ucontext: *const c_void) -> *mut c_void {
    // SAFETY: as documented: a valid ucontext_t, only read.
    let Some(uc) = (unsafe { (ucontext as *const libc::ucontext_t).as_ref() }) else {
        return std::ptr::null_mut();
    };
    #[cfg(target_arch = "x86_64")]
    let pc = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize;
    #[cfg(target_arch = "aarch64")]
    let pc = uc.uc_mcontext.pc as usize;
    pc as *mut c_void
}

/// `pctx_t`: a process named for `cpc_bind_pctx`.
pub struct Pctx {
    pub pid: i32,
}

/// `pctx_capture` (libpctx's signature): names process `pid`; NULL with ESRCH if it does not
/// exist. `arg`, `verbose` and `errfn` are accepted and unused: nothing is stopped.
#[unsafe(no_mangle)]
pub extern "C" fn pctx_capture(
    pid: libc::pid_t,
    _arg: *mut c_void,
    _verbose: c_int,
    _errfn: *const c_void,
) -> *mut Pctx {
    // SAFETY: kill with signal 0 only checks that the process exists.
    if pid <= 0 || (unsafe { libc::kill(pid, 0) } != 0 && crate::errno() == libc::ESRCH) {
        crate::set_errno(libc::ESRCH);
        return std::ptr::null_mut();
    }
    Box::into_raw(Box::new(Pctx { pid }))
}

/// `pctx_release`: frees the handle (the process is untouched).
///
/// # Safety
/// `pctx` is NULL or from `pctx_capture`, released once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pctx_release(pctx: *mut Pctx) {
    if !pctx.is_null() {
        // SAFETY: as documented.
        drop(unsafe { Box::from_raw(pctx) });
    }
}
