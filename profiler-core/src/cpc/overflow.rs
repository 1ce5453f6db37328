//! Overflow notification (libcpc's CPC_OVF_NOTIFY_EMT) on the eBPF overflow engine.
//!
//! A request with `OVF_NOTIFY_EMT` and a non-zero preset overflows after `2^64 - preset`
//! events. At each overflow the engine's program (the same one `record` uses) computes the
//! virtual value and writes an [`Overflow`] to the binding's ring buffer; user space reads
//! them from a stream or through a callback thread. Under [`OverflowPolicy::Freeze`]
//! (libcpc's behaviour) the set stops counting at the overflow until `set_restart`; under
//! [`OverflowPolicy::Continue`] perf reloads the period and every overflow is reported.
//! Optionally the overflowing thread also receives a signal (libcpc's SIGEMT).

use std::{
    os::fd::AsFd,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use profiler_common::{MAX_SIBLINGS, RequestConfig, SampleRecord, SamplerConfig, request_flags};

use super::{bind::Binding, error::CpcError, group::Group, handle::Cpc, set::Set};
use crate::bpf::{Records, Sampler, SamplerStats};
use crate::{kernel::Kernel, perf::EventAttr};

/// What happens to a set when one of its notifying requests overflows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OverflowPolicy {
    /// libcpc: the set stops counting until `set_restart` (exact for the group leader, which
    /// is the first notifying request; with `LWP_INHERIT` the kernel cannot freeze, and the
    /// set continues as under `Continue`).
    #[default]
    Freeze,
    /// Linux: the period reloads and counting goes on; every overflow is reported.
    Continue,
}

/// One overflow of a notifying request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow {
    /// Index of the request that overflowed.
    pub request: usize,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    /// Instruction pointer at the overflow (the faulting instruction for page faults).
    pub pc: u64,
    /// The request's virtual value at the overflow (it has wrapped past 0).
    pub value: u64,
    /// CLOCK_MONOTONIC nanoseconds.
    pub time_ns: u64,
    pub cgroup_id: u64,
    /// Data address: the faulting address for page-fault events, the PMU's data address for
    /// precise hardware sampling (`HW_SMPL`); 0 where the event has none.
    pub addr: u64,
    siblings: [u64; MAX_SIBLINGS],
    nsiblings: usize,
}

impl Overflow {
    /// The virtual value of every request of the set at the overflow, by index, when the
    /// handle asked for them (`Cpc::set_overflow_values`); empty otherwise.
    pub fn values(&self) -> &[u64] {
        &self.siblings[..self.nsiblings]
    }
}

impl From<&SampleRecord> for Overflow {
    fn from(r: &SampleRecord) -> Self {
        Overflow {
            request: r.request as usize,
            pid: r.pid,
            tid: r.tid,
            cpu: r.cpu,
            pc: r.ip,
            value: r.value,
            time_ns: r.time_ns,
            cgroup_id: r.cgroup_id,
            addr: r.addr,
            siblings: r.siblings,
            nsiblings: (r.sibling_count as usize).min(MAX_SIBLINGS),
        }
    }
}

/// Ring buffer of one notifying binding (256 KiB: about 110 records).
const ENGINE_RING_BYTES: u32 = 256 << 10;

/// The eBPF program and its links for one binding's notifying requests.
pub(crate) struct Engine {
    pub sampler: Sampler,
    pub freeze: bool,
    /// Contexts (groups) and requests per context.
    slots: usize,
    nreq: usize,
    /// Records carry every request's value (cookies then name the context too).
    siblings: bool,
    notify: Vec<usize>,
}

/// The per-request program configuration for the engine.
pub(crate) fn request_config(
    preset: u64,
    index: usize,
    freeze: bool,
    signal: Option<i32>,
) -> RequestConfig {
    let mut flags = 0;
    if freeze {
        flags |= request_flags::FREEZE;
    }
    if signal.is_some() {
        flags |= request_flags::SIGNAL;
    }
    RequestConfig {
        preset,
        index: index as u32,
        flags,
        signal: signal.unwrap_or(0) as u32,
        ..Default::default()
    }
}

