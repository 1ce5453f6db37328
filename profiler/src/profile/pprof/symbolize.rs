//! Naming a pprof profile's unnamed locations on another host or later (`profiler
//! symbolize`, for files written by `record --symbolize none`). Each mapping's addresses
//! are its file's virtual addresses; its file is the one at the mapping's path when that
//! has the mapping's build id, else a debug file found by build id under the debug
//! directories. One blazesym call per mapping.

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use super::proto;
use crate::{
    symbolize::{ElfFile, FileId, Frame, Identity, Symbolizer, by_build_id, files_by_id},
    untrusted::{self, MAX_ELF_BYTES, Rules},
};

/// What naming did.
#[derive(Debug, Default)]
pub struct Symbolized {
    /// Locations that got names.
    pub named: u64,
    /// Locations still unnamed (no symbol covers them, or no file was found).
    pub unnamed: u64,
    /// Mappings whose file was not found here, one line each.
    pub missing: Vec<String>,
}

/// Names the locations of `p` that have an address and no lines.
pub fn symbolize_message(p: &mut proto::Profile, debug_dirs: &[PathBuf]) -> Symbolized {
    let mut out = Symbolized::default();
    let string = |p: &proto::Profile, i: i64| -> String {
        usize::try_from(i)
            .ok()
            .and_then(|i| p.string_table.get(i))
            .cloned()
            .unwrap_or_default()
    };
    let mut dirs = debug_dirs.to_vec();
    dirs.extend(["/usr/lib/debug", "/lib/debug"].map(PathBuf::from));
    let mut symbolizer = Symbolizer::new(debug_dirs);
    let mut functions = Functions::new(p);
    // The files under the user's directories by build id, read the first time a mapping's
    // file is not at its recorded path.
    let mut moved = Moved {
        dirs: debug_dirs,
        by_id: None,
    };
    for m in 0..p.mapping.len() {
        let mapping = p.mapping[m].clone();
        let wanted: Vec<usize> = (0..p.location.len())
            .filter(|&i| {
                let l = &p.location[i];
                l.mapping_id == mapping.id && l.line.is_empty() && l.address != 0
            })
            .collect();
        if wanted.is_empty() {
            continue;
        }
        let path = string(p, mapping.filename);
        let build_id = string(p, mapping.build_id);
        let frames = match find(&path, &build_id, &dirs, &mut moved) {
            Some(Found::File(file)) => {
                // File offsets, as the recording normalized them.
                let offsets: Vec<u64> = wanted
                    .iter()
                    .map(|&i| {
                        p.location[i]
                            .address
                            .wrapping_sub(mapping.memory_start)
                            .wrapping_add(mapping.file_offset)
                    })
                    .collect();
                // The mapping's index names the file: names are cached by (file, offset).
                let id = m as FileId;
                let files = HashMap::from([(id, file.clone())]);
                symbolizer.resolve_user(&files, offsets.iter().map(|&o| (id, o)));
                offsets
                    .iter()
                    .map(|&o| symbolizer.user(id, o, Some((file.name.clone(), file.path.clone()))))
                    .collect::<Vec<_>>()
            }
            Some(Found::Debug(debug)) if mapping.memory_limit > mapping.memory_start => {
                let vaddrs: Vec<u64> = wanted.iter().map(|&i| p.location[i].address).collect();
                let name: Arc<str> = Arc::from(path.rsplit('/').next().unwrap_or(&path));
                symbolizer.debug_file_frames(&debug, &name, &Arc::from(path.as_str()), &vaddrs)
            }
            _ => {
                out.missing.push(if build_id.is_empty() {
                    path.clone()
                } else {
                    format!("{path} (build id {build_id})")
                });
                out.unnamed += wanted.len() as u64;
                continue;
            }
        };
        for (&i, frames) in wanted.iter().zip(frames) {
            if frames.iter().any(|f| f.offset.is_some()) {
                out.unnamed += 1;
                continue;
            }
            // pprof lists the innermost (inlined) function first.
            p.location[i].line = frames
                .iter()
                .rev()
                .map(|f| proto::Line {
                    function_id: functions.id(p, f),
                    line: i64::from(f.line.unwrap_or(0)),
                })
                .collect();
            out.named += 1;
        }
        let m = &mut p.mapping[m];
        m.has_functions = true;
        m.has_filenames = true;
        m.has_line_numbers = true;
        m.has_inline_frames = true;
    }
    out
}

