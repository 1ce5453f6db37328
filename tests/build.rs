//! Compiles the C fixtures with the flags their headers name, into OUT_DIR.
use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

const FIXTURES: &[(&str, &[&str])] = &[
    ("chain", &["-O1", "-g", "-fno-omit-frame-pointer"]),
    ("touch", &["-O1", "-g", "-pthread"]),
    ("toucher", &["-O1", "-g", "-fno-omit-frame-pointer"]),
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
    (
        "group",
        &["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"],
    ),
    (
        "waits",
        &["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"],
    ),
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
    plt(&out, &dir, &compiler);
    split_debug(&out, &dir, &compiler);
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

fn run(cmd: &mut Command) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed");
}

/// A program calling a shared library's function through its PLT.
fn plt(out: &Path, dir: &Path, compiler: &cc::Tool) {
    for f in ["plt.c", "pltlib.c"] {
        println!("cargo:rerun-if-changed={}", dir.join(f).display());
    }
    run(compiler
        .to_command()
        .args(["-O2", "-g", "-fPIC", "-shared", "-o"])
        .arg(out.join("libpltlib.so"))
        .arg(dir.join("pltlib.c")));
    run(compiler
        .to_command()
        .args(["-O2", "-g", "-o"])
        .arg(out.join("plt"))
        .arg(dir.join("plt.c"))
        .arg("-L")
        .arg(out)
        .args(["-lpltlib", "-Wl,-rpath,$ORIGIN"]));
}

/// `debugged.c` stripped three ways, its debug information shipped as distributions do:
/// `debugged_buildid` with its debug file under `debug-root/.build-id/` (its DWARF
/// compressed, as Debian's `-dbgsym` packages ship it),
/// `debugged_debuglink` with a `.gnu_debuglink` to `debugged_debuglink.debug` beside it,
/// `debugged_minidebug` with MiniDebugInfo (`.gnu_debugdata`, as Fedora makes it).
fn split_debug(out: &Path, dir: &Path, compiler: &cc::Tool) {
    let src = dir.join("debugged.c");
    println!("cargo:rerun-if-changed={}", src.display());
    for variant in ["buildid", "debuglink", "minidebug"] {
        let full = out.join(format!("debugged_{variant}.full"));
        let bin = out.join(format!("debugged_{variant}"));
        run(compiler
            .to_command()
            .args(["-O1", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id"])
            .arg(format!("-DVARIANT=\"{variant}\""))
            .arg("-o")
            .arg(&full)
            .arg(&src));
        match variant {
            "buildid" => {
                let id = build_id(&full);
                let tree = out.join("debug-root/.build-id").join(&id[..2]);
                std::fs::create_dir_all(&tree).unwrap();
                run(Command::new("objcopy")
                    .args(["--only-keep-debug", "--compress-debug-sections=zlib"])
                    .arg(&full)
                    .arg(tree.join(format!("{}.debug", &id[2..]))));
                run(Command::new("strip")
                    .arg("-s")
                    .arg("-o")
                    .arg(&bin)
                    .arg(&full));
            }
            "debuglink" => {
                let debug = out.join("debugged_debuglink.debug");
                run(Command::new("objcopy")
                    .arg("--only-keep-debug")
                    .arg(&full)
                    .arg(&debug));
                run(Command::new("strip")
                    .arg("-s")
                    .arg("-o")
                    .arg(&bin)
                    .arg(&full));
                run(Command::new("objcopy")
                    .current_dir(out)
                    .arg("--add-gnu-debuglink=debugged_debuglink.debug")
                    .arg(&bin));
            }
            _ => mini_debuginfo(out, &full, &bin),
        }
    }
}

/// The build id `readelf -n` prints for `file`, in hex.
fn build_id(file: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .unwrap_or_else(|| panic!("{} has no build id", file.display()))
}

/// Fedora's recipe: the function symbols the dynamic table lacks, in an xz-compressed
/// symbol-only ELF file, added to the stripped binary as `.gnu_debugdata`.
fn mini_debuginfo(out: &Path, full: &Path, bin: &Path) {
    let names = |dynamic: bool| -> std::collections::BTreeSet<String> {
        let mut nm = Command::new("nm");
        if dynamic {
            nm.arg("-D");
        }
        let o = nm
            .args(["--format=posix", "--defined-only"])
            .arg(full)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (name, kind) = (f.next()?, f.next()?);
                (dynamic || matches!(kind, "T" | "t" | "D")).then(|| name.to_string())
            })
            .collect()
    };
    let dynsyms = names(true);
    let keep: Vec<String> = names(false).difference(&dynsyms).cloned().collect();
    let keep_file = out.join("minidebug.keep");
    std::fs::write(&keep_file, keep.join("\n") + "\n").unwrap();
    let debug = out.join("minidebug.debug");
    let mini = out.join("minidebug.mini");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(full)
        .arg(&debug));
    run(Command::new("objcopy")
        .args([
            "-S",
            "--remove-section",
            ".gdb_index",
            "--remove-section",
            ".comment",
        ])
        .arg(format!("--keep-symbols={}", keep_file.display()))
        .arg(&debug)
        .arg(&mini));
    let _ = std::fs::remove_file(out.join("minidebug.mini.xz"));
    run(Command::new("xz").arg("-k").arg(&mini));
    run(Command::new("strip")
        .args(["--strip-all", "-R", ".comment", "-o"])
        .arg(bin)
        .arg(full));
    run(Command::new("objcopy")
        .arg(format!(
            "--add-section=.gnu_debugdata={}",
            out.join("minidebug.mini.xz").display()
        ))
        .arg(bin));
}
