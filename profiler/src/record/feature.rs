//! What a recording can do besides sampling stacks, as parts the session plugs in: a
//! [`Feature`] says what it needs in the kernel, which records it takes, and what it adds to
//! each profile; `super::features::FEATURES` lists them all (a module of its own, so that the
//! features import this one and nothing imports back). The session calls the hooks at fixed
//! points of the run and never names a feature: adding one is its module, its option and one
//! line in `FEATURES`.

use crate::record::Warn;
use profiler_common::{group::MAX_COUNTERS, stack::StackSampleHeader};

use super::{RecordError, RecordOptions, UsageError, collect::Collector};
use crate::{
    bpf::RecordProgram,
    cpc::events::{Catalog, Event},
    perf::Sideband,
    profile::RunInfo,
};

/// One feature's entry in `FEATURES`: its checks of the options, the capture flags it asks
/// of the program, and its start (`None` when the options do not ask for it).
pub(super) struct Spec {
    pub validate: fn(&RecordOptions) -> Result<(), UsageError>,
    /// `profiler_common::capture` flags the record program must be loaded with.
    pub capture: fn(&RecordOptions) -> u32,
    pub start: fn(&mut Start<'_>) -> Started,
}

/// A started feature, `None` when the options do not ask for it.
pub(super) type Started = Result<Option<Box<dyn Feature>>, RecordError>;

/// What a feature starts from: the options, the loaded program (before the sampling events
/// are attached), and the profile's events so far.
pub(super) struct Start<'a> {
    pub opts: &'a RecordOptions,
    pub catalog: &'a Catalog,
    pub sampler: &'a mut RecordProgram,
    /// The counters to read with the sampled event (`--read`, an event group), resolved.
    pub counters: &'a [Event],
    /// The index the feature's first own event gets in the profile.
    pub first_event: u32,
    pub warnings: &'a mut dyn Warn,
}

/// The kernel side a feature reads from while recording: the program's maps, and the
/// mappings the kernel reported (applied to the collector before reading stacks).
pub(super) struct Kernel<'a> {
    pub sampler: &'a mut RecordProgram,
    pub sideband: &'a mut Option<Sideband>,
}

impl Kernel<'_> {
    /// Applies what the sideband reported since the last call to the collector's mappings.
    pub fn read_mappings(&mut self, collector: &mut Collector) {
        super::batch::read_sideband(self.sideband, collector);
    }
}

/// What features hand each other in one read: each counter's events the kernel put on
/// stacks so far (set by the in-kernel aggregation of a group's counters).
#[derive(Default)]
pub(super) struct Shared {
    pub counters_on_stacks: Option<[u64; MAX_COUNTERS]>,
}

/// The kinds of ring records, told apart by their header's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RecordKind {
    /// A sample of a sampled event.
    Sample,
    /// A wait off the CPU, with its nanoseconds.
    OffCpu,
}

impl RecordKind {
    pub fn of(header: &StackSampleHeader) -> Self {
        match header.flags & profiler_common::offcpu::OFF_CPU {
            0 => Self::Sample,
            _ => Self::OffCpu,
        }
    }
}

/// A decoded ring record: its header, its frames' bytes, and the whole record.
pub(super) struct Record<'a> {
    pub header: StackSampleHeader,
    pub frames: &'a [u8],
    pub bytes: &'a [u8],
}

/// A part of a recording. Every hook has a default that does nothing.
pub(super) trait Feature {
    /// Names of the profile events the feature adds after the sampled ones.
    fn event_names(&self) -> Vec<String> {
        Vec::new()
    }

    /// After the sampling events are attached (and before they are enabled).
    fn attach(&mut self, _sampler: &mut RecordProgram) -> Result<(), RecordError> {
        Ok(())
    }

    /// Whether the feature takes the records of `kind` (the first that does gets them).
    fn takes(&self, _kind: RecordKind) -> bool {
        false
    }

