//! Ruby objects read from a process: strings, array elements and method names (IDs through
//! the VM's symbol table), each bounded and type-checked, so that a stale or
//! wrong address gives an error, never a long read or a garbage name.

use super::layout::{Layout, SYMBOLS_IDS, SYMBOLS_LAST_ID, StringLayout};
use crate::runtimes::shared::memory::{Memory, ReadError};

/// Longest string read (labels, paths, class names); longer ones are cut there.
pub const MAX_STRING: u64 = 4096;

/// `RBasic.flags & T_MASK`: an object's type.
pub const T_MASK: u64 = 0x1f;
pub const T_CLASS: u64 = 0x02;
pub const T_MODULE: u64 = 0x03;
const T_STRING: u64 = 0x05;
const T_ARRAY: u64 = 0x07;
pub const T_ICLASS: u64 = 0x1c;
/// `RSTRING_NOEMBED` and `RARRAY_EMBED_FLAG`: both `FL_USER1` in every release we read.
const STRING_NOEMBED: u64 = 1 << 13;
const ARRAY_EMBED: u64 = 1 << 13;
/// Up to 3.1 an embedded string's length is `(flags >> 14) & 0x1f`.
const STRING_EMBED_LEN_SHIFT: u32 = 14;
const STRING_EMBED_LEN_MASK: u64 = 0x1f;
const ARRAY_EMBED_LEN_SHIFT: u32 = 15;
/// `ID_ENTRY_UNIT` and `ID_ENTRY_SIZE` (symbol.c): the symbol table's ids are arrays of 512
/// (string, symbol) pairs.
const ID_ENTRY_UNIT: u64 = 512;
const ID_ENTRY_SIZE: u64 = 2;
/// `RUBY_ID_SCOPE_SHIFT`.
const ID_SCOPE_SHIFT: u32 = 4;

/// Whether a VALUE is a heap object (not nil, false, a Fixnum or another immediate):
/// objects are 8-byte aligned addresses, immediates are tagged or small.
pub fn is_object(v: u64) -> bool {
    v & 7 == 0 && v > 0xff
}

fn flags_of(mem: &dyn Memory, addr: u64, want: u64, what: &'static str) -> Result<u64, ReadError> {
    if !is_object(addr) {
        return Err(ReadError::invalid(what, addr, "not an object"));
    }
    let flags = mem.read_u64(addr)?;
    if flags & T_MASK != want {
        return Err(ReadError::invalid(
            what,
            addr,
            format!("type {:#x}, not {want:#x}", flags & T_MASK),
        ));
    }
    Ok(flags)
}

