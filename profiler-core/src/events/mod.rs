//! Event names → `perf_event_attr` encodings: the one event-name parser the project shares.
//!
//! [`Catalog::resolve`] accepts, trying each grammar in this order (names are case-sensitive,
//! as in perf and libcpc):
//!
//! 1. perf's software events and aliases (`cpu-clock`, `cs`, ...) → PERF_TYPE_SOFTWARE;
//! 2. perf's generic hardware events and aliases (`cycles`, `branches`, ...) → HARDWARE;
//! 3. libcpc's generic (PAPI) names (`PAPI_tot_cyc`) → the perf event they map to;
//! 4. perf's hardware-cache grammar (`L1-dcache-load-misses`, `dTLB-loads`) → HW_CACHE;
//! 5. `pmu/event/` and `pmu/term=value,.../` over sysfs PMUs (`msr/tsc/`) → the PMU's type;
//! 6. `subsystem:event` tracepoints (`sched:sched_switch`) → TRACEPOINT, id from tracefs;
//! 7. raw codes: perf's `r01c2` and libcpc's strtol numbers (`0x3c`, `60`) → RAW.
//!
//! Resolving is about names, not this host's counters: `cycles` resolves on a machine
//! without a hardware PMU (opening it then fails with ENOENT). [`Catalog::unavailable_reason`]
//! and the listings say what this host can count. perf's `:u`/`:k` modifiers are not part of
//! the grammar: user/system selection is a libcpc request flag.

mod attribute;
mod format;
mod generic;
mod grammar;
mod hardware;
mod listing;
pub mod p6;
mod pmu;
mod raw;
mod software;
mod suggest;
mod tracepoint;

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testutil;

use std::{
    collections::BTreeMap,
    fmt, fs,
    path::{Path, PathBuf},
};

use perf_event_open_sys::bindings;

use self::{generic::Target, pmu::Pmu, suggest::did_you_mean, tracepoint::Tracing};
use crate::perf::EventAttr;

/// Where the kernel lists PMUs.
const PMU_ROOT: &str = "/sys/bus/event_source/devices";
/// The core PMU on non-hybrid x86 (and the PMU that PERF_TYPE_HARDWARE/RAW reach).
const CPU_PMU: &str = "cpu";

/// Whether a PMU of this name counts the CPU's own events: x86's `cpu`; arm64's PMU driver
/// names it by its implementation (`armv8_pmuv3_0`, `armv8_cortex_a72`, `armv9_neoverse_v2`).
pub(crate) fn is_cpu_pmu(name: &str) -> bool {
    name == CPU_PMU || name.starts_with("armv8_") || name.starts_with("armv9_")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    Software,
    Hardware,
    HwCache,
    Raw,
    Pmu,
    Tracepoint,
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EventKind::Software => "software",
            EventKind::Hardware => "generic hardware",
            EventKind::HwCache => "hardware-cache",
            EventKind::Raw => "raw",
            EventKind::Pmu => "PMU",
            EventKind::Tracepoint => "tracepoint",
        })
    }
}

/// A resolved event: what goes into `perf_event_attr` to count it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Canonical name (`context-switches` for `cs`); for PAPI names, the PAPI name given;
    /// for raw, PMU and tracepoint events, the name as given.
    pub name: String,
    pub kind: EventKind,
    /// The sysfs PMU it is opened on: the PMU of a `pmu/.../` event, or `cpu` for hardware,
    /// cache and raw events when this host has a cpu PMU. `None` for software and
    /// tracepoint events, whose types are fixed.
    pub pmu: Option<String>,
    /// `perf_event_attr.type`.
    pub type_: u32,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    /// The PAPI name when resolved from one (`Some("PAPI_tot_cyc")`).
    pub generic: Option<&'static str>,
}

impl Event {
    /// A `perf_event_attr` with type and config words set and everything else at
    /// [`EventAttr::new`]'s defaults.
    pub fn attr(&self) -> EventAttr {
        let mut attr = EventAttr::new(self.type_, self.config);
        attr.set_config1(self.config1).set_config2(self.config2);
        attr
    }

    /// Whether counting it needs the CPU's PMU: hardware, cache and raw events, and sysfs
    /// events of the `cpu` PMU.
    pub fn needs_cpu_pmu(&self) -> bool {
        match self.kind {
            EventKind::Hardware | EventKind::HwCache | EventKind::Raw => true,
            EventKind::Pmu => self.pmu.as_deref().is_some_and(is_cpu_pmu),
            EventKind::Software | EventKind::Tracepoint => false,
        }
    }
}

