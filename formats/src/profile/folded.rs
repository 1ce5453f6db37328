//! Folded stacks (`comm;outer;...;leaf COUNT`), the format FlameGraph and inferno read.
//!
//! A count is the stack's value in its event's unit, as in every view: events (the sum of
//! the samples' periods), nanoseconds for the clocks and off-CPU time; not samples, as
//! `perf script | stackcollapse-perf.pl` counts. Comment lines before the stacks say what
//! the counts are, so `report` and `flamegraph` read a file back with the numbers it was
//! written with:
//!
//! ```text
//! # profiler-folded frequency_hz=99 period=0 duration_ms=2013
//! # profiler-folded event=page-faults samples=200 unit=events
//! ```
//!
//! With several events, each line's first frame is its event (FlameGraph tools then draw
//! them side by side: give them one event's lines). Other tools skip the comment lines
//! (flamegraph.pl and inferno count them as ignored lines).

use std::{collections::BTreeMap, io, sync::Arc};

use super::{Profile, Unit};
use crate::symbolize::{Frame, FrameKind};

/// The start of the comment lines that describe a folded file's counts.
const HEADER: &str = "# profiler-folded ";

/// Folded-format names may not contain the separators; replace them rather than corrupt lines.
fn clean(name: &str) -> String {
    name.replace([';', '\n', '\r'], ":").replace(' ', "_")
}

/// A frame's name keeps its spaces (`block in Foo#bar (foo.rb:3)`, `operator new(unsigned
/// long)`): tools read the count after the line's last space, and inferno and flamegraph.pl
/// show names as written, as perf's stackcollapse leaves them.
fn clean_frame(name: &str) -> String {
    name.replace([';', '\n', '\r'], ":")
}

/// Folded lines of `profile`, merged and sorted (deterministic output). Kernel frames carry
/// the `_[k]` suffix FlameGraph uses to colour them. With stacks of several events, each
/// line starts with its event.
pub fn folded_lines(profile: &Profile) -> BTreeMap<String, u64> {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    let several = profile.events().len() > 1;
    for stack in &profile.stacks {
        let mut line = if several {
            format!("{};", clean(&stack.event))
        } else {
            String::new()
        };
        line.push_str(&clean(&stack.comm));
        for frame in profile.frames_of(stack) {
            line.push(';');
            line.push_str(&clean_frame(&frame.display_name()));
            if frame.kind == FrameKind::Kernel {
                line.push_str("_[k]");
            }
        }
        let count = lines.entry(guard_tail(line)).or_default();
        *count = count.saturating_add(stack.count);
    }
    lines
}

/// A line whose last frame ends in ` 123` or ` 1.5` would be read by inferno and
/// flamegraph.pl as having two counts (a differential line, whose delta inferno's colouring
/// overflows on) and by our own reader as a different stack: that last space becomes `_`.
/// So does whitespace ending the line (inferno trims it before looking for a count).
fn guard_tail(mut line: String) -> String {
    let end = line.trim_end().len();
    if end < line.len() {
        let trailing = line[end..].chars().count();
        line.replace_range(end.., &"_".repeat(trailing));
    }
    if let Some(space) = line.rfind(' ') {
        let tail = &line[space + 1..];
        let (whole, frac) = tail.split_once('.').unwrap_or((tail, ""));
        if whole
            .chars()
            .chain(frac.chars())
            .all(|c| c.is_ascii_digit())
        {
            line.replace_range(space..=space, "_");
        }
    }
    line
}

/// The stack under which lost samples appear, so every flame graph shows the loss.
pub const LOST_STACK: &str = "[lost samples]";
/// The line giving the number of children of targets that could not be followed (its count
/// is processes, not samples: their samples are missing).
pub const UNTRACKED_STACK: &str = "[children not followed]";

