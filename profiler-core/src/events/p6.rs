//! perfmon(4)'s event numbers: the Pentium Pro (P6) events that FreeBSD's
//! `<machine/perfmon.h>` names, and the Linux generic event each one is closest to.
//!
//! A FreeBSD program hands the driver a bare event number (0-255). On Linux the faithful
//! meaning of that number is a raw code for a P6-compatible PMU; everywhere else (AMD,
//! other architectures, virtual machines) the raw code means something else or nothing. So
//! `libperfmon` counts the events below as perf's generic hardware and cache events, which
//! the kernel translates for whatever PMU the host has, and takes other numbers as raw codes
//! only on a P6-compatible PMU. `profiler list` prints this table.

/// One P6 event number and the perf event it is counted as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P6Event {
    /// The event-select code (`pmc_event`).
    pub code: u8,
    /// Intel's name, as FreeBSD's header spells it after `PMC6_`.
    pub name: &'static str,
    /// A name [`super::Catalog::resolve`] accepts.
    pub maps_to: &'static str,
    /// The event takes a MESI unit mask (cache-line state); 0x0f (every state) is the only
    /// one the generic event counts.
    pub mesi: bool,
    /// Where the generic event counts something narrower or wider than the P6 event.
    pub note: Option<&'static str>,
}

const fn ev(code: u8, name: &'static str, maps_to: &'static str) -> P6Event {
    P6Event {
        code,
        name,
        maps_to,
        mesi: false,
        note: None,
    }
}

/// In code order. Events with no generic counterpart (FLOPS, UOPS_RETIRED, HW_INT_RX,
/// INST_DECODED, the DCU modified-line and outstanding-miss events, L2_LINES_OUT, ...)
/// are not here: they count only as raw codes on a P6-compatible PMU.
pub const P6_EVENTS: &[P6Event] = &[
    ev(0x24, "L2_LINES_IN", "cache-misses"),
    P6Event {
        mesi: true,
        ..ev(0x29, "L2_LD", "LLC-loads")
    },
    P6Event {
        mesi: true,
        ..ev(0x2a, "L2_ST", "LLC-stores")
    },
    P6Event {
        mesi: true,
        ..ev(0x2e, "L2_RQSTS", "cache-references")
    },
    P6Event {
        note: Some("loads only: the P6 event counts stores too"),
        ..ev(0x43, "DATA_MEM_REFS", "L1-dcache-loads")
    },
    ev(0x45, "DCU_LINES_IN", "L1-dcache-load-misses"),
    ev(0x79, "CPU_CLK_UNHALTED", "cycles"),
    ev(0x80, "IFU_IFETCH", "L1-icache-loads"),
    ev(0x81, "IFU_IFETCH_MISS", "L1-icache-load-misses"),
    ev(0x85, "ITLB_MISS", "iTLB-load-misses"),
    ev(0x86, "IFU_MEM_STALL", "stalled-cycles-frontend"),
    ev(0xa2, "RESOURCE_STALLS", "stalled-cycles-backend"),
    ev(0xc0, "INST_RETIRED", "instructions"),
    ev(0xc4, "BR_INST_RETIRED", "branch-instructions"),
    ev(0xc5, "BR_MISS_PRED_RETIRED", "branch-misses"),
];

/// The table's entry for `code`, if it has one.
pub fn p6_event(code: u8) -> Option<&'static P6Event> {
    P6_EVENTS.iter().find(|e| e.code == code)
}

