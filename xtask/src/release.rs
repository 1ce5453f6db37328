//! `cargo xtask build [--target ARCH]`: the release build of what `cargo xtask install`
//! installs, for this machine or cross-built for another architecture (the arm64 kernels'
//! image is made of it).

use std::{path::PathBuf, process::Command};

use anyhow::Context as _;

use crate::{
    arch::Arch,
    util::{run, workspace_root},
};

/// The packages `cargo xtask install` installs (the profiler, libcpc.so, libperfmon.so).
pub const INSTALLED: &[&str] = &["profiler", "libcpc", "libperfmon"];

/// A release build of `packages` for `arch` (with cargo's `features`), into
/// [`Arch::release_dir`]; a cross build first installs what it needs (setup's
/// [`crate::setup::ensure_cross`]).
pub fn build_release(arch: Arch, packages: &[&str], features: &[&str]) -> anyhow::Result<PathBuf> {
    if !arch.is_host() {
        crate::setup::ensure_cross(arch)?;
    }
    run(&mut command(arch, packages, features))
        .with_context(|| format!("the release build for {}", arch.triple()))?;
    Ok(arch.release_dir())
}

/// The cargo command of [`build_release`].
fn command(arch: Arch, packages: &[&str], features: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--release"])
        .current_dir(workspace_root());
    for p in packages {
        cmd.args(["-p", p]);
    }
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    if !arch.is_host() {
        cmd.args(["--target", arch.triple()]);
        // cargo links with the host's `cc` unless told otherwise, and the `cc` crate (libcpc's
        // C part) looks for `CC_<triple>`; a user's own choice is kept.
        let triple_env = arch.triple().replace('-', "_");
        let linker = format!("CARGO_TARGET_{}_LINKER", triple_env.to_uppercase());
        for var in [linker, format!("CC_{triple_env}")] {
            if std::env::var_os(&var).is_none() {
                cmd.env(var, arch.cc());
            }
        }
    }
    cmd
}

/// `cargo xtask build [--target ARCH]`: what `cargo xtask install` installs, built for `arch`.
pub fn build(arch: Arch) -> anyhow::Result<()> {
    crate::setup::setup()?;
    let dir = build_release(arch, INSTALLED, &[])?;
    for name in ["profiler", "libcpc.so", "libperfmon.so"] {
        eprintln!("built {}", dir.join(name).display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cross_build_names_its_target_linker_and_c_compiler() {
        let cmd = command(
            Arch::Arm64,
            &["profiler", "xtask"],
            &["profiler/broken-ebpf"],
        );
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "build",
                "--release",
                "-p",
                "profiler",
                "-p",
                "xtask",
                "--features",
                "profiler/broken-ebpf",
                "--target",
                "aarch64-unknown-linux-gnu"
            ]
        );
        let env: Vec<(String, String)> = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v?.to_str()?.to_string())))
            .collect();
        for var in [
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
            "CC_aarch64_unknown_linux_gnu",
        ] {
            // Set unless this environment has its own.
            if std::env::var_os(var).is_none() {
                assert!(
                    env.contains(&(var.to_string(), "aarch64-linux-gnu-gcc".to_string())),
                    "{var} in {env:?}"
                );
            }
        }
        let native = command(Arch::HOST, &["profiler"], &[]);
        assert_eq!(native.get_args().count(), 4, "no --target natively");
        assert_eq!(native.get_envs().count(), 0);
    }
}
