//! The thread that symbolizes finished intervals, so the ring reader never waits for
//! symbols: it hands each interval over as a [`Batch`] and goes on reading; profiles come
//! back in the order their batches were sent.

use std::{path::PathBuf, sync::mpsc, thread::JoinHandle};

use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::collect::Batch;
use crate::{profile::Profile, symbolize::Resolver};

pub struct SymbolizeWorker {
    jobs: Option<mpsc::Sender<Batch>>,
    done: UnboundedReceiver<Profile>,
    thread: Option<JoinHandle<()>>,
    /// Batches sent whose profiles have not been taken.
    pending: usize,
}

impl SymbolizeWorker {
    /// Starts the thread; `debug_dirs` are searched for debug files before the system's.
    /// `user`: name user frames (else they keep their file offsets). `kernel`: kernel frames
    /// will be sampled, so the kernel's symbols are read now (kallsyms takes 0.15 s here),
    /// while the recording runs, not after it.
    pub fn start(debug_dirs: Vec<PathBuf>, user: bool, kernel: bool) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel::<Batch>();
        let (tx, done) = unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("symbolize".into())
            .spawn(move || {
                let mut resolver = Resolver::new(&debug_dirs);
                resolver.name_user_frames(user);
                lower_priority();
                if kernel {
                    resolver.load_kernel_symbols();
                }
                while let Ok(first) = rx.recv() {
                    let mut queue = vec![first];
                    queue.extend(rx.try_iter());
                    if queue.len() > 1 {
                        Batch::resolve_ahead(&mut queue, &mut resolver);
                    }
                    for batch in queue {
                        if tx.send(batch.symbolize(&mut resolver)).is_err() {
                            return;
                        }
                    }
                }
            })?;
        Ok(Self {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
            pending: 0,
        })
    }

    pub fn submit(&mut self, batch: Batch) {
        if let Some(jobs) = &self.jobs
            && jobs.send(batch).is_ok()
        {
            self.pending += 1;
        }
    }

    /// Whether a profile is still to come.
    pub fn busy(&self) -> bool {
        self.pending > 0
    }

    /// The next finished profile (wait only while [`SymbolizeWorker::busy`]).
    pub async fn next(&mut self) -> Option<Profile> {
        let p = self.done.recv().await;
        if p.is_some() {
            self.pending -= 1;
        }
        p
    }

    /// Sends the last batch and waits for every profile still to come: those of earlier
    /// intervals, then the last one's.
    pub async fn finish(mut self, last: Batch) -> (Vec<Profile>, Option<Profile>) {
        self.submit(last);
        drop(self.jobs.take());
        let mut all = Vec::new();
        while self.busy() {
            match self.next().await {
                Some(p) => all.push(p),
                None => break,
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let last = all.pop();
        (all, last)
    }
}

/// Makes the calling thread yield to the ring reader and the workload (nice 10): its work
/// is done in the background while recording, and has the CPU to itself at the end.
fn lower_priority() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority on this thread's own id (Linux nice values are per thread); a
    // failure leaves the priority as it was, which is harmless.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10) };
}
