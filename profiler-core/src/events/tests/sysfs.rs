//! sysfs PMU events through their format files, and tracepoints through tracefs.

use super::*;

#[test]
fn sysfs_pmu_events_encode_through_formats() {
    let cat = catalog(&fake_pmu_tree());
    let enc = |name: &str| {
        let e = cat
            .resolve(name)
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(
            (e.kind, e.pmu.as_deref(), e.type_),
            (EventKind::Pmu, Some("fakepmu"), 42)
        );
        (e.config, e.config1, e.config2)
    };
    assert_eq!(enc("fakepmu/foo/"), (0x013c, 0, 0));
    assert_eq!(enc("fakepmu/event=0x3c,umask=2/"), (0x023c, 0, 0));
    assert_eq!(
        enc("fakepmu/foo,umask=2/"),
        (0x023c, 0, 0),
        "later terms override"
    );
    assert_eq!(
        enc("fakepmu/split=0xab/"),
        (0, 0xa0b, 0),
        "split field, low bits first"
    );
    assert_eq!(
        enc("fakepmu/event=1,flag/"),
        (1 | 1 << 18, 0, 0),
        "bare term = 1"
    );
    assert_eq!(enc("fakepmu/config=0x1234,config1=5/"), (0x1234, 5, 0));
    assert_eq!(enc("fakepmu/needs,ldlat=3/"), (0x10, 0, 3));
    assert_encoding(
        &cat.resolve("fakepmu/foo,split=0xff,ldlat=7/").unwrap(),
        42,
        0x13c,
        0xf0f,
        7,
    );

    let msr = cat.resolve("msr/tsc/").unwrap();
    assert_encoding(&msr, 9, 0, 0, 0);
    assert_eq!(msr.pmu.as_deref(), Some("msr"));
    assert!(!msr.needs_cpu_pmu());
}

#[test]
fn sysfs_pmu_errors() {
    let cat = catalog(&fake_pmu_tree());
    let out_of_range = |name: &str, term: &str, value, max| {
        let expected = EventError::AttributeOutOfRange {
            name: term.into(),
            value,
            max,
        };
        assert_eq!(cat.resolve(name), Err(expected), "{name}");
    };
    out_of_range("fakepmu/event=0x100/", "event", 0x100, 0xff);
    out_of_range("fakepmu/split=0x100/", "split", 0x100, 0xff);
    out_of_range("fakepmu/flag=2/", "flag", 2, 1);

    let unknown = cat.resolve("fakepmu/fo/").unwrap_err();
    assert_eq!(
        unknown.to_string(),
        "unknown event 'fakepmu/fo/' (did you mean fakepmu/foo/?)"
    );
    assert!(matches!(
        cat.resolve("nopmu/foo/"),
        Err(EventError::Unknown { .. })
    ));
    assert!(
        matches!(cat.resolve("notapmu/x/"), Err(EventError::Unknown { .. })),
        "no type file"
    );
    assert_eq!(
        cat.resolve("fakepmu/event=1,umsk=2/"),
        Err(EventError::UnknownAttribute {
            name: "umsk".into(),
            suggestions: vec!["umask".into()],
        })
    );
    for malformed in [
        "fakepmu/foo",
        "fakepmu//",
        "/foo/",
        "fakepmu/a/b/",
        "fakepmu/event=x/",
        "fakepmu/needs/",
        "fakepmu/event=?/",
        "fakepmu/broken/",
        "fakepmu/wide=1/",
    ] {
        let err = cat.resolve(malformed).unwrap_err();
        assert!(
            matches!(err, EventError::Malformed { .. }),
            "{malformed}: {err}"
        );
    }
}

#[test]
fn tracepoints_through_the_catalog() {
    let pmus = vm_tree();
    let tracing = FakeTree::new("tracefs");
    tracing.write("events/sched/sched_switch/id", "372\n");
    let cat = Catalog::from_roots(pmus.path(), Some(tracing.path()));
    assert_eq!(cat.tracing_root(), Some(tracing.path()));
    let event = cat.resolve("sched:sched_switch").unwrap();
    assert_encoding(&event, b::PERF_TYPE_TRACEPOINT, 372, 0, 0);
    assert_eq!(
        (event.kind, event.pmu.as_deref()),
        (EventKind::Tracepoint, None)
    );
    let err = cat.resolve("sched:sched_swich").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown event 'sched:sched_swich' (did you mean sched:sched_switch?)"
    );

    let without = catalog(&pmus);
    let err = without.resolve("sched:sched_switch").unwrap_err();
    assert!(matches!(err, EventError::Unavailable { .. }), "{err}");
    assert_eq!(err.libcpc_subcode(), 1);
}

/// An arm64 host: the CPU PMU is named by the driver (`armv8_pmuv3_0`, type dynamic), its
/// only format field the 16-bit event number; generic hardware events, raw `rNNNN` codes and
/// its own events all count there, and libcpc's x86 attributes do not apply.
#[test]
fn arm64_cpu_pmu_is_found_by_its_driver_name() {
    let tree = vm_tree();
    tree.write("armv8_pmuv3_0/type", "8\n");
    tree.write("armv8_pmuv3_0/cpus", "0-1\n");
    tree.write("armv8_pmuv3_0/format/event", "config:0-15\n");
    tree.write("armv8_pmuv3_0/events/cpu_cycles", "event=0x0011\n");
    tree.write("armv8_pmuv3_0/events/inst_retired", "event=0x0008\n");
    let cat = catalog(&tree);
    assert_eq!(cat.cpu_pmu_name().as_deref(), Some("armv8_pmuv3_0"));

    let cycles = cat.resolve("cycles").unwrap();
    assert_encoding(&cycles, b::PERF_TYPE_HARDWARE, 0, 0, 0);
    assert_eq!(cycles.pmu.as_deref(), Some("armv8_pmuv3_0"));
    assert_eq!(cat.unavailable_reason(&cycles), None);

    let raw = cat.resolve("r11").unwrap();
    assert_encoding(&raw, b::PERF_TYPE_RAW, 0x11, 0, 0);
    assert_eq!(cat.unavailable_reason(&raw), None);

    let own = cat.resolve("armv8_pmuv3_0/inst_retired/").unwrap();
    assert_encoding(&own, 8, 0x8, 0, 0);
    assert!(own.needs_cpu_pmu());
    assert_eq!(
        cat.resolve("armv8_pmuv3_0/event=0x10000/"),
        Err(EventError::AttributeOutOfRange {
            name: "event".into(),
            value: 0x10000,
            max: 0xffff,
        })
    );

    // The x86 attributes (umask, edge, ...) have no field here: only picnum.
    assert_eq!(cat.attributes(), ["picnum"]);
    let mut raw = raw;
    assert!(cat.apply_attribute(&mut raw, "umask", 1).is_err());
}
