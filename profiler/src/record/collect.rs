//! Aggregation of raw samples into distinct stacks while recording, and their symbolization
//! into a [`Profile`] afterwards. Identical stacks are counted, not stored, so memory grows
//! with distinct stacks, not with samples. User addresses are normalized on arrival (see
//! [`crate::symbolize`]); a finished interval becomes a [`Normalized`] that needs no process any
//! more and is symbolized wherever it is sent.

use crate::record::Warn;
use std::{
    collections::{BTreeSet, HashMap, hash_map::Entry},
    sync::Arc,
};

use profiler_common::{
    offcpu, record_flags,
    stack::{StackSampleHeader, frame_at},
};

use super::{
    Warning,
    prefetch::{Fresh, Prefetch},
};
use crate::{
    modules::ElfFiles,
    profile::{FrameId, Labels, Profile, RunInfo, StackCount},
    runtimes::SharedRuntimes,
    symbolize::{ElfFile, FileId, Frame, FrameKind, Normalizer, Symbolizer, UserFrame},
};

/// The maps every sample goes through (its stack counted, its frames' ids looked up): a fast
/// seeded hash (foldhash) where SipHash was a tenth of the reader's time under a fleet load.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

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
    /// Innermost first.
    kernel: Box<[u64]>,
    /// Innermost first.
    user: Box<[UserFrame]>,
    /// Why the stack is missing, when it is (in-kernel aggregation), or the off-CPU marker:
    /// a named frame innermost.
    missing: Option<&'static str>,
    /// The labels the sampled code set (a goroutine's).
    labels: Labels,
}

/// The stack of one in-kernel aggregation entry (`record --aggregate`): `kernel` and `user`
/// innermost first; `missing` names why there is no stack (a hash collision, say).
#[derive(Clone, Copy)]
pub struct CountedStack<'a> {
    pub pid: u32,
    pub cgroup: u64,
    pub comm: [u8; 16],
    pub kernel: &'a [u64],
    pub user: &'a [u64],
    pub missing: Option<&'static str>,
}

/// What landed on one stack: its value in its event's unit (events; nanoseconds for clocks
/// and off-CPU time; a counter's increase) and the samples that carried it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Weight {
    pub value: u64,
    pub samples: u64,
}

impl std::ops::AddAssign for Weight {
    fn add_assign(&mut self, other: Weight) {
        self.value = self.value.saturating_add(other.value);
        self.samples += other.samples;
    }
}

#[derive(Default)]
pub struct Collector {
    stacks: FastMap<RawStack, Weight>,
    samples: u64,
    /// Samples of the intervals already taken.
    all_samples: u64,
    normalizer: Normalizer,
    /// Addresses of the stacks first seen since the last [`Collector::take_prefetch`].
    fresh: Fresh,
    /// Continuous mode: nothing is named ahead (each interval's batch names its stacks).
    no_naming_ahead: bool,
    /// Warnings not yet taken ([`Collector::take_warnings`]).
    warnings: Vec<Warning>,
    /// Runtimes whose kernel walkers put their own frames among the user frames (Python).
    runtimes: Option<SharedRuntimes>,
}

/// One interval's stacks with the files their offsets are in: everything needed to name
/// them, on any thread, after every process in them has gone.
pub struct Normalized {
    stacks: FastMap<RawStack, Weight>,
    files: HashMap<FileId, ElfFile>,
    info: RunInfo,
    events: Vec<Arc<str>>,
    /// Files that could not be named (said when the profile is handed over).
    warnings: Vec<Warning>,
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
    /// `labels`: the record's goroutine label words (`profiler_common::stack::go_labels`).
    pub fn add(&mut self, rec: &StackSampleHeader, frames: &[u8], labels: Option<[u64; 2]>) {
        self.add_weighted(rec, frames, labels, 0, &[]);
    }

    /// [`Collector::add`], and the increase `weights[k]` of each counter of a group on the
    /// same stack, as values of event `first_counter + k`. The sample weighs its period's
    /// events (one when the kernel gave none).
    pub fn add_weighted(
        &mut self,
        rec: &StackSampleHeader,
        frames: &[u8],
        labels: Option<[u64; 2]>,
        first_counter: u32,
        weights: &[u64],
    ) {
        self.samples += 1;
        let weight = Weight {
            value: rec.period.max(1),
            samples: 1,
        };
        let labels = labels.map_or_else(Labels::default, |words| self.labels(rec.pid, words));
        self.add_stack(rec, frames, None, weight, (first_counter, weights), labels);
    }

