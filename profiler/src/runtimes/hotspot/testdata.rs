//! VMStructs tables as JDK 17.0.15 (Debian) and 25.0.3 (Temurin) fill them on x86_64, with
//! only the entries the layout reads (values from the live JVMs; the integration test checks
//! the live JVMs' key offsets against the same values; statics get made-up addresses), and
//! a synthetic process's metaspace and nmethod for naming's tests.

use super::{
    layout::Layout,
    stream::tests::{put_int, put_uint},
    version::JvmVersion,
    vmstructs::{Field, VmStructs},
};
use crate::runtimes::shared::memory::FakeMemory;

fn tables(
    fields: &[(&str, &str, &str, u64)],
    statics: &[(&str, &str, &str)],
    sizes: &[(&str, u64)],
    ints: &[(&str, i32)],
) -> VmStructs {
    let mut t = VmStructs::default();
    for (ty, f, ts, off) in fields {
        t.fields.insert(
            (ty.to_string(), f.to_string()),
            Field {
                type_string: ts.to_string(),
                is_static: false,
                offset_or_address: *off,
            },
        );
    }
    for (i, (ty, f, ts)) in statics.iter().enumerate() {
        t.fields.insert(
            (ty.to_string(), f.to_string()),
            Field {
                type_string: ts.to_string(),
                is_static: true,
                offset_or_address: 0x7f00_0000_1000 + 8 * i as u64,
            },
        );
    }
    t.types = sizes.iter().map(|(n, s)| (n.to_string(), *s)).collect();
    t.ints = ints.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    t
}

const STATICS: &[(&str, &str, &str)] = &[
    ("CodeCache", "_heaps", "GrowableArray<CodeHeap*>*"),
    ("CodeCache", "_low_bound", "address"),
    ("CodeCache", "_high_bound", "address"),
    ("AbstractInterpreter", "_code", "StubQueue*"),
    ("StubRoutines", "_call_stub_return_address", "address"),
    ("Abstract_VM_Version", "_vm_major_version", "int"),
];

const COMMON: &[(&str, &str, &str, u64)] = &[
    ("GrowableArrayBase", "_len", "int", 0),
    ("GrowableArray<int>", "_data", "int*", 8),
    ("VirtualSpace", "_low_boundary", "char*", 0),
    ("VirtualSpace", "_high_boundary", "char*", 8),
    ("VirtualSpace", "_high", "char*", 24),
    ("PcDesc", "_pc_offset", "int", 0),
    ("PcDesc", "_scope_decode_offset", "int", 4),
    ("Method", "_constMethod", "ConstMethod*", 8),
    ("ConstMethod", "_constants", "ConstantPool*", 8),
    ("ConstantPool", "_pool_holder", "InstanceKlass*", 24),
    ("ConstantPool", "_source_file_name_index", "u2", 54),
    ("Klass", "_name", "Symbol*", 24),
    ("Symbol", "_length", "u2", 4),
    ("Symbol", "_body[0]", "u1", 6),
    ("StubQueue", "_stub_buffer", "address", 8),
    ("StubQueue", "_buffer_limit", "int", 20),
];

const FRAME: &[(&str, i32)] = &[
    ("frame::interpreter_frame_sender_sp_offset", -1),
    ("frame::interpreter_frame_last_sp_offset", -2),
];

/// The version of the tables' JDKs, `major`.0.15+6.
pub fn version(major: u32) -> JvmVersion {
    JvmVersion {
        major,
        minor: 0,
        security: 15,
        build: 6,
        release: format!("{major}.0.15+6"),
    }
}

/// The layout [`jdk17_tables`] give.
pub fn layout17() -> Layout {
    Layout::from_tables(&jdk17_tables(), version(17)).expect("layout")
}

/// The layout [`jdk25_tables`] give.
pub fn layout25() -> Layout {
    Layout::from_tables(&jdk25_tables(), version(25)).expect("layout")
}