/// Why a name or attribute was refused. [`EventError::libcpc_subcode`] maps each onto
/// libcpc's error-handler subcodes.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum EventError {
    #[error("unknown event '{name}'{}", did_you_mean(.suggestions))]
    Unknown {
        name: String,
        suggestions: Vec<String>,
    },
    /// In a grammar (raw code, `pmu/.../`, tracepoint) but not valid in it.
    #[error("malformed event '{name}': {reason}")]
    Malformed { name: String, reason: String },
    /// Well-formed, but what would resolve it is missing (tracefs not mounted, unreadable).
    #[error("event '{name}' is unavailable: {reason}")]
    Unavailable { name: String, reason: String },
    #[error("unknown attribute '{name}'{}", did_you_mean(.suggestions))]
    UnknownAttribute {
        name: String,
        suggestions: Vec<String>,
    },
    /// A known attribute on an event whose encoding has no place for it (a software event).
    #[error("attribute '{attr}' does not apply to event '{event}': {reason}")]
    AttributeNotApplicable {
        attr: String,
        event: String,
        reason: String,
    },
    #[error("attribute '{name}' value {value} is out of range (max {max})")]
    AttributeOutOfRange { name: String, value: u64, max: u64 },
}

impl EventError {
    /// libcpc's subcode for the error handler: CPC_INVALID_EVENT (1),
    /// CPC_INVALID_ATTRIBUTE (3) or CPC_ATTRIBUTE_OUT_OF_RANGE (4).
    pub fn libcpc_subcode(&self) -> i32 {
        match self {
            EventError::Unknown { .. }
            | EventError::Malformed { .. }
            | EventError::Unavailable { .. } => 1,
            EventError::UnknownAttribute { .. } | EventError::AttributeNotApplicable { .. } => 3,
            EventError::AttributeOutOfRange { .. } => 4,
        }
    }
}

/// A platform (non-generic) event, for listings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    pub name: String,
    pub kind: EventKind,
    pub available: bool,
    /// Why it is unavailable, or a caveat when it is available.
    pub reason: Option<String>,
}

/// A generic (PAPI) event and the perf event it maps to, for listings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenericInfo {
    pub name: &'static str,
    pub maps_to: String,
    pub available: bool,
    pub reason: Option<String>,
}

/// What this host (or a fake sysfs tree) offers: PMUs and tracefs, read once.
#[derive(Debug)]
pub struct Catalog {
    pmu_root: PathBuf,
    pmus: BTreeMap<String, Pmu>,
    /// The CPU PMU's sysfs directory (`cpu`, `armv8_pmuv3_0`), if the host has one.
    cpu_pmu: Option<String>,
    cpu_pmu_name: Option<String>,
    tracing: Tracing,
    notes: Vec<String>,
}

impl Catalog {
    /// This host: `/sys/bus/event_source/devices` and tracefs. Running as root where tracefs
    /// is not mounted, this mounts it at /sys/kernel/tracing (see [`Catalog::notes`]).
    pub fn load() -> Catalog {
        let mut notes = Vec::new();
        let tracing = Tracing::discover(&mut notes);
        let mut catalog = Catalog::with_tracing(Path::new(PMU_ROOT), tracing);
        catalog.notes = notes;
        catalog
    }

    /// A catalogue over other roots (fake sysfs trees in tests). `tracing_root` is used as
    /// is, never mounted; without one, tracepoint names are unavailable.
    pub fn from_roots(pmu_root: &Path, tracing_root: Option<&Path>) -> Catalog {
        let tracing = match tracing_root {
            Some(root) => Tracing::at(root),
            None => Tracing::none(grammar::NoTracing::NotGiven),
        };
        Catalog::with_tracing(pmu_root, tracing)
    }

