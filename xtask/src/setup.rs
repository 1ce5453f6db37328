//! `cargo xtask setup`: installs the eBPF toolchain a fresh machine lacks, following the
//! verified recipe: nightly's `rust-src`, and `bpf-linker` linked against the nightly
//! toolchain's own libLLVM (its major read from `rustc +nightly -vV`). Idempotent: it checks
//! first and only installs what is missing. `--target aarch64` also installs what the
//! cross build and the arm64 guests need ([`ensure_cross`]).

use std::{fs, path::PathBuf, process::Command};

use anyhow::{Context as _, anyhow, bail};

use crate::{
    arch::Arch,
    util::{output, run},
};

const BPF_LINKER_VERSION: &str = "0.13.0";

/// `cargo xtask setup [--target ARCH]`: [`setup`], and for another architecture what its
/// cross build and its kernels' guests need too.
pub fn setup_for(arch: Option<Arch>) -> anyhow::Result<()> {
    setup()?;
    if let Some(arch) = arch {
        ensure_cross(arch)?;
        crate::packages::ensure_minimal(crate::packages::kernels(arch))?;
    }
    Ok(())
}

/// What setup found or did, one line each.
pub fn setup() -> anyhow::Result<Vec<String>> {
    let mut did = Vec::new();
    which("rustup").context("rustup is required to manage the nightly toolchain")?;
    ensure_nightly(&mut did)?;
    ensure_rust_src(&mut did)?;
    let llvm = nightly_llvm_major()?;
    ensure_bpf_linker(llvm, &mut did)?;
    which("cc").context("a C compiler (`cc`) is required to build the test fixtures")?;
    if did.is_empty() {
        eprintln!("setup: everything present (nightly, rust-src, bpf-linker for LLVM {llvm})");
    } else {
        for line in &did {
            eprintln!("setup: {line}");
        }
    }
    Ok(did)
}

/// What building for `arch` needs on this machine, besides [`setup`]: Rust's standard
/// library for the target, Debian's cross compiler and C library (the linker, the fixtures,
/// the guests' shared libraries). Nothing for the host's own.
pub fn ensure_cross(arch: Arch) -> anyhow::Result<()> {
    if arch.is_host() {
        return Ok(());
    }
    ensure_rust_target(arch)?;
    crate::packages::ensure_minimal(crate::packages::cross(arch))
}

fn ensure_rust_target(arch: Arch) -> anyhow::Result<()> {
    let list = output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if String::from_utf8_lossy(&list.stdout)
        .lines()
        .any(|l| l.trim() == arch.triple())
    {
        return Ok(());
    }
    run(Command::new("rustup").args(["target", "add", arch.triple()]))
        .with_context(|| format!("installing Rust's standard library for {}", arch.triple()))?;
    eprintln!("setup: installed the Rust target {}", arch.triple());
    Ok(())
}

fn which(tool: &str) -> anyhow::Result<()> {
    let ok = output(Command::new(tool).arg("--version"))
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(anyhow!("`{tool}` not found on PATH"))
    }
}

fn ensure_nightly(did: &mut Vec<String>) -> anyhow::Result<()> {
    let list = output(Command::new("rustup").args(["toolchain", "list"]))?;
    if String::from_utf8_lossy(&list.stdout)
        .lines()
        .any(|l| l.starts_with("nightly"))
    {
        return Ok(());
    }
    run(Command::new("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]))
        .context("installing the nightly toolchain")?;
    did.push("installed the nightly toolchain".into());
    Ok(())
}

fn ensure_rust_src(did: &mut Vec<String>) -> anyhow::Result<()> {
    let list = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))?;
    if String::from_utf8_lossy(&list.stdout)
        .lines()
        .any(|l| l.starts_with("rust-src"))
    {
        return Ok(());
    }
    run(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
        .context("installing nightly's rust-src (needed for -Z build-std=core)")?;
    did.push("installed rust-src for nightly".into());
    Ok(())
}

/// The LLVM major of the nightly toolchain, from `rustc +nightly -vV`.
pub fn nightly_llvm_major() -> anyhow::Result<u32> {
    let out = output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    parse_llvm_major(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| anyhow!("cannot read the LLVM version from `rustc +nightly -vV`"))
}

fn parse_llvm_major(verbose_version: &str) -> Option<u32> {
    let line = verbose_version
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))?;
    line.split('.').next()?.trim().parse().ok()
}

