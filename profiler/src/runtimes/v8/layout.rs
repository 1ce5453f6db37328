//! The `v8dbg_*` constants V8 exports for post-mortem debuggers, read from the ELF file (each
//! symbol's value is the address of an `int` in the file's data; a constant that is zero sits
//! in `.bss` and has no bytes in the file), and V8's version from `v8::internal::Version`.
//! Node 20's V8 (11.3) lost a few `Code` and `JSFunction` entries from the generated list: those
//! are derived from their neighbours as V8 11.3's object layout puts them, and marked so.
//! Node 18's V8 (10.2) exports those but not the Code's tagged fields and deoptimization
//! slots: derived likewise.

use std::collections::HashMap;

use object::{Object, ObjectSection, SectionKind};

use super::baseline::{self, BytecodeSizes};
use crate::runtimes::shared::elf::for_each_symbol;

/// V8's version, as `v8::internal::Version` holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct V8Version {
    pub major: u32,
    pub minor: u32,
    pub build: u32,
    pub patch: u32,
}

impl std::fmt::Display for V8Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{}.{}.{}",
            self.major, self.minor, self.build, self.patch
        )
    }
}

/// Why a V8 build is not named: one line for the user.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error("no v8dbg_* symbols (stripped, or not a V8 with post-mortem metadata)")]
    NoMetadata,
    #[error("no v8::internal::Version symbols: V8's version is unknown")]
    NoVersion,
    #[error("V8 {0}: only 10.2 and 11.x are read (their Code layouts are partly derived)")]
    Version(V8Version),
    #[error("V8 {version}: {name} is missing from the v8dbg_* metadata")]
    Missing {
        version: V8Version,
        name: &'static str,
    },
    #[error("V8 {version}: {what}")]
    Layout { version: V8Version, what: String },
}

/// Frame-pointer-relative slots of a JavaScript frame (bytes from the frame pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameSlots {
    /// A JS frame's context (a tagged heap pointer), or a typed frame's marker (type << 1,
    /// low bit clear): the one slot that tells a JS frame from a stub/builtin frame.
    pub context_or_marker: i8,
    /// The JSFunction being run (JS frames only).
    pub function: i8,
    /// Interpreted and Sparkplug frames: the BytecodeArray.
    pub bytecode_array: i8,
    /// Interpreted frames: the bytecode offset as a Smi, biased by the BytecodeArray header.
    pub bytecode_offset: i8,
}

/// The frame types a walk tells apart (V8's `StackFrame::Type` numbering for this build).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameTypes {
    pub entry: u8,
    pub construct_entry: u8,
    pub exit: u8,
    pub builtin_exit: u8,
    pub interpreted: u8,
    pub baseline: u8,
    pub maglev: u8,
    pub turbofan: u8,
    pub stub: u8,
    pub builtin: u8,
    pub internal: u8,
    pub construct: u8,
}

/// Instance types (`Map::instance_type`) a walk and naming check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Types {
    /// JSFunction and its subclasses (class constructors...): `js_function..=js_function_last`.
    pub js_function: u16,
    pub js_function_last: u16,
    pub shared_function_info: u16,
    pub script: u16,
    pub scope_info: u16,
    pub bytecode_array: u16,
    pub byte_array: u16,
    pub fixed_array: u16,
    pub code: u16,
    pub interpreter_data: u16,
    /// Types below this are strings.
    pub first_nonstring: u16,
}

/// String representations and their fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StringLayout {
    pub length: u16,
    pub representation_mask: u16,
    pub encoding_mask: u16,
    pub seq_tag: u16,
    pub cons_tag: u16,
    pub external_tag: u16,
    pub sliced_tag: u16,
    pub thin_tag: u16,
    pub one_byte_tag: u16,
    pub two_byte_tag: u16,
    pub seq_one_byte_chars: u16,
    pub seq_two_byte_chars: u16,
    pub cons_first: u16,
    pub cons_second: u16,
    pub thin_actual: u16,
    pub sliced_parent: u16,
    pub sliced_offset: u16,
}