/// The comment lines that say what the counts are: the run's rate and duration, then each
/// event with its samples and unit.
fn header(profile: &Profile) -> String {
    let info = &profile.info;
    // Samples the kernel skipped, when there were any (older files have no such field).
    let skipped = match info.skipped {
        0 => String::new(),
        n => format!(" skipped={n}"),
    };
    let mut out = format!(
        "{HEADER}frequency_hz={} period={} duration_ms={} lost={}{skipped}\n",
        info.frequency_hz,
        info.period.unwrap_or(0),
        info.duration_ms,
        info.lost
    );
    for event in profile.events() {
        let samples = profile
            .stacks
            .iter()
            .filter(|s| s.event == event)
            .fold(0u64, |n, s| n.saturating_add(s.samples));
        let samples = match profile.info.event_samples.get(event.as_ref()) {
            Some(&n) if samples == 0 => n,
            _ => samples,
        };
        out += &format!(
            "{HEADER}event={} samples={samples} unit={}\n",
            clean(&event),
            profile.unit(&event).short()
        );
    }
    out
}

/// Writes folded lines after the header comments; samples the kernel lost get a line of
/// their own ([`LOST_STACK`]).
pub fn write_folded(profile: &Profile, out: &mut impl io::Write) -> io::Result<()> {
    // Folded stacks of samples of unknown weight (read from other tools) stay as they were.
    let weighted = profile
        .events()
        .iter()
        .any(|e| profile.unit(e) != Unit::Samples);
    if weighted {
        out.write_all(header(profile).as_bytes())?;
    }
    write_stacks(profile, out)
}

/// The stack lines alone (what inferno draws). Lost samples weigh what the profile's
/// samples weigh on average, so their tower is in the unit of the others (the header keeps
/// their number).
pub(super) fn write_stacks(profile: &Profile, out: &mut impl io::Write) -> io::Result<()> {
    for (line, count) in folded_lines(profile) {
        writeln!(out, "{line} {count}")?;
    }
    if profile.info.lost > 0 {
        let (total, samples) = (profile.total(), profile.info.samples);
        let lost = match profile.events().first() {
            Some(e) if profile.unit(e) != Unit::Samples && samples > 0 && total > 0 => {
                (u128::from(profile.info.lost) * u128::from(total) / u128::from(samples))
                    .min(u128::from(u64::MAX)) as u64
            }
            _ => profile.info.lost,
        };
        writeln!(out, "{LOST_STACK} {}", lost.max(1))?;
    }
    if profile.info.untracked > 0 {
        writeln!(out, "{UNTRACKED_STACK} {}", profile.info.untracked)?;
    }
    Ok(())
}

/// What the header comments of a folded file say.
#[derive(Default)]
struct Header {
    /// Events with their samples and units, in order.
    events: Vec<(String, u64, Unit)>,
    frequency_hz: u64,
    period: u64,
    duration_ms: u64,
    lost: Option<u64>,
    skipped: u64,
}

impl Header {
    fn parse(&mut self, line: &str) {
        let fields: BTreeMap<&str, &str> = line
            .split(' ')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let num = |k: &str| fields.get(k).and_then(|v| v.parse::<u64>().ok());
        if let Some(event) = fields.get("event") {
            let unit = match fields.get("unit").copied() {
                Some("ns") => Unit::Nanoseconds,
                Some("events") => Unit::Events,
                _ => Unit::Samples,
            };
            self.events
                .push((event.to_string(), num("samples").unwrap_or(0), unit));
            return;
        }
        self.frequency_hz = num("frequency_hz").unwrap_or(self.frequency_hz);
        self.period = num("period").unwrap_or(self.period);
        self.duration_ms = num("duration_ms").unwrap_or(self.duration_ms);
        self.lost = num("lost").or(self.lost);
        self.skipped = num("skipped").unwrap_or(self.skipped);
    }
}