pub fn jdk17_tables() -> VmStructs {
    let mut fields = COMMON.to_vec();
    fields.extend_from_slice(&[
        ("CodeHeap", "_memory", "VirtualSpace", 8),
        ("CodeHeap", "_segmap", "VirtualSpace", 120),
        ("CodeHeap", "_log2_segment_size", "int", 256),
        ("HeapBlock::Header", "_used", "bool", 8),
        ("CodeBlob", "_name", "const char*", 96),
        ("CodeBlob", "_size", "int", 12),
        ("CodeBlob", "_frame_complete_offset", "int", 20),
        ("CodeBlob", "_frame_size", "int", 28),
        ("CodeBlob", "_code_begin", "address", 32),
        ("CompiledMethod", "_method", "Method*", 112),
        ("CompiledMethod", "_scopes_data_begin", "address", 120),
        ("CompiledMethod", "_deopt_handler_begin", "address", 128),
        ("nmethod", "_entry_bci", "int", 192),
        ("nmethod", "_verified_entry_point", "address", 224),
        ("nmethod", "_metadata_offset", "int", 260),
        ("nmethod", "_scopes_pcs_offset", "int", 268),
        ("nmethod", "_dependencies_offset", "int", 272),
        ("nmethod", "_orig_pc_offset", "int", 300),
        ("nmethod", "_compile_id", "int", 304),
        ("nmethod", "_comp_level", "int", 308),
        ("ConstMethod", "_flags", "u2", 28),
        ("ConstMethod", "_code_size", "u2", 32),
        ("ConstMethod", "_name_index", "u2", 34),
        ("ConstMethod", "_signature_index", "u2", 36),
    ]);
    let sizes = [
        ("HeapBlock", 16),
        ("ConstMethod", 48),
        ("ConstantPool", 72),
        ("PcDesc", 16),
    ];
    let mut ints = FRAME.to_vec();
    ints.push(("ConstMethod::_has_linenumber_table", 1));
    tables(&fields, STATICS, &sizes, &ints)
}

pub fn jdk25_tables() -> VmStructs {
    let mut fields = COMMON.to_vec();
    fields.extend_from_slice(&[
        ("CodeHeap", "_memory", "VirtualSpace", 0),
        ("CodeHeap", "_segmap", "VirtualSpace", 112),
        ("CodeHeap", "_log2_segment_size", "int", 248),
        ("HeapBlock::Header", "_used", "bool", 4),
        ("CodeBlob", "_name", "const char*", 8),
        ("CodeBlob", "_mutable_data", "address", 16),
        ("CodeBlob", "_size", "int", 24),
        ("CodeBlob", "_relocation_size", "int", 28),
        ("CodeBlob", "_code_offset", "int", 36),
        ("CodeBlob", "_frame_size", "int", 44),
        ("CodeBlob", "_mutable_data_size", "int", 48),
        ("CodeBlob", "_frame_complete_offset", "int16_t", 54),
        ("nmethod", "_method", "Method*", 80),
        ("nmethod", "_immutable_data", "address", 96),
        ("nmethod", "_verified_entry_offset", "u2", 154),
        ("nmethod", "_entry_bci", "int", 156),
        ("nmethod", "_immutable_data_size", "int", 160),
        ("nmethod", "_deopt_handler_offset", "int", 176),
        ("nmethod", "_scopes_pcs_offset", "int", 196),
        ("nmethod", "_scopes_data_offset", "int", 200),
        ("nmethod", "_orig_pc_offset", "int", 208),
        ("nmethod", "_compile_id", "int", 212),
        ("nmethod", "_comp_level", "CompLevel", 216),
        ("ConstMethod", "_flags._flags", "u4", 28),
        ("ConstMethod", "_code_size", "u2", 34),
        ("ConstMethod", "_name_index", "u2", 36),
        ("ConstMethod", "_signature_index", "u2", 38),
    ]);
    let sizes = [
        ("HeapBlock", 8),
        ("ConstMethod", 56),
        ("ConstantPool", 72),
        ("PcDesc", 16),
    ];
    let mut ints = FRAME.to_vec();
    ints.push(("ConstMethodFlags::_misc_has_linenumber_table", 1));
    tables(&fields, STATICS, &sizes, &ints)
}

// Metaspace and an nmethod of one process, for naming's tests.

pub const LEAF: u64 = 0x1000;
pub const MIDDLE: u64 = 0x1100;
pub const NM: u64 = 0x10000;

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