    /// Counts one record of a kind the feature takes.
    fn record(&mut self, _record: &Record<'_>, _collector: &mut Collector) {}

    /// Once a second: a look at what the kernel keeps (new processes, say).
    fn observe(
        &mut self,
        _kernel: &mut Kernel<'_>,
        _collector: &mut Collector,
    ) -> Result<(), RecordError> {
        Ok(())
    }

    /// Before a profile is handed over (each interval, and the last after the ring is
    /// drained): counts what the kernel summed since the last read.
    fn read(
        &mut self,
        _kernel: &mut Kernel<'_>,
        _collector: &mut Collector,
        _shared: &mut Shared,
    ) -> Result<(), RecordError> {
        Ok(())
    }

    /// The events are disabled (nothing new is counted): the last values are read.
    fn stopped(&mut self, _sampler: &mut RecordProgram) -> Result<(), RecordError> {
        Ok(())
    }

    /// Before the ring's last records are taken: what still writes to it is detached.
    fn detach(&mut self, _sampler: &mut RecordProgram) -> Result<(), RecordError> {
        Ok(())
    }

    /// After the ring is drained: counts what only the end knows; returns records (as the
    /// ring carries them) the session walks and dispatches as it does the ring's.
    fn drained(
        &mut self,
        _sampler: &mut RecordProgram,
        _collector: &mut Collector,
        _warnings: &mut dyn Warn,
    ) -> Result<Vec<Vec<u8>>, RecordError> {
        Ok(Vec::new())
    }

    /// What the feature adds to a profile's run information (`last`: the run's end).
    fn info(
        &mut self,
        _sampler: &mut RecordProgram,
        _info: &mut RunInfo,
        _shared: &Shared,
        _last: bool,
        _warnings: &mut dyn Warn,
    ) -> Result<(), RecordError> {
        Ok(())
    }
}

/// Sends a record to the first feature that takes its kind; a sample no feature takes is
/// counted as one sample of its event.
pub(super) fn dispatch(features: &mut [Box<dyn Feature>], collector: &mut Collector, bytes: &[u8]) {
    let Some((header, frames)) = StackSampleHeader::parse(bytes) else {
        return;
    };
    let kind = RecordKind::of(&header);
    let record = Record {
        header,
        frames,
        bytes,
    };
    match features.iter_mut().find(|f| f.takes(kind)) {
        Some(f) => f.record(&record, collector),
        None if kind == RecordKind::Sample => {
            let labels = profiler_common::stack::go_labels(&record.header, bytes);
            collector.add(&record.header, frames, labels)
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use profiler_common::stack::STACK_HEADER_SIZE;

    use super::*;

    /// A ring record: the header, then `words` (frames, then whatever follows them).
    fn record(header: StackSampleHeader, words: &[u64]) -> Vec<u8> {
        // SAFETY: the header is repr(C) plain integers without padding (its size is asserted
        // in profiler_common::stack); its bytes are read as laid out.
        let head = unsafe {
            std::slice::from_raw_parts((&raw const header).cast::<u8>(), STACK_HEADER_SIZE)
        };
        let mut out = head.to_vec();
        out.extend(words.iter().flat_map(|w| w.to_ne_bytes()));
        out
    }

    /// Takes off-CPU records and remembers their first frame.
    #[derive(Default)]
    struct Waits(std::rc::Rc<std::cell::RefCell<Vec<u64>>>);

    impl Feature for Waits {
        fn takes(&self, kind: RecordKind) -> bool {
            kind == RecordKind::OffCpu
        }

        fn record(&mut self, record: &Record<'_>, _collector: &mut Collector) {
            let first = u64::from_ne_bytes(record.frames[..8].try_into().unwrap());
            self.0.borrow_mut().push(first);
        }
    }

    #[test]
    fn records_go_to_the_feature_that_takes_their_kind() {
        let sample = StackSampleHeader {
            kernel_frames: 1,
            ..Default::default()
        };
        let wait = StackSampleHeader {
            flags: profiler_common::offcpu::OFF_CPU,
            ..sample
        };
        let seen = Waits::default();
        let got = seen.0.clone();
        let mut features: Vec<Box<dyn Feature>> = vec![Box::new(seen)];
        let mut collector = Collector::default();
        // Two samples (no feature takes them: counted as samples) and one wait of 5 ns.
        for (header, words) in [
            (sample, &[0x10, 0][..]),
            (wait, &[0x20, 5]),
            (sample, &[0x30]),
        ] {
            dispatch(&mut features, &mut collector, &record(header, words));
        }
        // A record shorter than its header is dropped.
        dispatch(&mut features, &mut collector, &[0u8; 8]);
        assert_eq!(collector.samples(), 2);
        assert_eq!(*got.borrow(), [0x20]);
        assert_eq!(RecordKind::of(&wait), RecordKind::OffCpu);
        assert_eq!(RecordKind::of(&sample), RecordKind::Sample);
    }
}
