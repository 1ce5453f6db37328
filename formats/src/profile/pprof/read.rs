//! pprof → Profile. Every index in the file is checked: a truncated or foreign file is an
//! error that says what is wrong, never a panic or a silently wrong profile.

use std::{collections::HashMap, io::Read as _, sync::Arc};

use flate2::read::GzDecoder;
use prost::Message as _;

use super::{COMMENT_PREFIX, KERNEL_MODULE, proto};
use crate::{
    profile::{CounterTotal, FrameId, Labels, Profile, RunInfo, StackCount, Unit},
    symbolize::{Frame, FrameKind},
};

/// Decompressed profiles larger than this are refused (a gzip bomb is not a profile).
const MAX_DECOMPRESSED: u64 = 1 << 30;

#[derive(Debug, thiserror::Error)]
pub enum PprofError {
    #[error("not a gzip-compressed pprof profile: {0}")]
    Gzip(std::io::Error),
    #[error("not a pprof profile: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("the profile is larger than {} MiB uncompressed", MAX_DECOMPRESSED >> 20)]
    TooLarge,
    #[error("corrupt pprof profile: {what} {index} does not exist")]
    BadReference { what: &'static str, index: u64 },
}

/// Reads a pprof profile, gzip-compressed (as written) or not.
pub fn read_pprof(bytes: &[u8]) -> Result<Profile, PprofError> {
    decode(&read_message(bytes)?)
}

/// The pprof message of a file, gzip-compressed or not.
pub fn read_message(bytes: &[u8]) -> Result<proto::Profile, PprofError> {
    let raw;
    let data = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        GzDecoder::new(bytes)
            .take(MAX_DECOMPRESSED + 1)
            .read_to_end(&mut out)
            .map_err(PprofError::Gzip)?;
        if out.len() as u64 > MAX_DECOMPRESSED {
            return Err(PprofError::TooLarge);
        }
        raw = out;
        &raw[..]
    } else {
        bytes
    };
    Ok(proto::Profile::decode(data)?)
}

/// A mapping's module name, its path when it has one, and whether it is the kernel.
type MappingInfo = (Arc<str>, Option<Arc<str>>, bool);

struct Lookup<'a> {
    p: &'a proto::Profile,
}

impl<'a> Lookup<'a> {
    fn string(&self, i: i64) -> Result<&'a str, PprofError> {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.p.string_table.get(i))
            .map(String::as_str)
            .ok_or(PprofError::BadReference {
                what: "string",
                index: i as u64,
            })
    }
}

