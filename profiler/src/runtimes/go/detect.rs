//! Telling a Go executable and where its goroutines' labels are: its version from
//! `.go.buildinfo`, the offsets of that version ([`super::offsets`]), and where `g` is in
//! TLS, from the first instruction of `runtime.stackcheck` (found through `.gopclntab`,
//! so stripped binaries too).

use object::{Object, ObjectSection};

use super::offsets::{self, Offsets};
use crate::{
    modules::{ElfFiles, MapEntry, Mapping},
    runtimes::shared::{
        elf::load_bias,
        memory::{Memory, ReadError},
    },
    symbolize::go::GoTable,
};

/// A Go executable whose goroutines' labels can be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub offsets: Offsets,
    /// `g`'s offset from the thread pointer.
    pub tls_offset: i64,
}

/// What the executable of a process is to this runtime.
#[derive(Debug, PartialEq, Eq)]
pub enum Detection {
    NotGo,
    Found(Found),
    /// Go, but its labels cannot be read: why (one line).
    Unsupported(String),
}

/// The `.go.buildinfo` header's magic.
const BUILDINFO_MAGIC: &[u8; 14] = b"\xff Go buildinf:";
/// The buildinfo flag of Go 1.18+: the version string is inline, after the header.
const BUILDINFO_INLINE: u8 = 2;
/// Where Go 1.16-1.17's executables keep `g` when the code does not say (and the
/// OpenTelemetry profiler's default): the word below the thread pointer.
const DEFAULT_TLS_OFFSET: i64 = -8;

/// Detects Go in the executable `exe` maps for process `pid`, reading the live process
/// `mem` for what only it holds (the version of a Go 1.16-1.17 binary, a cgo binary's TLS
/// offset).
pub fn detect(pid: u32, exe: &Mapping, mem: &dyn Memory) -> Detection {
    let mut files = ElfFiles::default();
    let read = files.read_once(pid, &MapEntry::from(exe.clone()), |elf| {
        let cache = object::ReadCache::new(profiler_formats::ReadAt::new(elf.file.as_ref()));
        let obj = object::File::parse(&cache).ok()?;
        let buildinfo = obj.section_by_name(".go.buildinfo")?.address();
        let bias = load_bias(&obj, exe)?;
        let table = GoTable::read(&elf.file).ok().flatten();
        Some((buildinfo, bias, table))
    });
    let Some(Some((buildinfo, bias, table))) = read else {
        return Detection::NotGo;
    };
    let version = match version(mem, bias.wrapping_add(buildinfo)) {
        Ok(v) => v,
        Err(e) => return Detection::Unsupported(format!("its Go version is not readable: {e}")),
    };
    let Some(offsets) = offsets::minor(&version).and_then(offsets::of) else {
        return Detection::Unsupported(format!(
            "{version}: where its goroutines keep their labels is known for go1.16 to go1.{}",
            offsets::NEWEST
        ));
    };
    if !cfg!(target_arch = "x86_64") {
        return Detection::Unsupported("goroutine labels are read on x86-64 only".into());
    }
    let tls_offset = table
        .as_ref()
        .and_then(|t| {
            let entry = t.entry_of("runtime.stackcheck")?;
            let code = t.bytes_at(entry, 24)?;
            tls_offset(&code, |at| mem.read_u64(bias.wrapping_add(entry + at)).ok())
        })
        .unwrap_or(DEFAULT_TLS_OFFSET);
    Detection::Found(Found {
        offsets,
        tls_offset,
    })
}

/// The version string (`go1.19.8`) of the `.go.buildinfo` at `addr` of a live process.
fn version(mem: &dyn Memory, addr: u64) -> Result<String, ReadError> {
    let mut head = [0u8; 32];
    mem.read(addr, &mut head)?;
    if &head[..14] != BUILDINFO_MAGIC || head[14] != 8 || head[15] & 1 != 0 {
        return Err(ReadError::invalid(
            "Go build info",
            addr,
            "not a little-endian 64-bit header",
        ));
    }
    let (ptr, len) = if head[15] & BUILDINFO_INLINE != 0 {
        // A varint length, then the bytes.
        let mut bytes = [0u8; 10];
        mem.read(addr + 32, &mut bytes)?;
        let (mut len, mut shift, mut used) = (0u64, 0, 0);
        for &b in &bytes {
            len |= u64::from(b & 0x7f) << shift;
            shift += 7;
            used += 1;
            if b & 0x80 == 0 {
                break;
            }
        }
        (addr + 32 + used, len)
    } else {
        // A pointer to the `runtime.buildVersion` string header.
        let header = u64::from_le_bytes(head[16..24].try_into().expect("8 bytes"));
        (mem.read_u64(header)?, mem.read_u64(header + 8)?)
    };
    if len == 0 || len > 128 {
        return Err(ReadError::invalid(
            "Go version",
            ptr,
            format!("{len} bytes"),
        ));
    }
    let mut s = vec![0u8; len as usize];
    mem.read(ptr, &mut s)?;
    Ok(String::from_utf8_lossy(&s).into_owned())
}

