//! The per-version offsets table, and its check against `_Py_DebugOffsets` (3.13+).
//!
//! The numbers were read from the DWARF of pyenv's builds (`gdb`'s `offsetof` of each field
//! in 3.6.15, 3.7.16, 3.8.18, 3.9.18, 3.10.13, 3.11.7, 3.12.1 and 3.13.0); the structs a
//! walker follows do not change within a minor release. 3.13 publishes its own offsets at
//! the start of `_PyRuntime`: those are compared with this table before anything is walked.

use profiler_common::python::{
    FRAME_OBJECT, INSTR_PTR, INTERPRETER_FRAME, LASTI_BYTES, LASTI_UNITS, LINETABLE_310, LNOTAB,
    LOCATIONS_311, NONE, PREV_INSTR, PythonOffsets,
};

use super::version::{Unsupported, Version, check};

/// The walker's offsets for `version` (any micro release of a supported minor).
pub fn for_version(version: Version) -> Result<PythonOffsets, Unsupported> {
    check(version, false)?;
    // Fields every version has at the same place.
    let base = PythonOffsets {
        version: version.packed(),
        interp_next: 0,
        tstate_next: 8,
        tstate_interp: 16,
        cframe_current_frame: NONE,
        tstate_native_thread_id: NONE,
        runtime_interpreters_head: NONE,
        runtime_tstate_current: NONE,
        runtime_tss_key: NONE,
        frame_owner: NONE,
        frame_is_entry: NONE,
        code_qualname: NONE,
        code_code: NONE,
        code_adaptive: NONE,
        code_firsttraceable: NONE,
        bytes_size: 16,
        bytes_data: 32,
        unicode_length: 16,
        unicode_state: 32,
        // Until 3.12 a compact string also kept a `wstr` pointer (and its length).
        unicode_ascii_data: if version.minor >= 12 { 40 } else { 48 },
        unicode_compact_data: if version.minor >= 12 { 56 } else { 72 },
        object_type: 8,
        ..PythonOffsets::default()
    };
    let frame_object = PythonOffsets {
        frame_kind: FRAME_OBJECT,
        instr_kind: LASTI_BYTES,
        line_table: LNOTAB,
        interp_threads_head: 8,
        tstate_frame: 24,
        tstate_thread_id: 176,
        frame_back: 24,
        frame_code: 32,
        frame_instr: 104,
        code_filename: 104,
        code_name: 112,
        code_firstlineno: 40,
        code_linetable: 120,
        code_code: 48,
        ..base
    };
    let interpreter_frame = PythonOffsets {
        frame_kind: INTERPRETER_FRAME,
        line_table: LOCATIONS_311,
        frame_back: 8,
        frame_code: 0,
        frame_instr: 56,
        frame_owner: 70,
        tstate_native_thread_id: 160,
        tstate_thread_id: 152,
        code_filename: 112,
        code_name: 120,
        code_qualname: 128,
        code_firstlineno: 68,
        code_linetable: 136,
        ..base
    };
    Ok(match version.minor {
        6 | 7 => PythonOffsets {
            // 3.6 has no `_PyRuntime`: the heads are the statics `interp_head`,
            // `_PyThreadState_Current` and `autoTLSkey`.
            runtime_interpreters_head: if version.minor == 7 { 24 } else { NONE },
            runtime_tstate_current: if version.minor == 7 { 1480 } else { NONE },
            runtime_tss_key: if version.minor == 7 { 1504 } else { NONE },
            tstate_thread_id: if version.minor == 7 { 176 } else { 152 },
            frame_instr: if version.minor == 7 { 104 } else { 120 },
            code_filename: 96,
            code_name: 104,
            code_firstlineno: 36,
            code_linetable: 112,
            code_code: 40,
            ..frame_object
        },
        8 => PythonOffsets {
            runtime_interpreters_head: 32,
            runtime_tstate_current: 1368,
            runtime_tss_key: 1392,
            ..frame_object
        },
        9 | 10 => PythonOffsets {
            runtime_interpreters_head: 32,
            runtime_tstate_current: 568,
            runtime_tss_key: 584,
            instr_kind: if version.minor == 10 {
                LASTI_UNITS
            } else {
                LASTI_BYTES
            },
            line_table: if version.minor == 10 {
                LINETABLE_310
            } else {
                LNOTAB
            },
            frame_instr: if version.minor == 10 { 96 } else { 104 },
            ..frame_object
        },
        11 => PythonOffsets {
            runtime_interpreters_head: 40,
            runtime_tstate_current: 576,
            runtime_tss_key: 592,
            interp_threads_head: 16,
            tstate_frame: 56,
            cframe_current_frame: 8,
            instr_kind: PREV_INSTR,
            frame_back: 48,
            frame_code: 32,
            frame_instr: 56,
            frame_owner: 69,
            frame_is_entry: 68,
            code_firstlineno: 72,
            code_adaptive: 184,
            code_firsttraceable: 168,
            ..interpreter_frame
        },
        12 => PythonOffsets {
            runtime_interpreters_head: 40,
            runtime_tss_key: 1544,
            interp_threads_head: 72,
            tstate_frame: 56,
            cframe_current_frame: 0,
            tstate_thread_id: 136,
            tstate_native_thread_id: 144,
            instr_kind: PREV_INSTR,
            code_adaptive: 192,
            code_firsttraceable: 176,
            ..interpreter_frame
        },
        13 => PythonOffsets {
            runtime_interpreters_head: 632,
            runtime_tss_key: 2160,
            interp_next: 7264,
            interp_threads_head: 7344,
            tstate_frame: 72,
            instr_kind: INSTR_PTR,
            code_adaptive: 200,
            code_firsttraceable: 184,
            ..interpreter_frame
        },
        _ => return Err(Unsupported::Version(version.to_string())),
    })
}

