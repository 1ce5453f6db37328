//! libcpc's generic events (generic_events(3CPC), the PAPI names) mapped onto perf's generic
//! hardware and hardware-cache events.
//!
//! Only names whose PAPI definition is exactly what one perf event counts are mapped; no
//! derived (summed) events. So `PAPI_l1_dca` (loads *and* stores) and `PAPI_tlb_tl` (data
//! *and* instruction TLB) are absent, and L3 events other than libcpc-spec §4.1's two are
//! not mapped onto `LLC`, whose level varies by CPU. There is no software fallback here:
//! substituting task-clock for `PAPI_tot_cyc` is a policy for the caller, not the catalogue.

use perf_event_open_sys::bindings as b;

use super::hardware::{self, CacheEvent, HwEvent};

/// What a generic name counts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target {
    Hardware(&'static HwEvent),
    Cache(CacheEvent),
}

impl Target {
    /// perf's name for the target (`cycles`, `L1-dcache-load-misses`).
    pub(crate) fn perf_name(self) -> String {
        match self {
            Target::Hardware(hw) => hw.name.to_owned(),
            Target::Cache(cache) => cache.name(),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Generic {
    /// libcpc's spelling: `PAPI_` then lower case.
    pub(crate) name: &'static str,
    pub(crate) target: Target,
}

const fn hw(name: &'static str, event: &'static HwEvent) -> Generic {
    Generic {
        name,
        target: Target::Hardware(event),
    }
}

const fn cache(name: &'static str, cache: u32, op: u32, miss: bool) -> Generic {
    Generic {
        name,
        target: Target::Cache(CacheEvent::new(cache, op, miss)),
    }
}

const READ: u32 = b::PERF_COUNT_HW_CACHE_OP_READ;
const WRITE: u32 = b::PERF_COUNT_HW_CACHE_OP_WRITE;

pub(crate) const GENERIC: &[Generic] = &[
    // libcpc-spec §4.1.
    hw("PAPI_tot_cyc", &hardware::CYCLES),
    hw("PAPI_tot_ins", &hardware::INSTRUCTIONS),
    hw("PAPI_br_ins", &hardware::BRANCH_INSTRUCTIONS),
    hw("PAPI_br_msp", &hardware::BRANCH_MISSES),
    cache("PAPI_l1_dcm", b::PERF_COUNT_HW_CACHE_L1D, READ, true),
    cache("PAPI_l1_icm", b::PERF_COUNT_HW_CACHE_L1I, READ, true),
    cache("PAPI_tlb_dm", b::PERF_COUNT_HW_CACHE_DTLB, READ, true),
    cache("PAPI_tlb_im", b::PERF_COUNT_HW_CACHE_ITLB, READ, true),
    hw("PAPI_l3_tca", &hardware::CACHE_REFERENCES),
    hw("PAPI_l3_tcm", &hardware::CACHE_MISSES),
    // One-to-one by definition: L1 data reads/writes, L1 load/store misses, L1 icache reads.
    cache("PAPI_l1_dcr", b::PERF_COUNT_HW_CACHE_L1D, READ, false),
    cache("PAPI_l1_dcw", b::PERF_COUNT_HW_CACHE_L1D, WRITE, false),
    cache("PAPI_l1_ldm", b::PERF_COUNT_HW_CACHE_L1D, READ, true),
    cache("PAPI_l1_stm", b::PERF_COUNT_HW_CACHE_L1D, WRITE, true),
    cache("PAPI_l1_icr", b::PERF_COUNT_HW_CACHE_L1I, READ, false),
];

/// Exact (case-sensitive) lookup, as libcpc does.
pub(crate) fn lookup(name: &str) -> Option<&'static Generic> {
    GENERIC.iter().find(|g| g.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_mappings() {
        let expected = [
            ("PAPI_tot_cyc", "cycles"),
            ("PAPI_tot_ins", "instructions"),
            ("PAPI_br_ins", "branch-instructions"),
            ("PAPI_br_msp", "branch-misses"),
            ("PAPI_l1_dcm", "L1-dcache-load-misses"),
            ("PAPI_l1_icm", "L1-icache-load-misses"),
            ("PAPI_tlb_dm", "dTLB-load-misses"),
            ("PAPI_tlb_im", "iTLB-load-misses"),
            ("PAPI_l3_tca", "cache-references"),
            ("PAPI_l3_tcm", "cache-misses"),
            ("PAPI_l1_dcr", "L1-dcache-loads"),
            ("PAPI_l1_dcw", "L1-dcache-stores"),
            ("PAPI_l1_ldm", "L1-dcache-load-misses"),
            ("PAPI_l1_stm", "L1-dcache-store-misses"),
            ("PAPI_l1_icr", "L1-icache-loads"),
        ];
        for (papi, perf) in expected {
            assert_eq!(lookup(papi).unwrap().target.perf_name(), perf, "{papi}");
        }
        assert_eq!(GENERIC.len(), expected.len());
    }

    #[test]
    fn names_are_libcpc_spelling_and_unique() {
        for (i, g) in GENERIC.iter().enumerate() {
            let suffix = g.name.strip_prefix("PAPI_").unwrap();
            assert_eq!(suffix, suffix.to_lowercase(), "{}", g.name);
            assert!(GENERIC[..i].iter().all(|h| h.name != g.name), "{}", g.name);
        }
        assert!(lookup("PAPI_TOT_CYC").is_none(), "lookup is exact");
    }
}
