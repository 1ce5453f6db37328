//! The async face of the core's ring-buffer readers: the same records, with the wait for the
//! kernel's wake-up done by tokio's reactor instead of a blocking poll(2).

use std::{collections::VecDeque, io, time::Duration};

use profiler_common::SampleRecord;
use profiler_core::{
    bpf::{MAX_BATCH_TIME, Records},
    cpc::Overflow,
};
use tokio::io::{Interest, unix::AsyncFd};

/// The sampler's ring buffer as an async source of records (create it inside a tokio
/// runtime). `next_batch` returns after `poll` even without a wake-up, so a slow trickle of
/// samples (below the wake-up threshold) is still drained.
pub struct RecordStream {
    ring: AsyncFd<Records>,
}

impl RecordStream {
    pub fn new(records: Records) -> io::Result<Self> {
        // SAFETY: `Records` owns the ring's map fd, which stays open and unchanged until the
        // AsyncFd (which owns the `Records`) is dropped.
        let ring = unsafe { AsyncFd::register_with_interest(records, Interest::READABLE) }?;
        Ok(Self { ring })
    }

    /// Hands every pending record to `f`; returns how many there were.
    pub fn drain(&mut self, f: impl FnMut(&SampleRecord)) -> usize {
        self.ring.get_mut().drain(f)
    }

    /// Hands every pending item's bytes to `f` (records of any layout); returns how many.
    pub fn drain_bytes(&mut self, f: impl FnMut(&[u8])) -> usize {
        self.ring.get_mut().drain_bytes(f)
    }

    /// Waits until the kernel signals data or `poll` passes, then drains for at most
    /// `MAX_BATCH_TIME` (see [`Records::next_batch`]).
    pub async fn next_batch(&mut self, poll: Duration, f: impl FnMut(&SampleRecord)) -> usize {
        self.wait(poll).await;
        let deadline = std::time::Instant::now() + MAX_BATCH_TIME;
        self.ring.get_mut().drain_until(Some(deadline), f)
    }

    /// [`RecordStream::next_batch`] for records of any layout, as bytes.
    pub async fn next_batch_bytes(&mut self, poll: Duration, f: impl FnMut(&[u8])) -> usize {
        self.wait(poll).await;
        let deadline = std::time::Instant::now() + MAX_BATCH_TIME;
        self.ring.get_mut().drain_bytes_until(Some(deadline), f)
    }

    async fn wait(&mut self, poll: Duration) {
        if let Ok(Ok(mut guard)) = tokio::time::timeout(poll, self.ring.readable_mut()).await {
            guard.clear_ready();
        }
    }
}

/// Overflows of one set as an async stream (from `Cpc::overflows`, inside a tokio runtime).
pub struct OverflowStream {
    records: RecordStream,
    pending: VecDeque<Overflow>,
}

impl OverflowStream {
    pub fn new(overflows: profiler_core::cpc::Overflows) -> io::Result<Self> {
        let (records, pending) = overflows.into_parts();
        Ok(Self {
            records: RecordStream::new(records)?,
            pending,
        })
    }

    /// The next overflow.
    pub async fn next(&mut self) -> Overflow {
        loop {
            if let Some(o) = self.pending.pop_front() {
                return o;
            }
            let pending = &mut self.pending;
            self.records
                .next_batch(Duration::from_millis(100), |r| pending.push_back(r.into()))
                .await;
        }
    }

    /// Every overflow already delivered, without waiting.
    pub fn drain(&mut self) -> Vec<Overflow> {
        let pending = &mut self.pending;
        self.records.drain(|r| pending.push_back(r.into()));
        self.pending.drain(..).collect()
    }
}
