//! Builds the eBPF object from source with aya-build. With `AYA_BUILD_SKIP=1` an empty stub is
//! written instead, so `cargo check`, clippy and unit tests run without the BPF toolchain; the
//! loader then reports that the binary was built without its eBPF object.
use std::{env, fs, path::PathBuf};

use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    let object = out_dir.join("profiler");
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        fs::write(&object, b"").context("writing the eBPF stub")?;
        println!("cargo:rustc-cfg=ebpf_stub");
    }
    println!("cargo::rustc-check-cfg=cfg(ebpf_stub)");
    if skip {
        return Ok(());
    }
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf = metadata
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "profiler-ebpf")
        .ok_or_else(|| anyhow!("profiler-ebpf package not found"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("profiler-ebpf has no manifest directory"))?;
    // The test-only `broken-ebpf` feature builds the eBPF crate's `broken` program.
    let features: &[&str] = if env::var_os("CARGO_FEATURE_BROKEN_EBPF").is_some() {
        &["broken"]
    } else {
        &[]
    };
    aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root_dir.as_str(),
            features,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
    .context(
        "building the eBPF object failed; run `cargo xtask setup` to install the BPF toolchain \
         (nightly rust-src and bpf-linker), or set AYA_BUILD_SKIP=1 for a build without it",
    )
}
