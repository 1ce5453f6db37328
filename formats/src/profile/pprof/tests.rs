use std::sync::Arc;

use prost::Message as _;

use super::{proto, read_pprof, write::gnu_build_id_note, write_pprof};
use crate::{
    profile::{Labels, Profile, RunInfo, StackCount},
    symbolize::{Frame, FrameKind},
};

fn frame(name: &str, kind: FrameKind, inlined: bool) -> Frame {
    let mut f = Frame::named(name, kind);
    f.inlined = inlined;
    f.module = Some(Arc::from(match kind {
        FrameKind::User => "chain",
        FrameKind::Kernel => "[kernel.kallsyms]",
        FrameKind::Python => "stacks.py",
        FrameKind::JavaScript => "stacks.js",
        FrameKind::Java => "Stacks.java",
        FrameKind::Ruby => "stacks.rb",
    }));
    if kind == FrameKind::User {
        f.path = Some(Arc::from("/nonexistent/chain"));
        f.file = Some(Arc::from("chain.c"));
        f.line = Some(12);
    }
    f
}

fn sample_profile() -> Profile {
    let user = |n| frame(n, FrameKind::User, false);
    let mut p = Profile {
        info: RunInfo {
            event: "cpu-clock,page-faults".into(),
            frequency_hz: 999,
            duration_ms: 2000,
            samples: 100,
            lost: 7,
            filtered: 3,
            skipped: 8,
            stack_errors: 1,
            collisions: 2,
            untracked: 4,
            refused: 5,
            unsymbolized: 6,
            period: None,
            counters: Vec::new(),
            event_samples: Default::default(),
        },
        ..Default::default()
    };
    let first = p.push(
        "cpu-clock",
        "chain",
        &[
            user("main"),
            user("outer"),
            frame("middle", FrameKind::User, true),
            user("leaf"),
            frame("asm_sysvec_apic_timer_interrupt", FrameKind::Kernel, false),
        ],
        90,
    );
    first.pid = 41;
    first.tid = 42;
    first.cpu = 1;
    first.cgroup = 777;
    // A goroutine's labels, one of them with a key of the writer's own.
    first.labels = Labels::new([("route", "/checkout"), ("pid", "not ours")]);
    let second = p.push("page-faults", "chain", &[user("main"), user("outer")], 10);
    second.pid = 41;
    second.tid = 43;
    p.cgroups.insert(777, Arc::from("/test/a"));
    p
}

/// Each stack (its ids left out) with its frames, as values: what two profiles must agree
/// on whatever ids their frame tables gave.
fn resolved(p: &Profile) -> Vec<(StackCount, Vec<Frame>)> {
    p.stacks
        .iter()
        .map(|s| {
            let attribution = StackCount {
                frames: Box::default(),
                ..s.clone()
            };
            (attribution, p.frames_of(s).cloned().collect())
        })
        .collect()
}

#[test]
fn round_trip_keeps_stacks_labels_inlining_and_counters() {
    let p = sample_profile();
    let mut bytes = Vec::new();
    write_pprof(&p, &mut bytes).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip");
    let back = read_pprof(&bytes).unwrap();
    assert_eq!(back.info, p.info);
    assert_eq!(back.cgroups, p.cgroups);
    assert_eq!(resolved(&back), resolved(&p));
}

#[test]
fn pprof_read_back_writes_the_same_message() {
    // Written, read and written again: the same tables, samples and labels (only the
    // time stamp, taken at writing, may differ).
    let first = super::encode(&sample_profile());
    let mut bytes = Vec::new();
    write_pprof(&sample_profile(), &mut bytes).unwrap();
    let mut again = super::encode(&read_pprof(&bytes).unwrap());
    again.time_nanos = first.time_nanos;
    assert_eq!(again, first);
    // The frame table holds each distinct frame once: main and outer are on both stacks.
    let back = read_pprof(&bytes).unwrap();
    assert_eq!(back.frames.len(), 5);
    assert_eq!(back.stacks[1].frames[..], back.stacks[0].frames[..2]);
}

