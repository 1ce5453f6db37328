//! The libcpc overflow engine: at each overflow it finds the request by the BPF link's
//! attach cookie, filters by target in the kernel, computes libcpc's virtual value (preset +
//! count), writes one record (ids, time, IP, values) into the ring buffer, optionally signals
//! the overflowing thread, and counts every drop. `record`'s sampling program is
//! `crate::record`, which shares the target filters, requests and counters.

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, bpf_perf_event_value},
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_cgroup_id, bpf_get_current_comm,
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_perf_event_read_value, bpf_perf_prog_read_value, bpf_send_signal_thread,
    },
    macros::map,
    maps::{Array, HashMap, PerCpuArray, PerfEventArray, RingBuf},
    programs::PerfEventContext,
};
use profiler_common::{
    DEFAULT_RING_BYTES, MAX_REQUESTS, MAX_SIBLINGS, MAX_TARGET_CGROUPS, MAX_TARGET_TGIDS,
    MAX_TARGET_TIDS, RequestConfig, SampleRecord, SamplerConfig, filter, kernel_features,
    request_flags, stat,
};

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);
shared_name!(map EVENTS);

#[map]
pub(crate) static TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TARGET_TGIDS, 0);
shared_name!(map TGIDS);

#[map]
static TIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TARGET_TIDS, 0);
shared_name!(map TIDS);

#[map]
static CGROUPS: HashMap<u64, u8> = HashMap::with_max_entries(MAX_TARGET_CGROUPS, 0);
shared_name!(map CGROUPS);

#[map]
pub(crate) static CONFIG: Array<SamplerConfig> = Array::with_max_entries(1, 0);
shared_name!(map CONFIG);

#[map]
pub(crate) static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);
shared_name!(map STATS);

// The events of a notifying set, so a record can carry the whole set's values: request k of
// context c is at SIBk[c] (readable for events of the current task or CPU). One array per
// request because aya sizes every perf event array to the number of CPUs.
#[map]
static SIB0: PerfEventArray<u32> = PerfEventArray::new(0);
shared_name!(map SIB0);
#[map]
static SIB1: PerfEventArray<u32> = PerfEventArray::new(0);
shared_name!(map SIB1);
#[map]
static SIB2: PerfEventArray<u32> = PerfEventArray::new(0);
shared_name!(map SIB2);
#[map]
static SIB3: PerfEventArray<u32> = PerfEventArray::new(0);
shared_name!(map SIB3);
#[map]
static SIB4: PerfEventArray<u32> = PerfEventArray::new(0);
shared_name!(map SIB4);
#[map]
static SIB5: PerfEventArray<u32> = PerfEventArray::new(0);
shared_name!(map SIB5);
#[map]
static SIB6: PerfEventArray<u32> = PerfEventArray::new(0);
shared_name!(map SIB6);
#[map]
static SIB7: PerfEventArray<u32> = PerfEventArray::new(0);
shared_name!(map SIB7);

#[inline(always)]
pub(crate) fn sibling_map(k: usize) -> *mut core::ffi::c_void {
    let map: *const PerfEventArray<u32> = match k {
        0 => &raw const SIB0,
        1 => &raw const SIB1,
        2 => &raw const SIB2,
        3 => &raw const SIB3,
        4 => &raw const SIB4,
        5 => &raw const SIB5,
        6 => &raw const SIB6,
        _ => &raw const SIB7,
    };
    map as *mut core::ffi::c_void
}

/// The count of the event at `index` of `SIBk` (`BPF_F_CURRENT_CPU`: this CPU's), or `None`
/// when the slot is empty or the event cannot be read here.
#[inline(always)]
pub(crate) fn read_counter(k: usize, index: u64) -> Option<u64> {
    let mut v = bpf_perf_event_value {
        counter: 0,
        enabled: 0,
        running: 0,
    };
    // SAFETY: the map pointer is one of our PERF_EVENT_ARRAYs (repr(transparent) over its
    // definition, which the loader relocates); the helper writes one value into `v`.
    let rc = unsafe {
        bpf_perf_event_read_value(
            sibling_map(k),
            index,
            &mut v,
            core::mem::size_of::<bpf_perf_event_value>() as u32,
        )
    };
    (rc == 0).then_some(v.counter)
}

/// What this kernel offers ([`kernel_features`]), set by the loader: a constant in read-only
/// data, so the verifier removes the branches calling helpers the kernel lacks unchecked.
#[unsafe(no_mangle)]
static KERNEL_FEATURES: u32 = kernel_features::ALL;

/// The request of every overflow where the kernel has no attach cookies (set by the loader).
#[unsafe(no_mangle)]
static DEFAULT_COOKIE: u64 = 0;

/// Whether the kernel has `feature` ([`kernel_features`]).
#[inline(always)]
pub(crate) fn kernel_has(feature: u32) -> bool {
    // SAFETY: a volatile read of our own constant, so that it is read from the map the
    // loader filled rather than folded at compile time.
    unsafe { core::ptr::read_volatile(&raw const KERNEL_FEATURES) & feature != 0 }
}

/// The `REQUESTS` key of this overflow: the link's attach cookie, or `DEFAULT_COOKIE` on
/// kernels without cookies (before 5.15), where the loader allows one request.
#[inline(always)]
pub(crate) fn request_cookie(ctx: &PerfEventContext) -> u64 {
    if kernel_has(kernel_features::ATTACH_COOKIE) {
        // SAFETY: the helper only reads the running program's attach cookie.
        unsafe { bpf_get_attach_cookie(ctx.as_ptr()) }
    } else {
        // SAFETY: as in `kernel_has`.
        unsafe { core::ptr::read_volatile(&raw const DEFAULT_COOKIE) }
    }
}

