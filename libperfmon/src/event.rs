//! A `struct pmc` as a perf event. With the extension flag PMCF_SW the event number names a
//! Linux software event. Without it the number means what [`Names`] says: the user's
//! `PERFMON_EVENTS` entry, the P6 table's generic event, or (on a P6-compatible PMU) a raw
//! event whose event-select value is the number, unit mask, edge/invert bits and counter
//! mask (the P6 layout that x86 PMUs keep).

use perf_event_open_sys::bindings;
use profiler_core::{
    events,
    perf::{EventAttr, SoftwareEvent},
};

use crate::{
    abi::{PMCF_E, PMCF_INV, PMCF_OS, PMCF_PC, PMCF_SW, PMCF_USR, Pmc},
    names::{Meaning, Names},
};

/// What a counter counts, decided at PMIOSETUP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A raw PMU event: perf's `config` for PERF_TYPE_RAW.
    Raw(u64),
    Software(SoftwareEvent),
    /// A named event: `PERFMON_EVENTS`'s choice or the P6 table's; `why` says which.
    Named {
        code: u8,
        why: String,
        event: Box<events::Event>,
    },
}

/// Why a `struct pmc` names no event.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EventError {
    #[error("software event {0} does not exist (PMC_SW_* names the ones that do)")]
    NoSuchSoftwareEvent(u8),
    #[error(
        "a software event takes no unit mask, counter mask or PMCF_INV (unit {unit:#x}, mask {mask:#x}, flags {flags:#x})"
    )]
    SoftwareQualifiers { unit: u8, mask: u8, flags: u8 },
    #[error(
        "event {0:#x} is not one of perfmon(4)'s P6 events with a generic counterpart here, and this host has no P6-compatible PMU to count it as a raw code (PERFMON_EVENTS={0}=EVENT names what to count)"
    )]
    NoMeaning(u8),
}

fn software(event: u8) -> Option<SoftwareEvent> {
    Some(match event {
        0 => SoftwareEvent::CpuClock,
        1 => SoftwareEvent::TaskClock,
        2 => SoftwareEvent::PageFaults,
        3 => SoftwareEvent::ContextSwitches,
        4 => SoftwareEvent::CpuMigrations,
        5 => SoftwareEvent::MinorFaults,
        6 => SoftwareEvent::MajorFaults,
        7 => SoftwareEvent::AlignmentFaults,
        8 => SoftwareEvent::EmulationFaults,
        9 => SoftwareEvent::Dummy,
        11 => SoftwareEvent::CgroupSwitches,
        // 10 is PERF_COUNT_SW_BPF_OUTPUT, which cannot count.
        _ => return None,
    })
}

impl Event {
    /// The event a `struct pmc` names (its driver-only flags already cleared).
    pub fn of(pmc: &Pmc, names: &Names) -> Result<Self, EventError> {
        if pmc.flags & PMCF_SW != 0 {
            if pmc.unit != 0 || pmc.mask != 0 || pmc.flags & PMCF_INV != 0 {
                return Err(EventError::SoftwareQualifiers {
                    unit: pmc.unit,
                    mask: pmc.mask,
                    flags: pmc.flags,
                });
            }
            return software(pmc.event)
                .map(Event::Software)
                .ok_or(EventError::NoSuchSoftwareEvent(pmc.event));
        }
        let (edge, invert) = (pmc.flags & PMCF_E != 0, pmc.flags & PMCF_INV != 0);
        let named = |why: String, event: &events::Event| Event::Named {
            code: pmc.event,
            why,
            event: Box::new(event.clone()),
        };
        match names.meaning(pmc.event, pmc.unit, pmc.mask, edge, invert) {
            Meaning::Chosen(e) => return Ok(named("PERFMON_EVENTS".to_owned(), e)),
            Meaning::Table(p6, e) => return Ok(named(format!("P6 {}", p6.name), e)),
            Meaning::Unknown => return Err(EventError::NoMeaning(pmc.event)),
            Meaning::Raw => {}
        }
        // PerfEvtSel: event 0-7, unit mask 8-15, E 18, PC 19, INV 23, counter mask 24-31;
        // USR (16) and OS (17) become perf's exclude bits instead.
        let hw_flags = pmc.flags & (PMCF_E | PMCF_PC | PMCF_INV);
        Ok(Event::Raw(
            u64::from(pmc.event)
                | u64::from(pmc.unit) << 8
                | u64::from(hw_flags) << 16
                | u64::from(pmc.mask) << 24,
        ))
    }

