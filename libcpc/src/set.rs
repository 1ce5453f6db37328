//! Sets, requests, binding and sampling: `cpc_set_*`, `cpc_bind_*`, `cpc_unbind`,
//! `cpc_enable`/`cpc_disable`, and the overflow calls `cpc_request_preset` and
//! `cpc_set_restart`, which run in signal handlers: their path takes no lock a handler could
//! wait on and allocates nothing on success (see `profiler_core::cpc`'s `sigsafe`).

use std::{
    ffi::{CString, c_char, c_int, c_uint, c_void},
    ptr,
};

use profiler_core::cpc::{Attr, Lwp};

use crate::{CBuf, CSet, Handle, cstring, fail, handle, set_errno, signal::Pctx, status, text};

/// `cpc_attr_t`.
#[repr(C)]
pub struct CAttr {
    pub ca_name: *mut c_char,
    pub ca_val: u64,
}

/// The set behind a pointer (EINVAL for NULL).
///
/// # Safety
/// `set` is NULL or a live set from `cpc_set_create`, not used by another thread.
unsafe fn set_mut<'a>(set: *mut CSet) -> Option<&'a mut CSet> {
    // SAFETY: as documented.
    let s = unsafe { set.as_mut() };
    if s.is_none() {
        set_errno(libc::EINVAL);
    }
    s
}

/// `cpc_set_create`: an empty, unbound set.
///
/// # Safety
/// `cpc` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_set_create(cpc: *const Handle) -> *mut CSet {
    // SAFETY: as documented.
    let Some(h) = (unsafe { handle(cpc) }) else {
        return ptr::null_mut();
    };
    let set = Box::into_raw(Box::new(h.cpc.set_create()));
    h.owned().sets.push(set as usize);
    set
}

/// `cpc_set_destroy`: unbinds the set if bound, then frees it. EINVAL if it is not this
/// handle's.
///
/// # Safety
/// `cpc` is NULL or a live handle; `set` is any pointer (only this handle's sets are freed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_set_destroy(cpc: *const Handle, set: *mut CSet) -> c_int {
    // SAFETY: as documented.
    let Some(h) = (unsafe { handle(cpc) }) else {
        return -1;
    };
    let mut owned = h.owned();
    let Some(i) = owned.sets.iter().position(|&s| s == set as usize) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    owned.sets.swap_remove(i);
    // SAFETY: the address was this handle's live box, now removed from its list.
    status(h.cpc.set_destroy(*unsafe { Box::from_raw(set) }))
}

/// `cpc_set_add_request`: the new request's index, or -1 (EINVAL: foreign or bound set,
/// unknown event (CPC_INVALID_EVENT), unknown attribute, bad `picnum`).
///
/// # Safety
/// `cpc` and `set` are NULL or live; `event` is NULL or a string; `attrs` points to
/// `nattrs` attributes (it may be NULL when `nattrs` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_set_add_request(
    cpc: *const Handle,
    set: *mut CSet,
    event: *const c_char,
    preset: u64,
    flags: c_uint,
    nattrs: c_uint,
    attrs: *const CAttr,
) -> c_int {
    // SAFETY: as documented.
    let (Some(h), Some(s)) = (unsafe { handle(cpc) }, unsafe { set_mut(set) }) else {
        return -1;
    };
    if nattrs > 0 && attrs.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let attrs: Vec<Attr> = (0..nattrs as usize)
        .map(|i| {
            // SAFETY: `attrs` holds `nattrs` entries; names are NULL or strings.
            let a = unsafe { &*attrs.add(i) };
            // SAFETY: the entry's name is NULL or a string, as documented.
            let name = unsafe { text(a.ca_name) };
            Attr::new(name, a.ca_val)
        })
        .collect();
    // SAFETY: `event` is NULL or a string.
    let event = unsafe { text(event) };
    match h.cpc.set_add_request(s, &event, preset, flags, &attrs) {
        Ok(i) => i as c_int,
        Err(e) => fail(&e),
    }
}

