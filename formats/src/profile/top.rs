//! The top table: self and total share of one event's values (events, or time) per
//! function, module, process, thread, CPU or cgroup.

use std::{collections::HashMap, fmt::Write as _, sync::Arc};

use super::{Profile, StackCount, Unit};

/// What the rows of the table are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum By {
    #[default]
    Function,
    Module,
    Pid,
    Tid,
    Comm,
    Cpu,
    Cgroup,
    Event,
    /// The value of a label the sampled code set (`label:route`: a goroutine's pprof
    /// label). The key lives as long as the program: a command line names one, once.
    Label(&'static str),
}

impl By {
    /// The table's column headings: the rows' and their detail's.
    pub fn headings(self) -> (String, &'static str) {
        let (what, detail) = match self {
            By::Label(key) => return (format!("LABEL {key}"), ""),
            By::Function => ("FUNCTION", "MODULE"),
            By::Module => ("MODULE", ""),
            By::Pid => ("PID", "COMM"),
            By::Tid => ("TID", "COMM"),
            By::Comm => ("COMM", ""),
            By::Cpu => ("CPU", ""),
            By::Cgroup => ("CGROUP", "CONTAINER"),
            By::Event => ("EVENT", ""),
        };
        (what.to_string(), detail)
    }
}

impl std::str::FromStr for By {
    type Err = String;

    /// `function`, `module`, `pid`, `tid`, `comm`, `cpu`, `cgroup`, `event` or `label:KEY`.
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "function" => By::Function,
            "module" => By::Module,
            "pid" => By::Pid,
            "tid" => By::Tid,
            "comm" => By::Comm,
            "cpu" => By::Cpu,
            "cgroup" => By::Cgroup,
            "event" => By::Event,
            _ => match s.strip_prefix("label:") {
                Some(key) if !key.is_empty() => By::Label(Box::leak(Box::from(key))),
                _ => {
                    return Err(format!(
                        "`{s}`: rows are function, module, pid, tid, comm, cpu, cgroup, event \
                         or label:KEY"
                    ));
                }
            },
        })
    }
}

/// How rows are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Sort {
    #[default]
    #[cfg_attr(feature = "clap", value(name = "self"))]
    SelfSamples,
    #[cfg_attr(feature = "clap", value(name = "total"))]
    Total,
    Name,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopEntry {
    /// The function (or module, pid, ... per [`By`]).
    pub function: Arc<str>,
    /// The function's module; for cgroups the container id; else empty.
    pub module: Option<Arc<str>>,
    /// The values (events, time) where this was the innermost frame (for per-stack keys:
    /// all of them).
    pub self_samples: u64,
    /// The values where this was anywhere on the stack (counted once per stack).
    pub total_samples: u64,
}

#[derive(Clone, Debug)]
pub struct TopTable {
    pub entries: Vec<TopEntry>,
    pub total: u64,
    pub by: By,
    /// The unit of the values (of the profile's one event).
    pub unit: Unit,
}

/// The index of the frame of `stack` that gets its self value: the innermost, except on an
/// off-CPU stack (a marker innermost), whose time is the self time of the code that waited:
/// its innermost user frame (the scheduler's kernel frames under it are on every such
/// stack), or for a kernel thread its innermost frame that is not the marker.
fn self_frame(profile: &Profile, stack: &StackCount) -> Option<usize> {
    let frames: Vec<&crate::symbolize::Frame> = profile.frames_of(stack).collect();
    let last = frames.len().checked_sub(1)?;
    if !is_marker(frames[last]) {
        return Some(last);
    }
    frames
        .iter()
        .rposition(|f| f.kind == crate::symbolize::FrameKind::User && !is_marker(f))
        .or_else(|| frames.iter().rposition(|f| !is_marker(f)))
        .or(Some(last))
}

