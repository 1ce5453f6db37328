//! Separate debug information found by build id: `DIR/.build-id/xx/yyyy.debug` under each
//! debug directory, as distributions install it (`-dbgsym`, `-debuginfo` packages).
//! (`.gnu_debuglink` names and MiniDebugInfo are followed by blazesym itself.)

use std::{
    collections::HashMap,
    fs::File,
    path::{Path, PathBuf},
};

use object::{Object, ObjectSection, ObjectSegment, ReadCache};

use crate::ReadAt;

/// What ties an ELF file to its debug file: its build id, and its load segments to turn
/// file offsets into the virtual addresses both files share.
pub struct Identity {
    pub build_id: Option<Vec<u8>>,
    /// The Go linker's build id (`.note.go.buildid`), which Go binaries carry where they
    /// have no GNU build id (Go links without one unless asked).
    pub go_build_id: Option<String>,
    /// (file offset, virtual address, size in the file) of each load segment.
    segments: Vec<(u64, u64, u64)>,
}

impl Identity {
    pub fn read(file: &File) -> Option<Self> {
        let cache = ReadCache::new(ReadAt::new(file));
        let elf = object::File::parse(&cache).ok()?;
        Some(Self {
            build_id: elf.build_id().ok().flatten().map(<[u8]>::to_vec),
            go_build_id: elf
                .section_by_name(".note.go.buildid")
                .and_then(|s| go_build_id_note(s.data().ok()?)),
            segments: elf
                .segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (offset, s.address(), size)
                })
                .collect(),
        })
    }

    /// The id a profile's mapping carries for this file: its GNU build id in hex, else its
    /// Go build id.
    pub fn mapping_id(&self) -> Option<String> {
        match &self.build_id {
            Some(b) => Some(hex(b)),
            None => self.go_build_id.clone(),
        }
    }

    /// Whether a profile's mapping id (as [`Self::mapping_id`] writes it) names this file.
    pub fn is(&self, id: &str) -> bool {
        self.mapping_id().is_some_and(|mine| mine == id)
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

/// The build id in a `.note.go.buildid` section: one note, named "Go", of type 4.
fn go_build_id_note(note: &[u8]) -> Option<String> {
    let word = |at: usize| Some(u32::from_le_bytes(note.get(at..at + 4)?.try_into().ok()?));
    let (name_len, desc_len, kind) = (word(0)? as usize, word(4)? as usize, word(8)?);
    // The Go linker names it "Go\0\0" (4 bytes); "Go\0" is the same name, padded.
    if kind != 4 || !(3..=4).contains(&name_len) || note.get(12..15)? != b"Go\0" {
        return None;
    }
    // The name is padded to 4 bytes: the description starts at 16.
    let desc = note.get(16..16 + desc_len)?;
    let id = std::str::from_utf8(desc).ok()?.trim_end_matches('\0');
    (!id.is_empty()).then(|| id.to_string())
}

/// The ELF files under `dirs` (each searched two levels deep, regular files of at most
/// `max_bytes`) by their mapping id ([`Identity::mapping_id`]; the first found of each id):
/// where executables moved since they were recorded, or copied from the host they ran
/// on, are found.
pub fn files_by_id(dirs: &[PathBuf], max_bytes: u64) -> HashMap<String, PathBuf> {
    fn walk(dir: &Path, depth: u32, max_bytes: u64, found: &mut HashMap<String, PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_file() && std::fs::metadata(&path).is_ok_and(|m| m.len() <= max_bytes) {
                let id = File::open(&path)
                    .ok()
                    .and_then(|f| Identity::read(&f))
                    .and_then(|i| i.mapping_id());
                if let Some(id) = id {
                    found.entry(id).or_insert(path);
                }
            } else if kind.is_dir() && depth > 0 && e.file_name() != ".build-id" {
                walk(&path, depth - 1, max_bytes, found);
            }
        }
    }
    let mut found = HashMap::new();
    for d in dirs {
        walk(d, 1, max_bytes, &mut found);
    }
    found
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The debug file of build id `id` under the first of `dirs` that has one.
pub fn by_build_id(dirs: &[PathBuf], id: &[u8]) -> Option<PathBuf> {
    if id.len() < 2 {
        return None;
    }
    let hex = hex(id);
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

    #[test]
    fn a_go_build_id_is_read_from_its_note() {
        let note = |namesz: u32, kind: u32, name: &[u8], id: &[u8]| {
            let mut n = namesz.to_le_bytes().to_vec();
            n.extend((id.len() as u32).to_le_bytes());
            n.extend(kind.to_le_bytes());
            n.extend(name);
            n.resize(16, 0);
            n.extend(id);
            n
        };
        let id = b"gHxM/k18z/8hv3/LBnK";
        assert_eq!(
            go_build_id_note(&note(4, 4, b"Go\0\0", id)).as_deref(),
            Some("gHxM/k18z/8hv3/LBnK")
        );
        assert!(go_build_id_note(&note(3, 4, b"Go\0", id)).is_some());
        assert_eq!(go_build_id_note(&note(4, 3, b"GNU\0", id)), None);
        assert_eq!(go_build_id_note(&note(4, 4, b"Go\0\0", id)[..20]), None);
        let identity = Identity {
            build_id: None,
            go_build_id: Some("gHxM/k18z".into()),
            segments: Vec::new(),
        };
        assert!(identity.is("gHxM/k18z") && !identity.is("other"));
        assert_eq!(identity.mapping_id().as_deref(), Some("gHxM/k18z"));
    }
}
