//! Continuous mode's output: one profile file per interval in a directory, each written to a
//! temp file and renamed into place, so a shipper watching the directory never sees half a
//! file.

use std::{
    io,
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use crate::{
    output::{AtomicFile, OutputError},
    profile::{Format, Profile},
};

pub struct Series {
    dir: PathBuf,
    format: Format,
    seq: u32,
}

impl Series {
    /// Proves the directory exists and is writable before anything is attached. A missing
    /// one is refused, not made: a mistyped path would otherwise fill a new tree unseen.
    pub fn open(dir: &Path, format: Format) -> Result<Self, OutputError> {
        let err = |source| OutputError {
            path: dir.to_path_buf(),
            source,
        };
        if !dir.exists() {
            return Err(err(io::Error::new(
                io::ErrorKind::NotFound,
                "no such directory (--interval writes one file per interval into an \
                 existing directory; create it first)",
            )));
        }
        if !dir.is_dir() {
            return Err(err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory (--interval writes one file per interval into a directory)",
            )));
        }
        // Creating and dropping an AtomicFile leaves nothing behind.
        drop(AtomicFile::create(&dir.join("probe"))?);
        Ok(Self {
            dir: dir.to_path_buf(),
            format,
            seq: 0,
        })
    }

    /// True for an `-o` that names a file rather than a directory (`-`, or a profile
    /// format's extension) and is not an existing directory.
    pub fn looks_like_a_file(path: &Path) -> bool {
        if path.is_dir() {
            return false;
        }
        crate::output::is_stdout(path)
            || path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
                matches!(
                    e,
                    "gz" | "pb" | "pprof" | "svg" | "folded" | "collapsed" | "txt" | "json"
                )
            })
    }

    /// Writes the next interval's file: `profile-<unix seconds>-<sequence>.<ext>`; a pprof
    /// series takes the profile's pprof `message` when it is already made (the exporter's),
    /// so it is not encoded twice.
    pub fn write_encoded(
        &mut self,
        profile: &Profile,
        message: Option<&crate::profile::pprof::proto::Profile>,
    ) -> Result<PathBuf, OutputError> {
        self.seq += 1;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let path = self.dir.join(format!(
            "profile-{now}-{:06}.{}",
            self.seq,
            self.format.extension()
        ));
        let mut file = AtomicFile::create(&path)?;
        let err = |source| OutputError {
            path: path.clone(),
            source,
        };
        match (self.format, message) {
            (Format::Pprof, Some(m)) => crate::profile::pprof::write_message(m, &mut file),
            _ => self.format.write(profile, "profiler interval", &mut file),
        }
        .map_err(err)?;
        file.commit()?;
        eprintln!(
            "profiler: wrote {} ({} samples, {} lost)",
            path.display(),
            profile.info.samples,
            profile.info.lost
        );
        Ok(path)
    }
}
