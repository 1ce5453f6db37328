//! `cargo xtask fuzz [--secs N] [TARGET..]`: a short run of every cargo-fuzz target in
//! `fuzz/` (its own workspace, nightly, AddressSanitizer), at the lowest CPU priority.
//! cargo-fuzz is installed into a cache directory when missing. New inputs go to
//! `fuzz/target/corpus/<target>`; the committed seeds in `fuzz/corpus/<target>` are read only.
//! A crash fails the task and leaves its input in `fuzz/artifacts/<target>/`.

use std::{path::PathBuf, process::Command};

use anyhow::Context as _;

use crate::util::{output, run, workspace_root};

pub const TARGETS: [&str; 4] = ["event_spec", "perfmap", "pprof", "folded"];

pub fn fuzz(secs: u32, targets: &[String]) -> anyhow::Result<()> {
    let cargo_fuzz = cargo_fuzz()?;
    let fuzz_dir = workspace_root().join("fuzz");
    let chosen: Vec<&str> = if targets.is_empty() {
        TARGETS.to_vec()
    } else {
        targets.iter().map(String::as_str).collect()
    };
    for target in chosen {
        anyhow::ensure!(
            TARGETS.contains(&target),
            "unknown fuzz target {target:?} (targets: {})",
            TARGETS.join(", ")
        );
        let work = fuzz_dir.join("target/corpus").join(target);
        std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
        let seeds = fuzz_dir.join("corpus").join(target);
        run(cargo_fuzz_command(&cargo_fuzz, &fuzz_dir)
            .args(["run", target])
            .arg(&work)
            .arg(&seeds)
            .args([
                "--",
                &format!("-max_total_time={secs}"),
                "-print_final_stats=1",
            ]))?;
    }
    Ok(())
}

/// Builds every target as [`fuzz`] does before it runs one (`cargo xtask warm`).
pub fn build() -> anyhow::Result<()> {
    let cargo_fuzz = cargo_fuzz()?;
    run(cargo_fuzz_command(&cargo_fuzz, &workspace_root().join("fuzz")).arg("build"))
}

/// `cargo fuzz` at the lowest CPU priority, with nightly, for the workspace in `fuzz_dir`.
fn cargo_fuzz_command(cargo_fuzz: &std::path::Path, fuzz_dir: &std::path::Path) -> Command {
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "19"])
        .args(["rustup", "run", "nightly"])
        .arg(cargo_fuzz)
        .arg("fuzz")
        // The fuzzed parsers never load the eBPF object.
        .env("AYA_BUILD_SKIP", "1")
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .current_dir(fuzz_dir);
    cmd
}

/// `cargo-fuzz`: on PATH, or installed (once) under `~/.cache/profiler-tools`.
fn cargo_fuzz() -> anyhow::Result<PathBuf> {
    if output(Command::new("cargo-fuzz").arg("--version")).is_ok_and(|o| o.status.success()) {
        return Ok(PathBuf::from("cargo-fuzz"));
    }
    let cache = crate::util::tools_cache()?;
    let bin = cache.join("bin/cargo-fuzz");
    if !bin.exists() {
        run(Command::new(env!("CARGO"))
            .args(["install", "cargo-fuzz", "--locked", "--root"])
            .arg(&cache))?;
    }
    Ok(bin)
}
