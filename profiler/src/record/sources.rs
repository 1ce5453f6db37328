//! The sources of a recording: the record program, loaded with what the options and the
//! features ask of it, its filter filled with the targets, and the sampling events attached.

use crate::record::Warn;
use perf_event_open_sys::bindings::PERF_FORMAT_TOTAL_TIME_RUNNING;
use profiler_common::{SamplerConfig, capture, filter};

use super::{
    CallGraph, Mode, RecordError, RecordOptions, Target, Warning, cgroup_id, features,
    follow_children, online_cpus, pidfd::PidFd, skipped::Skipped, unwind::TableLoader,
    workload::Workload,
};
use crate::{
    bpf::{BpfError, RecordConfig, RecordProgram},
    cpc::events::{Catalog, Event},
    modules::{ElfFiles, MapHistory},
    perf::{EventAttr, PerfEvent, SamplePolicy, Scope},
    tools::track::ptrace::task_ids,
};

/// What the program is told: which filter, which stacks (and whether user stacks are walked
/// with unwind tables), when to wake the reader (a quarter of the ring's `ring_bytes`).
fn sampler_config(opts: &RecordOptions, ring_bytes: u32, warnings: &mut dyn Warn) -> SamplerConfig {
    let stacks = match opts.mode {
        Mode::Both => capture::USER_STACK | capture::KERNEL_STACK,
        Mode::User => capture::USER_STACK,
        Mode::Kernel => capture::KERNEL_STACK,
    };
    // Unwind tables walk user stacks for ring records and the in-kernel aggregation alike.
    let mut tables =
        opts.call_graph == CallGraph::Dwarf && opts.stacks && stacks & capture::USER_STACK != 0;
    if tables && !crate::bpf::KernelFeatures::get().bpf_loop() {
        // Known from the kernel's BTF: no failed load, one line (the aggregation's feature
        // says it in its own words, at the start and the end).
        if !opts.aggregate {
            warnings.warn(Warning::note(format!(
                "this kernel ({}) has no bpf_loop (Linux 5.17): walking user stacks with \
                 frame pointers{}",
                crate::bpf::kernel_release(),
                runtime_frames_lost(opts)
            )));
        }
        tables = false;
    }
    let targets = match &opts.target {
        _ if opts.whole_system => 0,
        Target::SystemWide => 0,
        Target::Tids(_) => filter::TID,
        Target::Cgroup(_) => filter::CGROUP,
        Target::Pids(_) | Target::Command(_) => filter::TGID,
    };
    SamplerConfig {
        filter: targets
            | if samples_idle(opts) {
                0
            } else {
                filter::NO_IDLE
            },
        capture: stacks | features::capture(opts) | if tables { capture::UNWIND_TABLES } else { 0 },
        wakeup_bytes: u64::from(ring_bytes / 4),
        runtime_wakeup_ms: if opts.interval.is_some() {
            CONTINUOUS_RUNTIME_WAKEUP_MS
        } else {
            0
        },
        ..Default::default()
    }
}

/// How often, at most, records with runtime frames wake the reader while recording
/// continuously (`--interval`): a fleet host's Python, Java and Node services keep it awake
/// otherwise, a batch every 10 ms (the default, which a command's or a process's recording
/// keeps: its runtime's last samples are named before it exits). Measured under bench
/// section 14's load at 99 Hz, one binary after the other: 2.0-3.2 % of a CPU at 10 ms,
/// 1.5-2.0 % at 50 ms. What it costs: a process that exits within this time of a sample may
/// leave that sample's runtime frames unnamed.
const CONTINUOUS_RUNTIME_WAKEUP_MS: u32 = 50;

/// Loads `record`'s program; with unwind tables, also their loader (our own libraries'
/// tables built) and the exec and exit hooks that drop a process's tables.
pub(super) fn load_sampler(
    opts: &RecordOptions,
    files: &mut ElfFiles,
    warnings: &mut dyn Warn,
) -> Result<(RecordProgram, Option<TableLoader>), RecordError> {
    let ring = opts.ring_size();
    let config = sampler_config(opts, ring, warnings);
    let wants_tables = config.capture & capture::UNWIND_TABLES != 0;
    let group = !opts.read.is_empty();
    let load = |sampler| {
        RecordProgram::load(RecordConfig {
            sampler,
            ring_bytes: ring,
            unwind_rows: opts.unwind_rows,
            group,
            ..RecordConfig::default()
        })
    };
    let sampler = match load(config) {
        // The unwinder needs bpf_loop (Linux 5.17); older kernels walk frame pointers.
        Err(BpfError::Program(e)) if wants_tables => {
            warnings.warn(Warning::new(format!(
                "the kernel refused the unwind-table program (it needs Linux 5.17 or newer \
                 for bpf_loop); walking stacks with frame pointers: {e}"
            )));
            let config = SamplerConfig {
                capture: config.capture & !capture::UNWIND_TABLES,
                ..config
            };
            load(config)?
        }
        other => other?,
    };
    let mut sampler = sampler;
    if !(wants_tables && sampler.walks_with_tables()) {
        return Ok((sampler, None));
    }
    let mut loader = TableLoader::new(sampler.take_unwind_maps()?);
    loader.preload_own(files)?;
    if let Err(e) = sampler.hook_unwind_lifecycle() {
        warnings.warn(Warning::new(format!(
            "exec and exit do not refresh unwind tables: {e}"
        )));
    }
    Ok((sampler, Some(loader)))
}