impl Engine {
    /// Loads the program and links it to every context's events of the `notify` requests.
    #[allow(clippy::too_many_arguments)]
    pub fn attach(
        kernel: &'static dyn Kernel,
        func: &'static str,
        groups: &[Group],
        nreq: usize,
        notify: &[usize],
        presets: &[u64],
        freeze: bool,
        signal: Option<i32>,
        siblings: bool,
    ) -> Result<Engine, CpcError> {
        // Notifications are latency-sensitive: wake the reader on every record.
        let config = SamplerConfig::default();
        if siblings {
            let cpus = crate::host::online_cpus().map(|c| c.len()).unwrap_or(1);
            if groups.len() > cpus || nreq > MAX_SIBLINGS {
                return Err(CpcError::new(
                    func,
                    libc::ENOTSUP,
                    format!(
                        "overflow values need at most {MAX_SIBLINGS} requests and {cpus} contexts \
                         (one per CPU); this set has {nreq} requests in {} contexts",
                        groups.len()
                    ),
                ));
            }
        }
        let sampler =
            Sampler::load_in(kernel, config, ENGINE_RING_BYTES).map_err(bpf_error(func))?;
        let mut engine = Engine {
            sampler,
            freeze,
            slots: groups.len(),
            nreq,
            siblings,
            notify: notify.to_vec(),
        };
        engine.configure(func, presets, signal)?;
        for (s, g) in groups.iter().enumerate() {
            if siblings {
                for k in 0..nreq {
                    engine
                        .sampler
                        .set_sibling(k, s as u32, g.event(k).as_fd())
                        .map_err(bpf_error(func))?;
                }
            }
            for &i in notify {
                engine
                    .sampler
                    .link(g.event(i).as_fd(), engine.cookie(s, i))
                    .map_err(bpf_error(func))?;
            }
        }
        Ok(engine)
    }

    /// The attach cookie of request `index` in context `slot`.
    fn cookie(&self, slot: usize, index: usize) -> u64 {
        if self.siblings {
            ((slot as u64) << 16) | index as u64
        } else {
            index as u64
        }
    }

    /// (Re)writes the program's per-request configuration: presets, freeze, signal, and
    /// where each context's requests sit in the sibling array.
    pub fn configure(
        &mut self,
        func: &'static str,
        presets: &[u64],
        signal: Option<i32>,
    ) -> Result<(), CpcError> {
        for s in 0..if self.siblings { self.slots } else { 1 } {
            for (k, &preset) in presets.iter().enumerate() {
                let notifies = self.notify.contains(&k);
                // Without siblings only notifying requests need an entry.
                if !notifies && !self.siblings {
                    continue;
                }
                let mut config = request_config(
                    preset,
                    k,
                    self.freeze && notifies,
                    signal.filter(|_| notifies),
                );
                if self.siblings {
                    config.sibling_base = s as u32;
                    config.siblings = self.nreq as u32;
                }
                self.sampler
                    .set_request(self.cookie(s, k), config)
                    .map_err(bpf_error(func))?;
            }
        }
        Ok(())
    }
}

fn bpf_error(func: &'static str) -> impl Fn(crate::bpf::BpfError) -> CpcError {
    move |e| CpcError::new(func, libc::ENOTSUP, format!("overflow engine: {e}"))
}

/// libcpc's `CPC_HW_SMPL` on Linux: precise sampling (PEBS, IBS) at `precise` with the
/// PMU capturing IP, data address, weight (latency) and data source. The overflow engine
/// delivers these requests like notifying ones; its records carry the precise IP and the
/// data address (a perf_event BPF program can read only regs, sample_period and addr, so
/// weight and data source stay in perf's own sample).
pub(crate) fn hw_sampling_attr(attr: &mut EventAttr, precise: u8) {
    use perf_event_open_sys::bindings::{
        PERF_SAMPLE_ADDR, PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_IP, PERF_SAMPLE_WEIGHT,
    };
    attr.set_precise_ip(precise);
    attr.set_sample_type(
        (PERF_SAMPLE_IP | PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC) as u64,
    );
}

