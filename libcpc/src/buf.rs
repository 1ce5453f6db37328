//! Buffers: `cpc_buf_*`.

use std::{ffi::c_int, ptr};

use profiler_core::cpc::Cpc;

use crate::{CBuf, CSet, Handle, fail, handle, set_errno, status};

/// `cpc_buf_create`: a zeroed buffer sized for the set's requests now (NULL, EINVAL for a
/// foreign set).
///
/// # Safety
/// `cpc` and `set` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_buf_create(cpc: *const Handle, set: *mut CSet) -> *mut CBuf {
    // SAFETY: as documented.
    let (Some(h), Some(s)) = (unsafe { handle(cpc) }, unsafe { set.as_ref() }) else {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    };
    match h.cpc.buf_create(s) {
        Ok(mut b) => {
            // Write it now: calloc'ed memory faults at its first write, which would otherwise
            // happen inside the first cpc_set_sample, after the read, and count in
            // page-faults deltas.
            h.cpc.buf_zero(&mut b);
            let b = Box::into_raw(Box::new(b));
            h.owned().bufs.push(b as usize);
            b
        }
        Err(e) => {
            fail(&e);
            ptr::null_mut()
        }
    }
}

/// `cpc_buf_destroy`: EINVAL for a buffer of another handle.
///
/// # Safety
/// `cpc` is NULL or live; `buf` is any pointer (only this handle's buffers are freed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_buf_destroy(cpc: *const Handle, buf: *mut CBuf) -> c_int {
    // SAFETY: as documented.
    let Some(h) = (unsafe { handle(cpc) }) else {
        return -1;
    };
    let mut owned = h.owned();
    let Some(i) = owned.bufs.iter().position(|&b| b == buf as usize) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    owned.bufs.swap_remove(i);
    // SAFETY: the address was this handle's live box, now removed from its list.
    status(h.cpc.buf_destroy(*unsafe { Box::from_raw(buf) }))
}

/// `cpc_buf_get`: EINVAL for an index out of range (illumos does not check).
///
/// # Safety
/// `cpc` and `buf` are NULL or live; `val` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_buf_get(
    cpc: *const Handle,
    buf: *const CBuf,
    index: c_int,
    val: *mut u64,
) -> c_int {
    // SAFETY: as documented.
    let (Some(h), Some(b)) = (unsafe { handle(cpc) }, unsafe { buf.as_ref() }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if val.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let Ok(index) = usize::try_from(index) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    match h.cpc.buf_get(b, index) {
        Ok(v) => {
            // SAFETY: `val` is non-NULL and writable.
            unsafe { *val = v };
            0
        }
        Err(e) => fail(&e),
    }
}

/// `cpc_buf_set`: writes one slot; EINVAL for an index out of range.
///
/// # Safety
/// `cpc` and `buf` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_buf_set(
    cpc: *const Handle,
    buf: *mut CBuf,
    index: c_int,
    val: u64,
) -> c_int {
    // SAFETY: as documented.
    let (Some(h), Some(b)) = (unsafe { handle(cpc) }, unsafe { buf.as_mut() }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let Ok(index) = usize::try_from(index) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    status(h.cpc.buf_set(b, index, val))
}

/// `cpc_buf_hrtime`: CLOCK_MONOTONIC nanoseconds of the sample (0 for NULL).
///
/// # Safety
/// `cpc` and `buf` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_buf_hrtime(cpc: *const Handle, buf: *const CBuf) -> i64 {
    // SAFETY: as documented.
    match (unsafe { handle(cpc) }, unsafe { buf.as_ref() }) {
        (Some(h), Some(b)) => h.cpc.buf_hrtime(b) as i64,
        _ => 0,
    }
}

/// `cpc_buf_tick` (0 for NULL).
///
/// # Safety
/// `cpc` and `buf` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_buf_tick(cpc: *const Handle, buf: *const CBuf) -> u64 {
    // SAFETY: as documented.
    match (unsafe { handle(cpc) }, unsafe { buf.as_ref() }) {
        (Some(h), Some(b)) => h.cpc.buf_tick(b),
        _ => 0,
    }
}

/// A source buffer, copied when it is also the destination (C allows `ds == a`).
///
/// # Safety
/// `src` is NULL or live.
unsafe fn source<'a>(src: *const CBuf, ds: *mut CBuf) -> Option<std::borrow::Cow<'a, CBuf>> {
    // SAFETY: `src` is NULL or live; an aliased source is copied before `ds` is borrowed
    // mutably, and a distinct one is not written while borrowed.
    let b: &'a CBuf = unsafe { src.as_ref() }?;
    Some(if ptr::eq(src, ds) {
        std::borrow::Cow::Owned(b.clone())
    } else {
        std::borrow::Cow::Borrowed(b)
    })
}

/// `ds = op(a, b)` for `cpc_buf_sub` and `cpc_buf_add`.
///
/// # Safety
/// Every pointer is NULL or live; `ds` may equal `a` or `b`.
unsafe fn binary(
    cpc: *const Handle,
    ds: *mut CBuf,
    a: *const CBuf,
    b: *const CBuf,
    op: fn(&Cpc, &mut CBuf, &CBuf, &CBuf),
) {
    // SAFETY: as documented.
    if let (Some(h), Some(a), Some(b)) = (unsafe { handle(cpc) }, unsafe { source(a, ds) }, unsafe { source(b, ds) })
        // SAFETY: `ds` is NULL or live, and no longer aliased by a source.
        && let Some(d) = unsafe { ds.as_mut() }
    {
        op(&h.cpc, d, &a, &b);
    }
}

/// `cpc_buf_sub`: `ds = a - b`; nothing if the sizes differ or a pointer is NULL.
///
/// # Safety
/// Every pointer is NULL or live; `ds` may equal `a` or `b`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_buf_sub(
    cpc: *const Handle,
    ds: *mut CBuf,
    a: *const CBuf,
    b: *const CBuf,
) {
    // SAFETY: as documented.
    unsafe { binary(cpc, ds, a, b, Cpc::buf_sub) }
}

/// `cpc_buf_add`: `ds = a + b`; nothing if the sizes differ or a pointer is NULL.
///
/// # Safety
/// As `cpc_buf_sub`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_buf_add(
    cpc: *const Handle,
    ds: *mut CBuf,
    a: *const CBuf,
    b: *const CBuf,
) {
    // SAFETY: as documented.
    unsafe { binary(cpc, ds, a, b, Cpc::buf_add) }
}

/// `cpc_buf_copy`: `ds = src`; nothing if the sizes differ.
///
/// # Safety
/// As `cpc_buf_sub`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_buf_copy(cpc: *const Handle, ds: *mut CBuf, src: *const CBuf) {
    // SAFETY: as documented.
    if let (Some(h), Some(s)) = (unsafe { handle(cpc) }, unsafe { source(src, ds) })
        // SAFETY: `ds` is NULL or live, and no longer aliased by the source.
        && let Some(d) = unsafe { ds.as_mut() }
    {
        h.cpc.buf_copy(d, &s);
    }
}

/// `cpc_buf_zero`.
///
/// # Safety
/// `cpc` and `buf` are NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cpc_buf_zero(cpc: *const Handle, buf: *mut CBuf) {
    // SAFETY: as documented.
    if let (Some(h), Some(b)) = (unsafe { handle(cpc) }, unsafe { buf.as_mut() }) {
        h.cpc.buf_zero(b);
    }
}