pub type RequestFn = Option<
    unsafe extern "C" fn(*mut c_void, c_int, *const c_char, u64, c_uint, c_int, *const CAttr),
>;

/// `cpc_walk_requests`: newest request first; the attribute array lives for the callback.
///
/// # Safety
/// `cpc` and `set` are NULL or live; `f` is NULL or a function taking `arg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_walk_requests(
    cpc: *const Handle,
    set: *mut CSet,
    arg: *mut c_void,
    f: RequestFn,
) {
    // SAFETY: as documented.
    let (Some(h), Some(s), Some(f)) = (unsafe { handle(cpc) }, unsafe { set_mut(set) }, f) else {
        return;
    };
    h.cpc
        .walk_requests(s, |index, event, preset, flags, attrs| {
            let names: Vec<CString> = attrs.iter().map(|a| cstring(&a.name)).collect();
            let cattrs: Vec<CAttr> = attrs
                .iter()
                .zip(&names)
                .map(|(a, n)| CAttr {
                    ca_name: n.as_ptr() as *mut c_char,
                    ca_val: a.value,
                })
                .collect();
            let event = cstring(event);
            let p = if cattrs.is_empty() {
                ptr::null()
            } else {
                cattrs.as_ptr()
            };
            // SAFETY: the caller's callback; every pointer lives across the call.
            unsafe {
                f(
                    arg,
                    index as c_int,
                    event.as_ptr(),
                    preset,
                    flags,
                    cattrs.len() as c_int,
                    p,
                )
            };
        });
}

/// `cpc_bind_curlwp`: counts for the calling thread. `flags`: 0 or CPC_BIND_LWP_INHERIT.
///
/// # Safety
/// `cpc` and `set` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_bind_curlwp(
    cpc: *const Handle,
    set: *mut CSet,
    flags: c_uint,
) -> c_int {
    // SAFETY: as documented.
    let (Some(h), Some(s)) = (unsafe { handle(cpc) }, unsafe { set_mut(set) }) else {
        return -1;
    };
    // The calling thread counts its own page faults: the library's code must not fault in
    // lazily between two of the caller's samples.
    map_own_code();
    status(h.cpc.bind_curlwp(s, flags))
}

/// Maps every page of this library's code now (MADV_POPULATE_READ, Linux 5.14), once per
/// process: a thread counting its own page faults would otherwise count the first run of
/// each of our code paths (one fault per new page, say in the first `cpc_set_sample`
/// after a bind, whose return path has not run yet).
fn map_own_code() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let here = map_own_code as *const () as usize as u64;
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        // Our file is the one whose executable mapping holds this function.
        let ours = maps.lines().find_map(|l| {
            let (range, rest) = l.split_once(' ')?;
            let (start, end) = range.split_once('-')?;
            let (start, end) = (
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
            );
            (start <= here && here < end).then(|| rest.rsplit(' ').next().unwrap_or("").to_string())
        });
        let Some(path) = ours.filter(|p| p.starts_with('/')) else {
            return;
        };
        for l in maps.lines().filter(|l| l.ends_with(path.as_str())) {
            let mut f = l.split_whitespace();
            let (Some(range), Some(perms)) = (f.next(), f.next()) else {
                continue;
            };
            let Some((start, end)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) else {
                continue;
            };
            if perms.contains('x') {
                // SAFETY: an advice on a range of our own mapping, as /proc/self/maps lists
                // it; MADV_POPULATE_READ only faults its pages in (an old kernel says EINVAL).
                unsafe {
                    libc::madvise(start as *mut c_void, end - start, libc::MADV_POPULATE_READ)
                };
            }
        }
    });
}

