//! What a bare event number means here: `PERFMON_EVENTS` first (the user's choice for an
//! unchanged program), then the P6 table (perfmon(4)'s documented events as perf's generic
//! ones), then a raw code, but only on a P6-compatible PMU, where the code means what the
//! program meant.
//!
//! `PERFMON_EVENTS='2=page-faults,3=context-switches'` is a comma-separated list of
//! `NUMBER=EVENT`: NUMBER 0-255 (decimal or 0x hex), EVENT any name `profiler list` shows
//! (software, hardware, cache, `pmu/.../` with its own commas, tracepoints, raw codes).

use std::{collections::BTreeMap, ffi::OsStr, path::Path};

use profiler_core::events::{Catalog, Event as Named, EventError as NameError, p6::P6Event};

const PMU_ROOT: &str = "/sys/bus/event_source/devices";

/// A `PERFMON_EVENTS` value that cannot be used; printed as one line.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MappingError {
    #[error("PERFMON_EVENTS is not valid UTF-8")]
    NotUtf8,
    #[error("PERFMON_EVENTS: '{0}': expected NUMBER=EVENT, e.g. 2=page-faults")]
    Syntax(String),
    #[error("PERFMON_EVENTS: '{0}': the event number must be 0-255 (decimal or 0x hex)")]
    Number(String),
    #[error("PERFMON_EVENTS: event number {0} is mapped twice")]
    Twice(u8),
    #[error("PERFMON_EVENTS: '{entry}': {source}")]
    Event { entry: String, source: NameError },
    #[error("PERFMON_EVENTS: '{entry}': cannot be counted here: {reason}")]
    Unavailable { entry: String, reason: String },
}

/// How event numbers are read for this device's writer.
#[derive(Debug)]
pub struct Names {
    /// From `PERFMON_EVENTS`.
    chosen: BTreeMap<u8, Named>,
    /// The P6 table's entries, resolved on this host.
    table: BTreeMap<u8, (&'static P6Event, Named)>,
    /// Numbers in neither go to the PMU as raw codes (a P6-compatible PMU is here).
    raw: bool,
}

/// What a bare number (no PMCF_SW) is counted as.
#[derive(Debug, PartialEq, Eq)]
pub enum Meaning<'a> {
    /// The user's `PERFMON_EVENTS` entry.
    Chosen(&'a Named),
    /// The P6 table's generic event.
    Table(&'a P6Event, &'a Named),
    /// The raw code, on a P6-compatible PMU.
    Raw,
    /// Nothing on this host.
    Unknown,
}

impl Names {
    /// Every bare number a raw code: no PERFMON_EVENTS, no table (the driver's own rule,
    /// for a device opened without reading the host).
    pub const RAW_ONLY: Names = Names {
        chosen: BTreeMap::new(),
        table: BTreeMap::new(),
        raw: true,
    };

    /// This host's names, with `PERFMON_EVENTS` from the environment.
    pub fn from_env() -> Result<Self, MappingError> {
        let catalog = Catalog::from_roots(Path::new(PMU_ROOT), tracing_root());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let raw = catalog.cpu_pmu_name().is_some() && p6_compatible(&cpuinfo);
        Self::new(&catalog, std::env::var_os("PERFMON_EVENTS").as_deref(), raw)
    }

    pub fn new(catalog: &Catalog, env: Option<&OsStr>, raw: bool) -> Result<Self, MappingError> {
        let table = profiler_core::events::p6::P6_EVENTS
            .iter()
            .filter_map(|e| Some((e.code, (e, catalog.resolve(e.maps_to).ok()?))))
            .collect();
        let chosen = match env {
            None => BTreeMap::new(),
            Some(v) if v.is_empty() => BTreeMap::new(),
            Some(v) => parse(v.to_str().ok_or(MappingError::NotUtf8)?, catalog)?,
        };
        Ok(Self { chosen, table, raw })
    }

    /// What `event` with these qualifiers counts. The user's choice takes the number
    /// whatever its qualifiers; the table only the plain event ([`P6Event::plain`]).
    pub fn meaning(&self, event: u8, unit: u8, mask: u8, edge: bool, invert: bool) -> Meaning<'_> {
        if let Some(n) = self.chosen.get(&event) {
            return Meaning::Chosen(n);
        }
        match self.table.get(&event) {
            Some((p6, n)) if p6.plain(unit, mask, edge, invert) => Meaning::Table(p6, n),
            _ if self.raw => Meaning::Raw,
            _ => Meaning::Unknown,
        }
    }
}

/// The tracefs root, if mounted (never mounted from here: this runs inside a program).
fn tracing_root() -> Option<&'static Path> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.join("events").is_dir())
}

/// Whether /proc/cpuinfo describes a CPU whose PMU reads P6 event-select codes as perfmon(4)
/// programs mean them: Intel family 6 (the Pentium Pro and every Core since).
fn p6_compatible(cpuinfo: &str) -> bool {
    let field = |key: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_owned())
        })
    };
    field("vendor_id").as_deref() == Some("GenuineIntel")
        && field("cpu family").as_deref() == Some("6")
}