/// Field offsets in heap objects (from the tagged pointer minus the tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    pub heap_object_map: u16,
    pub map_instance_type: u16,
    pub js_function_shared: u16,
    pub js_function_context: u16,
    /// Derived (11.3 does not export it): `shared + 3 words`.
    pub js_function_code: u16,
    pub sfi_name_or_scope_info: u16,
    pub sfi_function_data: u16,
    pub sfi_script_or_debug_info: u16,
    pub script_source: u16,
    pub script_name: u16,
    pub script_line_ends: u16,
    pub fixed_array_length: u16,
    pub fixed_array_data: u16,
    /// Where the bytecodes start: the frame's bytecode offset is biased by this minus the tag.
    pub bytecode_array_header: u16,
    /// Derived: `length + 3 words` (constant pool, handler table, then this).
    pub bytecode_array_source_positions: u16,
    pub code_source_positions: u16,
    pub code_deoptimization_data: u16,
    /// Where a Code's instructions are.
    pub code_instructions: CodeStart,
    /// Derived: the `flags` word whose low bits are the code kind.
    pub code_flags: u16,
    pub code_instruction_size: u16,
}

/// The Code object's fields (and JSFunction's pointer to it) as one major lays them out.
struct CodeFields {
    js_function_code: u16,
    deoptimization_data: u16,
    source_positions: u16,
    instructions: CodeStart,
    flags: u16,
    instruction_size: u16,
}

/// Where a Code object's instructions are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeStart {
    /// A pointer to them in this field (V8 11.1.204+: derived).
    Pointer(u16),
    /// Inside the object from this offset, its header's size (V8 10.x:
    /// `Code::instruction_start`'s metadata entry).
    Inline(u16),
}

/// Fixed slots of a Code's DeoptimizationData (a FixedArray), for inlined frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeoptSlots {
    /// The literals: inlined functions' SharedFunctionInfos by inlined function id (weak).
    pub literal_array: u16,
    /// A ByteArray of `InliningPosition { SourcePosition position; int inlined_function_id }`
    /// (16 bytes each), by inlining id - 1.
    pub inlining_positions: u16,
}

/// Code kinds (`Code::flags & mask >> shift`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeKinds {
    pub mask: u32,
    pub shift: u32,
    pub interpreted: u32,
    pub baseline: u32,
    /// Derived: MAGLEV and TURBOFAN follow BASELINE in V8 11's `CodeKind`.
    pub maglev: u32,
    pub turbofan: u32,
}

/// Where a function's on-stack-replaced code is cached: the JSFunction's FeedbackCell, the
/// cell's value (the FeedbackVector, whose loop slots hold weak references to the code
/// compiled for on-stack replacement, V8 10.4+) and the vector's instance type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedbackSlots {
    pub js_function_feedback_cell: u16,
    pub feedback_cell_value: u16,
    pub feedback_vector_type: u16,
}

/// Everything a frame walk and naming need from one V8 build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: V8Version,
    /// Bytes per tagged field: 4 with pointer compression, 8 without (Node 20 x64: 8).
    pub tagged_size: u8,
    pub heap_object_tag: u64,
    pub heap_object_tag_mask: u64,
    /// A Smi's value is the word shifted right by this (32 without pointer compression).
    pub smi_shift: u32,
    pub frame: FrameSlots,
    pub frame_types: FrameTypes,
    pub types: Types,
    pub strings: StringLayout,
    pub fields: Fields,
    pub code_kinds: CodeKinds,
    /// `None` when the build does not export them: inlined JS functions are then shown as
    /// the function they were inlined into.
    pub deopt: Option<DeoptSlots>,
    /// `None` when the build does not export them: a frame in on-stack-replaced code is then
    /// named without its inlined functions and with its function's first line.
    pub feedback: Option<FeedbackSlots>,
    /// The sizes of this build's bytecodes (from its `Bytecodes::kBytecodeSizes`); `None`
    /// when it does not export them: baseline (Sparkplug) frames then get their function's
    /// first line.
    pub bytecode_sizes: Option<BytecodeSizes>,
    /// Names of the entries derived rather than exported.
    pub derived: Vec<&'static str>,
}

impl Layout {
    pub fn pointer_compression(&self) -> bool {
        self.tagged_size == 4
    }

    /// Whether a tagged word is a heap object pointer.
    pub fn is_heap_object(&self, word: u64) -> bool {
        word & self.heap_object_tag_mask == self.heap_object_tag
    }

