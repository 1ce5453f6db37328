//! The suite that runs inside each booted kernel (and natively for the host's kernel): the
//! scenarios of `profiler-scenarios` (the bodies the host tests run too), one `KCHECK` line
//! each on stdout; a failing check also prints its evidence (the profiler's stderr, where a
//! refusal's verifier log is) as `KDETAIL` lines, which the host saves.

use std::{path::Path, time::Instant};

use profiler_scenarios::{Cpu, Env, SCENARIOS};

/// Where the image keeps its CPython, under the install prefix (its standard library
/// beside it, as CPython looks for it: `python/lib/python3.X`).
pub const PYTHON: &str = "python/bin/python3";
pub const PYTHON_HOME: &str = "python";

/// The guest's environment: everything under `root` (`/opt/profiler` in the initramfs, as
/// `image.rs` lays it out), fixtures and libcpc's examples in `root/fixtures`.
pub fn env_under(root: &Path, scratch: &Path, cpu: Cpu) -> Env {
    let mut env = Env::new(
        root.join("bin/profiler"),
        root.join("fixtures"),
        scratch.to_path_buf(),
        cpu,
    );
    // The image's interpreter, when the machine that built it had one (image.rs).
    let python = root.join(PYTHON);
    env.python = python.exists().then_some(python);
    // Debian's ruby at its own path, when the image carries it (image.rs).
    env.ruby = profiler_scenarios::host_ruby();
    env
}

/// The names of the checks, in order (the host's table has one column per check).
pub fn check_names() -> Vec<&'static str> {
    SCENARIOS.iter().map(|s| s.name).collect()
}

/// The file under the install prefix naming the checks an image cannot run, `NAME WHY` a
/// line (image.rs writes it: the arm64 image has no CPython).
pub const SKIP_FILE: &str = "skip";

/// The checks `root`'s image cannot run, with why (none when it has no [`SKIP_FILE`]).
pub fn read_skips(root: &Path) -> Vec<(String, String)> {
    parse_skips(&std::fs::read_to_string(root.join(SKIP_FILE)).unwrap_or_default())
}

fn parse_skips(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (name, why) = l.trim().split_once(' ')?;
            Some((name.to_string(), why.trim().to_string()))
        })
        .collect()
}

/// Runs every check (or those whose name contains `only`), printing one `KCHECK` line each
/// (`KSKIP NAME WHY` for those of `skip`); returns how many failed.
pub fn run_suite(env: &mut Env, only: Option<&str>, skip: &[(String, String)]) -> usize {
    // What the profiler says this kernel offers.
    env.probe_kernel();
    let env = &*env;
    // For the console log: which bounds apply (see `Cpu`).
    println!("suite: {:?} CPU, {:?}", env.cpu, env.kernel);
    println!("KSTART kernel={}", kernel_release());
    let mut failed = 0;
    for check in SCENARIOS {
        if only.is_some_and(|o| !check.name.contains(o)) {
            continue;
        }
        if let Some((_, why)) = skip.iter().find(|(n, _)| n == check.name) {
            println!("KSKIP {} {why}", check.name);
            continue;
        }
        let start = Instant::now();
        let result = (check.run)(env);
        let secs = start.elapsed().as_secs_f64();
        match result {
            Ok(summary) => println!("KCHECK {} PASS {secs:.1} {summary}", check.name),
            Err(f) => {
                failed += 1;
                let message = f.message.replace('\n', " | ");
                println!("KCHECK {} FAIL {secs:.1} {message}", check.name);
                for line in f.evidence.lines() {
                    println!("KDETAIL {} {line}", check.name);
                }
            }
        }
    }
    println!("KDONE failed={failed}");
    failed
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_are_a_name_and_why_a_line() {
        assert_eq!(
            parse_skips("python no CPython in the arm64 image\n\nbad\n"),
            [(
                "python".to_string(),
                "no CPython in the arm64 image".to_string()
            )]
        );
    }
}
