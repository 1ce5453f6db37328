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
    /// Creates the directory if needed and proves it writable before anything is attached.
    pub fn open(dir: &Path, format: Format) -> Result<Self, OutputError> {
        let err = |source| OutputError {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(err)?;
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
