//! The walkers: `cpc_walk_events_*`, `cpc_walk_generic_events_*`, `cpc_walk_attrs`.
//! Each name is passed as a C string that lives for the callback's duration.

use std::ffi::{c_char, c_uint, c_void};

use crate::{Handle, cstring, handle, set_errno};

pub type NameFn = Option<unsafe extern "C" fn(*mut c_void, *const c_char)>;
pub type PicFn = Option<unsafe extern "C" fn(*mut c_void, c_uint, *const c_char)>;

fn call(f: NameFn, arg: *mut c_void) -> impl FnMut(&str) {
    move |name| {
        if let Some(f) = f {
            let s = cstring(name);
            // SAFETY: the caller's callback, with its own argument and a live string.
            unsafe { f(arg, s.as_ptr()) };
        }
    }
}

fn call_pic(f: PicFn, arg: *mut c_void) -> impl FnMut(u32, &str) {
    move |pic, name| {
        if let Some(f) = f {
            let s = cstring(name);
            // SAFETY: the caller's callback, with its own argument and a live string.
            unsafe { f(arg, pic, s.as_ptr()) };
        }
    }
}

/// `cpc_walk_events_all`.
///
/// # Safety
/// `cpc` is NULL or a live handle; `f` is NULL or a function taking `arg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_walk_events_all(cpc: *const Handle, arg: *mut c_void, f: NameFn) {
    // SAFETY: as documented.
    if let Some(h) = unsafe { handle(cpc) } {
        h.cpc.walk_events_all(call(f, arg));
    }
}

/// `cpc_walk_generic_events_all`.
///
/// # Safety
/// As `cpc_walk_events_all`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_walk_generic_events_all(
    cpc: *const Handle,
    arg: *mut c_void,
    f: NameFn,
) {
    // SAFETY: as documented.
    if let Some(h) = unsafe { handle(cpc) } {
        h.cpc.walk_generic_events_all(call(f, arg));
    }
}

/// `cpc_walk_events_pic`: errno EINVAL, and no calls, if `picno >= cpc_npic()`.
///
/// # Safety
/// As `cpc_walk_events_all`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_walk_events_pic(
    cpc: *const Handle,
    picno: c_uint,
    arg: *mut c_void,
    f: PicFn,
) {
    // SAFETY: as documented.
    if let Some(h) = unsafe { handle(cpc) }
        && let Err(e) = h.cpc.walk_events_pic(picno, call_pic(f, arg))
    {
        set_errno(e.errno);
    }
}

/// `cpc_walk_generic_events_pic`: as `cpc_walk_events_pic`.
///
/// # Safety
/// As `cpc_walk_events_all`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_walk_generic_events_pic(
    cpc: *const Handle,
    picno: c_uint,
    arg: *mut c_void,
    f: PicFn,
) {
    // SAFETY: as documented.
    if let Some(h) = unsafe { handle(cpc) }
        && let Err(e) = h.cpc.walk_generic_events_pic(picno, call_pic(f, arg))
    {
        set_errno(e.errno);
    }
}

/// `cpc_walk_attrs`: the attribute names, `picnum` last.
///
/// # Safety
/// As `cpc_walk_events_all`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_walk_attrs(cpc: *const Handle, arg: *mut c_void, f: NameFn) {
    // SAFETY: as documented.
    if let Some(h) = unsafe { handle(cpc) } {
        h.cpc.walk_attrs(call(f, arg));
    }
}
