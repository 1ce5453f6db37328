//! The thread that symbolizes finished intervals, so the ring reader never waits for
//! symbols: it hands each interval over as a [`Normalized`] and goes on reading; profiles come
//! back in the order their batches were sent. Between intervals it names the addresses of
//! new stacks ahead ([`super::prefetch`]), so the end of a run finds them named.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicI32, Ordering},
        mpsc,
    },
    thread::JoinHandle,
};

use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::Warning;
use super::{
    collect::Normalized,
    prefetch::{Budget, Prefetch},
};
use crate::{profile::Profile, symbolize::Symbolizer};

/// A symbolized profile and the warnings naming it gave.
pub(super) type Named = (Profile, Vec<Warning>);

/// What the thread is sent: an interval to symbolize, or addresses to name ahead.
enum Job {
    Interval(Box<Normalized>),
    Prefetch(Prefetch),
}

pub struct SymbolizeWorker {
    jobs: Option<mpsc::Sender<Job>>,
    done: UnboundedReceiver<Named>,
    thread: Option<JoinHandle<()>>,
    /// The thread's id, once it runs (0 before): its priority is raised back at the end.
    tid: Arc<AtomicI32>,
    /// Batches sent whose profiles have not been taken.
    pending: usize,
}

impl SymbolizeWorker {
    /// Starts the thread; `debug_dirs` are searched for debug files before the system's.
    /// `user`: name user frames (else they keep their file offsets). `kernel`: kernel frames
    /// will be sampled, so the kernel's symbols are read now (kallsyms takes 0.15 s here),
    /// while the recording runs, not after it.
    pub fn start(debug_dirs: Vec<PathBuf>, user: bool, kernel: bool) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (tx, done) = unbounded_channel();
        let tid = Arc::new(AtomicI32::new(0));
        let its_tid = tid.clone();
        let thread = std::thread::Builder::new()
            .name("symbolize".into())
            .spawn(move || {
                let mut symbolizer = Symbolizer::new(&debug_dirs);
                symbolizer.name_user_frames(user);
                // SAFETY: gettid has no preconditions.
                let me = unsafe { libc::gettid() };
                its_tid.store(me, Ordering::Relaxed);
                set_nice(me, BACKGROUND_NICE);
                if kernel {
                    let _ = symbolizer.load_kernel_symbols();
                }
                let mut budget = Budget::new();
                while let Ok(first) = rx.recv() {
                    let (mut queue, mut ahead) = (Vec::new(), Vec::new());
                    for job in std::iter::once(first).chain(rx.try_iter()) {
                        match job {
                            Job::Interval(b) => queue.push(*b),
                            Job::Prefetch(p) => ahead.push(p),
                        }
                    }
                    // Batches waiting name everything themselves (naming ahead is only
                    // for the time when there are none).
                    if queue.is_empty() {
                        for p in ahead {
                            budget.resolve(p, &mut symbolizer);
                        }
                    }
                    if queue.len() > 1 {
                        Normalized::resolve_ahead(&mut queue, &mut symbolizer);
                    }
                    for batch in queue {
                        if tx.send(batch.symbolize(&mut symbolizer)).is_err() {
                            return;
                        }
                    }
                }
            })?;
        Ok(Self {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
            tid,
            pending: 0,
        })
    }

    pub fn submit(&mut self, batch: Normalized) {
        if let Some(jobs) = &self.jobs
            && jobs.send(Job::Interval(Box::new(batch))).is_ok()
        {
            self.pending += 1;
        }
    }

    /// Sends addresses to name ahead (nothing comes back: the names are cached there).
    pub fn prefetch(&mut self, p: Prefetch) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(Job::Prefetch(p));
        }
    }

    /// Whether a profile is still to come.
    pub fn busy(&self) -> bool {
        self.pending > 0
    }

    /// The next finished profile (wait only while [`SymbolizeWorker::busy`]).
    pub async fn next(&mut self) -> Option<Named> {
        let p = self.done.recv().await;
        if p.is_some() {
            self.pending -= 1;
        }
        p
    }

    /// Sends the last batch and waits for every profile still to come: those of earlier
    /// intervals, then the last one's.
    pub async fn finish(mut self, last: Normalized) -> (Vec<Named>, Option<Named>) {
        // The profile is awaited now: at the recorder's own priority, not behind a busy
        // host's other work.
        let tid = self.tid.load(Ordering::Relaxed);
        if tid != 0 {
            set_nice(tid, own_nice());
        }
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

/// The symbolizing thread's nice value while recording: it yields to the ring reader and
/// the workload, its work being done in the background.
const BACKGROUND_NICE: i32 = 10;

/// The nice value of the calling thread.
fn own_nice() -> i32 {
    // SAFETY: getpriority of the calling thread (who = 0) has no preconditions; -1 can be a
    // valid value or an error, and both leave a usable nice value.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

/// Sets thread `tid`'s nice value (Linux nice values are per thread). A failure (lowering
/// needs CAP_SYS_NICE or RLIMIT_NICE) leaves the priority as it was, which is harmless.
fn set_nice(tid: libc::pid_t, nice: i32) {
    // SAFETY: setpriority on a thread id of this process; the result is only advisory.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
}
