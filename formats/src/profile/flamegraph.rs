//! Flame graph SVGs, rendered by inferno from the profile's folded stacks: one event at a
//! time, its frames' widths and counts in the event's unit (events, or nanoseconds).

use std::io;

use inferno::{differential, flamegraph};

use super::{Profile, Unit, folded::write_stacks, one_event};

fn folded_text(profile: &Profile) -> io::Result<Vec<u8>> {
    let mut text = Vec::new();
    write_stacks(profile, &mut text)?;
    Ok(text)
}

fn options(title: &str, subtitle: String) -> flamegraph::Options<'static> {
    let mut opts = flamegraph::Options::default();
    opts.title = title.to_string();
    opts.subtitle = Some(subtitle);
    opts.count_name = "samples".into();
    opts
}

/// The run's totals for the subtitle: the event's value in its unit, and what the kernel
/// lost.
fn totals(profile: &Profile) -> String {
    let untracked = match profile.info.untracked {
        0 => String::new(),
        n => format!("; {n} children not followed"),
    };
    let event = super::default_event(profile);
    let event = event.as_deref().unwrap_or("samples");
    let value = match unit(profile) {
        Unit::Events => format!("{} events", profile.total()),
        Unit::Samples => format!("{} samples", profile.total()),
        Unit::Nanoseconds => format!(
            "{} ({} ns)",
            Unit::Nanoseconds.show(profile.total()),
            profile.total()
        ),
    };
    let samples = match unit(profile) {
        Unit::Samples => String::new(),
        _ if profile.info.samples == 0 => String::new(),
        _ => format!(" in {} samples", profile.info.samples),
    };
    format!(
        "{value} of {event}{samples}; lost {} samples{untracked}",
        profile.info.lost
    )
}

/// Renders `profile` as a flame graph SVG, of its first event if it has several (see
/// [`one_event`]). Lost samples appear as their own tower.
pub fn write_flamegraph(
    profile: &Profile,
    title: &str,
    out: &mut impl io::Write,
) -> io::Result<()> {
    let profile = &one_event(profile).0;
    let text = folded_text(profile)?;
    let text = String::from_utf8_lossy(&text);
    if text.trim().is_empty() {
        return write_empty(title, &totals(profile), out);
    }
    let mut opts = options(title, totals(profile));
    opts.count_name = unit(profile).short().into();
    flamegraph::from_lines(&mut opts, text.lines(), out)
}

/// The unit of the profile's (one) event.
fn unit(profile: &Profile) -> Unit {
    super::default_event(profile).map_or(Unit::Samples, |e| profile.unit(&e))
}

/// A run with no samples still gets its file, saying so (inferno refuses empty input).
fn write_empty(title: &str, subtitle: &str, out: &mut impl io::Write) -> io::Result<()> {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    write!(
        out,
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"90\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <text x=\"600\" y=\"24\" text-anchor=\"middle\" font-size=\"17\">{}</text>\n\
         <text x=\"600\" y=\"48\" text-anchor=\"middle\" font-size=\"12\">{}</text>\n\
         <text x=\"600\" y=\"72\" text-anchor=\"middle\" font-size=\"12\">no samples</text>\n\
         </svg>\n",
        esc(title),
        esc(subtitle)
    )
}

/// A differential flame graph: the shape of `after`, coloured by the change from `before`
/// (red grew, blue shrank), with `before` scaled to `after`'s total so load changes do not
/// colour everything.
pub fn write_diff_flamegraph(
    before: &Profile,
    after: &Profile,
    title: &str,
    out: &mut impl io::Write,
) -> io::Result<()> {
    let (before, after) = (&one_event(before).0, &one_event(after).0);
    let (a, b) = (folded_text(before)?, folded_text(after)?);
    let mut diff = Vec::new();
    let opts = differential::Options {
        normalize: true,
        strip_hex: false,
    };
    differential::from_readers(opts, &a[..], &b[..], &mut diff)?;
    let diff = String::from_utf8_lossy(&diff);
    let subtitle = format!("before: {}; after: {}", totals(before), totals(after));
    if diff.trim().is_empty() {
        return write_empty(title, &subtitle, out);
    }
    let mut opts = options(title, subtitle);
    opts.count_name = unit(after).short().into();
    flamegraph::from_lines(&mut opts, diff.lines(), out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::{Frame, FrameKind};

    #[test]
    fn an_empty_profile_is_an_svg_saying_so() {
        let mut out = Vec::new();
        write_flamegraph(&Profile::default(), "a <b>", &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.contains(">a &lt;b&gt;</text>") && svg.contains(">no samples</text>"));
        let mut out = Vec::new();
        let empty = Profile::default();
        write_diff_flamegraph(&empty, &empty, "d", &mut out).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("no samples"));
    }

    fn profile(leaf_count: u64, other: u64) -> Profile {
        let f = |n| Frame::named(n, FrameKind::User);
        let mut p = Profile::default();
        p.push("page-faults", "chain", &[f("main"), f("leaf")], leaf_count);
        p.push("page-faults", "chain", &[f("main"), f("other")], other);
        p.info.samples = p.samples();
        p
    }

    #[test]
    fn svg_has_every_frame_and_the_lost_count() {
        let mut p = profile(90, 10);
        p.info.lost = 3;
        let mut svg = Vec::new();
        write_flamegraph(&p, "t", &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml"));
        for needle in [
            "leaf (90 events",
            "other (10 events",
            "[lost samples] (3 events",
            "lost 3 samples",
        ] {
            assert!(svg.contains(needle), "missing {needle}");
        }
    }

    #[test]
    fn a_wall_clock_graph_counts_nanoseconds() {
        let f = |n| Frame::named(n, FrameKind::User);
        let mut p = Profile::default();
        p.push("cpu-clock", "chain", &[f("main"), f("leaf")], 9_000_000)
            .samples = 9;
        p.push("cpu-clock", "chain", &[f("main"), f("other")], 1_000_000)
            .samples = 1;
        let wall = crate::profile::wall_view(&p);
        let mut svg = Vec::new();
        write_flamegraph(&wall, "w", &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("leaf (9,000,000 ns"), "{}", &svg[..800]);
        assert!(
            svg.contains("10.0 ms (10000000 ns) of wall"),
            "no ns subtitle"
        );
    }

    #[test]
    fn differential_graph_renders_both_counts() {
        let mut svg = Vec::new();
        write_diff_flamegraph(&profile(50, 50), &profile(90, 10), "d", &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        // inferno titles differential frames with the change in percentage points.
        assert!(svg.contains("leaf (90 events"), "{}", &svg[..500]);
        assert!(svg.contains("+40.00%"), "no growth shown");
        assert!(svg.contains("-40.00%"), "no shrink shown");
    }
}
