//! Folded stacks given to `report -i` and `flamegraph -i`/`--diff`, then rendered: no panic
//! on any input (counts near u64::MAX included).
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiler_formats::profile::{
    ReportOptions, profile_from_folded, render_report, write_flamegraph, write_folded,
};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(profile) = profile_from_folded(text) {
        let _ = render_report(&profile, ReportOptions::default());
        let mut out = Vec::new();
        let _ = write_folded(&profile, &mut out);
        let _ = write_flamegraph(&profile, "fuzz", &mut out);
    }
});