/// A profile from folded text: the first name of each line is the command (the convention
/// of stackcollapse-perf and of [`write_folded`]), after its event when the header names
/// several; `_[k]` marks kernel frames, and a [`LOST_STACK`] line gives the lost count.
/// Without a header (other tools' files) the counts are samples of an unnamed event.
pub fn profile_from_folded(text: &str) -> Result<Profile, FoldedError> {
    let mut profile = Profile::default();
    let mut header = Header::default();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix(HEADER) {
            header.parse(h);
        }
    }
    let lines = parse_folded(text)?;
    // Counts are in one unit per event: a file whose counts add up past u64 is not a
    // profile.
    lines
        .iter()
        .try_fold(0u64, |sum, (_, n)| sum.checked_add(*n))
        .ok_or(FoldedError::TooMany)?;
    let several = header.events.len() > 1;
    let weighted = header.events.iter().any(|(_, _, u)| *u != Unit::Samples);
    for (names, count) in lines {
        if names.len() == 1 && names[0] == LOST_STACK {
            profile.info.lost += count;
            continue;
        }
        if names.len() == 1 && names[0] == UNTRACKED_STACK {
            profile.info.untracked += count;
            continue;
        }
        let mut names = names.into_iter();
        let event = match (several, header.events.first()) {
            (true, _) => names.next().unwrap_or_default(),
            (false, Some((e, _, _))) => e.clone(),
            (false, None) => "samples".to_string(),
        };
        let comm = names.next().unwrap_or_default();
        let frames: Vec<Frame> = names
            .map(|n| match n.strip_suffix("_[k]") {
                Some(k) => Frame::named(k, FrameKind::Kernel),
                None => Frame::named(&n, FrameKind::User),
            })
            .collect();
        let stack = profile.push(&event, &comm, &frames, count);
        if weighted {
            // The samples of each stack are not in the file; each event's are, in the header.
            stack.samples = 0;
        }
    }
    for (event, samples, unit) in &header.events {
        let name: Arc<str> = Arc::from(event.as_str());
        profile.units.insert(name, *unit);
        if weighted {
            profile.info.event_samples.insert(event.clone(), *samples);
        }
    }
    let info = &mut profile.info;
    info.frequency_hz = header.frequency_hz;
    info.period = (header.period > 0).then_some(header.period);
    info.duration_ms = header.duration_ms;
    info.skipped = header.skipped;
    if let Some(lost) = header.lost {
        // The lost line's count is in the events' unit; the header has the samples.
        info.lost = lost;
    }
    info.event = header
        .events
        .iter()
        .map(|(e, _, _)| e.as_str())
        .collect::<Vec<_>>()
        .join(",");
    info.samples = match weighted {
        true => info.event_samples.values().sum(),
        false => 0,
    };
    if !weighted {
        profile.info.samples = profile.samples();
    }
    Ok(profile)
}

/// Reads folded text back as (frames, count) pairs. Lines that do not end in a count are an
/// error naming the line number: the input is not what it claims to be.
/// Why text is not folded stacks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FoldedError {
    #[error("line {line}: no sample count")]
    NoCount { line: usize },
    #[error("line {line}: bad sample count {count:?}")]
    BadCount { line: usize, count: String },
    #[error("sample counts add up to more than 2^64")]
    TooMany,
}

