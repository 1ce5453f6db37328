//! `cargo xtask install --prefix DIR`: a release build of the profiler, libcpc and libperfmon,
//! installed as PREFIX/bin/profiler, PREFIX/lib/libcpc.so.1 (+ the libcpc.so link),
//! PREFIX/include/libcpc.h, PREFIX/lib/pkgconfig/libcpc.pc, PREFIX/lib/libperfmon.so (the
//! LD_PRELOAD shim) and PREFIX/include/perfmon.h (+ include/machine/perfmon.h and the
//! include/machine/cpu.h FreeBSD programs include); then the man pages and shell completions
//! under PREFIX/share, written by the installed profiler itself (`profiler __docs`: the
//! clap-generated pages, the hand-written ones in man/, completions for bash, zsh and fish).

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::Context as _;

use crate::util::{cargo, workspace_root};

/// libcpc's soname, as Solaris names it (set by libcpc/build.rs).
pub const SONAME: &str = "libcpc.so.1";

pub fn install(prefix: &Path) -> anyhow::Result<()> {
    crate::setup::setup()?;
    cargo(&[
        "build",
        "--release",
        "-p",
        "profiler",
        "-p",
        "libcpc",
        "-p",
        "libperfmon",
    ])?;
    let root = workspace_root();
    let prefix =
        std::path::absolute(prefix).with_context(|| format!("prefix {}", prefix.display()))?;
    let installed = install_files(&root.join("target/release"), &root, &prefix)?;
    for p in installed {
        eprintln!("installed {}", p.display());
    }
    install_docs(&prefix)
}

/// The man pages and completions, by the installed binary (so they are its own parser's).
fn install_docs(prefix: &Path) -> anyhow::Result<()> {
    let out = crate::util::output(
        std::process::Command::new(prefix.join("bin/profiler"))
            .arg("__docs")
            .arg(prefix.join("share")),
    )?;
    if !out.status.success() {
        anyhow::bail!(
            "profiler __docs failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    for p in String::from_utf8_lossy(&out.stdout).lines() {
        eprintln!("installed {p}");
    }
    Ok(())
}

/// Copies the built files from `built` (a target profile directory) and the header from the
/// workspace `root` under `prefix`; returns what it wrote.
pub fn install_files(built: &Path, root: &Path, prefix: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let (bin, lib, inc, pc) = (
        prefix.join("bin"),
        prefix.join("lib"),
        prefix.join("include"),
        prefix.join("lib/pkgconfig"),
    );
    let machine = inc.join("machine");
    for d in [&bin, &lib, &inc, &pc, &machine] {
        fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let copy = |from: PathBuf, to: PathBuf| -> anyhow::Result<PathBuf> {
        fs::copy(&from, &to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
        Ok(to)
    };
    let mut out = vec![
        copy(built.join("profiler"), bin.join("profiler"))?,
        copy(built.join("libcpc.so"), lib.join(SONAME))?,
        copy(root.join("libcpc/include/libcpc.h"), inc.join("libcpc.h"))?,
    ];
    let link = lib.join("libcpc.so");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(SONAME, &link)
        .with_context(|| format!("linking {}", link.display()))?;
    out.push(link);
    let pc_file = pc.join("libcpc.pc");
    fs::write(&pc_file, pkg_config(prefix))
        .with_context(|| format!("writing {}", pc_file.display()))?;
    out.push(pc_file);
    // perfmon(4) for FreeBSD programs: the preload library and the header, where FreeBSD
    // programs include it too.
    out.push(copy(
        built.join("libperfmon.so"),
        lib.join("libperfmon.so"),
    )?);
    out.push(copy(
        root.join("libperfmon/include/perfmon.h"),
        inc.join("perfmon.h"),
    )?);
    out.push(copy(
        root.join("libperfmon/include/machine/perfmon.h"),
        machine.join("perfmon.h"),
    )?);
    out.push(copy(
        root.join("libperfmon/include/machine/cpu.h"),
        machine.join("cpu.h"),
    )?);
    Ok(out)
}

/// The pkg-config file for `prefix`.
pub fn pkg_config(prefix: &Path) -> String {
    format!(
        "prefix={}\n\
         libdir=${{prefix}}/lib\n\
         includedir=${{prefix}}/include\n\
         \n\
         Name: libcpc\n\
         Description: CPU performance counters, the Solaris libcpc(3LIB) API on Linux perf events\n\
         Version: {}\n\
         Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lcpc\n\
         Cflags: -I${{includedir}}\n",
        prefix.display(),
        env!("CARGO_PKG_VERSION")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_the_tree_and_pkg_config_finds_it() {
        let tmp = std::env::temp_dir().join(format!("xtask-install-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let built = tmp.join("built");
        fs::create_dir_all(&built).unwrap();
        fs::write(built.join("profiler"), b"bin").unwrap();
        fs::write(built.join("libcpc.so"), b"lib").unwrap();
        fs::write(built.join("libperfmon.so"), b"shim").unwrap();
        let prefix = tmp.join("prefix");
        let files = install_files(&built, &workspace_root(), &prefix).unwrap();
        let rel: Vec<String> = files
            .iter()
            .map(|p| p.strip_prefix(&prefix).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            [
                "bin/profiler",
                "lib/libcpc.so.1",
                "include/libcpc.h",
                "lib/libcpc.so",
                "lib/pkgconfig/libcpc.pc",
                "lib/libperfmon.so",
                "include/perfmon.h",
                "include/machine/perfmon.h",
                "include/machine/cpu.h"
            ]
        );
        assert_eq!(fs::read(prefix.join("lib/libperfmon.so")).unwrap(), b"shim");
        // A FreeBSD program's include compiles against the installed tree.
        let src = tmp.join("uses_perfmon.c");
        fs::write(
            &src,
            "#include <machine/cpu.h>\n#include <machine/perfmon.h>\n#include <stdlib.h>\n\
             static void usage(void) __dead2;\n\
             static void usage(void) { exit(2); }\n\
             int main(int argc, char **argv) { struct pmc p = {0}; p.pmc_flags = PMCF_USR; \
             (void)argv; if (argc > 1) usage(); \
             return (int)sizeof p + (PMIOSETUP != 0) - 9 + p.pmc_event \
             + (_PATH_PERFMON[5] != 'p'); }\n",
        )
        .unwrap();
        if let Ok(s) = std::process::Command::new("cc")
            .arg("-Wall")
            .arg("-Werror")
            .arg("-I")
            .arg(prefix.join("include"))
            .arg("-o")
            .arg(tmp.join("uses_perfmon"))
            .arg(&src)
            .status()
        {
            assert!(s.success(), "cc with the installed <machine/perfmon.h>");
            let rc = std::process::Command::new(tmp.join("uses_perfmon"))
                .status()
                .unwrap();
            assert_eq!(rc.code(), Some(0));
        }
        assert_eq!(fs::read(prefix.join("lib/libcpc.so")).unwrap(), b"lib");
        assert!(
            fs::read_to_string(prefix.join("include/libcpc.h"))
                .unwrap()
                .contains("#define CPC_VER_CURRENT 2")
        );
        // pkg-config itself reads the file, where the host has it.
        let o = std::process::Command::new("pkg-config")
            .args(["--cflags", "--libs", "libcpc"])
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
            .output();
        if let Ok(o) = o {
            let p = prefix.display();
            assert_eq!(
                String::from_utf8_lossy(&o.stdout).trim(),
                format!("-I{p}/include -L{p}/lib -Wl,-rpath,{p}/lib -lcpc")
            );
        }
        fs::remove_dir_all(&tmp).unwrap();
    }
}
