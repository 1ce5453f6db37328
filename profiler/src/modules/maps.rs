//! The executable mappings of a process, with what identifies their files.

use std::{fs, io, sync::Arc};

/// One executable mapping from /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// Device (as `st_dev` encodes it) and inode; 0 for anonymous memory.
    pub dev: u64,
    pub ino: u64,
    /// The path, or the kernel's label (`[vdso]`), or empty for anonymous memory.
    pub name: Arc<str>,
}

impl Mapping {
    /// (device, inode) of a file mapping.
    pub fn inode(&self) -> Option<(u64, u64)> {
        (self.ino != 0).then_some((self.dev, self.ino))
    }

    pub fn is_vdso(&self) -> bool {
        &*self.name == "[vdso]"
    }

    /// Whether a module can back it: a file, or the vDSO (not anonymous or JIT memory).
    pub fn has_module(&self) -> bool {
        self.ino != 0 || self.is_vdso()
    }
}

/// One mapping of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// Backing file, if the mapping has one.
    pub path: Option<Arc<str>>,
    /// Short name: the file name, or the kernel's label (`[vdso]`, `[heap]`), or `[anon]`.
    pub name: Arc<str>,
    /// Device (as `st_dev` encodes it) and inode of the backing file: what a file opened
    /// later must still be to be read for this mapping.
    pub dev: u64,
    pub inode: u64,
}

/// The symbolizer's and file table's view of one executable mapping.
impl From<Mapping> for MapEntry {
    fn from(m: Mapping) -> MapEntry {
        let (path, name): (Option<Arc<str>>, Arc<str>) = if m.name.starts_with('/') {
            let name = m.name.rsplit('/').next().unwrap_or(&m.name);
            (Some(m.name.clone()), Arc::from(name))
        } else if m.name.is_empty() {
            (None, Arc::from("[anon]"))
        } else {
            (None, m.name.clone())
        };
        MapEntry {
            start: m.start,
            end: m.end,
            offset: m.offset,
            path,
            name,
            dev: m.dev,
            inode: m.ino,
        }
    }
}

/// The executable mappings of `pid`, sorted by start.
pub fn exec_mappings(pid: u32) -> io::Result<Vec<Mapping>> {
    Ok(parse(&fs::read_to_string(format!("/proc/{pid}/maps"))?))
}

/// Parses the maps format; malformed lines are skipped.
pub fn parse(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = text.lines().filter_map(parse_line).collect();
    out.sort_by_key(|m| m.start);
    out
}

fn parse_line(line: &str) -> Option<Mapping> {
    let (mapping, perms) = parse_any_line(line)?;
    (perms.as_bytes().get(2) == Some(&b'x')).then_some(mapping)
}

/// One line of the maps format, whatever its permissions, and those permissions
/// (`r-xp`, `r--s`, ...).
pub fn parse_any_line(line: &str) -> Option<(Mapping, &str)> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let ino = fields.next()?;
    let name = fields.next().unwrap_or("").trim_start();
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let (start, end) = (hex(start)?, hex(end)?);
    if end <= start {
        return None;
    }
    let name = name.strip_suffix(" (deleted)").unwrap_or(name);
    let mapping = Mapping {
        start,
        end,
        offset: hex(offset)?,
        dev: libc::makedev(
            u32::try_from(hex(major)?).ok()?,
            u32::try_from(hex(minor)?).ok()?,
        ),
        ino: ino.parse().ok()?,
        name: Arc::from(name),
    };
    Some((mapping, perms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exec_lines_with_identity() {
        let text = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 1234  /usr/bin/x
55d0c0001000-55d0c0005000 r-xp 00001000 08:01 1234  /usr/bin/x
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 
7ffd1000a000-7ffd1000c000 r-xp 00000000 00:00 0  [vdso]
7f0000002000-7f0000003000 r-xp 00000000 fd:02 99  /tmp/lib with space.so (deleted)
";
        let maps = parse(text);
        assert_eq!(maps.len(), 4);
        assert_eq!(maps[0].offset, 0x1000);
        assert_eq!(maps[0].inode(), Some((libc::makedev(8, 1), 1234)));
        assert_eq!(&*maps[0].name, "/usr/bin/x");
        assert!(!maps[1].has_module());
        assert_eq!(&*maps[2].name, "/tmp/lib with space.so");
        assert!(maps[3].is_vdso() && maps[3].has_module());
    }
}