pub fn parse_folded(text: &str) -> Result<Vec<(Vec<String>, u64)>, FoldedError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        // Blank lines and comments (the header of [`write_folded`]) carry no stack.
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (stack, count) = line
            .rsplit_once(' ')
            .ok_or(FoldedError::NoCount { line: i + 1 })?;
        let count: u64 = count.parse().map_err(|_| FoldedError::BadCount {
            line: i + 1,
            count: count.to_string(),
        })?;
        out.push((stack.split(';').map(str::to_string).collect(), count));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::symbolize::{Frame, FrameKind};

    /// Adds a cpu-clock stack of named frames (`k:` marks a kernel frame).
    fn stack(profile: &mut Profile, comm: &str, names: &[&str], count: u64) {
        let frames: Vec<Frame> = names
            .iter()
            .map(|n| match n.strip_prefix("k:") {
                Some(k) => Frame::named(k, FrameKind::Kernel),
                None => Frame::named(n, FrameKind::User),
            })
            .collect();
        profile.push("cpu-clock", comm, &frames, count);
    }

    /// What [`write_folded`] writes for `profile`.
    fn written(profile: &Profile) -> String {
        let mut out = Vec::new();
        write_folded(profile, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_last_frame_ending_in_a_number_is_not_read_as_a_second_count() {
        let mut profile = Profile::default();
        stack(
            &mut profile,
            "ch",
            &["outer", "m(iddla 368938881474191032"],
            1,
        );
        stack(&mut profile, "ch", &["f 1.5"], 3);
        stack(&mut profile, "ch", &["keeps its space (a.rb:3)"], 2);
        stack(&mut profile, "ch", &["g 6\u{c}"], 4);
        let lines: Vec<_> = folded_lines(&profile).into_keys().collect();
        assert_eq!(
            lines,
            [
                "ch;f_1.5",
                "ch;g 6_",
                "ch;keeps its space (a.rb:3)",
                "ch;outer;m(iddla_368938881474191032"
            ]
        );
        // The fuzzer's input (fuzz/ found it): inferno drew it as a differential and
        // overflowed; now it is one stack of one count, read back as written.
        let text = "ch>>>;outer;m(iddla 368938881474191032 1\n[;st 16 1\n[lost sampl# e+s] 3\n";
        let profile = profile_from_folded(text).unwrap();
        let mut svg = Vec::new();
        crate::profile::write_flamegraph(&profile, "t", &mut svg).unwrap();
        let again = profile_from_folded(&written(&profile)).unwrap();
        assert_eq!(folded_lines(&again), folded_lines(&profile));
        // A frame ending in a form feed after a number (found by the fuzzer next).
        let text = "c;ple 6\u{c} 1\nc;other 3074457345635682 2\n";
        let profile = profile_from_folded(text).unwrap();
        crate::profile::write_flamegraph(&profile, "t", &mut Vec::new()).unwrap();
    }

    #[test]
    fn golden_folded_output() {
        let mut profile = Profile::default();
        stack(
            &mut profile,
            "chain",
            &["main", "outer", "middle", "leaf"],
            90,
        );
        stack(
            &mut profile,
            "chain",
            &[
                "main",
                "outer",
                "middle",
                "leaf",
                "k:asm_sysvec_apic_timer_interrupt",
            ],
            3,
        );
        stack(
            &mut profile,
            "chain",
            &["main", "outer", "middle", "leaf"],
            5,
        );
        stack(&mut profile, "my prog", &["f;g", "[libc.so.6]"], 2);
        let expected = "\
# profiler-folded frequency_hz=0 period=0 duration_ms=0 lost=0
# profiler-folded event=cpu-clock samples=100 unit=ns
chain;main;outer;middle;leaf 95
chain;main;outer;middle;leaf;asm_sysvec_apic_timer_interrupt_[k] 3
my_prog;f:g;[libc.so.6] 2
";
        assert_eq!(written(&profile), expected);
    }

    #[test]
    fn lost_samples_have_their_own_line_and_read_back() {
        let mut profile = Profile::default();
        stack(&mut profile, "chain", &["main", "k:irq"], 4);
        profile.info.lost = 9;
        let text = written(&profile);
        assert_eq!(
            text,
            "# profiler-folded frequency_hz=0 period=0 duration_ms=0 lost=9\n\
             # profiler-folded event=cpu-clock samples=4 unit=ns\n\
             chain;main;irq_[k] 4\n[lost samples] 9\n"
        );
        let back = profile_from_folded(&text).unwrap();
        assert_eq!(back.info.lost, 9);
        assert_eq!(back.info.samples, 4);
        assert_eq!(back.stacks[0].comm.as_ref(), "chain");
        let frames: Vec<&Frame> = back.frames_of(&back.stacks[0]).collect();
        let kinds: Vec<_> = frames.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, [FrameKind::User, FrameKind::Kernel]);
        assert_eq!(frames[1].function.as_ref(), "irq");
    }

    #[test]
    fn samples_the_kernel_skipped_are_in_the_header_and_read_back() {
        let mut profile = Profile::default();
        stack(&mut profile, "chain", &["main"], 4);
        profile.info.skipped = 12;
        let text = written(&profile);
        assert!(
            text.starts_with(
                "# profiler-folded frequency_hz=0 period=0 duration_ms=0 lost=0 skipped=12\n"
            ),
            "{text}"
        );
        assert_eq!(profile_from_folded(&text).unwrap().info.skipped, 12);
    }

    #[test]
    fn folded_reads_back_into_shared_frames_and_writes_the_same_text() {
        let text = "\
chain;main;other 7
chain;main;outer;leaf 90
chain;main;outer;leaf;irq_[k] 3
my_prog;main;[libc.so.6] 2
[lost samples] 4
";
        let profile = profile_from_folded(text).unwrap();
        // main (twice: user in chain and in my_prog is the same frame), outer, leaf, irq,
        // other, [libc.so.6].
        assert_eq!(profile.frames.len(), 6);
        let main = profile.stacks[0].frames[0];
        assert!(profile.stacks.iter().all(|s| s.frames[0] == main));
        assert_eq!(profile.stacks[2].frames[..3], profile.stacks[1].frames[..]);
        // Commands and events are shared strings too.
        let (a, b) = (&profile.stacks[0], &profile.stacks[2]);
        assert!(Arc::ptr_eq(&a.comm, &b.comm) && Arc::ptr_eq(&a.event, &b.event));
        assert_eq!(written(&profile), text);
    }

    #[test]
    fn two_events_read_back_with_their_units_and_samples() {
        let mut profile = Profile::default();
        let f = |n: &str| Frame::named(n, FrameKind::User);
        // 20 samples of cpu-clock at 999 Hz, and 7 of page-faults standing for 5000 faults.
        profile
            .push("cpu-clock", "t", &[f("main"), f("spin")], 20 * 1_001_001)
            .samples = 20;
        profile
            .push("page-faults", "t", &[f("main"), f("touch")], 4_990)
            .samples = 6;
        profile.push("page-faults", "t", &[f("_start")], 10).samples = 1;
        profile.info.frequency_hz = 999;
        profile.info.duration_ms = 1_500;
        profile.info.lost = 2;
        profile.info.samples = 27;
        let text = written(&profile);
        assert!(
            text.starts_with(
                "# profiler-folded frequency_hz=999 period=0 duration_ms=1500 lost=2\n\
                 # profiler-folded event=cpu-clock samples=20 unit=ns\n\
                 # profiler-folded event=page-faults samples=7 unit=events\n\
                 cpu-clock;t;main;spin 20020020\n"
            ),
            "{text}"
        );
        let back = profile_from_folded(&text).unwrap();
        assert_eq!(back.info.lost, 2);
        assert_eq!(back.info.frequency_hz, 999);
        for (event, value, samples, unit) in [
            ("cpu-clock", 20 * 1_001_001, 20, Unit::Nanoseconds),
            ("page-faults", 5_000, 7, Unit::Events),
        ] {
            let one = back.for_event(event);
            assert_eq!(one.total(), value, "{event}");
            assert_eq!(one.info.samples, samples, "{event}");
            assert_eq!(back.unit(event), unit, "{event}");
            let mine = profile.for_event(event);
            assert_eq!(
                crate::profile::summary_line(&one),
                crate::profile::summary_line(&mine),
                "{event}: the same heading as the profile written"
            );
        }
        let mut again = Vec::new();
        write_folded(&back, &mut again).unwrap();
        assert_eq!(
            String::from_utf8(again).unwrap(),
            text,
            "written back the same"
        );
    }

    #[test]
    fn parses_folded_and_rejects_garbage() {
        let parsed = parse_folded("a;b;c 3\n\nx 1\n").unwrap();
        assert_eq!(
            parsed,
            vec![
                (vec!["a".into(), "b".into(), "c".into()], 3),
                (vec!["x".into()], 1)
            ]
        );
        assert_eq!(
            parse_folded("a;b;c\n").unwrap_err().to_string(),
            "line 1: no sample count"
        );
        assert_eq!(
            parse_folded("a 1\nb x\n").unwrap_err().to_string(),
            "line 2: bad sample count \"x\""
        );
    }
}