/// Whether `frame` is a marker of off-CPU time (`[off-cpu]`), not code: it is on every
/// off-CPU stack, so the time is the self time of the frame under it.
fn is_marker(frame: &crate::symbolize::Frame) -> bool {
    frame.module.is_none() && frame.function.starts_with(profiler_common::offcpu::MARKER)
}

pub(super) type Key = (Arc<str>, Option<Arc<str>>);

/// The row keys of one stack, outermost first (one key for per-stack attributes).
pub(super) fn keys(profile: &Profile, stack: &StackCount, by: By) -> Vec<Key> {
    let one = |s: String| vec![(Arc::from(s.as_str()), None)];
    match by {
        By::Function => profile
            .frames_of(stack)
            .map(|f| (f.function.clone(), f.module_label()))
            .collect(),
        By::Module => profile
            .frames_of(stack)
            .filter(|f| !is_marker(f))
            .map(|f| {
                (
                    f.module_label().unwrap_or_else(|| Arc::from("[unknown]")),
                    None,
                )
            })
            .collect(),
        By::Pid => vec![(
            Arc::from(stack.pid.to_string().as_str()),
            Some(stack.comm.clone()),
        )],
        By::Tid => vec![(
            Arc::from(stack.tid.to_string().as_str()),
            Some(stack.comm.clone()),
        )],
        By::Comm => vec![(stack.comm.clone(), None)],
        By::Cpu => one(stack.cpu.to_string()),
        By::Event => vec![(stack.event.clone(), None)],
        By::Label(key) => vec![(Arc::from(stack.labels.get(key).unwrap_or("[none]")), None)],
        By::Cgroup => {
            let path = profile.cgroup_name(stack.cgroup);
            let id = crate::cgroup::container_id(&path).map(|id| Arc::from(id.as_str()));
            vec![(path, id)]
        }
    }
}

impl TopTable {
    /// The table by function, sorted by self samples.
    pub fn build(profile: &Profile) -> Self {
        Self::build_by(profile, By::Function, Sort::SelfSamples)
    }

    pub fn build_by(profile: &Profile, by: By, sort: Sort) -> Self {
        let mut acc: HashMap<Key, (u64, u64)> = HashMap::new();
        for stack in &profile.stacks {
            let keys = keys(profile, stack, by);
            let mut seen: Vec<&Key> = Vec::new();
            for key in &keys {
                if !seen.contains(&key) {
                    seen.push(key);
                    let e = &mut acc.entry(key.clone()).or_default().1;
                    *e = e.saturating_add(stack.count);
                }
            }
            let leaf = match by {
                By::Function => self_frame(profile, stack),
                _ => keys.len().checked_sub(1),
            };
            if let Some(leaf) = leaf.map(|i| &keys[i]) {
                let e = &mut acc.entry(leaf.clone()).or_default().0;
                *e = e.saturating_add(stack.count);
            }
        }
        let mut entries: Vec<TopEntry> = acc
            .into_iter()
            .map(|((function, module), (s, t))| TopEntry {
                function,
                module,
                self_samples: s,
                total_samples: t,
            })
            .collect();
        entries.sort_by(|a, b| {
            let name = a.function.cmp(&b.function).then(a.module.cmp(&b.module));
            match sort {
                Sort::SelfSamples => b
                    .self_samples
                    .cmp(&a.self_samples)
                    .then(b.total_samples.cmp(&a.total_samples))
                    .then(name),
                Sort::Total => b
                    .total_samples
                    .cmp(&a.total_samples)
                    .then(b.self_samples.cmp(&a.self_samples))
                    .then(name),
                Sort::Name => name,
            }
        });
        let events = profile.events();
        Self {
            entries,
            total: profile.total(),
            by,
            unit: events.first().map_or(Unit::Samples, |e| profile.unit(e)),
        }
    }

