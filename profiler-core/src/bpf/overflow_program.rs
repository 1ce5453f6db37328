//! libcpc's overflow program: at each overflow of a notifying request it writes the PC, the
//! thread and the request's values (`profiler_common::SampleRecord`) to its ring, and may
//! freeze the set or signal the thread, as each request's configuration says.

use std::os::fd::BorrowedFd;

use profiler_common::{
    DEFAULT_RING_BYTES, RequestConfig, SamplerConfig,
    names::{maps as map, programs},
};

use super::{
    BpfError, SamplerStats,
    object::{Loaded, MapSizes},
    ring::Records,
};
use crate::{
    kernel::{self, Kernel},
    perf::PerfEvent,
};

/// How to load the overflow program.
#[derive(Clone, Copy, Debug)]
pub struct OverflowConfig {
    /// The program's configuration (target filters, wake-up threshold).
    pub sampler: SamplerConfig,
    /// Bytes of the ring the overflow records are written to.
    pub ring_bytes: u32,
    /// Links are made through this seam.
    pub kernel: &'static dyn Kernel,
}

impl Default for OverflowConfig {
    fn default() -> Self {
        Self {
            sampler: SamplerConfig::default(),
            ring_bytes: DEFAULT_RING_BYTES,
            kernel: kernel::linux(),
        }
    }
}

/// The loaded overflow program and the events it is linked to. Dropping it detaches the
/// links, closes the events it keeps and unloads program and maps.
pub struct OverflowProgram {
    loaded: Loaded,
}

impl OverflowProgram {
    /// Loads the object for libcpc's overflow records; the maps it does not use stay minimal.
    pub fn load(config: OverflowConfig) -> Result<Self, BpfError> {
        let sizes = MapSizes {
            events: config.ring_bytes,
            ..MapSizes::default()
        };
        let loaded = Loaded::load(
            config.kernel,
            sizes,
            programs::SAMPLE,
            map::EVENTS,
            config.sampler,
            &[],
        )?;
        Ok(Self { loaded })
    }

    /// Says what the program does at overflows of events attached with `cookie`.
    pub fn set_request(&mut self, cookie: u64, config: RequestConfig) -> Result<(), BpfError> {
        self.loaded.set_request(cookie, config)
    }

    /// Adds a process to the in-kernel tgid filter (`filter::TGID`).
    pub fn add_tgid(&mut self, tgid: u32) -> Result<(), BpfError> {
        self.loaded.add_tgid(tgid)
    }

    /// Runs the program on every overflow of `event` (cookie `cookie`) and keeps `event`.
    pub fn attach(&mut self, event: PerfEvent, cookie: u64) -> Result<(), BpfError> {
        self.loaded.attach(event, cookie)
    }

    /// Runs the program on every overflow of an event someone else owns. The link (kept
    /// here) holds the event open: drop the program with the event's owner.
    pub fn link(&mut self, event: BorrowedFd<'_>, cookie: u64) -> Result<(), BpfError> {
        self.loaded.link(event, cookie)
    }

    /// Puts the event of request `index` (below `MAX_SIBLINGS`) for context `context` (below
    /// the number of CPUs) where records can read its value.
    pub fn set_sibling(
        &mut self,
        index: usize,
        context: u32,
        event: BorrowedFd<'_>,
    ) -> Result<(), BpfError> {
        self.loaded.set_sibling(index, context, event)
    }

    /// The attached events, to enable or disable them.
    pub fn events(&self) -> &[PerfEvent] {
        self.loaded.events()
    }

    /// Closes every perf event: no new overflow arrives after this returns.
    pub fn detach_all(&mut self) {
        self.loaded.detach_all();
    }

    /// Takes the ring buffer for reading (once).
    pub fn take_records(&mut self) -> Result<Records, BpfError> {
        self.loaded.take_records()
    }

    /// How many times the kernel ran the program (needs BPF run-time stats enabled, e.g.
    /// with `aya::sys::enable_stats`): an account of overflows independent of our counters.
    pub fn run_count(&self) -> Result<u64, BpfError> {
        self.loaded.run_count()
    }

    /// Sums the per-CPU counters.
    pub fn stats(&self) -> Result<SamplerStats, BpfError> {
        self.loaded.stats()
    }
}
