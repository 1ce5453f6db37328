//! Where a scenario finds the profiler and the fixtures, and what the machine under test can do.

use std::{path::PathBuf, process::Command};

use crate::run::{Failure, program_streams};

/// The C fixtures of `tests/fixtures` the scenarios run (each built with the flags of its
/// first line), in [`Env::fixtures`].
pub const C_FIXTURES: &[&str] = &["chain", "nofp", "touch", "waits", "group"];

/// The Rust fixtures of `tests/fixtures` (`NAME.rs`, built with rustc and the flags of its
/// first line: a release build, no frame pointers), in [`Env::fixtures`].
pub const RUST_FIXTURES: &[&str] = &["chain_rs"];

/// libcpc's C examples (`libcpc/examples/NAME.c`) the scenarios run, linked against the
/// libcpc.so under test, in [`Env::fixtures`] too.
pub const LIBCPC_EXAMPLES: &[&str] = &["example1", "example2"];

/// What the running kernel offers the profiler (as `profiler list` says it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// `bpf_task_pt_regs` (5.15): kernel-mode samples can recover a frameless leaf's caller.
    pub kernel_mode_callers: bool,
    /// BPF attach cookies (5.15): one `record` can sample several events.
    pub attach_cookies: bool,
    /// `bpf_loop` (5.17): user stacks are walked with unwind tables.
    pub unwind_tables: bool,
}

impl Kernel {
    /// A kernel with every feature (until `profiler list` says otherwise).
    pub const ALL: Kernel = Kernel {
        kernel_mode_callers: true,
        attach_cookies: true,
        unwind_tables: true,
    };

    /// The features of `profiler list`'s `kernel features:` line.
    pub fn from_list(list: &str) -> Kernel {
        Kernel {
            kernel_mode_callers: !list.contains("task pt_regs (5.15) no"),
            attach_cookies: !list.contains("attach cookies (5.15) no"),
            unwind_tables: !list.contains("bpf_loop (5.17) no"),
        }
    }
}

/// The CPU the scenarios run on: bounds that an emulated CPU cannot hold are kept for a real one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cpu {
    /// Real CPUs (the host, or `xtask kernels host`).
    Native,
    /// qemu's TCG (the kernel guests): emulated clock reads, interrupts only at block ends,
    /// a coarse task-clock.
    Emulated,
}

/// Everything a scenario needs from outside.
#[derive(Clone, Debug)]
pub struct Env {
    /// The `profiler` binary under test.
    pub profiler: PathBuf,
    /// A directory with every program of [`C_FIXTURES`], [`RUST_FIXTURES`] and
    /// [`LIBCPC_EXAMPLES`].
    pub fixtures: PathBuf,
    /// Scratch space, also the working directory of every program a scenario runs.
    pub scratch: PathBuf,
    pub kernel: Kernel,
    pub cpu: Cpu,
    /// The CPython the `python` scenario runs (none: that scenario fails, saying so).
    pub python: Option<PathBuf>,
    /// The CRuby the `ruby` scenario runs (none: that scenario fails, saying so).
    pub ruby: Option<PathBuf>,
}

impl Env {
    /// An environment assuming every kernel feature; see [`Env::probe_kernel`].
    pub fn new(profiler: PathBuf, fixtures: PathBuf, scratch: PathBuf, cpu: Cpu) -> Env {
        Env {
            profiler,
            fixtures,
            scratch,
            kernel: Kernel::ALL,
            cpu,
            python: None,
            ruby: None,
        }
    }

    /// Checks that the binaries exist and creates the scratch directory (a clear error for a
    /// bad image or an unbuilt tree).
    pub fn check(&self) -> Result<(), Failure> {
        let fixtures = C_FIXTURES
            .iter()
            .chain(RUST_FIXTURES)
            .chain(LIBCPC_EXAMPLES);
        let missing: Vec<String> = std::iter::once(self.profiler.clone())
            .chain(fixtures.map(|f| self.fixtures.join(f)))
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            return Err(Failure::new(format!("missing: {}", missing.join(", "))));
        }
        std::fs::create_dir_all(&self.scratch)
            .map_err(|e| Failure::new(format!("creating {}: {e}", self.scratch.display())))
    }

    /// Reads what the kernel offers from `profiler list`; keeps [`Kernel::ALL`] if it fails
    /// (the `list` scenario then says why).
    pub fn probe_kernel(&mut self) {
        if let Ok(list) = self.run_profiler(&["list"]) {
            self.kernel = Kernel::from_list(&list);
        }
    }

    /// Runs the profiler with `args` (60 s at most); a non-zero exit is a failure whose
    /// evidence is its stderr (a verifier refusal is there). Returns its stdout.
    pub fn run_profiler(&self, args: &[&str]) -> Result<String, Failure> {
        self.run_profiler_streams(args).map(|(stdout, _)| stdout)
    }

    /// [`Env::run_profiler`], with its stderr beside its stdout (for checks of what it says).
    pub fn run_profiler_streams(&self, args: &[&str]) -> Result<(String, String), Failure> {
        program_streams(self.profiler_command().args(args))
    }

    /// The profiler, run in the scratch directory (a `record` without `-o` writes
    /// profile.pb.gz there, not where the suite was started).
    pub fn profiler_command(&self) -> Command {
        let mut cmd = Command::new(&self.profiler);
        cmd.current_dir(&self.scratch);
        cmd
    }

    /// A fixture's path, for command lines.
    pub fn fixture(&self, name: &str) -> String {
        self.fixtures.join(name).display().to_string()
    }

    /// A path in the scratch directory, for command lines.
    pub fn out(&self, name: &str) -> String {
        self.scratch.join(name).display().to_string()
    }

    /// The least share of chain's samples in `leaf`, in percent: over 90 % natively (99 % on
    /// a quiet machine); under TCG the loop's clock_gettime (emulated TSC reads) costs more,
    /// and leaf has 89 to 97 %.
    pub fn leaf_share(&self) -> u64 {
        match self.cpu {
            Cpu::Native => 90,
            Cpu::Emulated => 80,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_features_come_from_the_list_line() {
        let old = "kernel features: ring buffer (5.8) yes, attach cookies (5.15) no, \
                   task pt_regs (5.15) no, bpf_loop (5.17) no";
        assert_eq!(
            Kernel::from_list(old),
            Kernel {
                kernel_mode_callers: false,
                attach_cookies: false,
                unwind_tables: false
            }
        );
        let new = "kernel features: ring buffer (5.8) yes, attach cookies (5.15) yes, \
                   task pt_regs (5.15) yes, bpf_loop (5.17) yes";
        assert_eq!(Kernel::from_list(new), Kernel::ALL);
    }
}
