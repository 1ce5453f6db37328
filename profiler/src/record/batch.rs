//! The records of one wake-up of the reader, kept back to back until the unwind tables they
//! ask for are loaded, and what feeds the loader before they are counted: the sideband's
//! mappings.

use profiler_common::stack::StackSampleHeader;

use super::{collect::Collector, unwind::TableLoader};
use crate::perf::Sideband;

/// Applies what the sideband reported since the last call to the collector's mappings'
/// history: done before the samples read after it are normalized or walked.
pub(super) fn read_sideband(sideband: &mut Option<Sideband>, collector: &mut Collector) {
    if let Some(s) = sideband {
        collector.apply_sideband(&s.read());
    }
}

/// Most records held for tables still being built (past it, copies are walked at once).
pub(super) const MAX_HELD: usize = 4096;

/// Records copied out of the ring in one wake-up, back to back.
#[derive(Default)]
pub(super) struct Batch {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

/// Records normalized between two looks at the ring for new processes' tables.
pub(super) const CHUNK_RECORDS: usize = 256;
/// Past this many records, a batch takes nothing more in (the loop must get back to its
/// signals and deadline).
pub(super) const MAX_BATCH_RECORDS: usize = 16 * 1024;

impl Batch {
    /// Keeps one record from the ring, counting its bytes and showing the table loader
    /// its unwind marks.
    pub(super) fn take(
        &mut self,
        record: &[u8],
        ring_bytes: &mut u64,
        tables: Option<&mut TableLoader>,
    ) {
        *ring_bytes += record.len() as u64;
        if let Some(t) = tables
            && let Some((header, _)) = StackSampleHeader::parse(record)
        {
            t.note(&header);
        }
        self.push(record);
    }

    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(super) fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    pub(super) fn push(&mut self, record: &[u8]) {
        self.bytes.extend_from_slice(record);
        self.ends.push(self.bytes.len());
    }

    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}
