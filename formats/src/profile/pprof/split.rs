//! One pprof message cut into parts by a key of each sample (the application each process is
//! sent to a store under): each part is a whole message with its own samples and only the
//! mappings, locations, functions and strings they use, so the parts together are no bigger
//! than the tables they share times the parts that use them. Ids are kept (a part's ids are
//! the message's); the string table is rebuilt, `""` first.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::proto::{Function, Label, Location, Mapping, Profile, Sample, ValueType};

/// The parts of `message` by `key` of each sample, in key order. A message without samples
/// has no part.
pub fn split<K: Ord>(message: &Profile, mut key: impl FnMut(&Sample) -> K) -> Vec<(K, Profile)> {
    let mut groups: BTreeMap<K, Vec<&Sample>> = BTreeMap::new();
    for s in &message.sample {
        groups.entry(key(s)).or_default().push(s);
    }
    groups
        .into_iter()
        .map(|(k, samples)| (k, part(message, &samples)))
        .collect()
}

/// The strings of a part, by their index in the message's table.
struct Strings<'a> {
    from: &'a [String],
    table: Vec<String>,
    index: HashMap<i64, i64>,
}

impl Strings<'_> {
    fn get(&mut self, i: i64) -> i64 {
        if i == 0 {
            return 0;
        }
        let text = self.from.get(i as usize).map_or("", String::as_str);
        if text.is_empty() {
            return 0;
        }
        *self.index.entry(i).or_insert_with(|| {
            self.table.push(text.to_string());
            self.table.len() as i64 - 1
        })
    }

    fn value_type(&mut self, t: &ValueType) -> ValueType {
        ValueType {
            r#type: self.get(t.r#type),
            unit: self.get(t.unit),
        }
    }
}

