//! Reference samplers built from crates.io for the tests' comparisons: rbspy, the reference
//! the Ruby frames are compared with, built once per user into the tools cache
//! (`~/.cache/profiler-tools/rbspy-VERSION`: a release build with fat LTO, 5.5 minutes on two
//! idle cores, the last of them LTO on one) and copied into `target/tools-rbspy`, where the
//! tests look. The test command starts that build first and finishes it before its tests
//! ([`Rbspy::start`]), so its own checks and builds fill the core LTO leaves idle.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use anyhow::Context as _;

use crate::util::{show, tools_cache, workspace_root};

/// The rbspy release the comparisons are measured with.
const RBSPY: &str = "0.55.0";

/// `target/tools-rbspy/bin/rbspy`: copied from the tools cache, built there the first time.
pub fn rbspy() -> anyhow::Result<PathBuf> {
    Rbspy::start()?.finish()
}

/// rbspy being made ready: its build, when one was needed, running meanwhile (its output in
/// `target/tools-rbspy/build.log`). Dropped unfinished, the build is stopped.
pub struct Rbspy {
    build: Option<(Child, String)>,
    log: PathBuf,
}

impl Rbspy {
    /// Starts the build of the tools cache's rbspy when it has none of [`RBSPY`].
    pub fn start() -> anyhow::Result<Self> {
        let log = exe().with_file_name("build.log");
        let mut me = Rbspy { build: None, log };
        if is_ours(&exe()) || is_ours(&cache_root()?.join("bin/rbspy")) {
            return Ok(me);
        }
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args([
            "install",
            "rbspy",
            "--locked",
            "--force",
            "--version",
            RBSPY,
            "--root",
        ])
        .arg(cache_root()?)
        // Its own build, not the workspace's settings or target directory.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
        std::fs::create_dir_all(me.log.parent().expect("a directory"))?;
        let out =
            File::create(&me.log).with_context(|| format!("creating {}", me.log.display()))?;
        cmd.stdout(out.try_clone()?).stderr(out);
        let line = show(&cmd);
        eprintln!("+ {line} > {} (beside what follows)", me.log.display());
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {line}"))?;
        me.build = Some((child, line));
        Ok(me)
    }

    /// Waits for the build, if one runs, and copies rbspy to where the tests look.
    pub fn finish(mut self) -> anyhow::Result<PathBuf> {
        if let Some((mut child, line)) = self.build.take() {
            let status = child
                .wait()
                .with_context(|| format!("waiting for {line}"))?;
            if !status.success() {
                let text = std::fs::read_to_string(&self.log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(20)..].join("\n");
                anyhow::bail!(
                    "`{line}` failed ({status}); the end of {}:\n{tail}",
                    self.log.display()
                );
            }
        }
        let (exe, built) = (exe(), cache_root()?.join("bin/rbspy"));
        if is_ours(&exe) {
            return Ok(exe);
        }
        anyhow::ensure!(
            is_ours(&built),
            "{} is not rbspy {RBSPY} after cargo install",
            built.display()
        );
        std::fs::create_dir_all(exe.parent().expect("a bin directory"))
            .with_context(|| format!("creating {}", exe.display()))?;
        std::fs::copy(&built, &exe)
            .with_context(|| format!("copying {} to {}", built.display(), exe.display()))?;
        Ok(exe)
    }
}

impl Drop for Rbspy {
    fn drop(&mut self) {
        if let Some((child, _)) = &mut self.build {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Where the tests look.
fn exe() -> PathBuf {
    workspace_root().join("target/tools-rbspy/bin/rbspy")
}

/// The tools cache's install root for [`RBSPY`] (`bin/rbspy` under it).
fn cache_root() -> anyhow::Result<PathBuf> {
    Ok(tools_cache()?.join(format!("rbspy-{RBSPY}")))
}

/// Whether `exe` runs and says it is rbspy [`RBSPY`].
fn is_ours(exe: &Path) -> bool {
    Command::new(exe)
        .arg("--version")
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).trim() == format!("rbspy {RBSPY}")
        })
}