/// A symbol (length u2 at 4, body at 6), in its own page.
fn symbol(m: &mut FakeMemory, at: u64, s: &str) {
    let mut b = vec![0u8; 6];
    put(&mut b, 4, &(s.len() as u16).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
    m.put(at, &b);
}

/// A ConstMethod page (JDK 17 layout): constant pool, flags, code size, name index,
/// signature index, the bytecodes, then the compressed line table.
fn const_method(m: &mut FakeMemory, at: u64, name: u16, code: u16, lines: &[u8]) {
    let mut b = vec![0u8; 0x1000];
    put(&mut b, 8, &0x3000u64.to_le_bytes());
    put(&mut b, 28, &1u16.to_le_bytes());
    put(&mut b, 32, &code.to_le_bytes());
    put(&mut b, 34, &name.to_le_bytes());
    put(&mut b, 36, &2u16.to_le_bytes());
    put(&mut b, 48 + usize::from(code), lines);
    m.put(at, &b);
}

/// leaf (lines: bci 0 → 5, bci 4 → 6) and middle (bci 0 → 10, bci 3 → 11) of class
/// fixture/Chain in Chain.java; an nmethod of middle with leaf inlined: debug points
/// at 0x20 (in leaf), 0x40 (a call in middle), 0x60 (in leaf), then the end sentinel.
pub fn process() -> FakeMemory {
    let mut m = FakeMemory::default();
    m.put(LEAF, &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0]);
    m.put(MIDDLE, &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0x60, 0, 0, 0, 0, 0, 0]);
    const_method(&mut m, 0x2000, 1, 10, &[0x05, (4 << 3) | 1, 0]);
    // Line 10 needs the escaped form (a short entry's line delta is at most 7).
    let mut middle_lines = vec![0xff];
    put_int(&mut middle_lines, 0, 0);
    put_int(&mut middle_lines, 0, 10);
    middle_lines.extend_from_slice(&[(3 << 3) | 1, 0]);
    const_method(&mut m, 0x6000, 4, 8, &middle_lines);
    // Constant pool: holder, source file index 3, entries after its 72 bytes.
    let mut cp = vec![0u8; 72 + 5 * 8];
    put(&mut cp, 24, &0x4000u64.to_le_bytes());
    put(&mut cp, 54, &3u16.to_le_bytes());
    for (i, sym) in [0x5100u64, 0x5200, 0x5300, 0x5400].iter().enumerate() {
        put(&mut cp, 72 + 8 * (i + 1), &sym.to_le_bytes());
    }
    m.put(0x3000, &cp);
    let mut klass = vec![0u8; 32];
    put(&mut klass, 24, &0x5000u64.to_le_bytes());
    m.put(0x4000, &klass);
    symbol(&mut m, 0x5000, "fixture/Chain");
    symbol(&mut m, 0x5100, "leaf");
    symbol(&mut m, 0x5200, "(J)J");
    symbol(&mut m, 0x5300, "Chain.java");
    symbol(&mut m, 0x5400, "middle");

    // The nmethod: metadata (leaf, middle) at +0x200, scopes data at +0x210, PcDescs
    // at +0x240 up to the dependencies at +0x290.
    let mut nm = vec![0u8; 0x400];
    put(&mut nm, 112, &MIDDLE.to_le_bytes());
    put(&mut nm, 120, &(NM + 0x210).to_le_bytes());
    put(&mut nm, 260, &0x200i32.to_le_bytes());
    put(&mut nm, 268, &0x240i32.to_le_bytes());
    put(&mut nm, 272, &0x290i32.to_le_bytes());
    put(&mut nm, 304, &42i32.to_le_bytes());
    put(&mut nm, 0x200, &LEAF.to_le_bytes());
    put(&mut nm, 0x208, &MIDDLE.to_le_bytes());
    let mut scopes = vec![0u8];
    let outer = scopes.len() as u32; // middle at bci 3 (stored + 1)
    for v in [0, 2, 4] {
        put_uint(&mut scopes, 0, v);
    }
    let inner = scopes.len() as u32; // leaf at bci 5, inlined into the outer
    for v in [outer, 1, 6] {
        put_uint(&mut scopes, 0, v);
    }
    put(&mut nm, 0x210, &scopes);
    let pcs = [
        (-1i32, 0u32),
        (0x20, inner),
        (0x40, outer),
        (0x60, inner),
        (0x100, 0),
    ];
    for (i, (pc, scope)) in pcs.iter().enumerate() {
        put(&mut nm, 0x240 + 16 * i, &pc.to_le_bytes());
        put(&mut nm, 0x244 + 16 * i, &scope.to_le_bytes());
    }
    m.put(NM, &nm);
    m
}
