//! Small helpers for running tools with clear errors.

use std::{
    path::PathBuf,
    process::{Command, Output},
};

use anyhow::{Context as _, bail};

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Runs `cmd`, echoing it; fails with the command line when it fails.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("+ {}", show(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", show(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", show(cmd));
    }
    Ok(())
}

/// Runs `cmd` quietly and returns its output (whatever its exit status).
pub fn output(cmd: &mut Command) -> anyhow::Result<Output> {
    cmd.output()
        .with_context(|| format!("cannot start {}", show(cmd)))
}

pub fn cargo(args: &[&str]) -> anyhow::Result<()> {
    run(Command::new(env!("CARGO"))
        .args(args)
        .current_dir(workspace_root()))
}

/// A command line as a shell would take it: arguments with spaces or shell characters in
/// single quotes.
pub fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        let a = a.to_string_lossy();
        let plain = !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./=:,+-@%".contains(c));
        s.push(' ');
        if plain {
            s.push_str(&a);
        } else {
            s.push('\'');
            s.push_str(&a.replace('\'', "'\\''"));
            s.push('\'');
        }
    }
    s
}

/// `~/.cache/profiler-tools` (or under `XDG_CACHE_HOME`): third-party tools built once per
/// user, not once per clone (cargo-fuzz, rbspy).
pub fn tools_cache() -> anyhow::Result<PathBuf> {
    Ok(std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or_else(|| anyhow::anyhow!("neither XDG_CACHE_HOME nor HOME is set"))?
        .join("profiler-tools"))
}