    /// Counts one off-CPU record (`record --off-cpu`): `ns` nanoseconds off the CPU, under
    /// its kept stack with a marker frame innermost ([`offcpu::marker`]).
    pub fn add_off_cpu(&mut self, rec: &StackSampleHeader, frames: &[u8], ns: u64) {
        let weight = Weight {
            value: ns,
            samples: 0,
        };
        self.add_stack(
            rec,
            frames,
            Some(offcpu::marker(rec.flags)),
            weight,
            (0, &[]),
            Labels::default(),
        );
    }

    fn add_stack(
        &mut self,
        rec: &StackSampleHeader,
        frames: &[u8],
        marker: Option<&'static str>,
        weight: Weight,
        (first_counter, weights): (u32, &[u64]),
        labels: Labels,
    ) {
        self.normalizer.observe(rec.pid, Some(rec.comm));
        let nk = usize::from(rec.kernel_frames);
        let nu = usize::from(rec.user_frames);
        let mut user: Vec<u64> = (nk..nk + nu).map(|i| frame_at(frames, i)).collect();
        // The leaf-caller check reads the function's start from the file's symbols: for a
        // process whose tables are still being loaded (its first samples, walked with frame
        // pointers meanwhile) only in files small enough to parse on the reader's thread
        // (librustc_driver's symbol table held it for seconds in a debug build).
        if rec.flags & record_flags::LEAF_RET != 0
            && let Some(&ip) = user.first()
            && let Some(caller) = self.normalizer.missing_leaf_caller(
                rec.pid,
                Some(&rec.comm),
                ip,
                user.get(1).copied(),
                rec.leaf_ret,
                rec.flags & record_flags::UNWIND_NO_PROCESS != 0,
            )
        {
            user.insert(1, caller);
        }
        let mut kernel: Box<[u64]> = (0..nk).map(|i| frame_at(frames, i)).collect();
        if kernel.is_empty() && user.is_empty() {
            // No stack could be walked: keep at least the sampled instruction.
            if rec.ip >= KERNEL_SPACE {
                kernel = Box::new([rec.ip]);
            } else {
                user.push(rec.ip);
            }
        }
        let user = self.user_frames(rec.pid, &rec.comm, &user);
        let key = RawStack {
            event: rec.request,
            pid: rec.pid,
            tid: rec.tid,
            cpu: rec.cpu,
            cgroup: rec.cgroup_id,
            comm: rec.comm,
            kernel,
            user,
            missing: marker,
            labels,
        };
        for (k, &w) in weights.iter().enumerate() {
            if w != 0 {
                let counter = RawStack {
                    event: first_counter + k as u32,
                    comm: key.comm,
                    kernel: key.kernel.clone(),
                    user: key.user.clone(),
                    labels: key.labels.clone(),
                    ..key
                };
                *self.stacks.entry(counter).or_default() += Weight {
                    value: w,
                    samples: 0,
                };
            }
        }
        self.count(key, weight);
    }

    /// Names runtimes' frames (through [`Self::set_runtimes`]) and normalizes native ones.
    /// Every native frame but the innermost is a return address.
    fn user_frames(&mut self, pid: u32, comm: &[u8; 16], words: &[u64]) -> Box<[UserFrame]> {
        let mut out = Vec::with_capacity(words.len());
        let mut runtimes = self.runtimes.as_ref().and_then(|r| r.lock().ok());
        let mut i = 0;
        while i < words.len() {
            if let Some(r) = runtimes.as_mut()
                && let Some((taken, frame)) = r.frame(pid, &words[i..])
            {
                out.extend(frame.map(UserFrame::Named));
                i += taken;
                continue;
            }
            out.push(self.normalizer.normalize(pid, Some(comm), words[i], i > 0));
            i += 1;
        }
        out.into_boxed_slice()
    }

    /// The labels of a sample's label words, read by the runtime that asked for them.
    fn labels(&mut self, pid: u32, words: [u64; 2]) -> Labels {
        let mut runtimes = self.runtimes.as_ref().and_then(|r| r.lock().ok());
        runtimes
            .as_mut()
            .and_then(|r| r.labels(pid, words))
            .unwrap_or_default()
    }

