//! Counter groups: `record -e '{LEADER,EV2,..}:S'` or `record -e LEADER --read EV2,..`.
//! Samples are taken on the leader; the other counters are per-CPU counting events whose
//! increases the kernel adds to the task that ran (at each context switch and sample, see
//! `profiler_common::group`). Each record carries its thread's values; here each counter's
//! increase since the previous sample *of the same thread* becomes that sample's weight in
//! the counter, and what a thread counted after its last sample is `unattributed`.

use crate::record::Warn;
use std::collections::HashMap;

use profiler_common::{
    group::{GroupConfig, MAX_COUNTERS},
    stack::{StackSampleHeader, frame_at, group_values},
};

use super::{
    Mode, RecordError, RecordOptions, Target, UsageError, Warning,
    collect::Collector,
    feature::{self, Feature, Record, RecordKind, Shared},
    online_cpus,
};
use crate::{
    bpf::{GroupTotals, RecordProgram},
    cpc::events::{Catalog, Event, EventKind},
    perf::{EventAttr, PerfEvent, Scope, SoftwareEvent},
    profile::{CounterTotal, RunInfo},
};

/// Counter groups in the list of features: the counters are opened and the program reads
/// them per thread; each sample weighs its thread's counters' increases.
pub(super) const SPEC: feature::Spec = feature::Spec {
    validate,
    // The group's programs and maps are loaded with the record program (`load_sampler`).
    capture: |_| 0,
    start: |s| {
        if s.counters.is_empty() {
            return Ok(None);
        }
        let cpus = match &s.opts.cpus {
            Some(c) => c.clone(),
            None => online_cpus()?,
        };
        Ok(Some(Box::new(Group {
            names: s.counters.iter().map(|e| e.name.clone()).collect(),
            counters: s.counters.to_vec(),
            opts: Opened {
                mode: s.opts.mode,
                fork_child_offset: fork_child_offset(s.opts, s.catalog, s.warnings),
            },
            cpus,
            first_event: s.first_event,
            deltas: GroupDeltas::default(),
            attributed_before: [0; MAX_COUNTERS],
            last_values: None,
        })))
    },
};

/// What the options ask of a group.
fn validate(opts: &RecordOptions) -> Result<(), UsageError> {
    if opts.read.is_empty() {
        return Ok(());
    }
    split_group(&opts.events, &opts.read)?;
    if opts.off_cpu {
        return Err(GroupError::WithOffCpu.into());
    }
    Ok(())
}

/// Where `sched_process_fork` keeps `child_pid`, when processes or threads are counted:
/// they are counted as `perf stat -p` counts them, up to their exit (system-wide and cgroup
/// counts take every event on the CPUs, as `perf stat -a/-G`).
fn fork_child_offset(
    opts: &RecordOptions,
    catalog: &Catalog,
    warnings: &mut dyn Warn,
) -> Option<u32> {
    match opts.target {
        Target::Pids(_) | Target::Tids(_) | Target::Command(_) => {
            let offset = super::tracepoint_field_offset(catalog, "sched_process_fork", "child_pid");
            if offset.is_none() {
                warnings.warn(Warning::new(
                    "sched:sched_process_fork is not in tracefs: the counters may count a few \
                     events of a thread's exit that `perf stat -p` does not",
                ));
            }
            offset
        }
        Target::SystemWide | Target::Cgroup(_) => None,
    }
}

/// How the counters are opened.
struct Opened {
    mode: Mode,
    fork_child_offset: Option<u32>,
}

/// A counter group being recorded: the counters' names, the CPUs they count on, and the
/// per-thread values seen so far.
struct Group {
    names: Vec<String>,
    counters: Vec<Event>,
    opts: Opened,
    cpus: Vec<u32>,
    first_event: u32,
    deltas: GroupDeltas,
    /// Each counter's events on stacks as of the last profile handed over (continuous mode).
    attributed_before: [u64; MAX_COUNTERS],
    /// The values read once the events were stopped.
    last_values: Option<GroupTotals>,
}

impl Group {
    /// The counters of the profile being handed over: what went on its stacks since the
    /// previous one, plus what is on no stack yet (counted after a thread's last sample:
    /// it lands on a later interval's stacks, or stays unattributed at the end). For a
    /// single profile, the run's totals.
    fn counters(&mut self, values: &GroupTotals, shared: &Shared) -> Vec<CounterTotal> {
        let cumulative = match &shared.counters_on_stacks {
            Some(on_stacks) => totals(&self.names, values, on_stacks),
            None => self.deltas.totals(&self.names, values),
        };
        cumulative
            .into_iter()
            .zip(self.attributed_before.iter_mut())
            .map(|(c, before)| {
                let attributed = c.total.wrapping_sub(c.unattributed);
                let on_stacks = attributed.wrapping_sub(*before);
                *before = attributed;
                CounterTotal {
                    total: on_stacks.wrapping_add(c.unattributed),
                    ..c
                }
            })
            .collect()
    }
}

