//! The in-memory profile: symbolized stacks with sample counts, plus what the run measured.
//! Shaped like pprof: each distinct frame is stored once in the profile's [`FrameTable`] and
//! stacks are sequences of its ids, so memory grows with distinct frames, not with stacks
//! times depth. Writers (folded stacks, the top table) read it and never touch the kernel.

mod flamegraph;
mod folded;
mod format;
mod frames;
mod group_table;
mod labels;
pub mod pprof;
mod read;
mod report;
mod speedscope;
mod top;
mod units;
mod wall;

use std::{collections::BTreeMap, sync::Arc};

pub use flamegraph::{write_diff_flamegraph, write_flamegraph};
pub use folded::{FoldedError, LOST_STACK, parse_folded, profile_from_folded, write_folded};
pub use format::Format;
pub use frames::{FrameId, FrameTable, Strings};
pub use group_table::{Ratio, RatioError, render_group_table};
pub use labels::Labels;
pub use pprof::{read_pprof, write_pprof};
pub use read::{ReadError, read_profile};
pub use report::{ReportOptions, default_event, one_event, render_report, summary_line};
pub use speedscope::write_speedscope;
pub use top::{By, Sort, TopEntry, TopTable};
pub use units::Unit;
pub use wall::{OFF_CPU_EVENT, WALL_EVENT, is_time_event, wall_view};

use crate::symbolize::Frame;

/// One distinct stack, the samples that landed on it and what they stand for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackCount {
    /// The event whose overflow took the sample.
    pub event: Arc<str>,
    pub pid: u32,
    pub tid: u32,
    /// The CPU the sample was taken on.
    pub cpu: u32,
    /// The cgroup v2 id (directory inode) of the sampled task; 0 when unknown.
    pub cgroup: u64,
    pub comm: Arc<str>,
    /// Outermost frame first; user frames, then the kernel frames above them. Ids in the
    /// profile's [`FrameTable`] ([`Profile::frames_of`] gives the frames).
    pub frames: Box<[FrameId]>,
    /// The stack's value in its event's unit ([`Profile::unit`]): the events its samples
    /// stand for (the sum of their periods; nanoseconds for the clocks), off-CPU time, or a
    /// counter's increase.
    pub count: u64,
    /// The samples that carried it (0 for off-CPU time and counter increases).
    pub samples: u64,
    /// The labels the sampled code set (a goroutine's pprof labels); empty for most.
    pub labels: Labels,
}

/// What a recording measured, besides the stacks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunInfo {
    pub event: String,
    pub frequency_hz: u64,
    /// Sampling every N events (then `frequency_hz` does not apply).
    pub period: Option<u64>,
    pub duration_ms: u64,
    /// Samples delivered to user space.
    pub samples: u64,
    /// Samples the kernel could not deliver (ring buffer full).
    pub lost: u64,
    /// Overflows outside the target, dropped by the in-kernel filter.
    pub filtered: u64,
    /// Samples the kernel never took: a clock's timer that fired late (a busy or
    /// descheduled vCPU) skips the periods in between, a throttled event takes none.
    pub skipped: u64,
    /// Stack walks the kernel could not complete.
    pub stack_errors: u64,
    /// In-kernel aggregation: stacks counted without frames because another stack held
    /// their hash slot in the stack map.
    pub collisions: u64,
    /// Children of target processes that could not be followed (the in-kernel filter was
    /// full): their samples are missing from the profile.
    pub untracked: u64,
    /// Files of targets that were not read (a perf map or ELF file that was a FIFO, a
    /// symlink, a device, too large, foreign or replaced): their frames stay unnamed.
    pub refused: u64,
    /// Files whose symbols could not be read (their frames stay `[module]+0xoffset`).
    pub unsymbolized: u64,
    /// The counters read with the sampled event (a counter group), with their totals; their
    /// per-stack increases are stacks of an event of the counter's name.
    pub counters: Vec<CounterTotal>,
    /// Samples per event where the stacks do not carry theirs (read from folded stacks,
    /// which keep each event's samples in their header, not per stack).
    pub event_samples: BTreeMap<String, u64>,
}

/// A counter of a group over the whole run: `total` is what it counted for the targets
/// (as `stat`/`track` count), of which `unattributed` is on no stack (counted after a
/// thread's last sample); the stacks of the counter's event carry the rest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterTotal {
    pub name: String,
    pub total: u64,
    pub unattributed: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Profile {
    pub stacks: Vec<StackCount>,
    /// The distinct frames the stacks' ids point at.
    pub frames: FrameTable,
    pub info: RunInfo,
    /// Paths of the cgroups the samples came from, by id (relative to the cgroup2 root).
    pub cgroups: BTreeMap<u64, Arc<str>>,
    /// Units of events whose unit their name does not give (read from files); see
    /// [`Profile::unit`].
    pub units: BTreeMap<Arc<str>, Unit>,
}

impl StackCount {
    /// A stack with no thread, CPU or cgroup attribution (as read from folded stacks), of
    /// `count` samples weighing one each (set [`StackCount::samples`] when they differ).
    pub fn new(event: Arc<str>, comm: Arc<str>, frames: Box<[FrameId]>, count: u64) -> Self {
        Self {
            event,
            pid: 0,
            tid: 0,
            cpu: 0,
            cgroup: 0,
            comm,
            frames,
            count,
            samples: count,
            labels: Labels::default(),
        }
    }
}

