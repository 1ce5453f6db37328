//! What this host can count: the capabilities block cputrack and cpustat print after their
//! usage for `-h` (libcpc-spec §2.1), and `profiler list`, the same facts in full (every
//! event with its availability and why, the generic names and their mappings) as text or
//! JSON.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cpc::{
    Cpc,
    consts::caps,
    events::{EventInfo, GenericInfo},
};

/// Lines wrap before this column, as cputrack's do.
const MAX_COLUMN: usize = 76;
/// Continuation lines of event lists start here.
const EVENT_MARGIN: usize = 17;
/// Continuation lines of the attribute list start here.
const ATTR_MARGIN: usize = 20;

/// `words` after `first`, wrapped at [`MAX_COLUMN`] with continuation lines indented by
/// `margin` spaces. `first` counts as `margin` columns wide (it starts with a tab).
fn wrap<'a>(first: &str, words: impl IntoIterator<Item = &'a str>, margin: usize) -> String {
    let mut s = first.to_string();
    let mut col = margin;
    for w in words {
        if col + w.len() + 1 > MAX_COLUMN && col > margin {
            s.push('\n');
            s.push_str(&" ".repeat(margin));
            col = margin;
        }
        s.push_str(w);
        s.push(' ');
        col += w.len() + 1;
    }
    s.push('\n');
    s
}

/// User-settable attributes (the hidden ones are the tools' own), then `nouser sys`.
fn attribute_words(cpc: &Cpc) -> Vec<String> {
    let mut attrs: Vec<String> = cpc
        .catalog()
        .attributes()
        .into_iter()
        .filter(|a| {
            !matches!(
                a.as_str(),
                "picnum" | "count_sibling_usr" | "count_sibling_sys"
            )
        })
        .collect();
    attrs.extend(["nouser".to_string(), "sys".to_string()]);
    attrs
}

/// cputrack's and cpustat's `-h` capabilities block.
pub fn capabilities(cpc: &Cpc) -> String {
    let catalog = cpc.catalog();
    let last = cpc.npic().saturating_sub(1);
    let mut s = format!("\tCPU performance counter interface: {}\n\n", cpc.cciname());
    s += "\tevent specification syntax:\n";
    s += "\t[picn=]<eventn>[,attr[n][=<val>]][,[picn=]<eventn>[,attr[n][=<val>]],...]\n";
    s += "\n\tGeneric Events:\n\n";
    let generic: Vec<GenericInfo> = catalog
        .generic_events()
        .into_iter()
        .filter(|g| g.available)
        .collect();
    if generic.is_empty() {
        s += "\t(none on this host: they need a hardware PMU)\n";
    } else {
        let first = format!("\tevent[0-{last}]: ");
        s += &wrap(&first, generic.iter().map(|g| g.name), EVENT_MARGIN);
    }
    s += "\n\tSee generic_events(3CPC) for descriptions of these events\n\n";
    s += "\tPlatform Specific Events:\n\n";
    let platform: Vec<EventInfo> = catalog
        .platform_events()
        .into_iter()
        .filter(|e| e.available)
        .collect();
    let first = format!("\tevent[0-{last}]: ");
    s += &wrap(
        &first,
        platform.iter().map(|e| e.name.as_str()),
        EVENT_MARGIN,
    );
    let attrs = attribute_words(cpc);
    s += &wrap(
        "\n\tattributes: ",
        attrs.iter().map(String::as_str),
        ATTR_MARGIN,
    );
    s += &wrap("\n\t", cpc.cpuref().split(' '), 8);
    s
}

fn cap_names(bits: u32) -> Vec<&'static str> {
    [
        (caps::OVERFLOW_INTERRUPT, "overflow_interrupt"),
        (caps::OVERFLOW_PRECISE, "overflow_precise"),
        (caps::SMPL, "smpl"),
        (caps::OVERFLOW_SMPL, "overflow_smpl"),
    ]
    .into_iter()
    .filter(|(b, _)| bits & b != 0)
    .map(|(_, n)| n)
    .collect()
}

