//! Running programs for a scenario: a deadline on each, and a failure that carries its
//! evidence.

use std::{
    fmt,
    process::{Command, Output, Stdio},
    time::Duration,
};

/// How long any one program of a scenario may run: generous, for the guests' slow TCG CPUs.
/// On the emulated arm64 7.x guest a `record` spends most of its time in the verifier (48 s
/// for most checks on 2026-11-27; `record-offcpu`, with its extra programs, passed 60 s once
/// and failed a fresh-clone CI run): a deadline for a hang, not a speed check.
pub const LIMIT: Duration = Duration::from_secs(120);

/// A failed scenario: what was wrong, and the evidence (command output) to keep.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub evidence: String,
}

impl Failure {
    pub fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            evidence: String::new(),
        }
    }

    /// A failure with the output that shows it.
    pub fn with(message: impl Into<String>, evidence: &str) -> Failure {
        Failure {
            message: message.into(),
            evidence: evidence.to_string(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if !self.evidence.is_empty() {
            write!(f, "\nevidence:\n{}", self.evidence)?;
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

/// A scenario's result: a one-line summary of what it measured, or why it failed.
pub type Outcome = Result<String, Failure>;

/// `cond`, or a failure saying `what` was not true, with `evidence`.
pub fn ensure(cond: bool, what: &str, evidence: &str) -> Result<(), Failure> {
    if cond {
        Ok(())
    } else {
        Err(Failure::with(format!("not true: {what}"), evidence))
    }
}

/// Runs a program that must succeed; returns its stdout.
pub fn program(cmd: &mut Command) -> Result<String, Failure> {
    program_streams(cmd).map(|(stdout, _)| stdout)
}

pub fn program_streams(cmd: &mut Command) -> Result<(String, String), Failure> {
    program_streams_within(cmd, LIMIT)
}

/// [`program_streams`] with a limit of its own.
pub fn program_streams_within(
    cmd: &mut Command,
    limit: Duration,
) -> Result<(String, String), Failure> {
    let out = output_within(cmd, limit)?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(Failure::with(
            format!(
                "`{}` exited with {}: {}",
                show(cmd),
                out.status,
                first_line(&stderr)
            ),
            &format!("stderr:\n{stderr}\nstdout:\n{stdout}"),
        ));
    }
    Ok((stdout, stderr))
}

/// Runs `cmd` to completion with its output captured, killing it after `limit`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Result<Output, Failure> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failure::new(format!("starting {}: {e}", show(cmd))))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(limit) {
        Ok(out) => out.map_err(|e| Failure::new(format!("waiting for {}: {e}", show(cmd)))),
        Err(_) => {
            // SAFETY: kill(2) on the child we started (not yet reaped: its waiter still waits).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            Err(Failure::new(format!(
                "{} did not finish within {} s",
                show(cmd),
                limit.as_secs()
            )))
        }
    }
}

/// The first line of `text` worth showing (a refusal's own message, not aya's preamble).
pub fn first_line(text: &str) -> String {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
}

/// A command line as a shell would take it back (for messages).
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