/// A `String`'s characters (at most [`MAX_STRING`] bytes; invalid UTF-8 replaced).
pub fn read_string(mem: &dyn Memory, layout: &Layout, addr: u64) -> Result<String, ReadError> {
    let flags = flags_of(mem, addr, T_STRING, "String")?;
    let embedded = flags & STRING_NOEMBED == 0;
    let (len, data) = match layout.string {
        StringLayout::FlagsLen if embedded => (
            (flags >> STRING_EMBED_LEN_SHIFT) & STRING_EMBED_LEN_MASK,
            addr + 16,
        ),
        StringLayout::FlagsLen => (mem.read_u64(addr + 16)?, mem.read_u64(addr + 24)?),
        StringLayout::FieldLen if embedded => (mem.read_u64(addr + 16)?, addr + 24),
        StringLayout::FieldLen => (mem.read_u64(addr + 16)?, mem.read_u64(addr + 24)?),
    };
    if len as i64 <= 0 {
        return Ok(String::new());
    }
    let mut bytes = vec![0u8; len.min(MAX_STRING) as usize];
    mem.read(data, &mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Element `index` of an `Array`.
pub fn array_entry(
    mem: &dyn Memory,
    layout: &Layout,
    addr: u64,
    index: u64,
) -> Result<u64, ReadError> {
    let flags = flags_of(mem, addr, T_ARRAY, "Array")?;
    let (len, data) = if flags & ARRAY_EMBED != 0 {
        (
            (flags >> ARRAY_EMBED_LEN_SHIFT) & layout.array_embed_len_mask,
            addr + 16,
        )
    } else {
        (mem.read_u64(addr + 16)?, mem.read_u64(addr + 32)?)
    };
    if index >= len {
        return Err(ReadError::invalid(
            "Array",
            addr,
            format!("index {index} of {len}"),
        ));
    }
    mem.read_u64(data + 8 * index)
}

/// An iseq's path: `pathobj` is the path `String`, or a `[path, realpath]` `Array`.
pub fn read_path(mem: &dyn Memory, layout: &Layout, pathobj: u64) -> Result<String, ReadError> {
    if !is_object(pathobj) {
        return Err(ReadError::invalid("pathobj", pathobj, "not an object"));
    }
    let flags = mem.read_u64(pathobj)?;
    if flags & T_MASK == T_ARRAY {
        let path = array_entry(mem, layout, pathobj, 0)?;
        read_string(mem, layout, path)
    } else {
        read_string(mem, layout, pathobj)
    }
}

/// The name of an ID, as `rb_id2str` finds it: its serial (`id >> 4` above `tLAST_OP_ID`,
/// the ID itself for operators) indexes the symbol table's `ids`, an array of 512-pair
/// arrays whose first element of each pair is the name.
pub fn id_name(
    mem: &dyn Memory,
    layout: &Layout,
    symbols: u64,
    id: u64,
) -> Result<String, ReadError> {
    let serial = if id > layout.last_op_id {
        id >> ID_SCOPE_SHIFT
    } else {
        id
    };
    let mut last = [0u8; 4];
    mem.read(symbols + SYMBOLS_LAST_ID, &mut last)?;
    let last = u64::from(u32::from_le_bytes(last));
    if serial == 0 || serial > last {
        return Err(ReadError::invalid(
            "ID",
            id,
            format!("serial {serial} not in 1..={last}"),
        ));
    }
    let ids = mem.read_u64(symbols + SYMBOLS_IDS)?;
    let unit = array_entry(mem, layout, ids, serial / ID_ENTRY_UNIT)?;
    let name = array_entry(mem, layout, unit, (serial % ID_ENTRY_UNIT) * ID_ENTRY_SIZE)?;
    read_string(mem, layout, name)
}

#[cfg(test)]
pub(crate) mod fake {
    //! Ruby objects laid out in fake memory, for the tests of this module and of naming.

    use super::*;
    use crate::runtimes::shared::memory::FakeMemory;

    /// Allocates objects one after another from `next`.
    pub struct Heap {
        pub mem: FakeMemory,
        pub layout: Layout,
        next: u64,
    }

    impl Heap {
        pub fn new(layout: Layout) -> Heap {
            Heap {
                mem: FakeMemory::default(),
                layout,
                next: 0x10_0000,
            }
        }

        /// Puts `bytes` somewhere; returns where.
        pub fn put(&mut self, bytes: &[u8]) -> u64 {
            let at = self.next;
            self.mem.put(at, bytes);
            self.next += (bytes.len() as u64).max(8).next_multiple_of(64) + 64;
            at
        }

        pub fn words(&mut self, words: &[u64]) -> u64 {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            self.put(&bytes)
        }

        /// A `String`, embedded when short (as Ruby does), on the heap otherwise.
        pub fn string(&mut self, s: &str) -> u64 {
            let l = &self.layout;
            match l.string {
                StringLayout::FlagsLen if s.len() < 24 => {
                    let flags = T_STRING | ((s.len() as u64) << STRING_EMBED_LEN_SHIFT);
                    let mut b = flags.to_le_bytes().to_vec();
                    b.extend_from_slice(&[0; 8]);
                    b.extend_from_slice(s.as_bytes());
                    b.resize(40, 0);
                    self.put(&b)
                }
                StringLayout::FieldLen if s.len() < 40 => {
                    let mut b = T_STRING.to_le_bytes().to_vec();
                    b.extend_from_slice(&[0; 8]);
                    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
                    b.extend_from_slice(s.as_bytes());
                    b.resize(64, 0);
                    self.put(&b)
                }
                _ => {
                    let data = self.put(s.as_bytes());
                    self.words(&[T_STRING | STRING_NOEMBED, 0, s.len() as u64, data, 0])
                }
            }
        }

        /// An `Array`, embedded when it fits in 3 elements, on the heap otherwise.
        pub fn array(&mut self, items: &[u64]) -> u64 {
            if items.len() <= 3 {
                let mut w = vec![
                    T_ARRAY | ARRAY_EMBED | ((items.len() as u64) << ARRAY_EMBED_LEN_SHIFT),
                    0,
                ];
                w.extend_from_slice(items);
                w.resize(5, 0);
                self.words(&w)
            } else {
                let data = self.words(items);
                self.words(&[T_ARRAY, 0, items.len() as u64, 0, data])
            }
        }

        /// A symbol table holding `names` at serials `first..`.
        pub fn symbols(&mut self, first: u64, names: &[&str]) -> u64 {
            let last = first + names.len() as u64 - 1;
            let units = last / ID_ENTRY_UNIT + 1;
            let mut unit_arrays = Vec::new();
            for u in 0..units {
                let mut pairs = vec![0x8u64; (ID_ENTRY_UNIT * ID_ENTRY_SIZE) as usize];
                for (i, n) in names.iter().enumerate() {
                    let serial = first + i as u64;
                    if serial / ID_ENTRY_UNIT == u {
                        let s = self.string(n);
                        pairs[((serial % ID_ENTRY_UNIT) * ID_ENTRY_SIZE) as usize] = s;
                    }
                }
                unit_arrays.push(self.array(&pairs));
            }
            let ids = self.array(&unit_arrays);
            self.words(&[last, 0, ids, 0])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{fake::Heap, *};
    use crate::runtimes::ruby::layout::{Version, for_version};

    fn layouts() -> Vec<Layout> {
        [(2, 7), (3, 1), (3, 2), (3, 4)]
            .into_iter()
            .map(|(a, b)| for_version(Version::new(a, b, 0)).unwrap())
            .collect()
    }

    #[test]
    fn strings_embedded_and_on_the_heap() {
        for layout in layouts() {
            let mut h = Heap::new(layout);
            let long = "x".repeat(100);
            let (a, b, c) = (h.string("<main>"), h.string(&long), h.string(""));
            assert_eq!(read_string(&h.mem, &layout, a).unwrap(), "<main>");
            assert_eq!(read_string(&h.mem, &layout, b).unwrap(), long);
            assert_eq!(read_string(&h.mem, &layout, c).unwrap(), "");
            let arr = h.array(&[a]);
            assert!(read_string(&h.mem, &layout, arr).is_err());
            assert!(read_string(&h.mem, &layout, 0x8).is_err());
        }
    }

    #[test]
    fn paths_are_strings_or_path_realpath_pairs() {
        for layout in layouts() {
            let mut h = Heap::new(layout);
            let (p, r) = (h.string("t.rb"), h.string("/home/t.rb"));
            let pair = h.array(&[p, r]);
            assert_eq!(read_path(&h.mem, &layout, p).unwrap(), "t.rb");
            assert_eq!(read_path(&h.mem, &layout, pair).unwrap(), "t.rb");
            let big: Vec<u64> = (0..5).map(|_| p).collect();
            let big = h.array(&big);
            assert_eq!(array_entry(&h.mem, &layout, big, 4).unwrap(), p);
            assert!(array_entry(&h.mem, &layout, big, 5).is_err());
        }
    }

    #[test]
    fn ids_through_the_symbol_table() {
        for layout in layouts() {
            let mut h = Heap::new(layout);
            // Serials 1000..1030 cross the first 512-entry unit.
            let names: Vec<String> = (0..30).map(|i| format!("m{i}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let syms = h.symbols(500, &refs);
            let id = |serial: u64| (serial << ID_SCOPE_SHIFT) | 1;
            assert_eq!(id_name(&h.mem, &layout, syms, id(500)).unwrap(), "m0");
            assert_eq!(id_name(&h.mem, &layout, syms, id(515)).unwrap(), "m15");
            assert!(id_name(&h.mem, &layout, syms, id(530)).is_err());
        }
    }
}
