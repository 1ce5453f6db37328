//! Output files written atomically: a temporary file beside the target, renamed into place
//! only once complete. Creating it up front proves the path is writable before anything is
//! attached; dropping it unfinished removes it, so no partial file is ever left behind.
//!
//! The temporary file has a random name and is created with `O_CREAT | O_EXCL` (tempfile),
//! so a symlink planted in the output directory is never followed, whatever its name, and
//! rename(2) replaces a symlink at the target instead of writing through it. Under sudo, files
//! are handed to the invoking user (`SUDO_UID`, `SUDO_GID`), as a user would expect of a
//! file their command wrote.

use std::{
    fs::{File, OpenOptions},
    io::{self, BufWriter, Write},
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use nix::unistd::{Gid, Uid, fchown};
use tempfile::NamedTempFile;

#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct OutputError {
    pub path: PathBuf,
    pub source: io::Error,
}

pub struct AtomicFile {
    target: PathBuf,
    file: Option<BufWriter<NamedTempFile>>,
    /// Where a file already at the target is moved when this one is committed.
    previous: Option<PathBuf>,
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
        let mut prefix = std::ffi::OsString::from(".");
        prefix.push(name);
        prefix.push(".");
        let file = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .permissions(std::fs::Permissions::from_mode(0o644))
            .tempfile_in(dir)
            .map_err(err)?;
        give_to_sudo_user(file.as_file()).map_err(err)?;
        Ok(Self {
            target: target.to_path_buf(),
            file: Some(BufWriter::new(file)),
            previous: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.target
    }

    /// At commit, a regular file already at the target is renamed to `old` first (as perf
    /// keeps `perf.data.old`), replacing any `old` there.
    pub fn keep_previous_as(&mut self, old: PathBuf) {
        self.previous = Some(old);
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
        file.as_file().sync_all().map_err(err)?;
        if let Some(old) = &self.previous
            && std::fs::symlink_metadata(&self.target).is_ok_and(|m| m.is_file())
        {
            std::fs::rename(&self.target, old).map_err(|source| OutputError {
                path: old.clone(),
                source,
            })?;
        }
        file.persist(&self.target).map_err(|e| err(e.error))?;
        Ok(())
    }
}

/// `-o -`: standard output.
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Where a profile goes: a file written atomically, or standard output for `-o -`. A
/// reader that goes away (`| head`) ends the output quietly, as for any Unix filter.
pub enum Output {
    File(AtomicFile),
    Stdout {
        out: BufWriter<io::Stdout>,
        closed: bool,
    },
}

impl Output {
    /// Standard output for `-`, else an [`AtomicFile`] (created now, so an unwritable
    /// path fails before anything runs).
    pub fn create(path: &Path) -> Result<Output, OutputError> {
        if is_stdout(path) {
            return Ok(Output::Stdout {
                out: BufWriter::new(io::stdout()),
                closed: false,
            });
        }
        AtomicFile::create(path).map(Output::File)
    }

    /// How messages name it: the file's path, or "standard output".
    pub fn name(&self) -> String {
        match self {
            Output::File(f) => f.path().display().to_string(),
            Output::Stdout { .. } => "standard output".into(),
        }
    }

    pub fn is_stdout(&self) -> bool {
        matches!(self, Output::Stdout { .. })
    }

    /// Renames the file into place, or flushes standard output.
    pub fn commit(self) -> Result<(), OutputError> {
        match self {
            Output::File(f) => f.commit(),
            Output::Stdout { mut out, .. } => match out.flush() {
                Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(OutputError {
                    path: PathBuf::from("-"),
                    source: e,
                }),
                _ => Ok(()),
            },
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Output::File(f) => f.write(buf),
            Output::Stdout { closed: true, .. } => Ok(buf.len()),
            Output::Stdout { out, closed } => match out.write(buf) {
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                    *closed = true;
                    Ok(buf.len())
                }
                other => other,
            },
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Output::File(f) => f.flush(),
            Output::Stdout { closed: true, .. } => Ok(()),
            Output::Stdout { out, closed } => match out.flush() {
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                    *closed = true;
                    Ok(())
                }
                other => other,
            },
        }
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

/// A file written while the run goes on (cputrack's `-o`, line by line), so not atomic, but
/// never opened through a symlink (`O_NOFOLLOW`) and, under sudo, the invoking user's.
pub fn create_streaming(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a symbolic link (not followed; remove it or name another file)",
            ),
            _ => e,
        })?;
    give_to_sudo_user(&file)?;
    Ok(file)
}

/// The user who ran `sudo profiler ..`: `SUDO_UID`/`SUDO_GID` when we are root.
pub fn sudo_user() -> Option<(Uid, Gid)> {
    if !Uid::effective().is_root() {
        return None;
    }
    let id = |var| std::env::var(var).ok()?.parse::<u32>().ok();
    Some((
        Uid::from_raw(id("SUDO_UID")?),
        Gid::from_raw(id("SUDO_GID")?),
    ))
}

fn give_to_sudo_user(file: &File) -> io::Result<()> {
    match sudo_user() {
        Some((uid, gid)) => fchown(file, Some(uid), Some(gid)).map_err(io::Error::from),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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
    fn the_previous_file_is_kept_as_old() {
        let d = scratch("previous");
        let target = d.join("profile.pb.gz");
        let old = d.join("profile.pb.gz.old");
        for (i, text) in ["first", "second", "third"].into_iter().enumerate() {
            let mut f = AtomicFile::create(&target).unwrap();
            f.keep_previous_as(old.clone());
            f.write_all(text.as_bytes()).unwrap();
            f.commit().unwrap();
            assert_eq!(fs::read_to_string(&target).unwrap(), text);
            let before = ["", "first", "second"][i];
            assert_eq!(fs::read_to_string(&old).unwrap_or_default(), before);
        }
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
    fn planted_symlinks_are_never_followed() {
        let d = scratch("planted");
        let victim = d.join("victim");
        fs::write(&victim, "keep").unwrap();
        // Links at every name the old scheme (`.NAME.PID.tmp`) would have used, and more.
        for name in [
            format!(".out.{}.tmp", std::process::id()),
            ".out..tmp".into(),
        ] {
            std::os::unix::fs::symlink(&victim, d.join(name)).unwrap();
        }
        let target = d.join("out");
        let mut f = AtomicFile::create(&target).unwrap();
        f.write_all(b"new").unwrap();
        f.commit().unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(fs::read_to_string(&target).unwrap(), "new");
        // A streaming file refuses a symlink outright.
        let link = d.join("rows");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = create_streaming(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
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
