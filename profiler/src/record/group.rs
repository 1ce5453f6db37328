//! Counter groups: `record -e '{LEADER,EV2,..}:S'` or `record -e LEADER --read EV2,..`.
//! Samples are taken on the leader; the other counters are per-CPU counting events whose
//! increases the kernel adds to the task that ran (at each context switch and sample, see
//! `profiler_common::group`). Each record carries its thread's values; here each counter's
//! increase since the previous sample *of the same thread* becomes that sample's weight in
//! the counter, and what a thread counted after its last sample is `unattributed`.

use std::collections::HashMap;

use profiler_common::{
    group::{GroupConfig, MAX_COUNTERS},
    stack::{StackSampleHeader, frame_at, group_values},
};

use super::{Mode, UsageError};
use crate::{
    bpf::GroupTotals,
    cpc::events::{Event, EventKind},
    perf::{EventAttr, SoftwareEvent},
    profile::CounterTotal,
};

/// Splits perf's group syntax out of `-e` values (clap split them at commas): returns the
/// events to sample and the counters to read. `{a,b,c}:S` (or `{a,b,c}`) samples `a` and
/// reads `b` and `c`; `--read` names counters for a single `-e` event.
pub fn split_group(
    events: &[String],
    read: &[String],
) -> Result<(Vec<String>, Vec<String>), String> {
    let joined = events.join(",");
    let mut sampled = events.to_vec();
    let mut counters = Vec::new();
    if joined.contains(['{', '}']) {
        let inner = joined
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix("}:S").or_else(|| s.strip_suffix('}')))
            .filter(|s| !s.contains(['{', '}']))
            .ok_or_else(|| {
                format!(
                    "malformed event group '{joined}': write '{{LEADER,EVENT,..}}:S' (one group, \
                     nothing else in -e)"
                )
            })?;
        let names: Vec<String> = inner.split(',').map(|s| s.trim().to_string()).collect();
        if names.iter().any(String::is_empty) {
            return Err(format!(
                "malformed event group '{joined}': an empty event name"
            ));
        }
        if names.len() < 2 {
            return Err(format!(
                "event group '{joined}' has no counter to read besides its leader"
            ));
        }
        sampled = vec![names[0].clone()];
        counters = names[1..].to_vec();
    }
    if !read.is_empty() {
        if !counters.is_empty() {
            return Err(
                "give the counters to read either in an event group or with --read, not both"
                    .into(),
            );
        }
        if sampled.len() != 1 {
            return Err(format!(
                "--read needs exactly one sampled event (-e LEADER), not {}",
                sampled.len()
            ));
        }
        counters = read.iter().map(|s| s.trim().to_string()).collect();
        if counters.iter().any(String::is_empty) {
            return Err("--read: an empty event name".into());
        }
    }
    if counters.len() > MAX_COUNTERS {
        return Err(format!(
            "{} counters read with one leader; at most {MAX_COUNTERS}",
            counters.len()
        ));
    }
    if let Some(dup) = counters
        .iter()
        .enumerate()
        .find_map(|(i, c)| (counters[..i].contains(c) || sampled.contains(c)).then_some(c))
    {
        return Err(UsageError::DuplicateEvent(dup.clone()).to_string());
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
            let e = split_group(&s(&events), &s(&read)).unwrap_err();
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
