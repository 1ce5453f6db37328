//! Detection on every CPython installed here, each run as a real (sleeping) process.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::*;
use crate::{modules::exec_mappings, runtimes::python::test_support::interpreters};

/// A process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `python` on a script that says when it is up, and waits for that (with a deadline),
/// so its maps hold the interpreter.
fn start(python: &Path) -> Running {
    let mut child = Command::new(python)
        .args([
            "-c",
            "import sys, time; print('up', flush=True); time.sleep(60)",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn python");
    let mut out = child.stdout.take().expect("stdout");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut byte = [0u8; 1];
    use std::io::Read;
    while out.read(&mut byte).map(|n| n == 1).unwrap_or(false) && byte[0] != b'\n' {
        assert!(Instant::now() < deadline, "python never came up");
    }
    Running(child)
}

#[test]
fn finds_every_installed_interpreter() {
    let found = interpreters();
    if found.is_empty() {
        eprintln!("skipped: no CPython 3.6-3.13 installed");
        return;
    }
    for (python, version) in found {
        let p = start(&python);
        let what = python.display().to_string();
        let Detection::Found(i) = detect(p.0.id()).expect("detect") else {
            panic!("{what}: not found");
        };
        let debian = what.starts_with("/usr/bin");
        assert_eq!(i.version, version, "{what}");
        assert_eq!(i.offsets.version, version.packed(), "{what}");
        assert!(
            i.path
                .contains(if debian { "python3.11" } else { "libpython" }),
            "{what}"
        );
        let s = &i.symbols;
        assert!(
            s.eval.end > s.eval.start && s.eval.start > i.bias,
            "{what}: {s:?}"
        );
        assert!(s.code_type > i.bias, "{what}");
        assert_eq!(s.runtime.is_some(), version.minor >= 7, "{what}");
        // .cold parts are local symbols: in pyenv's .symtab, not in Debian's stripped binary.
        if version.minor == 11 || version.minor == 12 {
            assert_eq!(s.eval_cold.is_some(), !debian, "{what}: {s:?}");
        }
        assert_eq!(s.tls_tstate.is_some(), version.minor >= 12, "{what}: {s:?}");
        assert_eq!(s.interp_head.is_some(), version.minor == 6, "{what}: {s:?}");
        assert_eq!(
            s.tstate_current.is_some(),
            version.minor == 6,
            "{what}: {s:?}"
        );
        assert!(i.in_eval(s.eval.start) && !i.in_eval(s.eval.end), "{what}");
        if let Some(cold) = &s.eval_cold {
            assert!(i.in_eval(cold.start) && cold.end > cold.start, "{what}");
        }
        // The eval loop's address is where the process's own maps put code.
        let maps = exec_mappings(p.0.id()).unwrap();
        assert!(
            maps.iter()
                .any(|m| m.start <= s.eval.start && s.eval.end <= m.end && *m.name == *i.path),
            "{what}: eval loop outside the mapping"
        );
        eprintln!("{what}: {} at bias {:#x}", i.version, i.bias);
    }
}

/// A shared build's executable, looked at before the loader maps its libpython (a command
/// just exec'd), is not a Python to warn about; a static build's executable is the
/// interpreter itself.
#[test]
fn a_shared_builds_executable_is_a_launcher() {
    let found = interpreters();
    if found.is_empty() {
        eprintln!("skipped: no CPython 3.6-3.13 installed");
        return;
    }
    for (python, _) in found {
        let data = std::fs::read(&python).expect("read the executable");
        let obj = object::File::parse(&*data).expect("parse");
        let exe = python.canonicalize().unwrap();
        let dir = exe.parent().and_then(Path::parent).unwrap().join("lib");
        let shared = std::fs::read_dir(&dir).is_ok_and(|mut d| {
            d.any(|e| {
                e.is_ok_and(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with("libpython3.") && n.contains(".so")
                })
            })
        }) && !python.starts_with("/usr/bin");
        assert_eq!(is_launcher(&obj), shared, "{}", python.display());
    }
}

#[test]
fn python_2_is_unsupported_with_a_reason() {
    let root = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let python = Path::new(&root).join(".pyenv/versions/2.7.18/bin/python2.7");
    if !python.exists() {
        eprintln!("skipped: {} is not installed", python.display());
        return;
    }
    let mut child = Command::new(&python)
        .args([
            "-c",
            "import sys, time; sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(60)",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = child.stdout.take().unwrap();
    let mut line = [0u8; 3];
    use std::io::Read;
    out.read_exact(&mut line).unwrap();
    let p = Running(child);
    match detect(p.0.id()).unwrap() {
        Detection::Unsupported { reason, .. } => assert_eq!(
            reason.to_string(),
            "Python 2.7.18: only Python 3.6 to 3.13 are supported"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_process_without_python_is_not_python() {
    assert!(matches!(
        detect(std::process::id()).unwrap(),
        Detection::NotPython
    ));
}

/// 3.13's own `_Py_DebugOffsets`, read from a live process, agree with our table; the same
/// bytes against a table with one field moved are a loud error naming it.
#[test]
fn live_debug_offsets_check_the_table() {
    use crate::runtimes::{
        python::offsets::{DEBUG_OFFSETS_BYTES, DebugOffsetsError, check_debug_offsets},
        shared::memory::{Memory, ProcessMemory},
    };
    let Some((python, version)) = interpreters().into_iter().find(|(_, v)| v.minor >= 13) else {
        eprintln!("skipped: no Python 3.13 installed");
        return;
    };
    let p = start(&python);
    let Detection::Found(i) = detect(p.0.id()).unwrap() else {
        panic!("{}: not found", python.display())
    };
    let mut bytes = vec![0u8; DEBUG_OFFSETS_BYTES];
    ProcessMemory::new(p.0.id())
        .read(i.symbols.runtime.unwrap(), &mut bytes)
        .unwrap();
    assert_eq!(check_debug_offsets(&bytes, version, &i.offsets), Ok(()));
    let mut wrong = i.offsets;
    wrong.tstate_frame += 8;
    assert!(matches!(
        check_debug_offsets(&bytes, version, &wrong),
        Err(DebugOffsetsError::Mismatch {
            field: "thread_state.current_frame",
            ..
        })
    ));
}

#[test]
fn picks_the_versioned_libpython_over_the_stable_abi_stub() {
    let maps = crate::modules::parse_maps(
        "\
55d0c0001000-55d0c0005000 r-xp 00001000 08:01 1 /opt/py/bin/python3.12
7f0000001000-7f0000002000 r-xp 00001000 08:01 2 /opt/py/lib/libpython3.so
7f0000101000-7f0000502000 r-xp 00100000 08:01 3 /opt/py/lib/libpython3.12.so.1.0
",
    );
    let pick = |exe| pick_mapping(&maps, exe).map(|m| m.name.to_string());
    assert_eq!(
        pick(Some("/opt/py/bin/python3.12")).as_deref(),
        Some("/opt/py/lib/libpython3.12.so.1.0")
    );
    let static_build = crate::modules::parse_maps(
        "55d0c0001000-55d0c0005000 r-xp 00001000 08:01 1 /usr/bin/python3.11\n",
    );
    assert_eq!(
        pick_mapping(&static_build, Some("/usr/bin/python3.11")).map(|m| m.ino),
        Some(1)
    );
    assert_eq!(pick_mapping(&static_build, Some("/usr/bin/other")), None);
    let stub_only = crate::modules::parse_maps(
        "7f0000001000-7f0000002000 r-xp 00001000 08:01 2 /opt/py/lib/libpython3.so\n",
    );
    assert_eq!(pick_mapping(&stub_only, Some("/usr/bin/rust-app")), None);
}