impl Feature for Group {
    fn event_names(&self) -> Vec<String> {
        self.names.clone()
    }

    /// Opens the counters on every sampled CPU (after the sampling events, so that they
    /// are enabled after them) and has the program read them per thread.
    fn attach(&mut self, sampler: &mut RecordProgram) -> Result<(), RecordError> {
        let mut opened = Vec::with_capacity(self.cpus.len());
        for &cpu in &self.cpus {
            let mut on_cpu = Vec::with_capacity(self.counters.len());
            for event in &self.counters {
                let attr = counter_attr(event, self.opts.mode);
                on_cpu.push(PerfEvent::open(&attr, Scope::Cpu(cpu), None, || {
                    event.name.clone()
                })?);
            }
            opened.push((cpu, on_cpu));
        }
        let config = group_config(&self.counters, self.opts.mode, self.opts.fork_child_offset);
        Ok(sampler.start_group(opened, config)?)
    }

    /// A group is not recorded with off-CPU time: every record is a sample of the leader.
    fn takes(&self, _kind: RecordKind) -> bool {
        true
    }

    /// Counts one sample with its counters' increases.
    fn record(&mut self, record: &Record<'_>, collector: &mut Collector) {
        let weights = self
            .deltas
            .deltas(&record.header, record.bytes)
            .unwrap_or_default();
        let labels = profiler_common::stack::go_labels(&record.header, record.bytes);
        collector.add_weighted(
            &record.header,
            record.frames,
            labels,
            self.first_event,
            &weights,
        );
    }

    /// The counters are stopped: a switch on every CPU accounts what the tasks running
    /// there counted since their last switch or sample.
    fn stopped(&mut self, sampler: &mut RecordProgram) -> Result<(), RecordError> {
        crate::bpf::switch_every_cpu(&self.cpus);
        self.last_values = Some(sampler.group_values()?);
        Ok(())
    }

    fn info(
        &mut self,
        sampler: &mut RecordProgram,
        info: &mut RunInfo,
        shared: &Shared,
        last: bool,
        warnings: &mut dyn Warn,
    ) -> Result<(), RecordError> {
        let values = match (last, self.last_values.take()) {
            (true, Some(v)) => v,
            (true, None) => return Ok(()),
            (false, _) => sampler.group_values()?,
        };
        info.counters = self.counters(&values, shared);
        if !last {
            return Ok(());
        }
        if values.aggregate_full > 0 {
            warnings.warn(Warning::new(format!(
                "the counters of {} samples found the in-kernel aggregation full (they count \
                 on their thread's next sample, or as unattributed)",
                values.aggregate_full
            )));
        }
        if values.read_errors > 0 {
            warnings.warn(Warning::new(format!(
                "{} counter reads failed (a CPU without the counter)",
                values.read_errors
            )));
        }
        Ok(())
    }
}

/// A malformed counter group (`{LEADER,EV2,..}:S`, `--read`).
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error(
        "malformed event group '{0}': write '{{LEADER,EVENT,..}}:S' (one group, nothing else in -e)"
    )]
    Malformed(String),
    #[error("malformed event group '{0}': an empty event name")]
    EmptyName(String),
    #[error("event group '{0}' has no counter to read besides its leader")]
    NoCounter(String),
    #[error("give the counters to read either in an event group or with --read, not both")]
    GroupAndRead,
    #[error("--read needs exactly one sampled event (-e LEADER), not {0}")]
    ReadNeedsOneEvent(usize),
    #[error("--read: an empty event name")]
    EmptyRead,
    #[error("{0} counters read with one leader; at most {MAX_COUNTERS}")]
    TooMany(usize),
    #[error("event '{0}' is given twice; name each event once")]
    Duplicate(String),
    #[error("counters (an event group or --read) are not read with --off-cpu")]
    WithOffCpu,
}

