//! One interval's pprof message → an OTLP `ExportProfilesServiceRequest`.
//!
//! The conversion starts from the pprof message the interval's file is written from (not from
//! the model), so what the stores receive is what the file holds, whatever sample types and
//! labels the model grows: one OTLP `Profile` per pprof sample type (OTLP profiles carry one
//! value each), per process (a `ResourceProfiles` per pid, with the process's service, host,
//! executable and container), sharing one dictionary. Labels become sample attributes
//! (semantic-convention names where there is one), the run's counters (`profiler.lost`, ...)
//! become profile attributes, build ids become mapping attributes.

use std::{collections::HashMap, hash::Hash};

use super::{
    otlp_proto as otlp,
    otlp_proto::{AnyValue, KeyValue, any_value::Value},
    process::ProcessInfo,
};
use crate::profile::pprof::proto as pprof;

/// The semantic-convention schema the attribute names follow.
const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.37.0";
/// pprof's module name for kernel frames.
const KERNEL_MAPPING: &str = "[kernel.kallsyms]";

/// What the resources of a request say besides each process's own facts.
#[derive(Clone, Debug)]
pub struct ResourceDefaults {
    pub host_name: String,
    /// The `service.name` of every process (`--service-name`), instead of each process's
    /// own ([`ProcessInfo::otel_service_name`]).
    pub service_name: Option<String>,
}

/// An attribute value as a hashable key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum AttrValue {
    Str(String),
    Int(i64),
}

impl AttrValue {
    fn any(&self) -> AnyValue {
        AnyValue {
            value: Some(match self {
                Self::Str(s) => Value::StringValue(s.clone()),
                Self::Int(i) => Value::IntValue(*i),
            }),
        }
    }
}

/// A dictionary table whose entry 0 is the zero value, each other entry stored once.
struct Table<K, V> {
    items: Vec<V>,
    index: HashMap<K, i32>,
}

impl<K: Eq + Hash, V: Default> Table<K, V> {
    fn new() -> Self {
        Self {
            items: vec![V::default()],
            index: HashMap::new(),
        }
    }

    fn get(&mut self, key: K, make: impl FnOnce() -> V) -> i32 {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.items.len() as i32;
        self.items.push(make());
        self.index.insert(key, i);
        i
    }
}

struct Dictionary {
    strings: Table<String, String>,
    attributes: Table<(i32, AttrValue), otlp::KeyValueAndUnit>,
    stacks: Table<Vec<i32>, otlp::Stack>,
    links: Table<(Vec<u8>, Vec<u8>), otlp::Link>,
}

impl Dictionary {
    fn string(&mut self, s: &str) -> i32 {
        if s.is_empty() {
            return 0;
        }
        self.strings.get(s.to_string(), || s.to_string())
    }

    fn attribute(&mut self, key: &str, value: AttrValue) -> i32 {
        let key = self.string(key);
        self.attributes
            .get((key, value.clone()), || otlp::KeyValueAndUnit {
                key_strindex: key,
                value: Some(value.any()),
                unit_strindex: 0,
            })
    }
}

/// The sample attribute a pprof label becomes; `None` for the pid (the resource's). The
/// sampled code's own labels (a goroutine's) are `process.context.label.KEY`, as the
/// OpenTelemetry eBPF profiler sends Go's.
fn label_key(key: &str) -> Option<String> {
    Some(match key {
        "pid" => return None,
        "tid" => "thread.id".into(),
        "comm" => "thread.name".into(),
        "cpu" => "cpu.logical_number".into(),
        "event" | "cgroup" | "cgroup_id" => format!("profiler.{key}"),
        own => format!(
            "process.context.label.{}",
            own.strip_prefix("label:").unwrap_or(own)
        ),
    })
}

/// The trace and span a sample ran in, from the labels the sampled code set: `trace_id`
/// and `span_id` (or OpenTelemetry's `otel.traceid` and `otel.spanid`), 32 and 16 hex
/// digits. A span id alone (Pyroscope's Go integration sets only `span_id`) is no link.
fn trace_link(labels: &Labels) -> Option<(Vec<u8>, Vec<u8>)> {
    let hex = |key: &str, other: &str, len: usize| -> Option<Vec<u8>> {
        let v = labels.text(key).or_else(|| labels.text(other))?;
        if v.len() != 2 * len {
            return None;
        }
        let bytes: Option<Vec<u8>> = (0..len)
            .map(|i| u8::from_str_radix(v.get(2 * i..2 * i + 2)?, 16).ok())
            .collect();
        bytes.filter(|b| b.iter().any(|&x| x != 0))
    };
    Some((
        hex("trace_id", "otel.traceid", 16)?,
        hex("span_id", "otel.spanid", 8)?,
    ))
}