/// `NUMBER=EVENT,...`; commas inside a `pmu/term=v,term=v/` event do not split it.
fn parse(value: &str, catalog: &Catalog) -> Result<BTreeMap<u8, Named>, MappingError> {
    let mut map = BTreeMap::new();
    for entry in split(value) {
        let (number, name) = entry
            .split_once('=')
            .filter(|(n, e)| !n.trim().is_empty() && !e.trim().is_empty())
            .ok_or_else(|| MappingError::Syntax(entry.to_owned()))?;
        let number = number_of(number.trim()).ok_or_else(|| MappingError::Number(entry.into()))?;
        let event = catalog
            .resolve(name.trim())
            .map_err(|source| MappingError::Event {
                entry: entry.to_owned(),
                source,
            })?;
        if let Some(reason) = catalog.unavailable_reason(&event) {
            return Err(MappingError::Unavailable {
                entry: entry.to_owned(),
                reason,
            });
        }
        if map.insert(number, event).is_some() {
            return Err(MappingError::Twice(number));
        }
    }
    Ok(map)
}

fn split(value: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut in_pmu) = (0, false);
    for (i, c) in value.char_indices() {
        match c {
            '/' => in_pmu = !in_pmu,
            ',' if !in_pmu => {
                parts.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&value[start..]);
    parts
}

fn number_of(s: &str) -> Option<u8> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use perf_event_open_sys::bindings as b;

    use super::*;

    /// A host without a cpu PMU (this project's VMs).
    fn no_pmu() -> Catalog {
        Catalog::from_roots(Path::new("/nonexistent"), None)
    }

    fn names(env: &str) -> Result<Names, MappingError> {
        Names::new(&no_pmu(), Some(OsStr::new(env)), false)
    }

    #[test]
    fn the_issue_s_example_maps_two_numbers_to_software_events() {
        let n = names("2=page-faults,3=context-switches").unwrap();
        let Meaning::Chosen(e) = n.meaning(2, 0, 0, false, false) else {
            panic!("2 is chosen")
        };
        assert_eq!(
            (e.name.as_str(), e.type_, e.config),
            ("page-faults", b::PERF_TYPE_SOFTWARE, 2)
        );
        let Meaning::Chosen(e) = n.meaning(3, 0x0f, 1, true, true) else {
            panic!("3 is chosen, whatever its qualifiers")
        };
        assert_eq!(e.config, u64::from(b::PERF_COUNT_SW_CONTEXT_SWITCHES));
        assert_eq!(n.meaning(4, 0, 0, false, false), Meaning::Unknown);
    }

    #[test]
    fn a_chosen_number_overrides_the_table_and_hex_numbers_and_pmu_commas_parse() {
        let n = names(" 0xc0 = task-clock ,0x79=cpu-clock").unwrap();
        let Meaning::Chosen(e) = n.meaning(0xc0, 0, 0, false, false) else {
            panic!("chosen")
        };
        assert_eq!(e.name, "task-clock");
        assert_eq!(
            split("1=cpu/event=0x3c,umask=1/,2=cs"),
            ["1=cpu/event=0x3c,umask=1/", "2=cs"]
        );
    }

    #[test]
    fn the_table_takes_plain_events_and_raw_codes_only_a_p6_pmu() {
        let n = Names::new(&no_pmu(), None, false).unwrap();
        let Meaning::Table(p6, e) = n.meaning(0xc0, 0, 0, false, false) else {
            panic!("INST_RETIRED is in the table")
        };
        assert_eq!((p6.name, e.name.as_str()), ("INST_RETIRED", "instructions"));
        assert_eq!(
            n.meaning(0xc0, 0, 2, false, false),
            Meaning::Unknown,
            "a counter mask"
        );
        assert_eq!(
            n.meaning(0xc1, 0, 0, false, false),
            Meaning::Unknown,
            "FLOPS"
        );
        let p6 = Names::new(&no_pmu(), None, true).unwrap();
        assert_eq!(p6.meaning(0xc1, 0, 0, false, false), Meaning::Raw);
        assert_eq!(p6.meaning(0xc0, 0, 2, false, false), Meaning::Raw);
    }

    #[test]
    fn every_bad_mapping_is_one_clear_line() {
        let line = |env: &str| names(env).unwrap_err().to_string();
        assert_eq!(
            line("2"),
            "PERFMON_EVENTS: '2': expected NUMBER=EVENT, e.g. 2=page-faults"
        );
        assert_eq!(
            line("2=page-faults,=cs"),
            "PERFMON_EVENTS: '=cs': expected NUMBER=EVENT, e.g. 2=page-faults"
        );
        assert_eq!(
            line("256=cs"),
            "PERFMON_EVENTS: '256=cs': the event number must be 0-255 (decimal or 0x hex)"
        );
        assert_eq!(
            line("2=page-fault"),
            "PERFMON_EVENTS: '2=page-fault': unknown event 'page-fault' (did you mean page-faults?)"
        );
        assert_eq!(
            line("2=cs,0x2=cpu-clock"),
            "PERFMON_EVENTS: event number 2 is mapped twice"
        );
        let e = line("2=cycles");
        assert!(
            e.starts_with("PERFMON_EVENTS: '2=cycles': cannot be counted here: "),
            "{e}"
        );
        for bad in ["2", "2=page-fault", "256=cs", "2=cycles", ","] {
            assert!(!line(bad).contains('\n'), "{bad}");
        }
        assert_eq!(
            Names::new(
                &no_pmu(),
                Some(std::os::unix::ffi::OsStrExt::from_bytes(b"2=\xff")),
                false
            )
            .unwrap_err(),
            MappingError::NotUtf8
        );
    }

    #[test]
    fn only_intel_family_6_reads_p6_codes() {
        let info = |vendor: &str, family: &str| {
            format!(
                "processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: 85\n"
            )
        };
        assert!(p6_compatible(&info("GenuineIntel", "6")));
        assert!(!p6_compatible(&info("GenuineIntel", "15")), "NetBurst");
        assert!(!p6_compatible(&info("AuthenticAMD", "25")));
        assert!(!p6_compatible(""), "not x86");
    }
}
