//! `cpc_open`, `cpc_close`, the queries and the error handler.

use std::{
    ffi::{c_char, c_int, c_uint, c_void},
    ptr,
    sync::{Arc, Mutex},
};

use profiler_core::cpc::{Cpc, OverflowPolicy};

use crate::{CBuf, CSet, Handle, cstring, handle, set_errno, signal::sigemt};

/// `cpc_open`: NULL with EINVAL unless `ver` is CPC_VER_CURRENT, ENOSYS without perf events,
/// EACCES when perf use is forbidden. Overflows freeze the set (libcpc) and send SIGEMT.
#[unsafe(no_mangle)]
pub extern "C" fn cpc_open(ver: c_int) -> *mut Handle {
    let Ok(ver) = u32::try_from(ver) else {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    };
    let cpc = match Cpc::open(ver) {
        Ok(c) => c,
        Err(e) => {
            set_errno(e.errno);
            return ptr::null_mut();
        }
    };
    cpc.set_overflow_policy(OverflowPolicy::Freeze);
    if let Err(e) = cpc.set_overflow_signal(Some(sigemt())) {
        set_errno(e.errno);
        return ptr::null_mut();
    }
    let h = Handle {
        cciname: cstring(cpc.cciname()),
        cpuref: cstring(cpc.cpuref()),
        cpc,
        owned: Mutex::default(),
    };
    Box::into_raw(Box::new(h))
}

/// `cpc_close`: unbinds and frees every set and buffer of the handle, then the handle.
/// Always 0 (NULL is ignored).
///
/// # Safety
/// `cpc` is NULL or a live handle; no other thread uses it or its sets and buffers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_close(cpc: *mut Handle) -> c_int {
    if cpc.is_null() {
        return 0;
    }
    // SAFETY: the caller gives up the handle `cpc_open` boxed.
    let h = unsafe { Box::from_raw(cpc) };
    let owned = std::mem::take(&mut *h.owned());
    for s in owned.sets {
        // SAFETY: every address in `sets` is a live box from `cpc_set_create`.
        drop(unsafe { Box::from_raw(s as *mut CSet) });
    }
    for b in owned.bufs {
        // SAFETY: every address in `bufs` is a live box from `cpc_buf_create`.
        drop(unsafe { Box::from_raw(b as *mut CBuf) });
    }
    drop(h);
    0
}

/// `cpc_npic` (0 for NULL).
///
/// # Safety
/// `cpc` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_npic(cpc: *const Handle) -> c_uint {
    // SAFETY: as documented.
    unsafe { handle(cpc) }.map_or(0, |h| h.cpc.npic())
}

/// `cpc_caps` (0 for NULL).
///
/// # Safety
/// `cpc` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_caps(cpc: *const Handle) -> c_uint {
    // SAFETY: as documented.
    unsafe { handle(cpc) }.map_or(0, |h| h.cpc.caps())
}

/// `cpc_cciname`: valid until `cpc_close` (NULL for NULL).
///
/// # Safety
/// `cpc` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_cciname(cpc: *const Handle) -> *const c_char {
    // SAFETY: as documented.
    unsafe { handle(cpc) }.map_or(ptr::null(), |h| h.cciname.as_ptr())
}

/// `cpc_cpuref`: valid until `cpc_close` (NULL for NULL).
///
/// # Safety
/// `cpc` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_cpuref(cpc: *const Handle) -> *const c_char {
    // SAFETY: as documented.
    unsafe { handle(cpc) }.map_or(ptr::null(), |h| h.cpuref.as_ptr())
}

/// `cpc_errhndlr_t`: `void (const char *fn, int subcode, const char *fmt, va_list ap)`; the
/// va_list is opaque to Rust, so the handler is called through the C shim.
pub type ErrHndlr = *const c_void;

unsafe extern "C" {
    fn libcpc_call_errhndlr(
        h: ErrHndlr,
        func: *const c_char,
        subcode: c_int,
        fmt: *const c_char,
        ...
    );
}

/// A handler pointer that may move between threads (C function pointers are plain code).
#[derive(Clone, Copy)]
struct CHandler(ErrHndlr);
// SAFETY: a C function pointer has no thread affinity.
unsafe impl Send for CHandler {}
// SAFETY: as above; it is only called, never written.
unsafe impl Sync for CHandler {}

/// `cpc_seterrhndlr`: `fn` gets (function name, subcode, "%s", message) for every error that
/// has a subcode; NULL restores the default (`libcpc: <fn>: <text>` on stderr). Returns 0.
///
/// # Safety
/// `cpc` is NULL or a live handle; `fn` is NULL or a `cpc_errhndlr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_seterrhndlr(cpc: *const Handle, r#fn: ErrHndlr) -> c_int {
    // SAFETY: as documented.
    let Some(h) = (unsafe { handle(cpc) }) else {
        return -1;
    };
    if r#fn.is_null() {
        h.cpc.set_error_handler(None);
        return 0;
    }
    let c = CHandler(r#fn);
    h.cpc
        .set_error_handler(Some(Arc::new(move |func, subcode, msg| {
            let c = c;
            let (func, msg) = (cstring(func), cstring(msg));
            // SAFETY: `c.0` is the caller's handler; the strings live across the call.
            unsafe {
                libcpc_call_errhndlr(c.0, func.as_ptr(), subcode, c"%s".as_ptr(), msg.as_ptr())
            };
        })));
    0
}