    /// A Smi's value, if `word` is one.
    pub fn smi(&self, word: u64) -> Option<i64> {
        (word & 1 == 0).then_some((word as i64) >> self.smi_shift)
    }

    /// The address of a heap object from its tagged pointer.
    pub fn untag(&self, word: u64) -> u64 {
        word & !self.heap_object_tag_mask
    }

    /// The frame type a context-or-marker slot holds, or `None` for a JS frame (a context).
    pub fn frame_marker(&self, word: u64) -> Option<u64> {
        (word & 1 == 0).then_some(word >> 1)
    }

    /// Reads the layout from an ELF file's `v8dbg_*` symbols (`data`: the file's bytes, as
    /// `obj` was parsed from).
    pub fn from_elf<'d, R: object::ReadRef<'d>>(
        obj: &object::File<'d, R>,
        data: R,
    ) -> Result<Layout, Unsupported> {
        let consts = Constants::read(obj, data);
        if consts.values.is_empty() {
            return Err(Unsupported::NoMetadata);
        }
        let version = consts.version.ok_or(Unsupported::NoVersion)?;
        consts.layout(version)
    }
}

/// The raw constants of one file, by name without the `v8dbg_` prefix.
#[derive(Debug, Default)]
pub struct Constants {
    pub values: HashMap<String, i64>,
    pub version: Option<V8Version>,
    /// The bytes of `Bytecodes::kBytecodeSizes`.
    pub bytecode_sizes: Option<Vec<u8>>,
}

const VERSION_SYMBOLS: [&str; 4] = [
    "_ZN2v88internal7Version6major_E",
    "_ZN2v88internal7Version6minor_E",
    "_ZN2v88internal7Version6build_E",
    "_ZN2v88internal7Version6patch_E",
];

impl Constants {
    pub fn read<'d, R: object::ReadRef<'d>>(obj: &object::File<'d, R>, data: R) -> Constants {
        let mut values = HashMap::new();
        let mut version = [None; 4];
        let mut bytecode_sizes = None;
        // .symtab when present (it holds all of them), else .dynsym: a stripped build keeps
        // the exported ones there. Bytes compared first: most of node's 235,000 names are
        // none of these.
        for_each_symbol(obj, data, |sym| {
            let size = sym.size.min(8) as usize;
            if let Some(short) = sym.name.strip_prefix(b"v8dbg_") {
                let Ok(short) = std::str::from_utf8(short) else {
                    return;
                };
                if !values.contains_key(short)
                    && let Some(v) = read_int(obj, sym.address, size)
                {
                    values.insert(short.to_string(), v);
                }
            } else if let Some(i) = VERSION_SYMBOLS
                .iter()
                .position(|v| v.as_bytes() == sym.name)
            {
                version[i] = read_int(obj, sym.address, size);
            } else if sym.name == baseline::SIZES_SYMBOL.as_bytes() && bytecode_sizes.is_none() {
                bytecode_sizes = read_bytes(obj, data, sym.address, sym.size);
            }
        });
        let version = match version {
            [Some(major), Some(minor), Some(build), Some(patch)] => Some(V8Version {
                major: major as u32,
                minor: minor as u32,
                build: build as u32,
                patch: patch as u32,
            }),
            _ => None,
        };
        Constants {
            values,
            version,
            bytecode_sizes,
        }
    }

    fn get(&self, version: V8Version, name: &'static str) -> Result<i64, Unsupported> {
        self.values
            .get(name)
            .copied()
            .ok_or(Unsupported::Missing { version, name })
    }

