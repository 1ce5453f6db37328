//! perf's generic hardware events (PERF_TYPE_HARDWARE) and hardware-cache events
//! (PERF_TYPE_HW_CACHE), by perf's names and aliases. Both need a CPU PMU to count.

use perf_event_open_sys::bindings as b;

use super::grammar::GrammarError;

/// One generic hardware event.
#[derive(Debug)]
pub(crate) struct HwEvent {
    pub(crate) name: &'static str,
    pub(crate) aliases: &'static [&'static str],
    pub(crate) config: u64,
}

macro_rules! hw {
    ($id:ident = $abi:ident, $name:literal $(, $alias:literal)*) => {
        pub(crate) const $id: HwEvent = HwEvent {
            name: $name,
            aliases: &[$($alias),*],
            config: b::$abi as u64,
        };
    };
}

hw!(CYCLES = PERF_COUNT_HW_CPU_CYCLES, "cycles", "cpu-cycles");
hw!(INSTRUCTIONS = PERF_COUNT_HW_INSTRUCTIONS, "instructions");
hw!(
    CACHE_REFERENCES = PERF_COUNT_HW_CACHE_REFERENCES,
    "cache-references"
);
hw!(CACHE_MISSES = PERF_COUNT_HW_CACHE_MISSES, "cache-misses");
hw!(
    BRANCH_INSTRUCTIONS = PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
    "branch-instructions",
    "branches"
);
hw!(BRANCH_MISSES = PERF_COUNT_HW_BRANCH_MISSES, "branch-misses");
hw!(BUS_CYCLES = PERF_COUNT_HW_BUS_CYCLES, "bus-cycles");
hw!(
    STALLED_CYCLES_FRONTEND = PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
    "stalled-cycles-frontend",
    "idle-cycles-frontend"
);
hw!(
    STALLED_CYCLES_BACKEND = PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    "stalled-cycles-backend",
    "idle-cycles-backend"
);
hw!(REF_CYCLES = PERF_COUNT_HW_REF_CPU_CYCLES, "ref-cycles");

/// In config order.
pub(crate) const HARDWARE: &[HwEvent] = &[
    CYCLES,
    INSTRUCTIONS,
    CACHE_REFERENCES,
    CACHE_MISSES,
    BRANCH_INSTRUCTIONS,
    BRANCH_MISSES,
    BUS_CYCLES,
    STALLED_CYCLES_FRONTEND,
    STALLED_CYCLES_BACKEND,
    REF_CYCLES,
];

pub(crate) fn lookup(name: &str) -> Option<&'static HwEvent> {
    HARDWARE
        .iter()
        .find(|e| e.name == name || e.aliases.contains(&name))
}

/// A hardware-cache event: which cache, which operation, access or miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CacheEvent {
    pub(crate) cache: usize,
    pub(crate) op: usize,
    pub(crate) miss: bool,
}

// perf's spellings (tools/perf/util/evsel.c `evsel__hw_cache*`), indexed by the kernel's
// PERF_COUNT_HW_CACHE_* ids; the first is canonical. perf's lexer matches them
// case-sensitively, and so do we.
const CACHES: [&[&str]; 7] = [
    &["L1-dcache", "l1-d", "l1d", "L1-data"],
    &["L1-icache", "l1-i", "l1i", "L1-instruction"],
    &["LLC", "L2"],
    &["dTLB", "d-tlb", "Data-TLB"],
    &["iTLB", "i-tlb", "Instruction-TLB"],
    &["branch", "branches", "bpu", "btb", "bpc"],
    &["node"],
];
/// The second spelling is the one perf uses for access counts ("L1-dcache-loads").
const OPS: [&[&str]; 3] = [
    &["load", "loads", "read"],
    &["store", "stores", "write"],
    &[
        "prefetch",
        "prefetches",
        "speculative-read",
        "speculative-load",
    ],
];
const ACCESS: &[&str] = &["refs", "Reference", "ops", "access"];
const MISS: &[&str] = &["misses", "miss"];

/// Which operations each cache supports, as bits over OPS (perf's `evsel__hw_cache_stat`).
const VALID_OPS: [u8; 7] = [0b111, 0b101, 0b111, 0b111, 0b001, 0b001, 0b111];

