//! Reference samplers built from crates.io for the tests' comparisons: rbspy, the reference
//! the Ruby frames are compared with, built once per user into the tools cache
//! (`~/.cache/profiler-tools/rbspy-VERSION`, a release build of about 2.5 minutes on two
//! cores) and copied into `target/tools-rbspy`, where the tests look.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::Context as _;

use crate::util::{run, tools_cache, workspace_root};

/// The rbspy release the comparisons are measured with.
const RBSPY: &str = "0.55.0";

/// `target/tools-rbspy/bin/rbspy`: copied from the tools cache, built there the first time.
pub fn rbspy() -> anyhow::Result<PathBuf> {
    let want = format!("rbspy {RBSPY}");
    let version = |exe: &Path| {
        Command::new(exe)
            .arg("--version")
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let exe = workspace_root().join("target/tools-rbspy/bin/rbspy");
    if version(&exe).as_deref() == Some(want.as_str()) {
        return Ok(exe);
    }
    let root = tools_cache()?.join(format!("rbspy-{RBSPY}"));
    let built = root.join("bin/rbspy");
    if version(&built).as_deref() != Some(want.as_str()) {
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
    }
    let got = version(&built);
    anyhow::ensure!(
        got.as_deref() == Some(want.as_str()),
        "{} --version gave {got:?} after cargo install",
        built.display()
    );
    std::fs::create_dir_all(exe.parent().expect("a bin directory"))
        .with_context(|| format!("creating {}", exe.display()))?;
    std::fs::copy(&built, &exe)
        .with_context(|| format!("copying {} to {}", built.display(), exe.display()))?;
    Ok(exe)
}
