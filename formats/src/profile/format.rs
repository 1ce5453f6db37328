//! The output formats a profile can be written in, chosen by name or by file extension.

use std::{io, path::Path};

use super::{Profile, TopTable, write_flamegraph, write_folded, write_pprof, write_speedscope};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// gzip-compressed pprof protobuf (the native format; `profiler report` reads it).
    Pprof,
    /// Folded stacks, one `comm;outer;..;leaf COUNT` line per stack.
    Folded,
    /// A flame graph SVG (inferno).
    Svg,
    /// speedscope's JSON format.
    Speedscope,
    /// The top-functions table as text.
    Report,
}

impl Format {
    /// The format a file name implies: `.svg`, `.folded`/`.txt`, `.json`, else pprof.
    pub fn for_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("svg") => Self::Svg,
            Some("folded" | "txt" | "collapsed") => Self::Folded,
            Some("json") => Self::Speedscope,
            _ => Self::Pprof,
        }
    }

    /// The file extension written in continuous mode.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Pprof => "pb.gz",
            Self::Folded => "folded",
            Self::Svg => "svg",
            Self::Speedscope => "speedscope.json",
            Self::Report => "txt",
        }
    }

    pub fn write(self, profile: &Profile, title: &str, out: &mut impl io::Write) -> io::Result<()> {
        match self {
            Self::Pprof => write_pprof(profile, out),
            Self::Folded => write_folded(profile, out),
            Self::Svg => write_flamegraph(profile, title, out),
            Self::Speedscope => write_speedscope(profile, out),
            Self::Report => {
                // One event: values of different units are not added up.
                let profile = &super::one_event(profile).0;
                write!(out, "{}", super::summary_line(profile))?;
                write!(out, "{}", TopTable::build(profile).render(usize::MAX))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_follow_extensions() {
        for (name, f) in [
            ("a.svg", Format::Svg),
            ("a.folded", Format::Folded),
            ("a.txt", Format::Folded),
            ("a.json", Format::Speedscope),
            ("a.pb.gz", Format::Pprof),
            ("profile", Format::Pprof),
        ] {
            assert_eq!(Format::for_path(Path::new(name)), f, "{name}");
        }
    }
}