/// The PMU's highest precise_ip level (its `caps/max_precise`), 0 without one.
pub(crate) fn max_precise() -> u8 {
    std::fs::read_to_string("/sys/bus/event_source/devices/cpu/caps/max_precise")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// `2^64 - preset`: events until a counter starting at `preset` wraps. 0 means never.
pub(crate) fn period_for(preset: u64) -> u64 {
    preset.wrapping_neg()
}

/// Overflows of one set, read in the calling thread (`profiler::cpc::OverflowStream` is the
/// async form).
pub struct Overflows {
    records: Records,
    pending: std::collections::VecDeque<Overflow>,
}

impl Overflows {
    /// The next overflow, waiting at most `timeout` for one.
    pub fn next_timeout(&mut self, timeout: std::time::Duration) -> Option<Overflow> {
        if self.pending.is_empty() {
            let pending = &mut self.pending;
            self.records
                .next_batch(timeout, |r| pending.push_back(r.into()));
        }
        self.pending.pop_front()
    }

    /// Every overflow already delivered, without waiting.
    pub fn drain(&mut self) -> Vec<Overflow> {
        let pending = &mut self.pending;
        self.records.drain(|r| pending.push_back(r.into()));
        self.pending.drain(..).collect()
    }

    /// The ring buffer and the overflows read from it but not yet returned.
    pub fn into_parts(self) -> (Records, std::collections::VecDeque<Overflow>) {
        (self.records, self.pending)
    }
}

/// A thread calling a handler for each overflow of a set; stops (and joins) on drop.
pub struct OverflowHandler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for OverflowHandler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Cpc {
    /// What a notifying set does at an overflow (applies to sets bound afterwards).
    pub fn set_overflow_policy(&self, policy: OverflowPolicy) {
        *self
            .overflow_policy
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = policy;
    }

    /// Also send `signal` to the overflowing thread (libcpc's SIGEMT; Linux has none on x86,
    /// so any signal may stand in). For thread bindings; applies to sets bound afterwards.
    /// The handler finds the overflow PC in its ucontext (the interrupted instruction).
    pub fn set_overflow_signal(&self, signal: Option<i32>) -> Result<(), CpcError> {
        if let Some(s) = signal
            && !(1..=libc::SIGRTMAX()).contains(&s)
        {
            return Err(CpcError::new(
                "cpc_set_overflow_signal",
                libc::EINVAL,
                format!("bad signal {s}"),
            ));
        }
        self.overflow_signal
            .store(signal.unwrap_or(0), Ordering::SeqCst);
        Ok(())
    }

    /// Each overflow also carries every request's value at that instant (read in the kernel
    /// at the overflow, up to 8 requests); applies to sets bound afterwards.
    pub fn set_overflow_values(&self, on: bool) {
        self.overflow_siblings.store(on, Ordering::SeqCst);
    }

    fn engine_binding(&self, func: &'static str, set: &Set) -> Result<Arc<Binding>, CpcError> {
        let b = set.binding.as_ref().filter(|b| b.is_live());
        b.cloned()
            .ok_or_else(|| CpcError::new(func, libc::EINVAL, "set is not bound"))
    }

    /// The set's overflows as a stream. Call once. EINVAL if the set is not bound or has no
    /// notifying request.
    pub fn overflows(&self, set: &Set) -> Result<Overflows, CpcError> {
        const F: &str = "cpc_overflows";
        let binding = self.engine_binding(F, set)?;
        let mut guard = binding.lock();
        let engine = engine_of(F, &mut guard)?;
        let records = engine.sampler.take_records().map_err(|e| {
            CpcError::new(
                F,
                libc::EINVAL,
                format!("overflow stream already taken or unusable: {e}"),
            )
        })?;
        Ok(Overflows {
            records,
            pending: Default::default(),
        })
    }

    /// Calls `handler` for each overflow of `set`, on a thread of its own, until the returned
    /// value is dropped.
    pub fn on_overflow(
        &self,
        set: &Set,
        mut handler: impl FnMut(Overflow) + Send + 'static,
    ) -> Result<OverflowHandler, CpcError> {
        const F: &str = "cpc_on_overflow";
        let binding = self.engine_binding(F, set)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let taken = {
                let mut guard = binding.lock();
                match guard.as_mut().and_then(|l| l.engine.as_mut()) {
                    Some(e) => e
                        .sampler
                        .take_records()
                        .map_err(|e| CpcError::new(F, libc::EINVAL, e.to_string())),
                    None => Err(CpcError::new(
                        F,
                        libc::EINVAL,
                        "set has no notifying request",
                    )),
                }
            };
            let mut records = match taken {
                Ok(r) => {
                    let _ = ready_tx.send(Ok(()));
                    r
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            while !flag.load(Ordering::SeqCst) {
                records.next_batch(std::time::Duration::from_millis(20), |r| handler(r.into()));
            }
            records.drain(|r| handler(r.into()));
        });
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(OverflowHandler {
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(CpcError::new(F, libc::EIO, "overflow handler thread died")),
        }
    }

    /// The engine's counters for a notifying set: overflows delivered, lost (ring buffer
    /// full) and filtered.
    pub fn overflow_stats(&self, set: &Set) -> Result<SamplerStats, CpcError> {
        const F: &str = "cpc_overflow_stats";
        let binding = self.engine_binding(F, set)?;
        let mut guard = binding.lock();
        let engine = engine_of(F, &mut guard)?;
        engine
            .sampler
            .stats()
            .map_err(|e| CpcError::new(F, libc::EIO, e.to_string()))
    }

    /// `cpc_request_preset`: the preset request `index` of the calling thread's set takes at
    /// the next `set_restart` (the set's own copy keeps the original preset, as libcpc).
    pub fn request_preset(&self, index: usize, preset: u64) -> Result<(), CpcError> {
        const F: &str = "cpc_request_preset";
        let binding = self.calling_lwp_binding(F)?;
        set_pending_preset(F, &binding, index, preset)
    }

    /// Like `request_preset`, for any bound set (threads, processes, CPUs, cgroups).
    pub fn set_request_preset(&self, set: &Set, index: usize, preset: u64) -> Result<(), CpcError> {
        const F: &str = "cpc_set_request_preset";
        let binding = self.engine_binding(F, set)?;
        set_pending_preset(F, &binding, index, preset)
    }

    /// `cpc_set_restart`: resets every request's virtual counter to its current preset,
    /// applies presets changed by `request_preset`, and clears an overflow freeze. libcpc
    /// ignores its set argument and uses the calling thread's set; here the set is named,
    /// which also makes restart work for process, CPU and cgroup bindings.
    pub fn set_restart(&self, set: &Set) -> Result<(), CpcError> {
        const F: &str = "cpc_set_restart";
        let binding = self.engine_binding(F, set)?;
        let mut guard = binding.lock();
        let live = guard
            .as_mut()
            .ok_or_else(|| CpcError::new(F, libc::EINVAL, "set is not bound"))?;
        live.restart(F)
    }
}

/// The engine of a live binding; EINVAL if the set has no notifying request.
fn engine_of<'a>(
    func: &'static str,
    live: &'a mut Option<super::bind::Live>,
) -> Result<&'a mut Engine, CpcError> {
    live.as_mut()
        .and_then(|l| l.engine.as_mut())
        .ok_or_else(|| CpcError::new(func, libc::EINVAL, "set has no notifying request"))
}

