//! Keeping the overflow signal's handler path deadlock-free. libcpc lets a SIGEMT handler
//! call `cpc_set_restart` and `cpc_request_preset`; both take locks this module's users also
//! take from ordinary code. A handler interrupting its own thread inside such a section would
//! wait forever for a lock its thread holds, so those sections block the overflow signal:
//! it stays pending until the lock is released, and the handler then runs lock-free of us.

use std::ops::{Deref, DerefMut};

/// Blocks one signal on the calling thread until dropped (then restores the old mask).
pub(crate) struct SignalBlock {
    old: Option<libc::sigset_t>,
}

impl SignalBlock {
    /// Blocks `signal` (nothing for `None`).
    #[inline]
    pub fn new(signal: Option<i32>) -> Self {
        let Some(sig) = signal else {
            return Self { old: None };
        };
        // SAFETY: sigset_t is plain data; sigemptyset/sigaddset/pthread_sigmask only write
        // the sets we pass, and an invalid signal number makes them fail, leaving the mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            if libc::sigaddset(&mut set, sig) != 0
                || libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) != 0
            {
                return Self { old: None };
            }
            Self { old: Some(old) }
        }
    }
}

impl Drop for SignalBlock {
    fn drop(&mut self) {
        if let Some(old) = self.old.take() {
            // SAFETY: restores the mask saved by `new` on this same thread.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        }
    }
}

/// A lock guard held with the overflow signal blocked. Fields drop in order: the lock is
/// released before the signal is unblocked, so a pending handler finds it free.
pub(crate) struct Blocked<G> {
    guard: G,
    _block: SignalBlock,
}

impl<G> Blocked<G> {
    /// Blocks `signal`, then takes the lock with `lock`.
    #[inline]
    pub fn lock(signal: Option<i32>, lock: impl FnOnce() -> G) -> Self {
        let block = SignalBlock::new(signal);
        Self {
            guard: lock(),
            _block: block,
        }
    }
}

impl<G: Deref> Deref for Blocked<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: DerefMut> DerefMut for Blocked<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

/// The signal a handle or binding notifies with, stored lock-free (0 is none), so the
/// handler path never needs a lock to learn it.
pub(crate) fn signal_of(raw: i32) -> Option<i32> {
    (raw != 0).then_some(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(sig: i32) -> bool {
        // SAFETY: reads this thread's mask into a local set.
        unsafe {
            let mut cur: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur);
            libc::sigismember(&cur, sig) == 1
        }
    }

    #[test]
    fn blocks_while_held_and_restores() {
        let sig = libc::SIGRTMIN() + 5;
        assert!(!blocked(sig));
        let m = std::sync::Mutex::new(1);
        {
            let g = Blocked::lock(Some(sig), || m.lock().unwrap());
            assert_eq!(*g, 1);
            assert!(blocked(sig), "blocked while the lock is held");
        }
        assert!(!blocked(sig), "unblocked after");
        let _none = SignalBlock::new(None);
        assert!(!blocked(sig));
    }
}
