//! Names to encodings: software, hardware, cache, raw and PAPI events; suggestions.

use super::*;

#[test]
fn software_events_by_name_and_alias() {
    let cat = catalog(&vm_tree());
    for sw in SOFTWARE {
        for name in std::iter::once(&sw.name).chain(sw.aliases) {
            let event = cat.resolve(name).unwrap();
            assert_encoding(&event, b::PERF_TYPE_SOFTWARE, sw.config, 0, 0);
            assert_eq!(event.name, sw.name, "canonical name for {name}");
            assert_eq!(
                (event.kind, event.pmu.as_deref(), event.generic),
                (EventKind::Software, None, None)
            );
            assert!(!event.needs_cpu_pmu());
            assert_eq!(cat.unavailable_reason(&event), None);
        }
    }
    assert_eq!(cat.resolve("cs").unwrap().config, 3);
    assert_eq!(cat.resolve("bpf-output").unwrap().config, 10);
}

#[test]
fn hardware_events_by_name_and_alias() {
    let vm = vm_tree();
    let host = cpu_tree();
    for hw in HARDWARE {
        for name in std::iter::once(&hw.name).chain(hw.aliases) {
            let event = catalog(&vm).resolve(name).unwrap();
            assert_encoding(&event, b::PERF_TYPE_HARDWARE, hw.config, 0, 0);
            assert_eq!(
                (event.kind, event.pmu.as_deref()),
                (EventKind::Hardware, None)
            );
            assert!(event.needs_cpu_pmu());
            let on_cpu = catalog(&host).resolve(name).unwrap();
            assert_eq!(on_cpu.pmu.as_deref(), Some("cpu"), "the cpu PMU carries it");
        }
    }
    assert_eq!(catalog(&vm).resolve("cpu-cycles").unwrap().name, "cycles");
}

#[test]
fn cache_events() {
    let cat = catalog(&vm_tree());
    for (name, config) in [
        ("L1-dcache-loads", 0x00000),
        ("L1-dcache-load-misses", 0x10000),
        ("L1-icache-load-misses", 0x10001),
        ("LLC-loads", 0x00002),
        ("LLC-load-misses", 0x10002),
        ("dTLB-load-misses", 0x10003),
        ("dTLB-stores", 0x00103),
        ("iTLB-load-misses", 0x10004),
        ("branch-loads", 0x00005),
        ("branch-load-misses", 0x10005),
        ("node-store-misses", 0x10106),
    ] {
        let event = cat.resolve(name).unwrap();
        assert_encoding(&event, b::PERF_TYPE_HW_CACHE, config, 0, 0);
        assert_eq!(
            (event.kind, event.name.as_str()),
            (EventKind::HwCache, name)
        );
    }
    assert_eq!(
        cat.resolve("l1d-load-miss").unwrap().name,
        "L1-dcache-load-misses"
    );
    let err = cat.resolve("iTLB-stores").unwrap_err();
    assert!(matches!(err, EventError::Malformed { .. }), "{err}");
}

#[test]
fn raw_codes() {
    let cat = catalog(&vm_tree());
    let event = cat.resolve("r01c2").unwrap();
    assert_encoding(&event, b::PERF_TYPE_RAW, 0x1c2, 0, 0);
    assert_eq!((event.kind, event.name.as_str()), (EventKind::Raw, "r01c2"));
    assert_encoding(&cat.resolve("0x3c").unwrap(), b::PERF_TYPE_RAW, 0x3c, 0, 0);
    assert_encoding(&cat.resolve("60").unwrap(), b::PERF_TYPE_RAW, 60, 0, 0);
    for bad in ["r01g2", "0x3g", "-1"] {
        let err = cat.resolve(bad).unwrap_err();
        assert!(matches!(err, EventError::Malformed { .. }), "{bad}: {err}");
    }
    assert!(matches!(
        cat.resolve("rubbish"),
        Err(EventError::Unknown { .. })
    ));
}

#[test]
fn papi_names_resolve_to_their_perf_events() {
    let cat = catalog(&vm_tree());
    for g in GENERIC {
        let event = cat.resolve(g.name).unwrap();
        let perf = cat.resolve(&g.target.perf_name()).unwrap();
        assert_encoding(&event, perf.type_, perf.config, 0, 0);
        assert_eq!((event.name.as_str(), event.generic), (g.name, Some(g.name)));
        assert_eq!(event.kind, perf.kind);
    }
    let cyc = cat.resolve("PAPI_tot_cyc").unwrap();
    assert_eq!((cyc.type_, cyc.config), (b::PERF_TYPE_HARDWARE, 0));
    let dcm = cat.resolve("PAPI_l1_dcm").unwrap();
    assert_eq!((dcm.type_, dcm.config), (b::PERF_TYPE_HW_CACHE, 0x10000));
}

#[test]
fn unknown_names_get_suggestions() {
    let cat = catalog(&vm_tree());
    let err = cat.resolve("cyles").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown event 'cyles' (did you mean cycles?)"
    );
    assert_eq!(err.libcpc_subcode(), 1);
    let first = |name: &str| match cat.resolve(name) {
        Err(EventError::Unknown { suggestions, .. }) => suggestions.first().cloned(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(first("page-fault").as_deref(), Some("page-faults"));
    assert_eq!(first("papi_tot_cyc").as_deref(), Some("PAPI_tot_cyc"));
    assert_eq!(first("CPU-CLOCK").as_deref(), Some("cpu-clock"));
    assert_eq!(first("msr/tss/").as_deref(), Some("msr/tsc/"));
    assert_eq!(
        cat.resolve("qqqqqqqq").unwrap_err().to_string(),
        "unknown event 'qqqqqqqq'",
        "no suggestion part when there is none"
    );
}

#[test]
fn perf_modifiers_are_refused_with_a_hint() {
    let cat = catalog(&vm_tree());
    for name in ["cycles:u", "cpu-clock:k", "PAPI_tot_cyc:u", "LLC-loads:pp"] {
        match cat.resolve(name) {
            Err(EventError::Malformed { reason, .. }) => {
                assert!(reason.contains("nouser, sys"), "{name}: {reason}")
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}
