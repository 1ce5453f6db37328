//! Folded stacks (`comm;outer;...;leaf COUNT`), the format FlameGraph and inferno read.

use std::{collections::BTreeMap, io};

use super::Profile;
use crate::symbolize::{Frame, FrameKind};

/// Folded-format names may not contain the separators; replace them rather than corrupt lines.
fn clean(name: &str) -> String {
    name.replace([';', '\n', '\r'], ":").replace(' ', "_")
}

/// Folded lines of `profile`, merged and sorted (deterministic output). Kernel frames carry
/// the `_[k]` suffix FlameGraph uses to colour them. With samples of several events, each
/// line starts with its event, so one flame graph shows them side by side.
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
            line.push_str(&clean(&frame.function));
            if frame.kind == FrameKind::Kernel {
                line.push_str("_[k]");
            }
        }
        *lines.entry(line).or_default() += stack.count;
    }
    lines
}

/// The stack under which lost samples appear, so every flame graph shows the loss.
pub const LOST_STACK: &str = "[lost samples]";
/// The line giving the number of children of targets that could not be followed (its count
/// is processes, not samples: their samples are missing).
pub const UNTRACKED_STACK: &str = "[children not followed]";

/// Writes folded lines; samples the kernel lost get a line of their own ([`LOST_STACK`]).
pub fn write_folded(profile: &Profile, out: &mut impl io::Write) -> io::Result<()> {
    for (line, count) in folded_lines(profile) {
        writeln!(out, "{line} {count}")?;
    }
    if profile.info.lost > 0 {
        writeln!(out, "{LOST_STACK} {}", profile.info.lost)?;
    }
    if profile.info.untracked > 0 {
        writeln!(out, "{UNTRACKED_STACK} {}", profile.info.untracked)?;
    }
    Ok(())
}

/// A profile from folded text: the first name of each line is the command (the convention
/// of stackcollapse-perf and of [`write_folded`]), `_[k]` marks kernel frames, and a
/// [`LOST_STACK`] line gives the lost count.
pub fn profile_from_folded(text: &str) -> Result<Profile, String> {
    let mut profile = Profile::default();
    let lines = parse_folded(text)?;
    // Counts are samples: a file whose counts add up past u64 is not a profile.
    lines
        .iter()
        .try_fold(0u64, |sum, (_, n)| sum.checked_add(*n))
        .ok_or("sample counts add up to more than 2^64")?;
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
        let comm = names.next().unwrap_or_default();
        let frames: Vec<Frame> = names
            .map(|n| match n.strip_suffix("_[k]") {
                Some(k) => Frame::named(k, FrameKind::Kernel),
                None => Frame::named(&n, FrameKind::User),
            })
            .collect();
        profile.push("samples", &comm, &frames, count);
    }
    profile.info.samples = profile.total();
    Ok(profile)
}

/// Reads folded text back as (frames, count) pairs. Lines that do not end in a count are an
/// error naming the line number: the input is not what it claims to be.
pub fn parse_folded(text: &str) -> Result<Vec<(Vec<String>, u64)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (stack, count) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("line {}: no sample count", i + 1))?;
        let count: u64 = count
            .parse()
            .map_err(|_| format!("line {}: bad sample count {count:?}", i + 1))?;
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
        let mut out = Vec::new();
        write_folded(&profile, &mut out).unwrap();
        let expected = "\
chain;main;outer;middle;leaf 95
chain;main;outer;middle;leaf;asm_sysvec_apic_timer_interrupt_[k] 3
my_prog;f:g;[libc.so.6] 2
";
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn lost_samples_have_their_own_line_and_read_back() {
        let mut profile = Profile::default();
        stack(&mut profile, "chain", &["main", "k:irq"], 4);
        profile.info.lost = 9;
        let mut out = Vec::new();
        write_folded(&profile, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "chain;main;irq_[k] 4\n[lost samples] 9\n");
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
        let mut out = Vec::new();
        write_folded(&profile, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), text);
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
            parse_folded("a;b;c\n").unwrap_err(),
            "line 1: no sample count"
        );
        assert!(
            parse_folded("a 1\nb x\n")
                .unwrap_err()
                .starts_with("line 2: bad sample count")
        );
    }
}
