//! The decoders against the interpreters themselves: every instruction offset of every code
//! object of real standard-library modules, with each Python installed here.

use std::{path::PathBuf, process::Command};

use super::*;
use crate::runtimes::python::test_support::interpreters;

const DUMP: &str = include_str!("../testdata/dump_lines.py");
const MODULES: &[&str] = &[
    "difflib",
    "json.decoder",
    "json.encoder",
    "tokenize",
    "argparse",
    "textwrap",
    "inspect",
    "collections",
];

fn format_for(minor: u8) -> u8 {
    match minor {
        ..=9 => LNOTAB,
        10 => LINETABLE_310,
        _ => LOCATIONS_311,
    }
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Runs the dump script with `python` and checks every offset; returns the offsets checked.
fn check_interpreter(python: &PathBuf, minor: u8) -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("dump_lines.py");
    std::fs::write(&script, DUMP).expect("write script");
    let out = Command::new(python)
        .arg("-I")
        .arg(&script)
        .args(MODULES)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}: {}",
        python.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let format = format_for(minor);
    let mut checked = 0;
    let mut codes = 0;
    for line in String::from_utf8(out.stdout).expect("utf-8").lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json");
        let table = hex(v["table"].as_str().expect("table"));
        let first = v["first"].as_i64().expect("first") as i32;
        let api = v["api"].as_array();
        for (unit, want) in v["lines"].as_array().expect("lines").iter().enumerate() {
            let want = want.as_i64().map(|l| l as i32);
            let got = line_of(format, &table, first, 2 * unit as u32);
            assert_eq!(
                got,
                want,
                "{} {}: {}.{} offset {}",
                python.display(),
                v["module"],
                v["name"],
                first,
                2 * unit
            );
            if let Some(api) = api {
                assert_eq!(
                    got,
                    api[unit].as_i64().map(|l| l as i32),
                    "{} {}: {} offset {} (co_positions/co_lines)",
                    python.display(),
                    v["module"],
                    v["name"],
                    2 * unit
                );
            }
            checked += 1;
        }
        codes += 1;
    }
    assert!(
        codes > 500,
        "{}: only {codes} code objects",
        python.display()
    );
    checked
}

#[test]
fn decoders_match_every_installed_interpreter() {
    let found = interpreters();
    if found.is_empty() {
        eprintln!("skipped: no CPython 3.6-3.13 installed (pyenv or /usr/bin/python3.11)");
        return;
    }
    for (python, version) in found {
        let n = check_interpreter(&python, version.minor);
        eprintln!(
            "{} ({version}): {n} instruction offsets agree",
            python.display()
        );
    }
}

#[test]
fn formats_by_hand() {
    // lnotab: +6 bytes → +1 line, +4 bytes → -2 lines (signed since 3.6).
    let t = [6, 1, 4, 0xfe];
    assert_eq!(line_of(LNOTAB, &t, 10, 0), Some(10));
    assert_eq!(line_of(LNOTAB, &t, 10, 6), Some(11));
    assert_eq!(line_of(LNOTAB, &t, 10, 10), Some(9));
    // 3.10: [0,4) line+1, [4,6) no line, [6,8) line+2 (from the running line 11).
    let t = [4, 1, 2, 0x80, 2, 2];
    assert_eq!(line_of(LINETABLE_310, &t, 10, 0), Some(11));
    assert_eq!(line_of(LINETABLE_310, &t, 10, 4), None);
    assert_eq!(line_of(LINETABLE_310, &t, 10, 6), Some(13));
    assert_eq!(line_of(LINETABLE_310, &t, 10, 8), None);
    // 3.11: a 1-unit no-columns entry with line delta -3 (signed varint 7), then a 2-unit
    // one-line entry (+1), then a no-location entry.
    let t = [0x80 | 13 << 3, 7, 0x80 | 11 << 3 | 1, 4, 8, 0x80 | 15 << 3];
    assert_eq!(line_of(LOCATIONS_311, &t, 10, 0), Some(7));
    assert_eq!(line_of(LOCATIONS_311, &t, 10, 2), Some(8));
    assert_eq!(line_of(LOCATIONS_311, &t, 10, 4), Some(8));
    assert_eq!(line_of(LOCATIONS_311, &t, 10, 6), None);
    assert_eq!(line_of(LOCATIONS_311, &[0x42], 10, 0), None);
}

/// Garbage tables (a code object read while it is freed, a hostile process) end in a line
/// or `None`, never a panic or a loop.
#[test]
fn garbage_tables_never_panic() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let len = (next() % 64) as usize;
        let table: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let offset = (next() % 512) as u32;
        for format in [LNOTAB, LINETABLE_310, LOCATIONS_311, 0] {
            let _ = line_of(format, &table, (next() % 5000) as i32, offset);
        }
    }
    // Long varints stop at 32 bits instead of shifting out.
    let t = [0x80 | 13 << 3, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x01];
    assert_eq!(line_of(LOCATIONS_311, &t, 1, 0), None);
}