    /// Names the frames of these runtimes' kernel walkers from now on.
    pub fn set_runtimes(&mut self, runtimes: SharedRuntimes) {
        self.runtimes = Some(runtimes);
    }

    /// Adds `weight` to `key`'s count; a stack seen for the first time has its addresses
    /// noted for naming ahead.
    fn count(&mut self, key: RawStack, weight: Weight) {
        match self.stacks.entry(key) {
            Entry::Occupied(mut e) => *e.get_mut() += weight,
            Entry::Vacant(e) => {
                let k = e.key();
                if !self.no_naming_ahead {
                    self.fresh.note(k.kernel_lookups(), &k.user);
                }
                e.insert(weight);
            }
        }
    }

    /// Whether new stacks' addresses are noted to be named ahead of the end. Not in
    /// continuous mode: each interval's batch names its stacks anyway, and naming ahead
    /// there would parse the same big files again every 200 ms for as long as new addresses
    /// come (a fleet host's steady state).
    pub fn name_ahead(&mut self, yes: bool) {
        self.no_naming_ahead = !yes;
        if !yes {
            self.fresh = Fresh::default();
        }
    }

    /// The addresses of the stacks first seen since the last call, to be named ahead.
    pub fn take_prefetch(&mut self) -> Option<Prefetch> {
        self.fresh.take(&self.normalizer)
    }

    /// The one table of opened files (the unwinder's registry reads through it too).
    pub fn files(&mut self) -> &mut ElfFiles {
        self.normalizer.files()
    }

    /// The table of opened files and the mappings' history, for the unwinder's loader.
    pub fn files_and_history(&mut self) -> (&mut ElfFiles, &crate::modules::MapHistory) {
        self.normalizer.files_and_history()
    }

    /// Applies the kernel's sideband records (mmaps, execs, forks, exits) to the mappings'
    /// history, before the samples that follow them are read.
    pub fn apply_sideband(&mut self, records: &[crate::perf::SideRecord]) {
        let history = self.normalizer.history_mut();
        for r in records {
            history.apply(r);
        }
    }

    /// Merges `pid`'s current maps into what was captured (a library was mapped since).
    pub fn refresh_maps(&mut self, pid: u32) {
        self.normalizer.merge_current_maps(pid);
    }

    /// Captures `pid`'s maps now, while it lives (in-kernel aggregation sees pids before
    /// their stacks are read).
    pub fn observe(&mut self, pid: u32) {
        self.normalizer.observe(pid, None);
    }

    /// Counts `weight` (samples and the events they stand for) of event `event` on one
    /// in-kernel aggregation entry's stack.
    pub fn add_counted(&mut self, event: u32, stack: &CountedStack<'_>, weight: Weight) {
        self.samples += weight.samples;
        self.add_entry(event, stack, weight);
    }

    /// Adds the increase `weights[k]` of each counter of a group on one in-kernel
    /// aggregation entry's stack, as samples of event `first_counter + k` (not counted as
    /// samples, as in [`Collector::add_weighted`]).
    pub fn add_counter_weights(
        &mut self,
        first_counter: u32,
        stack: &CountedStack<'_>,
        weights: &[u64],
    ) {
        for (k, &w) in weights.iter().enumerate() {
            if w != 0 {
                let weight = Weight {
                    value: w,
                    samples: 0,
                };
                self.add_entry(first_counter + k as u32, stack, weight);
            }
        }
    }

    fn add_entry(&mut self, event: u32, stack: &CountedStack<'_>, weight: Weight) {
        let CountedStack {
            pid,
            cgroup,
            comm,
            kernel,
            user,
            missing,
        } = *stack;
        self.normalizer.observe(pid, Some(comm));
        let user = self.user_frames(pid, &comm, user);
        let key = RawStack {
            event,
            pid,
            tid: 0,
            cpu: 0,
            cgroup,
            comm,
            kernel: kernel.into(),
            user,
            missing,
            labels: Labels::default(),
        };
        self.count(key, weight);
    }

