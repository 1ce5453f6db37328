//! Continuous mode's symbolizing thread: each interval's raw stacks (and a snapshot of the
//! maps they need) go to it, and the profiles come back in order, while the recording loop
//! keeps reading the ring buffer. Symbolizing an interval of a busy host takes seconds; done
//! on the reader's thread it stalled the reader and the ring overflowed.

use std::{io, sync::Arc, thread::JoinHandle};

use tokio::sync::mpsc;

use super::collect::{Interval, symbolize_interval};
use crate::{profile::Profile, symbolize::Symbolizer};

pub struct IntervalWorker {
    to_worker: std::sync::mpsc::Sender<Interval>,
    from_worker: mpsc::UnboundedReceiver<Profile>,
    thread: JoinHandle<()>,
}

impl IntervalWorker {
    /// Starts the thread; `events[i]` names the samples of request `i`.
    pub fn start(events: Vec<Arc<str>>) -> io::Result<Self> {
        let (to_worker, intervals) = std::sync::mpsc::channel::<Interval>();
        let (to_loop, from_worker) = mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("symbolize".into())
            .spawn(move || {
                // Its own symbolizer: caches of resolved addresses last across intervals.
                let mut symbolizer = Symbolizer::new();
                for interval in intervals {
                    let profile = symbolize_interval(&mut symbolizer, interval, &events);
                    if to_loop.send(profile).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Self {
            to_worker,
            from_worker,
            thread,
        })
    }

    /// Hands over one interval.
    pub fn send(&self, interval: Interval) {
        // The thread ends only when this sender is dropped (or after a panic, which
        // `finish` reports by joining); nothing to do here then.
        let _ = self.to_worker.send(interval);
    }

    /// Waits for every interval handed over, and returns their profiles in order.
    pub async fn finish(self) -> Vec<Profile> {
        let Self {
            to_worker,
            mut from_worker,
            thread,
        } = self;
        drop(to_worker);
        let mut out = Vec::new();
        while let Some(p) = from_worker.recv().await {
            out.push(p);
        }
        if thread.join().is_err() {
            eprintln!(
                "profiler: warning: the symbolizing thread failed; some intervals are missing"
            );
        }
        out
    }
}

/// The next finished profile, or never (no worker).
pub async fn next_profile(worker: &mut Option<IntervalWorker>) -> Option<Profile> {
    match worker {
        Some(w) => w.from_worker.recv().await,
        None => std::future::pending().await,
    }
}
