//! The offsets table against the DWARF of each installed libpython that carries it (pyenv's
//! builds): every field the walker reads is `offsetof` the struct member gdb names, and a
//! field the table marks absent is a member this version does not have.

use std::{path::PathBuf, process::Command};

use profiler_common::python::{NONE, PythonOffsets};

use super::{offsets::for_version, test_support::interpreters};

const IFRAME: &str = "((struct _PyInterpreterFrame*)0)";
const FRAME: &str = "((PyFrameObject*)0)";
const TS: &str = "((PyThreadState*)0)";
const INTERP: &str = "((PyInterpreterState*)0)";
const RT: &str = "((_PyRuntimeState*)0)";
const CODE: &str = "((PyCodeObject*)0)";

/// Each field, and the C expressions of its offset in the versions that have it, in the
/// order tried (the first one gdb can evaluate is the member this version has).
fn fields(t: &PythonOffsets) -> Vec<(&'static str, u16, Vec<String>)> {
    let f = |s: &str, m: &str| format!("&{s}->{m}");
    vec![
        (
            "runtime_interpreters_head",
            t.runtime_interpreters_head,
            vec![f(RT, "interpreters.head")],
        ),
        (
            "runtime_tstate_current",
            t.runtime_tstate_current,
            vec![f(RT, "gilstate.tstate_current")],
        ),
        (
            "runtime_tss_key",
            t.runtime_tss_key,
            vec![f(RT, "gilstate.autoTSSkey"), f(RT, "autoTSSkey")],
        ),
        ("interp_next", t.interp_next, vec![f(INTERP, "next")]),
        (
            "interp_threads_head",
            t.interp_threads_head,
            vec![f(INTERP, "tstate_head"), f(INTERP, "threads.head")],
        ),
        ("tstate_next", t.tstate_next, vec![f(TS, "next")]),
        ("tstate_interp", t.tstate_interp, vec![f(TS, "interp")]),
        (
            "tstate_frame",
            t.tstate_frame,
            vec![f(TS, "frame"), f(TS, "cframe"), f(TS, "current_frame")],
        ),
        (
            "cframe_current_frame",
            t.cframe_current_frame,
            vec![f("((_PyCFrame*)0)", "current_frame")],
        ),
        (
            "tstate_thread_id",
            t.tstate_thread_id,
            vec![f(TS, "thread_id")],
        ),
        (
            "tstate_native_thread_id",
            t.tstate_native_thread_id,
            vec![f(TS, "native_thread_id")],
        ),
        (
            "frame_back",
            t.frame_back,
            vec![f(IFRAME, "previous"), f(FRAME, "f_back")],
        ),
        (
            "frame_code",
            t.frame_code,
            vec![
                f(IFRAME, "f_code"),
                f(IFRAME, "f_executable"),
                f(FRAME, "f_code"),
            ],
        ),
        (
            "frame_instr",
            t.frame_instr,
            vec![
                f(IFRAME, "prev_instr"),
                f(IFRAME, "instr_ptr"),
                f(FRAME, "f_lasti"),
            ],
        ),
        ("frame_owner", t.frame_owner, vec![f(IFRAME, "owner")]),
        (
            "frame_is_entry",
            t.frame_is_entry,
            vec![f(IFRAME, "is_entry")],
        ),
        (
            "code_filename",
            t.code_filename,
            vec![f(CODE, "co_filename")],
        ),
        ("code_name", t.code_name, vec![f(CODE, "co_name")]),
        (
            "code_qualname",
            t.code_qualname,
            vec![f(CODE, "co_qualname")],
        ),
        (
            "code_firstlineno",
            t.code_firstlineno,
            vec![f(CODE, "co_firstlineno")],
        ),
        (
            "code_linetable",
            t.code_linetable,
            vec![f(CODE, "co_linetable"), f(CODE, "co_lnotab")],
        ),
        ("code_code", t.code_code, vec![f(CODE, "co_code")]),
        (
            "code_adaptive",
            t.code_adaptive,
            vec![f(CODE, "co_code_adaptive")],
        ),
        (
            "code_firsttraceable",
            t.code_firsttraceable,
            vec![f(CODE, "_co_firsttraceable")],
        ),
        (
            "bytes_size",
            t.bytes_size,
            vec![f("((PyVarObject*)0)", "ob_size")],
        ),
        (
            "bytes_data",
            t.bytes_data,
            vec![f("((PyBytesObject*)0)", "ob_sval")],
        ),
        (
            "unicode_length",
            t.unicode_length,
            vec![f("((PyASCIIObject*)0)", "length")],
        ),
        (
            "unicode_state",
            t.unicode_state,
            vec![f("((PyASCIIObject*)0)", "state")],
        ),
        (
            "unicode_ascii_data",
            t.unicode_ascii_data,
            vec!["sizeof(PyASCIIObject)".into()],
        ),
        (
            "unicode_compact_data",
            t.unicode_compact_data,
            vec!["sizeof(PyCompactUnicodeObject)".into()],
        ),
        (
            "object_type",
            t.object_type,
            vec![f("((PyObject*)0)", "ob_type")],
        ),
    ]
}

/// The shared libpython next to a pyenv `bin/pythonX.Y`.
fn libpython(python: &std::path::Path) -> Option<PathBuf> {
    let lib = python.parent()?.parent()?.join("lib");
    std::fs::read_dir(lib)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libpython3.") && n.ends_with(".so.1.0"))
        })
}

#[test]
fn table_matches_the_dwarf_of_every_installed_libpython() {
    if Command::new("gdb").arg("--version").output().is_err() {
        eprintln!("skipped: no gdb");
        return;
    }
    let mut checked = 0;
    for (python, version) in interpreters() {
        let Some(lib) = libpython(&python) else {
            eprintln!(
                "skipped {}: no shared libpython with DWARF beside it",
                python.display()
            );
            continue;
        };
        let table = for_version(version).unwrap();
        let fields = fields(&table);
        let mut cmd = Command::new("gdb");
        cmd.args(["-batch", "-nx"]);
        for (i, (_, _, exprs)) in fields.iter().enumerate() {
            for (j, e) in exprs.iter().enumerate() {
                cmd.arg("-ex")
                    .arg(format!("printf \"{i}/{j} %d\\n\", (long)({e})"));
            }
        }
        let out = cmd.arg(&lib).output().expect("gdb");
        let text = String::from_utf8_lossy(&out.stdout);
        let value = |i: usize, j: usize| {
            text.lines().find_map(|l| {
                let (key, v) = l.split_once(' ')?;
                (key == format!("{i}/{j}"))
                    .then(|| v.parse::<i64>().ok())
                    .flatten()
            })
        };
        assert!(
            value(5, 0) == Some(8),
            "{}: gdb read no DWARF: {text}",
            lib.display()
        );
        for (i, (name, ours, exprs)) in fields.iter().enumerate() {
            let dwarf = (0..exprs.len()).find_map(|j| value(i, j));
            let expected = dwarf.map(|d| u16::try_from(d).expect("small offset"));
            assert_eq!(
                (*ours != NONE).then_some(*ours),
                expected,
                "{} ({version}): {name}",
                lib.display()
            );
        }
        checked += 1;
        eprintln!(
            "{} ({version}): {} fields agree with DWARF",
            lib.display(),
            fields.len()
        );
    }
    eprintln!("{checked} libpython builds checked");
}
