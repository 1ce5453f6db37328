//! pprof files given to `report -i` and `flamegraph -i` (gzip or raw protobuf), read back
//! and re-encoded: neither may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiler_formats::profile::{ReportOptions, read_pprof, render_report, write_pprof};

fuzz_target!(|data: &[u8]| {
    if let Ok(profile) = read_pprof(data) {
        let _ = render_report(&profile, ReportOptions::default());
        let mut out = Vec::new();
        let _ = write_pprof(&profile, &mut out);
    }
});
