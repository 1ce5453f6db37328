//! `record --off-cpu` and `--wall`: the user-space half of off-CPU time (see
//! `profiler_common::offcpu`). The program is attached with the sampling events; its records
//! come through `record`'s ring with the samples and are counted in nanoseconds under the
//! `off-cpu` event; at the end the threads still off the CPU are accounted up to the stop.

use crate::record::Warn;
use std::{collections::HashMap, time::Duration};

use profiler_common::{
    offcpu::{OffCpuBuf, OffCpuConfig, TotalKey, weight},
    record_flags,
    stack::{STACK_HEADER_SIZE, StackCopyBuf},
};

use super::{
    RecordError, RecordOptions, UsageError, Warning,
    collect::Collector,
    feature::{self, Feature, Kernel, Record, RecordKind, Shared},
    tracepoint_field_offset,
};
use crate::{
    bpf::{OffCpuHook, OffCpuStats, RecordProgram},
    cpc::events::Catalog,
    profile::OFF_CPU_EVENT,
};

/// `--off-cpu` (and `--wall`) in the list of features.
pub(super) const SPEC: feature::Spec = feature::Spec {
    validate,
    capture: |opts| match opts.off_cpu {
        true => profiler_common::capture::OFF_CPU,
        false => 0,
    },
    start: |s| {
        if !s.opts.off_cpu {
            return Ok(None);
        }
        let off_cpu = OffCpu::start(s.opts, s.catalog, s.sampler, s.first_event)?;
        Ok(Some(Box::new(off_cpu)))
    },
};

/// Events whose samples are CPU time, so `--wall` can convert them to nanoseconds.
const CLOCK_EVENTS: [&str; 2] = ["cpu-clock", "task-clock"];

/// Off-CPU options that cannot work together.
#[derive(Debug, thiserror::Error)]
pub enum OffCpuUsage {
    #[error(
        "--off-cpu cannot be combined with --aggregate (off-CPU time is not aggregated in the kernel)"
    )]
    Aggregate,
    #[error("--wall converts CPU-clock samples to time: sample cpu-clock or task-clock, not '{0}'")]
    WallNeedsClock(String),
}

/// What `--off-cpu` and `--wall` need that the options may lack.
fn validate(opts: &RecordOptions) -> Result<(), UsageError> {
    if !opts.off_cpu {
        return Ok(());
    }
    if opts.aggregate {
        return Err(OffCpuUsage::Aggregate.into());
    }
    if opts.wall
        && let Some(e) = opts
            .events
            .iter()
            .find(|e| !CLOCK_EVENTS.contains(&e.as_str()))
    {
        return Err(OffCpuUsage::WallNeedsClock(e.clone()).into());
    }
    Ok(())
}

/// The attached off-CPU program and what has been taken of its in-kernel totals.
struct OffCpu {
    /// `None` once detached.
    hook: Option<OffCpuHook>,
    /// Nanoseconds already counted per (thread, stack) key: each read adds what grew.
    counted: HashMap<TotalKey, u64>,
    min_block: Duration,
}

impl OffCpu {
    /// Attaches the off-CPU program (its stacks carry request `request`, the index of the
    /// `off-cpu` event among the profile's events).
    fn start(
        opts: &RecordOptions,
        catalog: &Catalog,
        sampler: &mut RecordProgram,
        request: u32,
    ) -> Result<Self, RecordError> {
        let offset = |field: &'static str| {
            tracepoint_field_offset(catalog, "sched_switch", field).ok_or(RecordError::Io {
                what: "reading sched:sched_switch's format in tracefs",
                source: std::io::Error::other(format!("no field {field}")),
            })
        };
        // Without BTF, a return the program did not see drops its wait (counted).
        let (task_runtime_offset, task_prev_runtime_offset) =
            crate::bpf::btf::task_runtime_offsets().unwrap_or_default();
        let config = OffCpuConfig {
            min_block_ns: nanos(opts.min_block),
            request,
            prev_state_offset: offset("prev_state")?,
            next_pid_offset: offset("next_pid")?,
            runnable: 1,
            task_runtime_offset,
            task_prev_runtime_offset,
            // (The tests' fault injection: see OffCpuConfig::skip_returns.)
            skip_returns: std::env::var("PROFILER_TEST_SKIP_RETURNS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            _pad: 0,
        };
        Ok(Self {
            hook: Some(sampler.start_off_cpu(config)?),
            counted: HashMap::new(),
            min_block: opts.min_block,
        })
    }
}

impl Feature for OffCpu {
    fn event_names(&self) -> Vec<String> {
        vec![OFF_CPU_EVENT.to_string()]
    }

    fn takes(&self, kind: RecordKind) -> bool {
        kind == RecordKind::OffCpu
    }

    /// Counts one off-CPU wait in nanoseconds.
    fn record(&mut self, record: &Record<'_>, collector: &mut Collector) {
        if let Some(ns) = weight(&record.header, record.bytes) {
            collector.add_off_cpu(&record.header, record.frames, ns);
        }
    }

    fn read(
        &mut self,
        kernel: &mut Kernel<'_>,
        collector: &mut Collector,
        _shared: &mut Shared,
    ) -> Result<(), RecordError> {
        read_totals(&mut self.counted, kernel.sampler, collector)
    }

    /// Detached before the ring is drained, so that no wait is counted twice.
    fn detach(&mut self, sampler: &mut RecordProgram) -> Result<(), RecordError> {
        match self.hook.take() {
            Some(hook) => Ok(sampler.stop_off_cpu(hook)?),
            None => Ok(()),
        }
    }