fn part(message: &Profile, samples: &[&Sample]) -> Profile {
    let mut s = Strings {
        from: &message.string_table,
        table: vec![String::new()],
        index: HashMap::new(),
    };
    let sample_type = message
        .sample_type
        .iter()
        .map(|t| s.value_type(t))
        .collect();
    let sample = samples
        .iter()
        .map(|x| Sample {
            location_id: x.location_id.clone(),
            value: x.value.clone(),
            label: x
                .label
                .iter()
                .map(|l| Label {
                    key: s.get(l.key),
                    str: s.get(l.str),
                    num: l.num,
                    num_unit: s.get(l.num_unit),
                })
                .collect(),
        })
        .collect();
    // The tables in the message's order, each row used by the part's samples.
    let used: HashSet<u64> = samples
        .iter()
        .flat_map(|x| x.location_id.iter().copied())
        .collect();
    let location: Vec<Location> = message
        .location
        .iter()
        .filter(|l| used.contains(&l.id))
        .cloned()
        .collect();
    let mappings: HashSet<u64> = location.iter().map(|l| l.mapping_id).collect();
    let functions: HashSet<u64> = location
        .iter()
        .flat_map(|l| l.line.iter().map(|line| line.function_id))
        .collect();
    let mapping = message
        .mapping
        .iter()
        .filter(|m| mappings.contains(&m.id))
        .map(|m| Mapping {
            filename: s.get(m.filename),
            build_id: s.get(m.build_id),
            ..m.clone()
        })
        .collect();
    let function = message
        .function
        .iter()
        .filter(|f| functions.contains(&f.id))
        .map(|f| Function {
            name: s.get(f.name),
            system_name: s.get(f.system_name),
            filename: s.get(f.filename),
            ..f.clone()
        })
        .collect();
    let period_type = message.period_type.as_ref().map(|t| s.value_type(t));
    let comment = message.comment.iter().map(|&c| s.get(c)).collect();
    let default_sample_type = s.get(message.default_sample_type);
    Profile {
        sample_type,
        sample,
        mapping,
        location,
        function,
        string_table: s.table,
        time_nanos: message.time_nanos,
        duration_nanos: message.duration_nanos,
        period_type,
        period: message.period,
        comment,
        default_sample_type,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        profile::{Profile as Model, pprof::encode},
        symbolize::{Frame, FrameKind},
    };

    /// Each sample as text: its labels, its stack's function names (leaf first), its values;
    /// plus the message's comments and sample types.
    fn rows(p: &Profile) -> (Vec<String>, Vec<String>) {
        let s = |i: i64| p.string_table[i as usize].clone();
        let functions: HashMap<u64, String> =
            p.function.iter().map(|f| (f.id, s(f.name))).collect();
        let locations: HashMap<u64, &Location> = p.location.iter().map(|l| (l.id, l)).collect();
        let mut rows: Vec<String> = p
            .sample
            .iter()
            .map(|x| {
                let labels: Vec<String> = x
                    .label
                    .iter()
                    .map(|l| format!("{}={}/{}", s(l.key), s(l.str), l.num))
                    .collect();
                let stack: Vec<String> = x
                    .location_id
                    .iter()
                    .map(|id| {
                        let l = locations[id];
                        let m = p.mapping.iter().find(|m| m.id == l.mapping_id);
                        let names: Vec<&str> = l
                            .line
                            .iter()
                            .map(|line| functions[&line.function_id].as_str())
                            .collect();
                        format!(
                            "{}@{}",
                            names.join("|"),
                            m.map_or(String::new(), |m| s(m.filename))
                        )
                    })
                    .collect();
                format!("{labels:?} {stack:?} {:?}", x.value)
            })
            .collect();
        rows.sort();
        let mut head: Vec<String> = p.comment.iter().map(|&c| s(c)).collect();
        head.extend(
            p.sample_type
                .iter()
                .map(|t| format!("{}/{}", s(t.r#type), s(t.unit))),
        );
        (rows, head)
    }

    #[test]
    fn parts_hold_their_samples_whole_and_only_the_tables_they_use() {
        let mut model = Model::default();
        model.info.event = "cpu-clock".into();
        model.info.frequency_hz = 100;
        model.info.lost = 2;
        let f = |name: &str, module: &str| {
            let mut f = Frame::named(name, FrameKind::User);
            f.module = Some(module.into());
            f
        };
        let s = model.push(
            "cpu-clock",
            "api",
            &[f("main", "api"), f("serve", "api")],
            30,
        );
        (s.pid, s.tid) = (10, 10);
        let s = model.push(
            "cpu-clock",
            "api-worker",
            &[f("main", "api"), f("work", "libw.so")],
            20,
        );
        (s.pid, s.tid) = (10, 11);
        let s = model.push(
            "cpu-clock",
            "batch",
            &[f("main", "batch"), f("crunch", "batch")],
            50,
        );
        (s.pid, s.tid) = (20, 20);
        let message = encode(&model);
        let pid = |x: &Sample| {
            x.label
                .iter()
                .find(|l| message.string_table[l.key as usize] == "pid")
                .map_or(0, |l| l.num)
        };
        let parts = split(&message, pid);
        assert_eq!(parts.iter().map(|(k, _)| *k).collect::<Vec<_>>(), [10, 20]);
        let (all, head) = rows(&message);
        let mut together = Vec::new();
        for (_, p) in &parts {
            let (r, h) = rows(p);
            assert_eq!(
                h, head,
                "each part keeps the run's counters and sample types"
            );
            assert_eq!(p.string_table[0], "");
            assert_eq!(
                (p.time_nanos, p.duration_nanos),
                (message.time_nanos, message.duration_nanos)
            );
            together.extend(r);
        }
        together.sort();
        assert_eq!(together, all, "the parts' samples are the message's");
        // pid 20's part names none of pid 10's functions or files.
        let (_, batch) = &parts[1];
        for absent in ["serve", "work", "libw.so", "api"] {
            assert!(!batch.string_table.iter().any(|s| s == absent), "{absent}");
        }
        assert_eq!(batch.sample.len(), 1);
        assert!(batch.location.len() < message.location.len());
        assert!(split(&Profile::default(), pid).is_empty());
    }
}
