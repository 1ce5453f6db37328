//! Reference samplers built from crates.io for the tests' comparisons: rbspy, the reference
//! the Ruby frames are compared with, into `target/tools-rbspy` (a release build, about
//! 2.5 minutes on two cores, once).

use std::{
    path::PathBuf,
    process::{Command, Stdio},
};

use crate::util::{run, workspace_root};

/// The rbspy release the comparisons are measured with.
const RBSPY: &str = "0.55.0";

/// `target/tools-rbspy/bin/rbspy`, built the first time (or when another version is there).
pub fn rbspy() -> anyhow::Result<PathBuf> {
    let root = workspace_root().join("target/tools-rbspy");
    let exe = root.join("bin/rbspy");
    let version = || {
        Command::new(&exe)
            .arg("--version")
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    if version().as_deref() == Some(&format!("rbspy {RBSPY}")) {
        return Ok(exe);
    }
    run(Command::new(env!("CARGO"))
        .args([
            "install",
            "rbspy",
            "--locked",
            "--force",
            "--version",
            RBSPY,
            "--root",
        ])
        .arg(&root)
        // Its own build, not the workspace's settings or target directory.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS"))?;
    let got = version();
    anyhow::ensure!(
        got.as_deref() == Some(&format!("rbspy {RBSPY}")),
        "{} --version gave {got:?} after cargo install",
        exe.display()
    );
    Ok(exe)
}