fn decode(p: &proto::Profile) -> Result<Profile, PprofError> {
    let l = Lookup { p };
    // Mapping id → (module name, path, kernel?).
    let mut mappings: HashMap<u64, MappingInfo> = HashMap::new();
    // Mapping id → how its addresses become file offsets (start, file offset).
    let mut bases: HashMap<u64, (u64, u64)> = HashMap::new();
    for m in &p.mapping {
        let name = l.string(m.filename)?;
        let kernel = name.starts_with("[kernel") || name == KERNEL_MODULE;
        let module: Arc<str> = Arc::from(name.rsplit('/').next().unwrap_or(name));
        let path = name.starts_with('/').then(|| Arc::from(name));
        mappings.insert(m.id, (module, path, kernel));
        bases.insert(m.id, (m.memory_start, m.file_offset));
    }
    let mut functions: HashMap<u64, (Arc<str>, Option<Arc<str>>)> = HashMap::new();
    for f in &p.function {
        let file = l.string(f.filename)?;
        let file = (!file.is_empty()).then(|| Arc::from(file));
        functions.insert(f.id, (Arc::from(l.string(f.name)?), file));
    }
    let mut profile = Profile::default();
    // Location id → its frames' ids, caller first, inlined callees after it.
    let mut locations: HashMap<u64, Vec<FrameId>> = HashMap::new();
    for loc in &p.location {
        let (module, path, kernel) = match loc.mapping_id {
            0 => (None, None, false),
            id => {
                let (m, p, k) = mappings.get(&id).ok_or(PprofError::BadReference {
                    what: "mapping",
                    index: id,
                })?;
                (Some(m.clone()), p.clone(), *k)
            }
        };
        let n = loc.line.len();
        let mut frames = Vec::with_capacity(n.max(1));
        for (i, line) in loc.line.iter().rev().enumerate() {
            let (function, file) =
                functions
                    .get(&line.function_id)
                    .ok_or(PprofError::BadReference {
                        what: "function",
                        index: line.function_id,
                    })?;
            frames.push(Frame {
                function: function.clone(),
                module: module.clone(),
                path: path.clone(),
                file: file.clone(),
                line: u32::try_from(line.line).ok().filter(|&l| l > 0),
                kind: match (kernel, &module, file) {
                    (true, _, _) => FrameKind::Kernel,
                    // In no mapping, with a source file: a runtime's frame (native ones
                    // always have their module), shown by its file as when it was recorded.
                    (false, None, Some(file)) => runtime_kind(file),
                    _ => FrameKind::User,
                },
                inlined: i > 0,
                offset: None,
            });
        }
        if frames.is_empty() {
            // An unsymbolized location: named by its module and file offset.
            let f = match module.clone() {
                Some(m) if !kernel => {
                    let (start, file_offset) =
                        bases.get(&loc.mapping_id).copied().unwrap_or_default();
                    let offset = loc.address.wrapping_sub(start).wrapping_add(file_offset);
                    Frame::at_offset(FrameKind::User, m, path, offset)
                }
                _ => {
                    let mut f = Frame::unknown(FrameKind::User, module.clone());
                    if loc.address != 0 {
                        f.function = Arc::from(format!("{}+{:#x}", f.function, loc.address));
                    }
                    f.path = path;
                    f
                }
            };
            frames.push(f);
        }
        locations.insert(loc.id, profile.frames.intern_all(&frames).into_vec());
    }
    let count_index = p
        .sample_type
        .iter()
        .position(|t| l.string(t.r#type).is_ok_and(|s| s == "samples"))
        .unwrap_or(0);
    // A counter group's sample types: index of each counter's values.
    let counters = counter_comments(&l, p)?;
    let mut counter_index = Vec::new();
    for c in &counters {
        let i = p
            .sample_type
            .iter()
            .position(|t| l.string(t.r#type).is_ok_and(|s| s == c.name));
        counter_index.push(i);
    }
    // Columns named after an event (not `samples`, not a counter): index and unit.
    let mut event_columns: HashMap<&str, (usize, Unit)> = HashMap::new();
    for (i, t) in p.sample_type.iter().enumerate() {
        let name = l.string(t.r#type)?;
        if i != count_index && !counters.iter().any(|c| c.name == name) {
            event_columns
                .entry(name)
                .or_insert((i, Unit::from_pprof(l.string(t.unit)?)));
        }
    }
    let samples = profile.frames.strings().get("samples");
    let no_comm = profile.frames.strings().get("");
    for s in &p.sample {
        let mut frames = Vec::new();
        for id in s.location_id.iter().rev() {
            let loc = locations.get(id).ok_or(PprofError::BadReference {
                what: "location",
                index: *id,
            })?;
            frames.extend_from_slice(loc);
        }
        let count = s.value.get(count_index).copied().unwrap_or(0).max(0) as u64;
        let mut stack = StackCount::new(samples.clone(), no_comm.clone(), frames.into(), count);
        let value_at = |i: usize| s.value.get(i).copied().unwrap_or(0).max(0) as u64;
        let mut cgroup_path = None;
        let mut own = Vec::new();
        for label in &s.label {
            let value = l.string(label.str)?;
            match l.string(label.key)? {
                "event" => stack.event = profile.frames.strings().get(value),
                "comm" => stack.comm = profile.frames.strings().get(value),
                "pid" => stack.pid = label.num as u32,
                "tid" => stack.tid = label.num as u32,
                "cpu" => stack.cpu = label.num as u32,
                "cgroup_id" => stack.cgroup = label.num as u64,
                "cgroup" => cgroup_path = Some(Arc::from(value)),
                // The sampled code's own (string) labels: Go's, or ours written by
                // `write`, a reserved key behind its prefix.
                key if label.str != 0 => {
                    own.push((
                        key.strip_prefix(super::write::OWN_PREFIX).unwrap_or(key),
                        value,
                    ));
                }
                _ => {}
            }
        }
        stack.labels = Labels::new(own);
        // Each event's values are in the column named after it, in its unit (as written);
        // profiles without one (written before, or by other tools) count samples.
        match event_columns.get(stack.event.as_ref()) {
            Some(&(i, unit)) => {
                stack.count = value_at(i);
                profile.units.insert(stack.event.clone(), unit);
            }
            None if stack.event.as_ref() != "samples" => {
                profile.units.insert(stack.event.clone(), Unit::Samples);
            }
            None => {}
        }
        if let Some(path) = cgroup_path
            && stack.cgroup != 0
        {
            profile.cgroups.insert(stack.cgroup, path);
        }
        for (c, i) in counters.iter().zip(&counter_index) {
            let n = i.and_then(|i| s.value.get(i)).copied().unwrap_or(0).max(0) as u64;
            if n > 0 {
                let mut weighted = stack.clone();
                weighted.event = profile.frames.strings().get(&c.name);
                weighted.count = n;
                weighted.samples = 0;
                profile.stacks.push(weighted);
            }
        }
        if stack.count > 0 || counters.is_empty() {
            profile.stacks.push(stack);
        }
    }
    profile.info.counters = counters;
    let total = profile.samples();
    profile.info = RunInfo {
        counters: std::mem::take(&mut profile.info.counters),
        ..run_info(&l, p, total)?
    };
    Ok(profile)
}

/// The counters of a group, from our `counter=NAME:TOTAL:UNATTRIBUTED` comments.
fn counter_comments(l: &Lookup<'_>, p: &proto::Profile) -> Result<Vec<CounterTotal>, PprofError> {
    let mut out = Vec::new();
    for &c in &p.comment {
        let Some(v) = l
            .string(c)?
            .strip_prefix(COMMENT_PREFIX)
            .and_then(|kv| kv.strip_prefix("counter="))
        else {
            continue;
        };
        let mut parts = v.rsplitn(3, ':');
        let (Some(unattributed), Some(total), Some(name)) =
            (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if let (Ok(total), Ok(unattributed)) = (total.parse(), unattributed.parse()) {
            out.push(CounterTotal {
                name: name.to_string(),
                total,
                unattributed,
            });
        }
    }
    Ok(out)
}

/// The run's counters from our comments; a foreign profile gets its totals and duration.
fn run_info(l: &Lookup<'_>, p: &proto::Profile, total: u64) -> Result<RunInfo, PprofError> {
    let mut info = RunInfo {
        samples: total,
        duration_ms: (p.duration_nanos.max(0) / 1_000_000) as u64,
        ..Default::default()
    };
    for &c in &p.comment {
        let Some((key, value)) = l
            .string(c)?
            .strip_prefix(COMMENT_PREFIX)
            .and_then(|kv| kv.split_once('='))
        else {
            continue;
        };
        let n = value.parse::<u64>().ok();
        match (key, n) {
            ("event", _) => info.event = value.to_string(),
            ("frequency_hz", Some(n)) => info.frequency_hz = n,
            ("period", Some(n)) => info.period = Some(n),
            ("duration_ms", Some(n)) => info.duration_ms = n,
            ("samples", Some(n)) => info.samples = n,
            ("lost", Some(n)) => info.lost = n,
            ("filtered", Some(n)) => info.filtered = n,
            ("skipped", Some(n)) => info.skipped = n,
            ("stack_errors", Some(n)) => info.stack_errors = n,
            ("collisions", Some(n)) => info.collisions = n,
            ("untracked", Some(n)) => info.untracked = n,
            ("refused", Some(n)) => info.refused = n,
            ("unsymbolized", Some(n)) => info.unsymbolized = n,
            _ => {}
        }
    }
    Ok(info)
}

/// Which runtime's frame a frame in no mapping with source file `file` is, by the file's
/// extension (each shows the same way: `function (file:line)`).
fn runtime_kind(file: &str) -> FrameKind {
    if file.ends_with(".py") {
        FrameKind::Python
    } else if file.ends_with(".java") {
        FrameKind::Java
    } else if file.ends_with(".rb") {
        FrameKind::Ruby
    } else {
        FrameKind::JavaScript
    }
}
