//! The virtualenvs of the tests' reference tools, made by `cargo xtask test` and `cargo
//! xtask bench`, so the tests only use them: `target/otlp-venv`, where the export tests'
//! and the export benchmark's receivers run (`tests/export/receiver.py`), with
//! `opentelemetry-proto` (the official OTLP profiles definitions and gRPC stubs) and
//! `grpcio`; and `target/tools-venv` with py-spy (PyPI's binary wheel), the reference the
//! Python frames are compared with.

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

/// The py-spy version the comparisons are measured with.
const PY_SPY: &str = "py-spy==0.4.3";

/// `target/tools-venv/bin/py-spy`, installed the first time.
pub fn py_spy() -> anyhow::Result<PathBuf> {
    let venv = workspace_root().join("target/tools-venv");
    let exe = venv.join("bin/py-spy");
    let works = |exe: &Path| {
        Command::new(exe)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if works(&exe) {
        return Ok(exe);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .context("python3 -m venv (Debian: python3-venv)")?
        .success();
    anyhow::ensure!(made, "python3 -m venv {} failed", venv.display());
    let installed = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", PY_SPY])
        .status()
        .context("pip install")?
        .success();
    anyhow::ensure!(
        installed && works(&exe),
        "could not install {PY_SPY} in {}",
        venv.display()
    );
    Ok(exe)
}
