//! Continuous mode's output: one profile file per interval in a directory, each written to a
//! temp file and renamed into place, so a shipper watching the directory never sees half a
//! file.

use std::{
    io,
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use super::{Notice, Outgoing, Sink, SinkError};
use crate::{
    output::{AtomicFile, OutputError},
    profile::{Format, pprof},
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
    /// series writes the interval's pprof message, the one the exporters send.
    fn write(&mut self, interval: &Outgoing<'_>) -> Result<PathBuf, OutputError> {
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
        match self.format {
            Format::Pprof => pprof::write_message(interval.pprof(), &mut file),
            f => f.write(interval.profile, "profiler interval", &mut file),
        }
        .map_err(err)?;
        file.commit()?;
        Ok(path)
    }

    fn written(path: PathBuf, interval: &Outgoing<'_>) -> Notice<'static> {
        Notice::Interval {
            path,
            samples: interval.profile.info.samples,
            lost: interval.profile.info.lost,
        }
    }
}

impl Sink for Series {
    fn interval(
        &mut self,
        interval: &Outgoing<'_>,
        tell: &mut dyn FnMut(&Notice<'_>),
    ) -> Result<(), SinkError> {
        let path = self.write(interval)?;
        tell(&Self::written(path, interval));
        Ok(())
    }

    /// The last, partial interval is one more file.
    fn finish(
        mut self: Box<Self>,
        last: &Outgoing<'_>,
        tell: &mut dyn FnMut(&Notice<'_>),
    ) -> Result<(), SinkError> {
        self.interval(last, tell)
    }
}