fn nightly_sysroot() -> anyhow::Result<PathBuf> {
    let out = output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?;
    if !out.status.success() {
        bail!("`rustc +nightly --print sysroot` failed");
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Where the libLLVM symlinks live; bpf-linker's RUNPATH points here, so it keeps working.
fn llvm_prefix(major: u32) -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").ok_or_else(|| anyhow!("HOME is not set"))?;
    Ok(PathBuf::from(home).join(format!(".cache/profiler/llvm-{major}")))
}

/// A bpf-linker that runs and was built against `major` (or whose LLVM cannot be told,
/// e.g. one linked statically, which we accept as the user's choice).
fn bpf_linker_ok(major: u32) -> bool {
    let runs = output(Command::new("rustup").args(["run", "nightly", "bpf-linker", "--version"]))
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !runs {
        return false;
    }
    let path = output(Command::new("rustup").args(["run", "nightly", "which", "bpf-linker"]))
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match path
        .and_then(|p| fs::read(p).ok())
        .and_then(|b| linked_llvm_major(&b))
    {
        Some(linked) => linked == major,
        None => true,
    }
}

/// The major in a dynamically linked `libLLVM.so.<major>` / `libLLVM-<major>` dependency.
fn linked_llvm_major(binary: &[u8]) -> Option<u32> {
    for pat in [&b"libLLVM.so."[..], &b"libLLVM-"[..]] {
        if let Some(i) = binary.windows(pat.len()).position(|w| w == pat) {
            let digits: String = binary[i + pat.len()..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .map(|&b| b as char)
                .collect();
            if let Ok(m) = digits.parse() {
                return Some(m);
            }
        }
    }
    None
}

fn ensure_bpf_linker(major: u32, did: &mut Vec<String>) -> anyhow::Result<()> {
    if bpf_linker_ok(major) {
        return Ok(());
    }
    let sysroot = nightly_sysroot()?;
    let prefix = llvm_prefix(major)?;
    let lib = prefix.join("lib");
    fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    let mut versioned = None;
    for entry in fs::read_dir(sysroot.join("lib")).context("reading the nightly sysroot")? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("libLLVM") && name.contains(".so") {
            let link = lib.join(&name);
            let _ = fs::remove_file(&link);
            std::os::unix::fs::symlink(entry.path(), &link)?;
            if name.starts_with(&format!("libLLVM.so.{major}")) {
                versioned = Some(entry.path());
            }
        }
    }
    let versioned = versioned.ok_or_else(|| {
        anyhow!(
            "no libLLVM.so.{major}* in {}/lib: is the nightly toolchain complete?",
            sysroot.display()
        )
    })?;
    let plain = lib.join("libLLVM.so");
    let _ = fs::remove_file(&plain);
    std::os::unix::fs::symlink(&versioned, &plain)?;
    run(Command::new("cargo")
        .args([
            "install",
            "bpf-linker",
            "--version",
            BPF_LINKER_VERSION,
            "--force",
        ])
        .args([
            "--no-default-features",
            "--features",
            &format!("llvm-{major}"),
        ])
        .env("LLVM_PREFIX", &prefix))
    .with_context(|| {
        format!("building bpf-linker {BPF_LINKER_VERSION} against nightly's LLVM {major}")
    })?;
    if !bpf_linker_ok(major) {
        bail!(
            "bpf-linker was installed but does not run; check {}",
            lib.display()
        );
    }
    did.push(format!(
        "installed bpf-linker {BPF_LINKER_VERSION} (LLVM {major}, libLLVM from {})",
        lib.display()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_llvm_major() {
        let vv =
            "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nbinary: rustc\nLLVM version: 22.1.4\n";
        assert_eq!(parse_llvm_major(vv), Some(22));
        assert_eq!(parse_llvm_major("rustc 1.95.0"), None);
    }

    #[test]
    fn reads_linked_llvm_major() {
        assert_eq!(
            linked_llvm_major(b"\0libLLVM.so.22.1-rust-1.97.0-nightly\0"),
            Some(22)
        );
        assert_eq!(linked_llvm_major(b"xx libLLVM-19.so yy"), Some(19));
        assert_eq!(linked_llvm_major(b"static binary"), None);
    }
}
