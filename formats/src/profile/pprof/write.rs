//! Profile → pprof.

use std::{collections::HashMap, io, sync::Arc};

use flate2::{Compression, write::GzEncoder};
use prost::Message as _;

use super::{COMMENT_PREFIX, KERNEL_MODULE, proto};
use crate::{
    profile::{FrameId, FrameTable, Labels, Profile, StackCount, Unit, is_time_event},
    symbolize::{Frame, FrameKind, Identity},
};

/// The string table: index 0 is "", every string stored once.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Self::default();
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// Ids of the mappings, functions and locations, each created once.
struct Tables<'a> {
    /// The profile's frames, which the stacks' ids point at.
    frames: &'a FrameTable,
    /// The location of each group of frame ids (a frame and those inlined into it) already
    /// seen: each distinct group is made a location once, not once per stack.
    group_ids: HashMap<&'a [FrameId], u64>,
    strings: Strings,
    mappings: Vec<proto::Mapping>,
    mapping_ids: HashMap<Arc<str>, u64>,
    functions: Vec<proto::Function>,
    function_ids: HashMap<(Arc<str>, Option<Arc<str>>), u64>,
    locations: Vec<proto::Location>,
    location_ids: HashMap<(u64, Vec<(u64, i64)>), u64>,
    /// Files of mappings and unsymbolized frames, read once each (`None`: not readable
    /// here).
    identities: HashMap<Arc<str>, Option<Identity>>,
    /// Mappings of unsymbolized frames: one per (file, load segment).
    raw_mapping_ids: HashMap<(Arc<str>, u64), u64>,
    raw_location_ids: HashMap<(u64, u64), u64>,
}

impl<'a> Tables<'a> {
    /// The build id and load segments of the file at `path`, read once.
    fn identity(&mut self, path: &Arc<str>) -> Option<&Identity> {
        self.identities
            .entry(path.clone())
            .or_insert_with(|| read_identity(path))
            .as_ref()
    }

    fn mapping(&mut self, frame: &Frame) -> u64 {
        let name: Arc<str> = match (&frame.path, &frame.module, frame.kind) {
            (Some(p), _, _) => p.clone(),
            (None, Some(m), _) => m.clone(),
            (None, None, FrameKind::Kernel) => Arc::from(KERNEL_MODULE),
            (
                None,
                None,
                FrameKind::User
                | FrameKind::Python
                | FrameKind::JavaScript
                | FrameKind::Java
                | FrameKind::Ruby,
            ) => {
                return 0;
            }
        };
        if let Some(&id) = self.mapping_ids.get(&name) {
            return id;
        }
        let id = self.mappings.len() as u64 + 1;
        let build_id = if name.as_ref() == KERNEL_MODULE {
            kernel_build_id()
        } else if name.starts_with('/') {
            self.identity(&name).and_then(Identity::mapping_id)
        } else {
            None
        };
        let mapping = proto::Mapping {
            id,
            filename: self.strings.get(&name),
            build_id: self.strings.get(build_id.as_deref().unwrap_or("")),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
            ..Default::default()
        };
        self.mappings.push(mapping);
        self.mapping_ids.insert(name, id);
        id
    }

    fn function(&mut self, frame: &Frame) -> u64 {
        let key = (frame.function.clone(), frame.file.clone());
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let name = self.strings.get(&frame.function);
        let filename = self.strings.get(frame.file.as_deref().unwrap_or(""));
        self.functions.push(proto::Function {
            id,
            name,
            system_name: name,
            filename,
            start_line: 0,
        });
        self.function_ids.insert(key, id);
        id
    }

