//! Opening files that other users control, as root, without hanging or being fooled.
//!
//! `record` runs as root and reads files named by its targets: JIT perf maps in a directory
//! anyone can write (`/tmp`), and the ELF files their maps name. Such a path may be a FIFO (an
//! `open(2)` that never returns), a symlink to `/dev/zero` (a read that never ends) or to a
//! file only root may read, a huge sparse file, or swapped between a check and the open. Every
//! such open goes through here: no symlink is followed at the last component (and, inside a
//! target's root, none escapes it), opening never blocks, and the opened file itself (not the
//! path) is checked before a byte is read.

use std::{
    ffi::CString,
    fs::File,
    io::{self, Read},
    os::{
        fd::{AsFd, FromRawFd, OwnedFd},
        unix::{ffi::OsStrExt, fs::MetadataExt},
    },
    path::Path,
};

/// Why a file was not used.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("not found")]
    NotFound,
    #[error("a symbolic link (not followed)")]
    Symlink,
    #[error("a {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("owned by uid {owner}, neither the process's user ({expected}) nor root")]
    Owner { owner: u32, expected: u32 },
    #[error("writable by other users")]
    WritableByOthers,
    #[error("{bytes} bytes, over the {limit}-byte limit")]
    TooLarge { bytes: u64, limit: u64 },
    #[error("device and inode differ from the mapped file's (replaced after it was mapped)")]
    Replaced,
    #[error("reading took over {0} ms")]
    Slow(u64),
    #[error("{call}: {source}")]
    Io {
        call: &'static str,
        #[source]
        source: io::Error,
    },
}

impl Refusal {
    /// Not found is no refusal: most processes have no perf map.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Refusal::NotFound)
    }
}

/// What a file must be to be read.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// Largest size accepted, in bytes.
    pub max_bytes: u64,
    /// The uid that may own the file besides root; `None` accepts any owner.
    pub owner: Option<u32>,
    /// The (device, inode) the file must have, when known (a mapped file).
    pub identity: Option<(u64, u64)>,
}

/// Largest perf map read (a JIT writes a line per compiled function: 64 MiB is far beyond
/// what a real one reaches, and bounds what a hostile one costs).
pub const MAX_PERF_MAP_BYTES: u64 = 64 << 20;

/// Largest ELF file symbolized (the biggest debug builds stay well below).
pub const MAX_ELF_BYTES: u64 = 4 << 30;

/// Opens `path` for reading under `rules`. With `root` (a process's `/proc/PID/root`), the
/// path is resolved inside that root, as the process sees it: a symlink in a container
/// cannot point at the host's files. The last component is never followed, the open never
/// blocks (a FIFO without a writer returns at once), and the opened file is checked.
pub fn open(root: Option<&Path>, path: &Path, rules: &Rules) -> Result<File, Refusal> {
    let fd = match root {
        Some(root) => open_in_root(root, path)?,
        None => open_plain(path)?,
    };
    let file = File::from(fd);
    check(&file, rules)?;
    Ok(file)
}

/// Reads the whole file, at most `limit` bytes (a file that grew past its checked size is
/// cut there, not read on without end).
pub fn read_bounded(file: File, limit: u64) -> Result<Vec<u8>, Refusal> {
    let mut bytes = Vec::new();
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|source| Refusal::Io {
            call: "read",
            source,
        })?;
    Ok(bytes)
}

/// Checks what `file` is: a regular file, owned as `rules` say, not writable by others
/// unless root owns it, no larger than the limit, and the expected file when one is named.
pub fn check(file: &File, rules: &Rules) -> Result<(), Refusal> {
    let meta = file.metadata().map_err(|source| Refusal::Io {
        call: "fstat",
        source,
    })?;
    let kind = meta.mode() & libc::S_IFMT;
    if kind != libc::S_IFREG {
        return Err(Refusal::NotRegular(kind_name(kind)));
    }
    if let Some(expected) = rules.owner
        && meta.uid() != expected
        && meta.uid() != 0
    {
        return Err(Refusal::Owner {
            owner: meta.uid(),
            expected,
        });
    }
    if rules.owner.is_some() && meta.mode() & 0o002 != 0 {
        return Err(Refusal::WritableByOthers);
    }
    if meta.size() > rules.max_bytes {
        return Err(Refusal::TooLarge {
            bytes: meta.size(),
            limit: rules.max_bytes,
        });
    }
    if let Some((dev, ino)) = rules.identity
        && (meta.dev(), meta.ino()) != (dev, ino)
    {
        return Err(Refusal::Replaced);
    }
    Ok(())
}

fn kind_name(kind: u32) -> &'static str {
    match kind {
        libc::S_IFIFO => "FIFO",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        libc::S_IFDIR => "directory",
        libc::S_IFSOCK => "socket",
        libc::S_IFLNK => "symbolic link",
        _ => "special file",
    }
}

