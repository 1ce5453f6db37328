//! Catalogue-level tests: resolution end to end over fake sysfs/tracefs trees, listings,
//! attributes, and a check against this host's real sysfs. Shared fixtures live here.

mod attributes;
mod encoding;
mod host;
mod sysfs;

use perf_event_open_sys::bindings as b;

use std::path::Path;

use super::{
    Catalog, Event, EventError, EventKind, generic::GENERIC, hardware::HARDWARE,
    software::SOFTWARE, testutil::FakeTree,
};

/// A PMU-less host, like the build VM: software, tracepoint and msr PMUs only.
pub(super) fn vm_tree() -> FakeTree {
    let tree = FakeTree::new("vm");
    tree.write("software/type", "1\n");
    tree.write("tracepoint/type", "2\n");
    tree.write("msr/type", "9\n");
    tree.write("msr/format/event", "config:0-63\n");
    tree.write("msr/events/tsc", "event=0x00\n");
    tree
}

/// A host with a cpu PMU whose sysfs formats are deliberately not the x86 defaults
/// (`edge` at bit 40), so tests can tell that they were read; no `pc` or `any`.
pub(super) fn cpu_tree() -> FakeTree {
    let tree = vm_tree();
    tree.write("cpu/type", "4\n");
    tree.write("cpu/caps/pmu_name", "fakelake\n");
    tree.write("cpu/format/event", "config:0-7\n");
    tree.write("cpu/format/umask", "config:8-15\n");
    tree.write("cpu/format/edge", "config:40\n");
    tree.write("cpu/format/inv", "config:23\n");
    tree.write("cpu/format/cmask", "config:24-31\n");
    tree.write("cpu/events/cpu-cycles", "event=0x3c\n");
    tree
}

pub(super) fn catalog(tree: &FakeTree) -> Catalog {
    Catalog::from_roots(tree.path(), None)
}

/// Checks the event's fields and that `attr()` sets type and config words and nothing else.
pub(super) fn assert_encoding(event: &Event, type_: u32, config: u64, config1: u64, config2: u64) {
    let words = (event.type_, event.config, event.config1, event.config2);
    assert_eq!(words, (type_, config, config1, config2), "{}", event.name);
    let attr = event.attr();
    let raw = attr.raw();
    assert_eq!((raw.type_, raw.config), (type_, config), "{}", event.name);
    assert_eq!(
        (attr.config1(), attr.config2()),
        (config1, config2),
        "{}",
        event.name
    );
    assert_eq!(raw.size as usize, std::mem::size_of::<b::perf_event_attr>());
    assert_eq!(raw.disabled(), 1, "EventAttr::new's default");
    assert_eq!(attr.sample_policy(), crate::perf::SamplePolicy::Counting);
    let flags = [
        raw.exclude_user(),
        raw.exclude_kernel(),
        raw.exclude_hv(),
        raw.inherit(),
        raw.pinned(),
        raw.precise_ip(),
    ];
    assert_eq!(flags, [0; 6], "{}", event.name);
    assert_eq!((raw.read_format, raw.sample_type), (0, 0), "{}", event.name);
}

pub(super) fn fake_pmu_tree() -> FakeTree {
    let tree = vm_tree();
    tree.write("fakepmu/type", "42\n");
    tree.write("fakepmu/format/event", "config:0-7\n");
    tree.write("fakepmu/format/umask", "config:8-15\n");
    tree.write("fakepmu/format/split", "config1:0-3,8-11\n");
    tree.write("fakepmu/format/flag", "config:18\n");
    tree.write("fakepmu/format/ldlat", "config2:0-15\n");
    tree.write("fakepmu/format/wide", "config3:0-7\n");
    tree.write("fakepmu/events/foo", "event=0x3c,umask=0x01\n");
    tree.write("fakepmu/events/foo.scale", "1e-9\n");
    tree.write("fakepmu/events/needs", "event=0x10,ldlat=?\n");
    tree.write("fakepmu/events/broken", "event=zz\n");
    tree.mkdir("notapmu");
    tree
}
