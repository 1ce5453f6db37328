//! Reading V8 heap objects from another process: tagged words, instance types, Smis, fixed
//! arrays and strings in each representation a name or a script can have.

use super::layout::Layout;
use crate::runtimes::shared::memory::{Memory, ReadError};

/// Longest string read, in UTF-16 units (a script's source may be long; names are short).
pub const MAX_STRING_UNITS: usize = 4 << 20;
/// Deepest cons/thin/sliced nesting followed: a cycle or garbage stops here.
const MAX_STRING_DEPTH: u32 = 64;
/// Longest fixed array read (line ends of a huge script).
pub const MAX_ARRAY_LEN: usize = 1 << 22;

/// The heap of one process as one V8 build lays it out.
pub struct Heap<'a, M: Memory + ?Sized> {
    pub mem: &'a M,
    pub layout: &'a Layout,
}

impl<'a, M: Memory + ?Sized> Heap<'a, M> {
    pub fn new(mem: &'a M, layout: &'a Layout) -> Self {
        Heap { mem, layout }
    }

    /// The word at `offset` in the object `tagged` points to.
    pub fn field(&self, tagged: u64, offset: u16) -> Result<u64, ReadError> {
        self.mem
            .read_u64(self.layout.untag(tagged) + u64::from(offset))
    }