    /// Counts the totals and the threads still off the CPU as away until now; says what
    /// was kept and dropped.
    ///
    /// Returns, as ring records with their time away, the unfinished waits whose user stack
    /// is a copy (`record_flags::STACK_COPY`): the session walks them as it walks the ring's.
    fn drained(
        &mut self,
        sampler: &mut RecordProgram,
        collector: &mut Collector,
        warnings: &mut dyn Warn,
    ) -> Result<Vec<Vec<u8>>, RecordError> {
        let now = profiler_core::host::hrtime();
        let min = nanos(self.min_block);
        let mut stats = sampler.off_cpu_stats()?;
        read_totals(&mut self.counted, sampler, collector)?;
        let mut unfinished = 0;
        let mut copied = Vec::new();
        let pending = sampler.off_cpu_pending()?;
        let copies = match pending
            .iter()
            .any(|b| b.header.flags & record_flags::STACK_COPY != 0)
        {
            true => sampler.off_cpu_copies()?,
            false => HashMap::new(),
        };
        for buf in pending {
            let away = now.saturating_sub(buf.header.time_ns);
            if away < min {
                stats.short += 1;
                stats.short_ns += away;
                continue;
            }
            unfinished += 1;
            if buf.header.flags & record_flags::STACK_COPY != 0
                && let Some(copy) = copies.get(&buf.header.tid)
            {
                copied.push(with_copy(&buf, copy, away));
                continue;
            }
            add_kept(collector, &buf, away);
        }
        warnings.warn(report(&stats, unfinished, self.min_block));
        Ok(copied)
    }
}

/// Counts what the in-kernel totals gained since `counted` was last updated.
fn read_totals(
    counted: &mut HashMap<TotalKey, u64>,
    sampler: &mut RecordProgram,
    collector: &mut Collector,
) -> Result<(), RecordError> {
    for (key, total) in sampler.off_cpu_totals()? {
        let seen = counted.entry(key).or_default();
        let grown = total.ns.saturating_sub(*seen);
        if grown == 0 {
            continue;
        }
        *seen = total.ns;
        add_kept(collector, &total.record, grown);
    }
    Ok(())
}

/// A kept record and its stack copy as the ring would carry them: header, kernel frames,
/// the time away, the copy's head and bytes.
fn with_copy(buf: &OffCpuBuf, copy: &StackCopyBuf, away: u64) -> Vec<u8> {
    let mut header = buf.header;
    header.user_frames = 0;
    let k = usize::from(header.kernel_frames).min(buf.frames.len());
    let len = usize::try_from(copy.head.len)
        .unwrap_or(usize::MAX)
        .min(copy.bytes.len());
    let mut out = Vec::with_capacity(
        STACK_HEADER_SIZE + 8 * (k + 1 + profiler_common::stack::STACK_COPY_HEAD_WORDS) + len,
    );
    // SAFETY: the header is repr(C) plain integers without padding (its size is asserted in
    // profiler_common::stack); its bytes are read as laid out.
    out.extend_from_slice(unsafe {
        std::slice::from_raw_parts((&raw const header).cast::<u8>(), STACK_HEADER_SIZE)
    });
    let head = [
        copy.head.ip,
        copy.head.sp,
        copy.head.bp,
        copy.head.lr,
        len as u64,
    ];
    for w in buf.frames[..k].iter().chain([&away]).chain(&head) {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    out.extend_from_slice(&copy.bytes[..len]);
    out
}

/// Counts `ns` under the stack of a kept record.
fn add_kept(collector: &mut Collector, buf: &OffCpuBuf, ns: u64) {
    let n = usize::from(buf.header.kernel_frames) + usize::from(buf.header.user_frames);
    let frames = &buf.frames[..n.min(buf.frames.len())];
    let bytes: Vec<u8> = frames.iter().flat_map(|f| f.to_ne_bytes()).collect();
    collector.add_off_cpu(&buf.header, &bytes, ns);
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One line for stderr: what off-CPU recording kept and dropped (`unfinished`: threads still
/// off the CPU at the end, counted up to then).
fn report(stats: &OffCpuStats, unfinished: u64, min_block: Duration) -> Warning {
    let mut line = format!(
        "off-cpu: {} waits recorded",
        stats.totalled
            + stats.written
            + stats.copied
            + stats.runtime
            + stats.unseen_ended
            + unfinished
    );
    if stats.written > 0 {
        line += &format!(
            "; {} through the ring (the in-kernel totals map was full)",
            stats.written
        );
    }
    if stats.copied > 0 {
        line += &format!(
            "; {} begun before their process's unwind tables were loaded, walked from a copy",
            stats.copied
        );
    }
    if stats.short > 0 {
        line += &format!(
            "; {} shorter than --min-block {} us dropped ({:.3} s)",
            stats.short,
            min_block.as_micros(),
            stats.short_ns as f64 / 1e9
        );
    }
    if stats.lost > 0 {
        line += &format!("; {} lost (ring buffer full)", stats.lost);
    }
    if stats.full > 0 {
        line += &format!("; {} not kept (too many threads off the CPU)", stats.full);
    }
    if stats.stack_errors > 0 {
        line += &format!("; {} stack walk errors", stats.stack_errors);
    }
    if stats.unseen_ended + stats.unseen_dropped > 0 {
        line += &format!(
            "; {} whose return the kernel did not show the program ({} ended where the \
             scheduler's run time says, {} dropped: no run time from the kernel)",
            stats.unseen_ended + stats.unseen_dropped,
            stats.unseen_ended,
            stats.unseen_dropped
        );
    }
    if stats.skipped > 0 {
        line += &format!(
            "; the kernel skipped the program at {} switches (another eBPF program was running \
             on that CPU)",
            stats.skipped
        );
    }
    Warning::note(line)
}
