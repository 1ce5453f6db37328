//! One body per end-to-end scenario: the release profiler, libcpc.so and compiled fixtures
//! against known workloads, with exact or tightly bounded expectations. The kernel guests'
//! suite (`xtask kernels`, one `KCHECK` line per scenario) and the host tests
//! (`tests/tests/scenarios.rs`) call the same functions through [`SCENARIOS`].
//!
//! A scenario takes an [`Env`] (where the binaries are, what the kernel offers, whether the
//! CPU is emulated) and returns a one-line summary of what it measured, or a [`Failure`] with
//! the evidence (the profiler's output) to keep.

mod counting;
mod env;
pub mod folded;
mod python;
mod record;
mod ruby;
mod run;
mod runtime;

pub use env::{C_FIXTURES, Cpu, Env, Kernel, LIBCPC_EXAMPLES, RUST_FIXTURES};
pub use python::host_python;
pub use ruby::{RUBY, host_ruby};
pub use run::{Failure, Outcome};

/// One scenario: its name (the `KCHECK` name, `--only`'s key, a column of the kernels table)
/// and its body.
pub struct Scenario {
    pub name: &'static str,
    pub run: fn(&Env) -> Outcome,
}

/// Every scenario, in the order the guests run them.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "list",
        run: counting::list,
    },
    Scenario {
        name: "load",
        run: record::load,
    },
    Scenario {
        name: "record-fp",
        run: record::record_fp,
    },
    Scenario {
        name: "record-dwarf",
        run: record::record_dwarf,
    },
    Scenario {
        name: "record-pf-count",
        run: record::record_page_faults,
    },
    Scenario {
        name: "record-2-events",
        run: record::record_two_events,
    },
    Scenario {
        name: "record-a",
        run: record::record_all,
    },
    Scenario {
        name: "record-aggregate",
        run: record::record_aggregate,
    },
    Scenario {
        name: "record-aggregate-nofp",
        run: record::record_aggregate_nofp,
    },
    Scenario {
        name: "record-rust",
        run: record::record_rust,
    },
    Scenario {
        name: "record-signal",
        run: record::record_signal,
    },
    Scenario {
        name: "record-offcpu",
        run: record::record_off_cpu,
    },
    Scenario {
        name: "record-group",
        run: record::record_group,
    },
    Scenario {
        name: "record-group-aggregate",
        run: record::record_group_aggregate,
    },
    Scenario {
        name: "python",
        run: python::python,
    },
    Scenario {
        name: "ruby",
        run: ruby::ruby,
    },
    Scenario {
        name: "stat-cgroups",
        run: counting::stat_cgroups,
    },
    Scenario {
        name: "track-pf",
        run: counting::track_page_faults,
    },
    Scenario {
        name: "libcpc-example1",
        run: counting::example1,
    },
    Scenario {
        name: "libcpc-overflow",
        run: counting::example2,
    },
];

/// The scenario called `name`.
pub fn scenario(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// Runs the scenario called `name` (a name not in [`SCENARIOS`] is a failure).
pub fn run(name: &str, env: &Env) -> Outcome {
    let s = scenario(name).ok_or_else(|| Failure::new(format!("no scenario {name:?}")))?;
    (s.run)(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        let mut names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SCENARIOS.len());
        assert_eq!(scenario("record-fp").map(|s| s.name), Some("record-fp"));
        assert!(scenario("record").is_none());
    }
}
