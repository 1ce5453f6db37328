//! Reading the sampler's ring buffer: drain what is there, or wait for the kernel's wake-up
//! in poll(2). Async callers register the fd with their own reactor (`profiler::bpf`).

use std::{
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd},
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use profiler_common::SampleRecord;

/// The ring buffer as a source of records. The kernel wakes the reader only once a batch is
/// pending (see `SamplerConfig::wakeup_bytes`); `next_batch` also returns after `poll`
/// without a wake-up, so a slow trickle of samples is still drained.
pub struct Records {
    ring: RingBuf<MapData>,
}

/// Longest one batch keeps draining: while the kernel writes faster than we read, the ring
/// never empties, and an unbounded drain would never return to the caller's deadline.
pub const MAX_BATCH_TIME: Duration = Duration::from_millis(20);

impl Records {
    pub(super) fn new(ring: RingBuf<MapData>) -> Self {
        Self { ring }
    }

    /// Hands every pending record to `f`; returns how many there were.
    pub fn drain(&mut self, f: impl FnMut(&SampleRecord)) -> usize {
        self.drain_until(None, f)
    }

    /// Hands every pending item's bytes to `f` (records of any layout); returns how many.
    pub fn drain_bytes(&mut self, f: impl FnMut(&[u8])) -> usize {
        self.drain_bytes_until(None, f)
    }

    /// Hands pending records to `f` until the ring is empty or `deadline` passes.
    pub fn drain_until(
        &mut self,
        deadline: Option<Instant>,
        mut f: impl FnMut(&SampleRecord),
    ) -> usize {
        self.drain_items(deadline, |b| parse(b).map(|r| f(&r)).is_some())
    }

    /// [`Records::drain_until`] for records of any layout, as bytes.
    pub fn drain_bytes_until(
        &mut self,
        deadline: Option<Instant>,
        mut f: impl FnMut(&[u8]),
    ) -> usize {
        self.drain_items(deadline, |b| {
            f(b);
            true
        })
    }

    /// Hands pending items to `f` until the ring is empty or `deadline` passes; counts those
    /// `f` accepted.
    fn drain_items(
        &mut self,
        deadline: Option<Instant>,
        mut f: impl FnMut(&[u8]) -> bool,
    ) -> usize {
        let mut n = 0;
        let mut items = 0u32;
        while let Some(item) = self.ring.next() {
            if f(&item) {
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

    /// Blocks until the kernel signals data or `timeout` passes; true on a wake-up.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let ms = PollTimeout::try_from(timeout.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(self.ring.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(n) => Ok(n > 0),
            Err(nix::errno::Errno::EINTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits (blocking) for a wake-up or `poll`, then drains for at most [`MAX_BATCH_TIME`].
    pub fn next_batch(&mut self, poll: Duration, f: impl FnMut(&SampleRecord)) -> usize {
        // A failed poll leaves nothing to wait for; the drain still takes what is there.
        let _ = self.wait(poll);
        self.drain_until(Some(Instant::now() + MAX_BATCH_TIME), f)
    }

    /// [`Records::next_batch`] for records of any layout, as bytes.
    pub fn next_batch_bytes(&mut self, poll: Duration, f: impl FnMut(&[u8])) -> usize {
        let _ = self.wait(poll);
        self.drain_bytes_until(Some(Instant::now() + MAX_BATCH_TIME), f)
    }
}

impl AsFd for Records {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ring.as_fd()
    }
}

impl AsRawFd for Records {
    fn as_raw_fd(&self) -> RawFd {
        self.ring.as_fd().as_raw_fd()
    }
}

/// A record from raw ring-buffer bytes; short items (never written by our program) are skipped.
fn parse(bytes: &[u8]) -> Option<SampleRecord> {
    if bytes.len() < SampleRecord::SIZE {
        return None;
    }
    // SAFETY: the slice holds at least SIZE bytes, SampleRecord is plain integers (any bit
    // pattern is valid), and read_unaligned makes no alignment assumption.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<SampleRecord>()) })
}
