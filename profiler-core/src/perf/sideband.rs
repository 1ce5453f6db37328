//! Process lifecycle from the kernel, as perf record gets it: a software `dummy` event per
//! CPU that counts nothing but reports every executable mmap (PERF_RECORD_MMAP2, with the
//! file's device, inode and path), exec (COMM), fork and exit into a ring buffer of its own.
//! A process's mappings are then known from its exec on, whether or not it still lives when
//! its samples are read, and never from /proc after it has gone.

use std::{
    os::fd::{AsFd as _, AsRawFd as _},
    sync::atomic::{AtomicU64, Ordering},
};

use perf_event_open_sys::bindings;

use super::{EventAttr, PerfError, PerfEvent, Scope, SoftwareEvent};

/// Data pages of each CPU's ring (512 KiB: a few hundred new processes between two reads).
const DATA_PAGES: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum SidebandError {
    #[error(transparent)]
    Open(#[from] PerfError),
    #[error("mmap of the sideband ring of CPU {cpu}: {source}")]
    Mmap { cpu: u32, source: std::io::Error },
}

/// One record of the sideband, as the kernel wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SideRecord {
    /// An executable mapping of process `pid`: `[addr, addr + len)` at file offset `pgoff`
    /// of the file `path`, device `dev` (as `st_dev` encodes it) and inode `ino`.
    Mmap {
        pid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        dev: u64,
        ino: u64,
        path: String,
        time: u64,
    },
    /// Thread `tid` of `pid` took the name `comm`; `exec`: by an exec (a new image).
    Comm {
        pid: u32,
        tid: u32,
        comm: [u8; 16],
        exec: bool,
        time: u64,
    },
    /// Task `tid` of process `pid` was made by `ptid` of `ppid`.
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        time: u64,
    },
    /// Task `tid` of process `pid` exited.
    Exit { pid: u32, tid: u32, time: u64 },
    /// The ring was full: `lost` records were dropped.
    Lost { lost: u64, time: u64 },
}

impl SideRecord {
    pub fn time(&self) -> u64 {
        match self {
            SideRecord::Mmap { time, .. }
            | SideRecord::Comm { time, .. }
            | SideRecord::Fork { time, .. }
            | SideRecord::Exit { time, .. }
            | SideRecord::Lost { time, .. } => *time,
        }
    }
}