/// `g`'s offset from the thread pointer, from the start of `runtime.stackcheck`, which
/// loads `g` first: `mov %fs:OFF,%reg` (an executable linked by Go), or the offset put in a
/// register first, as an immediate (`mov $OFF,%reg`) or from the GOT (`mov X(%rip),%reg`,
/// a cgo or PIE binary: `word(at)` reads the live process's word at code offset `at`),
/// then `mov %fs:(%reg),%reg`.
pub fn tls_offset(code: &[u8], word: impl Fn(u64) -> Option<u64>) -> Option<i64> {
    let i32_at = |at: usize| -> Option<i64> {
        Some(i64::from(i32::from_le_bytes(
            code.get(at..at + 4)?.try_into().ok()?,
        )))
    };
    // 64 48 8b /r with mod 00, rm 100 (SIB), SIB 0x25 (disp32, no base or index).
    if code.get(..3)? == [0x64, 0x48, 0x8b] && code[3] & 0xc7 == 0x04 && *code.get(4)? == 0x25 {
        return i32_at(5);
    }
    // 48 c7 c0+r imm32: mov $imm32, %reg.
    let fs_load_at = |at: usize| code.get(at..at + 3) == Some(&[0x64, 0x48, 0x8b][..]);
    if code.get(..2)? == [0x48, 0xc7] && code[2] & 0xf8 == 0xc0 && fs_load_at(7) {
        return i32_at(3);
    }
    // 48 8b 05+8r disp32: mov disp(%rip), %reg; the value is at the next instruction + disp.
    if code.get(..2)? == [0x48, 0x8b] && code[2] & 0xc7 == 0x05 && fs_load_at(7) {
        let at = 7u64.checked_add_signed(i32_at(3)?)?;
        return word(at).map(|w| w as i64);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::shared::memory::FakeMemory;

    #[test]
    fn the_tls_offset_is_read_from_each_form() {
        // Debian's go1.19, linked by Go: mov %fs:0xfffffffffffffff8,%rax.
        let go = [0x64, 0x48, 0x8b, 0x04, 0x25, 0xf8, 0xff, 0xff, 0xff, 0x48];
        assert_eq!(tls_offset(&go, |_| None), Some(-8));
        // mov $-16,%rcx; mov %fs:(%rcx),%rax.
        let imm = [
            0x48, 0xc7, 0xc1, 0xf0, 0xff, 0xff, 0xff, 0x64, 0x48, 0x8b, 0x01,
        ];
        assert_eq!(tls_offset(&imm, |_| None), Some(-16));
        // mov 0x10(%rip),%rcx; mov %fs:(%rcx),%rax: the word at 7 + 0x10.
        let got = [0x48, 0x8b, 0x0d, 0x10, 0, 0, 0, 0x64, 0x48, 0x8b, 0x01];
        let word = |at: u64| (at == 0x17).then_some((-24i64) as u64);
        assert_eq!(tls_offset(&got, word), Some(-24));
        // Anything else: not known (the caller assumes -8).
        assert_eq!(
            tls_offset(&[0x55, 0x48, 0x89, 0xe5, 0, 0, 0, 0, 0, 0], |_| None),
            None
        );
    }

    #[test]
    fn versions_are_read_inline_and_through_a_pointer() {
        let mut mem = FakeMemory::default();
        // Go 1.18+: flags 2, the varint-prefixed version at +32.
        let mut head = BUILDINFO_MAGIC.to_vec();
        head.extend([8, 2]);
        head.resize(32, 0);
        head.push(8);
        head.extend(b"go1.19.8");
        head.resize(64, 0);
        mem.put(0x1000, &head);
        assert_eq!(version(&mem, 0x1000).unwrap(), "go1.19.8");
        // Go 1.16-1.17: a pointer to the string header.
        let mut old = BUILDINFO_MAGIC.to_vec();
        old.extend([8, 0]);
        old.extend(0x3000u64.to_le_bytes());
        old.resize(32, 0);
        mem.put(0x2000, &old);
        let mut header = 0x4000u64.to_le_bytes().to_vec();
        header.extend(7u64.to_le_bytes());
        mem.put(0x3000, &header);
        mem.put(0x4000, b"go1.16.");
        assert_eq!(version(&mem, 0x2000).unwrap(), "go1.16.");
        mem.put(0x5000, &[0u8; 32]);
        assert!(version(&mem, 0x5000).is_err());
    }

    /// Go 1.26 as the workplace's OpenTelemetry agent was built (where it is: the bench's
    /// peer, beside this repository): its version from its build info, that version's
    /// offsets (which its DWARF gives too: g.m 48, m.curg 184, g.labels 352), and g's TLS
    /// slot from `runtime.stackcheck` in its Go table.
    #[test]
    fn the_opentelemetry_agents_go_1_26_is_found() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/tools/otel-ebpf-profiler/ebpf-profiler");
        if !path.exists() {
            eprintln!("skipped: no {}", path.display());
            return;
        }
        let data = std::fs::read(&path).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let info = elf.section_by_name(".go.buildinfo").unwrap();
        let mut mem = FakeMemory::default();
        mem.put(info.address(), info.data().unwrap());
        let v = version(&mem, info.address()).unwrap();
        assert!(v.starts_with("go1.26"), "{v}");
        let found = offsets::minor(&v).and_then(offsets::of).unwrap();
        assert_eq!(
            (found.g_m, found.m_curg, found.g_labels, found.kind),
            (48, 184, 352, offsets::LabelsKind::Slice)
        );
        let file = std::sync::Arc::new(std::fs::File::open(&path).unwrap());
        let table = GoTable::read(&file).unwrap().unwrap();
        let entry = table.entry_of("runtime.stackcheck").unwrap();
        let code = table.bytes_at(entry, 24).unwrap();
        assert_eq!(tls_offset(&code, |_| None), Some(-8), "{code:02x?}");
    }
}
