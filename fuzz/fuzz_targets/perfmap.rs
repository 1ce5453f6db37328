//! JIT perf maps (`/tmp/perf-PID.map`): written by any process we profile, so untrusted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profiler_formats::symbolize::PerfMap;

fuzz_target!(|data: &[u8]| {
    let map = PerfMap::parse(&String::from_utf8_lossy(data));
    // Look up around every boundary the input could have produced.
    for probe in [
        0,
        1,
        0x1000,
        0x7fff_ffff_ffff,
        u64::MAX / 2,
        u64::MAX - 1,
        u64::MAX,
    ] {
        let _ = map.find(probe);
    }
    let _ = map.is_empty();
});
