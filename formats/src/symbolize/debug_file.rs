//! Separate debug information found by build id: `DIR/.build-id/xx/yyyy.debug` under each
//! debug directory, as distributions install it (`-dbgsym`, `-debuginfo` packages).
//! (`.gnu_debuglink` names and MiniDebugInfo are followed by blazesym itself.)

use std::{
    fs::File,
    path::{Path, PathBuf},
};

use object::{Object, ObjectSegment, ReadCache};

use crate::ReadAt;

/// What ties an ELF file to its debug file: its build id, and its load segments to turn
/// file offsets into the virtual addresses both files share.
pub struct Identity {
    pub build_id: Option<Vec<u8>>,
    /// (file offset, virtual address, size in the file) of each load segment.
    segments: Vec<(u64, u64, u64)>,
}

impl Identity {
    pub fn read(file: &File) -> Option<Self> {
        let cache = ReadCache::new(ReadAt::new(file));
        let elf = object::File::parse(&cache).ok()?;
        Some(Self {
            build_id: elf.build_id().ok().flatten().map(<[u8]>::to_vec),
            segments: elf
                .segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (offset, s.address(), size)
                })
                .collect(),
        })
    }

    /// The load segment holding file offset `offset`: (file offset, virtual address, size).
    pub fn segment(&self, offset: u64) -> Option<(u64, u64, u64)> {
        self.segments
            .iter()
            .copied()
            .find(|&(o, _, size)| offset >= o && offset < o + size)
    }

    /// The virtual address of file offset `offset`, if a load segment holds it.
    pub fn vaddr(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(o, _, size)| offset >= o && offset < o + size)
            .map(|&(o, vaddr, _)| vaddr + (offset - o))
    }
}

/// The debug file of build id `id` under the first of `dirs` that has one.
pub fn by_build_id(dirs: &[PathBuf], id: &[u8]) -> Option<PathBuf> {
    if id.len() < 2 {
        return None;
    }
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    dirs.iter()
        .map(|d| {
            d.join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..]))
        })
        .find(|p| is_regular(p))
}

fn is_regular(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
        || std::fs::metadata(p).is_ok_and(|m| m.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_executable_has_a_build_id_and_its_code_an_address() {
        let exe = File::open("/proc/self/exe").unwrap();
        let id = Identity::read(&exe).expect("ELF");
        assert!(id.build_id.as_ref().is_some_and(|b| b.len() >= 8));
        assert!(id.segments.iter().any(|&(o, v, _)| id.vaddr(o) == Some(v)));
        let dir = std::env::temp_dir().join(format!("bid-{}", std::process::id()));
        let b = id.build_id.unwrap();
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        let sub = dir.join(".build-id").join(&hex[..2]);
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(by_build_id(std::slice::from_ref(&dir), &b), None);
        std::fs::write(sub.join(format!("{}.debug", &hex[2..])), b"x").unwrap();
        assert!(by_build_id(&[PathBuf::from("/nonexistent"), dir.clone()], &b).is_some());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