impl CacheEvent {
    pub(crate) const fn new(cache: u32, op: u32, miss: bool) -> Self {
        Self {
            cache: cache as usize,
            op: op as usize,
            miss,
        }
    }

    /// config = cache_id | (op_id << 8) | (result_id << 16).
    pub(crate) fn config(self) -> u64 {
        let result = if self.miss {
            b::PERF_COUNT_HW_CACHE_RESULT_MISS
        } else {
            b::PERF_COUNT_HW_CACHE_RESULT_ACCESS
        };
        self.cache as u64 | (self.op as u64) << 8 | u64::from(result) << 16
    }

    /// perf's name: `L1-dcache-loads` for accesses, `L1-dcache-load-misses` for misses.
    pub(crate) fn name(self) -> String {
        let cache = CACHES[self.cache][0];
        if self.miss {
            format!("{cache}-{}-{}", OPS[self.op][0], MISS[0])
        } else {
            format!("{cache}-{}", OPS[self.op][1])
        }
    }

    fn valid(self) -> bool {
        VALID_OPS[self.cache] & (1 << self.op) != 0
    }

    /// Every combination perf lists, in perf's order.
    pub(crate) fn all() -> impl Iterator<Item = CacheEvent> {
        (0..CACHES.len()).flat_map(|cache| {
            (0..OPS.len()).flat_map(move |op| {
                [false, true]
                    .into_iter()
                    .map(move |miss| CacheEvent { cache, op, miss })
                    .filter(|e| e.valid())
            })
        })
    }
}

/// Parses perf's grammar `cache[-op_or_result[-op_or_result]]` (op defaults to load, result
/// to access). `None` when `name` is not in that grammar; `Some(Err(reason))` for a
/// well-formed name whose operation the cache does not support (`iTLB-stores`).
pub(crate) fn parse_cache(name: &str) -> Option<Result<CacheEvent, GrammarError>> {
    for (cache, rest) in prefixes(name, &CACHES) {
        let Some((op, miss)) = parse_op_result(rest) else {
            continue;
        };
        let event = CacheEvent {
            cache,
            op: op.unwrap_or(0),
            miss: miss.unwrap_or(false),
        };
        if !event.valid() {
            let ops: Vec<&str> = (0..OPS.len())
                .filter(|&op| VALID_OPS[cache] & (1 << op) != 0)
                .map(|op| OPS[op][1])
                .collect();
            return Some(Err(GrammarError::CacheOp {
                cache: CACHES[cache][0],
                ops: ops.join(" and "),
            }));
        }
        return Some(Ok(event));
    }
    None
}

/// Every `(index, rest)` where `s` is `alias` or `alias-rest` for an alias of `groups[index]`.
fn prefixes<'s>(s: &'s str, groups: &[&[&str]]) -> Vec<(usize, &'s str)> {
    let mut out = Vec::new();
    for (index, aliases) in groups.iter().enumerate() {
        for alias in *aliases {
            match s.strip_prefix(alias) {
                Some("") => out.push((index, "")),
                Some(rest) => {
                    if let Some(rest) = rest.strip_prefix('-') {
                        out.push((index, rest));
                    }
                }
                None => {}
            }
        }
    }
    out
}

/// `""`, `op`, `result`, `op-result` or `result-op`: (op, miss), `None` if no parse.
fn parse_op_result(s: &str) -> Option<(Option<usize>, Option<bool>)> {
    if s.is_empty() {
        return Some((None, None));
    }
    let results: [&[&str]; 2] = [ACCESS, MISS];
    for (op, rest) in prefixes(s, &OPS) {
        if rest.is_empty() {
            return Some((Some(op), None));
        }
        if let Some((res, _)) = prefixes(rest, &results)
            .into_iter()
            .find(|p| p.1.is_empty())
        {
            return Some((Some(op), Some(res == 1)));
        }
    }
    for (res, rest) in prefixes(s, &results) {
        if rest.is_empty() {
            return Some((None, Some(res == 1)));
        }
        if let Some((op, _)) = prefixes(rest, &OPS).into_iter().find(|p| p.1.is_empty()) {
            return Some((Some(op), Some(res == 1)));
        }
    }
    None
}