    /// The location of an address no symbol names yet, at `offset` in its file: the
    /// address is the file's virtual address, in a mapping of the load segment holding it
    /// (as if the file were loaded at 0), so `address - start + file_offset` is the offset
    /// again and symbol servers can name it from the file or its debug file.
    fn raw_location(&mut self, frame: &Frame, offset: u64) -> u64 {
        let Some(path) = frame.path.clone().or_else(|| frame.module.clone()) else {
            return self.location_unnamed(offset);
        };
        let identity = self.identity(&path);
        let segment = identity.and_then(|i| i.segment(offset));
        let build_id = identity.and_then(Identity::mapping_id);
        let (start, size, file_offset) = segment.map_or((0, 0, 0), |(o, v, s)| (v, s, o));
        let address = start + (offset - file_offset);
        let mapping_id = match self.raw_mapping_ids.get(&(path.clone(), start)) {
            Some(&id) => id,
            None => {
                let id = self.mappings.len() as u64 + 1;
                self.mappings.push(proto::Mapping {
                    id,
                    memory_start: start,
                    memory_limit: start + size,
                    file_offset,
                    filename: self.strings.get(&path),
                    build_id: self.strings.get(build_id.as_deref().unwrap_or("")),
                    ..Default::default()
                });
                self.raw_mapping_ids.insert((path, start), id);
                id
            }
        };
        *self
            .raw_location_ids
            .entry((mapping_id, address))
            .or_insert_with(|| {
                let id = self.locations.len() as u64 + 1;
                self.locations.push(proto::Location {
                    id,
                    mapping_id,
                    address,
                    ..Default::default()
                });
                id
            })
    }

    fn location_unnamed(&mut self, address: u64) -> u64 {
        let id = self.locations.len() as u64 + 1;
        self.locations.push(proto::Location {
            id,
            address,
            ..Default::default()
        });
        id
    }

    /// One location for a frame and the frames inlined into it (`group`, caller first).
    fn location(&mut self, group: &'a [FrameId]) -> u64 {
        if let Some(&id) = self.group_ids.get(group) {
            return id;
        }
        let frames = self.frames;
        let first = frames.get(group[0]);
        let id = match first.offset {
            // An address in no known file gets a location of its own each time (as it
            // always has): not remembered.
            Some(offset) if first.path.is_none() && first.module.is_none() => {
                return self.raw_location(first, offset);
            }
            Some(offset) => self.raw_location(first, offset),
            None => self.named_location(group),
        };
        self.group_ids.insert(group, id);
        id
    }

    /// The location of named frames (caller first): found by its mapping and lines.
    fn named_location(&mut self, group: &[FrameId]) -> u64 {
        let frames = self.frames;
        let mapping_id = self.mapping(frames.get(group[0]));
        let lines: Vec<(u64, i64)> = frames
            .resolve(group)
            .rev()
            .map(|f| (self.function(f), i64::from(f.line.unwrap_or(0))))
            .collect();
        let key = (mapping_id, lines);
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let id = self.locations.len() as u64 + 1;
        self.locations.push(proto::Location {
            id,
            mapping_id,
            address: 0,
            line: key
                .1
                .iter()
                .map(|&(function_id, line)| proto::Line { function_id, line })
                .collect(),
            is_folded: false,
        });
        self.location_ids.insert(key, id);
        id
    }

    /// Location ids of a stack of frame ids (outermost first), leaf first.
    fn stack(&mut self, ids: &'a [FrameId]) -> Vec<u64> {
        let mut groups: Vec<&'a [FrameId]> = Vec::new();
        let mut start = 0;
        for i in 1..=ids.len() {
            if i == ids.len() || !self.frames.get(ids[i]).inlined {
                groups.push(&ids[start..i]);
                start = i;
            }
        }
        groups.iter().rev().map(|g| self.location(g)).collect()
    }
}

/// A stack and its attribution: samples with equal keys merge in a counter group's profile.
type GroupKey<'a> = (&'a [FrameId], u32, u32, u32, u64, &'a str, &'a Labels);

/// The period one sample of the profile's only sampled event stands for, when it is fixed:
/// `-c N`, or a clock at a frequency (perf turns it into a period of 1e9 / frequency ns).
fn fixed_period(profile: &Profile, event: &str) -> i64 {
    let info = &profile.info;
    match info.period {
        Some(n) => n as i64,
        None if profile.unit(event) == Unit::Nanoseconds && info.frequency_hz > 0 => {
            1_000_000_000 / info.frequency_hz as i64
        }
        None => 0,
    }
}

