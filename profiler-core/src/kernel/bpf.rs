//! The bpf(2) calls we make ourselves, for [`super::Linux`]: BPF_LINK_CREATE for perf events
//! with an attach cookie (Linux 5.15+; aya 0.14 keeps its perf link helper private, and the
//! cookie is how the overflow program tells requests apart), filling a PERF_EVENT_ARRAY with
//! events of ours, and the probe `cpc_open` makes.

use std::{
    io,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
};

const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PERF_EVENT: u32 = 41;

/// `union bpf_attr` as BPF_LINK_CREATE reads it for perf events.
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    bpf_cookie: u64,
    _reserved: [u64; 4],
}

/// Attaches `prog` to the perf event `event`; the link detaches when the returned fd closes.
pub(super) fn perf_event_link(
    prog: BorrowedFd<'_>,
    event: BorrowedFd<'_>,
    cookie: u64,
) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_fd: event.as_raw_fd() as u32,
        attach_type: BPF_PERF_EVENT,
        bpf_cookie: cookie,
        ..Default::default()
    };
    // SAFETY: bpf(BPF_LINK_CREATE) reads `attr` (valid for its size, zero-padded as the
    // kernel requires) and returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_CREATE,
            &mut attr as *mut LinkCreateAttr,
            std::mem::size_of::<LinkCreateAttr>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;

/// `union bpf_attr` as BPF_MAP_UPDATE_ELEM reads it.
#[repr(C)]
#[derive(Default)]
struct MapUpdateAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Stores the perf event `event` at `index` of the PERF_EVENT_ARRAY `map` (aya's typed maps
/// only fill such arrays with perf buffers of their own).
pub(super) fn perf_event_array_set(
    map: BorrowedFd<'_>,
    index: u32,
    event: BorrowedFd<'_>,
) -> io::Result<()> {
    let value = event.as_raw_fd() as u32;
    let mut attr = MapUpdateAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &index as *const u32 as u64,
        value: &value as *const u32 as u64,
        ..Default::default()
    };
    // SAFETY: bpf(BPF_MAP_UPDATE_ELEM) reads `attr` and the key and value it points to, all
    // alive on this stack frame for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_UPDATE_ELEM,
            &mut attr as *mut MapUpdateAttr,
            std::mem::size_of::<MapUpdateAttr>(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// bpf(BPF_PROG_GET_NEXT_ID) from id 0: succeeds (or ENOENT, no programs loaded) where bpf(2)
/// exists and we may use it.
pub(super) fn prog_get_next_id() -> io::Result<()> {
    let mut attr = [0u32; 4]; // { start_id, next_id, open_flags, pad }
    // SAFETY: bpf(BPF_PROG_GET_NEXT_ID) reads and writes the small attr buffer we pass, which
    // lives on this stack frame for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_GET_NEXT_ID,
            attr.as_mut_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ENOENT) {
            return Ok(());
        }
        return Err(err);
    }
    Ok(())
}
