//! The virtualenv the export tests' and the export benchmark's receivers run in
//! (`tests/export/receiver.py`): `target/otlp-venv` with `opentelemetry-proto` (the official
//! OTLP profiles definitions and gRPC stubs) and `grpcio`. Made by `cargo xtask test` and
//! `cargo xtask bench`, so the tests only use it.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::Context as _;

use crate::util::workspace_root;

/// What the receivers import: the venv is ready when this runs.
const PROBE: &str =
    "import grpc, opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2_grpc";

/// The venv's python, made (or completed) the first time.
pub fn otlp_python() -> anyhow::Result<PathBuf> {
    let venv = workspace_root().join("target/otlp-venv");
    let py = venv.join("bin/python");
    if ready(&py) {
        return Ok(py);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .context("python3 -m venv (Debian: python3-venv)")?
        .success();
    anyhow::ensure!(made, "python3 -m venv {} failed", venv.display());
    let installed = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "opentelemetry-proto", "grpcio"])
        .status()
        .context("pip install")?
        .success();
    anyhow::ensure!(
        installed && ready(&py),
        "could not make {} with opentelemetry-proto and grpcio",
        venv.display()
    );
    Ok(py)
}

fn ready(py: &Path) -> bool {
    Command::new(py)
        .args(["-c", PROBE])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