    /// The perf attributes: disabled, counting, user/kernel as PMCF_USR/PMCF_OS say (neither
    /// counts nothing, as on the hardware).
    pub fn attr(&self, flags: u8, inherit: bool) -> EventAttr {
        let mut attr = match self {
            Event::Raw(config) => EventAttr::new(bindings::PERF_TYPE_RAW, *config),
            Event::Software(e) => EventAttr::software(*e),
            Event::Named { event, .. } => event.attr(),
        };
        let kernel = flags & PMCF_OS != 0;
        attr.set_exclude_user(flags & PMCF_USR == 0)
            .set_exclude_kernel(!kernel)
            .set_exclude_hv(!kernel)
            .set_inherit(inherit);
        attr
    }

    /// Whether it needs the CPU's PMU (opening it fails without one).
    pub fn needs_pmu(&self) -> bool {
        match self {
            Event::Raw(_) => true,
            Event::Software(_) => false,
            Event::Named { event, .. } => event.needs_cpu_pmu(),
        }
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Raw(config) => write!(f, "raw event {config:#x}"),
            Event::Software(e) => write!(f, "software event {e:?}"),
            Event::Named { code, why, event } => {
                write!(f, "event {code:#x} ({why}: {})", event.name)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names on a host with a P6-compatible PMU (`raw`) or without a PMU, and no
    /// PERFMON_EVENTS.
    fn names(raw: bool) -> Names {
        let catalog = events::Catalog::from_roots(std::path::Path::new("/nonexistent"), None);
        Names::new(&catalog, None, raw).unwrap()
    }

    fn pmc(event: u8, unit: u8, flags: u8, mask: u8) -> Pmc {
        Pmc {
            num: 0,
            event,
            unit,
            flags,
            mask,
        }
    }

    #[test]
    fn hardware_events_keep_the_event_select_layout() {
        // L2_LD with all MESI bits, edge, inverted, counter mask 3, user and kernel.
        let p6 = names(true);
        let e = Event::of(
            &pmc(0x29, 0x0f, PMCF_USR | PMCF_OS | PMCF_E | PMCF_INV, 3),
            &p6,
        );
        assert_eq!(e, Ok(Event::Raw(0x0384_0f29)));
        assert_eq!(
            Event::of(&pmc(0xc1, 0, PMCF_USR, 0), &p6),
            Ok(Event::Raw(0xc1)),
            "USR/OS are not config bits"
        );
    }

    #[test]
    fn table_events_are_generic_everywhere_and_other_numbers_need_a_p6_pmu() {
        for host in [names(true), names(false)] {
            let e = Event::of(&pmc(0xc0, 0, PMCF_USR, 0), &host).unwrap();
            assert_eq!(e.to_string(), "event 0xc0 (P6 INST_RETIRED: instructions)");
            let a = e.attr(PMCF_USR, false);
            assert_eq!(
                (a.raw().type_, a.raw().config),
                (0, 1),
                "HARDWARE, INSTRUCTIONS"
            );
            assert!(e.needs_pmu());
        }
        assert_eq!(
            Event::of(&pmc(0xc1, 0, PMCF_USR, 0), &names(false)),
            Err(EventError::NoMeaning(0xc1))
        );
    }

    #[test]
    fn the_software_extension_names_perf_software_events() {
        let e = Event::of(&pmc(2, 0, PMCF_SW | PMCF_USR | PMCF_E, 0), &names(false)).unwrap();
        assert_eq!(e, Event::Software(SoftwareEvent::PageFaults));
        let a = e.attr(PMCF_SW | PMCF_USR, true);
        let r = a.raw();
        assert_eq!((r.type_, r.config), (1, 2));
        assert_eq!(
            (r.exclude_user(), r.exclude_kernel(), r.exclude_hv()),
            (0, 1, 1)
        );
        assert_eq!((r.inherit(), r.disabled()), (1, 1));
        assert_eq!(
            Event::of(&pmc(10, 0, PMCF_SW, 0), &names(false)),
            Err(EventError::NoSuchSoftwareEvent(10))
        );
        assert_eq!(
            Event::of(&pmc(200, 0, PMCF_SW, 0), &names(false)),
            Err(EventError::NoSuchSoftwareEvent(200))
        );
        for (unit, mask, flags) in [(1, 0, 0), (0, 1, 0), (0, 0, PMCF_INV)] {
            assert!(Event::of(&pmc(2, unit, PMCF_SW | flags, mask), &names(false)).is_err());
        }
    }

    #[test]
    fn usr_and_os_choose_the_modes_counted() {
        let e = Event::Raw(0xc0);
        let modes = |flags| {
            let a = e.attr(flags, false);
            (a.raw().exclude_user(), a.raw().exclude_kernel())
        };
        assert_eq!(modes(PMCF_USR | PMCF_OS), (0, 0));
        assert_eq!(modes(PMCF_OS), (1, 0));
        assert_eq!(modes(0), (1, 1), "neither: counts nothing");
        assert_eq!(e.attr(PMCF_USR, false).raw().type_, 4, "PERF_TYPE_RAW");
    }
}
