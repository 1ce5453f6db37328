//! What a stack's value counts, per event. A sample taken at a frequency stands for its
//! period's worth of events, so every view counts events, not samples: page faults for
//! `page-faults`, nanoseconds for the clocks (`cpu-clock`, `task-clock`, whose periods are
//! nanoseconds) and for off-CPU and wall time. Values of different units are never added.

use std::fmt;

use super::Profile;

/// The unit of an event's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Events the kernel counted (pprof unit `count`).
    Events,
    /// Nanoseconds: CPU time of the clock events, off-CPU and wall time.
    Nanoseconds,
    /// Samples of unknown weight (folded stacks or pprof samples of other tools).
    Samples,
}

/// Events whose values are nanoseconds: the clocks (their periods are nanoseconds) and the
/// time views.
const TIME_EVENTS: [&str; 4] = ["cpu-clock", "task-clock", "off-cpu", "wall"];

impl Unit {
    /// The unit of an event recorded here, by its name.
    pub fn of_event(event: &str) -> Unit {
        if TIME_EVENTS.contains(&event) {
            Unit::Nanoseconds
        } else if event == "samples" || event.is_empty() {
            Unit::Samples
        } else {
            Unit::Events
        }
    }

    /// The unit's name in pprof's `ValueType.unit`.
    pub fn pprof(self) -> &'static str {
        match self {
            Unit::Nanoseconds => "nanoseconds",
            Unit::Events | Unit::Samples => "count",
        }
    }

    /// The unit of a pprof `ValueType.unit` of a column named after an event.
    pub fn from_pprof(unit: &str) -> Unit {
        match unit {
            "nanoseconds" => Unit::Nanoseconds,
            _ => Unit::Events,
        }
    }

    /// A short name for headings and lists: `events`, `ns`, `samples`.
    pub fn short(self) -> &'static str {
        match self {
            Unit::Events => "events",
            Unit::Nanoseconds => "ns",
            Unit::Samples => "samples",
        }
    }

    /// The heading of a table's value column.
    pub fn column(self) -> &'static str {
        match self {
            Unit::Events => "EVENTS",
            Unit::Nanoseconds => "TIME",
            Unit::Samples => "SAMPLES",
        }
    }

    /// A value in this unit as people read it: time as time (`2.00 s`, `12.5 ms`).
    pub fn show(self, value: u64) -> Shown {
        Shown(self, value, " ")
    }

    /// As [`Unit::show`], in one word for table columns (`2.00s`).
    pub fn cell(self, value: u64) -> Shown {
        Shown(self, value, "")
    }
}

/// A value with its unit, for display (see [`Unit::show`]).
pub struct Shown(Unit, u64, &'static str);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Shown(unit, v, space) = *self;
        let text = match unit {
            Unit::Nanoseconds => time(v, space),
            Unit::Events | Unit::Samples => v.to_string(),
        };
        f.pad(&text)
    }
}

/// Nanoseconds as seconds, milliseconds or microseconds, three significant digits.
fn time(ns: u64, space: &str) -> String {
    let ns = ns as f64;
    let (v, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "us")
    } else {
        return format!("{ns}{space}ns");
    };
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$}{space}{unit}")
}

impl Profile {
    /// The unit of `event`'s values: as the file said, else by the event's name.
    pub fn unit(&self, event: &str) -> Unit {
        self.units
            .get(event)
            .copied()
            .unwrap_or_else(|| Unit::of_event(event))
    }

    /// `event` and its unit, as named in lists: `off-cpu (ns)`.
    pub fn event_with_unit(&self, event: &str) -> String {
        format!("{event} ({})", self.unit(event).short())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_by_event_and_time_shown_as_time() {
        assert_eq!(Unit::of_event("cpu-clock"), Unit::Nanoseconds);
        assert_eq!(Unit::of_event("off-cpu"), Unit::Nanoseconds);
        assert_eq!(Unit::of_event("page-faults"), Unit::Events);
        assert_eq!(Unit::of_event("samples"), Unit::Samples);
        let ns = Unit::Nanoseconds;
        assert_eq!(ns.show(2_002_542_432).to_string(), "2.00 s");
        assert_eq!(ns.show(12_500_000).to_string(), "12.5 ms");
        assert_eq!(ns.show(101_010_100).to_string(), "101 ms");
        assert_eq!(ns.show(999).to_string(), "999 ns");
        assert_eq!(format!("{:>8}", Unit::Events.show(42)), "      42");
        assert_eq!(ns.cell(2_002_542_432).to_string(), "2.00s");
    }
}
