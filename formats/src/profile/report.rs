//! The text report `record` prints and `profiler report` renders from a file: a summary line
//! (with the lost count), the top table of one event in its unit, and the hottest stack.

use std::{fmt::Write as _, sync::Arc};

use super::{
    By, Profile, Sort, TopTable, Unit, group_table::Ratio, group_table::render_group_table,
    is_time_event,
};

/// How to render the report.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    pub by: By,
    pub sort: Sort,
    pub limit: usize,
    /// Ratio columns of a counter group's table (`--ratio A/B`).
    pub ratios: Vec<Ratio>,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            by: By::Function,
            sort: Sort::SelfSamples,
            limit: 25,
            ratios: Vec::new(),
        }
    }
}

/// The event a report or flame graph shows when none is asked for: the first sampled one
/// (time off the CPU after samples); `None` for a profile without stacks.
pub fn default_event(profile: &Profile) -> Option<Arc<str>> {
    events_in_order(profile).into_iter().next()
}

/// The events of the profile (not a group's counters), sampled events first, then time
/// off the CPU.
fn events_in_order(profile: &Profile) -> Vec<Arc<str>> {
    let mut events: Vec<Arc<str>> = profile
        .events()
        .into_iter()
        .filter(|e| !profile.is_counter(e))
        .collect();
    events.sort_by_key(|e| is_time_event(e));
    events
}

/// The profile narrowed to its default event (a counter group stays whole: its counters are
/// columns of one table), and the line naming the events left out, for stderr.
pub fn one_event(profile: &Profile) -> (Profile, Option<String>) {
    let Some(shown) = default_event(profile) else {
        return (profile.clone(), None);
    };
    let others: Vec<String> = profile
        .events()
        .iter()
        .filter(|e| **e != shown && !profile.is_counter(e))
        .map(|e| profile.event_with_unit(e))
        .collect();
    if others.is_empty() {
        let mut one = profile.clone();
        if profile.info.counters.is_empty() {
            one = profile.for_event(&shown);
        }
        return (one, None);
    }
    let note = format!(
        "also in this profile: {}; pick one with -e",
        others.join(", ")
    );
    (profile.for_event(&shown), Some(note))
}

/// One line: samples, event, rate, value in the event's unit, duration, lost, filtered (and
/// stack errors when any).
pub fn summary_line(profile: &Profile) -> String {
    let info = &profile.info;
    // The one event of a narrowed profile (its sampled event for a counter group).
    let event = default_event(profile);
    let rate = match (info.period, info.frequency_hz) {
        // A clock's period is time.
        (Some(n), _)
            if event
                .as_ref()
                .is_some_and(|e| profile.unit(e) == Unit::Nanoseconds) =>
        {
            format!(" every {n} ns")
        }
        (Some(n), _) => format!(" every {n} events"),
        (None, 0) => String::new(),
        (None, hz) => format!(" at {hz} Hz"),
    };
    let mut errors = String::new();
    if info.skipped > 0 {
        // A clock's timer that fired late, or a throttled event: never sampled at all.
        errors += &format!("; skipped by the kernel {}", info.skipped);
    }
    if info.stack_errors > 0 {
        errors += &format!("; stack walk errors {}", info.stack_errors);
    }
    if info.collisions > 0 {
        errors += &format!("; stack hash collisions {}", info.collisions);
    }
    if info.unsymbolized > 0 {
        errors += &format!("; files not symbolized {}", info.unsymbolized);
    }
    if info.refused > 0 {
        errors += &format!("; files refused {}", info.refused);
    }
    if info.untracked > 0 {
        errors += &format!("; children not followed {}", info.untracked);
    }
    let several = profile
        .events()
        .iter()
        .filter(|e| !profile.is_counter(e))
        .count()
        > 1;
    let what = match &event {
        // Several events (a file written whole): their samples, no sum across units.
        _ if several => {
            let events: Vec<String> = events_in_order(profile)
                .iter()
                .map(|e| profile.event_with_unit(e))
                .collect();
            format!("{} samples of {}{rate}", info.samples, events.join(", "))
        }
        // No stacks: the run's events, as recorded.
        None if !info.event.is_empty() => {
            format!("{} samples of {}{rate}", info.samples, info.event)
        }
        None => format!("{} samples{rate}", info.samples),
        Some(e) if is_time_event(e) => {
            format!("{} of {e}", profile.unit(e).show(profile.total()))
        }
        Some(e) => match profile.unit(e) {
            Unit::Samples if e.as_ref() == "samples" => format!("{} samples", info.samples),
            Unit::Samples => format!("{} samples of {e}{rate}", info.samples),
            Unit::Events => format!(
                "{} samples of {e}{rate} ({} events)",
                info.samples,
                profile.total()
            ),
            Unit::Nanoseconds => format!(
                "{} samples of {e}{rate} ({})",
                info.samples,
                profile.unit(e).show(profile.total())
            ),
        },
    };
    let mut line = format!(
        "{what} in {:.2} s; lost {}; filtered in kernel {}{errors}\n",
        info.duration_ms as f64 / 1000.0,
        info.lost,
        info.filtered,
    );
    for c in &info.counters {
        line += &format!(
            "{}: {} counted = {} on stacks + {} unattributed\n",
            c.name,
            c.total,
            c.total - c.unattributed,
            c.unattributed
        );
    }
    line
}