    /// The samples counted so far, with the files they need, as a batch to symbolize;
    /// counting starts again from zero. Refused files are reported here, once each.
    pub fn take_normalized(&mut self, mut info: RunInfo, events: &[Arc<str>]) -> Normalized {
        info.samples = std::mem::take(&mut self.samples);
        self.all_samples += info.samples;
        let stacks = std::mem::take(&mut self.stacks);
        self.stacks.shrink_to_fit();
        // The batch names all of them.
        self.fresh = Fresh::default();
        let ids: BTreeSet<FileId> = file_offsets(stacks.keys()).map(|(f, _)| f).collect();
        let files = self.normalizer.hand_over(ids);
        for refusal in self.normalizer.take_refusals() {
            self.warnings
                .push(Warning::new(format!("not read: {refusal}")));
            info.refused += 1;
        }
        // The stacks of exited processes are normalized: their maps can go.
        self.normalizer.forget_exited();
        Normalized {
            stacks,
            files,
            info,
            events: events.to_vec(),
            warnings: Vec::new(),
        }
    }

    /// The warnings given since the last call (files refused).
    pub fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.warnings)
    }

    /// The profile of the samples counted so far, symbolized here and now.
    pub fn take_profile(&mut self, info: RunInfo, events: &[Arc<str>]) -> Profile {
        self.take_normalized(info, events)
            .symbolize(&mut Symbolizer::new(&[]))
            .0
    }
}

impl RawStack {
    /// The addresses to look the kernel frames up at, innermost first: every kernel frame
    /// but the innermost is a return address, so inside the call.
    fn kernel_lookups(&self) -> impl DoubleEndedIterator<Item = u64> + '_ {
        self.kernel
            .iter()
            .enumerate()
            .map(|(i, &a)| if i > 0 { a.saturating_sub(1) } else { a })
    }
}

/// The (file, offset) of every user frame of `stacks` that is in a file.
fn file_offsets<'a>(
    stacks: impl Iterator<Item = &'a RawStack>,
) -> impl Iterator<Item = (FileId, u64)> {
    stacks
        .flat_map(|s| s.user.iter())
        .filter_map(UserFrame::in_file)
}

/// Names `wanted` (one blazesym call per file); returns how many files could not be read,
/// each with a warning in `warnings`.
fn resolve_files(
    symbolizer: &mut Symbolizer,
    files: &HashMap<FileId, ElfFile>,
    wanted: impl Iterator<Item = (FileId, u64)>,
    warnings: &mut dyn Warn,
) -> u64 {
    let errors = symbolizer.resolve_user(files, wanted);
    for e in &errors.files {
        warnings.warn(Warning::new(format!("not symbolized: {e}")));
    }
    errors.files.len() as u64
}

impl Normalized {
    /// Names the user offsets of several waiting batches in one pass, one blazesym call per
    /// file for all of them (their [`Normalized::symbolize`] then finds every name cached): a
    /// worker that fell behind catches up instead of parsing each file once per interval.
    pub fn resolve_ahead(batches: &mut [Normalized], symbolizer: &mut Symbolizer) {
        let mut files: HashMap<FileId, ElfFile> = HashMap::new();
        for b in batches.iter() {
            for (id, f) in &b.files {
                files.entry(*id).or_insert_with(|| f.clone());
            }
        }
        let wanted = file_offsets(batches.iter().flat_map(|b| b.stacks.keys()));
        let mut warnings = Vec::new();
        let failed = resolve_files(symbolizer, &files, wanted, &mut warnings);
        if let Some(first) = batches.first_mut() {
            first.info.unsymbolized += failed;
            first.warnings.extend(warnings);
        }
    }