/// Splits perf's group syntax out of `-e` values (clap split them at commas): returns the
/// events to sample and the counters to read. `{a,b,c}:S` (or `{a,b,c}`) samples `a` and
/// reads `b` and `c`; `--read` names counters for a single `-e` event.
pub fn split_group(
    events: &[String],
    read: &[String],
) -> Result<(Vec<String>, Vec<String>), GroupError> {
    let joined = events.join(",");
    let mut sampled = events.to_vec();
    let mut counters = Vec::new();
    if joined.contains(['{', '}']) {
        let inner = joined
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix("}:S").or_else(|| s.strip_suffix('}')))
            .filter(|s| !s.contains(['{', '}']))
            .ok_or_else(|| GroupError::Malformed(joined.clone()))?;
        let names: Vec<String> = inner.split(',').map(|s| s.trim().to_string()).collect();
        if names.iter().any(String::is_empty) {
            return Err(GroupError::EmptyName(joined));
        }
        if names.len() < 2 {
            return Err(GroupError::NoCounter(joined));
        }
        sampled = vec![names[0].clone()];
        counters = names[1..].to_vec();
    }
    if !read.is_empty() {
        if !counters.is_empty() {
            return Err(GroupError::GroupAndRead);
        }
        if sampled.len() != 1 {
            return Err(GroupError::ReadNeedsOneEvent(sampled.len()));
        }
        counters = read.iter().map(|s| s.trim().to_string()).collect();
        if counters.iter().any(String::is_empty) {
            return Err(GroupError::EmptyRead);
        }
    }
    if counters.len() > MAX_COUNTERS {
        return Err(GroupError::TooMany(counters.len()));
    }
    if let Some(dup) = counters
        .iter()
        .enumerate()
        .find_map(|(i, c)| (counters[..i].contains(c) || sampled.contains(c)).then_some(c))
    {
        return Err(GroupError::Duplicate(dup.clone()));
    }
    Ok((sampled, counters))
}

/// The counting attribute of a group counter: per-CPU, disabled until the run starts, never
/// sampling, not inherited (per-CPU events count every task; the program splits them),
/// counting the same privilege levels as the leader samples, with enabled and running times
/// (the program scales multiplexed counts by them).
pub fn counter_attr(event: &Event, mode: Mode) -> EventAttr {
    let mut attr = event.attr();
    attr.set_disabled(true)
        .set_inherit(false)
        .set_inherit_thread(false)
        .set_exclude_user(mode == Mode::Kernel)
        .set_exclude_kernel(mode == Mode::User)
        .set_read_format(
            u64::from(perf_event_open_sys::bindings::PERF_FORMAT_TOTAL_TIME_ENABLED)
                | u64::from(perf_event_open_sys::bindings::PERF_FORMAT_TOTAL_TIME_RUNNING),
        );
    attr
}

/// The program's configuration for these counters: `context-switches` counts each switch
/// after the `sched_switch` hook ran, so the hook gives that one to the task switched out
/// (a switch is counted in kernel mode: not with `--user`).
///
/// `fork_child_offset`: where `sched_process_fork` records keep `child_pid` (tracefs); with
/// it, a target's counting ends at its `sched_process_exit`, where `perf stat -p`'s does.
pub fn group_config(counters: &[Event], mode: Mode, fork_child_offset: Option<u32>) -> GroupConfig {
    let mut counted_at_switch = 0;
    for (k, e) in counters.iter().enumerate() {
        if e.kind == EventKind::Software
            && e.attr().config() == SoftwareEvent::ContextSwitches as u64
            && mode != Mode::User
        {
            counted_at_switch |= 1 << k;
        }
    }
    GroupConfig {
        counters: counters.len() as u32,
        counted_at_switch,
        exits: u32::from(fork_child_offset.is_some()),
        fork_child_offset: fork_child_offset.unwrap_or(0),
    }
}

/// Per-thread values seen in the records so far.
#[derive(Debug, Default)]
pub struct GroupDeltas {
    last: HashMap<u32, [u64; MAX_COUNTERS]>,
}

impl GroupDeltas {
    /// Each counter's increase since the previous sample of the record's thread (since the
    /// thread was first seen by the program, for its first sample), or `None` when the
    /// record carries no values.
    pub fn deltas(&mut self, header: &StackSampleHeader, record: &[u8]) -> Option<Vec<u64>> {
        let bytes = group_values(header, record)?;
        let n = bytes.len() / 8;
        let last = self.last.entry(header.tid).or_default();
        let mut out = Vec::with_capacity(n);
        for (k, prev) in last.iter_mut().enumerate().take(n) {
            let now = frame_at(bytes, k);
            out.push(now.wrapping_sub(*prev));
            *prev = now;
        }
        Some(out)
    }