/// The events of the profile side by side, each in its own unit (`--by event`): nothing is
/// added across them.
fn event_table(profile: &Profile) -> String {
    let mut out = format!("{:<24} {:>10}  VALUE\n", "EVENT", "SAMPLES");
    let counters = profile.info.counters.iter();
    for event in events_in_order(profile)
        .into_iter()
        .chain(counters.map(|c| Arc::from(c.name.as_str())))
    {
        let (mut samples, mut value) = (0u64, 0u64);
        for s in profile.stacks.iter().filter(|s| s.event == event) {
            samples = samples.saturating_add(s.samples);
            value = value.saturating_add(s.count);
        }
        if samples == 0 {
            samples = profile
                .info
                .event_samples
                .get(event.as_ref())
                .copied()
                .unwrap_or(0);
        }
        let unit = profile.unit(&event);
        let shown = match unit {
            Unit::Nanoseconds => unit.show(value).to_string(),
            _ => format!("{value} {}", unit.short()),
        };
        let _ = writeln!(out, "{:<24} {samples:>10}  {shown}", event.as_ref());
    }
    out
}

/// The whole report as text, of one event: a profile of several is narrowed to its first
/// ([`one_event`]; `--by event` lists them all, each in its unit).
pub fn render_report(profile: &Profile, opts: ReportOptions) -> String {
    // A counter group's table by event has a column per event already.
    if opts.by == By::Event && profile.info.counters.is_empty() {
        let mut out = summary_line(profile);
        out.push_str(&event_table(profile));
        return out;
    }
    let several = profile
        .events()
        .iter()
        .filter(|e| !profile.is_counter(e))
        .count()
        > 1;
    let narrowed;
    let profile = match several {
        true => {
            narrowed = one_event(profile).0;
            &narrowed
        }
        false => profile,
    };
    let mut out = summary_line(profile);
    if profile.total() == 0 {
        out.push_str("no samples: the target used no CPU while it was profiled\n");
        return out;
    }
    if !profile.info.counters.is_empty() {
        // A counter group: one table, a column per counter.
        out.push_str(&render_group_table(
            profile,
            opts.by,
            opts.sort,
            opts.limit,
            &opts.ratios,
        ));
    } else {
        out.push_str(&TopTable::build_by(profile, opts.by, opts.sort).render(opts.limit));
    }
    if let Some(hot) = profile.hottest() {
        let chain: Vec<&str> = profile
            .frames_of(&hot)
            .map(|f| f.function.as_ref())
            .collect();
        let _ = writeln!(
            out,
            "hottest stack ({:.1}%, {}): {}",
            100.0 * hot.count as f64 / profile.total().max(1) as f64,
            hot.comm,
            chain.join(" > ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::{Frame, FrameKind};

    fn profile() -> Profile {
        let f = |n| Frame::named(n, FrameKind::User);
        let mut p = Profile::default();
        p.push("cpu-clock", "a", &[f("main"), f("spin")], 20 * 1_001_001)
            .samples = 20;
        p.push(
            "off-cpu",
            "a",
            &[f("main"), f("sleep"), f("[off-cpu]")],
            2_002_542_432,
        )
        .samples = 0;
        p.info.frequency_hz = 999;
        p.info.duration_ms = 2_500;
        p.info.samples = 20;
        p
    }

    #[test]
    fn headings_name_the_event_and_its_unit_and_never_add_units() {
        let p = profile();
        let (one, note) = one_event(&p);
        assert_eq!(
            note.as_deref(),
            Some("also in this profile: off-cpu (ns); pick one with -e")
        );
        assert_eq!(
            summary_line(&one),
            "20 samples of cpu-clock at 999 Hz (20.0 ms) in 2.50 s; lost 0; filtered in kernel 0\n"
        );
        let off = p.for_event("off-cpu");
        assert!(
            summary_line(&off).starts_with("2.00 s of off-cpu in 2.50 s;"),
            "{}",
            summary_line(&off)
        );
        let text = render_report(&off, ReportOptions::default());
        let first = text.lines().nth(2).unwrap();
        assert!(first.contains(" sleep "), "not the marker first: {text}");
        // --by event: each event in its unit, no shares across them.
        let opts = ReportOptions {
            by: By::Event,
            ..Default::default()
        };
        let by_event = render_report(&p, opts);
        assert!(
            by_event.contains("cpu-clock                        20  20.0 ms"),
            "{by_event}"
        );
        assert!(
            by_event.contains("off-cpu                           0  2.00 s"),
            "{by_event}"
        );
        assert!(!by_event.contains('%'), "{by_event}");
        // A clock sampled every N: N is nanoseconds.
        let mut every = one.clone();
        every.info.period = Some(1_000_000);
        assert!(summary_line(&every).contains(" every 1000000 ns ("));
    }
}
