//! `cargo xtask repeat`: run named integration tests many times in a row, alone or beside a
//! busy loop on every CPU, stopping at the first failure. A test that fails once in twenty
//! runs is a failing test; this is how the project shows one does not.

use std::{
    collections::HashMap,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, bail};

use crate::util::{show, workspace_root};

/// A test named `BINARY::TEST` (an integration-test binary of profiler-tests and a test in
/// it, matched exactly).
struct Named<'a> {
    binary: &'a str,
    test: &'a str,
}

fn parse(name: &str) -> anyhow::Result<Named<'_>> {
    let (binary, test) = name.split_once("::").with_context(|| {
        format!("`{name}`: name a test as BINARY::TEST, e.g. js_frames::js_frames_off_cpu")
    })?;
    Ok(Named { binary, test })
}

/// One spinning process per online CPU, killed on drop.
struct Busy(Vec<Child>);

impl Busy {
    fn start() -> anyhow::Result<Self> {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let mut children = Vec::with_capacity(cpus);
        for _ in 0..cpus {
            children.push(
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdin(Stdio::null())
                    .spawn()
                    .context("cannot start a busy loop")?,
            );
        }
        eprintln!("repeat: {cpus} busy loops running");
        Ok(Self(children))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `cargo test --no-run` of the named binaries: each one's executable, by binary name.
fn build(named: &[Named<'_>]) -> anyhow::Result<HashMap<String, PathBuf>> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args([
        "test",
        "-p",
        "profiler-tests",
        "--no-run",
        "--message-format=json",
    ])
    .current_dir(workspace_root())
    .stderr(Stdio::inherit());
    for n in named {
        cmd.args(["--test", n.binary]);
    }
    eprintln!("+ {}", show(&cmd));
    let out = cmd.output().context("cannot run cargo test --no-run")?;
    if !out.status.success() {
        bail!("`{}` failed ({})", show(&cmd), out.status);
    }
    let mut found = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let (Some(name), Some(exe)) = (v["target"]["name"].as_str(), v["executable"].as_str()) {
            found.insert(name.to_string(), PathBuf::from(exe));
        }
    }
    for n in named {
        if !found.contains_key(n.binary) {
            bail!("no test binary {} in profiler-tests", n.binary);
        }
    }
    Ok(found)
}

pub fn repeat(times: u32, busy: bool, names: &[String]) -> anyhow::Result<()> {
    if names.is_empty() {
        bail!("name at least one test as BINARY::TEST");
    }
    let named = names
        .iter()
        .map(|n| parse(n))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Build once and run the binaries themselves: every timed run is the test alone, and
    // editing the tree meanwhile changes nothing under test.
    let binaries = build(&named)?;
    let _busy = busy.then(Busy::start).transpose()?;
    for n in &named {
        let started = Instant::now();
        let mut slowest = 0f64;
        for run in 1..=times {
            let t = Instant::now();
            let mut cmd = Command::new(&binaries[n.binary]);
            cmd.args(["--exact", n.test, "--nocapture", "--test-threads", "1"])
                .current_dir(workspace_root().join("tests"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let out = cmd
                .output()
                .with_context(|| format!("cannot start {}", show(&cmd)))?;
            let secs = t.elapsed().as_secs_f64();
            slowest = slowest.max(secs);
            let stdout = String::from_utf8_lossy(&out.stdout);
            // A filter that matches nothing passes: it must have run exactly one test.
            let ran_one = stdout.contains("1 passed") || stdout.contains("1 failed");
            if !out.status.success() || !ran_one {
                eprint!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
                bail!(
                    "{}::{} failed on run {run} of {times}{} ({secs:.1} s){}",
                    n.binary,
                    n.test,
                    if busy { " beside busy loops" } else { "" },
                    if ran_one { "" } else { ": no such test" }
                );
            }
            eprintln!(
                "repeat: {}::{} run {run}/{times} ok ({secs:.1} s)",
                n.binary, n.test
            );
        }
        println!(
            "{}::{}: {times} of {times} passed{} in {:.0} s (slowest run {slowest:.1} s)",
            n.binary,
            n.test,
            if busy { " beside busy loops" } else { "" },
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