    /// Each counter's total over all target threads and what was not attributed to a
    /// sample (counted after a thread's last sample, or by a thread never sampled, or lost
    /// to a full map), from the program's final per-thread values.
    pub fn totals(&self, names: &[String], final_values: &GroupTotals) -> Vec<CounterTotal> {
        let mut attributed = [0u64; MAX_COUNTERS];
        for tid in final_values.threads.keys() {
            if let Some(last) = self.last.get(tid) {
                for (a, v) in attributed.iter_mut().zip(last) {
                    *a = a.wrapping_add(*v);
                }
            }
        }
        totals(names, final_values, &attributed)
    }
}

/// Each counter's total over all target threads (and the events of threads the program had
/// no room for), of which `attributed[k]` are on stacks and the rest `unattributed`.
pub fn totals(
    names: &[String],
    final_values: &GroupTotals,
    attributed: &[u64; MAX_COUNTERS],
) -> Vec<CounterTotal> {
    names
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let total = final_values
                .threads
                .values()
                .fold(final_values.untracked[k], |t, v| t.wrapping_add(v[k]));
            CounterTotal {
                name: name.clone(),
                total,
                unattributed: total.wrapping_sub(attributed[k]),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpc::events::Catalog;
    use perf_event_open_sys::bindings as b;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn perf_group_syntax_and_read_give_the_same_group() {
        // clap splits `-e '{cpu-clock,page-faults}:S'` at the comma.
        let g = split_group(&s(&["{cpu-clock", "page-faults}:S"]), &[]).unwrap();
        assert_eq!(g, (s(&["cpu-clock"]), s(&["page-faults"])));
        let r = split_group(&s(&["cpu-clock"]), &s(&["page-faults"])).unwrap();
        assert_eq!(g, r);
        let g = split_group(
            &s(&["{task-clock", "page-faults", "context-switches}"]),
            &[],
        )
        .unwrap();
        assert_eq!(g.1, s(&["page-faults", "context-switches"]));
        assert_eq!(split_group(&s(&["cpu-clock"]), &[]).unwrap().1.len(), 0);
    }

    #[test]
    fn bad_groups_are_one_line_errors() {
        for (events, read, text) in [
            (
                vec!["{cpu-clock", "page-faults"],
                vec![],
                "malformed event group",
            ),
            (vec!["{cpu-clock}:S"], vec![], "no counter to read"),
            (vec!["{cpu-clock", "}:S"], vec![], "empty event name"),
            (vec!["{a", "b}:S", "c"], vec![], "malformed event group"),
            (
                vec!["cpu-clock", "task-clock"],
                vec!["page-faults"],
                "exactly one sampled",
            ),
            (
                vec!["{cpu-clock", "page-faults}:S"],
                vec!["minor-faults"],
                "not both",
            ),
            (
                vec!["cpu-clock"],
                vec!["page-faults", "page-faults"],
                "given twice",
            ),
            (vec!["cpu-clock"], vec!["cpu-clock"], "given twice"),
            (
                vec!["cpu-clock"],
                vec!["a", "b", "c", "d", "e", "f", "g", "h", "i"],
                "at most 8",
            ),
        ] {
            let e = split_group(&s(&events), &s(&read)).unwrap_err().to_string();
            assert!(e.contains(text), "{events:?} {read:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn counters_are_counting_per_cpu_events_with_times() {
        let catalog = Catalog::load();
        let pf = catalog.resolve("page-faults").unwrap();
        let attr = counter_attr(&pf, Mode::User);
        let raw = attr.raw();
        assert_eq!((raw.type_, raw.config), (b::PERF_TYPE_SOFTWARE, 2));
        // SAFETY: reading the plain integer member of the period/frequency union.
        assert_eq!(unsafe { raw.__bindgen_anon_1.sample_period }, 0);
        assert_eq!(raw.freq(), 0);
        assert_eq!(raw.disabled(), 1);
        assert_eq!(raw.inherit(), 0);
        assert_eq!((raw.exclude_kernel(), raw.exclude_user()), (1, 0));
        assert_eq!(
            raw.read_format,
            u64::from(b::PERF_FORMAT_TOTAL_TIME_ENABLED | b::PERF_FORMAT_TOTAL_TIME_RUNNING)
        );
    }

    #[test]
    fn hardware_counters_keep_their_encoding() {
        // Hardware events by construction: the host may lack the PMU, the encoding may not.
        for (ty, config, leader) in [
            (
                b::PERF_TYPE_HARDWARE,
                u64::from(b::PERF_COUNT_HW_INSTRUCTIONS),
                "instructions",
            ),
            (
                b::PERF_TYPE_HARDWARE,
                u64::from(b::PERF_COUNT_HW_CACHE_MISSES),
                "cache-misses",
            ),
            (
                b::PERF_TYPE_HARDWARE,
                u64::from(b::PERF_COUNT_HW_BRANCH_MISSES),
                "branch-misses",
            ),
            // L1-dcache-load-misses: cache L1D | op read << 8 | result miss << 16.
            (b::PERF_TYPE_HW_CACHE, 0x10000, "L1-dcache-load-misses"),
        ] {
            let event = Event {
                name: format!("{leader}:{ty}:{config:#x}"),
                kind: if ty == b::PERF_TYPE_HARDWARE {
                    EventKind::Hardware
                } else {
                    EventKind::HwCache
                },
                pmu: Some("cpu".into()),
                type_: ty,
                config,
                config1: 0,
                config2: 0,
                generic: None,
            };
            let raw = *counter_attr(&event, Mode::Both).raw();
            assert_eq!((raw.type_, raw.config), (ty, config));
            assert_eq!((raw.exclude_kernel(), raw.exclude_user()), (0, 0));
            // SAFETY: as above.
            assert_eq!(unsafe { raw.__bindgen_anon_1.sample_period }, 0);
        }
    }

    #[test]
    fn context_switches_are_given_to_the_task_switched_out() {
        let catalog = Catalog::load();
        let evs: Vec<Event> = ["page-faults", "context-switches", "cpu-migrations"]
            .iter()
            .map(|n| catalog.resolve(n).unwrap())
            .collect();
        let c = group_config(&evs, Mode::Both, None);
        assert_eq!((c.counters, c.counted_at_switch), (3, 0b010));
        assert_eq!(group_config(&evs, Mode::User, None).counted_at_switch, 0);
        assert_eq!((c.exits, c.fork_child_offset), (0, 0));
        let c = group_config(&evs, Mode::Both, Some(20));
        assert_eq!((c.exits, c.fork_child_offset), (1, 20));
    }

    fn record(tid: u32, values: &[u64]) -> (StackSampleHeader, Vec<u8>) {
        let header = StackSampleHeader {
            tid,
            user_frames: 1,
            flags: profiler_common::record_flags::GROUP_VALUES,
            ..Default::default()
        };
        let mut bytes = vec![0u8; profiler_common::stack::STACK_HEADER_SIZE];
        // SAFETY: the header is plain integers; the buffer has room for it.
        unsafe { std::ptr::write_unaligned(bytes.as_mut_ptr().cast(), header) };
        bytes.extend_from_slice(&0x401000u64.to_ne_bytes());
        bytes.extend_from_slice(&(values.len() as u64).to_ne_bytes());
        for v in values {
            bytes.extend_from_slice(&v.to_ne_bytes());
        }
        (header, bytes)
    }

    #[test]
    fn deltas_are_per_thread_and_totals_add_up() {
        let mut d = GroupDeltas::default();
        let (h, r) = record(10, &[5, 1]);
        assert_eq!(d.deltas(&h, &r), Some(vec![5, 1]));
        let (h, r) = record(11, &[100, 0]);
        assert_eq!(d.deltas(&h, &r), Some(vec![100, 0]));
        let (h, r) = record(10, &[12, 1]);
        assert_eq!(d.deltas(&h, &r), Some(vec![7, 0]));
        let (mut h, r) = record(10, &[20, 2]);
        h.flags = 0;
        assert_eq!(d.deltas(&h, &r), None);
        let mut fin = GroupTotals::default();
        fin.threads.insert(10, [15, 3, 0, 0, 0, 0, 0, 0]);
        fin.threads.insert(11, [100, 0, 0, 0, 0, 0, 0, 0]);
        fin.threads.insert(12, [4, 0, 0, 0, 0, 0, 0, 0]);
        fin.untracked[0] = 1;
        let t = d.totals(&s(&["page-faults", "context-switches"]), &fin);
        assert_eq!((t[0].total, t[0].unattributed), (120, 3 + 4 + 1));
        assert_eq!((t[1].total, t[1].unattributed), (3, 2));
        // In-kernel aggregation: what is on stacks is summed by the reader instead.
        let mut on_stacks = [0; MAX_COUNTERS];
        on_stacks[..2].copy_from_slice(&[110, 1]);
        let t = totals(&s(&["page-faults", "context-switches"]), &fin, &on_stacks);
        assert_eq!((t[0].total, t[0].unattributed), (120, 10));
        assert_eq!((t[1].total, t[1].unattributed), (3, 2));
    }
}