/// The run's counters from pprof comments `profiler.KEY=VALUE`, as profile attributes.
fn counters(message: &pprof::Profile) -> Vec<(String, AttrValue)> {
    let text = |i: i64| {
        message
            .string_table
            .get(i as usize)
            .map_or("", String::as_str)
    };
    message
        .comment
        .iter()
        .filter_map(|&c| {
            let (key, value) = text(c).split_once('=')?;
            key.starts_with("profiler.").then(|| {
                let value = value
                    .parse()
                    .map_or_else(|_| AttrValue::Str(value.to_string()), AttrValue::Int);
                (key.to_string(), value)
            })
        })
        .collect()
}

fn key_value(key: &str, value: AttrValue) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(value.any()),
    }
}

/// The resource of one process.
fn resource(pid: i64, info: &ProcessInfo, defaults: &ResourceDefaults) -> otlp::Resource {
    let service = defaults
        .service_name
        .clone()
        .unwrap_or_else(|| info.otel_service_name());
    let mut attributes = vec![
        key_value("service.name", AttrValue::Str(service)),
        key_value("host.name", AttrValue::Str(defaults.host_name.clone())),
        key_value("process.pid", AttrValue::Int(pid)),
    ];
    let mut text = |key: &str, value: &Option<String>| {
        if let Some(v) = value {
            attributes.push(key_value(key, AttrValue::Str(v.clone())));
        }
    };
    text("process.executable.name", &info.executable_name);
    text("process.executable.path", &info.executable_path);
    text("container.id", &info.container_id);
    text("process.linux.cgroup", &info.cgroup);
    otlp::Resource { attributes }
}

