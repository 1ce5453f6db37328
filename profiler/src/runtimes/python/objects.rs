//! CPython's bytes and string objects read from another process, bounded: a code object's
//! name, file name and line table.

use crate::runtimes::shared::memory::{Memory, ReadError};

/// Longest string read (a function or file name): anything longer is refused as garbage.
pub const MAX_STRING_CHARS: u64 = 4096;
/// Largest line table read from a code object.
pub const MAX_TABLE_BYTES: u64 = 1 << 20;

/// Where a Python build keeps the parts of a bytes object and a string.
#[derive(Clone, Copy, Debug)]
pub struct ObjectLayout {
    pub bytes_size: u16,
    pub bytes_data: u16,
    pub unicode_length: u16,
    pub unicode_state: u16,
    pub unicode_ascii_data: u16,
    pub unicode_compact_data: u16,
}

impl From<&profiler_common::python::PythonOffsets> for ObjectLayout {
    fn from(o: &profiler_common::python::PythonOffsets) -> ObjectLayout {
        ObjectLayout {
            bytes_size: o.bytes_size,
            bytes_data: o.bytes_data,
            unicode_length: o.unicode_length,
            unicode_state: o.unicode_state,
            unicode_ascii_data: o.unicode_ascii_data,
            unicode_compact_data: o.unicode_compact_data,
        }
    }
}

fn field_i64(header: &[u8], at: u16) -> i64 {
    let at = usize::from(at);
    i64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"))
}

/// The contents of the bytes object at `addr`, at most `limit` bytes.
pub fn read_bytes(
    mem: &impl Memory,
    layout: &ObjectLayout,
    addr: u64,
    limit: u64,
) -> Result<Vec<u8>, ReadError> {
    let mut header = [0u8; 8];
    mem.read(addr + u64::from(layout.bytes_size), &mut header)?;
    let size = i64::from_le_bytes(header);
    if size < 0 || size as u64 > limit {
        return Err(ReadError::invalid(
            "bytes object",
            addr,
            format!("size {size}"),
        ));
    }
    let mut data = vec![0u8; size as usize];
    mem.read(addr + u64::from(layout.bytes_data), &mut data)?;
    Ok(data)
}

/// The string object at `addr` (a compact `str`: every name and file name is one), at most
/// [`MAX_STRING_CHARS`] characters, decoded from its 1, 2 or 4-byte form.
pub fn read_string(
    mem: &impl Memory,
    layout: &ObjectLayout,
    addr: u64,
) -> Result<String, ReadError> {
    let mut header = [0u8; 40];
    mem.read(addr, &mut header)?;
    let length = field_i64(&header, layout.unicode_length);
    let at = usize::from(layout.unicode_state);
    let state = u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    // state: interned:2, kind:3, compact:1, ascii:1 (the same bits in 3.6 to 3.13).
    let kind = (state >> 2) & 7;
    let compact = state & (1 << 5) != 0;
    let ascii = state & (1 << 6) != 0;
    if !compact {
        return Err(ReadError::invalid("str", addr, "not a compact string"));
    }
    if length < 0 || length as u64 > MAX_STRING_CHARS {
        return Err(ReadError::invalid("str", addr, format!("length {length}")));
    }
    if !matches!(kind, 1 | 2 | 4) || (ascii && kind != 1) {
        return Err(ReadError::invalid("str", addr, format!("kind {kind}")));
    }
    let data_at = if ascii {
        layout.unicode_ascii_data
    } else {
        layout.unicode_compact_data
    };
    let mut data = vec![0u8; length as usize * kind as usize];
    mem.read(addr + u64::from(data_at), &mut data)?;
    let bad = || ReadError::invalid("str", addr, "not valid characters");
    match kind {
        1 if ascii => String::from_utf8(data).map_err(|_| bad()),
        1 => Ok(data.iter().map(|&b| char::from(b)).collect()),
        2 => data
            .chunks_exact(2)
            .map(|c| char::from_u32(u32::from(u16::from_le_bytes([c[0], c[1]]))).ok_or_else(bad))
            .collect(),
        _ => data
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).ok_or_else(bad))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::shared::memory::FakeMemory;

    const LAYOUT_312: ObjectLayout = ObjectLayout {
        bytes_size: 16,
        bytes_data: 32,
        unicode_length: 16,
        unicode_state: 32,
        unicode_ascii_data: 40,
        unicode_compact_data: 56,
    };

    fn string(kind: u32, ascii: bool, length: i64, data: &[u8]) -> Vec<u8> {
        let mut s = vec![0u8; if ascii { 40 } else { 56 }];
        s[16..24].copy_from_slice(&length.to_le_bytes());
        let state = (kind << 2) | (1 << 5) | (u32::from(ascii) << 6);
        s[32..36].copy_from_slice(&state.to_le_bytes());
        s.extend_from_slice(data);
        s.resize(s.len().max(40), 0);
        s
    }

    #[test]
    fn strings_of_every_kind() {
        let mut m = FakeMemory::default();
        m.put(0x1000, &string(1, true, 3, b"abc"));
        m.put(0x2000, &string(1, false, 2, &[0xe9, 0x74]));
        let ucs2: Vec<u8> = "ωx".encode_utf16().flat_map(u16::to_le_bytes).collect();
        m.put(0x3000, &string(2, false, 2, &ucs2));
        let ucs4: Vec<u8> = "🐍"
            .chars()
            .flat_map(|c| (c as u32).to_le_bytes())
            .collect();
        m.put(0x4000, &string(4, false, 1, &ucs4));
        m.put(0x5000, &string(1, true, 1 << 20, b"x"));
        m.put(0x6000, &string(3, false, 1, b"xxxx"));
        let r = |a| read_string(&m, &LAYOUT_312, a);
        assert_eq!(r(0x1000).unwrap(), "abc");
        assert_eq!(r(0x2000).unwrap(), "ét");
        assert_eq!(r(0x3000).unwrap(), "ωx");
        assert_eq!(r(0x4000).unwrap(), "🐍");
        assert!(matches!(r(0x5000), Err(ReadError::Invalid { .. })));
        assert!(matches!(r(0x6000), Err(ReadError::Invalid { .. })));
        assert!(r(0x9_0000).is_err());
    }

    #[test]
    fn bytes_are_bounded() {
        let mut m = FakeMemory::default();
        let mut b = vec![0u8; 32];
        b[16..24].copy_from_slice(&4i64.to_le_bytes());
        b.extend_from_slice(b"\x01\x02\x03\x04");
        m.put(0x1000, &b);
        assert_eq!(
            read_bytes(&m, &LAYOUT_312, 0x1000, 16).unwrap(),
            [1, 2, 3, 4]
        );
        assert!(read_bytes(&m, &LAYOUT_312, 0x1000, 3).is_err());
    }
}
