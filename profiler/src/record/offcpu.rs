//! `record --off-cpu` and `--wall`: the user-space half of off-CPU time (see
//! `profiler_common::offcpu`). The program is attached with the sampling events; its records
//! come through `record`'s ring with the samples and are counted in nanoseconds under the
//! `off-cpu` event; at the end the threads still off the CPU are accounted up to the stop.

use std::time::Duration;

use profiler_common::{
    offcpu::{OffCpuConfig, weight},
    stack::StackSampleHeader,
};

use super::{RecordError, RecordOptions, UsageError, collect::Collector, tracepoint_field_offset};
use crate::{
    bpf::{OffCpuHook, OffCpuStats, Sampler},
    cpc::events::Catalog,
    profile::OFF_CPU_EVENT,
};

/// Events whose samples are CPU time, so `--wall` can convert them to nanoseconds.
const CLOCK_EVENTS: [&str; 2] = ["cpu-clock", "task-clock"];

/// What `--off-cpu` and `--wall` need that the options may lack.
pub(super) fn validate(opts: &RecordOptions) -> Result<(), UsageError> {
    if !opts.off_cpu {
        return Ok(());
    }
    if opts.aggregate {
        return Err(UsageError::OffCpuAggregate);
    }
    if opts.wall
        && let Some(e) = opts
            .events
            .iter()
            .find(|e| !CLOCK_EVENTS.contains(&e.as_str()))
    {
        return Err(UsageError::WallNeedsClock(e.clone()));
    }
    Ok(())
}

/// Nanoseconds of CPU time one on-CPU sample stands for: the period (in ns for the clock
/// events), or 1e9 / frequency (perf turns a clock event's frequency into that period).
pub(super) fn ns_per_sample(opts: &RecordOptions) -> u64 {
    match opts.period {
        Some(n) => n,
        None => 1_000_000_000 / opts.frequency_hz.max(1),
    }
}

/// Attaches the off-CPU program (records carry request `request`, the index of the
/// `off-cpu` event among the profile's events).
pub(super) fn start(
    opts: &RecordOptions,
    catalog: &Catalog,
    sampler: &mut Sampler,
    request: u32,
) -> Result<OffCpuHook, RecordError> {
    let offset = |field: &'static str| {
        tracepoint_field_offset(catalog, "sched_switch", field).ok_or(RecordError::Io {
            what: "reading sched:sched_switch's format in tracefs",
            source: std::io::Error::other(format!("no field {field}")),
        })
    };
    let config = OffCpuConfig {
        min_block_ns: u64::try_from(opts.min_block.as_nanos()).unwrap_or(u64::MAX),
        request,
        prev_state_offset: offset("prev_state")?,
        next_pid_offset: offset("next_pid")?,
        runnable: 1,
    };
    Ok(sampler.start_off_cpu(config)?)
}

/// Counts one record of `record`'s ring: a sample, or an off-CPU wait in nanoseconds.
pub(super) fn collect(collector: &mut Collector, bytes: &[u8]) {
    let Some((header, frames)) = StackSampleHeader::parse(bytes) else {
        return;
    };
    if header.flags & profiler_common::offcpu::OFF_CPU == 0 {
        collector.add(&header, frames);
    } else if let Some(ns) = weight(&header, bytes) {
        collector.add_off_cpu(&header, frames, ns);
    }
}

/// Detaches the program, then counts the threads still off the CPU as away until now (the
/// ring must be drained first, so that no thread is counted twice). Returns the program's
/// totals.
pub(super) fn stop(
    sampler: &mut Sampler,
    hook: OffCpuHook,
    collector: &mut Collector,
    drain: impl FnOnce(&mut Collector),
    min_block: Duration,
) -> Result<OffCpuStats, RecordError> {
    sampler.stop_off_cpu(hook)?;
    drain(collector);
    let now = monotonic_ns();
    let min = u64::try_from(min_block.as_nanos()).unwrap_or(u64::MAX);
    let mut stats = sampler.off_cpu_stats()?;
    for buf in sampler.off_cpu_pending()? {
        let away = now.saturating_sub(buf.header.time_ns);
        if away < min {
            stats.short += 1;
            stats.short_ns += away;
            continue;
        }
        let n = usize::from(buf.header.kernel_frames) + usize::from(buf.header.user_frames);
        let frames = &buf.frames[..n.min(buf.frames.len())];
        let bytes: Vec<u8> = frames.iter().flat_map(|f| f.to_ne_bytes()).collect();
        collector.add_off_cpu(&buf.header, &bytes, away);
        stats.written += 1;
    }
    Ok(stats)
}

/// One line on stderr: what off-CPU recording kept and dropped.
pub(super) fn report(stats: &OffCpuStats, min_block: Duration) {
    let mut line = format!("profiler: off-cpu: {} waits recorded", stats.written);
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
    eprintln!("{line}");
}

/// The event names of the profile: the sampled events, then `off-cpu` when recorded.
pub(super) fn event_names(opts: &RecordOptions) -> Vec<String> {
    let mut names = opts.events.clone();
    if opts.off_cpu {
        names.push(OFF_CPU_EVENT.to_string());
    }
    names
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .unwrap_or(nix::sys::time::TimeSpec::new(0, 0));
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}