/// The pprof message for `profile`.
pub fn encode(profile: &Profile) -> proto::Profile {
    let mut t = Tables {
        frames: &profile.frames,
        group_ids: HashMap::new(),
        strings: Strings::new(),
        mappings: Vec::new(),
        mapping_ids: HashMap::new(),
        functions: Vec::new(),
        function_ids: HashMap::new(),
        locations: Vec::new(),
        location_ids: HashMap::new(),
        identities: HashMap::new(),
        raw_mapping_ids: HashMap::new(),
        raw_location_ids: HashMap::new(),
    };
    // Samples first, then one column per event in its unit (`page-faults`/`count`,
    // `cpu-clock`/`nanoseconds`, `off-cpu`/`nanoseconds`), as pprof's own CPU profiles
    // put `cpu`/`nanoseconds` beside `samples`/`count`: each stack counts its samples and
    // its event's value, nothing is added across events.
    let mut sample_type = vec![proto::ValueType {
        r#type: t.strings.get("samples"),
        unit: t.strings.get("count"),
    }];
    // Sampled events first, time off the CPU after them (as the report orders them).
    let mut events: Vec<Arc<str>> = profile
        .events()
        .into_iter()
        .filter(|e| !profile.is_counter(e))
        .collect();
    events.sort_by_key(|e| is_time_event(e));
    for e in &events {
        sample_type.push(proto::ValueType {
            r#type: t.strings.get(e),
            unit: t.strings.get(profile.unit(e).pprof()),
        });
    }
    // The period, when one sampled event has a fixed one.
    let (period_type, period) = match events.as_slice() {
        [one] if !is_time_event(one) => (Some(sample_type[1].clone()), fixed_period(profile, one)),
        _ => (None, 0),
    };
    // Viewers open on the first event's values, not on samples.
    let default_sample_type = events.first().map_or(0, |e| t.strings.get(e));
    // A counter group: one sample type per counter (named after it), and each stack's
    // samples and counter counts in one sample.
    let counters = &profile.info.counters;
    for c in counters {
        sample_type.push(proto::ValueType {
            r#type: t.strings.get(&c.name),
            unit: t.strings.get(profile.unit(&c.name).pprof()),
        });
    }
    let first_counter = sample_type.len() - counters.len();
    let mut samples: Vec<proto::Sample> = Vec::new();
    let mut merged: HashMap<GroupKey<'_>, usize> = HashMap::new();
    let sampled = events.iter().find(|e| !is_time_event(e)).cloned();
    for s in &profile.stacks {
        let counter = counters.iter().position(|c| *c.name == *s.event);
        let key = (
            &s.frames[..],
            s.pid,
            s.tid,
            s.cpu,
            s.cgroup,
            s.comm.as_ref(),
            &s.labels,
        );
        // Without a group every stack is a sample of its own: no lookups.
        let found = if counters.is_empty() {
            None
        } else {
            merged.get(&key).copied()
        };
        let at = match found {
            Some(i) => i,
            None => {
                let mut sample = proto::Sample {
                    location_id: t.stack(&s.frames),
                    value: vec![0; sample_type.len()],
                    label: labels(&mut t.strings, profile, s),
                };
                if counter.is_some()
                    && let (Some(e), Some(l)) = (&sampled, sample.label.first_mut())
                {
                    // The event label names the sampled event, not the counter.
                    l.str = t.strings.get(e);
                }
                samples.push(sample);
                if !counters.is_empty() {
                    merged.insert(key, samples.len() - 1);
                }
                samples.len() - 1
            }
        };
        let value = &mut samples[at].value;
        let column = match counter {
            Some(k) => first_counter + k,
            None => 1 + events.iter().position(|e| *e == s.event).unwrap_or(0),
        };
        value[column] = value[column].saturating_add(s.count as i64);
        if counter.is_none() {
            value[0] = value[0].saturating_add(s.samples as i64);
        }
    }
    let info = &profile.info;
    let mut comments = vec![("event", info.event.clone())];
    for (key, value) in [
        ("frequency_hz", info.frequency_hz),
        ("duration_ms", info.duration_ms),
        ("samples", info.samples),
        ("lost", info.lost),
        ("filtered", info.filtered),
        ("skipped", info.skipped),
        ("stack_errors", info.stack_errors),
        ("collisions", info.collisions),
        ("untracked", info.untracked),
        ("refused", info.refused),
        ("unsymbolized", info.unsymbolized),
    ] {
        comments.push((key, value.to_string()));
    }
    if let Some(p) = info.period {
        comments.push(("period", p.to_string()));
    }
    for c in counters {
        comments.push((
            "counter",
            format!("{}:{}:{}", c.name, c.total, c.unattributed),
        ));
    }
    let comment = comments
        .iter()
        .map(|(k, v)| t.strings.get(&format!("{COMMENT_PREFIX}{k}={v}")))
        .collect();
    let time_nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64 - info.duration_ms as i64 * 1_000_000)
        .unwrap_or_default();
    proto::Profile {
        sample_type,
        sample: samples,
        mapping: t.mappings,
        location: t.locations,
        function: t.functions,
        time_nanos,
        duration_nanos: info.duration_ms as i64 * 1_000_000,
        period_type,
        period,
        comment,
        default_sample_type,
        string_table: t.strings.table,
    }
}

