//! Compiles the C fixtures with the flags their headers name, into OUT_DIR.
use std::{env, path::PathBuf};

const FIXTURES: &[(&str, &[&str])] = &[
    ("chain", &["-O1", "-g", "-fno-omit-frame-pointer"]),
    ("touch", &["-O1", "-g", "-pthread"]),
    ("forker", &["-O1", "-g"]),
    ("idle", &["-O1", "-g"]),
    ("spin", &["-O1", "-g", "-pthread"]),
    ("jit", &["-O1", "-g"]),
    ("nofp", &["-O2", "-g", "-fomit-frame-pointer"]),
    (
        "nofplib",
        &["-O2", "-g", "-fomit-frame-pointer", "-fPIC", "-shared"],
    ),
    ("crowd", &["-O1", "-g", "-pthread"]),
];

/// Rust fixtures, built as `cargo build --release` builds (no frame pointers).
const RUST_FIXTURES: &[(&str, &[&str])] = &[("chain_rs", &["-O"])];

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
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    for (name, flags) in RUST_FIXTURES {
        let src = dir.join(format!("{name}.rs"));
        println!("cargo:rerun-if-changed={}", src.display());
        let status = std::process::Command::new(&rustc)
            .args(*flags)
            .arg("--edition=2021")
            .arg("-o")
            .arg(out.join(name))
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("cannot run rustc for {name}: {e}"));
        assert!(status.success(), "compiling fixture {name} failed");
    }
}