impl Profile {
    /// Adds a stack without thread, CPU or cgroup attribution, interning its event, command
    /// and frames (outermost first); the caller may fill in the rest.
    pub fn push(
        &mut self,
        event: &str,
        comm: &str,
        frames: &[Frame],
        count: u64,
    ) -> &mut StackCount {
        let strings = self.frames.strings();
        let (event, comm) = (strings.get(event), strings.get(comm));
        let frames = self.frames.intern_all(frames);
        self.stacks
            .push(StackCount::new(event, comm, frames, count));
        self.stacks.last_mut().expect("just pushed")
    }

    /// The frame of `id`, an id of one of this profile's stacks.
    pub fn frame(&self, id: FrameId) -> &Frame {
        self.frames.get(id)
    }

    /// The frames of `stack` (one of this profile's), outermost first.
    pub fn frames_of<'a>(
        &'a self,
        stack: &'a StackCount,
    ) -> impl DoubleEndedIterator<Item = &'a Frame> + 'a {
        self.frames.resolve(&stack.frames)
    }

    /// The cgroup path of `id`, or the id itself when the path is unknown.
    pub fn cgroup_name(&self, id: u64) -> Arc<str> {
        match self.cgroups.get(&id) {
            Some(p) => p.clone(),
            None => Arc::from(format!("cgroup:{id}")),
        }
    }

    /// The values of the stacks (not counter increases of a group): a sum in one unit for a
    /// profile of one event ([`Profile::for_event`]); saturating, as counts read from files
    /// may be anything.
    pub fn total(&self) -> u64 {
        self.stacks
            .iter()
            .filter(|s| !self.is_counter(&s.event))
            .fold(0u64, |sum, s| sum.saturating_add(s.count))
    }

    /// The samples of the stacks (not counter increases of a group).
    pub fn samples(&self) -> u64 {
        self.stacks
            .iter()
            .filter(|s| !self.is_counter(&s.event))
            .fold(0u64, |sum, s| sum.saturating_add(s.samples))
    }

    /// Whether `event` is a counter read with the sampled event (its stacks carry counter
    /// increases, not samples).
    pub fn is_counter(&self, event: &str) -> bool {
        self.info.counters.iter().any(|c| c.name == event)
    }

    /// The events the samples came from: in the order the run asked for them
    /// (`info.event`, record's `-e` or a file's own order), then any others in first-seen
    /// order. Never the order samples happened to arrive in, so the default event and the
    /// columns are the same in the run's own report and in its file read back.
    pub fn events(&self) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = Vec::new();
        for s in &self.stacks {
            if !out.contains(&s.event) {
                out.push(s.event.clone());
            }
        }
        let asked: Vec<&str> = self.info.event.split(',').map(str::trim).collect();
        let rank = |e: &Arc<str>| asked.iter().position(|a| *a == e.as_ref());
        // Stable: the unlisted keep their first-seen order after the listed ones.
        out.sort_by_key(|e| rank(e).unwrap_or(usize::MAX));
        out
    }

    /// The samples of one event; for a counter of a group, its counts on each stack, as the
    /// weights of a profile of that counter alone.
    pub fn for_event(&self, event: &str) -> Profile {
        let stacks = self
            .stacks
            .iter()
            .filter(|s| s.event.as_ref() == event)
            .cloned()
            .collect();
        let mut info = self.info.clone();
        info.event = event.to_string();
        if self.is_counter(event) {
            // The counter's counts are this profile's weights, not samples at a rate.
            info.frequency_hz = 0;
            info.period = None;
        }
        info.counters.clear();
        let mut profile = Profile {
            stacks,
            // Frames no kept stack uses stay, unseen: writers go from stacks to frames.
            frames: self.frames.clone(),
            info,
            cgroups: self.cgroups.clone(),
            units: self.units.clone(),
        };
        // The summary counts the samples of what is shown; lost and filtered stay the run's.
        profile.info.samples = match self.info.event_samples.get(event) {
            Some(&n) if profile.samples() == 0 => n,
            _ => profile.samples(),
        };
        profile
    }

    /// The stack (command and frames, whatever the thread or CPU) with the most samples,
    /// for the report's summary line; ties go to the first seen. Its frame ids are this
    /// profile's.
    pub fn hottest(&self) -> Option<StackCount> {
        let mut merged: Vec<StackCount> = Vec::new();
        // Equal frames have equal ids: comparing ids compares stacks.
        let mut index: std::collections::HashMap<(&str, &[FrameId]), usize> = Default::default();
        for s in self.stacks.iter().filter(|s| !self.is_counter(&s.event)) {
            match index.get(&(s.comm.as_ref(), &s.frames[..])) {
                Some(&i) => merged[i].count += s.count,
                None => {
                    index.insert((s.comm.as_ref(), &s.frames[..]), merged.len());
                    merged.push(s.clone());
                }
            }
        }
        merged.into_iter().rev().max_by_key(|s| s.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_in_the_order_asked_for_not_the_order_samples_arrived() {
        let mut p = Profile::default();
        p.info.event = "page-faults,cpu-clock".into();
        p.push("extra", "c", &[], 1);
        p.push("cpu-clock", "c", &[], 1);
        p.push("page-faults", "c", &[], 1);
        let names: Vec<String> = p.events().iter().map(|e| e.to_string()).collect();
        assert_eq!(names, ["page-faults", "cpu-clock", "extra"]);
        // With nothing asked for (a foreign file), first seen first.
        p.info.event.clear();
        let names: Vec<String> = p.events().iter().map(|e| e.to_string()).collect();
        assert_eq!(names, ["extra", "cpu-clock", "page-faults"]);
    }
}
