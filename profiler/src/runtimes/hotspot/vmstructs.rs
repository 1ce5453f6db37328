//! HotSpot's own introspection tables, as the Serviceability Agent reads them: libjvm exports
//! (in `.dynsym`) pointers to four tables (`gHotSpotVMStructs`, `...Types`, `...IntConstants`,
//! `...LongConstants`) and 20 words saying where each entry's parts are. The words and every
//! non-static field offset are 0 in the file (set by libjvm's static initialisers), so the
//! tables are read from the live process, never from the file.

use std::collections::HashMap;

use crate::runtimes::shared::memory::{Memory, ReadError, read_cstr};

/// The exported pointers to the tables.
pub const TABLES: [&str; 4] = [
    "gHotSpotVMStructs",
    "gHotSpotVMTypes",
    "gHotSpotVMIntConstants",
    "gHotSpotVMLongConstants",
];

/// The exported words saying where an entry's parts are and how long an entry is.
pub const ENTRY_WORDS: [&str; 20] = [
    "gHotSpotVMStructEntryTypeNameOffset",
    "gHotSpotVMStructEntryFieldNameOffset",
    "gHotSpotVMStructEntryTypeStringOffset",
    "gHotSpotVMStructEntryIsStaticOffset",
    "gHotSpotVMStructEntryOffsetOffset",
    "gHotSpotVMStructEntryAddressOffset",
    "gHotSpotVMStructEntryArrayStride",
    "gHotSpotVMTypeEntryTypeNameOffset",
    "gHotSpotVMTypeEntrySuperclassNameOffset",
    "gHotSpotVMTypeEntryIsOopTypeOffset",
    "gHotSpotVMTypeEntryIsIntegerTypeOffset",
    "gHotSpotVMTypeEntryIsUnsignedOffset",
    "gHotSpotVMTypeEntrySizeOffset",
    "gHotSpotVMTypeEntryArrayStride",
    "gHotSpotVMIntConstantEntryNameOffset",
    "gHotSpotVMIntConstantEntryValueOffset",
    "gHotSpotVMIntConstantEntryArrayStride",
    "gHotSpotVMLongConstantEntryNameOffset",
    "gHotSpotVMLongConstantEntryValueOffset",
    "gHotSpotVMLongConstantEntryArrayStride",
];

/// Entries read from one table before it is taken for garbage (17 has 788 structs).
const MAX_ENTRIES: usize = 20_000;
/// Longest type, field or constant name read.
const MAX_NAME: usize = 256;
/// Largest entry stride believed (48 on x86_64).
const MAX_STRIDE: u64 = 256;

