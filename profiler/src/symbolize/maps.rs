//! Snapshots of /proc/PID/maps, so addresses can be resolved after the process is gone.

use std::{fs, io};

pub use crate::modules::MapEntry;
use crate::modules::parse_maps as parse;

/// Executable mappings of one process, sorted by start address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessMaps {
    entries: Vec<MapEntry>,
}

impl ProcessMaps {
    pub fn read(pid: u32) -> io::Result<Self> {
        Ok(Self::parse(&fs::read_to_string(format!(
            "/proc/{pid}/maps"
        ))?))
    }

    /// Parses the maps format (executable mappings only, sorted); malformed lines are
    /// skipped rather than trusted.
    pub fn parse(text: &str) -> Self {
        Self {
            entries: parse(text).into_iter().map(MapEntry::from).collect(),
        }
    }

    /// The executable mappings the kernel reported (sorted by start).
    pub fn from_mappings(maps: &[crate::modules::Mapping]) -> Self {
        let mut entries: Vec<MapEntry> = maps.iter().cloned().map(MapEntry::from).collect();
        entries.sort_by_key(|e| e.start);
        Self { entries }
    }

    pub fn find(&self, addr: u64) -> Option<&MapEntry> {
        let i = self.entries.partition_point(|e| e.start <= addr);
        let e = self.entries.get(i.checked_sub(1)?)?;
        (addr < e.end).then_some(e)
    }

    pub fn entries(&self) -> &[MapEntry] {
        &self.entries
    }

    /// `newer`'s mappings, plus those of `self` that none of them overlaps: a library mapped
    /// since is added, and addresses sampled before an unmap still resolve.
    pub fn merged(&self, newer: &ProcessMaps) -> ProcessMaps {
        let overlaps = |e: &MapEntry| {
            newer
                .entries
                .iter()
                .any(|n| n.start < e.end && e.start < n.end)
        };
        let mut entries = newer.entries.clone();
        entries.extend(self.entries.iter().filter(|e| !overlaps(e)).cloned());
        entries.sort_by_key(|e| e.start);
        ProcessMaps { entries }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0a0e00000-55d0a0e01000 r--p 00000000 fe:01 1234 /work/chain
55d0a0e01000-55d0a0e02000 r-xp 00001000 fe:01 1234 /work/chain
7f00aa000000-7f00aa028000 r--p 00000000 fe:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7f00aa028000-7f00aa1bd000 r-xp 00028000 fe:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7f00ab000000-7f00ab001000 r-xp 00000000 00:00 0 
7ffd1c3f0000-7ffd1c3f2000 r-xp 00000000 00:00 0 [vdso]
7ffd1c400000-7ffd1c401000 r-xp 00000000 fe:01 7 /tmp/my lib.so (deleted)
garbage line
";

    #[test]
    fn keeps_only_executable_mappings_and_finds_addresses() {
        let maps = ProcessMaps::parse(MAPS);
        assert_eq!(maps.entries().len(), 5);
        let e = maps.find(0x55d0a0e01234).unwrap();
        assert_eq!(e.name.as_ref(), "chain");
        assert_eq!(0x55d0a0e01234 - e.start + e.offset, 0x1234);
        assert_eq!(
            maps.find(0x7f00aa028000).unwrap().name.as_ref(),
            "libc.so.6"
        );
        assert_eq!(maps.find(0x7f00ab000010).unwrap().name.as_ref(), "[anon]");
        assert_eq!(maps.find(0x7ffd1c3f0001).unwrap().name.as_ref(), "[vdso]");
        assert!(
            maps.find(0x55d0a0e00010).is_none(),
            "non-executable mapping"
        );
        assert!(maps.find(0x10).is_none());
        assert!(maps.find(u64::MAX).is_none());
    }

    #[test]
    fn merging_adds_new_mappings_and_keeps_unreplaced_old_ones() {
        let old = ProcessMaps::parse(MAPS);
        let newer = ProcessMaps::parse(
            "55d0a0e01000-55d0a0e02000 r-xp 00001000 fe:01 1234 /work/chain\n\
             7f00ac000000-7f00ac001000 r-xp 00001000 fe:01 5 /tmp/plugin.so\n",
        );
        let merged = old.merged(&newer);
        assert_eq!(merged.entries().len(), 6);
        assert_eq!(
            merged.find(0x7f00ac000010).unwrap().name.as_ref(),
            "plugin.so"
        );
        assert_eq!(
            merged.find(0x7f00aa028000).unwrap().name.as_ref(),
            "libc.so.6"
        );
    }

    #[test]
    fn paths_with_spaces_and_deleted_files() {
        let maps = ProcessMaps::parse(MAPS);
        let e = maps.find(0x7ffd1c400000).unwrap();
        assert_eq!(e.path.as_deref(), Some("/tmp/my lib.so"));
        assert_eq!(e.name.as_ref(), "my lib.so");
    }
}