    pub(crate) fn layout(&self, version: V8Version) -> Result<Layout, Unsupported> {
        // 10.2 (Node 18.4 and later 18.x) and 11.x are read; others are not checked.
        let v10 = match (version.major, version.minor) {
            (10, 2) => true,
            (11, _) => false,
            _ => return Err(Unsupported::Version(version)),
        };
        let g = |name: &'static str| self.get(version, name);
        let u8_ = |name: &'static str| g(name).map(|v| v as u8);
        let u16_ = |name: &'static str| g(name).map(|v| v as u16);
        let i8_ = |name: &'static str| g(name).map(|v| v as i8);
        let mut derived = Vec::new();

        let tagged_size = u8_("TaggedSize")?;
        let word = u16::from(tagged_size);
        if g("SystemPointerSize")? != 8 {
            return Err(Unsupported::Layout {
                version,
                what: "not a 64-bit build".into(),
            });
        }
        let smi_shift = (g("SmiShiftSize")? + 1) as u32;
        if g("SmiTagMask")? != 1 || g("SmiTag")? != 0 {
            return Err(Unsupported::Layout {
                version,
                what: "Smi tag is not the low bit clear".into(),
            });
        }

        let frame = FrameSlots {
            context_or_marker: i8_("off_fp_context_or_frame_type")?,
            function: i8_("off_fp_function")?,
            bytecode_array: i8_("off_fp_bytecode_array")?,
            bytecode_offset: i8_("off_fp_bytecode_offset")?,
        };
        let frame_types = FrameTypes {
            entry: u8_("frametype_EntryFrame")?,
            construct_entry: u8_("frametype_ConstructEntryFrame")?,
            exit: u8_("frametype_ExitFrame")?,
            builtin_exit: u8_("frametype_BuiltinExitFrame")?,
            interpreted: u8_("frametype_InterpretedFrame")?,
            baseline: u8_("frametype_BaselineFrame")?,
            // 10.x: no Maglev frames, and TurboFan's are `OptimizedFrame`.
            maglev: if v10 {
                u8::MAX
            } else {
                u8_("frametype_MaglevFrame")?
            },
            turbofan: u8_(if v10 {
                "frametype_OptimizedFrame"
            } else {
                "frametype_TurbofanFrame"
            })?,
            stub: u8_("frametype_StubFrame")?,
            builtin: u8_("frametype_BuiltinFrame")?,
            internal: u8_("frametype_InternalFrame")?,
            construct: u8_("frametype_ConstructFrame")?,
        };
        let js_function = u16_("type_JSFunction__JS_FUNCTION_TYPE")?;
        // JS_FUNCTION_TYPE then 14 constructor subtypes (V8 9.6.138+), not exported.
        derived.push("JSFunction type range");
        let types = Types {
            js_function,
            js_function_last: js_function + 14,
            shared_function_info: u16_("type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE")?,
            script: u16_("type_Script__SCRIPT_TYPE")?,
            scope_info: u16_("type_ScopeInfo__SCOPE_INFO_TYPE")?,
            bytecode_array: u16_("type_BytecodeArray__BYTECODE_ARRAY_TYPE")?,
            byte_array: u16_("type_ByteArray__BYTE_ARRAY_TYPE")?,
            fixed_array: u16_("type_FixedArray__FIXED_ARRAY_TYPE")?,
            code: u16_("type_Code__CODE_TYPE")?,
            interpreter_data: u16_("type_InterpreterData__INTERPRETER_DATA_TYPE")?,
            first_nonstring: u16_("FirstNonstringType")?,
        };
        let strings = StringLayout {
            length: u16_("class_String__length__int32_t")?,
            representation_mask: u16_("StringRepresentationMask")?,
            encoding_mask: u16_("StringEncodingMask")?,
            seq_tag: u16_("SeqStringTag")?,
            cons_tag: u16_("ConsStringTag")?,
            external_tag: u16_("ExternalStringTag")?,
            sliced_tag: u16_("SlicedStringTag")?,
            thin_tag: u16_("ThinStringTag")?,
            one_byte_tag: u16_("OneByteStringTag")?,
            two_byte_tag: u16_("TwoByteStringTag")?,
            seq_one_byte_chars: u16_("class_SeqOneByteString__chars__char")?,
            seq_two_byte_chars: u16_("class_SeqTwoByteString__chars__char")?,
            cons_first: u16_("class_ConsString__first__String")?,
            cons_second: u16_("class_ConsString__second__String")?,
            thin_actual: u16_("class_ThinString__actual__String")?,
            sliced_parent: u16_("class_SlicedString__parent__String")?,
            sliced_offset: u16_("class_SlicedString__offset__SMI")?,
        };
        let js_function_shared = u16_("class_JSFunction__shared__SharedFunctionInfo")?;
        let fixed_array_length = u16_("class_FixedArrayBase__length__SMI")?;
        derived.push("BytecodeArray::source_position_table");
        let code = if v10 {
            // 10.x exports where the header's scalars and the instructions are, not its
            // tagged fields: relocation info, deoptimization data, source positions and the
            // CodeDataContainer precede the instruction size, a word each.
            let size = u16_("class_Code__instruction_size__int")?;
            let deoptimization_data = size.checked_sub(3 * word).ok_or(Unsupported::Layout {
                version,
                what: format!("Code's instruction size at {size}: no tagged fields before it"),
            })?;
            derived.extend(["Code::deoptimization_data", "Code::source_position_table"]);
            CodeFields {
                js_function_code: u16_("class_JSFunction__code__CodeT")?,
                deoptimization_data,
                source_positions: deoptimization_data + word,
                instructions: CodeStart::Inline(u16_("class_Code__instruction_start__uintptr_t")?),
                flags: u16_("class_Code__flags__uint32_t")?,
                instruction_size: size,
            }
        } else {
            // Derived as V8 11.x lays these out (the generator lost them in 11.x):
            // JSFunction: shared, context, feedback_cell, code; Code: ..., deoptimization
            // data, source positions, (bytecode offset table), instruction start, flags,
            // size.
            derived.extend([
                "JSFunction::code",
                "Code::instruction_start",
                "Code::flags",
                "Code::instruction_size",
            ]);
            let source_positions = u16_("class_Code__source_position_table__ByteArray")?;
            let instruction_start = source_positions + 2 * word;
            let flags = instruction_start + word;
            CodeFields {
                js_function_code: js_function_shared + 3 * word,
                deoptimization_data: u16_("class_Code__deoptimization_data__FixedArray")?,
                source_positions,
                instructions: CodeStart::Pointer(instruction_start),
                flags,
                // Before 11.4.59 a builtin id and kind-specific flags (2 + 2 bytes) sit
                // after flags.
                instruction_size: if (version.minor, version.build) < (4, 59) {
                    flags + 8
                } else {
                    flags + 4
                },
            }
        };
        let fields = Fields {
            heap_object_map: u16_("class_HeapObject__map__Map")?,
            map_instance_type: u16_("class_Map__instance_type__uint16_t")?,
            js_function_shared,
            js_function_context: u16_("class_JSFunction__context__Context")?,
            js_function_code: code.js_function_code,
            sfi_name_or_scope_info: u16_("class_SharedFunctionInfo__name_or_scope_info__Object")?,
            sfi_function_data: u16_("class_SharedFunctionInfo__function_data__Object")?,
            sfi_script_or_debug_info: u16_(
                "class_SharedFunctionInfo__script_or_debug_info__HeapObject",
            )?,
            script_source: u16_("class_Script__source__Object")?,
            script_name: u16_("class_Script__name__Object")?,
            script_line_ends: u16_("class_Script__line_ends__Object")?,
            fixed_array_length,
            fixed_array_data: u16_("class_FixedArray__data__uintptr_t")?,
            bytecode_array_header: u16_("class_BytecodeArray__data__uintptr_t")?,
            bytecode_array_source_positions: fixed_array_length + 3 * word,
            code_source_positions: code.source_positions,
            code_deoptimization_data: code.deoptimization_data,
            code_instructions: code.instructions,
            code_flags: code.flags,
            code_instruction_size: code.instruction_size,
        };
        let baseline = g("CodeKindBaseline")? as u32;
        derived.push("CodeKind MAGLEV, TURBOFAN");
        let code_kinds = CodeKinds {
            mask: g("CodeKindFieldMask")? as u32,
            shift: g("CodeKindFieldShift")? as u32,
            interpreted: g("CodeKindInterpretedFunction")? as u32,
            baseline,
            maglev: baseline + 1,
            turbofan: baseline + 2,
        };
        let deopt = match (
            u16_("DeoptimizationDataLiteralArrayIndex"),
            u16_("DeoptimizationDataInliningPositionsIndex"),
        ) {
            (Ok(literal_array), Ok(inlining_positions)) => Some(DeoptSlots {
                literal_array,
                inlining_positions,
            }),
            // 10.x exports neither; its DeoptimizationData has them where 11.x's metadata
            // says (kLiteralArrayIndex 2, kInliningPositionsIndex 7).
            _ if v10 => {
                derived.push("DeoptimizationData literal array, inlining positions");
                Some(DeoptSlots {
                    literal_array: 2,
                    inlining_positions: 7,
                })
            }
            _ => None,
        };
        let feedback = match (
            u16_("class_JSFunction__raw_feedback_cell__FeedbackCell"),
            u16_("class_FeedbackCell__value__HeapObject"),
            u16_("type_FeedbackVector__FEEDBACK_VECTOR_TYPE"),
        ) {
            (Ok(js_function_feedback_cell), Ok(feedback_cell_value), Ok(feedback_vector_type)) => {
                Some(FeedbackSlots {
                    js_function_feedback_cell,
                    feedback_cell_value,
                    feedback_vector_type,
                })
            }
            _ => None,
        };
        Ok(Layout {
            version,
            tagged_size,
            heap_object_tag: g("HeapObjectTag")? as u64,
            heap_object_tag_mask: g("HeapObjectTagMask")? as u64,
            smi_shift,
            frame,
            frame_types,
            types,
            strings,
            fields,
            code_kinds,
            deopt,
            feedback,
            bytecode_sizes: self.bytecode_sizes.clone().and_then(BytecodeSizes::new),
            derived,
        })
    }
}