/// Why a process's VMStructs cannot be read (one line for the user).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TablesError {
    #[error("libjvm does not export {0} (not a HotSpot with VMStructs)")]
    NoExport(&'static str),
    #[error("{0} is 0: libjvm's initialisers have not filled VMStructs yet")]
    NotFilled(&'static str),
    #[error("{what} is {value}: not a VMStructs layout we read")]
    Strange { what: &'static str, value: u64 },
    #[error("{table} has more than {MAX_ENTRIES} entries (no end marker)")]
    TooLong { table: &'static str },
}

/// Runtime addresses (load bias applied) of libjvm's exported table symbols.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exports(pub HashMap<&'static str, u64>);

impl Exports {
    fn get(&self, name: &'static str) -> Result<u64, TablesError> {
        self.0.get(name).copied().ok_or(TablesError::NoExport(name))
    }
}

/// One field of a VMStructs entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The C++ type as VMStructs spells it (`int`, `u2`, `Method*`, `int16_t`, ...).
    pub type_string: String,
    /// A static field's address, or a member's offset in its type.
    pub is_static: bool,
    pub offset_or_address: u64,
}

/// The four tables, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmStructs {
    /// (type, field) → field.
    pub fields: HashMap<(String, String), Field>,
    /// Type name → `sizeof`.
    pub types: HashMap<String, u64>,
    pub ints: HashMap<String, i32>,
    pub longs: HashMap<String, u64>,
}

/// Either side of a table read going wrong: the memory, or what it holds.
#[derive(Debug, thiserror::Error)]
pub enum ReadTablesError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Tables(#[from] TablesError),
}

impl VmStructs {
    /// Reads the four tables from a live process through the exported symbols.
    pub fn read<M: Memory + ?Sized>(mem: &M, exports: &Exports) -> Result<Self, ReadTablesError> {
        let word = |name: &'static str| -> Result<u64, ReadTablesError> {
            Ok(mem.read_u64(exports.get(name)?)?)
        };
        // Each layout word's value; a stride of 0 means the initialisers have not run.
        let mut w = HashMap::new();
        for name in ENTRY_WORDS {
            let v = word(name)?;
            if name.ends_with("Stride") && v == 0 {
                return Err(TablesError::NotFilled(name).into());
            }
            if v > MAX_STRIDE {
                return Err(TablesError::Strange {
                    what: name,
                    value: v,
                }
                .into());
            }
            w.insert(name, v);
        }
        let at = |name: &str| w[name];
        let mut out = VmStructs::default();

        let base = word("gHotSpotVMStructs")?;
        let stride = at("gHotSpotVMStructEntryArrayStride");
        for_each_entry(mem, base, stride, "gHotSpotVMStructs", |e| {
            let Some(type_name) = e.str(at("gHotSpotVMStructEntryTypeNameOffset"))? else {
                return Ok(false);
            };
            let field = e
                .str(at("gHotSpotVMStructEntryFieldNameOffset"))?
                .unwrap_or_default();
            let type_string = e
                .str(at("gHotSpotVMStructEntryTypeStringOffset"))?
                .unwrap_or_default();
            let is_static = e.u32(at("gHotSpotVMStructEntryIsStaticOffset")) != 0;
            let offset_or_address = if is_static {
                e.u64(at("gHotSpotVMStructEntryAddressOffset"))
            } else {
                e.u64(at("gHotSpotVMStructEntryOffsetOffset"))
            };
            out.fields.insert(
                (type_name, field),
                Field {
                    type_string,
                    is_static,
                    offset_or_address,
                },
            );
            Ok(true)
        })?;

        let base = word("gHotSpotVMTypes")?;
        let stride = at("gHotSpotVMTypeEntryArrayStride");
        for_each_entry(mem, base, stride, "gHotSpotVMTypes", |e| {
            let Some(name) = e.str(at("gHotSpotVMTypeEntryTypeNameOffset"))? else {
                return Ok(false);
            };
            out.types
                .insert(name, e.u64(at("gHotSpotVMTypeEntrySizeOffset")));
            Ok(true)
        })?;

        let base = word("gHotSpotVMIntConstants")?;
        let stride = at("gHotSpotVMIntConstantEntryArrayStride");
        for_each_entry(mem, base, stride, "gHotSpotVMIntConstants", |e| {
            let Some(name) = e.str(at("gHotSpotVMIntConstantEntryNameOffset"))? else {
                return Ok(false);
            };
            let v = e.u32(at("gHotSpotVMIntConstantEntryValueOffset")) as i32;
            out.ints.insert(name, v);
            Ok(true)
        })?;

        let base = word("gHotSpotVMLongConstants")?;
        let stride = at("gHotSpotVMLongConstantEntryArrayStride");
        for_each_entry(mem, base, stride, "gHotSpotVMLongConstants", |e| {
            let Some(name) = e.str(at("gHotSpotVMLongConstantEntryNameOffset"))? else {
                return Ok(false);
            };
            out.longs
                .insert(name, e.u64(at("gHotSpotVMLongConstantEntryValueOffset")));
            Ok(true)
        })?;
        Ok(out)
    }

    pub fn field(&self, ty: &str, name: &str) -> Option<&Field> {
        self.fields.get(&(ty.to_string(), name.to_string()))
    }
}

/// One entry's bytes, and the process to follow its string pointers in.
struct Entry<'a, M: Memory + ?Sized> {
    mem: &'a M,
    bytes: Vec<u8>,
}

