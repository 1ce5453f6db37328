//! `on_overflow`: a thread of its own calls a handler for each overflow of a set, waiting for
//! the engine's ring buffer in poll(2).

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use super::{error::CpcError, handle::Cpc, overflow::Overflow, set::Set};

/// A thread calling a handler for each overflow of a set; stops (and joins) on drop.
pub struct OverflowHandler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for OverflowHandler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Cpc {
    /// Calls `handler` for each overflow of `set`, on a thread of its own, until the returned
    /// value is dropped.
    pub fn on_overflow(
        &self,
        set: &Set,
        mut handler: impl FnMut(Overflow) + Send + 'static,
    ) -> Result<OverflowHandler, CpcError> {
        const F: &str = "cpc_on_overflow";
        let binding = self.engine_binding(F, set)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let taken = {
                let mut guard = binding.lock();
                match guard.as_mut().and_then(|l| l.engine.as_mut()) {
                    Some(e) => e
                        .program
                        .take_records()
                        .map_err(|e| CpcError::new(F, libc::EINVAL, e.to_string())),
                    None => Err(CpcError::new(
                        F,
                        libc::EINVAL,
                        "set has no notifying request",
                    )),
                }
            };
            let mut records = match taken {
                Ok(r) => {
                    let _ = ready_tx.send(Ok(()));
                    r
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            while !flag.load(Ordering::SeqCst) {
                records.next_batch(std::time::Duration::from_millis(20), |r| handler(r.into()));
            }
            records.drain(|r| handler(r.into()));
        });
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(OverflowHandler {
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(CpcError::new(F, libc::EIO, "overflow handler thread died")),
        }
    }
}
