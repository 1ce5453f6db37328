//! The running goroutine's labels (`profiler_common::golabels`): for a Go process user
//! space published, the sample gets the address of `getg().m.curg.labels` and its first
//! word; user space reads the keys and values from the process.

use aya_ebpf::{
    helpers::{bpf_probe_read_kernel, bpf_probe_read_user, generated::bpf_get_current_task},
    macros::map,
    maps::HashMap,
};
use profiler_common::{
    golabels::{GO_LABEL_WORDS, GoProc},
    unwind::MAX_UNWIND_PROCS,
};

/// The Go processes whose samples carry labels, by tgid.
#[map]
static GO_PROCS: HashMap<u32, GoProc> =
    HashMap::with_max_entries(MAX_UNWIND_PROCS, aya_ebpf::bindings::BPF_F_NO_PREALLOC);
shared_name!(map GO_PROCS);

/// Forgets a process (exec, exit).
#[inline(always)]
pub(crate) fn forget(tgid: u32) {
    let _ = GO_PROCS.remove(tgid);
}

/// The label words of the goroutine running in process `tgid`, when it is a Go process
/// user space published and the goroutine has labels.
#[inline(always)]
pub(crate) fn read(tgid: u32) -> Option<[u64; GO_LABEL_WORDS]> {
    // SAFETY: a plain map lookup; the value is copied out.
    let p = *unsafe { GO_PROCS.get(tgid) }?;
    // SAFETY: the current task's field at an offset read from this kernel's BTF, read with
    // bpf_probe_read_kernel, which tolerates any address.
    let tp: u64 = unsafe {
        let task = bpf_get_current_task();
        bpf_probe_read_kernel((task + u64::from(p.task_fsbase)) as *const u64).ok()?
    };
    if tp == 0 {
        return None;
    }
    let g = user_word(tp.checked_add_signed(p.tls_offset)?)?;
    let m = user_word(nonzero(g)? + u64::from(p.g_m))?;
    let curg = user_word(nonzero(m)? + u64::from(p.m_curg))?;
    let labels = nonzero(user_word(nonzero(curg)? + u64::from(p.g_labels))?)?;
    Some([labels, user_word(labels)?])
}

#[inline(always)]
fn nonzero(v: u64) -> Option<u64> {
    (v != 0).then_some(v)
}

#[inline(always)]
fn user_word(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_user tolerates any address.
    unsafe { bpf_probe_read_user(addr as *const u64) }.ok()
}