impl P6Event {
    /// Whether a counter set up with this unit mask, counter mask, edge and invert bits is
    /// the plain event the generic one counts: no counter mask, no edge or invert, and a
    /// unit mask of 0 (or, for a MESI event, 0x0f: every line state).
    pub fn plain(&self, unit: u8, mask: u8, edge: bool, invert: bool) -> bool {
        mask == 0 && !edge && !invert && (unit == 0 || (self.mesi && unit == 0x0f))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use perf_event_open_sys::bindings as b;

    use super::*;
    use crate::events::{Catalog, EventKind};

    fn resolved(code: u8) -> (EventKind, u32, u64) {
        let catalog = Catalog::from_roots(Path::new("/nonexistent"), None);
        let e = catalog
            .resolve(p6_event(code).expect("in the table").maps_to)
            .expect("resolves");
        (e.kind, e.type_, e.config)
    }

    #[test]
    fn the_issue_s_events_map_to_perf_s_generic_hardware_events() {
        let hw = |config: u32| (EventKind::Hardware, b::PERF_TYPE_HARDWARE, config as u64);
        assert_eq!(resolved(0x79), hw(b::PERF_COUNT_HW_CPU_CYCLES));
        assert_eq!(resolved(0xc0), hw(b::PERF_COUNT_HW_INSTRUCTIONS));
        assert_eq!(resolved(0xc4), hw(b::PERF_COUNT_HW_BRANCH_INSTRUCTIONS));
        assert_eq!(resolved(0xc5), hw(b::PERF_COUNT_HW_BRANCH_MISSES));
        assert_eq!(resolved(0x2e), hw(b::PERF_COUNT_HW_CACHE_REFERENCES));
        assert_eq!(resolved(0x24), hw(b::PERF_COUNT_HW_CACHE_MISSES));
        assert_eq!(resolved(0x86), hw(b::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND));
        assert_eq!(resolved(0xa2), hw(b::PERF_COUNT_HW_STALLED_CYCLES_BACKEND));
    }

    #[test]
    fn cache_line_events_map_to_the_nearest_cache_event() {
        // perf's HW_CACHE config: cache id | op << 8 | result << 16.
        let cache = |id: u32, op: u32, result: u32| {
            (
                EventKind::HwCache,
                b::PERF_TYPE_HW_CACHE,
                u64::from(id | op << 8 | result << 16),
            )
        };
        let (l1d, l1i, ll, itlb) = (
            b::PERF_COUNT_HW_CACHE_L1D,
            b::PERF_COUNT_HW_CACHE_L1I,
            b::PERF_COUNT_HW_CACHE_LL,
            b::PERF_COUNT_HW_CACHE_ITLB,
        );
        let (read, write) = (
            b::PERF_COUNT_HW_CACHE_OP_READ,
            b::PERF_COUNT_HW_CACHE_OP_WRITE,
        );
        let (access, miss) = (
            b::PERF_COUNT_HW_CACHE_RESULT_ACCESS,
            b::PERF_COUNT_HW_CACHE_RESULT_MISS,
        );
        assert_eq!(resolved(0x43), cache(l1d, read, access));
        assert_eq!(resolved(0x45), cache(l1d, read, miss));
        assert_eq!(resolved(0x80), cache(l1i, read, access));
        assert_eq!(resolved(0x81), cache(l1i, read, miss));
        assert_eq!(resolved(0x29), cache(ll, read, access));
        assert_eq!(resolved(0x2a), cache(ll, write, access));
        assert_eq!(resolved(0x85), cache(itlb, read, miss));
    }

    #[test]
    fn the_table_is_in_code_order_and_every_entry_resolves() {
        assert!(P6_EVENTS.windows(2).all(|w| w[0].code < w[1].code));
        let catalog = Catalog::from_roots(Path::new("/nonexistent"), None);
        for e in P6_EVENTS {
            let r = catalog.resolve(e.maps_to).unwrap();
            assert!(
                r.needs_cpu_pmu(),
                "{}: {} is a PMU event",
                e.name,
                e.maps_to
            );
        }
        assert_eq!(p6_event(0xc1), None, "FLOPS has no generic counterpart");
        assert_eq!(p6_event(0x02), None);
    }

    #[test]
    fn only_the_plain_event_is_the_generic_one() {
        let (inst, l2) = (p6_event(0xc0).unwrap(), p6_event(0x2e).unwrap());
        assert!(inst.plain(0, 0, false, false));
        assert!(!inst.plain(0x0f, 0, false, false), "not a MESI event");
        assert!(!inst.plain(0, 1, false, false), "counter mask");
        assert!(!inst.plain(0, 0, true, false), "edge");
        assert!(!inst.plain(0, 0, false, true), "invert");
        assert!(l2.plain(0x0f, 0, false, false), "every MESI state");
        assert!(l2.plain(0, 0, false, false));
        assert!(!l2.plain(0x01, 0, false, false), "one state only");
    }
}