fn labels(strings: &mut Strings, profile: &Profile, s: &StackCount) -> Vec<proto::Label> {
    let text = |strings: &mut Strings, key: &str, value: &str| proto::Label {
        key: strings.get(key),
        str: strings.get(value),
        ..Default::default()
    };
    let num = |strings: &mut Strings, key: &str, value: u64| proto::Label {
        key: strings.get(key),
        num: value as i64,
        ..Default::default()
    };
    let mut out = vec![
        text(strings, "event", &s.event),
        num(strings, "pid", u64::from(s.pid)),
        num(strings, "tid", u64::from(s.tid)),
        text(strings, "comm", &s.comm),
        num(strings, "cpu", u64::from(s.cpu)),
    ];
    if s.cgroup != 0 {
        out.push(text(strings, "cgroup", &profile.cgroup_name(s.cgroup)));
        out.push(num(strings, "cgroup_id", s.cgroup));
    }
    for (key, value) in s.labels.iter() {
        out.push(text(strings, &own_label_key(key), value));
    }
    out
}

/// The labels this writer uses for a sample's attribution; the sampled code's own labels
/// with these keys are written as `label:KEY`.
pub(super) const RESERVED_KEYS: [&str; 7] =
    ["event", "comm", "pid", "tid", "cpu", "cgroup", "cgroup_id"];

/// The pprof key of the sampled code's own label `key` (`route`, as Go writes it).
fn own_label_key(key: &str) -> std::borrow::Cow<'_, str> {
    if RESERVED_KEYS.contains(&key) || key.starts_with(OWN_PREFIX) {
        format!("{OWN_PREFIX}{key}").into()
    } else {
        key.into()
    }
}

/// What marks an own label whose key is one of [`RESERVED_KEYS`].
pub(super) const OWN_PREFIX: &str = "label:";

/// Writes `profile` as gzip-compressed pprof.
pub fn write_pprof(profile: &Profile, out: &mut impl io::Write) -> io::Result<()> {
    write_message(&encode(profile), out)
}

/// Writes a pprof message, gzip-compressed.
pub fn write_message(message: &proto::Profile, out: &mut impl io::Write) -> io::Result<()> {
    let bytes = message.encode_to_vec();
    let mut gz = GzEncoder::new(out, Compression::default());
    io::Write::write_all(&mut gz, &bytes)?;
    gz.finish()?;
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The build id and load segments of a file named by a frame. The path came from a
/// target's maps: it is opened as untrusted (no FIFO, device or symlink).
fn read_identity(path: &str) -> Option<Identity> {
    let rules = crate::untrusted::Rules {
        max_bytes: crate::untrusted::MAX_ELF_BYTES,
        owner: None,
        identity: None,
    };
    let file = crate::untrusted::open(None, std::path::Path::new(path), &rules).ok()?;
    Identity::read(&file)
}

/// The running kernel's GNU build id, from its ELF notes in /sys/kernel/notes.
fn kernel_build_id() -> Option<String> {
    let notes = std::fs::read("/sys/kernel/notes").ok()?;
    gnu_build_id_note(&notes).map(|id| hex(&id))
}

/// Finds the NT_GNU_BUILD_ID note ("GNU", type 3) in a sequence of ELF notes.
pub(super) fn gnu_build_id_note(mut notes: &[u8]) -> Option<Vec<u8>> {
    let align = |n: usize| n.div_ceil(4) * 4;
    while notes.len() >= 12 {
        let word = |i: usize| u32::from_ne_bytes(notes[i..i + 4].try_into().unwrap()) as usize;
        let (namesz, descsz, kind) = (word(0), word(4), word(8));
        let name_end = 12 + align(namesz);
        let desc_end = name_end.checked_add(align(descsz))?;
        if desc_end > notes.len() {
            return None;
        }
        if kind == 3 && namesz == 4 && &notes[12..16] == b"GNU\0" {
            return Some(notes[name_end..name_end + descsz].to_vec());
        }
        notes = &notes[desc_end..];
    }
    None
}