/// Converts one interval's pprof message. `process` gives what is known of each pid the
/// samples name (called once per pid, with the sample's labels for a fallback).
pub fn request(
    message: &pprof::Profile,
    defaults: &ResourceDefaults,
    mut process: impl FnMut(i64, &Labels) -> ProcessInfo,
) -> otlp::ExportProfilesServiceRequest {
    let text = |i: i64| {
        message
            .string_table
            .get(i as usize)
            .map_or("", String::as_str)
    };
    let mut dict = Dictionary {
        strings: Table::new(),
        attributes: Table::new(),
        stacks: Table::new(),
        links: Table::new(),
    };

    // Mappings, functions and locations: pprof's tables in order, ids → indices.
    let mut mappings = vec![otlp::Mapping::default()];
    let mut mapping_index = HashMap::new();
    let mut kernel_mappings = Vec::new();
    for m in &message.mapping {
        let name = text(m.filename);
        let mut attribute_indices = Vec::new();
        let build_id = text(m.build_id);
        if !build_id.is_empty() {
            // A GNU build id is hex; anything else is the Go linker's own.
            let key = if build_id.bytes().all(|b| b.is_ascii_hexdigit()) {
                "process.executable.build_id.gnu"
            } else {
                "process.executable.build_id.go"
            };
            attribute_indices.push(dict.attribute(key, AttrValue::Str(build_id.to_string())));
        }
        mapping_index.insert(m.id, mappings.len() as i32);
        if name == KERNEL_MAPPING {
            kernel_mappings.push(m.id);
        }
        mappings.push(otlp::Mapping {
            memory_start: m.memory_start,
            memory_limit: m.memory_limit,
            file_offset: m.file_offset,
            filename_strindex: dict.string(name),
            attribute_indices,
        });
    }
    let mut functions = vec![otlp::Function::default()];
    let mut function_index = HashMap::new();
    for f in &message.function {
        function_index.insert(f.id, functions.len() as i32);
        functions.push(otlp::Function {
            name_strindex: dict.string(text(f.name)),
            system_name_strindex: dict.string(text(f.system_name)),
            filename_strindex: dict.string(text(f.filename)),
            start_line: f.start_line,
        });
    }
    let kernel = dict.attribute("profile.frame.type", AttrValue::Str("kernel".into()));
    let native = dict.attribute("profile.frame.type", AttrValue::Str("native".into()));
    let mut locations = vec![otlp::Location::default()];
    let mut location_index = HashMap::new();
    for l in &message.location {
        location_index.insert(l.id, locations.len() as i32);
        let frame_type = if kernel_mappings.contains(&l.mapping_id) {
            kernel
        } else {
            native
        };
        locations.push(otlp::Location {
            mapping_index: mapping_index.get(&l.mapping_id).copied().unwrap_or(0),
            address: l.address,
            lines: l
                .line
                .iter()
                .map(|line| otlp::Line {
                    function_index: function_index.get(&line.function_id).copied().unwrap_or(0),
                    line: line.line,
                    column: 0,
                })
                .collect(),
            attribute_indices: vec![frame_type],
        });
    }

    let sample_types: Vec<otlp::ValueType> = message
        .sample_type
        .iter()
        .map(|t| otlp::ValueType {
            type_strindex: dict.string(text(t.r#type)),
            unit_strindex: dict.string(text(t.unit)),
        })
        .collect();
    let period_type = message.period_type.as_ref().map(|t| otlp::ValueType {
        type_strindex: dict.string(text(t.r#type)),
        unit_strindex: dict.string(text(t.unit)),
    });
    let profile_attributes: Vec<i32> = counters(message)
        .into_iter()
        .map(|(k, v)| dict.attribute(&k, v))
        .collect();

    // Samples, by process and then by sample type (a column of pprof's values).
    let mut by_pid: Vec<(i64, Vec<Vec<otlp::Sample>>)> = Vec::new();
    let mut pid_at: HashMap<i64, usize> = HashMap::new();
    for s in &message.sample {
        let labels = Labels::of(s, &text);
        let pid = labels.num("pid").unwrap_or(0);
        let at = *pid_at.entry(pid).or_insert_with(|| {
            by_pid.push((pid, vec![Vec::new(); sample_types.len()]));
            by_pid.len() - 1
        });
        let stack: Vec<i32> = s
            .location_id
            .iter()
            .map(|id| location_index.get(id).copied().unwrap_or(0))
            .collect();
        let stack_index = dict.stacks.get(stack.clone(), || otlp::Stack {
            location_indices: stack,
        });
        let attribute_indices: Vec<i32> = labels
            .0
            .iter()
            .filter_map(|(k, v)| Some((label_key(k)?, v.clone())))
            .map(|(k, v)| dict.attribute(&k, v))
            .collect();
        let link_index = trace_link(&labels).map_or(0, |(trace, span)| {
            dict.links
                .get((trace.clone(), span.clone()), || otlp::Link {
                    trace_id: trace,
                    span_id: span,
                })
        });
        for (column, &value) in s.value.iter().enumerate() {
            if value != 0 && column < sample_types.len() {
                by_pid[at].1[column].push(otlp::Sample {
                    stack_index,
                    attribute_indices: attribute_indices.clone(),
                    link_index,
                    values: vec![value],
                });
            }
        }
    }

    let scope = otlp::InstrumentationScope {
        name: "profiler".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    };
    let first_labels = Labels::by_pid(message);
    let resource_profiles = by_pid
        .into_iter()
        .map(|(pid, columns)| {
            let labels = first_labels.get(&pid).cloned().unwrap_or_default();
            let info = process(pid, &labels);
            let profiles = columns
                .into_iter()
                .zip(&sample_types)
                .filter(|(samples, _)| !samples.is_empty())
                .map(|(samples, &sample_type)| otlp::Profile {
                    sample_type: Some(sample_type),
                    samples,
                    time_unix_nano: message.time_nanos.max(0) as u64,
                    duration_nano: message.duration_nanos.max(0) as u64,
                    period_type,
                    period: message.period,
                    profile_id: Vec::new(),
                    attribute_indices: profile_attributes.clone(),
                })
                .collect();
            otlp::ResourceProfiles {
                resource: Some(resource(pid, &info, defaults)),
                scope_profiles: vec![otlp::ScopeProfiles {
                    scope: Some(scope.clone()),
                    profiles,
                    schema_url: SCHEMA_URL.into(),
                }],
                schema_url: SCHEMA_URL.into(),
            }
        })
        .collect();
    otlp::ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(otlp::ProfilesDictionary {
            mapping_table: mappings,
            location_table: locations,
            function_table: functions,
            link_table: dict.links.items,
            string_table: dict.strings.items,
            attribute_table: dict.attributes.items,
            stack_table: dict.stacks.items,
        }),
    }
}

/// A pprof sample's labels, by key.
#[derive(Clone, Debug, Default)]
pub struct Labels(Vec<(String, AttrValue)>);

impl Labels {
    /// The labels of each process of `message`: those of a sample of its main thread (whose
    /// `comm` is the process's, not a thread's name) when it has one, else of any.
    pub fn by_pid(message: &pprof::Profile) -> HashMap<i64, Labels> {
        let text = |i: i64| {
            message
                .string_table
                .get(i as usize)
                .map_or("", String::as_str)
        };
        let mut out: HashMap<i64, (bool, Labels)> = HashMap::new();
        for s in &message.sample {
            let labels = Labels::of(s, &text);
            let pid = labels.num("pid").unwrap_or(0);
            let main = labels.num("tid") == Some(pid);
            match out.get(&pid) {
                Some((true, _)) => {}
                Some((false, _)) if !main => {}
                _ => {
                    out.insert(pid, (main, labels));
                }
            }
        }
        out.into_iter().map(|(pid, (_, l))| (pid, l)).collect()
    }

    /// The `pid` label of a sample of `message` (0 without one).
    pub fn pid_of(message: &pprof::Profile, sample: &pprof::Sample) -> i64 {
        sample
            .label
            .iter()
            .find(|l| {
                l.str == 0
                    && message
                        .string_table
                        .get(l.key as usize)
                        .is_some_and(|k| k == "pid")
            })
            .map_or(0, |l| l.num)
    }

    fn of<'a>(s: &pprof::Sample, text: &impl Fn(i64) -> &'a str) -> Self {
        Self(
            s.label
                .iter()
                .map(|l| {
                    let value = if l.str != 0 {
                        AttrValue::Str(text(l.str).to_string())
                    } else {
                        AttrValue::Int(l.num)
                    };
                    (text(l.key).to_string(), value)
                })
                .collect(),
        )
    }

    /// The numeric label `key`.
    pub fn num(&self, key: &str) -> Option<i64> {
        self.0.iter().find_map(|(k, v)| match v {
            AttrValue::Int(i) if k == key => Some(*i),
            _ => None,
        })
    }

    /// The text label `key`.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.0.iter().find_map(|(k, v)| match v {
            AttrValue::Str(s) if k == key => Some(s.as_str()),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        profile::{Profile, pprof::encode},
        symbolize::{Frame, FrameKind},
    };

    fn frame(name: &str) -> Frame {
        let mut f = Frame::named(name, FrameKind::User);
        f.module = Some("chain".into());
        f
    }

    #[test]
    fn each_process_and_sample_type_is_a_profile_with_the_same_samples() {
        let mut p = Profile::default();
        p.info.event = "cpu-clock".into();
        p.info.frequency_hz = 100;
        p.info.lost = 3;
        let (main, leaf) = (frame("main"), frame("leaf"));
        // Values in the event's unit: 5 and 2 samples of 10 ms each at 100 Hz.
        let s = p.push(
            "cpu-clock",
            "chain",
            &[main.clone(), leaf.clone()],
            5 * 10_000_000,
        );
        (s.pid, s.tid, s.cpu, s.samples) = (10, 11, 1, 5);
        let s = p.push(
            "cpu-clock",
            "other",
            std::slice::from_ref(&main),
            2 * 10_000_000,
        );
        (s.pid, s.tid, s.samples) = (20, 20, 2);
        let message = encode(&p);
        let mut defaults = ResourceDefaults {
            host_name: "h".into(),
            service_name: None,
        };
        let info = |pid: i64, labels: &Labels| ProcessInfo {
            executable_name: labels.text("comm").map(str::to_string),
            service_name: (pid == 20).then(|| "own".to_string()),
            ..Default::default()
        };
        let req = request(&message, &defaults, info);
        let dict = req.dictionary.as_ref().unwrap();
        let s = |i: i32| dict.string_table[i as usize].as_str();
        assert_eq!(req.resource_profiles.len(), 2, "a resource per pid");
        let attr = |r: &otlp::ResourceProfiles, key: &str| {
            r.resource
                .as_ref()
                .unwrap()
                .attributes
                .iter()
                .find(|a| a.key == key)
                .and_then(|a| a.value.clone())
                .and_then(|v| v.value)
        };
        let first = &req.resource_profiles[0];
        assert_eq!(attr(first, "process.pid"), Some(Value::IntValue(10)));
        // A process's own service name, else OpenTelemetry's for an unnamed one.
        assert_eq!(
            attr(first, "service.name"),
            Some(Value::StringValue("unknown_service:chain".into()))
        );
        assert_eq!(
            attr(&req.resource_profiles[1], "service.name"),
            Some(Value::StringValue("own".into()))
        );
        // --service-name names them all.
        defaults.service_name = Some("svc".into());
        let forced = request(&message, &defaults, info);
        for r in &forced.resource_profiles {
            assert_eq!(
                attr(r, "service.name"),
                Some(Value::StringValue("svc".into()))
            );
        }
        assert_eq!(
            attr(first, "process.executable.name"),
            Some(Value::StringValue("chain".into()))
        );
        // samples/count and cpu-clock/nanoseconds: two profiles of the one sample.
        let profiles = &first.scope_profiles[0].profiles;
        let types: Vec<(&str, &str)> = profiles
            .iter()
            .map(|p| {
                let t = p.sample_type.unwrap();
                (s(t.type_strindex), s(t.unit_strindex))
            })
            .collect();
        assert_eq!(types, [("samples", "count"), ("cpu-clock", "nanoseconds")]);
        assert_eq!(profiles[0].samples[0].values, [5]);
        assert_eq!(profiles[1].samples[0].values, [5 * 10_000_000]);
        // The stack, leaf first, names the frames.
        let stack = &dict.stack_table[profiles[0].samples[0].stack_index as usize];
        let names: Vec<&str> = stack
            .location_indices
            .iter()
            .map(|&l| {
                let line = &dict.location_table[l as usize].lines[0];
                s(dict.function_table[line.function_index as usize].name_strindex)
            })
            .collect();
        assert_eq!(names, ["leaf", "main"]);
        // Labels are sample attributes; the run's counters profile attributes.
        let attrs = |indices: &[i32]| -> Vec<(String, Option<Value>)> {
            indices
                .iter()
                .map(|&i| {
                    let kv = &dict.attribute_table[i as usize];
                    (
                        s(kv.key_strindex).to_string(),
                        kv.value.clone().and_then(|v| v.value),
                    )
                })
                .collect()
        };
        let sample = attrs(&profiles[0].samples[0].attribute_indices);
        assert!(sample.contains(&("thread.id".into(), Some(Value::IntValue(11)))));
        assert!(sample.contains(&(
            "thread.name".into(),
            Some(Value::StringValue("chain".into()))
        )));
        assert!(sample.contains(&("cpu.logical_number".into(), Some(Value::IntValue(1)))));
        let profile = attrs(&profiles[0].attribute_indices);
        assert!(profile.contains(&("profiler.lost".into(), Some(Value::IntValue(3)))));
        // Every table opens with its zero value.
        assert_eq!(dict.string_table[0], "");
        assert_eq!(dict.stack_table[0], otlp::Stack::default());
        assert_eq!(dict.attribute_table[0], otlp::KeyValueAndUnit::default());
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn goroutine_labels_are_attributes_and_a_trace_is_a_link() {
        let mut p = Profile::default();
        p.info.event = "cpu-clock".into();
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        let span = "00f067aa0ba902b7";
        let s = p.push("cpu-clock", "app", &[frame("main")], 10);
        (s.pid, s.tid) = (7, 7);
        s.labels = crate::profile::Labels::new([
            ("route", "/checkout"),
            ("trace_id", trace),
            ("span_id", span),
            ("pid", "theirs"),
        ]);
        // A span id alone is no link.
        let s = p.push("cpu-clock", "app", &[frame("other")], 10);
        (s.pid, s.tid) = (7, 7);
        s.labels = crate::profile::Labels::new([("span_id", span)]);
        let req = request(
            &encode(&p),
            &ResourceDefaults {
                host_name: "h".into(),
                service_name: None,
            },
            |_, _| ProcessInfo::default(),
        );
        let dict = req.dictionary.as_ref().unwrap();
        let samples = &req.resource_profiles[0].scope_profiles[0].profiles[0].samples;
        let keys = |sample: &otlp::Sample| -> Vec<String> {
            let s = |i: i32| dict.string_table[i as usize].clone();
            sample
                .attribute_indices
                .iter()
                .map(|&i| s(dict.attribute_table[i as usize].key_strindex))
                .collect()
        };
        let linked = samples.iter().find(|s| s.link_index != 0).expect("a link");
        let link = &dict.link_table[linked.link_index as usize];
        assert_eq!(hex(&link.trace_id), trace);
        assert_eq!(hex(&link.span_id), span);
        let keys = keys(linked);
        for k in ["route", "trace_id", "span_id", "pid"] {
            let want = format!("process.context.label.{k}");
            assert!(keys.contains(&want), "{want} not in {keys:?}");
        }
        assert_eq!(samples.iter().filter(|s| s.link_index != 0).count(), 1);
        assert_eq!(dict.link_table.len(), 2, "the zero link, and one");
    }
}
