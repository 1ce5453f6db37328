//! Node 20's V8 (11.3) constants without the file, for tests of readers on synthetic memory.

use super::layout::{Constants, Layout, V8Version};

/// A layout as Node 20's V8 11.3 has it; `node20_layout` checks it equals what it reads from
/// /usr/bin/node.
pub fn layout_11_3() -> Layout {
    let c = constants_11_3();
    c.layout(c.version.expect("set")).expect("complete")
}

pub fn constants_11_3() -> Constants {
    let values = [
        ("CodeKindBaseline", 11),
        ("DeoptimizationDataInliningPositionsIndex", 7),
        ("DeoptimizationDataLiteralArrayIndex", 2),
        ("CodeKindFieldMask", 15),
        ("CodeKindFieldShift", 0),
        ("CodeKindInterpretedFunction", 10),
        ("ConsStringTag", 1),
        ("ExternalStringTag", 2),
        ("FirstNonstringType", 128),
        ("HeapObjectTag", 1),
        ("HeapObjectTagMask", 3),
        ("OneByteStringTag", 8),
        ("SeqStringTag", 0),
        ("SlicedStringTag", 3),
        ("SmiShiftSize", 31),
        ("SmiTag", 0),
        ("SmiTagMask", 1),
        ("StringEncodingMask", 8),
        ("StringRepresentationMask", 7),
        ("SystemPointerSize", 8),
        ("TaggedSize", 8),
        ("ThinStringTag", 5),
        ("TwoByteStringTag", 0),
        ("class_BytecodeArray__data__uintptr_t", 54),
        ("class_Code__deoptimization_data__FixedArray", 16),
        ("class_Code__source_position_table__ByteArray", 24),
        ("class_ConsString__first__String", 16),
        ("class_ConsString__second__String", 24),
        ("class_FixedArrayBase__length__SMI", 8),
        ("class_FixedArray__data__uintptr_t", 16),
        ("class_HeapObject__map__Map", 0),
        ("class_JSFunction__context__Context", 32),
        ("class_JSFunction__shared__SharedFunctionInfo", 24),
        ("class_Map__instance_type__uint16_t", 12),
        ("class_Script__line_ends__Object", 56),
        ("class_Script__name__Object", 16),
        ("class_Script__source__Object", 8),
        ("class_SeqOneByteString__chars__char", 16),
        ("class_SeqTwoByteString__chars__char", 16),
        ("class_SharedFunctionInfo__function_data__Object", 8),
        ("class_SharedFunctionInfo__name_or_scope_info__Object", 16),
        (
            "class_SharedFunctionInfo__script_or_debug_info__HeapObject",
            32,
        ),
        ("class_SlicedString__offset__SMI", 24),
        ("class_SlicedString__parent__String", 16),
        ("class_String__length__int32_t", 12),
        ("class_ThinString__actual__String", 16),
        ("frametype_BaselineFrame", 14),
        ("frametype_BuiltinExitFrame", 25),
        ("frametype_BuiltinFrame", 24),
        ("frametype_ConstructEntryFrame", 2),
        ("frametype_ConstructFrame", 23),
        ("frametype_EntryFrame", 1),
        ("frametype_ExitFrame", 3),
        ("frametype_InternalFrame", 22),
        ("frametype_InterpretedFrame", 13),
        ("frametype_MaglevFrame", 15),
        ("frametype_StubFrame", 17),
        ("frametype_TurbofanFrame", 16),
        ("off_fp_bytecode_array", -32),
        ("off_fp_bytecode_offset", -40),
        ("off_fp_context_or_frame_type", -8),
        ("off_fp_function", -16),
        ("type_ByteArray__BYTE_ARRAY_TYPE", 190),
        ("type_BytecodeArray__BYTECODE_ARRAY_TYPE", 191),
        ("type_Code__CODE_TYPE", 245),
        ("type_FixedArray__FIXED_ARRAY_TYPE", 175),
        ("type_InterpreterData__INTERPRETER_DATA_TYPE", 159),
        ("type_JSFunction__JS_FUNCTION_TYPE", 2066),
        ("type_ScopeInfo__SCOPE_INFO_TYPE", 261),
        ("type_Script__SCRIPT_TYPE", 167),
        ("type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE", 262),
    ];
    Constants {
        values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        version: Some(V8Version {
            major: 11,
            minor: 3,
            build: 244,
            patch: 8,
        }),
        bytecode_sizes: None,
    }
}