#[test]
fn inlined_frames_share_one_location_innermost_first() {
    let msg = super::encode(&sample_profile());
    let s = |i: i64| msg.string_table[i as usize].as_str();
    let fname = |id: u64| s(msg.function.iter().find(|f| f.id == id).unwrap().name);
    // main, outer+middle, leaf, the kernel frame: 4 locations for 5 frames.
    let first = &msg.sample[0];
    assert_eq!(first.location_id.len(), 4);
    let outer = msg
        .location
        .iter()
        .find(|l| l.line.len() == 2)
        .expect("a location with an inlined line");
    let names: Vec<&str> = outer.line.iter().map(|l| fname(l.function_id)).collect();
    assert_eq!(names, ["middle", "outer"]);
    let kernel = msg
        .mapping
        .iter()
        .find(|m| s(m.filename) == "[kernel.kallsyms]");
    assert!(kernel.is_some());
    assert_eq!(
        msg.sample_type
            .iter()
            .map(|t| (s(t.r#type), s(t.unit)))
            .collect::<Vec<_>>(),
        [
            ("samples", "count"),
            ("cpu-clock", "nanoseconds"),
            ("page-faults", "count")
        ],
        "each event's values in a column of its own, in its unit"
    );
    assert_eq!(msg.period_type, None, "no one period for two events");
    assert!(msg.comment.iter().any(|&c| s(c) == "profiler.lost=7"));
    assert!(msg.comment.iter().any(|&c| s(c) == "profiler.untracked=4"));
    assert!(msg.comment.iter().any(|&c| s(c) == "profiler.refused=5"));
    assert!(
        msg.comment
            .iter()
            .any(|&c| s(c) == "profiler.unsymbolized=6")
    );
}

#[test]
fn clock_events_carry_cpu_nanoseconds() {
    let mut p = sample_profile();
    p.stacks.truncate(1);
    // 90 samples at 999 Hz: the kernel's period for the clock is 1e9 / 999 ns.
    p.stacks[0].count = 90 * 1_001_001;
    let msg = super::encode(&p);
    assert_eq!(msg.sample_type.len(), 2);
    assert_eq!(msg.sample[0].value, vec![90, 90 * 1_001_001]);
    assert_eq!(msg.period, 1_001_001);
    let s = |i: i64| msg.string_table[i as usize].as_str();
    let period_type = msg.period_type.as_ref().expect("a period type");
    assert_eq!(
        (s(period_type.r#type), s(period_type.unit)),
        ("cpu-clock", "nanoseconds")
    );
}

#[test]
fn events_at_a_frequency_count_their_periods_beside_their_samples() {
    let mut p = sample_profile();
    p.info.event = "page-faults".into();
    p.stacks.remove(0);
    // 10 samples of page faults standing for 12345 faults.
    p.stacks[0].count = 12_345;
    let msg = super::encode(&p);
    let s = |i: i64| msg.string_table[i as usize].as_str();
    let types: Vec<(&str, &str)> = msg
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(types, [("samples", "count"), ("page-faults", "count")]);
    assert_eq!(msg.sample[0].value, vec![10, 12_345]);
    assert_eq!(s(msg.default_sample_type), "page-faults");
    assert_eq!(msg.period, 0, "a frequency: no fixed period");
    let back = read_pprof(&msg.encode_to_vec()).unwrap();
    assert_eq!((back.total(), back.samples()), (12_345, 10));
    assert_eq!(back.unit("page-faults"), crate::profile::Unit::Events);
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    assert!(read_pprof(b"not a profile at all").is_err());
    let mut bytes = Vec::new();
    write_pprof(&sample_profile(), &mut bytes).unwrap();
    for cut in [3, bytes.len() / 2, bytes.len() - 4] {
        assert!(read_pprof(&bytes[..cut]).is_err(), "truncated at {cut}");
    }
    // A sample pointing at a location that does not exist.
    let mut msg = super::encode(&sample_profile());
    msg.sample[0].location_id.push(999);
    let err = read_pprof(&msg.encode_to_vec()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "corrupt pprof profile: location 999 does not exist"
    );
    let mut msg = super::encode(&sample_profile());
    msg.function[0].name = 10_000;
    assert!(read_pprof(&msg.encode_to_vec()).is_err());
}

#[test]
fn foreign_profiles_without_our_labels_still_read() {
    let msg = proto::Profile {
        sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
        sample: vec![proto::Sample {
            location_id: vec![1],
            value: vec![5],
            label: vec![],
        }],
        location: vec![proto::Location {
            id: 1,
            address: 0x1234,
            ..Default::default()
        }],
        string_table: vec!["".into(), "samples".into(), "count".into()],
        ..Default::default()
    };
    let p = read_pprof(&msg.encode_to_vec()).unwrap();
    assert_eq!(p.total(), 5);
    assert_eq!(p.info.samples, 5);
    assert_eq!(
        p.frame(p.stacks[0].frames[0]).function.as_ref(),
        "[unknown]+0x1234"
    );
}

#[test]
fn a_file_s_named_and_unnamed_frames_carry_its_build_id() {
    let exe = std::env::current_exe().unwrap();
    let path: Arc<str> = Arc::from(exe.to_str().unwrap());
    let mut named = Frame::named("main", FrameKind::User);
    named.path = Some(path.clone());
    let raw = Frame::at_offset(
        FrameKind::User,
        Arc::from("exe"),
        Some(path.clone()),
        0x1000,
    );
    let mut p = Profile::default();
    p.push("cpu-clock", "exe", &[named, raw], 1);
    let message = super::encode(&p);
    let s = |i: i64| message.string_table[i as usize].as_str();
    let ids: Vec<&str> = message.mapping.iter().map(|m| s(m.build_id)).collect();
    assert_eq!(ids.len(), 2, "a named mapping and a load segment's");
    assert!(ids[0].len() >= 16 && ids[0] == ids[1], "{ids:?}");
    // The same id binutils reads, where it is installed.
    let readelf = std::process::Command::new("readelf")
        .arg("-n")
        .arg(&exe)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if readelf.contains("Build ID") {
        assert!(
            readelf.contains(&format!("Build ID: {}", ids[0])),
            "{readelf}"
        );
    }
}

#[test]
fn build_id_note() {
    let mut notes = Vec::new();
    // An unrelated note first, then the GNU build id.
    for (name, kind, desc) in [
        (&b"Xen\0"[..], 1u32, &[1u8, 2, 3][..]),
        (b"GNU\0", 3, &[0xde, 0xad, 0xbe, 0xef]),
    ] {
        notes.extend((name.len() as u32).to_ne_bytes());
        notes.extend((desc.len() as u32).to_ne_bytes());
        notes.extend(kind.to_ne_bytes());
        notes.extend(name);
        notes.extend(desc);
        notes.resize(notes.len().div_ceil(4) * 4, 0);
    }
    assert_eq!(
        gnu_build_id_note(&notes),
        Some(vec![0xde, 0xad, 0xbe, 0xef])
    );
    assert_eq!(gnu_build_id_note(&notes[..20]), None);
}

#[test]
fn a_counter_group_has_a_sample_type_per_counter_and_round_trips() {
    // sample_profile's page-faults stack made a counter of a cpu-clock group: it gets the
    // cpu-clock samples of its stack too, and merges with them into one pprof sample.
    let mut p = sample_profile();
    let mut leader = p.stacks[1].clone();
    leader.event = Arc::from("cpu-clock");
    leader.count = 3;
    leader.samples = 3;
    p.stacks.push(leader);
    p.info.event = "cpu-clock".into();
    p.info.counters = vec![crate::profile::CounterTotal {
        name: "page-faults".into(),
        total: 12,
        unattributed: 2,
    }];
    let mut bytes = Vec::new();
    write_pprof(&p, &mut bytes).unwrap();
    let message = super::read::read_message(&bytes).unwrap();
    let types: Vec<(&str, &str)> = message
        .sample_type
        .iter()
        .map(|t| {
            (
                message.string_table[t.r#type as usize].as_str(),
                message.string_table[t.unit as usize].as_str(),
            )
        })
        .collect();
    assert_eq!(types.last(), Some(&("page-faults", "count")));
    assert_eq!(
        message.sample.len(),
        2,
        "the counter merged into its stack's sample"
    );
    let n = types.len();
    let values: Vec<(i64, i64)> = message
        .sample
        .iter()
        .map(|s| (s.value[0], s.value[n - 1]))
        .collect();
    assert!(
        values.contains(&(90, 0)) && values.contains(&(3, 10)),
        "{values:?}"
    );
    let back = read_pprof(&bytes).unwrap();
    assert_eq!(back.info.counters, p.info.counters);
    assert_eq!(back.total(), 93);
    let faults = back.for_event("page-faults");
    assert_eq!(faults.total(), 10);
    let names = |p: &Profile, s| -> Vec<Frame> { p.frames_of(s).cloned().collect() };
    assert_eq!(names(&faults, &faults.stacks[0]), names(&p, &p.stacks[1]));
}

#[test]
fn off_cpu_and_wall_time_have_nanosecond_columns_of_their_own() {
    let mut p = sample_profile();
    p.stacks.truncate(1);
    // 90 samples of cpu-clock at 999 Hz: 1001001 ns each.
    p.stacks[0].count = 90 * 1_001_001;
    let mut off = p.stacks[0].clone();
    off.samples = 0;
    off.event = Arc::from(crate::profile::OFF_CPU_EVENT);
    let marker = p.frames.intern(&Frame::named("[off-cpu]", FrameKind::User));
    off.frames = off.frames.iter().copied().chain([marker]).collect();
    off.count = 250_000_000;
    p.stacks.push(off);
    let msg = super::encode(&p);
    let s = |i: i64| msg.string_table[i as usize].as_str();
    let types: Vec<(&str, &str)> = msg
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(
        types,
        [
            ("samples", "count"),
            ("cpu-clock", "nanoseconds"),
            ("off-cpu", "nanoseconds")
        ]
    );
    assert_eq!(msg.sample[0].value, vec![90, 90 * 1_001_001, 0]);
    assert_eq!(msg.sample[1].value, vec![0, 0, 250_000_000]);
    assert_eq!(s(msg.default_sample_type), "cpu-clock");
    // Read back, each stack has its samples and its value in its event's unit.
    let back = read_pprof(&msg.encode_to_vec()).unwrap();
    assert_eq!(
        (back.stacks[1].count, back.stacks[1].samples),
        (250_000_000, 0)
    );
    assert_eq!(
        (back.stacks[0].count, back.stacks[0].samples),
        (90 * 1_001_001, 90)
    );
    assert_eq!(back.unit("off-cpu"), crate::profile::Unit::Nanoseconds);

    // The wall view: one time column, which the profile opens on.
    let wall = crate::profile::wall_view(&p);
    let msg = super::encode(&wall);
    let s = |i: i64| msg.string_table[i as usize].as_str();
    assert_eq!(msg.sample_type.len(), 2);
    assert_eq!(s(msg.default_sample_type), "wall");
    assert_eq!(msg.sample[0].value, vec![90, 90 * 1_001_001]);
    assert_eq!(msg.sample[1].value, vec![0, 250_000_000]);
}

/// Runtimes' frames (no mapping, a source file) read back as runtimes' frames: tables and
/// folded stacks of a pprof file show `leaf (Chain.java:12)` and module `Chain.java`, as
/// `record` did, whatever the runtime.
#[test]
fn runtime_frames_read_back_as_recorded() {
    let runtime = |name: &str, kind, file: &str| {
        let mut f = Frame::named(name, kind);
        f.file = Some(Arc::from(file));
        f.line = Some(12);
        f
    };
    let frames = [
        runtime("fixture.Chain.leaf", FrameKind::Java, "Chain.java"),
        runtime("inner", FrameKind::JavaScript, "/srv/chain.js"),
        runtime("spin", FrameKind::Python, "/srv/stacks.py"),
        runtime("Chain.leaf", FrameKind::Ruby, "/srv/chain.rb"),
    ];
    let mut p = sample_profile();
    let ids = p.frames.intern_all(&frames).into_vec();
    p.stacks[0].frames = ids.into();
    let mut bytes = Vec::new();
    write_pprof(&p, &mut bytes).unwrap();
    let back = read_pprof(&bytes).unwrap();
    let got: Vec<(FrameKind, String, Option<Arc<str>>)> = back
        .frames_of(&back.stacks[0])
        .map(|f| (f.kind, f.display_name().into_owned(), f.module_label()))
        .collect();
    assert_eq!(
        got,
        [
            (
                FrameKind::Java,
                "fixture.Chain.leaf (Chain.java:12)".to_string(),
                Some(Arc::from("Chain.java"))
            ),
            (
                FrameKind::JavaScript,
                "inner (chain.js:12)".to_string(),
                Some(Arc::from("chain.js"))
            ),
            (
                FrameKind::Python,
                "spin (stacks.py:12)".to_string(),
                Some(Arc::from("stacks.py"))
            ),
            (
                FrameKind::Ruby,
                "Chain.leaf (chain.rb:12)".to_string(),
                Some(Arc::from("chain.rb"))
            ),
        ]
    );
}