#[map]
pub(crate) static REQUESTS: HashMap<u64, RequestConfig> =
    HashMap::with_max_entries(MAX_REQUESTS, 0);
shared_name!(map REQUESTS);

/// Returns 0 (the sample is fully handled here: perf writes nothing and sends no signal, and
/// on Linux 6.10+ the IOC_REFRESH budget is untouched), except for a request that freezes on
/// overflow (libcpc's NOTIFY), where 1 lets perf spend the budget and disable the event.
///
/// Written without aya's `#[perf_event]` attribute, whose expansion (aya-ebpf-macros 0.2.0)
/// discards the function's value and always returns 0; this is that expansion, returning it.
#[unsafe(no_mangle)]
#[unsafe(link_section = "perf_event")]
pub fn sample(ctx: *mut core::ffi::c_void) -> u32 {
    on_sample(&PerfEventContext::new(ctx.cast()))
}

#[inline(always)]
pub(crate) fn bump(slot: u32) {
    if let Some(counter) = STATS.get_ptr_mut(slot) {
        // SAFETY: per-CPU slot, and perf_event programs do not nest on one CPU.
        unsafe { *counter += 1 };
    }
}

/// Whether the current task passes the configured target filters.
#[inline(always)]
pub(crate) fn targeted(config: &SamplerConfig, tgid: u32, tid: u32) -> bool {
    // SAFETY: a plain map lookup; the value is only tested for presence.
    if config.filter & filter::TGID != 0 && unsafe { TGIDS.get(tgid) }.is_none() {
        return false;
    }
    // SAFETY: as above.
    if config.filter & filter::TID != 0 && unsafe { TIDS.get(tid) }.is_none() {
        return false;
    }
    // SAFETY: as above.
    !(config.filter & filter::CGROUP != 0
        && unsafe { CGROUPS.get(bpf_get_current_cgroup_id()) }.is_none())
}

#[inline(always)]
fn on_sample(ctx: &PerfEventContext) -> u32 {
    let Some(config) = CONFIG.get(0) else {
        return 0;
    };
    let cookie = request_cookie(ctx);
    // SAFETY: a plain map lookup; the value is copied out.
    let Some(request) = (unsafe { REQUESTS.get(cookie) }).copied() else {
        bump(stat::UNCONFIGURED);
        return 0;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    if !targeted(config, tgid, tid) {
        bump(stat::FILTERED);
        return 0;
    }
    let freeze = if request.flags & request_flags::FREEZE != 0 {
        1
    } else {
        0
    };
    if request.flags & request_flags::SIGNAL != 0 {
        // SAFETY: signals the current (overflowing) thread; no memory is passed.
        unsafe { bpf_send_signal_thread(request.signal) };
    }
    let mut count = bpf_perf_event_value {
        counter: 0,
        enabled: 0,
        running: 0,
    };
    // SAFETY: the helper writes one bpf_perf_event_value into our stack variable.
    let counted = unsafe {
        bpf_perf_prog_read_value(
            ctx.ctx,
            &mut count,
            core::mem::size_of::<bpf_perf_event_value>() as u32,
        )
    } == 0;
    let Some(mut entry) = EVENTS.reserve::<SampleRecord>(0) else {
        bump(stat::LOST);
        return freeze;
    };
    let rec = entry.as_mut_ptr();
    let data = ctx.ctx;
    // SAFETY: `rec` points at a reserved, exclusively owned ring-buffer slot of the right size;
    // fields are written in place (the record is far larger than the 512-byte BPF stack), and
    // `data` is the program's context, which the verifier lets us read.
    unsafe {
        (*rec).time_ns = bpf_ktime_get_ns();
        (*rec).cgroup_id = bpf_get_current_cgroup_id();
        (*rec).ip = crate::regs::pc(&(*data).regs);
        (*rec).period = (*data).sample_period;
        (*rec).value = if counted {
            request.preset.wrapping_add(count.counter)
        } else {
            0
        };
        (*rec).pid = tgid;
        (*rec).tid = tid;
        (*rec).cpu = bpf_get_smp_processor_id();
        (*rec).request = request.index;
        (*rec).comm = bpf_get_current_comm().unwrap_or([0; 16]);
        (*rec).addr = (*data).addr;
        (*rec).sibling_count = 0;
        (*rec)._pad1 = 0;
        read_siblings(&request, cookie, &mut *rec);
    }
    // Batch wake-ups: only wake the reader once enough is pending; it also polls on a timer.
    let pending = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    let wake = if pending + SampleRecord::SIZE as u64 >= config.wakeup_bytes {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(wake as u64);
    bump(stat::SUBMITTED);
    freeze
}

/// Reads the virtual values of the set's requests (up to `MAX_SIBLINGS`) into the record.
#[inline(always)]
fn read_siblings(request: &RequestConfig, cookie: u64, rec: &mut SampleRecord) {
    let n = (request.siblings as usize).min(MAX_SIBLINGS);
    let context = cookie & !0xffff;
    for k in 0..MAX_SIBLINGS {
        if k >= n {
            break;
        }
        let Some(counter) = read_counter(k, u64::from(request.sibling_base)) else {
            break;
        };
        // SAFETY: a plain map lookup; the preset is copied out.
        let preset = unsafe { REQUESTS.get(context | k as u64) }.map_or(0, |c| c.preset);
        rec.siblings[k] = preset.wrapping_add(counter);
        rec.sibling_count = k as u32 + 1;
    }
}
