//! cputrack/cpustat `-c` specs (getsubopt tokens, strtoll values) and the event catalogue's
//! name parser (perf names, PAPI names, raw codes, `pmu/term=v,../`, tracepoints), with
//! this host's catalogue: neither may panic on any input.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use profiler_core::cpc::events::Catalog;
use profiler_formats::spec;

static CATALOG: LazyLock<Catalog> = LazyLock::new(Catalog::load);

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let catalog = &*CATALOG;
    if let Ok(event) = catalog.resolve(text) {
        let _ = event.attr();
        let _ = catalog.unavailable_reason(&event);
    }
    let ctx = spec::SpecContext {
        npic: 8,
        attributes: catalog.attributes(),
        check: Box::new(|name: &str| {
            let event = catalog.resolve(name)?;
            match catalog.unavailable_reason(&event) {
                None => Ok(()),
                Some(reason) => Err(spec::Uncountable::Unavailable {
                    name: name.to_owned(),
                    reason,
                }),
            }
        }),
    };
    if let Ok(set) = spec::parse(text, &ctx) {
        let _ = (set.pics(), set.is_system_only());
    }
});
