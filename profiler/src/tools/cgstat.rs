//! Per-cgroup counting (`stat --for-each-cgroup`, `track -G`): a row per matching cgroup each
//! interval with the events counted in its subtree (as perf's cgroup events count a cgroup
//! and its descendants), and a total row per cgroup at the end. One set of per-CPU
//! counters serves every cgroup (see `bpf::CgroupCounter`), so the number of perf events
//! is CPUs × events whatever the number of cgroups.

use std::{
    collections::BTreeMap,
    io::{self, Write},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use serde::Serialize;

use super::{signals::Signals, spec::SetSpec};
use crate::{
    bpf::{BpfError, CgroupCounter, PrivilegeError, check_privileges},
    cgroup,
    cpc::{Cpc, CpcError},
};

#[derive(Debug, thiserror::Error)]
pub enum CgroupStatError {
    #[error("no cgroup v2 hierarchy is mounted (no cgroup2 line in /proc/self/mounts)")]
    NoCgroup2,
    #[error("invalid cgroup pattern '{pattern}': {message}")]
    Pattern { pattern: String, message: String },
    #[error("no cgroup matches {0} (paths are relative to {1}, or absolute in it)")]
    NoMatch(String, String),
    #[error("cgroup {0} does not exist")]
    NoCgroup(String),
    #[error(transparent)]
    Privilege(#[from] PrivilegeError),
    #[error("{0}")]
    Cpc(#[from] CpcError),
    #[error("per-cgroup counting: {0}")]
    Bpf(#[from] BpfError),
    #[error("{call}: {source}")]
    Sys {
        call: &'static str,
        source: io::Error,
    },
    #[error("writing the output: {0}")]
    Output(io::Error),
}

#[derive(Clone, Debug)]
pub struct CgroupStatOptions {
    /// Cgroups to report: paths relative to the cgroup2 root (or absolute in it), with glob
    /// characters; empty: every cgroup that counted anything.
    pub patterns: Vec<String>,
    /// Globs allowed in the patterns (`stat`); `track -G` takes one literal path.
    pub glob: bool,
    /// Rows every interval; `None`: only the totals at the end.
    pub interval: Option<Duration>,
    /// Stop after this many intervals (`None`: until interrupted).
    pub count: Option<u64>,
    pub cpus: Option<Vec<u32>>,
    pub header: bool,
    pub json: bool,
}

/// Which cgroup directories the patterns name.
struct Matcher {
    root: PathBuf,
    patterns: Vec<glob::Pattern>,
}

impl Matcher {
    fn new(root: PathBuf, patterns: &[String], globs: bool) -> Result<Self, CgroupStatError> {
        let patterns = patterns
            .iter()
            .map(|p| {
                let rel = Path::new(p)
                    .strip_prefix(&root)
                    .map(|r| format!("/{}", r.display()))
                    .unwrap_or_else(|_| format!("/{}", p.trim_start_matches('/')));
                let rel = rel.trim_end_matches('/').to_string();
                let rel = if rel.is_empty() { "/".to_string() } else { rel };
                let rel = if globs {
                    rel
                } else {
                    glob::Pattern::escape(&rel)
                };
                glob::Pattern::new(&rel).map_err(|e| CgroupStatError::Pattern {
                    pattern: p.clone(),
                    message: e.to_string(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { root, patterns })
    }

    fn matches(&self, rel: &str) -> bool {
        let opts = glob::MatchOptions {
            require_literal_separator: true,
            ..Default::default()
        };
        self.patterns.iter().any(|p| p.matches_with(rel, opts))
    }

    /// The matching cgroups now: (relative path, ids of it and its descendants).
    fn cgroups(&self) -> BTreeMap<Arc<str>, Vec<u64>> {
        let all = cgroup::walk(&self.root);
        let mut out: BTreeMap<Arc<str>, Vec<u64>> = BTreeMap::new();
        for (i, (dir, _)) in all.iter().enumerate() {
            let rel = cgroup::relative(&self.root, dir);
            if !self.patterns.is_empty() && !self.matches(&rel) {
                continue;
            }
            // `walk` sorts by path components: a cgroup's descendants follow it.
            let ids = all[i..]
                .iter()
                .take_while(|(d, _)| d.starts_with(dir))
                .map(|&(_, id)| id)
                .collect();
            out.insert(rel, ids);
        }
        out
    }
}

#[derive(Serialize)]
struct JsonCounter<'a> {
    event: &'a str,
    value: u64,
}

#[derive(Serialize)]
struct JsonRow<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    time: Option<f64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    total: bool,
    cgroup: &'a str,
    container: Option<String>,
    unit: Option<&'a str>,
    counters: Vec<JsonCounter<'a>>,
}

struct Printer<'a> {
    out: Box<dyn Write>,
    json: bool,
    events: Vec<&'a str>,
}

impl Printer<'_> {
    fn header(&mut self) -> io::Result<()> {
        if self.json {
            return Ok(());
        }
        let mut line = format!("{:>8} {:<40} {:<24}", "time", "cgroup", "container");
        for e in &self.events {
            line += &format!(" {e:>15}");
        }
        writeln!(self.out, "{line}")?;
        self.out.flush()
    }

    fn row(&mut self, time: Option<f64>, cgroup: &str, values: &[u64]) -> io::Result<()> {
        let container = cgroup::container_id(cgroup);
        let unit = cgroup::systemd_unit(cgroup);
        if self.json {
            let row = JsonRow {
                time,
                total: time.is_none(),
                cgroup,
                container,
                unit,
                counters: self
                    .events
                    .iter()
                    .zip(values)
                    .map(|(event, &value)| JsonCounter { event, value })
                    .collect(),
            };
            let text = serde_json::to_string(&row).map_err(io::Error::other)?;
            writeln!(self.out, "{text}")?;
            return self.out.flush();
        }
        let time = time.map_or_else(|| "total".to_string(), |t| format!("{t:.3}"));
        let name = container.as_deref().or(unit).unwrap_or("-");
        let mut line = format!("{time:>8} {cgroup:<40} {name:<24}");
        for v in values {
            line += &format!(" {v:>15}");
        }
        writeln!(self.out, "{line}")?;
        self.out.flush()
    }
}

/// Sums the totals of `ids` (a cgroup and its descendants).
fn subtree(leaf: &BTreeMap<u64, Vec<u64>>, ids: &[u64], n: usize) -> Vec<u64> {
    let mut sum = vec![0u64; n];
    for id in ids {
        if let Some(v) = leaf.get(id) {
            for (s, x) in sum.iter_mut().zip(v) {
                *s = s.wrapping_add(*x);
            }
        }
    }
    sum
}

/// Counts `set` per cgroup, writing rows to `out` and notes and warnings to `diag` (the
/// CLI's stderr).
pub fn cgroup_stat(
    cpc: &Cpc,
    set: &SetSpec,
    opts: &CgroupStatOptions,
    out: Box<dyn Write>,
    mut diag: Box<dyn Write>,
) -> Result<Option<nix::sys::signal::Signal>, CgroupStatError> {
    let sys = |call: &'static str| move |source| CgroupStatError::Sys { call, source };
    let root = cgroup::root().ok_or(CgroupStatError::NoCgroup2)?;
    if !opts.glob {
        for p in &opts.patterns {
            let dir = match Path::new(p).strip_prefix(&root) {
                Ok(rel) => root.join(rel),
                Err(_) => root.join(p.trim_start_matches('/')),
            };
            if !dir.is_dir() {
                return Err(CgroupStatError::NoCgroup(p.clone()));
            }
        }
    }
    let matcher = Matcher::new(root.clone(), &opts.patterns, opts.glob)?;
    if !opts.patterns.is_empty() && matcher.cgroups().is_empty() {
        return Err(CgroupStatError::NoMatch(
            opts.patterns.join(","),
            root.display().to_string(),
        ));
    }
    let built = set.build(cpc)?;
    let attrs = cpc.request_attrs(&built)?;
    let cpus = match &opts.cpus {
        Some(c) => c.clone(),
        None => crate::host::online_cpus().map_err(sys("reading the online CPUs"))?,
    };
    check_privileges()
        .require_bpf_and_perfmon()
        .map_err(CgroupStatError::Privilege)?;
    let mut signals = Signals::block().map_err(sys("blocking signals"))?;
    let mut counter = CgroupCounter::start(&attrs, &cpus)?;
    // Says how the counting scales, and (for scripts and tests) that counting has begun.
    let _ = writeln!(
        diag,
        "profiler: counting {} event(s) per cgroup with {} perf events ({} CPUs × {}), shared by every cgroup",
        attrs.len(),
        counter.perf_events(),
        cpus.len(),
        attrs.len()
    );
    let events: Vec<&str> = set.requests.iter().map(|r| r.event.as_str()).collect();
    let mut printer = Printer {
        out,
        json: opts.json,
        events,
    };
    if opts.header {
        printer.header().map_err(CgroupStatError::Output)?;
    }
    let n = attrs.len();
    let started = Instant::now();
    let mut last: BTreeMap<Arc<str>, Vec<u64>> = BTreeMap::new();
    let mut rounds = 0u64;
    // The terminating signal that ended the run, if one did (the counters are read once
    // more at it, as at an interval's end).
    let mut interrupted = None;
    loop {
        let deadline = opts.interval.map(|i| started + i * (rounds as u32 + 1));
        let woken = signals
            .wait(deadline.map(|d| d.saturating_duration_since(Instant::now())))
            .map_err(sys("waiting for the interval"))?;
        interrupted = interrupted.or(woken.stop);
        let due = deadline.is_some_and(|d| Instant::now() >= d);
        if !due && interrupted.is_none() {
            continue;
        }
        counter.flush();
        let leaf = counter.read()?;
        let time = started.elapsed().as_secs_f64();
        for (path, ids) in matcher.cgroups() {
            let now = subtree(&leaf, &ids, n);
            if opts.patterns.is_empty() && now.iter().all(|&v| v == 0) {
                continue;
            }
            if opts.interval.is_some() {
                let before = last.get(&path).cloned().unwrap_or_else(|| vec![0; n]);
                let delta: Vec<u64> = now
                    .iter()
                    .zip(&before)
                    .map(|(a, b)| a.wrapping_sub(*b))
                    .collect();
                printer
                    .row(Some(time), &path, &delta)
                    .map_err(CgroupStatError::Output)?;
            }
            last.insert(path, now);
        }
        rounds += 1;
        if interrupted.is_some() || opts.count.is_some_and(|c| rounds >= c) {
            break;
        }
    }
    for (path, values) in &last {
        printer
            .row(None, path, values)
            .map_err(CgroupStatError::Output)?;
    }
    let stats = counter.stats()?;
    if stats.dropped > 0 {
        let _ = writeln!(
            diag,
            "profiler: warning: {} counter deltas not attributed: the per-cgroup map is full",
            stats.dropped
        );
    }
    if stats.read_errors > 0 {
        let _ = writeln!(
            diag,
            "profiler: warning: {} counter reads failed in the kernel; those deltas are missing",
            stats.read_errors
        );
    }
    Ok(interrupted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_relative_and_absolute_paths() {
        let root = PathBuf::from("/sys/fs/cgroup/unified");
        let m = Matcher::new(
            root.clone(),
            &[
                "system.slice/docker-*.scope".into(),
                "/sys/fs/cgroup/unified/a/b/".into(),
                "/".into(),
            ],
            true,
        )
        .unwrap();
        assert!(m.matches("/system.slice/docker-abc.scope"));
        assert!(
            !m.matches("/system.slice/x/docker-abc.scope"),
            "* stays in one level"
        );
        assert!(m.matches("/a/b"));
        assert!(m.matches("/"));
        assert!(!m.matches("/a"));
        assert!(Matcher::new(root.clone(), &["[".into()], true).is_err());
        let literal = Matcher::new(root, &["a/b*".into()], false).unwrap();
        assert!(literal.matches("/a/b*"));
        assert!(
            !literal.matches("/a/bc"),
            "track -G takes the path literally"
        );
    }

    #[test]
    fn subtree_sums() {
        let leaf = BTreeMap::from([(1, vec![1, 10]), (2, vec![2, 20]), (3, vec![4, 40])]);
        assert_eq!(subtree(&leaf, &[1, 3, 9], 2), vec![5, 50]);
    }
}
