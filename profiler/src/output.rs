//! Output files written atomically: a temporary file beside the target, renamed into place
//! only once complete. Creating it up front proves the path is writable before anything is
//! attached; dropping it unfinished removes it, so no partial file is ever left behind.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, BufWriter, Write},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct OutputError {
    pub path: PathBuf,
    pub source: io::Error,
}

pub struct AtomicFile {
    target: PathBuf,
    tmp: PathBuf,
    file: Option<BufWriter<File>>,
}

impl AtomicFile {
    pub fn create(target: &Path) -> Result<Self, OutputError> {
        let err = |source| OutputError {
            path: target.to_path_buf(),
            source,
        };
        let name = target.file_name().ok_or_else(|| {
            err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a file name",
            ))
        })?;
        if target.is_dir() {
            return Err(err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory",
            )));
        }
        let dir = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let tmp = dir.join(format!(
            ".{}.{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        // create_new + O_NOFOLLOW: never write through a symlink planted at the temp name.
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o644)
            .open(&tmp)
            .map_err(err)?;
        Ok(Self {
            target: target.to_path_buf(),
            tmp,
            file: Some(BufWriter::new(file)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.target
    }

    /// Flushes, syncs and renames into place. rename(2) replaces a symlink at the target
    /// rather than following it.
    pub fn commit(mut self) -> Result<(), OutputError> {
        let err = |source| OutputError {
            path: self.target.clone(),
            source,
        };
        let file = self.file.take().expect("committed once");
        let file = file.into_inner().map_err(|e| err(e.into_error()))?;
        file.sync_all().map_err(err)?;
        fs::rename(&self.tmp, &self.target).map_err(err)
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.as_mut().expect("open until commit").write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.as_mut().expect("open until commit").flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("profiler-output-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn commit_renames_and_drop_cleans_up() {
        let d = scratch("commit");
        let target = d.join("out.folded");
        let mut f = AtomicFile::create(&target).unwrap();
        f.write_all(b"a 1\n").unwrap();
        assert!(!target.exists(), "nothing visible before commit");
        f.commit().unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "a 1\n");

        let other = d.join("aborted.folded");
        drop(AtomicFile::create(&other).unwrap());
        assert_eq!(
            fs::read_dir(&d).unwrap().count(),
            1,
            "aborted write leaves nothing"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn unwritable_paths_fail_up_front() {
        assert!(AtomicFile::create(Path::new("/nonexistent-dir/x")).is_err());
        let d = scratch("dir");
        assert!(AtomicFile::create(&d).is_err());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn symlink_at_target_is_replaced_not_followed() {
        let d = scratch("symlink");
        let victim = d.join("victim");
        fs::write(&victim, "keep").unwrap();
        let target = d.join("out");
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        let mut f = AtomicFile::create(&target).unwrap();
        f.write_all(b"new").unwrap();
        f.commit().unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(fs::read_to_string(&target).unwrap(), "new");
        fs::remove_dir_all(&d).unwrap();
    }
}