/// Puts the targets into the program's filter (and their tables into the unwinder's maps);
/// returns pidfds of the given processes, whose exits end the run.
pub(super) fn add_targets(
    opts: &RecordOptions,
    catalog: &Catalog,
    sampler: &mut RecordProgram,
    mut tables: Option<&mut TableLoader>,
    files: &mut ElfFiles,
    workload: Option<&Workload>,
    warnings: &mut dyn Warn,
) -> Result<Vec<PidFd>, RecordError> {
    let mut pidfds = Vec::new();
    match (&opts.target, workload) {
        (Target::Pids(pids), _) => {
            for &pid in pids {
                sampler.add_tgid(pid)?;
                if let Some(t) = tables.as_deref_mut() {
                    t.load_now(pid, files, &MapHistory::default())?;
                }
                // A target that is already gone is not an error: it simply contributes
                // nothing.
                if let Ok(fd) = PidFd::open(pid) {
                    pidfds.push(fd);
                }
            }
            // Children the targets start while profiled are profiled too (as perf's
            // inherited events do); the run still ends when the given processes exit.
            follow_children(catalog, sampler, "the processes'", warnings);
        }
        (Target::Tids(tids), _) => {
            for &tid in tids {
                sampler.add_tid(tid)?;
            }
            // Their processes' tables before sampling starts, as for -p.
            let mut pids: Vec<u32> = tids
                .iter()
                .filter_map(|&tid| task_ids(tid as i32).ok())
                .map(|ids| ids.tgid as u32)
                .collect();
            pids.sort_unstable();
            pids.dedup();
            if let Some(t) = tables.as_deref_mut() {
                for pid in pids {
                    t.load_now(pid, files, &MapHistory::default())?;
                }
            }
        }
        (Target::Cgroup(path), _) => {
            sampler.add_cgroup(cgroup_id(path)?)?;
            // The processes already in it, as for -p (a few: those of a container; the rest,
            // and later ones, are loaded as they are sampled).
            if let Some(t) = tables {
                for pid in cgroup_procs(path).into_iter().take(PRELOAD_CGROUP_PROCS) {
                    t.load_now(pid, files, &MapHistory::default())?;
                }
            }
        }
        // The whole system while the command runs: nothing to filter on.
        (Target::Command(_), Some(_)) if opts.whole_system => {}
        (Target::Command(_), Some(w)) => {
            sampler.add_tgid(w.pid())?;
            if let Some(t) = tables {
                t.preload_executable(w.program(), files)?;
            }
            // Children of the command are profiled too (a shell script's commands, say).
            follow_children(catalog, sampler, "the command's", warnings);
        }
        _ => {}
    }
    Ok(pidfds)
}

/// Most processes of a `-G` cgroup whose tables are built before sampling starts.
const PRELOAD_CGROUP_PROCS: usize = 64;

