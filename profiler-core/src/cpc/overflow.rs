//! Overflow notification (libcpc's CPC_OVF_NOTIFY_EMT) on the eBPF overflow engine.
//!
//! A request with `OVF_NOTIFY_EMT` and a non-zero preset overflows after `2^64 - preset`
//! events. At each overflow the engine's program (the same one `record` uses) computes the
//! virtual value and writes an [`Overflow`] to the binding's ring buffer; user space reads
//! them from a stream or through a callback thread (`handler`). Under [`OverflowPolicy::Freeze`]
//! (libcpc's behaviour) the set stops counting at the overflow until `set_restart`; under
//! [`OverflowPolicy::Continue`] perf reloads the period and every overflow is reported.
//! Optionally the overflowing thread also receives a signal (libcpc's SIGEMT).

use std::sync::{Arc, atomic::Ordering};

use profiler_common::{MAX_SIBLINGS, SampleRecord};

use super::{
    bind::{Binding, Live},
    engine::{Engine, OverflowPolicy},
    error::CpcError,
    handle::Cpc,
    sampling::period_for,
    set::Set,
};
use crate::bpf::{Records, SamplerStats};

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

    pub(super) fn engine_binding(
        &self,
        func: &'static str,
        set: &Set,
    ) -> Result<Arc<Binding>, CpcError> {
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
        let records = engine.program.take_records().map_err(|e| {
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

    /// The engine's counters for a notifying set: overflows delivered, lost (ring buffer
    /// full) and filtered.
    pub fn overflow_stats(&self, set: &Set) -> Result<SamplerStats, CpcError> {
        const F: &str = "cpc_overflow_stats";
        let binding = self.engine_binding(F, set)?;
        let mut guard = binding.lock();
        let engine = engine_of(F, &mut guard)?;
        engine
            .program
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
    live: &'a mut Option<Live>,
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
