//! What the runtime scenarios (`python`, `ruby`) share: the script written into the scratch
//! directory, one `record -F 999` of the interpreter running it (for longer under TCG), the
//! sample floor, and the evidence a failed check keeps.

use std::path::Path;

use crate::{
    env::{Cpu, Env},
    folded::{self, Stack},
    run::{Failure, LIMIT, ensure, program_streams_within},
};

/// What `record` says on a kernel without `bpf_loop` (Linux 5.17), where the runtimes'
/// walkers (part of the unwind-table program) cannot run.
pub(crate) const NO_WALKER: &str =
    "has no bpf_loop (Linux 5.17): walking user stacks with frame pointers";

/// A runtime scenario's interpreter, described for [`record`].
pub(crate) struct Script<'a> {
    /// The scenario's name: its folded file is `NAME.folded`.
    pub name: &'a str,
    pub interpreter: &'a Path,
    /// The interpreter's options, before the script.
    pub options: &'a [&'a str],
    /// The script's file name in the scratch directory, and its text.
    pub file: &'a str,
    pub text: &'a str,
}

/// One run's profile and what the profiler said.
pub(crate) struct Recorded {
    folded_path: String,
    stdout: String,
    pub stderr: String,
    pub stacks: Vec<Stack>,
    pub total: u64,
}

/// `record -F 999 -o NAME.folded -- INTERPRETER OPTIONS SCRIPT SECS`, the script spinning
/// 3 s (6 s under TCG, for a real profile of two threads on its slow CPUs); at least 300
/// samples (200 under TCG), or a failure with the run's evidence.
pub(crate) fn record(env: &Env, s: &Script) -> Result<Recorded, Failure> {
    let script = env.scratch.join(s.file);
    std::fs::write(&script, s.text)
        .map_err(|e| Failure::new(format!("writing {}: {e}", script.display())))?;
    let secs = match env.cpu {
        Cpu::Native => "3",
        Cpu::Emulated => "6",
    };
    let folded_path = env.out(&format!("{}.folded", s.name));
    let interpreter = s.interpreter.display().to_string();
    let script = script.display().to_string();
    let mut args = vec![
        "record",
        "-F",
        "999",
        "-o",
        &folded_path,
        "--",
        &interpreter,
    ];
    args.extend_from_slice(s.options);
    args.extend([script.as_str(), secs]);
    // 7.x's verifier under TCG, and the interpreter's tables (6.8 MB of Debian's python3)
    // built before its first walk.
    let limit = match env.cpu {
        Cpu::Native => LIMIT,
        Cpu::Emulated => LIMIT * 3,
    };
    let (stdout, stderr) = program_streams_within(env.profiler_command().args(&args), limit)?;
    let stacks = folded::read(&folded_path)?;
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let run = Recorded {
        folded_path,
        stdout,
        stderr,
        stacks,
        total,
    };
    // A real profile of both threads, whichever the kernel: a runtime lock lets one run at a
    // time, so 3 s at 999 Hz is at most ~3000 samples, and a busy machine (or TCG) gives
    // far fewer.
    let least = match env.cpu {
        Cpu::Native => 300,
        Cpu::Emulated => 200,
    };
    run.check(
        run.total >= least,
        &format!("at least {least} samples ({})", run.total),
    )?;
    Ok(run)
}

impl Recorded {
    /// Ok when `cond` holds; else a failure saying `what`, with what the profiler said and
    /// the whole profile.
    pub fn check(&self, cond: bool, what: &str) -> Result<(), Failure> {
        if cond {
            return Ok(());
        }
        let folded = std::fs::read_to_string(&self.folded_path).unwrap_or_default();
        let evidence = format!(
            "stderr:\n{}\nstdout:\n{}\nfolded:\n{folded}",
            self.stderr, self.stdout
        );
        ensure(false, what, &evidence)
    }

    /// How often the run said it walks frame pointers for lack of `bpf_loop`.
    pub fn no_walker_notes(&self) -> usize {
        self.stderr.matches(NO_WALKER).count()
    }

    /// The samples whose stack has a frame `is` holds for.
    pub fn samples_with(&self, is: impl Fn(&str) -> bool) -> u64 {
        self.stacks
            .iter()
            .filter(|(f, _)| f.iter().any(|x| is(x)))
            .map(|(_, n)| n)
            .sum()
    }
}