/// `cpc_bind_pctx`: counts for thread `id` (a Linux tid) of the process `pctx` names.
/// `flags` must be 0; ESRCH if the thread does not exist.
///
/// # Safety
/// `cpc` and `set` are NULL or live; `pctx` is NULL or from `pctx_capture`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_bind_pctx(
    cpc: *const Handle,
    pctx: *const Pctx,
    id: libc::id_t,
    set: *mut CSet,
    flags: c_uint,
) -> c_int {
    // SAFETY: as documented.
    let (Some(h), Some(s)) = (unsafe { handle(cpc) }, unsafe { set_mut(set) }) else {
        return -1;
    };
    // SAFETY: `pctx` is NULL or live.
    let (Some(p), Ok(tid)) = (unsafe { pctx.as_ref() }, i32::try_from(id)) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    status(h.cpc.bind_pctx(p.pid, Lwp::Thread(tid), s, flags))
}

/// `cpc_bind_cpu`: counts everything on CPU `id`. `flags` must be 0.
///
/// # Safety
/// `cpc` and `set` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_bind_cpu(
    cpc: *const Handle,
    id: c_int,
    set: *mut CSet,
    flags: c_uint,
) -> c_int {
    // SAFETY: as documented.
    let (Some(h), Some(s)) = (unsafe { handle(cpc) }, unsafe { set_mut(set) }) else {
        return -1;
    };
    let Ok(cpu) = u32::try_from(id) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    status(h.cpc.bind_cpu(cpu, s, flags))
}

/// `cpc_unbind`: EINVAL if the set is foreign or not bound.
///
/// # Safety
/// `cpc` and `set` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_unbind(cpc: *const Handle, set: *mut CSet) -> c_int {
    // SAFETY: as documented.
    let (Some(h), Some(s)) = (unsafe { handle(cpc) }, unsafe { set_mut(set) }) else {
        return -1;
    };
    status(h.cpc.unbind(s))
}

/// `cpc_set_sample`: EINVAL if unbound, the buffer's size differs, or another thread bound
/// the set with `cpc_bind_curlwp`; EAGAIN if a CPU binding invalidated it.
///
/// # Safety
/// `cpc`, `set` and `buf` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_set_sample(
    cpc: *const Handle,
    set: *mut CSet,
    buf: *mut CBuf,
) -> c_int {
    // SAFETY: as documented.
    let (Some(h), Some(s)) = (unsafe { handle(cpc) }, unsafe { set_mut(set) }) else {
        return -1;
    };
    // SAFETY: `buf` is NULL or live.
    let Some(b) = (unsafe { buf.as_mut() }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    status(h.cpc.set_sample(s, b))
}

/// `cpc_enable`: resumes the calling thread's frozen set.
///
/// # Safety
/// `cpc` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_enable(cpc: *const Handle) -> c_int {
    // SAFETY: as documented.
    unsafe { handle(cpc) }.map_or(-1, |h| status(h.cpc.enable()))
}

/// `cpc_disable`: freezes the calling thread's set.
///
/// # Safety
/// `cpc` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_disable(cpc: *const Handle) -> c_int {
    // SAFETY: as documented.
    unsafe { handle(cpc) }.map_or(-1, |h| status(h.cpc.disable()))
}

/// `cpc_request_preset`: the preset request `index` of the calling thread's set takes at
/// the next `cpc_set_restart`. Async-signal-safe.
///
/// # Safety
/// `cpc` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_request_preset(
    cpc: *const Handle,
    index: c_int,
    preset: u64,
) -> c_int {
    // SAFETY: as documented.
    let Some(h) = (unsafe { handle(cpc) }) else {
        return -1;
    };
    let Ok(index) = usize::try_from(index) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    status(h.cpc.request_preset(index, preset))
}

/// `cpc_set_restart`: every counter of `set` back to its (new) preset, freeze cleared.
/// Async-signal-safe. Unlike Solaris the set argument is used, so a thread that inherited
/// the binding (CPC_BIND_LWP_INHERIT) can restart it from its handler.
///
/// # Safety
/// `cpc` and `set` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_set_restart(cpc: *const Handle, set: *mut CSet) -> c_int {
    // SAFETY: as documented; only read, so a handler may use it while the thread it
    // interrupted works on the set.
    let (Some(h), Some(s)) = (unsafe { handle(cpc) }, unsafe { set.as_ref() }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    status(h.cpc.set_restart(s))
}
