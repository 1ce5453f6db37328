//! JIT symbols from `/tmp/perf-PID.map`, the file JITs (V8, the JVM with perf-map-agent,
//! LuaJIT, .NET, CPython 3.12's perf trampolines) write for perf: one `START SIZE NAME` line
//! per generated function, addresses in hex.

use std::{path::Path, sync::Arc};

use crate::untrusted::{self, MAX_PERF_MAP_BYTES, Refusal, Rules};

/// One process's JIT symbols, sorted by start address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerfMap {
    entries: Vec<(u64, u64, Arc<str>)>,
}

impl PerfMap {
    /// The map `pid` wrote, looked up as the process sees /tmp (through its root, with its
    /// own pid in its pid namespace), then, once it is gone, in ours. Opened as an untrusted
    /// file: never a symlink, FIFO or device, owned by `owner` (the process's uid) or root,
    /// at most 64 MiB, and read on a thread of its own for at most a second, so a hostile
    /// map can neither hang nor fool the recording. Not found is `Ok(None)`.
    pub fn read(pid: u32, owner: Option<u32>) -> Result<Option<Self>, Refusal> {
        // An unknown owner (the process went before its uid was read): only root's file.
        let rules = Rules {
            max_bytes: MAX_PERF_MAP_BYTES,
            owner: Some(owner.unwrap_or(0)),
            identity: None,
        };
        // Most processes have no map: an lstat saves them the reading thread.
        if Self::locate(pid).is_none() {
            return Ok(None);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("perf-map".into())
            .spawn(move || {
                let _ = tx.send(read_checked(pid, &rules));
            })
            .map_err(|source| Refusal::Io {
                call: "spawn",
                source,
            })?;
        match rx.recv_timeout(std::time::Duration::from_millis(READ_TIMEOUT_MS)) {
            Ok(result) => result,
            // The reader stays blocked (a file system that never answers); it holds nothing
            // the recording needs.
            Err(_) => Err(Refusal::Slow(READ_TIMEOUT_MS)),
        }
    }

    /// Where `pid`'s map is, if anywhere: in our /tmp (a process in our pid namespace, or
    /// one that exited), else in its own /tmp seen through its root (a container). Only an
    /// lstat, which neither follows nor opens anything; [`PerfMap::read`] checks the file.
    /// A map last written before the live process started is another's that had its pid (a
    /// process that exited without removing its map, the pid since reused): not found.
    pub fn locate(pid: u32) -> Option<String> {
        let started = profiler_core::host::process_started(pid);
        let exists = |p: &str| {
            std::fs::symlink_metadata(p).is_ok_and(|m| !written_before(m.modified().ok(), started))
        };
        let nspid = namespace_pid(pid);
        let ours = format!("/tmp/perf-{pid}.map");
        if nspid.is_none_or(|n| n == pid) && exists(&ours) {
            return Some(ours);
        }
        let theirs = nspid.map(|n| format!("/proc/{pid}/root/tmp/perf-{n}.map"));
        theirs
            .filter(|p| exists(p))
            .or_else(|| exists(&ours).then_some(ours))
    }

    /// Parses the map text; lines that are not `HEX HEX NAME` are skipped (a JIT may be
    /// writing the last line as we read). Later entries for the same range win, as when a
    /// JIT reuses code memory.
    pub fn parse(text: &str) -> Self {
        let mut entries: Vec<(u64, u64, Arc<str>)> = Vec::new();
        for line in text.lines() {
            let mut parts = line.trim().splitn(3, ' ');
            let (Some(start), Some(size), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
            let (Some(start), Some(size)) = (hex(start), hex(size)) else {
                continue;
            };
            let name = name.trim();
            if size == 0 || name.is_empty() {
                continue;
            }
            let Some(end) = start.checked_add(size) else {
                continue;
            };
            entries.push((start, end, Arc::from(name)));
        }
        // Stable sort keeps file order among equal starts; lookup takes the last of them.
        entries.sort_by_key(|e| e.0);
        Self { entries }
    }

    /// The JIT function covering `addr`.
    pub fn find(&self, addr: u64) -> Option<&Arc<str>> {
        let i = self.entries.partition_point(|e| e.0 <= addr);
        self.entries[..i]
            .iter()
            .rev()
            .take(64)
            .find(|e| addr < e.1)
            .map(|e| &e.2)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Longest a perf map read may take.
const READ_TIMEOUT_MS: u64 = 1000;

fn read_checked(pid: u32, rules: &Rules) -> Result<Option<PerfMap>, Refusal> {
    let opened = match namespace_pid(pid) {
        Some(nspid) => untrusted::open(
            Some(Path::new(&format!("/proc/{pid}/root"))),
            Path::new(&format!("/tmp/perf-{nspid}.map")),
            rules,
        ),
        None => Err(Refusal::NotFound),
    };
    let opened = match opened {
        // Gone, or not there as it sees /tmp: ours (a process that exited already).
        Err(Refusal::NotFound) => {
            untrusted::open(None, Path::new(&format!("/tmp/perf-{pid}.map")), rules)
        }
        other => other,
    };
    let file = match opened {
        Ok(f) => f,
        Err(Refusal::NotFound) => return Ok(None),
        Err(e) => return Err(e),
    };
    let bytes = untrusted::read_bounded(file, rules.max_bytes)?;
    Ok(Some(PerfMap::parse(&String::from_utf8_lossy(&bytes))))
}

/// Whether a file last written at `written` predates a process started at `started`: by more
/// than a second, the slack of the start time's clocks (ticks, the wall clock's steps).
fn written_before(
    written: Option<std::time::SystemTime>,
    started: Option<std::time::SystemTime>,
) -> bool {
    match (written, started) {
        (Some(w), Some(s)) => w + std::time::Duration::from_secs(1) < s,
        _ => false,
    }
}

/// The pid of `pid` inside its own pid namespace (the last NSpid field).
fn namespace_pid(pid: u32) -> Option<u32> {
    let status = profiler_core::host::TaskStatus::read(pid).ok()?;
    status
        .field("NSpid")?
        .split_ascii_whitespace()
        .last()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_finds_jit_functions() {
        let map = PerfMap::parse(
            "7f0000001000 40 LazyCompile:~add /app/x.js:1\n\
             0x7f0000002000 0x10 py::spin:/app/y.py\n\
             garbage\n\
             7f0000003000 0 empty\n\
             ffffffffffffffff 10 overflow\n\
             7f0000001000 20 reused\n\
             7f000000",
        );
        assert_eq!(
            map.find(0x7f0000001010).map(|s| s.as_ref()),
            Some("reused"),
            "the later entry for a reused range wins"
        );
        assert_eq!(
            map.find(0x7f0000001030).map(|s| s.as_ref()),
            Some("LazyCompile:~add /app/x.js:1")
        );
        assert_eq!(
            map.find(0x7f000000200f).map(|s| s.as_ref()),
            Some("py::spin:/app/y.py")
        );
        assert_eq!(map.find(0x7f0000002010), None);
        assert_eq!(map.find(0x10), None);
        assert_eq!(map.find(0x7f0000003000), None);
    }

    #[test]
    fn a_map_older_than_its_process_is_another_process_s() {
        let pid = std::process::id();
        let path = format!("/tmp/perf-{pid}.map");
        std::fs::write(&path, "7f0000001000 40 stale\n").unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        let started = profiler_core::host::process_started(pid).unwrap();
        // Written by a process that had our pid before us.
        file.set_modified(started - std::time::Duration::from_secs(5))
            .unwrap();
        let stale = PerfMap::locate(pid);
        // Written while we run.
        file.set_modified(std::time::SystemTime::now()).unwrap();
        let ours = PerfMap::locate(pid);
        let _ = std::fs::remove_file(&path);
        assert_eq!(stale, None);
        assert_eq!(ours, Some(path));
        assert!(!written_before(None, Some(started)), "unknown: kept");
        assert!(!written_before(Some(started), None), "gone: kept");
    }

    #[test]
    fn missing_map_is_none() {
        assert_eq!(PerfMap::locate(u32::MAX - 7), None);
        assert_eq!(PerfMap::read(u32::MAX - 7, None).unwrap(), None);
    }
}