/// The processes in cgroup directory `path` (its `cgroup.procs`; none if unreadable).
fn cgroup_procs(path: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(path.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// One event per CPU per requested event, shared by all targets: the program filters in the
/// kernel and labels each sample with its event (the link's cookie).
pub(super) fn attach_events(
    opts: &RecordOptions,
    events: &[Event],
    sampler: &mut RecordProgram,
) -> Result<Skipped, RecordError> {
    let policy = match opts.period {
        Some(n) => SamplePolicy::Period(n),
        None => SamplePolicy::Frequency(opts.frequency_hz),
    };
    let cpus = match &opts.cpus {
        Some(c) => c.clone(),
        None => online_cpus()?,
    };
    let mut skipped = Skipped::default();
    for (i, event) in events.iter().enumerate() {
        let attr = sample_attr(opts, event, policy);
        let first = sampler.events().len();
        for &cpu in &cpus {
            let ev = PerfEvent::open(&attr, Scope::Cpu(cpu), None, || event.name.clone())?;
            sampler.attach(ev, i as u64)?;
        }
        skipped.add(first..sampler.events().len(), checked_clock(opts, &attr));
    }
    Ok(skipped)
}

/// The timer's period of a clock whose running time is checked against the program's runs:
/// with user and kernel both sampled (an expiry in the mode left out never runs it).
fn checked_clock(opts: &RecordOptions, attr: &EventAttr) -> Option<u64> {
    attr.clock_timer_ns().filter(|_| opts.mode == Mode::Both)
}

/// Whether the idle task's samples are wanted: whole CPUs only, unless `--no-idle`.
fn samples_idle(opts: &RecordOptions) -> bool {
    opts.whole_system && opts.idle
}

/// The attributes of `event` sampled for `opts`.
fn sample_attr(opts: &RecordOptions, event: &Event, policy: SamplePolicy) -> EventAttr {
    let mut attr = event.attr();
    attr.set_sample_policy(policy);
    attr.set_exclude_user(opts.mode == Mode::Kernel);
    attr.set_exclude_kernel(opts.mode == Mode::User);
    // A clock's idle samples reach the program, which drops those not wanted: every
    // expiry of its timer is then a run, and its running time says how many the kernel
    // skipped (see `skipped`).
    match checked_clock(opts, &attr) {
        Some(_) => attr.set_read_format(u64::from(PERF_FORMAT_TOTAL_TIME_RUNNING)),
        None => attr.set_exclude_idle(!samples_idle(opts)),
    };
    attr
}

/// What a kernel without `bpf_loop` loses of the runtimes asked for, as " (no X frames
/// or Go labels)", or nothing.
fn runtime_frames_lost(opts: &RecordOptions) -> String {
    let names = crate::runtimes::registry::shown_by(&opts.runtimes_off);
    match names.as_slice() {
        [] => String::new(),
        [one] => format!(" (no {one})"),
        [rest @ .., last] => format!(" (no {} or {last})", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpc::events::EventKind;

    fn cpu_clock() -> Event {
        Event {
            name: "cpu-clock".into(),
            kind: EventKind::Software,
            pmu: None,
            type_: perf_event_open_sys::bindings::PERF_TYPE_SOFTWARE,
            config: perf_event_open_sys::bindings::PERF_COUNT_SW_CPU_CLOCK as u64,
            config1: 0,
            config2: 0,
            generic: None,
        }
    }

    fn page_faults() -> Event {
        Event {
            name: "page-faults".into(),
            config: perf_event_open_sys::bindings::PERF_COUNT_SW_PAGE_FAULTS as u64,
            ..cpu_clock()
        }
    }

    /// Whether the kernel drops the idle task's samples of `event`, and whether the
    /// program does.
    fn idle_dropped(opts: &RecordOptions, event: &Event) -> (u64, bool) {
        let attr = sample_attr(opts, event, SamplePolicy::Frequency(99));
        let config = sampler_config(opts, 1 << 20, &mut Vec::new());
        (
            attr.raw().exclude_idle(),
            config.filter & filter::NO_IDLE != 0,
        )
    }

    #[test]
    fn idle_tasks_are_sampled_only_on_whole_cpus_when_asked() {
        let mut all = RecordOptions::new(Target::SystemWide);
        all.whole_system = true;
        let kept = (0, false);
        assert_eq!(
            idle_dropped(&all, &cpu_clock()),
            kept,
            "-a: idle sampled, as perf does"
        );
        assert_eq!(idle_dropped(&all, &page_faults()), kept);
        all.idle = false;
        // A clock's idle samples are dropped by the program (its runs are then every
        // expiry of the timer); another event's by the kernel.
        let by_program = (0, true);
        let no_idle = "-a --no-idle (or continuous mode)";
        assert_eq!(idle_dropped(&all, &cpu_clock()), by_program, "{no_idle}");
        assert_eq!(idle_dropped(&all, &page_faults()), (1, true), "{no_idle}");
        let mut bounded = RecordOptions::new(Target::Command(vec!["sleep".into()]));
        bounded.whole_system = true;
        assert_eq!(
            idle_dropped(&bounded, &cpu_clock()),
            kept,
            "-a -- sleep 5: whole CPUs"
        );
        for target in [
            Target::Pids(vec![1]),
            Target::Tids(vec![1]),
            Target::Command(vec!["true".into()]),
            Target::Cgroup("/sys/fs/cgroup".into()),
        ] {
            let opts = RecordOptions::new(target);
            assert!(opts.idle, "the default");
            let never = format!("{:?}: never idle", opts.target);
            assert_eq!(idle_dropped(&opts, &cpu_clock()), by_program, "{never}");
            assert_eq!(idle_dropped(&opts, &page_faults()), (1, true), "{never}");
        }
    }

    #[test]
    fn a_clock_is_read_with_its_running_time() {
        let opts = RecordOptions::new(Target::SystemWide);
        let policy = SamplePolicy::Frequency(99);
        let clock = sample_attr(&opts, &cpu_clock(), policy);
        assert_eq!(
            clock.raw().read_format,
            u64::from(PERF_FORMAT_TOTAL_TIME_RUNNING)
        );
        assert_eq!(
            sample_attr(&opts, &page_faults(), policy).raw().read_format,
            0
        );
        let user = RecordOptions {
            mode: Mode::User,
            ..RecordOptions::new(Target::SystemWide)
        };
        let clock = sample_attr(&user, &cpu_clock(), policy);
        assert_eq!(
            clock.raw().read_format,
            0,
            "--user: kernel-mode expiries never run"
        );
        assert_eq!(clock.raw().exclude_idle(), 1);
    }
}
