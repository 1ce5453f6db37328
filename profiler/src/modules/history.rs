//! Each process's executable mappings as the kernel reported them (the sideband's MMAP2,
//! COMM, FORK and EXIT records, `crate::perf::Sideband`): kept from its exec on, one image
//! per exec, so the samples of a process that lived 5 ms resolve like those of one that
//! lived 5 s, and nothing is read from /proc after a process has gone (where its pid may
//! name another process by then).

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use crate::perf::SideRecord;

use super::Mapping;

/// How long an exited process's mappings are kept for its samples still in the ring.
const KEEP_EXITED: Duration = Duration::from_secs(10);
/// How often exited processes are looked for.
const PRUNE_EVERY: Duration = Duration::from_secs(1);
/// Most mappings kept per image (a process mapping more is cut, as the kernel's table is).
const MAX_MAPPINGS: usize = 4096;

/// One program image of a process: what it was called when it exec'ed, its mappings.
#[derive(Clone, Debug, Default)]
struct Image {
    comm: [u8; 16],
    maps: Vec<Mapping>,
}

#[derive(Debug, Default)]
struct Process {
    images: Vec<Image>,
    exited: Option<Instant>,
}

/// Mappings per process from the sideband.
#[derive(Debug, Default)]
pub struct MapHistory {
    procs: HashMap<u32, Process>,
    /// When exited processes were last dropped.
    pruned: Option<Instant>,
}

impl MapHistory {
    /// Applies one sideband record.
    pub fn apply(&mut self, record: &SideRecord) {
        match record {
            SideRecord::Mmap {
                pid,
                addr,
                len,
                pgoff,
                dev,
                ino,
                path,
                ..
            } => {
                let image = self.current(*pid);
                let (start, end) = (*addr, addr.saturating_add(*len));
                if end <= start {
                    return;
                }
                // A new mapping replaces whatever it overlaps (MAP_FIXED, a library loaded
                // over an unmapped one).
                image.maps.retain(|m| m.end <= start || m.start >= end);
                if image.maps.len() >= MAX_MAPPINGS {
                    return;
                }
                let at = image.maps.partition_point(|m| m.start < start);
                image.maps.insert(
                    at,
                    Mapping {
                        start,
                        end,
                        offset: *pgoff,
                        dev: *dev,
                        ino: *ino,
                        // The kernel names anonymous memory `//anon`; /proc leaves it
                        // unnamed, and so does every reader of mappings here.
                        name: Arc::from(if path == "//anon" { "" } else { path.as_str() }),
                    },
                );
            }
            SideRecord::Comm {
                pid,
                comm,
                exec: true,
                ..
            } => {
                let p = self.procs.entry(*pid).or_default();
                p.exited = None;
                p.images.push(Image {
                    comm: *comm,
                    maps: Vec::new(),
                });
            }
            SideRecord::Comm { .. } => {}
            SideRecord::Fork { pid, ppid, tid, .. } if pid == tid && pid != ppid => {
                // A new process: until it execs, it runs its parent's image.
                let parent = self.procs.get(ppid).and_then(|p| p.images.last()).cloned();
                let child = self.procs.entry(*pid).or_default();
                child.exited = None;
                child.images = parent.into_iter().collect();
            }
            SideRecord::Fork { .. } => {}
            SideRecord::Exit { pid, tid, .. } if pid == tid => {
                let now = Instant::now();
                if let Some(p) = self.procs.get_mut(pid) {
                    p.exited = Some(now);
                }
                // Processes gone for long enough are dropped, once a second at most.
                if self
                    .pruned
                    .is_none_or(|t| now.duration_since(t) >= PRUNE_EVERY)
                {
                    self.pruned = Some(now);
                    self.procs.retain(|_, p| {
                        p.exited.is_none_or(|t| now.duration_since(t) < KEEP_EXITED)
                    });
                }
            }
            SideRecord::Exit { .. } | SideRecord::Lost { .. } => {}
        }
    }

    fn current(&mut self, pid: u32) -> &mut Image {
        let p = self.procs.entry(pid).or_default();
        if p.images.is_empty() {
            p.images.push(Image::default());
        }
        let last = p.images.len() - 1;
        &mut p.images[last]
    }

    /// The executable mappings of `pid` when it ran `comm` (its thread's name in a sample),
    /// else of its latest image; `None` when the sideband saw none of its mappings.
    pub fn mappings(&self, pid: u32, comm: Option<&[u8; 16]>) -> Option<&[Mapping]> {
        let p = self.procs.get(&pid)?;
        let image = comm
            .and_then(|c| p.images.iter().rev().find(|i| &i.comm == c))
            .or_else(|| p.images.last())?;
        (!image.maps.is_empty()).then_some(&image.maps[..])
    }

    /// Whether the image of `pid` named `comm` (else its latest), as the kernel reported it,
    /// is its latest; `None` when it reported no mappings of it.
    pub fn image(&self, pid: u32, comm: Option<&[u8; 16]>) -> Option<bool> {
        let p = self.procs.get(&pid)?;
        let i = comm
            .and_then(|c| p.images.iter().rposition(|i| &i.comm == c))
            .or_else(|| p.images.len().checked_sub(1))?;
        (!p.images[i].maps.is_empty()).then_some(i + 1 == p.images.len())
    }

    /// Processes known.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mmap(pid: u32, addr: u64, path: &str) -> SideRecord {
        SideRecord::Mmap {
            pid,
            addr,
            len: 0x1000,
            pgoff: 0,
            dev: 1,
            ino: addr,
            path: path.into(),
            time: 0,
        }
    }

    fn comm(name: &str) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..name.len()].copy_from_slice(name.as_bytes());
        c
    }

    #[test]
    fn images_by_exec_fork_copies_and_exit_keeps() {
        let mut h = MapHistory::default();
        h.apply(&SideRecord::Comm {
            pid: 10,
            tid: 10,
            comm: comm("sh"),
            exec: true,
            time: 0,
        });
        h.apply(&mmap(10, 0x1000, "/bin/sh"));
        h.apply(&SideRecord::Fork {
            pid: 11,
            ppid: 10,
            tid: 11,
            time: 0,
        });
        h.apply(&SideRecord::Comm {
            pid: 11,
            tid: 11,
            comm: comm("ls"),
            exec: true,
            time: 0,
        });
        h.apply(&mmap(11, 0x5000, "/bin/ls"));
        h.apply(&mmap(11, 0x9000, "/lib/libc.so.6"));
        h.apply(&mmap(11, 0xd000, "//anon"));
        h.apply(&SideRecord::Exit {
            pid: 11,
            tid: 11,
            time: 0,
        });
        let ls = h.mappings(11, Some(&comm("ls"))).unwrap();
        assert_eq!(ls.len(), 3);
        assert_eq!(&*ls[0].name, "/bin/ls");
        assert_eq!(
            &*ls[2].name, "",
            "anonymous memory, unnamed as /proc has it"
        );
        // Before its exec, the child ran its parent's image.
        let before = h.mappings(11, Some(&comm("sh"))).unwrap();
        assert_eq!(&*before[0].name, "/bin/sh");
        assert!(h.mappings(12, None).is_none());
    }
}
