//! libcpc(3LIB) for C programs: `libcpc.so` and `include/libcpc.h`, a C ABI over
//! `profiler::cpc`. Only the ABI lives here: handles become opaque pointers, `Result`
//! becomes -1 (or NULL) with errno, callbacks and strings cross the boundary; every rule
//! of libcpc is the Rust module's. The header documents each difference from Solaris.

mod buf;
mod handle;
mod set;
mod signal;
mod walk;

use std::{
    ffi::{CStr, CString, c_char, c_int},
    sync::{Mutex, MutexGuard},
};

use profiler::cpc::{Buf, Cpc, CpcError, Set};

/// `cpc_t`: the Rust handle, the strings C holds pointers to, and every set and buffer
/// created through it (freed by `cpc_close`, and used to refuse foreign pointers to the
/// destroy calls).
pub struct Handle {
    cpc: Cpc,
    cciname: CString,
    cpuref: CString,
    owned: Mutex<Owned>,
}

/// Addresses of the boxed sets and buffers of a handle.
#[derive(Default)]
struct Owned {
    sets: Vec<usize>,
    bufs: Vec<usize>,
}

impl Handle {
    fn owned(&self) -> MutexGuard<'_, Owned> {
        self.owned.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `cpc_set_t`.
pub type CSet = Set;
/// `cpc_buf_t`.
pub type CBuf = Buf;

fn set_errno(e: c_int) {
    // SAFETY: writes this thread's errno slot (async-signal-safe).
    unsafe { *libc::__errno_location() = e };
}

/// libcpc's failure return: errno from the error, -1.
fn fail(e: &CpcError) -> c_int {
    set_errno(e.errno);
    -1
}

fn status(r: Result<(), CpcError>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

/// The handle behind a `cpc_t *`, or EINVAL for NULL.
///
/// # Safety
/// `cpc` is NULL or a pointer `cpc_open` returned and `cpc_close` has not freed.
unsafe fn handle<'a>(cpc: *const Handle) -> Option<&'a Handle> {
    // SAFETY: the caller passes NULL or a live handle.
    let h = unsafe { cpc.as_ref() };
    if h.is_none() {
        set_errno(libc::EINVAL);
    }
    h
}

/// A C string as text (lossy: invalid UTF-8 then fails as an unknown name in the library).
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn text(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// A Rust string as a C string (interior NULs cannot come from the catalogue; dropped if so).
fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

fn errno() -> c_int {
    // SAFETY: reads this thread's errno slot.
    unsafe { *libc::__errno_location() }
}
