//! VMStructs tables as JDK 17.0.15 (Debian) and 25.0.3 (Temurin) fill them on x86_64, with
//! only the entries the layout reads (values from the live JVMs; the integration test checks
//! a live 17 gives the same layout). Statics get made-up addresses.

use super::vmstructs::{Field, VmStructs};

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
