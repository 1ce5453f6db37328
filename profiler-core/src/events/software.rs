//! perf's software events (PERF_TYPE_SOFTWARE), by perf's names and aliases.

use perf_event_open_sys::bindings;

use crate::perf::SoftwareEvent;

/// One software event: perf's name, its aliases, the config, and a caveat for listings.
#[derive(Debug)]
pub(crate) struct SwEvent {
    pub(crate) name: &'static str,
    pub(crate) aliases: &'static [&'static str],
    pub(crate) config: u64,
    pub(crate) note: Option<&'static str>,
}

const NEVER_ON_X86: &str = "never raised on x86-64";

/// In config order, as perf lists them (tools/perf/util/parse-events.c `event_symbols_sw`).
pub(crate) const SOFTWARE: &[SwEvent] = &[
    SwEvent {
        name: "cpu-clock",
        aliases: &[],
        config: SoftwareEvent::CpuClock as u64,
        note: None,
    },
    SwEvent {
        name: "task-clock",
        aliases: &[],
        config: SoftwareEvent::TaskClock as u64,
        note: None,
    },
    SwEvent {
        name: "page-faults",
        aliases: &["faults"],
        config: SoftwareEvent::PageFaults as u64,
        note: None,
    },
    SwEvent {
        name: "context-switches",
        aliases: &["cs"],
        config: SoftwareEvent::ContextSwitches as u64,
        note: Some("counted in kernel mode: reads 0 when the kernel is excluded"),
    },
    SwEvent {
        name: "cpu-migrations",
        aliases: &["migrations"],
        config: SoftwareEvent::CpuMigrations as u64,
        note: Some("counted in kernel mode: reads 0 when the kernel is excluded"),
    },
    SwEvent {
        name: "minor-faults",
        aliases: &[],
        config: SoftwareEvent::MinorFaults as u64,
        note: None,
    },
    SwEvent {
        name: "major-faults",
        aliases: &[],
        config: SoftwareEvent::MajorFaults as u64,
        note: None,
    },
    SwEvent {
        name: "alignment-faults",
        aliases: &[],
        config: SoftwareEvent::AlignmentFaults as u64,
        note: cfg_note(NEVER_ON_X86),
    },
    SwEvent {
        name: "emulation-faults",
        aliases: &[],
        config: SoftwareEvent::EmulationFaults as u64,
        note: cfg_note(NEVER_ON_X86),
    },
    SwEvent {
        name: "dummy",
        aliases: &[],
        config: SoftwareEvent::Dummy as u64,
        note: Some("counts nothing: a carrier for side-band records"),
    },
    SwEvent {
        name: "bpf-output",
        aliases: &[],
        // Not in `SoftwareEvent`: it is only a bpf_perf_event_output target, never counted.
        config: bindings::PERF_COUNT_SW_BPF_OUTPUT as u64,
        note: Some("counts nothing: a target for bpf_perf_event_output"),
    },
    SwEvent {
        name: "cgroup-switches",
        aliases: &[],
        config: SoftwareEvent::CgroupSwitches as u64,
        note: Some("Linux 5.13+; counted in kernel mode"),
    },
];

/// The x86-64 caveat only where it is true.
const fn cfg_note(note: &'static str) -> Option<&'static str> {
    if cfg!(target_arch = "x86_64") {
        Some(note)
    } else {
        None
    }
}

/// The event `name` denotes, by exact (case-sensitive) name or alias.
pub(crate) fn lookup(name: &str) -> Option<&'static SwEvent> {
    SOFTWARE
        .iter()
        .find(|e| e.name == name || e.aliases.contains(&name))
}

/// Every name and alias, for suggestions.
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    SOFTWARE
        .iter()
        .flat_map(|e| std::iter::once(e.name).chain(e.aliases.iter().copied()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_match_the_kernel_abi() {
        // include/uapi/linux/perf_event.h, enum perf_sw_ids.
        let expected = [
            ("cpu-clock", 0),
            ("task-clock", 1),
            ("page-faults", 2),
            ("faults", 2),
            ("context-switches", 3),
            ("cs", 3),
            ("cpu-migrations", 4),
            ("migrations", 4),
            ("minor-faults", 5),
            ("major-faults", 6),
            ("alignment-faults", 7),
            ("emulation-faults", 8),
            ("dummy", 9),
            ("bpf-output", 10),
            ("cgroup-switches", 11),
        ];
        for (name, config) in expected {
            assert_eq!(lookup(name).map(|e| e.config), Some(config), "{name}");
        }
        assert_eq!(
            SOFTWARE.len(),
            12,
            "every PERF_COUNT_SW_* below PERF_COUNT_SW_MAX"
        );
    }

    #[test]
    fn lookup_is_case_sensitive_like_perf() {
        assert!(lookup("CPU-CLOCK").is_none());
        assert!(lookup("cpu_clock").is_none());
    }
}
