//! The text report `record` prints and `profiler report` renders from a file: a summary line
//! (with the lost count), a top table per event, and the hottest stack.

use std::fmt::Write as _;

use super::{
    By, Profile, Sort, TopTable, group_table::Ratio, group_table::render_group_table, is_time_event,
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

/// One line: samples, event, rate, duration, lost, filtered (and stack errors when any).
pub fn summary_line(profile: &Profile) -> String {
    let info = &profile.info;
    let event = if info.event.is_empty() {
        "samples"
    } else {
        &info.event
    };
    let rate = match (info.period, info.frequency_hz) {
        (Some(n), _) => format!(" every {n} events"),
        (None, 0) => String::new(),
        (None, hz) => format!(" at {hz} Hz"),
    };
    let mut errors = String::new();
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
    let mut line = format!(
        "{} samples of {event}{rate} in {:.2} s; lost {}; filtered in kernel {}{errors}\n",
        info.samples,
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

/// The whole report as text.
pub fn render_report(profile: &Profile, opts: ReportOptions) -> String {
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
    }
    let mut events = profile.events();
    // Sampled events first, off-CPU time after them.
    events.sort_by_key(|e| is_time_event(e));
    for event in events.iter().filter(|_| profile.info.counters.is_empty()) {
        if events.len() > 1 && opts.by != By::Event {
            let _ = writeln!(out, "== {event} ==");
        }
        let part = if opts.by == By::Event {
            profile.clone()
        } else {
            profile.for_event(event)
        };
        if is_time_event(event) && opts.by != By::Event {
            let _ = writeln!(out, "({event}: the SAMPLES column is nanoseconds)");
        }
        out.push_str(&TopTable::build_by(&part, opts.by, opts.sort).render(opts.limit));
        if opts.by == By::Event {
            break;
        }
    }
    // Samples and nanoseconds do not add up: the hottest stack is of the first event then.
    let mixed = events.iter().any(|e| is_time_event(e)) && events.len() > 1;
    let hottest = match mixed {
        true => profile.for_event(&events[0]).hottest(),
        false => profile.hottest(),
    };
    if let Some(hot) = hottest {
        let chain: Vec<&str> = profile
            .frames_of(&hot)
            .map(|f| f.function.as_ref())
            .collect();
        let _ = writeln!(
            out,
            "hottest stack ({:.1}%, {}): {}",
            100.0 * hot.count as f64
                / match mixed {
                    true => profile.for_event(&events[0]).total(),
                    false => profile.total(),
                }
                .max(1) as f64,
            hot.comm,
            chain.join(" > ")
        );
    }
    out
}