#[derive(Serialize)]
struct Event {
    name: String,
    kind: String,
    available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

/// A BPF feature of the running kernel the programs use (`bpf::KernelFeatures`).
#[derive(Serialize)]
struct KernelFeature {
    name: &'static str,
    since: &'static str,
    available: bool,
    needed_for: &'static str,
}

#[derive(Serialize)]
struct Generic {
    name: &'static str,
    maps_to: String,
    available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

/// A perfmon(4) event number and what libperfmon counts it as (`events::p6`).
#[derive(Serialize)]
struct PerfmonEvent {
    code: u8,
    p6_name: &'static str,
    maps_to: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'static str>,
}

#[derive(Serialize)]
struct Listing {
    cciname: String,
    cpuref: String,
    npic: u32,
    caps: Vec<&'static str>,
    tick: &'static str,
    attributes: Vec<String>,
    events: Vec<Event>,
    generic_events: Vec<Generic>,
    kernel: String,
    kernel_features: Vec<KernelFeature>,
    perfmon_events: Vec<PerfmonEvent>,
}

fn listing(cpc: &Cpc) -> Listing {
    let catalog = cpc.catalog();
    Listing {
        cciname: cpc.cciname().to_string(),
        cpuref: cpc.cpuref().to_string(),
        npic: cpc.npic(),
        caps: cap_names(cpc.caps()),
        tick: cpc.tick_source(),
        attributes: attribute_words(cpc),
        events: catalog
            .platform_events()
            .into_iter()
            .map(|e| Event {
                name: e.name,
                kind: e.kind.to_string(),
                available: e.available,
                note: e.reason,
            })
            .collect(),
        generic_events: catalog
            .generic_events()
            .into_iter()
            .map(|g| Generic {
                name: g.name,
                maps_to: g.maps_to,
                available: g.available,
                reason: g.reason,
            })
            .collect(),
        kernel: crate::bpf::kernel_release(),
        kernel_features: crate::bpf::KernelFeatures::get()
            .iter()
            .map(|(f, available)| KernelFeature {
                name: f.name,
                since: f.since,
                available,
                needed_for: f.needed_for,
            })
            .collect(),
        perfmon_events: crate::cpc::events::p6::P6_EVENTS
            .iter()
            .map(|e| PerfmonEvent {
                code: e.code,
                p6_name: e.name,
                maps_to: e.maps_to,
                note: e.note,
            })
            .collect(),
    }
}

/// `profiler list --json`: one JSON document.
pub fn list_json(cpc: &Cpc) -> String {
    let mut s = serde_json::to_string_pretty(&listing(cpc)).expect("plain data");
    s.push('\n');
    s
}

/// `profiler list`: usable events by kind, generic names and their mappings, attributes,
/// and what is unavailable here, grouped by the reason.
pub fn list_text(cpc: &Cpc) -> String {
    list_lines(cpc)
        .lines()
        .map(|l| l.trim_end().to_string() + "\n")
        .collect()
}

fn list_lines(cpc: &Cpc) -> String {
    let l = listing(cpc);
    let mut s = format!("counter interface: {}\n", l.cciname);
    s += &format!("counters (npic): {}\n", l.npic);
    s += &format!("capabilities: {}\n", l.caps.join(" "));
    s += &format!("tick (-t column): {}\n", l.tick);
    s += &format!("attributes: {}\n", l.attributes.join(" "));
    s += &format!("kernel: {}\n", l.kernel);
    let features: Vec<String> = l
        .kernel_features
        .iter()
        .map(|f| {
            let yes = if f.available { "yes" } else { "no" };
            format!("{} ({}) {yes}", f.name, f.since)
        })
        .collect();
    s += &format!("kernel features: {}\n", features.join(", "));
    for f in l.kernel_features.iter().filter(|f| !f.available) {
        s += &format!(
            "  without {} (Linux {}): no {}\n",
            f.name, f.since, f.needed_for
        );
    }
    let mut by_kind: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut unavailable: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut notes = Vec::new();
    for e in &l.events {
        let note = e.note.as_deref().unwrap_or("");
        if e.available {
            by_kind.entry(&e.kind).or_default().push(&e.name);
            if !note.is_empty() {
                notes.push(format!("  {}: {note}", e.name));
            }
        } else {
            unavailable.entry(note).or_default().push(&e.name);
        }
    }
    s += "\nevents usable here:\n";
    for (kind, names) in &by_kind {
        s += &wrap(&format!("  {kind}: "), names.iter().copied(), 4);
    }
    s += "  tracepoint: any subsystem:event of tracefs (not listed)\n";
    if !notes.is_empty() {
        s += "\nnotes:\n";
        s += &(notes.join("\n") + "\n");
    }
    s += "\ngeneric events (PAPI):\n";
    for g in &l.generic_events {
        let state = if g.available { "" } else { "  (unavailable)" };
        s += &format!("  {:<14} -> {}{state}\n", g.name, g.maps_to);
    }
    s += "\nperfmon(4) event numbers (libperfmon.so; PERFMON_EVENTS overrides):\n";
    for e in &l.perfmon_events {
        let note = e.note.map(|n| format!(" ({n})")).unwrap_or_default();
        s += &format!(
            "  {:#04x} {:<20} -> {}{note}\n",
            e.code, e.p6_name, e.maps_to
        );
    }
    let generic_reasons: Vec<&str> = l
        .generic_events
        .iter()
        .filter_map(|g| g.reason.as_deref())
        .collect();
    if !unavailable.is_empty() || !generic_reasons.is_empty() {
        s += "\nunavailable here:\n";
        for (reason, names) in &unavailable {
            s += &format!("  {} events: {reason}\n", names.len());
            s += &wrap("    ", names.iter().copied(), 4);
        }
        if let Some(reason) = generic_reasons.first() {
            s += &format!("  generic events: {reason}\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_keeps_words_whole_and_indents() {
        let words = ["aaaaaaaaaa"; 9];
        let out = wrap("\tevent[0-7]: ", words, EVENT_MARGIN);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 1);
        assert!(lines[0].starts_with("\tevent[0-7]: aaaaaaaaaa "));
        assert!(lines[1].starts_with(&" ".repeat(EVENT_MARGIN)));
        assert!(lines.iter().all(|l| l.len() <= MAX_COLUMN + 1));
        assert_eq!(out.matches("aaaaaaaaaa").count(), 9);
    }

    #[test]
    fn caps_are_named() {
        assert_eq!(
            cap_names(caps::OVERFLOW_INTERRUPT | caps::OVERFLOW_PRECISE),
            ["overflow_interrupt", "overflow_precise"]
        );
        assert!(cap_names(0).is_empty());
    }
}
