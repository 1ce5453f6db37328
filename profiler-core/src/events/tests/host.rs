//! Listings, and this host's real sysfs.

use super::*;

#[test]
fn listings_without_a_cpu_pmu() {
    let tree = vm_tree();
    let cat = catalog(&tree);
    assert_eq!(cat.cpu_pmu_name(), None);
    let events = cat.platform_events();
    let find = |name: &str| events.iter().find(|e| e.name == name).unwrap();
    assert!(find("cpu-clock").available);
    let align = find("alignment-faults");
    assert!(align.available);
    if cfg!(target_arch = "x86_64") {
        assert_eq!(align.reason.as_deref(), Some("never raised on x86-64"));
    }
    let expected_reason = format!(
        "no hardware PMU on this host (no {}/cpu)",
        tree.path().display()
    );
    for name in [
        "cycles",
        "ref-cycles",
        "L1-dcache-load-misses",
        "iTLB-load-misses",
    ] {
        let e = find(name);
        assert!(!e.available, "{name}");
        assert_eq!(e.reason.as_deref(), Some(expected_reason.as_str()));
    }
    assert_eq!(find("msr/tsc/").kind, EventKind::Pmu);
    assert!(find("msr/tsc/").available);
    assert!(
        !events.iter().any(|e| e.name.starts_with("PAPI_")),
        "generic names listed apart"
    );
    assert_eq!(events.len(), SOFTWARE.len() + HARDWARE.len() + 32 + 1);

    let generic = cat.generic_events();
    assert_eq!(generic.len(), GENERIC.len());
    let cyc = generic.iter().find(|g| g.name == "PAPI_tot_cyc").unwrap();
    assert_eq!((cyc.maps_to.as_str(), cyc.available), ("cycles", false));
    assert_eq!(cyc.reason.as_deref(), Some(expected_reason.as_str()));
    let raw = cat.resolve("r1").unwrap();
    assert_eq!(cat.unavailable_reason(&raw), Some(expected_reason));
}

#[test]
fn listings_with_pmus() {
    let cat = catalog(&fake_pmu_tree());
    let events = cat.platform_events();
    let find = |name: &str| events.iter().find(|e| e.name == name);
    assert!(find("fakepmu/foo/").unwrap().available);
    assert!(!find("fakepmu/broken/").unwrap().available);
    assert!(
        find("fakepmu/foo.scale/").is_none(),
        "descriptor files are not events"
    );

    let host = catalog(&cpu_tree());
    assert!(
        host.platform_events()
            .iter()
            .all(|e| e.available || e.kind == EventKind::Pmu)
    );
    assert!(
        host.generic_events()
            .iter()
            .all(|g| g.available && g.reason.is_none())
    );

    // A cpu PMU without caps/pmu_name is just "cpu"; a missing root is an empty host.
    let bare = FakeTree::new("bare-cpu");
    bare.write("cpu/type", "4\n");
    assert_eq!(catalog(&bare).cpu_pmu_name().as_deref(), Some("cpu"));
    let nothing = Catalog::from_roots(Path::new("/nonexistent/cpc-events"), None);
    assert_eq!(nothing.cpu_pmu_name(), None);
    assert!(nothing.resolve("task-clock").is_ok());
}

/// Runs against this host's sysfs, whatever it has; needs no privileges (as root it may
/// mount tracefs, which `notes` then reports).
#[test]
fn real_host() {
    let cat = Catalog::load();
    let clock = cat.resolve("cpu-clock").unwrap();
    assert_eq!((clock.type_, clock.config), (b::PERF_TYPE_SOFTWARE, 0));
    let sysfs = Path::new("/sys/bus/event_source/devices");
    if sysfs.join("msr").is_dir() {
        let tsc = cat.resolve("msr/tsc/").unwrap();
        let type_: u32 = std::fs::read_to_string(sysfs.join("msr/type"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!((tsc.type_, tsc.pmu.as_deref()), (type_, Some("msr")));
    }
    assert_eq!(cat.cpu_pmu_name().is_none(), !sysfs.join("cpu").exists());
    assert_eq!(cat.attributes().last().map(String::as_str), Some("picnum"));
    if let Some(root) = cat.tracing_root() {
        let id_file = root.join("events/sched/sched_switch/id");
        if let Ok(id) = std::fs::read_to_string(id_file) {
            let event = cat.resolve("sched:sched_switch").unwrap();
            assert_eq!(event.config, id.trim().parse::<u64>().unwrap());
        }
    }
}