impl<M: Memory + ?Sized> Entry<'_, M> {
    fn u64(&self, at: u64) -> u64 {
        let at = at as usize;
        self.bytes
            .get(at..at + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn u32(&self, at: u64) -> u32 {
        let at = at as usize;
        self.bytes
            .get(at..at + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    /// The C string a pointer at `at` points to; `None` for a null pointer (a table's end).
    fn str(&self, at: u64) -> Result<Option<String>, ReadError> {
        match self.u64(at) {
            0 => Ok(None),
            p => read_cstr(self.mem, p, MAX_NAME).map(Some),
        }
    }
}

/// Calls `each` on the entries from `base` until it returns false (the null entry).
fn for_each_entry<M: Memory + ?Sized>(
    mem: &M,
    base: u64,
    stride: u64,
    table: &'static str,
    mut each: impl FnMut(&Entry<'_, M>) -> Result<bool, ReadError>,
) -> Result<(), ReadTablesError> {
    if base == 0 {
        return Err(TablesError::NotFilled(table).into());
    }
    for i in 0..MAX_ENTRIES as u64 {
        let mut bytes = vec![0u8; stride as usize];
        mem.read(base + i * stride, &mut bytes)?;
        if !each(&Entry { mem, bytes })? {
            return Ok(());
        }
    }
    Err(TablesError::TooLong { table }.into())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::runtimes::shared::memory::FakeMemory;

    /// Builds synthetic tables in the x86_64 layout (struct entries of 48 bytes, types of
    /// 40, constants of 16) in fake memory, with the exported symbols pointing at them.
    pub struct Builder {
        pub mem: FakeMemory,
        pub exports: Exports,
        strings: Vec<u8>,
        structs: Vec<u8>,
        types: Vec<u8>,
        ints: Vec<u8>,
        longs: Vec<u8>,
    }

    const STRINGS: u64 = 0x10_0000;
    const STRUCTS: u64 = 0x20_0000;
    const TYPES: u64 = 0x30_0000;
    const INTS: u64 = 0x40_0000;
    const LONGS: u64 = 0x50_0000;
    const WORDS: u64 = 0x60_0000;

    impl Builder {
        pub fn new() -> Builder {
            Builder {
                mem: FakeMemory::default(),
                exports: Exports::default(),
                strings: vec![0],
                structs: Vec::new(),
                types: Vec::new(),
                ints: Vec::new(),
                longs: Vec::new(),
            }
        }

        fn string(&mut self, s: &str) -> u64 {
            let at = STRINGS + self.strings.len() as u64;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            at
        }

        pub fn field(&mut self, ty: &str, name: &str, type_string: &str, offset: u64) {
            self.entry(ty, name, type_string, false, offset);
        }

        pub fn static_field(&mut self, ty: &str, name: &str, type_string: &str, addr: u64) {
            self.entry(ty, name, type_string, true, addr);
        }

        fn entry(&mut self, ty: &str, name: &str, type_string: &str, is_static: bool, v: u64) {
            let mut e = [0u8; 48];
            e[0..8].copy_from_slice(&self.string(ty).to_le_bytes());
            e[8..16].copy_from_slice(&self.string(name).to_le_bytes());
            e[16..24].copy_from_slice(&self.string(type_string).to_le_bytes());
            e[24..28].copy_from_slice(&u32::from(is_static).to_le_bytes());
            let at = if is_static { 40 } else { 32 };
            e[at..at + 8].copy_from_slice(&v.to_le_bytes());
            self.structs.extend_from_slice(&e);
        }

        pub fn size(&mut self, ty: &str, size: u64) {
            let mut e = [0u8; 40];
            e[0..8].copy_from_slice(&self.string(ty).to_le_bytes());
            e[32..40].copy_from_slice(&size.to_le_bytes());
            self.types.extend_from_slice(&e);
        }

        pub fn int(&mut self, name: &str, v: i32) {
            let mut e = [0u8; 16];
            e[0..8].copy_from_slice(&self.string(name).to_le_bytes());
            e[8..12].copy_from_slice(&v.to_le_bytes());
            self.ints.extend_from_slice(&e);
        }

        pub fn long(&mut self, name: &str, v: u64) {
            let mut e = [0u8; 16];
            e[0..8].copy_from_slice(&self.string(name).to_le_bytes());
            e[8..16].copy_from_slice(&v.to_le_bytes());
            self.longs.extend_from_slice(&e);
        }

        /// Writes everything (with the end entries) into memory.
        pub fn finish(mut self) -> (FakeMemory, Exports) {
            let words: [u64; 20] = [
                0, 8, 16, 24, 32, 40, 48, 0, 8, 16, 20, 24, 32, 40, 0, 8, 16, 0, 8, 16,
            ];
            let mut wbytes = Vec::new();
            for (i, (name, v)) in ENTRY_WORDS.iter().zip(words).enumerate() {
                self.exports.0.insert(name, WORDS + 8 * i as u64);
                wbytes.extend_from_slice(&v.to_le_bytes());
            }
            let bases = [STRUCTS, TYPES, INTS, LONGS];
            for (i, (name, base)) in TABLES.iter().zip(bases).enumerate() {
                self.exports.0.insert(name, WORDS + 0x1000 + 8 * i as u64);
                wbytes.resize(0x1000 + 8 * i, 0);
                wbytes.extend_from_slice(&base.to_le_bytes());
            }
            self.structs.extend_from_slice(&[0; 48]);
            self.types.extend_from_slice(&[0; 40]);
            self.ints.extend_from_slice(&[0; 16]);
            self.longs.extend_from_slice(&[0; 16]);
            // Whole pages, as a process maps them (C strings are read a page at a time).
            self.strings
                .resize(self.strings.len().next_multiple_of(0x1000), 0);
            self.mem.put(STRINGS, &self.strings);
            self.mem.put(STRUCTS, &self.structs);
            self.mem.put(TYPES, &self.types);
            self.mem.put(INTS, &self.ints);
            self.mem.put(LONGS, &self.longs);
            self.mem.put(WORDS, &wbytes);
            (self.mem, self.exports)
        }
    }

    #[test]
    fn reads_every_table() {
        let mut b = Builder::new();
        b.field("CodeBlob", "_frame_size", "int", 28);
        b.static_field(
            "CodeCache",
            "_heaps",
            "GrowableArray<CodeHeap*>*",
            0x7f00_1234_5600,
        );
        b.size("ConstMethod", 48);
        b.int("frame::interpreter_frame_sender_sp_offset", -1);
        b.long("markWord::hash_mask", 0x7fff_ffff);
        let (mem, exports) = b.finish();
        let t = VmStructs::read(&mem, &exports).expect("read");
        assert_eq!(t.fields.len(), 2);
        let f = t.field("CodeBlob", "_frame_size").expect("field");
        assert_eq!(
            (f.type_string.as_str(), f.is_static, f.offset_or_address),
            ("int", false, 28)
        );
        let s = t.field("CodeCache", "_heaps").expect("static");
        assert!(s.is_static);
        assert_eq!(s.offset_or_address, 0x7f00_1234_5600);
        assert_eq!(t.types["ConstMethod"], 48);
        assert_eq!(t.ints["frame::interpreter_frame_sender_sp_offset"], -1);
        assert_eq!(t.longs["markWord::hash_mask"], 0x7fff_ffff);
    }

    #[test]
    fn unfilled_or_missing_tables_say_so() {
        let (mut mem, exports) = Builder::new().finish();
        let stride = exports.0["gHotSpotVMStructEntryArrayStride"];
        mem.put(stride, &0u64.to_le_bytes());
        match VmStructs::read(&mem, &exports) {
            Err(ReadTablesError::Tables(e)) => assert_eq!(
                e.to_string(),
                "gHotSpotVMStructEntryArrayStride is 0: libjvm's initialisers have not filled VMStructs yet"
            ),
            other => panic!("{other:?}"),
        }
        let (mem, mut exports) = Builder::new().finish();
        exports.0.remove("gHotSpotVMTypes");
        match VmStructs::read(&mem, &exports) {
            Err(ReadTablesError::Tables(e)) => {
                assert_eq!(e, TablesError::NoExport("gHotSpotVMTypes"))
            }
            other => panic!("{other:?}"),
        }
    }
}
