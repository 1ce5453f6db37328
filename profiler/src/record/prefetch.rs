//! Naming ahead: while recording, the addresses of stacks seen for the first time are sent
//! to the symbolizing thread now and then, so that when the run ends nearly every name is
//! already known and the profile is written at once (not after parsing every file's debug
//! information). Only an optimisation: a prefetch may be dropped at any point, the batch at
//! the end names whatever is still unnamed.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::symbolize::{ElfFile, FileId, Normalizer, Symbolizer, UserFrame};

/// Addresses noted between two prefetches beyond this are left to the end (a host-wide
/// recording's first seconds).
const MAX_FRESH: usize = 1 << 16;
/// Naming ahead may take this much of the symbolizing thread's time, plus [`FREE`]: it is
/// work the end would do anyway, but a recording whose stacks never settle must not pay for
/// parsing each file again and again.
const SHARE: u32 = 20;
const FREE: Duration = Duration::from_millis(250);
/// About how fast a file is read for names (a release build reads libc's debug file, 6 MiB,
/// in 30 ms): a file is named ahead only if it can be read within the budget left, so one
/// big file (a debug build's 100 MiB) does not take the thread for seconds and then have to
/// be read again at the end for the addresses seen since.
const READ_BYTES_PER_SEC: f64 = 100e6;

/// Addresses of the stacks first seen since the last prefetch.
#[derive(Default)]
pub struct Fresh {
    user: Vec<(FileId, u64)>,
    kernel: Vec<u64>,
}

impl Fresh {
    /// Notes a new stack's addresses: `kernel` as they will be looked up, `user` as
    /// normalized.
    pub fn note(&mut self, kernel: impl Iterator<Item = u64>, user: &[UserFrame]) {
        if self.user.len() + self.kernel.len() > MAX_FRESH {
            return;
        }
        self.kernel.extend(kernel);
        self.user.extend(user.iter().filter_map(UserFrame::in_file));
    }

    /// What was noted, with the files it is in, as a job for the symbolizing thread.
    pub fn take(&mut self, normalizer: &Normalizer) -> Option<Prefetch> {
        if self.user.is_empty() && self.kernel.is_empty() {
            return None;
        }
        let mut user = std::mem::take(&mut self.user);
        let mut kernel = std::mem::take(&mut self.kernel);
        user.sort_unstable();
        user.dedup();
        kernel.sort_unstable();
        kernel.dedup();
        let mut ids: Vec<FileId> = user.iter().map(|&(f, _)| f).collect();
        ids.dedup();
        Some(Prefetch {
            files: normalizer.open_files(ids),
            user,
            kernel,
        })
    }
}

/// Addresses to name ahead, with the (shared) files their offsets are in.
pub struct Prefetch {
    files: HashMap<FileId, ElfFile>,
    user: Vec<(FileId, u64)>,
    kernel: Vec<u64>,
}

/// The symbolizing thread's account of its time spent naming ahead.
pub struct Budget {
    started: Instant,
    spent: Duration,
}

impl Budget {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            spent: Duration::ZERO,
        }
    }

    /// Names what `p` holds into `symbolizer`'s caches; kernel addresses always (their
    /// symbols are in memory), files only while within the budget.
    pub fn resolve(&mut self, p: Prefetch, symbolizer: &mut Symbolizer) {
        symbolizer.resolve_kernel(p.kernel);
        let left = (FREE + self.started.elapsed() / SHARE).saturating_sub(self.spent);
        let max_bytes = (left.as_secs_f64() * READ_BYTES_PER_SEC) as u64;
        if max_bytes == 0 {
            return;
        }
        let t = Instant::now();
        symbolizer.prefetch_user(&p.files, p.user, max_bytes);
        self.spent += t.elapsed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_new_address_is_sent_once_per_prefetch() {
        let mut fresh = Fresh::default();
        let at = |file, offset| UserFrame::File { file, offset };
        fresh.note(
            [0xffff_ffff_8100_0010].into_iter(),
            &[at(1, 0x20), at(0, 0x10)],
        );
        fresh.note(
            [0xffff_ffff_8100_0010, 0xffff_ffff_8100_0000].into_iter(),
            &[at(1, 0x20), UserFrame::Named(std::sync::Arc::from([]))],
        );
        let normalizer = Normalizer::new();
        let p = fresh.take(&normalizer).expect("something to name");
        assert_eq!(p.user, [(0, 0x10), (1, 0x20)]);
        assert_eq!(p.kernel, [0xffff_ffff_8100_0000, 0xffff_ffff_8100_0010]);
        // Files never opened here are not in the job (the batch at the end has them).
        assert!(p.files.is_empty());
        assert!(fresh.take(&normalizer).is_none(), "nothing new since");
    }
}
