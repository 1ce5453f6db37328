//! One destination's task: send the queue's front until it is taken or refused; while the
//! store fails, keep everything on disk and try again with backoff. At the end, keep going
//! until the queue is empty or the flush deadline passes.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::time::Instant;

use super::{Notice, Shared, retry, send::Client};

/// The wait between tries once the run is ending (the flush deadline bounds them).
const CLOSING_RETRY: Duration = Duration::from_millis(250);

/// The end of the run, as the tasks see it: once closed, a task stops when its queue is
/// empty or at the deadline, whichever comes first.
pub struct Closing {
    flush: Duration,
    deadline: Mutex<Option<Instant>>,
    notify: tokio::sync::Notify,
}

impl Closing {
    pub fn new(flush: Duration) -> Self {
        Self {
            flush,
            deadline: Mutex::new(None),
            notify: tokio::sync::Notify::new(),
        }
    }

    pub fn close(&self) {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Instant::now() + self.flush);
        self.notify.notify_waiters();
    }

    fn deadline(&self) -> Option<Instant> {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Completes once `close` was called.
    async fn started(&self) {
        loop {
            let notified = self.notify.notified();
            if self.deadline().is_some() {
                return;
            }
            notified.await;
        }
    }

    /// Completes at the deadline once closed (never before `close`).
    async fn passed(&self) {
        loop {
            let notified = self.notify.notified();
            if let Some(d) = self.deadline() {
                tokio::time::sleep_until(d).await;
                return;
            }
            notified.await;
        }
    }
}

pub async fn run(shared: Arc<Shared>, mut client: Client, closing: Arc<Closing>) {
    let url = client.endpoint().url.clone();
    let mut failures = 0u32;
    loop {
        let wake = shared.wake.notified();
        let front = shared
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .front();
        let item = match front {
            None if closing.deadline().is_some() => return,
            None => {
                tokio::select! {
                    _ = wake => {}
                    _ = closing.passed() => {}
                }
                continue;
            }
            Some(Err(source)) => {
                shared.notify.tell(&Notice::SpoolRead {
                    url: url.clone(),
                    source,
                });
                let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
                q.counts.dropped += 1;
                if let Err(source) = q.pop_front() {
                    shared.notify.tell(&Notice::Spool { url, source });
                    return;
                }
                continue;
            }
            Some(Ok(item)) => item,
        };
        let result = tokio::select! {
            r = client.send(&item) => r,
            _ = closing.passed() => return,
        };
        // The queue's lock is never held across an await.
        let (outcome, wait) = {
            let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            match result {
                Ok((bytes, partial)) => {
                    q.counts.sent += 1;
                    q.counts.bytes_sent += bytes;
                    if let Some(n) = partial {
                        shared.notify.tell(&n);
                    }
                    if q.down {
                        shared.notify.tell(&Notice::Reachable {
                            url: url.clone(),
                            failures,
                        });
                        q.down = false;
                    }
                    failures = 0;
                    (q.pop_front(), None)
                }
                Err(source) if !source.retryable() => {
                    // Permanent: one line for this interval, and on to the next.
                    shared.notify.tell(&Notice::NotAccepted {
                        seq: item.seq,
                        source,
                    });
                    q.counts.dropped += 1;
                    q.counts.rejected += 1;
                    failures = 0;
                    (q.pop_front(), None)
                }
                Err(e) => {
                    failures += 1;
                    let delay = retry::delay(failures, e.retry_after());
                    let mut spilled = Ok(false);
                    if !q.down {
                        q.down = true;
                        spilled = q.spill();
                        shared.notify.tell(&Notice::Retrying {
                            source: e,
                            spooling: *spilled.as_ref().unwrap_or(&false),
                        });
                    }
                    (spilled.map(|_| ()), Some(delay))
                }
            }
        };
        if let Some(delay) = wait {
            if closing.deadline().is_some() {
                // Flushing: the store gets a try every CLOSING_RETRY until the deadline.
                tokio::select! {
                    _ = tokio::time::sleep(delay.min(CLOSING_RETRY)) => {}
                    _ = closing.passed() => return,
                }
            } else {
                // A long backoff is cut short by the end of the run: one more try now.
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = closing.started() => {}
                }
            }
        }
        if let Err(source) = outcome {
            shared.notify.tell(&Notice::Spool { url, source });
            return;
        }
    }
}
