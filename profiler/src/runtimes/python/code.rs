//! Code objects read from a process: qualified name, file, first line and line table, cached
//! by address and checked against a value the walker records with each frame, so a code
//! object freed and another allocated at its address is never taken for the old one.

use std::{collections::HashMap, sync::Arc};

use profiler_common::python::{
    INSTR_PTR, LASTI_BYTES, LASTI_UNITS, NONE, PREV_INSTR, PythonOffsets,
};

use super::{
    lines,
    objects::{MAX_TABLE_BYTES, ObjectLayout, read_bytes, read_string},
};
use crate::runtimes::shared::memory::{Memory, ReadError};

/// What a frame needs of its code object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeInfo {
    /// `co_qualname` (3.11+), `co_name` before.
    pub name: Arc<str>,
    pub filename: Arc<str>,
    pub firstlineno: i32,
    /// `_co_firsttraceable` in code units (3.11+), 0 before.
    pub firsttraceable: i32,
    pub line_table: Vec<u8>,
    /// The value [`check_value`] gives for this object.
    pub check: u64,
}

/// One Python frame as a person reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyFrame {
    pub name: Arc<str>,
    pub filename: Arc<str>,
    /// `None` where the interpreter has no line either.
    pub line: Option<i32>,
}

/// The check value of a code object: the kernel walker's
/// [`py_check`](profiler_common::python::py_check) of its first line and `co_name` pointer,
/// both read where the object starts; a different code object at the same address almost
/// surely differs in one.
pub fn check_value(firstlineno: i32, name_ptr: u64) -> u64 {
    u64::from(profiler_common::python::py_check(firstlineno, name_ptr))
}

/// The byte offset of the instruction a frame is at, from the raw value the frame holds
/// (`f_lasti`, or the `prev_instr`/`instr_ptr` pointer) and its code object's address.
/// Negative before the first instruction.
pub fn byte_offset(offsets: &PythonOffsets, code_addr: u64, raw: u64) -> i64 {
    match offsets.instr_kind {
        LASTI_BYTES => i64::from(raw as u32 as i32),
        LASTI_UNITS => 2 * i64::from(raw as u32 as i32),
        PREV_INSTR | INSTR_PTR => {
            raw.wrapping_sub(code_addr + u64::from(offsets.code_adaptive)) as i64
        }
        _ => -1,
    }
}

/// Code objects read from one process, by address.
pub struct CodeCache {
    offsets: PythonOffsets,
    layout: ObjectLayout,
    /// Runtime address of `PyCode_Type`: an object at a frame's code address must be of it.
    code_type: u64,
    by_addr: HashMap<u64, Arc<CodeInfo>>,
}

impl CodeCache {
    pub fn new(offsets: PythonOffsets, code_type: u64) -> CodeCache {
        CodeCache {
            layout: ObjectLayout::from(&offsets),
            offsets,
            code_type,
            by_addr: HashMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }

    /// The code object at `addr`. With `check` (the value the walker recorded), a cached
    /// object with the same check is used without reading; otherwise the object's check is
    /// read first and the cache entry replaced when it differs.
    pub fn get(
        &mut self,
        mem: &impl Memory,
        addr: u64,
        check: Option<u64>,
    ) -> Result<Arc<CodeInfo>, ReadError> {
        if let (Some(check), Some(info)) = (check, self.by_addr.get(&addr))
            && info.check == check
        {
            return Ok(info.clone());
        }
        let current = self.read_check(mem, addr)?;
        if let Some(info) = self.by_addr.get(&addr)
            && info.check == current
        {
            return Ok(info.clone());
        }
        let info = Arc::new(self.read(mem, addr)?);
        self.by_addr.insert(addr, info.clone());
        Ok(info)
    }

    /// The frame of code `addr` at raw instruction value `raw`.
    pub fn frame(
        &mut self,
        mem: &impl Memory,
        addr: u64,
        raw: u64,
        check: Option<u64>,
    ) -> Result<PyFrame, ReadError> {
        let info = self.get(mem, addr, check)?;
        let offset = byte_offset(&self.offsets, addr, raw);
        Ok(PyFrame {
            name: info.name.clone(),
            filename: info.filename.clone(),
            line: line_at(&self.offsets, &info, offset),
        })
    }

    fn header(&self, mem: &impl Memory, addr: u64) -> Result<Vec<u8>, ReadError> {
        let o = &self.offsets;
        let end = [
            o.code_name,
            o.code_filename,
            o.code_qualname,
            o.code_linetable,
        ]
        .into_iter()
        .chain([o.code_firstlineno, o.code_firsttraceable, o.code_code])
        .filter(|&f| f != NONE)
        .max()
        .unwrap_or(0);
        let mut header = vec![0u8; usize::from(end) + 8];
        mem.read(addr, &mut header)?;
        let ty = ptr(&header, o.object_type);
        if ty != self.code_type {
            return Err(ReadError::invalid(
                "code object",
                addr,
                format!("type {ty:#x} is not PyCode_Type ({:#x})", self.code_type),
            ));
        }
        Ok(header)
    }

    fn read_check(&self, mem: &impl Memory, addr: u64) -> Result<u64, ReadError> {
        let h = self.header(mem, addr)?;
        let o = &self.offsets;
        Ok(check_value(
            int(&h, o.code_firstlineno),
            ptr(&h, o.code_name),
        ))
    }

    fn read(&self, mem: &impl Memory, addr: u64) -> Result<CodeInfo, ReadError> {
        let h = self.header(mem, addr)?;
        let o = &self.offsets;
        let name_field = if o.code_qualname != NONE {
            o.code_qualname
        } else {
            o.code_name
        };
        let firstlineno = int(&h, o.code_firstlineno);
        Ok(CodeInfo {
            name: read_string(mem, &self.layout, ptr(&h, name_field))?.into(),
            filename: read_string(mem, &self.layout, ptr(&h, o.code_filename))?.into(),
            firstlineno,
            firsttraceable: if o.code_firsttraceable == NONE {
                0
            } else {
                int(&h, o.code_firsttraceable)
            },
            line_table: read_bytes(
                mem,
                &self.layout,
                ptr(&h, o.code_linetable),
                MAX_TABLE_BYTES,
            )?,
            check: check_value(firstlineno, ptr(&h, o.code_name)),
        })
    }
}

/// The line of byte offset `offset` of `info`: before the first instruction, the first
/// line (as `PyCode_Addr2Line` answers for a negative offset).
pub fn line_at(offsets: &PythonOffsets, info: &CodeInfo, offset: i64) -> Option<i32> {
    if offset < 0 {
        return Some(info.firstlineno);
    }
    lines::line_of(
        offsets.line_table,
        &info.line_table,
        info.firstlineno,
        u32::try_from(offset).ok()?,
    )
}

fn ptr(header: &[u8], at: u16) -> u64 {
    let at = usize::from(at);
    u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"))
}

fn int(header: &[u8], at: u16) -> i32 {
    let at = usize::from(at);
    i32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::{
        python::{Version, offsets::for_version},
        shared::memory::FakeMemory,
    };

    const CODE_TYPE: u64 = 0x7000;

    fn string(text: &str) -> Vec<u8> {
        let mut s = vec![0u8; 40];
        s[16..24].copy_from_slice(&(text.len() as i64).to_le_bytes());
        s[32..36].copy_from_slice(&((1u32 << 2) | (1 << 5) | (1 << 6)).to_le_bytes());
        s.extend_from_slice(text.as_bytes());
        s
    }

    fn bytes(data: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 32];
        b[16..24].copy_from_slice(&(data.len() as i64).to_le_bytes());
        b.extend_from_slice(data);
        b
    }

