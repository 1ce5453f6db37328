//! Where a goroutine's labels are, by Go version: `runtime.g.m`, `runtime.m.curg`,
//! `runtime.g.labels`, and what `labels` points at. Go 1.19's were read from a binary's
//! DWARF here; the others are the OpenTelemetry profiler's table (`interpreter/go`), taken
//! from each release's DWARF (docs/plans/go-research.md §7).

/// What `g.labels` points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelsKind {
    /// A `map[string]string` variable (Go 1.16-1.23): its word is the `*hmap`.
    Map,
    /// A `LabelSet{list []label}` sorted by key (Go 1.24+): its words are the slice.
    Slice,
}

/// The offsets of one Go version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    pub g_m: u16,
    pub m_curg: u16,
    pub g_labels: u16,
    pub kind: LabelsKind,
}

/// The newest minor version whose layout is known: a newer one gets no labels.
pub const NEWEST: u32 = 27;

/// The offsets of Go 1.`minor`, `None` outside 1.16..=1.27.
pub fn of(minor: u32) -> Option<Offsets> {
    use LabelsKind::{Map, Slice};
    let (m_curg, g_labels, kind) = match minor {
        16 => (192, 344, Map),
        17..=20 => (192, 360, Map),
        21 | 22 => (192, 344, Map),
        23 => (192, 352, Map),
        24 => (192, 352, Slice),
        25 => (184, 344, Slice),
        26..=NEWEST => (184, 352, Slice),
        _ => return None,
    };
    Some(Offsets {
        g_m: 48,
        m_curg,
        g_labels,
        kind,
    })
}

/// The minor version of a Go version string (`go1.19.8`, `go1.26rc1`, `go1.22.0 X:nocoverageredesign`).
pub fn minor(version: &str) -> Option<u32> {
    let rest = version.strip_prefix("go1.")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_their_strings() {
        assert_eq!(minor("go1.19.8"), Some(19));
        assert_eq!(minor("go1.26rc1"), Some(26));
        assert_eq!(minor("go1.22.0 X:nocoverageredesign"), Some(22));
        assert_eq!(minor("devel go1.27-abc"), None);
        assert_eq!(minor("go2.0"), None);
    }

    #[test]
    fn each_layout_has_its_offsets() {
        // Go 1.19.8, from app-full's DWARF: g.m @48, m.curg @192, g.labels @360.
        let go119 = of(19).unwrap();
        assert_eq!((go119.g_m, go119.m_curg, go119.g_labels), (48, 192, 360));
        assert_eq!(go119.kind, LabelsKind::Map);
        assert_eq!(of(24).unwrap().kind, LabelsKind::Slice);
        assert_eq!(of(26).unwrap().m_curg, 184);
        assert_eq!(of(15), None);
        assert_eq!(of(NEWEST + 1), None);
    }
}