/// The `size` bytes at virtual address `addr` of the file, from a section with file bytes,
/// read alone (not the whole section: node's `.rodata` is tens of MiB).
fn read_bytes<'d, R: object::ReadRef<'d>>(
    obj: &object::File<'d, R>,
    data: R,
    addr: u64,
    size: u64,
) -> Option<Vec<u8>> {
    let section = obj
        .sections()
        .find(|s| s.address() <= addr && addr + size <= s.address() + s.size())?;
    let (offset, _) = section.file_range()?;
    let bytes = data
        .read_bytes_at(offset + (addr - section.address()), size)
        .ok()?;
    Some(bytes.to_vec())
}

/// The little-endian signed integer of `size` bytes at virtual address `addr` of the file:
/// zero in a section with no file bytes (`.bss`), `None` outside every section.
fn read_int<'d, R: object::ReadRef<'d>>(
    obj: &object::File<'d, R>,
    addr: u64,
    size: usize,
) -> Option<i64> {
    let section = obj
        .sections()
        .find(|s| s.address() <= addr && addr < s.address() + s.size())?;
    if section.kind() == SectionKind::UninitializedData {
        return Some(0);
    }
    let bytes = section.data_range(addr, size as u64).ok()??;
    let mut b = [0u8; 8];
    b[..size].copy_from_slice(bytes);
    // Sign-extend from `size` bytes: frame offsets are negative ints.
    let shift = 64 - 8 * size as u32;
    Some((i64::from_le_bytes(b) << shift) >> shift)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::v8::testdata as tests_support;
    use object::ReadCache;

    fn node_layout() -> Option<Layout> {
        let file = std::fs::File::open("/usr/bin/node").ok()?;
        let cache = ReadCache::new(&file);
        let obj = object::File::parse(&cache).expect("node is an ELF file");
        Some(Layout::from_elf(&obj, &cache).expect("Node 20's V8 is read"))
    }

    /// Node 20.20.2 (Debian's /usr/bin/node, V8 11.3.244.8-node.38). Checked on the file
    /// independently: `readelf -Ws` gives v8dbg_off_fp_function at 0x5651050 and
    /// v8dbg_TaggedSize at 0x565112c (.data, file offset = address - 0x563e000 + 0x523d000),
    /// whose bytes `od` reads as f0 ff ff ff (-16) and 08 00 00 00 (8: no pointer
    /// compression); v8dbg_class_HeapObject__map__Map is in .bss (0); `gdb -batch -ex
    /// "p (int)v8dbg_off_fp_function" -ex "p (int)'v8::internal::Version::major_'"
    /// /usr/bin/node` prints -16 and 11.
    #[test]
    fn node20_layout() {
        let Some(l) = node_layout() else {
            eprintln!("skipped: no /usr/bin/node");
            return;
        };
        if l.version.major != 11 || l.version.minor != 3 {
            eprintln!("skipped: /usr/bin/node has V8 {}, not 11.3", l.version);
            return;
        }
        assert_eq!(l.version.build, 244);
        assert_eq!(l.tagged_size, 8);
        assert!(!l.pointer_compression());
        assert_eq!(l.smi_shift, 32);
        assert_eq!((l.heap_object_tag, l.heap_object_tag_mask), (1, 3));
        assert_eq!(
            l.frame,
            FrameSlots {
                context_or_marker: -8,
                function: -16,
                bytecode_array: -32,
                bytecode_offset: -40
            }
        );
        assert_eq!(l.frame_types.interpreted, 13);
        assert_eq!(l.frame_types.baseline, 14);
        assert_eq!(l.frame_types.turbofan, 16);
        assert_eq!(l.frame_types.entry, 1);
        assert_eq!(l.types.js_function, 2066);
        assert_eq!(l.types.shared_function_info, 262);
        assert_eq!(l.types.script, 167);
        assert_eq!(l.types.bytecode_array, 191);
        assert_eq!(l.fields.heap_object_map, 0);
        assert_eq!(l.fields.map_instance_type, 12);
        assert_eq!(l.fields.js_function_shared, 24);
        assert_eq!(l.fields.js_function_code, 48);
        assert_eq!(l.fields.sfi_name_or_scope_info, 16);
        assert_eq!(l.fields.sfi_script_or_debug_info, 32);
        assert_eq!(l.fields.script_name, 16);
        assert_eq!(l.fields.script_line_ends, 56);
        assert_eq!(l.fields.bytecode_array_header, 54);
        assert_eq!(l.strings.cons_tag, 1);
        assert_eq!(l.strings.thin_tag, 5);
        assert_eq!(l.strings.seq_tag, 0);
        assert_eq!(l.strings.one_byte_tag, 8);
        assert_eq!(l.strings.seq_one_byte_chars, 16);
        assert_eq!((l.code_kinds.interpreted, l.code_kinds.baseline), (10, 11));
        // 198 bytecodes, the first four (Wide, ExtraWide and their DebugBreak twins) a byte
        // at every scale; the listing check is tests/tests/v8_layout.rs's.
        let sizes = l.bytecode_sizes.clone().expect("kBytecodeSizes exported");
        assert_eq!(sizes.size_at(&[0, 0x0c], 0), Some(2), "Wide LdaZero");
        assert_eq!(sizes.size_at(&[0x0b, 0x03], 0), Some(2), "Ldar a0");
        // The synthetic layout the unit tests use is this file's, its sizes aside.
        let l = Layout {
            bytecode_sizes: None,
            ..l
        };
        assert_eq!(l, tests_support::layout_11_3());
    }

    /// Another major, or a build missing a constant, gets one clear reason.
    #[test]
    fn unsupported_builds_say_why() {
        let full = tests_support::constants_11_3();
        for other in [(9, 4), (10, 1), (12, 4)] {
            let v = V8Version {
                major: other.0,
                minor: other.1,
                build: 1,
                patch: 0,
            };
            assert_eq!(full.layout(v), Err(Unsupported::Version(v)));
        }
        let mut partial = tests_support::constants_11_3();
        partial.values.remove("off_fp_function");
        let v = partial.version.expect("set");
        assert_eq!(
            partial.layout(v),
            Err(Unsupported::Missing {
                version: v,
                name: "off_fp_function"
            })
        );
        assert_eq!(
            partial.layout(v).unwrap_err().to_string(),
            "V8 11.3.244.8: off_fp_function is missing from the v8dbg_* metadata"
        );
        let mut compressed = tests_support::constants_11_3();
        compressed.values.insert("TaggedSize".into(), 4);
        let l = compressed.layout(v).expect("read");
        assert!(l.pointer_compression());
    }

    #[test]
    fn smi_marker_and_tags() {
        let Some(l) = node_layout() else { return };
        assert_eq!(l.smi(7 << 32), Some(7));
        assert_eq!(l.smi((-3i64 << 32) as u64), Some(-3));
        assert_eq!(l.smi(0x1001), None);
        // A typed frame's marker is `type << 1`, not a full Smi.
        assert_eq!(l.frame_marker(13 << 1), Some(13));
        assert_eq!(l.frame_marker(0x7f00_0000_1001), None);
        assert!(l.is_heap_object(0x1_0000_0001));
        assert_eq!(l.untag(0x1_0000_0001), 0x1_0000_0000);
    }
}