    /// A 3.12 code object at `addr` named `name`, first line `first`.
    fn code(m: &mut FakeMemory, o: &PythonOffsets, addr: u64, name: (u64, &str), first: i32) {
        let mut c = vec![0u8; 256];
        let put = |c: &mut Vec<u8>, at: u16, v: u64| {
            c[usize::from(at)..usize::from(at) + 8].copy_from_slice(&v.to_le_bytes())
        };
        put(&mut c, o.object_type, CODE_TYPE);
        put(&mut c, o.code_name, name.0);
        put(&mut c, o.code_qualname, name.0);
        put(&mut c, o.code_filename, 0x9000);
        put(&mut c, o.code_linetable, 0xa000);
        c[usize::from(o.code_firstlineno)..][..4].copy_from_slice(&first.to_le_bytes());
        m.put(addr, &c);
        m.put(name.0, &string(name.1));
    }

    #[test]
    fn a_reused_address_is_read_again() {
        let o = for_version(Version::new(3, 12, 1)).unwrap();
        let mut m = FakeMemory::default();
        m.put(0x9000, &string("x.py"));
        // Two code units on the first line, then one on the next (one-line form, delta 1).
        m.put(
            0xa000,
            &bytes(&[0x80 | 10 << 3 | 1, 0, 0, 0x80 | 11 << 3, 0, 0]),
        );
        code(&mut m, &o, 0x1000, (0x2000, "f"), 5);
        let mut cache = CodeCache::new(o, CODE_TYPE);
        let f = cache.get(&m, 0x1000, None).unwrap();
        assert_eq!((&*f.name, &*f.filename, f.firstlineno), ("f", "x.py", 5));
        let check = f.check;
        assert_eq!(check, check_value(5, 0x2000));
        let base = 0x1000 + u64::from(o.code_adaptive);
        let frame = cache.frame(&m, 0x1000, base + 4, Some(check)).unwrap();
        assert_eq!(frame.line, Some(6));
        assert_eq!(
            cache.frame(&m, 0x1000, base - 2, Some(check)).unwrap().line,
            Some(5)
        );
        // The object is freed and another one is made at the same address.
        code(&mut m, &o, 0x1000, (0x3000, "g"), 9);
        assert_eq!(
            &*cache.get(&m, 0x1000, Some(check)).unwrap().name,
            "f",
            "trusted by check"
        );
        assert_eq!(
            &*cache.get(&m, 0x1000, None).unwrap().name,
            "g",
            "read again"
        );
        assert_eq!(cache.len(), 1);
        // Something that is not a code object.
        m.put(0x5000, &[0u8; 256]);
        assert!(matches!(
            cache.get(&m, 0x5000, None),
            Err(ReadError::Invalid { .. })
        ));
    }

    #[test]
    fn instruction_offsets_per_kind() {
        let v = |minor| for_version(Version::new(3, minor, 0)).unwrap();
        assert_eq!(byte_offset(&v(8), 0, 10), 10);
        assert_eq!(byte_offset(&v(8), 0, u64::from(u32::MAX)), -1);
        assert_eq!(byte_offset(&v(10), 0, 5), 10);
        let o = v(11);
        assert_eq!(
            byte_offset(&o, 0x1000, 0x1000 + u64::from(o.code_adaptive) + 6),
            6
        );
        assert_eq!(
            byte_offset(&o, 0x1000, 0x1000 + u64::from(o.code_adaptive) - 2),
            -2
        );
    }
}
