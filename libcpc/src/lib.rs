//! libcpc(3LIB) for C programs: `libcpc.so` and `include/libcpc.h`, a C ABI over
//! `profiler_core::cpc`. Only the ABI lives here: handles become opaque pointers, `Result`
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

use profiler_core::cpc::{Buf, Cpc, CpcError, Set};

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

#[cfg(test)]
mod tests {
    use profiler_core::cpc::{
        Subcode,
        consts::{MAX_ATTR_LEN, MAX_EVENT_LEN, VER_CURRENT, bind, caps, request},
    };

    /// `#define NAME VALUE` of libcpc.h, as a number.
    fn define(name: &str) -> u64 {
        let header = include_str!("../include/libcpc.h");
        let value = header
            .lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("#define") && w.next() == Some(name)).then(|| w.next())?
            })
            .unwrap_or_else(|| panic!("libcpc.h has no #define {name}"));
        match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
            None => value.parse().unwrap(),
        }
    }

    #[test]
    fn header_constants_are_the_rust_modules() {
        let pairs: &[(&str, u64)] = &[
            ("CPC_VER_CURRENT", VER_CURRENT.into()),
            ("CPC_OVF_NOTIFY_EMT", request::OVF_NOTIFY_EMT.into()),
            ("CPC_COUNT_USER", request::COUNT_USER.into()),
            ("CPC_COUNT_SYSTEM", request::COUNT_SYSTEM.into()),
            ("CPC_COUNT_HV", request::COUNT_HV.into()),
            ("CPC_BIND_LWP_INHERIT", bind::LWP_INHERIT.into()),
            (
                "CPC_CAP_OVERFLOW_INTERRUPT",
                caps::OVERFLOW_INTERRUPT.into(),
            ),
            ("CPC_CAP_OVERFLOW_PRECISE", caps::OVERFLOW_PRECISE.into()),
            ("CPC_MAX_EVENT_LEN", MAX_EVENT_LEN as u64),
            ("CPC_MAX_ATTR_LEN", MAX_ATTR_LEN as u64),
            ("CPC_INVALID_EVENT", Subcode::InvalidEvent as u64),
            ("CPC_INVALID_PICNUM", Subcode::InvalidPicnum as u64),
            ("CPC_INVALID_ATTRIBUTE", Subcode::InvalidAttribute as u64),
            (
                "CPC_ATTRIBUTE_OUT_OF_RANGE",
                Subcode::AttributeOutOfRange as u64,
            ),
            ("CPC_RESOURCE_UNAVAIL", Subcode::ResourceUnavail as u64),
            ("CPC_PIC_NOT_CAPABLE", Subcode::PicNotCapable as u64),
            ("CPC_REQ_INVALID_FLAGS", Subcode::ReqInvalidFlags as u64),
            ("CPC_CONFLICTING_REQS", Subcode::ConflictingReqs as u64),
            (
                "CPC_ATTR_REQUIRES_PRIVILEGE",
                Subcode::AttrRequiresPrivilege as u64,
            ),
            ("CPC_PBIND_FAILED", Subcode::PbindFailed as u64),
            ("CPC_HV_NO_ACCESS", Subcode::HvNoAccess as u64),
            ("EMT_CPCOVF", libc::SI_KERNEL as u64),
        ];
        for &(name, value) in pairs {
            assert_eq!(define(name), value, "{name}");
        }
    }

    #[test]
    fn sigemt_is_the_headers_real_time_signal() {
        // libcpc.h: #define SIGEMT (SIGRTMIN + 4)
        assert!(include_str!("../include/libcpc.h").contains("#define SIGEMT (SIGRTMIN + 4)"));
        assert_eq!(super::signal::sigemt(), libc::SIGRTMIN() + 4);
    }
}
