//! Asynchronous reading of the sampler's ring buffer with tokio.

use std::{
    io,
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use profiler_common::SampleRecord;
use tokio::io::{Interest, unix::AsyncFd};

/// The ring buffer as an async source of records. The kernel wakes the reader only once a
/// batch is pending (see `SamplerConfig::wakeup_bytes`); `next_batch` also returns after
/// `poll` without a wake-up, so a slow trickle of samples is still drained.
pub struct RecordStream {
    ring: AsyncFd<RingBuf<MapData>>,
}

impl RecordStream {
    pub(super) fn new(ring: RingBuf<MapData>) -> io::Result<Self> {
        // SAFETY: the RingBuf owns its map fd, which stays open and unchanged until the
        // AsyncFd (which owns the RingBuf) is dropped.
        let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Self { ring })
    }

    /// Hands every pending record to `f`; returns how many there were.
    pub fn drain(&mut self, f: impl FnMut(&SampleRecord)) -> usize {
        self.drain_until(None, f)
    }

    /// Hands pending records to `f` until the ring is empty or `deadline` passes.
    fn drain_until(
        &mut self,
        deadline: Option<Instant>,
        mut f: impl FnMut(&SampleRecord),
    ) -> usize {
        let ring = self.ring.get_mut();
        let mut n = 0;
        let mut items = 0u32;
        while let Some(item) = ring.next() {
            if let Some(record) = parse(&item) {
                f(&record);
                n += 1;
            }
            // Checked after the record is handed over (a taken item is consumed); the clock
            // is read every 256 records.
            items = items.wrapping_add(1);
            if items.is_multiple_of(256) && deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        n
    }

    /// Waits until the kernel signals data or `poll` passes, then drains for at most
    /// `MAX_BATCH_TIME`: while the kernel writes faster than we read, the ring never empties,
    /// and an unbounded drain would never return to the caller's deadline and signals.
    pub async fn next_batch(&mut self, poll: Duration, f: impl FnMut(&SampleRecord)) -> usize {
        if let Ok(Ok(mut guard)) = tokio::time::timeout(poll, self.ring.readable_mut()).await {
            guard.clear_ready();
        }
        self.drain_until(Some(Instant::now() + MAX_BATCH_TIME), f)
    }
}

/// Longest one `next_batch` keeps draining.
const MAX_BATCH_TIME: Duration = Duration::from_millis(20);

/// A record from raw ring-buffer bytes; short items (never written by our program) are skipped.
fn parse(bytes: &[u8]) -> Option<SampleRecord> {
    if bytes.len() < SampleRecord::SIZE {
        return None;
    }
    // SAFETY: the slice holds at least SIZE bytes, SampleRecord is plain integers (any bit
    // pattern is valid), and read_unaligned makes no alignment assumption.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<SampleRecord>()) })
}