    fn field_u16(&self, tagged: u64, offset: u16) -> Result<u16, ReadError> {
        let mut b = [0u8; 2];
        self.mem
            .read(self.layout.untag(tagged) + u64::from(offset), &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    fn field_i32(&self, tagged: u64, offset: u16) -> Result<i32, ReadError> {
        let mut b = [0u8; 4];
        self.mem
            .read(self.layout.untag(tagged) + u64::from(offset), &mut b)?;
        Ok(i32::from_le_bytes(b))
    }

    /// The instance type of the heap object `tagged` (through its map).
    pub fn instance_type(&self, tagged: u64) -> Result<u16, ReadError> {
        if !self.layout.is_heap_object(tagged) {
            return Err(ReadError::invalid(
                "heap object",
                tagged,
                "not a tagged pointer",
            ));
        }
        let map = self.field(tagged, self.layout.fields.heap_object_map)?;
        if !self.layout.is_heap_object(map) {
            return Err(ReadError::invalid("map", tagged, "not a tagged pointer"));
        }
        self.field_u16(map, self.layout.fields.map_instance_type)
    }

    /// `tagged` if it points to an object of type `ty`, else an error naming `what`.
    pub fn expect(&self, tagged: u64, ty: u16, what: &'static str) -> Result<u64, ReadError> {
        let got = self.instance_type(tagged)?;
        if got != ty {
            return Err(ReadError::invalid(
                what,
                tagged,
                format!("instance type {got}, not {ty}"),
            ));
        }
        Ok(tagged)
    }

    /// The Smi at `offset` of `tagged`.
    pub fn smi_field(&self, tagged: u64, offset: u16) -> Result<i64, ReadError> {
        let w = self.field(tagged, offset)?;
        self.layout
            .smi(w)
            .ok_or_else(|| ReadError::invalid("smi", tagged, format!("{w:#x} is not a Smi")))
    }

    /// The elements of a FixedArray as raw tagged words.
    pub fn fixed_array(&self, tagged: u64) -> Result<Vec<u64>, ReadError> {
        let f = &self.layout.fields;
        let len = self.smi_field(tagged, f.fixed_array_length)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= MAX_ARRAY_LEN)
            .ok_or_else(|| ReadError::invalid("fixed array", tagged, format!("length {len}")))?;
        let mut bytes = vec![0u8; len * 8];
        self.mem.read(
            self.layout.untag(tagged) + u64::from(f.fixed_array_data),
            &mut bytes,
        )?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// The bytes of a ByteArray (same header as a FixedArray: map, length).
    pub fn byte_array(&self, tagged: u64) -> Result<Vec<u8>, ReadError> {
        self.bytes_from(tagged, self.layout.fields.fixed_array_data)
    }

    /// The bytecodes of the BytecodeArray `tagged`.
    pub fn bytecodes(&self, tagged: u64) -> Result<Vec<u8>, ReadError> {
        self.bytes_from(tagged, self.layout.fields.bytecode_array_header)
    }

    /// The bytes of an array whose length is its FixedArrayBase length and whose data
    /// starts at `data`.
    fn bytes_from(&self, tagged: u64, data: u16) -> Result<Vec<u8>, ReadError> {
        let len = self.smi_field(tagged, self.layout.fields.fixed_array_length)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= MAX_ARRAY_LEN)
            .ok_or_else(|| ReadError::invalid("byte array", tagged, format!("length {len}")))?;
        let mut bytes = vec![0u8; len];
        self.mem
            .read(self.layout.untag(tagged) + u64::from(data), &mut bytes)?;
        Ok(bytes)
    }

    /// Whether `tagged` points to a string.
    pub fn is_string(&self, tagged: u64) -> bool {
        self.instance_type(tagged)
            .is_ok_and(|t| t < self.layout.types.first_nonstring)
    }

    /// The string `tagged` points to.
    pub fn string(&self, tagged: u64) -> Result<String, ReadError> {
        let mut units = Vec::new();
        self.string_units(tagged, 0, &mut units)?;
        Ok(String::from_utf16_lossy(&units))
    }

    /// Appends the UTF-16 units of the string `tagged` to `out`.
    fn string_units(&self, tagged: u64, depth: u32, out: &mut Vec<u16>) -> Result<(), ReadError> {
        if depth > MAX_STRING_DEPTH {
            return Err(ReadError::invalid("string", tagged, "nested too deep"));
        }
        let s = &self.layout.strings;
        let ty = self.instance_type(tagged)?;
        if ty >= self.layout.types.first_nonstring {
            return Err(ReadError::invalid(
                "string",
                tagged,
                format!("instance type {ty}"),
            ));
        }
        let len = self.field_i32(tagged, s.length)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| out.len() + n <= MAX_STRING_UNITS)
            .ok_or_else(|| ReadError::invalid("string", tagged, format!("length {len}")))?;
        let one_byte = ty & s.encoding_mask == s.one_byte_tag;
        match ty & s.representation_mask {
            r if r == s.seq_tag => {
                let base = self.layout.untag(tagged);
                if one_byte {
                    let mut b = vec![0u8; len];
                    self.mem
                        .read(base + u64::from(s.seq_one_byte_chars), &mut b)?;
                    out.extend(b.iter().map(|&c| u16::from(c)));
                } else {
                    let mut b = vec![0u8; len * 2];
                    self.mem
                        .read(base + u64::from(s.seq_two_byte_chars), &mut b)?;
                    out.extend(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])));
                }
            }
            r if r == s.cons_tag => {
                let start = out.len();
                let first = self.field(tagged, s.cons_first)?;
                self.string_units(first, depth + 1, out)?;
                let second = self.field(tagged, s.cons_second)?;
                self.string_units(second, depth + 1, out)?;
                if out.len() - start != len {
                    return Err(ReadError::invalid(
                        "cons string",
                        tagged,
                        format!("parts hold {} units, not {len}", out.len() - start),
                    ));
                }
            }
            r if r == s.thin_tag => {
                let actual = self.field(tagged, s.thin_actual)?;
                self.string_units(actual, depth + 1, out)?;
            }
            r if r == s.sliced_tag => {
                let parent = self.field(tagged, s.sliced_parent)?;
                let offset = self.smi_field(tagged, s.sliced_offset)?;
                let mut whole = Vec::new();
                self.string_units(parent, depth + 1, &mut whole)?;
                let from = usize::try_from(offset).unwrap_or(usize::MAX);
                let slice = whole.get(from..from.saturating_add(len)).ok_or_else(|| {
                    ReadError::invalid("sliced string", tagged, "slice outside its parent")
                })?;
                out.extend_from_slice(slice);
            }
            _ => {
                // External strings (Node's built-in module sources) live in the embedder's
                // memory behind a C++ resource object: not read.
                return Err(ReadError::invalid("string", tagged, "external string"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::{cell::RefCell, collections::BTreeMap};

    use super::*;
    use crate::runtimes::v8::testdata::layout_11_3;

    /// Synthetic memory: objects placed at chosen addresses.
    #[derive(Default)]
    pub struct FakeHeap {
        pub bytes: RefCell<BTreeMap<u64, u8>>,
    }

    impl FakeHeap {
        pub fn put(&self, addr: u64, data: &[u8]) {
            let mut m = self.bytes.borrow_mut();
            for (i, b) in data.iter().enumerate() {
                m.insert(addr + i as u64, *b);
            }
        }
        pub fn put_u64(&self, addr: u64, v: u64) {
            self.put(addr, &v.to_le_bytes());
        }
        /// A map at `addr` saying `ty`.
        pub fn map(&self, addr: u64, ty: u16) -> u64 {
            self.put(addr + 12, &ty.to_le_bytes());
            addr + 1
        }
        /// A string header (map, length) at `addr`; returns the tagged pointer.
        pub fn string_header(&self, addr: u64, map: u64, len: i32) -> u64 {
            self.put_u64(addr, map);
            self.put(addr + 12, &len.to_le_bytes());
            addr + 1
        }
    }

    impl Memory for FakeHeap {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
            let m = self.bytes.borrow();
            for (i, b) in buf.iter_mut().enumerate() {
                *b = *m
                    .get(&(addr + i as u64))
                    .ok_or_else(|| ReadError::invalid("fake", addr, "unmapped"))?;
            }
            Ok(())
        }
    }

    // Instance types as 11.3 numbers them (checked in layout's test against node's file).
    const SEQ_ONE: u16 = 8; // one-byte (8), sequential (0)
    const SEQ_TWO: u16 = 0;
    const CONS_ONE: u16 = 8 | 1;
    const THIN_ONE: u16 = 8 | 5;
    const SLICED_TWO: u16 = 3;
    const EXTERNAL_ONE: u16 = 8 | 2;

    fn one_byte(h: &FakeHeap, addr: u64, map: u64, s: &str) -> u64 {
        let t = h.string_header(addr, map, s.len() as i32);
        h.put(addr + 16, s.as_bytes());
        t
    }

    #[test]
    fn every_representation() {
        let l = layout_11_3();
        let h = FakeHeap::default();
        let seq_one = h.map(0x1000, SEQ_ONE);
        let seq_two = h.map(0x1100, SEQ_TWO);
        let cons = h.map(0x1200, CONS_ONE);
        let thin = h.map(0x1300, THIN_ONE);
        let sliced = h.map(0x1400, SLICED_TWO);
        let external = h.map(0x1500, EXTERNAL_ONE);
        let heap = Heap::new(&h, &l);

        let a = one_byte(&h, 0x2000, seq_one, "inner");
        assert_eq!(heap.string(a).unwrap(), "inner");

        let units: Vec<u16> = "file:///tmp/é€.js".encode_utf16().collect();
        let b = h.string_header(0x3000, seq_two, units.len() as i32);
        let raw: Vec<u8> = units.iter().flat_map(|u| u.to_le_bytes()).collect();
        h.put(0x3000 + 16, &raw);
        assert_eq!(heap.string(b).unwrap(), "file:///tmp/é€.js");

        let c = h.string_header(0x4000, cons, 5 + units.len() as i32);
        h.put_u64(0x4000 + 16, a);
        h.put_u64(0x4000 + 24, b);
        assert_eq!(heap.string(c).unwrap(), "innerfile:///tmp/é€.js");

        let t = h.string_header(0x5000, thin, 5);
        h.put_u64(0x5000 + 16, a);
        assert_eq!(heap.string(t).unwrap(), "inner");

        let s = h.string_header(0x6000, sliced, 4);
        h.put_u64(0x6000 + 16, b);
        h.put_u64(0x6000 + 24, 12u64 << 32);
        assert_eq!(heap.string(s).unwrap(), "é€.j");

        let e = h.string_header(0x7000, external, 3);
        let err = heap.string(e).unwrap_err().to_string();
        assert!(err.contains("external string"), "{err}");

        // A cons string whose parts disagree with its length is refused, not trusted.
        let bad = h.string_header(0x8000, cons, 99);
        h.put_u64(0x8000 + 16, a);
        h.put_u64(0x8000 + 24, a);
        assert!(heap.string(bad).is_err());

        // A cons cycle stops at the depth bound.
        let cyc = h.string_header(0x9000, cons, 10);
        h.put_u64(0x9000 + 16, cyc);
        h.put_u64(0x9000 + 24, cyc);
        assert!(heap.string(cyc).is_err());

        // Not a string at all.
        let sfi_map = h.map(0xa000, 262);
        let sfi = h.string_header(0xb000, sfi_map, 0);
        assert!(!heap.is_string(sfi));
        assert!(heap.string(sfi).is_err());
    }
}
