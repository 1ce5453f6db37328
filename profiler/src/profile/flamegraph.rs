//! Flame graph SVGs, rendered by inferno from the profile's folded stacks.

use std::io;

use inferno::{differential, flamegraph};

use super::{Profile, is_time_event, write_folded};

fn folded_text(profile: &Profile) -> io::Result<Vec<u8>> {
    let mut text = Vec::new();
    write_folded(profile, &mut text)?;
    Ok(text)
}

fn options(title: &str, subtitle: String) -> flamegraph::Options<'static> {
    let mut opts = flamegraph::Options::default();
    opts.title = title.to_string();
    opts.subtitle = Some(subtitle);
    opts.count_name = "samples".into();
    opts
}

/// The run's totals for the subtitle: what was delivered, and what the kernel lost.
fn totals(profile: &Profile) -> String {
    let untracked = match profile.info.untracked {
        0 => String::new(),
        n => format!("; {n} children not followed"),
    };
    format!(
        "{} {} of {}; lost {}{untracked}",
        profile.total(),
        unit(profile),
        if profile.info.event.is_empty() {
            "samples"
        } else {
            &profile.info.event
        },
        profile.info.lost
    )
}

/// Renders `profile` as a flame graph SVG. Lost samples appear as their own tower.
pub fn write_flamegraph(
    profile: &Profile,
    title: &str,
    out: &mut impl io::Write,
) -> io::Result<()> {
    let text = folded_text(profile)?;
    let text = String::from_utf8_lossy(&text);
    if text.trim().is_empty() {
        return write_empty(title, &totals(profile), out);
    }
    let mut opts = options(title, totals(profile));
    opts.count_name = unit(profile).into();
    flamegraph::from_lines(&mut opts, text.lines(), out)
}

/// What the counts are: nanoseconds when every event is time (`--wall`, off-CPU alone).
fn unit(profile: &Profile) -> &'static str {
    let events = profile.events();
    if !events.is_empty() && events.iter().all(|e| is_time_event(e)) {
        "ns"
    } else {
        "samples"
    }
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
        p.push("cpu-clock", "chain", &[f("main"), f("leaf")], leaf_count);
        p.push("cpu-clock", "chain", &[f("main"), f("other")], other);
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
            "leaf (90 samples",
            "other (10 samples",
            "[lost samples] (3 samples",
            "lost 3",
        ] {
            assert!(svg.contains(needle), "missing {needle}");
        }
    }

    #[test]
    fn a_wall_clock_graph_counts_nanoseconds() {
        let wall = crate::profile::wall_view(&profile(9, 1), 1_000_000);
        let mut svg = Vec::new();
        write_flamegraph(&wall, "w", &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("leaf (9,000,000 ns"), "{}", &svg[..800]);
        assert!(svg.contains("10000000 ns of wall"), "no ns subtitle");
    }

    #[test]
    fn differential_graph_renders_both_counts() {
        let mut svg = Vec::new();
        write_diff_flamegraph(&profile(50, 50), &profile(90, 10), "d", &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        // inferno titles differential frames with the change in percentage points.
        assert!(svg.contains("leaf (90 samples"), "{}", &svg[..500]);
        assert!(svg.contains("+40.00%"), "no growth shown");
        assert!(svg.contains("-40.00%"), "no shrink shown");
    }
}
