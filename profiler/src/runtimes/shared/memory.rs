//! Reading another process's memory, what every runtime's naming and detection does: one
//! syscall wrapper (`process_vm_readv`) behind a trait, so that the readers above it are
//! tested on fake memory, and bounded C strings.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("process_vm_readv(pid {pid}, {len} bytes at {addr:#x}): {source}")]
    Syscall {
        pid: u32,
        addr: u64,
        len: usize,
        #[source]
        source: io::Error,
    },
    #[error("process_vm_readv(pid {pid}, {len} bytes at {addr:#x}): only {got} bytes read")]
    Short {
        pid: u32,
        addr: u64,
        len: usize,
        got: usize,
    },
    #[error("{what} at {addr:#x}: {why}")]
    Invalid {
        what: &'static str,
        addr: u64,
        why: String,
    },
}

impl ReadError {
    pub fn invalid(what: &'static str, addr: u64, why: impl Into<String>) -> ReadError {
        ReadError::Invalid {
            what,
            addr,
            why: why.into(),
        }
    }
}

/// Memory that can be read at addresses of the target.
pub trait Memory {
    /// Fills `buf` from `addr`, wholly or not at all.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError>;

    fn read_u64(&self, addr: u64) -> Result<u64, ReadError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

/// A live process's memory.
#[derive(Clone, Copy, Debug)]
pub struct ProcessMemory {
    pid: u32,
}

impl ProcessMemory {
    pub fn new(pid: u32) -> ProcessMemory {
        ProcessMemory { pid }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if buf.is_empty() {
            return Ok(());
        }
        let len = buf.len();
        match vm_readv(self.pid, addr, buf) {
            Ok(got) if got == len => Ok(()),
            Ok(got) => Err(ReadError::Short {
                pid: self.pid,
                addr,
                len,
                got,
            }),
            Err(source) => Err(ReadError::Syscall {
                pid: self.pid,
                addr,
                len,
                source,
            }),
        }
    }
}

impl ProcessMemory {
    /// The 8-byte words at `addrs`, in one `process_vm_readv` per 1024 (the kernel's
    /// `UIO_MAXIOV`): `None` for a word that could not be read, and for the words after it in
    /// its call (the kernel stops at the first unreadable one).
    pub fn read_words(&self, addrs: &[u64]) -> Vec<Option<u64>> {
        let mut out = Vec::with_capacity(addrs.len());
        for chunk in addrs.chunks(1024) {
            let mut words = vec![0u64; chunk.len()];
            let local = libc::iovec {
                iov_base: words.as_mut_ptr().cast(),
                iov_len: words.len() * 8,
            };
            let remote: Vec<libc::iovec> = chunk
                .iter()
                .map(|&a| libc::iovec {
                    iov_base: a as *mut libc::c_void,
                    iov_len: 8,
                })
                .collect();
            // SAFETY: `local` describes `words`, exclusively borrowed and `8 * len` bytes
            // long, which is what the remote iovecs add up to; the remote ones are never
            // dereferenced by us (the kernel checks them against the target's mappings).
            let n = unsafe {
                libc::process_vm_readv(
                    self.pid as libc::pid_t,
                    &local,
                    1,
                    remote.as_ptr(),
                    remote.len() as libc::c_ulong,
                    0,
                )
            };
            let whole = if n < 0 { 0 } else { n as usize / 8 };
            out.extend(
                words
                    .iter()
                    .enumerate()
                    .map(|(i, &w)| (i < whole).then_some(w)),
            );
        }
        out
    }
}

/// The one syscall: `process_vm_readv` of `buf.len()` bytes at `addr` of `pid` into `buf`.
fn vm_readv(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which is exclusively borrowed and `buf.len()` bytes
    // long, so the kernel writes only inside it; `remote` is never dereferenced by us (the
    // kernel checks it against the target's mappings and fails with EFAULT).
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// The NUL-terminated string at `addr`, at most `max` bytes, read page by page (a string
/// near the end of a mapping must not fail for the bytes after it).
pub fn read_cstr<M: Memory + ?Sized>(mem: &M, addr: u64, max: usize) -> Result<String, ReadError> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < max {
        let to_page_end = (0x1000 - (at & 0xfff)) as usize;
        let mut chunk = vec![0u8; to_page_end.min(max - out.len())];
        mem.read(at, &mut chunk)?;
        if let Some(nul) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..nul]);
            return Ok(String::from_utf8_lossy(&out).into_owned());
        }
        at += chunk.len() as u64;
        out.extend_from_slice(&chunk);
    }
    Err(ReadError::invalid(
        "C string",
        addr,
        format!("no NUL in {max} bytes"),
    ))
}

/// Memory made of a few regions, for tests.
#[cfg(test)]
#[derive(Default)]
pub struct FakeMemory {
    regions: std::collections::BTreeMap<u64, Vec<u8>>,
}

#[cfg(test)]
impl FakeMemory {
    pub fn put(&mut self, addr: u64, bytes: &[u8]) {
        self.regions.insert(addr, bytes.to_vec());
    }
}

#[cfg(test)]
impl Memory for FakeMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let (start, bytes) = self
            .regions
            .range(..=addr)
            .next_back()
            .ok_or_else(|| ReadError::invalid("fake", addr, "unmapped"))?;
        let from = (addr - start) as usize;
        let src = bytes
            .get(from..from + buf.len())
            .ok_or_else(|| ReadError::invalid("fake", addr, "past the region"))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_reports_errno() {
        let value = 0x1122_3344_5566_7788u64;
        let mem = ProcessMemory::new(std::process::id());
        assert_eq!(mem.read_u64(&value as *const u64 as u64).unwrap(), value);
        match mem.read_u64(8) {
            Err(ReadError::Syscall { source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(libc::EFAULT))
            }
            other => panic!("expected EFAULT, got {other:?}"),
        }
    }

    #[test]
    fn c_strings_stop_at_nul_or_bound() {
        let mut m = FakeMemory::default();
        let mut b = b"abcdef\0ghij".to_vec();
        b.resize(0x1006, 0x41);
        m.put(0x1ffa, &b);
        assert_eq!(read_cstr(&m, 0x1ffa, 64).unwrap(), "abcdef");
        assert!(read_cstr(&m, 0x1ffa, 4).is_err());
    }

    #[test]
    fn words_are_read_together_until_one_is_unreadable() {
        let words: [u64; 3] = [11, 22, 33];
        let at = |i: usize| &words[i] as *const u64 as u64;
        let me = ProcessMemory::new(std::process::id());
        assert_eq!(
            me.read_words(&[at(2), at(0), at(1)]),
            [Some(33), Some(11), Some(22)]
        );
        // Page 0 is never mapped: the read stops there.
        assert_eq!(me.read_words(&[at(1), 8, at(2)]), [Some(22), None, None]);
        let many: Vec<u64> = (0..2500).map(|i| at(i % 3)).collect();
        let got = me.read_words(&many);
        assert_eq!(got.len(), 2500);
        assert!(
            got.iter()
                .enumerate()
                .all(|(i, w)| *w == Some(words[i % 3]))
        );
    }
}
