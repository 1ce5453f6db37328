//! What a kernel walker needs of the C library to find a thread's runtime state the way the
//! runtime itself does: `pthread_getspecific` emulated from the thread pointer. In glibc the
//! thread pointer is the thread's `struct pthread` (also its `pthread_t`), which holds the
//! first 32 keys' values inline (`specific_1stblock`, 16-byte `{seq, data}` entries). The
//! array's offset changes between glibc builds, so it is read off the library's own
//! `pthread_getspecific` code rather than assumed.

use object::{Object, ObjectSection, ObjectSymbol, ReadCache};

use crate::modules::{ElfFiles, MapEntry, ReadAt, exec_mappings};

/// Where a thread's key values are, from its thread pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsdLayout {
    /// Offset of `specific_1stblock` in `struct pthread`.
    pub first_block: u16,
    /// Keys held inline (`PTHREAD_KEY_2NDLEVEL_SIZE`); larger keys go through a second level.
    pub first_block_keys: u16,
}

impl TsdLayout {
    /// Address of the value of `key` for the thread whose `struct pthread` is at `thread`.
    pub fn value_addr(&self, thread: u64, key: u32) -> Option<u64> {
        (key < u32::from(self.first_block_keys))
            .then(|| thread + u64::from(self.first_block) + 16 * u64::from(key) + 8)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TsdError {
    #[error("reading /proc/{pid}/maps: {source}")]
    Maps {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("process {0}: no glibc (libc.so.6) in its maps")]
    NoLibc(u32),
    #[error("{path}: not read: {why}")]
    Read { path: String, why: String },
    #[error("{path}: pthread_getspecific's code is not a pattern we know (x86-64 glibc 2.34+)")]
    UnknownCode { path: String },
}

/// The TSD layout of the glibc that `pid` maps.
pub fn tsd_layout(pid: u32) -> Result<TsdLayout, TsdError> {
    let maps = exec_mappings(pid).map_err(|source| TsdError::Maps { pid, source })?;
    let libc = maps
        .iter()
        .find(|m| m.name.rsplit('/').next() == Some("libc.so.6"))
        .ok_or(TsdError::NoLibc(pid))?;
    let path = libc.name.to_string();
    let mut files = ElfFiles::default();
    let code = files
        .read_once(pid, &MapEntry::from(libc.clone()), |elf| {
            let cache = ReadCache::new(ReadAt::new(&elf.file));
            let obj = object::File::parse(&cache).map_err(|e| e.to_string())?;
            let sym = obj
                .dynamic_symbols()
                .find(|s| s.name() == Ok("pthread_getspecific") && !s.is_undefined())
                .ok_or("no pthread_getspecific symbol")?;
            let len = sym.size().clamp(16, 64);
            obj.sections()
                .find_map(|s| s.data_range(sym.address(), len).ok().flatten())
                .map(<[u8]>::to_vec)
                .ok_or_else(|| "pthread_getspecific's code not in a section".to_string())
        })
        .ok_or_else(|| TsdError::Read {
            path: path.clone(),
            why: files.take_refusals().join("; "),
        })?
        .map_err(|why| TsdError::Read {
            path: path.clone(),
            why,
        })?;
    first_block(&code).ok_or(TsdError::UnknownCode { path })
}

/// glibc's fast path computes `&self->specific_1stblock[key]` as `(key + N) << 4` added to
/// the thread pointer: `add $N,%rax; shl $4,%rax` (`48 83 c0 N 48 c1 e0 04`).
fn first_block(code: &[u8]) -> Option<TsdLayout> {
    code.windows(8).find_map(|w| {
        (w[..3] == [0x48, 0x83, 0xc0] && w[4..] == [0x48, 0xc1, 0xe0, 0x04]).then(|| TsdLayout {
            first_block: u16::from(w[3]) << 4,
            first_block_keys: 32,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_glibc_2_36() {
        // Debian 12's pthread_getspecific, first bytes.
        let code = [
            0x83, 0xff, 0x1f, 0x77, 0x3b, 0x89, 0xf8, 0x48, 0x83, 0xc0, 0x31, 0x48, 0xc1, 0xe0,
            0x04, 0x64, 0x48, 0x03, 0x04, 0x25, 0x10, 0x00, 0x00, 0x00,
        ];
        let l = first_block(&code).unwrap();
        assert_eq!(l.first_block, 0x310);
        assert_eq!(l.value_addr(0x1000, 2), Some(0x1000 + 0x310 + 32 + 8));
        assert_eq!(l.value_addr(0x1000, 32), None);
        assert_eq!(first_block(&[0x90; 32]), None);
    }

    #[test]
    fn reads_our_own_libc() {
        match tsd_layout(std::process::id()) {
            Ok(l) => assert!(l.first_block >= 0x100 && l.first_block < 0x1000, "{l:?}"),
            Err(TsdError::NoLibc(_)) => eprintln!("skipped: not linked with glibc"),
            Err(e) => panic!("{e}"),
        }
    }
}
