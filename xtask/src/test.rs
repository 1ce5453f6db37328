//! `cargo xtask test`: everything CI checks, in order of cost.

use std::process::Command;

use crate::{
    setup::setup,
    util::{cargo, run, workspace_root},
};

pub fn test(extra: &[String]) -> anyhow::Result<()> {
    setup()?;
    // rbspy, the reference the Ruby frames are compared with (built from crates.io), is built
    // beside everything up to the tests, which need it.
    let rbspy = crate::tools::Rbspy::start()?;
    crate::packages::ensure(crate::packages::TEST)?;
    // The export tests' receivers (made here, once, rather than by each test binary).
    crate::venv::otlp_python()?;
    // py-spy, the reference the Python frames are compared with; Node 18 beside Debian's 20.
    crate::venv::py_spy()?;
    crate::venv::node18()?;
    crate::venv::node20_release()?;
    cargo(&["fmt", "--all", "--check"])?;
    crate::deps::check()?;
    // Host crates. The eBPF crate is not a default member and builds only for BPF.
    cargo(&[
        "clippy",
        "--workspace",
        "--exclude",
        "profiler-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    clippy_ebpf()?;
    // The integration tests run the real binary, link C programs against libcpc.so and
    // preload libperfmon.so into others, so build all three first.
    cargo(&[
        "build",
        "-p",
        "profiler",
        "-p",
        "libcpc",
        "-p",
        "libperfmon",
    ])?;
    rbspy.finish()?;
    let mut args = vec!["test", "--workspace", "--exclude", "profiler-ebpf"];
    if !extra.is_empty() {
        args.push("--");
        args.extend(extra.iter().map(String::as_str));
    }
    cargo(&args)
}

/// Clippy for the eBPF crate, for its real target, with nightly and build-std as aya-build
/// compiles it (a separate target directory keeps it from invalidating the host build), once
/// per architecture whose registers the programs read (`bpf_target_arch`).
fn clippy_ebpf() -> anyhow::Result<()> {
    let root = workspace_root();
    for (arch, dir) in [
        ("x86_64", "target/ebpf-clippy"),
        ("aarch64", "target/ebpf-clippy-aarch64"),
    ] {
        run(Command::new("rustup")
            .args([
                "run",
                "nightly",
                "cargo",
                "clippy",
                "--package",
                "profiler-ebpf",
                "--bins",
            ])
            .args([
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
                "--release",
            ])
            .arg("--target-dir")
            .arg(root.join(dir))
            .args(["--", "-D", "warnings"])
            .env(
                "CARGO_ENCODED_RUSTFLAGS",
                format!("--cfg=bpf_target_arch=\"{arch}\""),
            )
            .env_remove("RUSTC")
            .env_remove("RUSTC_WORKSPACE_WRAPPER")
            .current_dir(&root))?;
    }
    Ok(())
}
