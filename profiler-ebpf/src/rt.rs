//! The runtime seam's kernel half for runtimes that replace native frames (`MARK` hooks):
//! the native walk marks each frame whose PC is in one of the process's hooked ranges
//! ([`mark`]); after it, each hooked runtime writes its frames for its marks in a
//! `bpf_loop` of its own ([`finish`]: verified on its own, so a runtime adds its own cost
//! and not a share of every native step's), and each marked word is replaced by its
//! runtime's frames ([`splice`]). A process without hooks pays one missed lookup.

use aya_ebpf::{helpers::generated, macros::map, maps::HashMap};
use profiler_common::{
    MAX_WALK_WORDS, record_flags,
    runtimes::{
        MAX_GROUP_WORDS, MAX_HOOK_RANGES, MAX_MARKS, RT_STATE_BYTES, RtKey, RtProc, RtState, slots,
    },
    unwind::MAX_UNWIND_PROCS,
};

use crate::{
    ruby,
    unwind::{Walk, returned},
};

/// Each process's hooks, by tgid (user space adds them as it finds a runtime).
#[map]
static RT_PROCS: HashMap<u32, RtProc> =
    HashMap::with_max_entries(MAX_UNWIND_PROCS, aya_ebpf::bindings::BPF_F_NO_PREALLOC);
shared_name!(map RT_PROCS);

/// Each hooked runtime's state for a process, by (tgid, slot).
#[map]
static RT_STATE: HashMap<RtKey, RtState> =
    HashMap::with_max_entries(2 * MAX_UNWIND_PROCS, aya_ebpf::bindings::BPF_F_NO_PREALLOC);
shared_name!(map RT_STATE);

/// Starts a walk of process `tgid`: its hooks (none: nothing is marked), no marks yet.
#[inline(always)]
pub(crate) fn load(w: &mut Walk, tgid: u32, has: bool) {
    w.marks_len = 0;
    w.groups_len = 0;
    // SAFETY: a map value, only read (copied).
    match has.then(|| unsafe { RT_PROCS.get(tgid) }).flatten() {
        Some(h) => w.hooks = *h,
        None => {
            w.hooks.len = 0;
            w.hooks.slots = 0;
        }
    }
}

/// Forgets a process (exec, exit); its states go with user space's `forget`.
#[inline(always)]
pub(crate) fn forget(tgid: u32) {
    let _ = RT_PROCS.remove(tgid);
}

/// Runtime `slot`'s state for process `tgid`, as its own type.
#[inline(always)]
pub(crate) fn state<T>(tgid: u32, slot: u8) -> Option<&'static T> {
    const { assert!(core::mem::size_of::<T>() <= RT_STATE_BYTES) };
    let key = RtKey {
        tgid,
        slot: u32::from(slot),
    };
    // SAFETY: a map value of RT_STATE_BYTES, which `T` (plain integers, `#[repr(C)]`, size
    // asserted above) fits in, only read.
    unsafe {
        RT_STATE
            .get(key)
            .map(|s| &*(s as *const RtState).cast::<T>())
    }
}

/// Marks the native frame the walk is about to write when `at` (its PC) is in one of the
/// process's hooked ranges. A function of its own (`rt_mark`, see
/// [`crate::unwind::returned`]), answering through `w`: verified once, and every path
/// returns to the same verifier state, so the native step after it is verified once.
#[inline(always)]
pub(crate) fn mark(w: &mut Walk, at: u64) {
    // A process without hooks (most) pays no call.
    if w.hooks.len != 0 {
        returned(rt_mark(w, at));
    }
}

/// [`mark`]'s function (returns 0: a global BPF function returns a scalar).
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn rt_mark(w: *mut Walk, at: u64) -> u64 {
    // SAFETY: the walk's map value the caller passed (null tested).
    if let Some(w) = unsafe { w.as_mut() } {
        mark_frame(w, at);
    }
    0
}