/// Bytes of `_Py_DebugOffsets` as 3.13 lays them out (at the start of `_PyRuntime`).
pub const DEBUG_OFFSETS_BYTES: usize = 584;
/// Its first eight bytes.
pub const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// `_Py_DebugOffsets` disagreeing with our table, or not what we expect to find.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DebugOffsetsError {
    #[error("_PyRuntime does not start with the _Py_DebugOffsets cookie (found {0:02x?})")]
    Cookie(Vec<u8>),
    #[error("_Py_DebugOffsets says version {found:#x}, the library's symbols say {expected}")]
    Version { found: u64, expected: Version },
    #[error("_Py_DebugOffsets says this is a free-threaded build")]
    FreeThreaded,
    #[error(
        "offset of {field} is {found} in _Py_DebugOffsets but {table} in our table: not walked"
    )]
    Mismatch {
        field: &'static str,
        found: u64,
        table: u16,
    },
}

/// Compares `table` with the `_Py_DebugOffsets` bytes read from a live 3.13 process (the
/// first [`DEBUG_OFFSETS_BYTES`] of `_PyRuntime`). Every field the walker uses is checked.
pub fn check_debug_offsets(
    bytes: &[u8],
    version: Version,
    table: &PythonOffsets,
) -> Result<(), DebugOffsetsError> {
    if bytes.len() < DEBUG_OFFSETS_BYTES || &bytes[..8] != DEBUG_COOKIE {
        return Err(DebugOffsetsError::Cookie(
            bytes[..bytes.len().min(8)].to_vec(),
        ));
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let found = word(8);
    if (found >> 16) as u32 != u32::from(version.major) << 8 | u32::from(version.minor) {
        return Err(DebugOffsetsError::Version {
            found,
            expected: version,
        });
    }
    if word(16) != 0 {
        return Err(DebugOffsetsError::FreeThreaded);
    }
    let fields: [(&'static str, usize, u16); 20] = [
        (
            "runtime_state.interpreters_head",
            40,
            table.runtime_interpreters_head,
        ),
        ("interpreter_state.next", 64, table.interp_next),
        (
            "interpreter_state.threads_head",
            72,
            table.interp_threads_head,
        ),
        ("thread_state.next", 168, table.tstate_next),
        ("thread_state.interp", 176, table.tstate_interp),
        ("thread_state.current_frame", 184, table.tstate_frame),
        ("thread_state.thread_id", 192, table.tstate_thread_id),
        (
            "thread_state.native_thread_id",
            200,
            table.tstate_native_thread_id,
        ),
        ("interpreter_frame.previous", 232, table.frame_back),
        ("interpreter_frame.executable", 240, table.frame_code),
        ("interpreter_frame.instr_ptr", 248, table.frame_instr),
        ("interpreter_frame.owner", 264, table.frame_owner),
        ("code_object.filename", 280, table.code_filename),
        ("code_object.name", 288, table.code_name),
        ("code_object.qualname", 296, table.code_qualname),
        ("code_object.linetable", 304, table.code_linetable),
        ("code_object.firstlineno", 312, table.code_firstlineno),
        ("code_object.co_code_adaptive", 344, table.code_adaptive),
        ("unicode_object.state", 544, table.unicode_state),
        ("unicode_object.length", 552, table.unicode_length),
    ];
    let more: [(&'static str, usize, u16); 4] = [
        ("pyobject.ob_type", 360, table.object_type),
        ("bytes_object.ob_size", 520, table.bytes_size),
        ("bytes_object.ob_sval", 528, table.bytes_data),
        (
            "unicode_object.asciiobject_size",
            560,
            table.unicode_ascii_data,
        ),
    ];
    for (field, at, ours) in fields.into_iter().chain(more) {
        let theirs = word(at);
        if theirs != u64::from(ours) {
            return Err(DebugOffsetsError::Mismatch {
                field,
                found: theirs,
                table: ours,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_minor_has_a_table() {
        for minor in 6..=13 {
            let t = for_version(Version::new(3, minor, 0)).unwrap();
            assert_eq!(t.version, 0x030000 | u32::from(minor) << 8);
            assert_ne!(t.frame_kind, 0);
            assert_ne!(t.instr_kind, 0);
            assert_ne!(t.line_table, 0);
            assert_ne!(t.code_filename, NONE);
            assert_eq!(t.frame_kind == INTERPRETER_FRAME, minor >= 11);
            assert_eq!(t.code_qualname != NONE, minor >= 11);
            assert_eq!(t.runtime_interpreters_head == NONE, minor == 6);
        }
        assert!(for_version(Version::new(3, 14, 0)).is_err());
        assert!(for_version(Version::new(2, 7, 18)).is_err());
    }

    /// Debug offsets as 3.13.0 publishes them, built from our own table: they agree, and a
    /// single changed field is a loud mismatch naming it.
    #[test]
    fn debug_offsets_mismatch_is_an_error() {
        let v = Version::new(3, 13, 0);
        let t = for_version(v).unwrap();
        let mut bytes = vec![0u8; DEBUG_OFFSETS_BYTES];
        bytes[..8].copy_from_slice(DEBUG_COOKIE);
        let mut put =
            |at: usize, value: u64| bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        put(8, 0x030d00f0);
        for (at, value) in [
            (40, t.runtime_interpreters_head),
            (64, t.interp_next),
            (72, t.interp_threads_head),
            (168, t.tstate_next),
            (176, t.tstate_interp),
            (184, t.tstate_frame),
            (192, t.tstate_thread_id),
            (200, t.tstate_native_thread_id),
            (232, t.frame_back),
            (240, t.frame_code),
            (248, t.frame_instr),
            (264, t.frame_owner),
            (280, t.code_filename),
            (288, t.code_name),
            (296, t.code_qualname),
            (304, t.code_linetable),
            (312, t.code_firstlineno),
            (344, t.code_adaptive),
            (544, t.unicode_state),
            (552, t.unicode_length),
            (360, t.object_type),
            (520, t.bytes_size),
            (528, t.bytes_data),
            (560, t.unicode_ascii_data),
        ] {
            put(at, u64::from(value));
        }
        assert_eq!(check_debug_offsets(&bytes, v, &t), Ok(()));
        let mut wrong = bytes.clone();
        wrong[248] = 64;
        assert_eq!(
            check_debug_offsets(&wrong, v, &t),
            Err(DebugOffsetsError::Mismatch {
                field: "interpreter_frame.instr_ptr",
                found: 64,
                table: 56
            })
        );
        let mut ft = bytes.clone();
        ft[16] = 1;
        assert_eq!(
            check_debug_offsets(&ft, v, &t),
            Err(DebugOffsetsError::FreeThreaded)
        );
        assert!(matches!(
            check_debug_offsets(&bytes, Version::new(3, 12, 1), &t),
            Err(DebugOffsetsError::Version { .. })
        ));
        assert!(matches!(
            check_debug_offsets(&[0; 16], v, &t),
            Err(DebugOffsetsError::Cookie(_))
        ));
    }
}
