//! What this host can count: the listings behind libcpc's event walkers and `-h` output.

use super::{
    CPU_PMU, Catalog, Event, EventInfo, EventKind, GenericInfo, generic, hardware,
    hardware::CacheEvent, software,
};

impl Catalog {
    /// Every non-generic event this catalogue can name: software, generic hardware, the
    /// hardware-cache combinations perf lists, and sysfs PMU events as `pmu/event/`.
    /// Tracepoints (thousands) are not listed; they resolve by `subsystem:event`.
    pub fn platform_events(&self) -> Vec<EventInfo> {
        let cpu_reason = self.no_cpu_pmu_reason();
        let needs_cpu = |name: String, kind| EventInfo {
            name,
            kind,
            available: cpu_reason.is_none(),
            reason: cpu_reason.clone(),
        };
        let software = software::SOFTWARE.iter().map(|sw| EventInfo {
            name: sw.name.to_owned(),
            kind: EventKind::Software,
            available: true,
            reason: sw.note.map(str::to_owned),
        });
        let hardware = hardware::HARDWARE
            .iter()
            .map(|hw| needs_cpu(hw.name.to_owned(), EventKind::Hardware));
        let caches = CacheEvent::all().map(|c| needs_cpu(c.name(), EventKind::HwCache));
        let sysfs = self.pmus.values().flat_map(|pmu| {
            pmu.events.iter().map(|(event, terms)| EventInfo {
                name: format!("{}/{event}/", pmu.name),
                kind: EventKind::Pmu,
                available: terms.is_ok(),
                reason: terms.as_ref().err().map(ToString::to_string),
            })
        });
        software
            .chain(hardware)
            .chain(caches)
            .chain(sysfs)
            .collect()
    }

    /// The PAPI names and the perf events they map to.
    pub fn generic_events(&self) -> Vec<GenericInfo> {
        let reason = self.no_cpu_pmu_reason();
        generic::GENERIC
            .iter()
            .map(|g| GenericInfo {
                name: g.name,
                maps_to: g.target.perf_name(),
                available: reason.is_none(),
                reason: reason.clone(),
            })
            .collect()
    }

    /// Why this host cannot count `event`, if it cannot; judged by which PMUs exist, not by
    /// opening it (a cpu PMU may still lack a given cache event).
    pub fn unavailable_reason(&self, event: &Event) -> Option<String> {
        if event.needs_cpu_pmu() {
            self.no_cpu_pmu_reason()
        } else {
            None
        }
    }

    /// Why events needing the cpu PMU cannot count here; `None` when they can.
    fn no_cpu_pmu_reason(&self) -> Option<String> {
        if self.cpu_pmu_name.is_some() {
            return None;
        }
        let hybrid: Vec<&str> = self
            .pmus
            .keys()
            .map(String::as_str)
            .filter(|name| matches!(*name, "cpu_core" | "cpu_atom"))
            .collect();
        let root = self.pmu_root.display();
        Some(if hybrid.is_empty() {
            // arm64 names its CPU PMU by the implementation.
            let arm = if cfg!(target_arch = "aarch64") {
                " or armv8_*/armv9_*"
            } else {
                ""
            };
            format!("no hardware PMU on this host (no {root}/{CPU_PMU}{arm})")
        } else {
            format!(
                "hybrid CPU PMUs ({}) are reachable only as pmu/event/ (no {root}/{CPU_PMU})",
                hybrid.join(", ")
            )
        })
    }
}
