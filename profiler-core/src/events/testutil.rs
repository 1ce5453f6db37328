//! Fake sysfs and tracefs trees in temporary directories, for tests without privileges.

use std::{
    fs,
    path::{Path, PathBuf},
    sync::atomic::{AtomicUsize, Ordering},
};

/// A directory under the system temp dir, removed on drop.
pub(crate) struct FakeTree {
    root: PathBuf,
}

impl FakeTree {
    pub(crate) fn new(tag: &str) -> FakeTree {
        // Unique per process and per call: tests run in parallel threads.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root =
            std::env::temp_dir().join(format!("cpc-events-{}-{n}-{tag}", std::process::id()));
        // A stale tree from a crashed run with the same pid would corrupt this one.
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).expect("create fake tree");
        FakeTree { root }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.root
    }

    /// Writes `contents` at `relative`, creating parent directories.
    pub(crate) fn write(&self, relative: &str, contents: &str) {
        let path = self.root.join(relative);
        fs::create_dir_all(path.parent().expect("relative path has a parent"))
            .expect("create parent");
        fs::write(&path, contents).expect("write fake file");
    }

    /// Creates an empty directory at `relative`.
    pub(crate) fn mkdir(&self, relative: &str) {
        fs::create_dir_all(self.root.join(relative)).expect("create dir");
    }
}

impl Drop for FakeTree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}