/// Async-signal-safe (`cpc_request_preset` runs in handlers): the binding lock is taken with
/// the signal blocked, and neither success nor the errors allocate.
fn set_pending_preset(
    func: &'static str,
    binding: &Binding,
    index: usize,
    preset: u64,
) -> Result<(), CpcError> {
    let mut guard = binding.lock();
    let live = guard
        .as_mut()
        .ok_or_else(|| CpcError::new(func, libc::EINVAL, "set is not bound"))?;
    if live.notify.contains(&index) && period_for(preset) >= 1 << 63 {
        return Err(CpcError::new(
            func,
            libc::EINVAL,
            "the preset gives a period over 2^63 (libcpc's portable range is 1 to 2^31)",
        ));
    }
    let slot = live
        .pending
        .get_mut(index)
        .ok_or_else(|| CpcError::new(func, libc::EINVAL, "no such request in the bound set"))?;
    *slot = preset;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_from_presets() {
        assert_eq!(period_for(u64::MAX - 999), 1000);
        assert_eq!(period_for(u64::MAX), 1);
        assert_eq!(period_for(0), 0, "preset 0 never overflows");
        assert_eq!(
            period_for(u64::MAX - i32::MAX as u64),
            1 << 31,
            "libcpc's portable range"
        );
    }

    #[test]
    fn hardware_sampling_encoding() {
        // A PEBS load-latency style request: MEM_TRANS_RETIRED.LOAD_LATENCY is raw 0x1cd.
        let mut attr = EventAttr::new(perf_event_open_sys::bindings::PERF_TYPE_RAW, 0x1cd);
        attr.set_config1(3); // ldlat threshold, as libcpc's ld_lat_threshold
        hw_sampling_attr(&mut attr, 3);
        let raw = attr.raw();
        assert_eq!(raw.precise_ip(), 3);
        // IP (1) | ADDR (8) | WEIGHT (0x4000) | DATA_SRC (0x8000), from perf_event.h.
        assert_eq!(raw.sample_type, 0x1 | 0x8 | 0x4000 | 0x8000);
        assert_eq!((raw.type_, raw.config, attr.config1()), (4, 0x1cd, 3));
    }

    #[test]
    fn request_configs() {
        let c = request_config(5, 2, true, Some(40));
        assert_eq!((c.preset, c.index, c.signal), (5, 2, 40));
        assert_eq!(c.flags, request_flags::FREEZE | request_flags::SIGNAL);
        assert_eq!(request_config(0, 0, false, None).flags, 0);
    }
}
