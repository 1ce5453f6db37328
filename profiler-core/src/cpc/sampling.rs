//! perf attributes of notifying and sampling requests: the period a preset means, and
//! libcpc's hardware sampling (`CPC_HW_SMPL`) as precise sampling.

use crate::perf::EventAttr;

/// libcpc's `CPC_HW_SMPL` on Linux: precise sampling (PEBS, IBS) at `precise` with the
/// PMU capturing IP, data address, weight (latency) and data source. The overflow engine
/// delivers these requests like notifying ones; its records carry the precise IP and the
/// data address (a perf_event BPF program can read only regs, sample_period and addr, so
/// weight and data source stay in perf's own sample).
pub(crate) fn hw_sampling_attr(attr: &mut EventAttr, precise: u8) {
    use perf_event_open_sys::bindings::{
        PERF_SAMPLE_ADDR, PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_IP, PERF_SAMPLE_WEIGHT,
    };
    attr.set_precise_ip(precise);
    attr.set_sample_type(
        (PERF_SAMPLE_IP | PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC) as u64,
    );
}

/// The PMU's highest precise_ip level (its `caps/max_precise`), 0 without one.
pub(crate) fn max_precise() -> u8 {
    std::fs::read_to_string("/sys/bus/event_source/devices/cpu/caps/max_precise")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// `2^64 - preset`: events until a counter starting at `preset` wraps. 0 means never.
pub(crate) fn period_for(preset: u64) -> u64 {
    preset.wrapping_neg()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_from_presets() {
        assert_eq!(period_for(u64::MAX - 999), 1000);
        assert_eq!(period_for(u64::MAX), 1);
        assert_eq!(period_for(0), 0, "preset 0 never overflows");
        assert_eq!(
            period_for(u64::MAX - i32::MAX as u64),
            1 << 31,
            "libcpc's portable range"
        );
    }

    #[test]
    fn hardware_sampling_encoding() {
        // A PEBS load-latency style request: MEM_TRANS_RETIRED.LOAD_LATENCY is raw 0x1cd.
        let mut attr = EventAttr::new(perf_event_open_sys::bindings::PERF_TYPE_RAW, 0x1cd);
        attr.set_config1(3); // ldlat threshold, as libcpc's ld_lat_threshold
        hw_sampling_attr(&mut attr, 3);
        let raw = attr.raw();
        assert_eq!(raw.precise_ip(), 3);
        // IP (1) | ADDR (8) | WEIGHT (0x4000) | DATA_SRC (0x8000), from perf_event.h.
        assert_eq!(raw.sample_type, 0x1 | 0x8 | 0x4000 | 0x8000);
        assert_eq!((raw.type_, raw.config, attr.config1()), (4, 0x1cd, 3));
    }
}
