//! Decoding the ring's records before they are dispatched: a record whose user stack the
//! kernel could only copy (its process's unwind tables were not loaded yet, see `copied`) is
//! walked here once the tables are, and rewritten as if the kernel had walked it; records
//! waiting for tables still being built are held. Everything after sees ordinary records.

use std::time::{Duration, Instant};

use profiler_common::stack::StackSampleHeader;

use super::{
    RecordError,
    batch::{Batch, CHUNK_RECORDS, MAX_BATCH_RECORDS, MAX_HELD, read_sideband},
    collect::Collector,
    feature::{self, Feature},
    unwind::{Rewritten, TableLoader, TableStats},
};
use crate::{bpf::RecordStream, perf::Sideband};

/// Most time one call spends loading processes' tables on the reader's thread before it
/// goes on with its records (the rest are loaded at its next call, their copies held).
const LOAD_SLICE: Duration = Duration::from_millis(50);

/// The ring's records on their way to the features.
pub(super) struct Decoder {
    /// Unwind tables kept in step with the sampled processes (`--call-graph dwarf`).
    tables: Option<TableLoader>,
    /// The records of one wake-up, kept until the unwind tables they ask for are loaded.
    batch: Batch,
    /// Records with copied stacks whose process's tables are still being built.
    held: Vec<Vec<u8>>,
    /// Bytes of records read from the ring (for `unwind_stats`).
    ring_bytes: u64,
}

impl Decoder {
    pub fn new(tables: Option<TableLoader>) -> Self {
        Self {
            tables,
            batch: Batch::default(),
            held: Vec::new(),
            ring_bytes: 0,
        }
    }

    /// Keeps one record of a wake-up (see [`Self::decode_batch`]).
    pub fn take(&mut self, record: &[u8]) {
        self.batch
            .take(record, &mut self.ring_bytes, self.tables.as_mut());
    }

    /// Walks and dispatches the records of one wake-up: the tables they ask for are loaded
    /// first, then the records go in chunks, between two of which what arrived meanwhile is
    /// taken in (so a process started while a long batch is being normalized on a busy
    /// host does not wait for all of it).
    pub fn decode_batch(
        &mut self,
        records: &mut RecordStream,
        sideband: &mut Option<Sideband>,
        collector: &mut Collector,
        features: &mut [Box<dyn Feature>],
    ) -> Result<(), RecordError> {
        // The mappings reported up to now: those of every sample just read.
        read_sideband(sideband, collector);
        // Tables first: a new process's next samples are walked whole as soon as they are
        // in the kernel, not after this batch is normalized.
        if let Some(t) = self.tables.as_mut() {
            for pid in t.load_pending(collector.files_and_history(), Some(LOAD_SLICE))? {
                collector.refresh_maps(pid);
            }
        }
        let Self {
            tables,
            batch,
            held,
            ring_bytes,
        } = self;
        let mut done = 0;
        while done < batch.len() {
            let end = (done + CHUNK_RECORDS).min(batch.len());
            for i in done..end {
                let record = batch.get(i);
                match tables
                    .as_mut()
                    .map(|t| t.rewrite(record, held.len() < MAX_HELD))
                {
                    Some(Rewritten::Walked(r)) => feature::dispatch(features, collector, &r),
                    Some(Rewritten::Wait) => held.push(record.to_vec()),
                    _ => feature::dispatch(features, collector, record),
                }
            }
            done = end;
            if let Some(t) = tables.as_mut()
                && batch.len() < MAX_BATCH_RECORDS
            {
                records.drain_bytes(|bytes| batch.take(bytes, ring_bytes, Some(t)));
                read_sideband(sideband, collector);
                for pid in t.load_pending(collector.files_and_history(), Some(LOAD_SLICE))? {
                    collector.refresh_maps(pid);
                }
            }
        }
        batch.clear();
        // Copies held for modules built since.
        if let Some(t) = tables.as_mut()
            && !held.is_empty()
        {
            for record in std::mem::take(held) {
                match t.rewrite(&record, true) {
                    Rewritten::Walked(r) => feature::dispatch(features, collector, &r),
                    Rewritten::Wait => held.push(record),
                    Rewritten::Same => feature::dispatch(features, collector, &record),
                }
            }
        }
        Ok(())
    }

    /// Takes what is left in the ring once sampling stopped; a copied stack's process's
    /// tables are loaded now if they are not.
    pub fn drain_last(
        &mut self,
        records: &mut RecordStream,
        collector: &mut Collector,
        features: &mut [Box<dyn Feature>],
    ) {
        let Self {
            tables,
            held,
            ring_bytes,
            ..
        } = self;
        records.drain_bytes(|bytes| {
            *ring_bytes += bytes.len() as u64;
            let walked = tables.as_mut().and_then(|t| {
                if let Some((header, _)) = StackSampleHeader::parse(bytes) {
                    t.note(&header);
                    let _ = t.load_pending(collector.files_and_history(), None);
                }
                match t.rewrite(bytes, held.len() < MAX_HELD) {
                    Rewritten::Walked(r) => Some(Some(r)),
                    Rewritten::Wait => None,
                    Rewritten::Same => Some(None),
                }
            });
            match walked {
                Some(Some(r)) => feature::dispatch(features, collector, &r),
                None => held.push(bytes.to_vec()),
                Some(None) => feature::dispatch(features, collector, bytes),
            }
        });
    }

    /// Records to walk with the held copies at the end (as the ring carries them).
    pub fn hold(&mut self, records: Vec<Vec<u8>>) {
        self.held.extend(records);
    }

    /// The copies held for tables being built: walked once they are (or the time is up).
    pub fn finish(
        &mut self,
        collector: &mut Collector,
        features: &mut [Box<dyn Feature>],
    ) -> Result<(), RecordError> {
        let Some(t) = self.tables.as_mut() else {
            return Ok(());
        };
        for record in &self.held {
            if let Some((header, _)) = StackSampleHeader::parse(record) {
                t.note(&header);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        t.finish_building(deadline, collector.files_and_history())?;
        for record in std::mem::take(&mut self.held) {
            match t.rewrite(&record, false) {
                Rewritten::Walked(r) => feature::dispatch(features, collector, &r),
                _ => feature::dispatch(features, collector, &record),
            }
        }
        Ok(())
    }

    /// Whether a starting process waits for a runtime to become readable (the reader then
    /// polls sooner: it is published to the kernel at a batch).
    pub fn starting(&self) -> bool {
        self.tables.as_ref().is_some_and(TableLoader::starting)
    }

    /// The unwinder's warnings since the last call.
    pub fn take_warnings(&mut self) -> Vec<super::Warning> {
        self.tables
            .as_mut()
            .map(TableLoader::take_warnings)
            .unwrap_or_default()
    }

    /// The tables' totals (zeros without tables).
    pub fn table_stats(&self) -> Option<TableStats> {
        self.tables.as_ref().map(|t| t.stats())
    }

    pub fn ring_bytes(&self) -> u64 {
        self.ring_bytes
    }
}