const OPEN_FLAGS: i32 =
    libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;

fn c_path(path: &Path) -> Result<CString, Refusal> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Refusal::NotFound)
}

fn open_error(call: &'static str, err: io::Error) -> Refusal {
    match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => Refusal::NotFound,
        // O_NOFOLLOW on a symlink.
        Some(libc::ELOOP) => Refusal::Symlink,
        _ => Refusal::Io { call, source: err },
    }
}

fn open_plain(path: &Path) -> Result<OwnedFd, Refusal> {
    let c = c_path(path)?;
    // SAFETY: a NUL-terminated path and plain flags; the fd returned is ours alone.
    let fd = unsafe { libc::open(c.as_ptr(), OPEN_FLAGS) };
    if fd < 0 {
        return Err(open_error("open", io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// openat2(2) relative to `root` with RESOLVE_IN_ROOT (absolute symlinks and `..` stay inside
/// it) and RESOLVE_NO_MAGICLINKS (no /proc/*/fd jumps out of it). Kernels before 5.6 lack
/// openat2: the path is then opened as `root/path`, the last component still not followed.
fn open_in_root(root: &Path, path: &Path) -> Result<OwnedFd, Refusal> {
    let dir = File::open(root).map_err(|e| open_error("open", e))?;
    let relative = path.strip_prefix("/").unwrap_or(path);
    let c = c_path(relative)?;
    let resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    match profiler_core::kernel::linux().openat2(dir.as_fd(), &c, OPEN_FLAGS as u64, resolve) {
        Ok(fd) => Ok(fd),
        Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => open_plain(&root.join(relative)),
        Err(err) => Err(open_error("openat2", err)),
    }
}

/// The effective uid of process `pid` (from /proc/PID/status), while it lives.
pub fn process_uid(pid: u32) -> Option<u32> {
    let status = profiler_core::host::TaskStatus::read(pid).ok()?;
    status.field("Uid")?.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn any() -> Rules {
        Rules {
            max_bytes: 1 << 20,
            owner: None,
            identity: None,
        }
    }

    #[test]
    fn refuses_what_is_not_a_plain_small_file() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        assert!(matches!(
            open(None, &fifo, &any()),
            Err(Refusal::NotRegular("FIFO"))
        ));
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(open(None, &link, &any()), Err(Refusal::Symlink)));
        assert!(matches!(
            open(None, Path::new("/dev/zero"), &any()),
            Err(Refusal::NotRegular("character device"))
        ));
        let big = dir.path().join("big");
        File::create(&big).unwrap().set_len(2 << 20).unwrap();
        assert!(matches!(
            open(None, &big, &any()),
            Err(Refusal::TooLarge { .. })
        ));
        assert!(matches!(
            open(None, &dir.path().join("none"), &any()),
            Err(Refusal::NotFound)
        ));
    }

    #[test]
    fn owner_and_mode_and_identity_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("map");
        std::fs::write(&f, "1000 10 x\n").unwrap();
        let me = process_uid(std::process::id()).unwrap();
        let mine = Rules {
            owner: Some(me),
            ..any()
        };
        assert!(open(None, &f, &mine).is_ok());
        if me == 0 {
            // Root owns it: any expected owner accepts it.
            let other = Rules {
                owner: Some(4242),
                ..any()
            };
            assert!(open(None, &f, &other).is_ok());
        }
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            open(None, &f, &mine),
            Err(Refusal::WritableByOthers)
        ));
        let meta = std::fs::metadata(&f).unwrap();
        let same = Rules {
            identity: Some((meta.dev(), meta.ino())),
            ..any()
        };
        assert!(open(None, &f, &same).is_ok());
        let other = Rules {
            identity: Some((meta.dev(), meta.ino() + 1)),
            ..any()
        };
        assert!(matches!(open(None, &f, &other), Err(Refusal::Replaced)));
    }

    #[test]
    fn symlinks_resolve_inside_the_root() {
        // A "container root" whose tmp/map links to an absolute path: resolved inside the
        // root, it names root/etc/secret, never the host's /etc.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/hostname"), "inside\n").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("tmp/etc")).unwrap();
        let f = open(Some(root), Path::new("/tmp/etc/hostname"), &any()).unwrap();
        assert_eq!(read_bounded(f, 100).unwrap(), b"inside\n");
        std::os::unix::fs::symlink("/etc/hostname", root.join("tmp/last")).unwrap();
        assert!(matches!(
            open(Some(root), Path::new("/tmp/last"), &any()),
            Err(Refusal::Symlink)
        ));
    }

    #[test]
    fn reads_stop_at_the_limit() {
        let f = File::open("/dev/zero").unwrap();
        assert_eq!(read_bounded(f, 4096).unwrap().len(), 4096);
    }
}
