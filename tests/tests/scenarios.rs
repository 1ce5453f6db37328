//! The scenarios the kernel guests run (`cargo xtask kernels`), run here on the host from the
//! same bodies (`profiler-scenarios`): one test each, with what only the host can add around
//! them (the tests' lock, and nothing left loaded afterwards).

use std::{path::PathBuf, sync::OnceLock};

use profiler_scenarios::{C_FIXTURES, Cpu, Env, LIBCPC_EXAMPLES, RUST_FIXTURES, SCENARIOS};
use profiler_tests::*;

/// The fixtures directory the scenarios expect: the C fixtures this crate's build compiled
/// and libcpc's Examples 1 and 2 linked against the built libcpc.so, side by side.
fn fixtures() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("scenario-fixtures");
        for name in C_FIXTURES.iter().chain(RUST_FIXTURES) {
            std::os::unix::fs::symlink(fixture(name), dir.join(name)).expect("linking a fixture");
        }
        for name in LIBCPC_EXAMPLES {
            compile_against_libcpc(&format!("examples/{name}.c"), &dir.join(name), &[]);
        }
        dir
    })
    .clone()
}

/// Runs scenario `name` natively, as root, alone, and checks it left no program loaded.
fn scenario(name: &str) {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let mut env = Env::new(
        profiler_bin(),
        fixtures(),
        scratch(&format!("scenario-{name}")),
        Cpu::Native,
    );
    env.python = profiler_scenarios::host_python();
    env.ruby = profiler_scenarios::host_ruby();
    env.check().unwrap_or_else(|e| panic!("{e}"));
    env.probe_kernel();
    let before = our_programs();
    match profiler_scenarios::run(name, &env) {
        Ok(summary) => eprintln!("{name}: {summary}"),
        Err(failure) => panic!("{name}: {failure}"),
    }
    assert_eq!(
        settle_programs(|p| *p == before),
        before,
        "programs left loaded"
    );
}

/// A host test per scenario, named after it; `every_scenario_has_a_host_test` keeps the
/// list whole.
macro_rules! host_tests {
    ($($test:ident => $name:literal,)*) => {
        $(
            #[test]
            fn $test() {
                scenario($name);
            }
        )*
        const HOST_TESTS: &[&str] = &[$($name),*];
    };
}

host_tests! {
    list => "list",
    load => "load",
    record_fp => "record-fp",
    record_dwarf => "record-dwarf",
    record_pf_count => "record-pf-count",
    record_2_events => "record-2-events",
    record_a => "record-a",
    record_aggregate => "record-aggregate",
    record_aggregate_nofp => "record-aggregate-nofp",
    record_rust => "record-rust",
    record_signal => "record-signal",
    record_offcpu => "record-offcpu",
    record_group => "record-group",
    record_group_aggregate => "record-group-aggregate",
    python => "python",
    ruby => "ruby",
    stat_cgroups => "stat-cgroups",
    track_pf => "track-pf",
    libcpc_example1 => "libcpc-example1",
    libcpc_overflow => "libcpc-overflow",
}

#[test]
fn every_scenario_has_a_host_test() {
    let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
    assert_eq!(names, HOST_TESTS);
}
