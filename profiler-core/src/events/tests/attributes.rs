//! libcpc attributes: where they land, and where they do not apply.

use super::*;

#[test]
fn attributes_use_x86_bits_without_a_cpu_pmu() {
    let cat = catalog(&vm_tree());
    assert_eq!(
        cat.attributes(),
        ["picnum"],
        "nothing can count raw events here"
    );
    let mut raw = cat.resolve("r00c0").unwrap();
    for (attr, value) in [
        ("umask", 0x3),
        ("edge", 1),
        ("inv", 1),
        ("cmask", 2),
        ("picnum", 7),
    ] {
        cat.apply_attribute(&mut raw, attr, value).unwrap();
    }
    assert_eq!(raw.config, 0xc0 | 0x3 << 8 | 1 << 18 | 1 << 23 | 2 << 24);
    if cfg!(target_arch = "x86_64") {
        let mut raw = cat.resolve("r3c").unwrap();
        cat.apply_attribute(&mut raw, "pc", 1).unwrap();
        cat.apply_attribute(&mut raw, "anythr", 1).unwrap();
        assert_eq!(raw.config, 0x3c | 1 << 19 | 1 << 21);
        cat.apply_attribute(&mut raw, "any", 0).unwrap();
        assert_eq!(raw.config, 0x3c | 1 << 19, "value 0 clears the bit");
    }
    let err = cat.apply_attribute(&mut raw, "cmask", 256).unwrap_err();
    assert_eq!(
        err,
        EventError::AttributeOutOfRange {
            name: "cmask".into(),
            value: 256,
            max: 255
        }
    );
    assert_eq!(err.libcpc_subcode(), 4);
    assert_eq!(
        cat.apply_attribute(&mut raw, "edge", 2)
            .unwrap_err()
            .libcpc_subcode(),
        4
    );
    let err = cat.apply_attribute(&mut raw, "umsk", 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown attribute 'umsk' (did you mean umask?)"
    );
    assert_eq!(err.libcpc_subcode(), 3);
}

#[test]
fn attributes_do_not_apply_to_other_kinds() {
    let cat = catalog(&vm_tree());
    for name in ["cpu-clock", "cycles", "LLC-loads", "msr/tsc/"] {
        let mut event = cat.resolve(name).unwrap();
        let before = event.clone();
        let err = cat.apply_attribute(&mut event, "umask", 1).unwrap_err();
        assert!(
            matches!(err, EventError::AttributeNotApplicable { .. }),
            "{name}: {err}"
        );
        assert_eq!(err.libcpc_subcode(), 3);
        assert_eq!(event, before, "{name} unchanged");
        assert_eq!(cat.apply_attribute(&mut event, "picnum", 0), Ok(()));
    }
    let mut sw = cat.resolve("page-faults").unwrap();
    assert_eq!(
        cat.apply_attribute(&mut sw, "edge", 1)
            .unwrap_err()
            .to_string(),
        "attribute 'edge' does not apply to event 'page-faults': software events have no PMU \
         control bits"
    );
}

#[test]
fn attributes_follow_the_cpu_pmus_formats() {
    let cat = catalog(&cpu_tree());
    assert_eq!(cat.cpu_pmu_name().as_deref(), Some("fakelake"));
    assert_eq!(
        cat.attributes(),
        ["edge", "inv", "umask", "cmask", "picnum"]
    );
    let mut raw = cat.resolve("r3c").unwrap();
    assert_eq!(raw.pmu.as_deref(), Some("cpu"));
    cat.apply_attribute(&mut raw, "edge", 1).unwrap();
    cat.apply_attribute(&mut raw, "umask", 0x81).unwrap();
    assert_eq!(
        raw.config,
        0x3c | 0x81 << 8 | 1 << 40,
        "edge where sysfs puts it"
    );
    let err = cat.apply_attribute(&mut raw, "anythr", 1).unwrap_err();
    assert!(
        matches!(err, EventError::AttributeNotApplicable { .. }),
        "{err}"
    );

    let mut pmu_event = cat.resolve("cpu/cpu-cycles/").unwrap();
    assert!(pmu_event.needs_cpu_pmu());
    cat.apply_attribute(&mut pmu_event, "cmask", 1).unwrap();
    assert_eq!(pmu_event.config, 0x3c | 1 << 24);
    assert_eq!(pmu_event.type_, 4);
}