/// One CPU's event and its mapped ring.
struct Ring {
    _event: PerfEvent,
    base: *mut u8,
    /// Bytes mapped (the control page and the data pages).
    mapped: usize,
    data_offset: usize,
    data_size: usize,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Sideband::open`, of this length, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.mapped) };
    }
}

// SAFETY: the mapping is owned by the ring; the kernel writes its data pages concurrently,
// which the reader handles with the head/tail protocol.
unsafe impl Send for Ring {}

/// The sideband events of every CPU given.
pub struct Sideband {
    rings: Vec<Ring>,
    /// Records dropped by the kernel (full rings), summed.
    pub lost: u64,
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

impl Sideband {
    /// Opens and enables a sideband event on each of `cpus` (every task on that CPU).
    pub fn open(cpus: &[u32]) -> Result<Self, SidebandError> {
        let mut attr = EventAttr::software(SoftwareEvent::Dummy);
        attr.set_sideband();
        let page = page_size();
        let mapped = page * (1 + DATA_PAGES);
        let mut rings = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            let event = PerfEvent::open(&attr, Scope::Cpu(cpu), None, || {
                "dummy (mmap, comm, fork and exit records)".to_string()
            })?;
            // SAFETY: a shared mapping of the event's ring (one control page and a power of
            // two of data pages, as perf_event_open(2) requires), owned by the Ring.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    mapped,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    event.as_fd().as_raw_fd(),
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(SidebandError::Mmap {
                    cpu,
                    source: std::io::Error::last_os_error(),
                });
            }
            let meta = base.cast::<bindings::perf_event_mmap_page>();
            // SAFETY: the control page is mapped; these fields are set by the kernel at mmap.
            let (data_offset, data_size) =
                unsafe { ((*meta).data_offset as usize, (*meta).data_size as usize) };
            // Kernels before 4.1 leave them 0: data follows the control page.
            let (data_offset, data_size) = if data_size == 0 {
                (page, page * DATA_PAGES)
            } else {
                (data_offset, data_size)
            };
            let ring = Ring {
                _event: event,
                base: base.cast(),
                mapped,
                data_offset,
                data_size,
            };
            ring._event.enable(false)?;
            rings.push(ring);
        }
        Ok(Self { rings, lost: 0 })
    }

    /// Takes every record written so far, from all CPUs, in time order.
    pub fn read(&mut self) -> Vec<SideRecord> {
        let mut out = Vec::new();
        for ring in &self.rings {
            ring.drain(&mut out);
        }
        out.sort_by_key(SideRecord::time);
        for r in &out {
            if let SideRecord::Lost { lost, .. } = r {
                self.lost += lost;
            }
        }
        out
    }
}

impl Ring {
    fn head_tail(&self) -> (&AtomicU64, &AtomicU64) {
        let meta = self.base.cast::<bindings::perf_event_mmap_page>();
        // SAFETY: data_head and data_tail are naturally aligned u64 fields of the mapped
        // control page, shared with the kernel: accessed only atomically.
        unsafe {
            (
                AtomicU64::from_ptr((&raw mut (*meta).data_head).cast()),
                AtomicU64::from_ptr((&raw mut (*meta).data_tail).cast()),
            )
        }
    }

    fn drain(&self, out: &mut Vec<SideRecord>) {
        let (head, tail) = self.head_tail();
        let end = head.load(Ordering::Acquire);
        let mut at = tail.load(Ordering::Relaxed);
        let mut record = Vec::new();
        while at + 8 <= end {
            let mut header = [0u8; 8];
            self.copy_out(at, &mut header);
            let size = u16::from_ne_bytes([header[6], header[7]]) as u64;
            if size < 8 || at + size > end {
                break;
            }
            record.resize(size as usize, 0);
            self.copy_out(at, &mut record);
            if let Some(r) = parse(&record) {
                out.push(r);
            }
            at += size;
        }
        tail.store(at, Ordering::Release);
    }

    /// Copies `buf.len()` bytes from ring position `pos`, across the wrap.
    fn copy_out(&self, pos: u64, buf: &mut [u8]) {
        let start = (pos % self.data_size as u64) as usize;
        let first = buf.len().min(self.data_size - start);
        // SAFETY: both pieces lie inside the data area [data_offset, data_offset + data_size)
        // of the mapping; the kernel does not write below the head it published.
        unsafe {
            let data = self.base.add(self.data_offset);
            std::ptr::copy_nonoverlapping(data.add(start), buf.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, buf.as_mut_ptr().add(first), buf.len() - first);
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The text up to the first NUL of `b`.
fn c_str(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;

/// Parses one record (`sample_id_all` with TID and TIME: its time is its last word).
pub fn parse(r: &[u8]) -> Option<SideRecord> {
    let kind = u32_at(r, 0)?;
    let misc = u16::from_ne_bytes([*r.get(4)?, *r.get(5)?]);
    let time = u64_at(r, r.len().checked_sub(8)?)?;
    let body = r.get(8..r.len().checked_sub(16)?)?;
    Some(match kind {
        bindings::PERF_RECORD_MMAP2 => {
            if misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
                return None; // not asked for: no device and inode in it
            }
            let (maj, min) = (u32_at(body, 32)?, u32_at(body, 36)?);
            SideRecord::Mmap {
                pid: u32_at(body, 0)?,
                addr: u64_at(body, 8)?,
                len: u64_at(body, 16)?,
                pgoff: u64_at(body, 24)?,
                dev: libc::makedev(maj, min),
                ino: u64_at(body, 40)?,
                path: String::from_utf8_lossy(c_str(body.get(64..)?)).into_owned(),
                time,
            }
        }
        bindings::PERF_RECORD_COMM => {
            let mut comm = [0u8; 16];
            let name = c_str(body.get(8..)?);
            let n = name.len().min(15);
            comm[..n].copy_from_slice(&name[..n]);
            SideRecord::Comm {
                pid: u32_at(body, 0)?,
                tid: u32_at(body, 4)?,
                comm,
                exec: misc & PERF_RECORD_MISC_COMM_EXEC != 0,
                time,
            }
        }
        bindings::PERF_RECORD_FORK => SideRecord::Fork {
            pid: u32_at(body, 0)?,
            ppid: u32_at(body, 4)?,
            tid: u32_at(body, 8)?,
            time,
        },
        bindings::PERF_RECORD_EXIT => SideRecord::Exit {
            pid: u32_at(body, 0)?,
            tid: u32_at(body, 8)?,
            time,
        },
        bindings::PERF_RECORD_LOST => SideRecord::Lost {
            lost: u64_at(body, 8)?,
            time,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let size = (8 + body.len() + 16) as u16;
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&misc.to_ne_bytes());
        r.extend_from_slice(&size.to_ne_bytes());
        r.extend_from_slice(body);
        r.extend_from_slice(&7u32.to_ne_bytes()); // sample_id: pid
        r.extend_from_slice(&8u32.to_ne_bytes()); // tid
        r.extend_from_slice(&1234u64.to_ne_bytes()); // time
        r
    }

    #[test]
    fn parses_mmap2_and_exec_comm() {
        let mut body = Vec::new();
        for w in [7u32, 8] {
            body.extend_from_slice(&w.to_ne_bytes());
        }
        for w in [0x5555_0000_1000u64, 0x2000, 0x1000] {
            body.extend_from_slice(&w.to_ne_bytes());
        }
        body.extend_from_slice(&8u32.to_ne_bytes());
        body.extend_from_slice(&1u32.to_ne_bytes());
        body.extend_from_slice(&42u64.to_ne_bytes());
        body.extend_from_slice(&0u64.to_ne_bytes());
        body.extend_from_slice(&5u32.to_ne_bytes());
        body.extend_from_slice(&2u32.to_ne_bytes());
        body.extend_from_slice(b"/usr/bin/ls\0\0\0\0\0");
        let r = parse(&record(bindings::PERF_RECORD_MMAP2, 0, &body)).unwrap();
        assert_eq!(
            r,
            SideRecord::Mmap {
                pid: 7,
                addr: 0x5555_0000_1000,
                len: 0x2000,
                pgoff: 0x1000,
                dev: libc::makedev(8, 1),
                ino: 42,
                path: "/usr/bin/ls".into(),
                time: 1234,
            }
        );
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_ne_bytes());
        body.extend_from_slice(&7u32.to_ne_bytes());
        body.extend_from_slice(b"ls\0\0\0\0\0\0");
        let r = parse(&record(bindings::PERF_RECORD_COMM, 1 << 13, &body)).unwrap();
        let SideRecord::Comm { exec, comm, .. } = r else {
            panic!("{r:?}")
        };
        assert!(exec);
        assert_eq!(&comm[..3], b"ls\0");
    }

    #[test]
    fn truncated_records_are_none() {
        assert_eq!(parse(&[1, 2, 3]), None);
        assert_eq!(
            parse(&record(bindings::PERF_RECORD_MMAP2, 0, &[0; 8])),
            None
        );
    }
}
