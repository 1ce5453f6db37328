//! Project automation: `cargo xtask setup | build | test | repeat | run | install | fuzz | bench |
//! layers | kernels | warm`.

mod arch;
mod bench;
mod deps;
mod fuzz;
mod install;
mod kernels;
mod layers;
mod packages;
mod release;
mod repeat;
mod setup;
mod test;
mod tools;
mod util;
mod venv;
mod warm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "xtask",
    about = "Build, set-up and test automation for profiler"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install what the eBPF build needs (nightly rust-src, bpf-linker); idempotent.
    Setup {
        /// Also what cross-building for ARCH and booting its kernels need (`aarch64`: the
        /// Rust target, gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-system-arm).
        #[arg(long, value_name = "ARCH")]
        target: Option<arch::Arch>,
    },
    /// Release build of what `install` installs (profiler, libcpc.so, libperfmon.so), for
    /// this machine or cross-built (`--target aarch64`: into
    /// target/aarch64-unknown-linux-gnu/release).
    Build {
        #[arg(long, value_name = "ARCH")]
        target: Option<arch::Arch>,
    },
    /// Format and clippy checks (host and eBPF crates), unit and integration tests.
    Test {
        /// Extra arguments passed to `cargo test` (e.g. a test-name filter).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Measure this project against perf (overhead, per-sample cost, loss, post-processing,
    /// counting, memory, stacks without frame pointers) and write BENCHMARKS.md and
    /// bench/results.json.
    Bench {
        /// One small round of each measurement, into target/bench/ (CI:
        /// checks that every measurement can be taken; asserts nothing about speed).
        #[arg(long)]
        quick: bool,
        /// Only the measurements whose name contains this (e.g. `frame pointers`); the
        /// report goes to target/bench/, as with --quick.
        #[arg(long, value_name = "NAME")]
        only: Option<String>,
    },
    /// Run each named integration test (BINARY::TEST) TIMES in a row, stopping at the first
    /// failure; with --busy, beside a busy loop on every CPU.
    Repeat {
        #[arg(long, default_value_t = 20)]
        times: u32,
        #[arg(long)]
        busy: bool,
        #[arg(required = true, value_name = "BINARY::TEST")]
        tests: Vec<String>,
    },
    /// Print each host crate's module imports and fail on any import cycle.
    Layers,
    /// Set up, build (release) and run the profiler with ARGS, e.g. `-- record -a -d 5`.
    Run {
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Release build, then install bin/profiler, lib/libcpc.so, include/libcpc.h,
    /// lib/pkgconfig/libcpc.pc, lib/libperfmon.so and include/{,machine/}perfmon.h under PREFIX.
    Install {
        #[arg(long, value_name = "DIR")]
        prefix: std::path::PathBuf,
    },
    /// Run each cargo-fuzz target (or those named) for a while, at nice 19.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 30)]
        secs: u32,
        /// Targets to run (default: all).
        targets: Vec<String>,
    },
    /// Boot Debian's kernels (xtask/kernels.txt: 5.10, 6.1, 6.12, 7.x, and 6.1, 6.12, 7.x for
    /// arm64) under qemu and run the guest suite in each, and natively on this machine's
    /// (`host`); one line per kernel and check, evidence and verifier logs in target/kernels/.
    Kernels {
        /// Kernels to run, by label or its start (`5.10`, `7`, `6.1-arm64`, `host`), or
        /// `arm64` / `amd64` for all of one architecture; default: all.
        labels: Vec<String>,
        /// Re-resolve the newest packages and fetch them again.
        #[arg(long)]
        refresh: bool,
        /// Only the checks whose name contains this.
        #[arg(long, value_name = "CHECK")]
        only: Option<String>,
        /// Build the profiler with a deliberately unverifiable eBPF program (the
        /// `broken-ebpf` feature): the run must fail with the verifier's message.
        #[arg(long)]
        broken: bool,
        /// Seconds each kernel may take, boot and suite.
        #[arg(long, default_value_t = kernels::DEFAULT_LIMIT_SECS, value_name = "SECS")]
        limit: u64,
    },
    /// Builds and fetches ahead what `fuzz`, `bench` and `kernels` need (for idle priority
    /// beside `test`); installs no package, so run `setup` first.
    Warm,
    /// Inside a guest (or natively for `host`): run the suite against the tree under ROOT.
    #[command(hide = true)]
    KernelsGuest {
        #[arg(long)]
        root: std::path::PathBuf,
        #[arg(long)]
        scratch: std::path::PathBuf,
        #[arg(long)]
        only: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Setup { target } => setup::setup_for(target),
        Command::Build { target } => release::build(target.unwrap_or(arch::Arch::HOST)),
        Command::Test { args } => test::test(&args),
        Command::Run { args } => run(&args),
        Command::Install { prefix } => install::install(&prefix),
        Command::Warm => warm::warm(),
        Command::Fuzz { secs, targets } => fuzz::fuzz(secs, &targets),
        Command::Bench { quick, only } => bench::bench(quick, only.as_deref()),
        Command::Repeat { times, busy, tests } => repeat::repeat(times, busy, &tests),
        Command::Layers => layers::report(),
        Command::Kernels {
            labels,
            refresh,
            only,
            broken,
            limit,
        } => kernels::kernels(&kernels::Options {
            labels,
            refresh,
            only,
            broken,
            limit,
        }),
        Command::KernelsGuest {
            root,
            scratch,
            only,
        } => kernels::guest(&root, &scratch, only.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> anyhow::Result<()> {
    setup::setup()?;
    util::cargo(&["build", "--release", "-p", "profiler"])?;
    let bin = util::workspace_root().join("target/release/profiler");
    let status = std::process::Command::new(&bin).args(args).status()?;
    std::process::exit(status.code().unwrap_or(1));
}