    fn with_tracing(pmu_root: &Path, tracing: Tracing) -> Catalog {
        let mut dirs: Vec<PathBuf> = fs::read_dir(pmu_root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .collect();
        dirs.sort();
        let pmus: BTreeMap<String, Pmu> = dirs
            .iter()
            .filter_map(|dir| Pmu::load(dir))
            .map(|pmu| (pmu.name.clone(), pmu))
            .collect();
        // x86's `cpu`, else arm64's first CPU PMU (a big.LITTLE host has one per cluster;
        // PERF_TYPE_HARDWARE and PERF_TYPE_RAW go to the one of the CPU counted on).
        let cpu_pmu = pmus
            .keys()
            .find(|name| name.as_str() == CPU_PMU)
            .or_else(|| pmus.keys().find(|name| is_cpu_pmu(name)))
            .cloned();
        let cpu_pmu_name = cpu_pmu.as_ref().map(|dir| {
            fs::read_to_string(pmu_root.join(dir).join("caps/pmu_name"))
                .map(|name| name.trim().to_owned())
                .ok()
                .filter(|name| !name.is_empty())
                .unwrap_or_else(|| dir.clone())
        });
        Catalog {
            pmu_root: pmu_root.to_owned(),
            pmus,
            cpu_pmu,
            cpu_pmu_name,
            tracing,
            notes: Vec::new(),
        }
    }

    /// Resolves an event name (grammar in the module docs).
    pub fn resolve(&self, name: &str) -> Result<Event, EventError> {
        if let Some(sw) = software::lookup(name) {
            return Ok(Event {
                name: sw.name.to_owned(),
                kind: EventKind::Software,
                pmu: None,
                type_: bindings::PERF_TYPE_SOFTWARE,
                config: sw.config,
                config1: 0,
                config2: 0,
                generic: None,
            });
        }
        if let Some(hw) = hardware::lookup(name) {
            return Ok(self.target_event(Target::Hardware(hw)));
        }
        if let Some(g) = generic::lookup(name) {
            let mut event = self.target_event(g.target);
            event.name = g.name.to_owned();
            event.generic = Some(g.name);
            return Ok(event);
        }
        if let Some(cache) = hardware::parse_cache(name) {
            return match cache {
                Ok(cache) => Ok(self.target_event(Target::Cache(cache))),
                Err(reason) => Err(malformed(name, reason)),
            };
        }
        if let Some(event) = pmu::resolve(&self.pmus, name) {
            return event;
        }
        if let Some((base, _)) = name.split_once(':')
            && is_builtin(base)
        {
            return Err(malformed(
                name,
                "perf's :u/:k/:p modifiers are not part of event names here; user and \
                 system counting are request flags (nouser, sys)"
                    .to_owned(),
            ));
        }
        if let Some(event) = self.tracing.resolve(name) {
            return event;
        }
        if let Some(code) = raw::parse(name) {
            let config = code.map_err(|reason| malformed(name, reason))?;
            return Ok(self.cpu_event(
                name.to_owned(),
                EventKind::Raw,
                bindings::PERF_TYPE_RAW,
                config,
            ));
        }
        Err(EventError::Unknown {
            name: name.to_owned(),
            suggestions: self.suggestions(name),
        })
    }

    /// Sets a libcpc attribute (`umask`, `edge`, `inv`, `cmask`, `pc`, `anythr` or its Linux
    /// name `any`) in `event`'s config, at the bits the cpu PMU's sysfs format gives, or the
    /// x86 event-select bits (umask 8-15, edge 18, pc 19, any 21, inv 23, cmask 24-31) when
    /// there is no cpu format. Applies to raw events and to PMU events whose PMU has that
    /// format term; other kinds give [`EventError::AttributeNotApplicable`]. `picnum` is
    /// accepted and changes nothing (the cpc layer range-checks it).
    ///
    /// This encodes whatever it can; whether the attribute is offered on this host at all
    /// (libcpc's `cpc_walk_attrs`) is [`Catalog::attributes`], which the cpc layer checks.
    pub fn apply_attribute(
        &self,
        event: &mut Event,
        attr: &str,
        value: u64,
    ) -> Result<(), EventError> {
        attribute::apply(&self.pmus, self.cpu_pmu.as_deref(), event, attr, value)
    }

    /// libcpc attribute names usable here, ending with `picnum`. Only `picnum` without a
    /// cpu PMU; otherwise those of edge, pc, inv, umask, cmask and anythr that its sysfs
    /// format defines (all of them when it publishes no formats, on x86).
    pub fn attributes(&self) -> Vec<String> {
        attribute::available(&self.pmus, self.cpu_pmu.as_deref())
    }

    /// The cpu PMU's name (`caps/pmu_name`, e.g. "skylake"), "cpu" when it publishes none,
    /// `None` without a cpu PMU.
    pub fn cpu_pmu_name(&self) -> Option<String> {
        self.cpu_pmu_name.clone()
    }

    /// What loading did to the system, e.g. mounting tracefs.
    pub fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    /// The tracefs root tracepoints are read from, if there is one.
    pub fn tracing_root(&self) -> Option<&Path> {
        self.tracing.root()
    }

    /// A hardware or cache event, on the cpu PMU when there is one.
    fn target_event(&self, target: Target) -> Event {
        match target {
            Target::Hardware(hw) => self.cpu_event(
                hw.name.to_owned(),
                EventKind::Hardware,
                bindings::PERF_TYPE_HARDWARE,
                hw.config,
            ),
            Target::Cache(cache) => self.cpu_event(
                cache.name(),
                EventKind::HwCache,
                bindings::PERF_TYPE_HW_CACHE,
                cache.config(),
            ),
        }
    }

    fn cpu_event(&self, name: String, kind: EventKind, type_: u32, config: u64) -> Event {
        Event {
            name,
            kind,
            pmu: self.cpu_pmu.clone(),
            type_,
            config,
            config1: 0,
            config2: 0,
            generic: None,
        }
    }

    /// Names close to `name` among everything resolvable; tracepoints only for names with
    /// a `:`, since listing them reads thousands of directories.
    fn suggestions(&self, name: &str) -> Vec<String> {
        let mut known: Vec<String> = software::names().map(str::to_owned).collect();
        known.extend(hardware::names());
        known.extend(generic::GENERIC.iter().map(|g| g.name.to_owned()));
        known.extend(self.pmus.values().flat_map(Pmu::event_names));
        if name.contains(':') {
            known.extend(self.tracing.names());
        }
        suggest::suggest(name, known.iter().map(String::as_str))
    }
}

fn malformed(name: &str, reason: impl fmt::Display) -> EventError {
    EventError::Malformed {
        name: name.to_owned(),
        reason: reason.to_string(),
    }
}

/// Whether `name` is a software, hardware, PAPI or cache event name.
fn is_builtin(name: &str) -> bool {
    software::lookup(name).is_some()
        || hardware::lookup(name).is_some()
        || generic::lookup(name).is_some()
        || hardware::parse_cache(name).is_some()
}
