//! Compiles the C fixtures with the flags their headers name, into OUT_DIR.
use std::{env, path::PathBuf};

const FIXTURES: &[(&str, &[&str])] = &[
    ("chain", &["-O1", "-g", "-fno-omit-frame-pointer"]),
    ("touch", &["-O1", "-g", "-pthread"]),
    ("forker", &["-O1", "-g"]),
    ("idle", &["-O1", "-g"]),
    ("spin", &["-O1", "-g", "-pthread"]),
    ("jit", &["-O1", "-g"]),
    ("crowd", &["-O1", "-g", "-pthread"]),
];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    for (name, flags) in FIXTURES {
        let src = dir.join(format!("{name}.c"));
        println!("cargo:rerun-if-changed={}", src.display());
        let status = compiler
            .to_command()
            .args(*flags)
            .arg("-o")
            .arg(out.join(name))
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("cannot run the C compiler for {name}: {e}"));
        assert!(status.success(), "compiling fixture {name} failed");
    }
}
