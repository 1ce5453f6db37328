//! Aggregation of raw samples into distinct stacks while recording, and their symbolization
//! into a [`Profile`] at the end. Identical stacks are counted, not stored, so memory grows
//! with distinct stacks, not with samples.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};

use profiler_common::{
    record_flags,
    stack::{StackSampleHeader, frame_at},
};

use crate::{
    profile::{Profile, RunInfo, StackCount},
    symbolize::Symbolizer,
};

/// Start of the kernel half of the x86-64 address space (canonical upper half).
const KERNEL_SPACE: u64 = 0xffff_8000_0000_0000;

#[derive(Hash, PartialEq, Eq)]
struct RawStack {
    event: u32,
    pid: u32,
    tid: u32,
    cpu: u32,
    cgroup: u64,
    comm: [u8; 16],
    kernel: Box<[u64]>,
    user: Box<[u64]>,
    /// Why the stack is missing, when it is (in-kernel aggregation only).
    missing: Option<&'static str>,
}

#[derive(Default)]
pub struct Collector {
    stacks: HashMap<RawStack, u64>,
    samples: u64,
    /// Samples of the intervals already taken.
    all_samples: u64,
    symbolizer: Symbolizer,
}

impl Collector {
    /// Samples counted since the last [`Collector::take_profile`].
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Samples counted since the start, across intervals.
    pub fn total_samples(&self) -> u64 {
        self.all_samples + self.samples
    }

    /// Counts one record (its header, and its frames' bytes: kernel, then user). The
    /// process's maps are captured on first sight, while it lives.
    pub fn add(&mut self, rec: &StackSampleHeader, frames: &[u8]) {
        self.samples += 1;
        self.symbolizer.observe(rec.pid, Some(rec.comm));
        let nk = usize::from(rec.kernel_frames);
        let nu = usize::from(rec.user_frames);
        let mut user: Vec<u64> = (nk..nk + nu).map(|i| frame_at(frames, i)).collect();
        if rec.flags & record_flags::LEAF_RET != 0
            && let Some(&ip) = user.first()
            && let Some(caller) = self.symbolizer.missing_leaf_caller(
                rec.pid,
                Some(&rec.comm),
                ip,
                user.get(1).copied(),
                rec.leaf_ret,
            )
        {
            user.insert(1, caller);
        }
        let mut user: Box<[u64]> = user.into();
        let mut kernel: Box<[u64]> = (0..nk).map(|i| frame_at(frames, i)).collect();
        if kernel.is_empty() && user.is_empty() {
            // No stack could be walked: keep at least the sampled instruction.
            if rec.ip >= KERNEL_SPACE {
                kernel = Box::new([rec.ip]);
            } else {
                user = Box::new([rec.ip]);
            }
        }
        let key = RawStack {
            event: rec.request,
            pid: rec.pid,
            tid: rec.tid,
            cpu: rec.cpu,
            cgroup: rec.cgroup_id,
            comm: rec.comm,
            kernel,
            user,
            missing: None,
        };
        *self.stacks.entry(key).or_default() += 1;
    }

    /// Merges `pid`'s current maps into what was captured (a library was mapped since).
    pub fn refresh_maps(&mut self, pid: u32) {
        self.symbolizer.merge_current_maps(pid);
    }

    /// Captures `pid`'s maps now, while it lives (in-kernel aggregation sees pids before
    /// their stacks are read).
    pub fn observe(&mut self, pid: u32) {
        self.symbolizer.observe(pid, None);
    }

    /// Counts `count` samples of one in-kernel aggregation entry. `kernel` and `user` are
    /// innermost first; `missing` names why there is no stack (a hash collision, say).
    #[allow(clippy::too_many_arguments)]
    pub fn add_counted(
        &mut self,
        event: u32,
        pid: u32,
        cgroup: u64,
        comm: [u8; 16],
        kernel: &[u64],
        user: &[u64],
        missing: Option<&'static str>,
        count: u64,
    ) {
        self.samples += count;
        self.symbolizer.observe(pid, Some(comm));
        let key = RawStack {
            event,
            pid,
            tid: 0,
            cpu: 0,
            cgroup,
            comm,
            kernel: kernel.into(),
            user: user.into(),
            missing,
        };
        *self.stacks.entry(key).or_default() += count;
    }