enum Found {
    /// The mapped file itself (same build id).
    File(ElfFile),
    /// Only its separate debug file.
    Debug(PathBuf),
}

/// Files moved from their recorded paths, found under the user's directories.
struct Moved<'a> {
    dirs: &'a [PathBuf],
    by_id: Option<HashMap<String, PathBuf>>,
}

/// The file a mapping names: at its recorded path if that file is the one recorded, else
/// its debug file by build id under `dirs`, else the file itself, `moved`.
fn find(path: &str, build_id: &str, dirs: &[PathBuf], moved: &mut Moved<'_>) -> Option<Found> {
    let rules = Rules {
        max_bytes: MAX_ELF_BYTES,
        owner: None,
        identity: None,
    };
    // Named as recorded wherever it was found: the profile's mapping keeps its path.
    let as_recorded = |file| {
        Found::File(ElfFile {
            name: Arc::from(path.rsplit('/').next().unwrap_or(path)),
            path: Arc::from(path),
            file: Arc::new(file),
        })
    };
    if path.starts_with('/')
        && let Ok(file) = untrusted::open(None, std::path::Path::new(path), &rules)
        && (build_id.is_empty() || Identity::read(&file).is_some_and(|i| i.is(build_id)))
    {
        return Some(as_recorded(file));
    }
    if let Some(debug) = unhex(build_id).and_then(|id| by_build_id(dirs, &id)) {
        return Some(Found::Debug(debug));
    }
    // The file itself, moved or copied under a directory the user named (a Go binary's
    // only id is Go's own, which no `.build-id` tree files).
    if build_id.is_empty() {
        return None;
    }
    let dirs = moved.dirs;
    let at = moved
        .by_id
        .get_or_insert_with(|| files_by_id(dirs, MAX_ELF_BYTES))
        .get(build_id)?;
    untrusted::open(None, at, &rules).ok().map(as_recorded)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.is_empty() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The profile's function table, extended with the functions naming finds.
struct Functions {
    ids: HashMap<(String, String), u64>,
    strings: HashMap<String, i64>,
}

impl Functions {
    fn new(p: &proto::Profile) -> Self {
        let strings: HashMap<String, i64> = p
            .string_table
            .iter()
            .enumerate()
            .map(|(i, s)| (s.clone(), i as i64))
            .collect();
        let name = |i: i64| p.string_table.get(i as usize).cloned().unwrap_or_default();
        let ids = p
            .function
            .iter()
            .map(|f| ((name(f.name), name(f.filename)), f.id))
            .collect();
        Self { ids, strings }
    }

    fn string(&mut self, p: &mut proto::Profile, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = p.string_table.len() as i64;
        p.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn id(&mut self, p: &mut proto::Profile, f: &Frame) -> u64 {
        let key = (
            f.function.to_string(),
            f.file.as_deref().unwrap_or("").to_string(),
        );
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = p.function.iter().map(|f| f.id).max().unwrap_or(0) + 1;
        let name = self.string(p, &key.0);
        let filename = self.string(p, &key.1);
        p.function.push(proto::Function {
            id,
            name,
            system_name: name,
            filename,
            start_line: 0,
        });
        self.ids.insert(key, id);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_ids_are_read_from_hex() {
        assert_eq!(unhex("00ff1a"), Some(vec![0, 255, 26]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex(""), None);
    }
}