    fn pct(&self, n: u64) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            100.0 * n as f64 / self.total as f64
        }
    }

    /// The table as text, at most `limit` rows.
    pub fn render(&self, limit: usize) -> String {
        let mut s = String::new();
        let (what, detail) = self.by.headings();
        let header = format!(
            "{:>7} {:>7} {:>8}  {:<40} {detail}",
            "SELF%",
            "TOTAL%",
            self.unit.column(),
            what
        );
        let _ = writeln!(s, "{}", header.trim_end());
        for e in self.entries.iter().take(limit) {
            let detail = match (&e.module, self.by) {
                (Some(m), _) => m.as_ref(),
                (None, By::Function) => "?",
                (None, _) => "",
            };
            let row = format!(
                "{:>6.2}% {:>6.2}% {:>8}  {:<40} {detail}",
                self.pct(e.self_samples),
                self.pct(e.total_samples),
                self.unit.cell(e.self_samples),
                e.function,
            );
            let _ = writeln!(s, "{}", row.trim_end());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::{Frame, FrameKind};

    fn f(name: &str) -> Frame {
        Frame {
            function: Arc::from(name),
            module: Some(Arc::from("chain")),
            path: None,
            file: None,
            line: None,
            kind: FrameKind::User,
            inlined: false,
            offset: None,
        }
    }

    #[test]
    fn off_cpu_time_is_the_self_time_of_the_code_that_waited() {
        let k = |n: &str| Frame {
            kind: FrameKind::Kernel,
            module: Some(Arc::from("[kernel.kallsyms]")),
            ..f(n)
        };
        let marker = Frame::named("[off-cpu]", FrameKind::User);
        let mut profile = Profile::default();
        let waited = [
            f("main"),
            f("read"),
            k("schedule"),
            k("__traceiter_sched_switch"),
        ];
        let mut stack = waited.to_vec();
        stack.push(marker.clone());
        profile.push("off-cpu", "c", &stack, 2_000_000_000);
        // A kernel thread's wait: no user frame.
        profile.push(
            "off-cpu",
            "k",
            &[k("kthread"), k("schedule"), marker],
            1_000,
        );
        let t = TopTable::build(&profile);
        let names: Vec<&str> = t.entries.iter().map(|e| e.function.as_ref()).collect();
        assert_eq!(names[..2], ["read", "schedule"], "{names:?}");
        assert_eq!(t.entries[0].self_samples, 2_000_000_000);
        let marker_row = t
            .entries
            .iter()
            .find(|e| &*e.function == "[off-cpu]")
            .unwrap();
        assert_eq!(
            (marker_row.self_samples, marker_row.total_samples),
            (0, 2_000_001_000)
        );
        assert!(t.render(1).contains("TIME  FUNCTION"));
        assert!(t.render(1).contains(" 2.00s  read "), "{}", t.render(1));
    }

    #[test]
    fn self_and_total_with_recursion_counted_once() {
        let mut profile = Profile::default();
        profile.push(
            "page-faults",
            "c",
            &[f("main"), f("a"), f("a"), f("leaf")],
            8,
        );
        profile.push("page-faults", "c", &[f("main"), f("b")], 2);
        let t = TopTable::build(&profile);
        assert_eq!(t.total, 10);
        let get = |n: &str| t.entries.iter().find(|e| e.function.as_ref() == n).unwrap();
        assert_eq!(
            (get("leaf").self_samples, get("leaf").total_samples),
            (8, 8)
        );
        assert_eq!(
            (get("a").self_samples, get("a").total_samples),
            (0, 8),
            "recursion counted once"
        );
        assert_eq!(
            (get("main").self_samples, get("main").total_samples),
            (0, 10)
        );
        assert_eq!(t.entries[0].function.as_ref(), "leaf");
        assert_eq!(t.entries[1].function.as_ref(), "b");
        let text = t.render(2);
        assert_eq!(
            text,
            "  SELF%  TOTAL%   EVENTS  FUNCTION                                 MODULE\n \
             80.00%  80.00%        8  leaf                                     chain\n \
             20.00%  20.00%        2  b                                        chain\n"
        );
    }
}