    /// Symbolizes every distinct stack; `events[i]` names the samples of request `i`.
    pub fn into_profile(mut self, info: RunInfo, events: &[Arc<str>]) -> Profile {
        self.take_profile(info, events)
    }

    /// The profile of the samples counted so far; counting starts again from zero (the
    /// symbolizer keeps its caches and the maps it captured).
    pub fn take_profile(&mut self, mut info: RunInfo, events: &[Arc<str>]) -> Profile {
        info.samples = std::mem::take(&mut self.samples);
        self.all_samples += info.samples;
        let stacks = std::mem::take(&mut self.stacks);
        self.stacks.shrink_to_fit();
        let mut profile = symbolize(&mut self.symbolizer, stacks, info, events);
        // Each refused file once, on stderr, and their number in the summary.
        for refusal in self.symbolizer.take_refusals() {
            eprintln!("profiler: warning: not read: {refusal}");
            profile.info.refused += 1;
        }
        // The stacks of exited processes are symbolized now: their maps can go.
        self.symbolizer.forget_exited();
        profile
    }
}

/// Symbolizes every distinct stack; `events[i]` names the samples of request `i`.
fn symbolize(
    symbolizer: &mut Symbolizer,
    raw_stacks: HashMap<RawStack, u64>,
    info: RunInfo,
    events: &[Arc<str>],
) -> Profile {
    // Different addresses can symbolize to the same frames (two call sites in one
    // function): merge them so each distinct stack appears once.
    type Key = (
        u32,
        u32,
        u32,
        u32,
        u64,
        Arc<str>,
        Vec<crate::symbolize::Frame>,
    );
    let mut merged: HashMap<Key, u64> = HashMap::new();
    let mut comms: HashMap<[u8; 16], Arc<str>> = HashMap::new();
    let mut cgroups = BTreeSet::new();
    for (raw, count) in raw_stacks {
        let comm = comms
            .entry(raw.comm)
            .or_insert_with(|| {
                let end = raw.comm.iter().position(|&b| b == 0).unwrap_or(16);
                Arc::from(String::from_utf8_lossy(&raw.comm[..end]).as_ref())
            })
            .clone();
        let mut frames = Vec::new();
        // Stacks arrive innermost first; profiles store them outermost first. Every
        // frame but the innermost is a return address.
        for (i, &addr) in raw.user.iter().enumerate().rev() {
            frames.extend(
                symbolizer
                    .user(raw.pid, Some(&raw.comm), addr, i > 0)
                    .iter()
                    .cloned(),
            );
        }
        for (i, &addr) in raw.kernel.iter().enumerate().rev() {
            frames.extend(symbolizer.kernel(addr, i > 0).iter().cloned());
        }
        if let Some(why) = raw.missing {
            frames.push(crate::symbolize::Frame::named(
                why,
                crate::symbolize::FrameKind::User,
            ));
        }
        if raw.cgroup != 0 {
            cgroups.insert(raw.cgroup);
        }
        let key = (
            raw.event, raw.pid, raw.tid, raw.cpu, raw.cgroup, comm, frames,
        );
        *merged.entry(key).or_default() += count;
    }
    let stacks = merged
        .into_iter()
        .map(
            |((event, pid, tid, cpu, cgroup, comm, frames), count)| StackCount {
                event: events
                    .get(event as usize)
                    .cloned()
                    .unwrap_or_else(|| Arc::from("?")),
                pid,
                tid,
                cpu,
                cgroup,
                comm,
                frames,
                count,
            },
        )
        .collect();
    Profile {
        stacks,
        info,
        cgroups: crate::cgroup::paths(&cgroups),
    }
}