#[inline(always)]
fn mark_frame(w: &mut Walk, at: u64) {
    let len = w.hooks.len;
    let r = &w.hooks.ranges;
    // Constant indices, spelled out: a loop over `len` was compiled into one the 6.1
    // verifier could not bound.
    const _: () = assert!(MAX_HOOK_RANGES == 4);
    let slot = if len > 0 && r[0].start <= at && at < r[0].end {
        r[0].slot
    } else if len > 1 && r[1].start <= at && at < r[1].end {
        r[1].slot
    } else if len > 2 && r[2].start <= at && at < r[2].end {
        r[2].slot
    } else if len > 3 && r[3].start <= at && at < r[3].end {
        r[3].slot
    } else {
        return;
    };
    let n = w.marks_len as usize;
    if n < MAX_MARKS {
        w.marks[n].index = w.stack.len as u16;
        w.marks[n].slot = slot;
        w.marks[n].group_start = 0;
        w.marks[n].group_len = 0;
        w.marks_len += 1;
    }
}

/// After the native walk: the hooked runtimes' frames for their marks, spliced in.
#[inline(always)]
pub(crate) fn finish(w: &mut Walk) {
    if w.marks_len == 0 {
        return;
    }
    // One line per marking runtime: its walk, in its own bpf_loop.
    if w.hooks.slots & (1 << slots::RUBY) != 0 {
        ruby::annotate(w);
    }
    if w.groups_len != 0 {
        splice(w);
    }
}

/// [`splice`]'s place in its loop (`Walk::loop_at`): the next native word, mark, group
/// word and output word; the group's end.
const NATIVE: usize = 0;
const MARK: usize = 1;
const GROUP: usize = 2;
const GROUP_END: usize = 3;
const OUT: usize = 4;

/// What [`splice_step`] gets: the walk only.
#[repr(C)]
struct SpliceCx {
    walk: *mut Walk,
}

/// Replaces each marked native word that has a group by the group's words, into `w.out`,
/// then back into `w.stack` (the outermost words cut, marked partial, past its room).
#[inline(always)]
fn splice(w: &mut Walk) {
    w.loop_at = [0; 6];
    let mut cx = SpliceCx { walk: w };
    // SAFETY: `splice_step` is a BPF callback taking (index, ctx); `cx` outlives the call.
    unsafe {
        generated::bpf_loop(
            MAX_WALK_WORDS as u32,
            splice_step as *mut core::ffi::c_void,
            (&raw mut cx).cast(),
            0,
        );
    }
    let n = w.loop_at[OUT] as usize;
    if n > MAX_WALK_WORDS {
        return;
    }
    if (w.loop_at[NATIVE] as usize) < w.stack.len as usize
        || w.loop_at[GROUP] < w.loop_at[GROUP_END]
    {
        w.flags |= record_flags::UNWIND_PARTIAL;
    }
    // SAFETY: both buffers are this CPU's map value, `n` words fit in each.
    unsafe {
        generated::bpf_probe_read_kernel(
            w.stack.frames.as_mut_ptr().cast(),
            (n * 8) as u32,
            w.out.as_ptr().cast(),
        );
    }
    w.stack.len = n as u32;
}

/// One output word of [`splice`]. Returns 1 when every word is out.
extern "C" fn splice_step(_index: u64, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the SpliceCx `splice` passed, whose walk is a map value.
    let w = unsafe { &mut *(*(ctx as *mut SpliceCx)).walk };
    let at = &mut w.loop_at;
    let o = at[OUT] as usize;
    if o >= MAX_WALK_WORDS {
        return 1;
    }
    if at[GROUP] < at[GROUP_END] {
        let Some(&word) = w.groups.get(at[GROUP] as usize) else {
            return 1;
        };
        w.out[o] = word;
        at[GROUP] += 1;
        at[OUT] += 1;
        return 0;
    }
    let i = at[NATIVE] as usize;
    if i >= w.stack.len as usize || i >= MAX_WALK_WORDS {
        return 1;
    }
    // The next mark with a group, if it is this word.
    let k = at[MARK] as usize;
    if k < MAX_MARKS && k < w.marks_len as usize {
        let m = w.marks[k];
        if m.index as usize == i {
            at[MARK] += 1;
            let end = u64::from(m.group_start) + u64::from(m.group_len);
            if m.group_len != 0 && end as usize <= MAX_GROUP_WORDS {
                at[GROUP] = u64::from(m.group_start);
                at[GROUP_END] = end;
                at[NATIVE] += 1;
                return 0;
            }
        }
    }
    w.out[o] = w.stack.frames[i];
    at[NATIVE] += 1;
    at[OUT] += 1;
    0
}
