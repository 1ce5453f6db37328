//! BPF_LINK_CREATE for perf events, with an attach cookie (Linux 5.15+). aya 0.14 keeps its
//! perf link helper private, so this is the one bpf(2) call we make ourselves. The cookie is
//! how the overflow program tells requests apart (`bpf_get_attach_cookie`).

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
pub(crate) fn perf_event_link(
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
