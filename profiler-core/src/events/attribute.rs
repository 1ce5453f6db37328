//! libcpc's request attributes (`cpc_walk_attrs`) placed in the `cpu` PMU's config bits.

use std::collections::BTreeMap;

use super::{
    Event, EventError, EventKind,
    format::{ConfigWord, Field},
    pmu::Pmu,
    suggest::suggest,
};

/// The attribute libcpc always adds, which names a counter. The kernel picks counters on
/// Linux, so the cpc layer range-checks it and nothing is encoded.
pub(crate) const PICNUM: &str = "picnum";

/// A libcpc attribute: its name, the sysfs format term that holds it on Linux, and where
/// that term sits in the x86 event-select layout (Intel SDM "IA32_PERFEVTSELx"; AMD's
/// PerfEvtSel agrees) when sysfs does not say.
struct CpcAttr {
    name: &'static str,
    sysfs: &'static str,
    x86: Field,
}

const fn x86(lo: u32, hi: u32) -> Field {
    Field::bits(ConfigWord::Config, lo, hi)
}

/// In libcpc's order for Intel (`edge,pc,inv,umask,cmask`, then arch-perfmon v3's anythr).
const CPC_ATTRS: &[CpcAttr] = &[
    CpcAttr {
        name: "edge",
        sysfs: "edge",
        x86: x86(18, 18),
    },
    CpcAttr {
        name: "pc",
        sysfs: "pc",
        x86: x86(19, 19),
    },
    CpcAttr {
        name: "inv",
        sysfs: "inv",
        x86: x86(23, 23),
    },
    CpcAttr {
        name: "umask",
        sysfs: "umask",
        x86: x86(8, 15),
    },
    CpcAttr {
        name: "cmask",
        sysfs: "cmask",
        x86: x86(24, 31),
    },
    CpcAttr {
        name: "anythr",
        sysfs: "any",
        x86: x86(21, 21),
    },
];

fn lookup(name: &str) -> Option<&'static CpcAttr> {
    // Linux spells anythr "any" (its sysfs term); accept both.
    CPC_ATTRS
        .iter()
        .find(|a| a.name == name || (name == "any" && a.name == "anythr"))
}

/// Where attributes go on raw events: the cpu PMU's format files when it has any, else
/// the x86 layout (x86 only: a raw code means something else on other architectures).
enum Layout<'a> {
    Sysfs(&'a Pmu),
    X86,
    None,
}

fn raw_layout<'a>(pmus: &'a BTreeMap<String, Pmu>, cpu_pmu: Option<&str>) -> Layout<'a> {
    match cpu_pmu.and_then(|name| pmus.get(name)) {
        Some(cpu) if !cpu.formats.is_empty() => Layout::Sysfs(cpu),
        _ if cfg!(any(target_arch = "x86_64", target_arch = "x86")) => Layout::X86,
        _ => Layout::None,
    }
}

/// The libcpc attribute names usable on this host, then `picnum`.
///
/// Without a cpu PMU nothing can count a raw event, so only `picnum` is listed (libcpc's
/// `cpc_walk_attrs` lists what the counters support). [`apply`] still encodes raw events
/// with the x86 layout then, so encodings stay testable everywhere.
pub(crate) fn available(pmus: &BTreeMap<String, Pmu>, cpu_pmu: Option<&str>) -> Vec<String> {
    let mut names: Vec<String> = match (cpu_pmu.is_some(), raw_layout(pmus, cpu_pmu)) {
        (false, _) | (true, Layout::None) => Vec::new(),
        (true, Layout::X86) => CPC_ATTRS.iter().map(|a| a.name.to_owned()).collect(),
        (true, Layout::Sysfs(cpu)) => CPC_ATTRS
            .iter()
            .filter(|a| matches!(cpu.field(a.sysfs), Some(Ok(_))))
            .map(|a| a.name.to_owned())
            .collect(),
    };
    names.push(PICNUM.to_owned());
    names
}

/// Sets libcpc attribute `attr` to `value` in `event` (see `Catalog::apply_attribute`).
pub(crate) fn apply(
    pmus: &BTreeMap<String, Pmu>,
    cpu_pmu: Option<&str>,
    event: &mut Event,
    attr: &str,
    value: u64,
) -> Result<(), EventError> {
    if attr == PICNUM {
        return Ok(());
    }
    let Some(cpc) = lookup(attr) else {
        let known = CPC_ATTRS.iter().map(|a| a.name).chain([PICNUM]);
        return Err(EventError::UnknownAttribute {
            name: attr.to_owned(),
            suggestions: suggest(attr, known),
        });
    };
    let not_applicable = |reason: String| EventError::AttributeNotApplicable {
        attr: attr.to_owned(),
        event: event.name.clone(),
        reason,
    };
    let sysfs_field = |pmu: &Pmu| match pmu.field(cpc.sysfs) {
        Some(Ok(field)) => Ok(field),
        Some(Err(reason)) => Err(not_applicable(format!(
            "PMU {}'s '{}' format does not parse: {reason}",
            pmu.name, cpc.sysfs
        ))),
        None => Err(not_applicable(format!(
            "PMU {} has no '{}' field",
            pmu.name, cpc.sysfs
        ))),
    };
    let field = match event.kind {
        EventKind::Raw => match raw_layout(pmus, cpu_pmu) {
            Layout::Sysfs(cpu) => sysfs_field(cpu)?,
            Layout::X86 => cpc.x86,
            Layout::None => {
                return Err(not_applicable(
                    "no cpu PMU format describes raw codes on this architecture".to_owned(),
                ));
            }
        },
        EventKind::Pmu => match event.pmu.as_deref().and_then(|name| pmus.get(name)) {
            Some(pmu) => sysfs_field(pmu)?,
            None => {
                return Err(not_applicable(
                    "its PMU is not in this catalogue".to_owned(),
                ));
            }
        },
        EventKind::Hardware | EventKind::HwCache => {
            return Err(not_applicable(format!(
                "{} events are generic ids the kernel translates; give the event as a raw \
                 code (rNNNN) to set {attr}",
                event.kind
            )));
        }
        EventKind::Software | EventKind::Tracepoint => {
            return Err(not_applicable(format!(
                "{} events have no PMU control bits",
                event.kind
            )));
        }
    };
    field.store(event, cpc.name, value)
}