/// Every hardware name and alias and every canonical cache name, for suggestions.
pub(crate) fn names() -> Vec<String> {
    HARDWARE
        .iter()
        .flat_map(|e| std::iter::once(e.name).chain(e.aliases.iter().copied()))
        .map(str::to_owned)
        .chain(CacheEvent::all().map(CacheEvent::name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_configs_match_the_kernel_abi() {
        // include/uapi/linux/perf_event.h, enum perf_hw_id.
        let expected = [
            ("cycles", 0),
            ("cpu-cycles", 0),
            ("instructions", 1),
            ("cache-references", 2),
            ("cache-misses", 3),
            ("branch-instructions", 4),
            ("branches", 4),
            ("branch-misses", 5),
            ("bus-cycles", 6),
            ("stalled-cycles-frontend", 7),
            ("idle-cycles-frontend", 7),
            ("stalled-cycles-backend", 8),
            ("idle-cycles-backend", 8),
            ("ref-cycles", 9),
        ];
        for (name, config) in expected {
            assert_eq!(lookup(name).map(|e| e.config), Some(config), "{name}");
        }
    }

    #[test]
    fn cache_configs_match_the_kernel_abi() {
        // cache ids L1D 0, L1I 1, LL 2, DTLB 3, ITLB 4, BPU 5, NODE 6; ops READ 0, WRITE 1,
        // PREFETCH 2; results ACCESS 0, MISS 1.
        let expected = [
            ("L1-dcache-loads", 0x0_00_00),
            ("L1-dcache-load-misses", 0x1_00_00),
            ("L1-dcache-stores", 0x0_01_00),
            ("L1-dcache-store-misses", 0x1_01_00),
            ("L1-dcache-prefetches", 0x0_02_00),
            ("L1-icache-load-misses", 0x1_00_01),
            ("LLC-loads", 0x0_00_02),
            ("LLC-load-misses", 0x1_00_02),
            ("LLC-store-misses", 0x1_01_02),
            ("dTLB-load-misses", 0x1_00_03),
            ("iTLB-load-misses", 0x1_00_04),
            ("branch-loads", 0x0_00_05),
            ("branch-load-misses", 0x1_00_05),
            ("node-prefetch-misses", 0x1_02_06),
        ];
        for (name, config) in expected {
            let event = parse_cache(name).unwrap().unwrap();
            assert_eq!(event.config(), config, "{name}");
            assert_eq!(event.name(), name, "canonical name round-trips");
        }
    }

    #[test]
    fn perf_aliases_and_defaults() {
        let cfg = |n: &str| parse_cache(n).unwrap().unwrap().config();
        assert_eq!(cfg("l1d-miss"), 0x1_00_00, "op defaults to load");
        assert_eq!(cfg("L1-dcache"), 0x0_00_00, "result defaults to access");
        assert_eq!(cfg("LLC-misses-write"), 0x1_01_02, "result before op");
        assert_eq!(cfg("L1-dcache-speculative-read-miss"), 0x1_02_00);
        assert_eq!(cfg("Data-TLB-read-access"), 0x0_00_03);
        assert_eq!(cfg("branches-loads"), 0x0_00_05);
    }

    #[test]
    fn unsupported_operations_and_non_cache_names() {
        let err = parse_cache("iTLB-stores").unwrap().unwrap_err();
        assert_eq!(err.to_string(), "iTLB supports only loads");
        assert_eq!(
            parse_cache("L1-icache-store-misses")
                .unwrap()
                .unwrap_err()
                .to_string(),
            "L1-icache supports only loads and prefetches"
        );
        for name in [
            "cycles",
            "L1-dcache-lods",
            "llc-loads",
            "LLC-loads-misses-x",
            "LLCx",
        ] {
            assert!(parse_cache(name).is_none(), "{name}");
        }
    }

    #[test]
    fn listing_has_perfs_combinations() {
        let names: Vec<String> = CacheEvent::all().map(CacheEvent::name).collect();
        // 2 results x valid ops: L1D 3, L1I 2, LLC 3, dTLB 3, iTLB 1, branch 1, node 3.
        assert_eq!(names.len(), 32);
        assert_eq!(
            &names[..3],
            [
                "L1-dcache-loads",
                "L1-dcache-load-misses",
                "L1-dcache-stores"
            ]
        );
        assert!(!names.iter().any(|n| n == "iTLB-stores"));
    }
}