    /// Names every frame: each file's offsets in one call, the kernel's in one call.
    /// Returns the profile and the warnings that go with it.
    pub fn symbolize(self, symbolizer: &mut Symbolizer) -> (Profile, Vec<Warning>) {
        let Normalized {
            stacks: raw_stacks,
            files,
            mut info,
            events,
            mut warnings,
        } = self;
        let wanted = file_offsets(raw_stacks.keys());
        info.unsymbolized += resolve_files(symbolizer, &files, wanted, &mut warnings);
        symbolizer.resolve_kernel(raw_stacks.keys().flat_map(RawStack::kernel_lookups));
        let name_of = |id: FileId| files.get(&id).map(|f| (f.name.clone(), f.path.clone()));
        let mut profile = Profile {
            info,
            ..Default::default()
        };
        // Each address's frames are interned once; its later stacks copy the ids.
        let mut user_ids: FastMap<(FileId, u64), Box<[FrameId]>> = FastMap::default();
        let mut kernel_ids: FastMap<u64, Box<[FrameId]>> = FastMap::default();
        let mut missing_ids: HashMap<&'static str, FrameId> = HashMap::new();
        // Different addresses can symbolize to the same frames (two call sites in one
        // function): merge them so each distinct stack appears once.
        type Key = (u32, u32, u32, u32, u64, Arc<str>, Box<[FrameId]>, Labels);
        let mut merged: FastMap<Key, Weight> = FastMap::default();
        let mut comms: HashMap<[u8; 16], Arc<str>> = HashMap::new();
        let mut cgroups = BTreeSet::new();
        for (raw, weight) in raw_stacks {
            let comm = comms
                .entry(raw.comm)
                .or_insert_with(|| {
                    let end = raw.comm.iter().position(|&b| b == 0).unwrap_or(16);
                    Arc::from(String::from_utf8_lossy(&raw.comm[..end]).as_ref())
                })
                .clone();
            // Stacks arrive innermost first; profiles store them outermost first.
            let table = &mut profile.frames;
            let mut frames: Vec<FrameId> = Vec::new();
            for f in raw.user.iter().rev() {
                match f {
                    UserFrame::File { file, offset } => {
                        let ids = user_ids.entry((*file, *offset)).or_insert_with(|| {
                            table.intern_all(symbolizer.user(*file, *offset, name_of(*file)).iter())
                        });
                        frames.extend_from_slice(ids);
                    }
                    UserFrame::Named(named) => frames.extend(named.iter().map(|f| table.intern(f))),
                }
            }
            for addr in raw.kernel_lookups().rev() {
                let ids = kernel_ids
                    .entry(addr)
                    .or_insert_with(|| table.intern_all(symbolizer.kernel(addr).iter()));
                frames.extend_from_slice(ids);
            }
            if let Some(why) = raw.missing {
                let id = *missing_ids
                    .entry(why)
                    .or_insert_with(|| table.intern(&Frame::named(why, FrameKind::User)));
                frames.push(id);
            }
            if raw.cgroup != 0 {
                cgroups.insert(raw.cgroup);
            }
            let key = (
                raw.event,
                raw.pid,
                raw.tid,
                raw.cpu,
                raw.cgroup,
                comm,
                frames.into_boxed_slice(),
                raw.labels,
            );
            *merged.entry(key).or_default() += weight;
        }
        profile.stacks = merged
            .into_iter()
            .map(
                |((event, pid, tid, cpu, cgroup, comm, frames, labels), weight)| StackCount {
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
                    count: weight.value,
                    samples: weight.samples,
                    labels,
                },
            )
            .collect();
        profile.cgroups = crate::cgroup::paths(&cgroups);
        (profile, warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_weights_of_aggregated_entries_are_not_samples() {
        let mut c = Collector::default();
        let stack = CountedStack {
            pid: std::process::id(),
            cgroup: 0,
            comm: *b"group\0\0\0\0\0\0\0\0\0\0\0",
            kernel: &[],
            user: &[],
            missing: Some("[stack hash collision]"),
        };
        c.add_counted(
            0,
            &stack,
            Weight {
                value: 7_000,
                samples: 7,
            },
        );
        // Counters 1 and 2 of a group whose first counter is event 1: a zero adds nothing.
        c.add_counter_weights(1, &stack, &[70, 0]);
        c.add_counter_weights(1, &stack, &[5, 0]);
        assert_eq!(c.samples(), 7);
        let events: Vec<Arc<str>> = ["cpu-clock", "page-faults", "context-switches"]
            .into_iter()
            .map(Arc::from)
            .collect();
        let p = c.take_profile(RunInfo::default(), &events);
        let of = |e: &str| -> u64 {
            p.stacks
                .iter()
                .filter(|s| &*s.event == e)
                .map(|s| s.count)
                .sum()
        };
        assert_eq!(
            (of("cpu-clock"), of("page-faults"), of("context-switches")),
            (7_000, 75, 0)
        );
        let samples: u64 = p.stacks.iter().map(|s| s.samples).sum();
        assert_eq!(samples, 7, "counter increases are no samples");
        assert_eq!(p.info.samples, 7);
        assert!(p.stacks.iter().all(|s| s.frames.len() == 1));
        // One frame, the collision marker, shared by every stack.
        assert_eq!(p.frames.len(), 1);
        assert_eq!(
            p.frame(p.stacks[0].frames[0]).function.as_ref(),
            "[stack hash collision]"
        );
    }
}
