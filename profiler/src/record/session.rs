//! One recording as a value: [`Session::setup`] loads the program, attaches it and starts
//! sampling (and the command, if there is one); [`Session::run`] reads samples until a stop
//! condition; [`Session::finish`] detaches, drains the ring and returns the profile with the
//! run's statistics. Everything attached is owned here and detaches on drop.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};

use profiler_common::{
    RequestConfig, SamplerConfig, capture, filter, request_flags, stack::StackSampleHeader,
};
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::{
    CallGraph, Detaching, Mode, RecordError, RecordOptions, RecordOutcome, Stop, Target,
    aggregate::AggregateReader,
    batch::{Batch, CHUNK_RECORDS, MAX_BATCH_RECORDS, MAX_HELD, read_sideband},
    cgroup_id,
    collect::Collector,
    follow_children, group,
    offcpu::{self, OffCpu},
    online_cpus,
    pidfd::PidFd,
    resolve_events,
    status::StatusLine,
    symbolizing::SymbolizeWorker,
    unwind::{Rewritten, TableLoader},
    validate,
    workload::Workload,
};
use crate::{
    bpf::{BpfError, RecordStream, Sampler, SamplerStats},
    cpc::events::{Catalog, Event},
    modules::{ElfFiles, MapHistory},
    perf::{PerfEvent, SamplePolicy, Scope, Sideband},
    profile::{Profile, RunInfo},
};

/// The signals that end a recording in an orderly report.
struct StopSignals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl StopSignals {
    fn hook() -> Result<Self, RecordError> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).map_err(io("installing SIGINT handler"))?,
            term: signal(SignalKind::terminate()).map_err(io("installing SIGTERM handler"))?,
            hup: signal(SignalKind::hangup()).map_err(io("installing SIGHUP handler"))?,
        })
    }
}

/// A recording in progress.
pub struct Session<'a> {
    opts: &'a RecordOptions,
    signals: StopSignals,
    names: Vec<Arc<str>>,
    // Dropped in this order: the program and its events, then the command (as before the
    // split: the command outlives the sampling of it).
    sampler: Sampler,
    records: RecordStream,
    /// Unwind tables kept in step with the sampled processes (`--call-graph dwarf`).
    tables: Option<TableLoader>,
    /// The given processes (their exits end the run).
    pidfds: Vec<PidFd>,
    /// The started command's exit ends the run.
    exit_watch: Option<PidFd>,
    collector: Collector,
    /// Symbolizes finished intervals on a thread of its own.
    symbolizer: SymbolizeWorker,
    aggregated: AggregateReader,
    /// The off-CPU program (`--off-cpu`), detached in `finish`.
    off_cpu: Option<OffCpu>,
    status: StatusLine,
    /// What the kernel counted up to the last interval (continuous mode reports deltas).
    reported: SamplerStats,
    /// Bytes of records read from the ring (for `unwind_stats`).
    ring_bytes: u64,
    started: Instant,
    interval_started: Instant,
    workload: Option<Workload>,
    /// The counters read with the sampled event, when a group is recorded.
    group: Option<Group>,
    /// Mmaps, execs, forks and exits reported by the kernel (`None` where it could not be
    /// opened: mappings are then read from /proc, while processes live).
    sideband: Option<Sideband>,
    /// Records with copied stacks whose process's tables are still being built.
    held: Vec<Vec<u8>>,
}

/// A counter group being recorded: the counters' names, the CPUs they count on, and the
/// per-thread values seen so far.
struct Group {
    names: Vec<String>,
    cpus: Vec<u32>,
    first_event: u32,
    deltas: group::GroupDeltas,
    /// Each counter's events on stacks as of the last profile handed over (continuous mode).
    attributed_before: [u64; profiler_common::group::MAX_COUNTERS],
}

impl Group {
    /// The counters of the profile being handed over: what went on its stacks since the
    /// previous one, plus what is on no stack yet (counted after a thread's last sample:
    /// it lands on a later interval's stacks, or stays unattributed at the end). For a
    /// single profile, the run's totals.
    fn counters(
        &mut self,
        values: &crate::bpf::GroupTotals,
        aggregated: Option<&AggregateReader>,
    ) -> Vec<crate::profile::CounterTotal> {
        let cumulative = match aggregated {
            Some(a) => group::totals(&self.names, values, &a.attributed()),
            None => self.deltas.totals(&self.names, values),
        };
        cumulative
            .into_iter()
            .zip(self.attributed_before.iter_mut())
            .map(|(c, before)| {
                let attributed = c.total.wrapping_sub(c.unattributed);
                let on_stacks = attributed.wrapping_sub(*before);
                *before = attributed;
                crate::profile::CounterTotal {
                    total: on_stacks.wrapping_add(c.unattributed),
                    ..c
                }
            })
            .collect()
    }

    /// Counts one record, with its counters' increases when a group is recorded (a group
    /// is not recorded with off-CPU time; without one, records go to `offcpu::collect`).
    fn add(group: &mut Option<Group>, collector: &mut Collector, bytes: &[u8]) {
        let Some(g) = group else {
            offcpu::collect(collector, bytes);
            return;
        };
        let Some((header, frames)) = StackSampleHeader::parse(bytes) else {
            return;
        };
        let weights = g.deltas.deltas(&header, bytes).unwrap_or_default();
        collector.add_weighted(&header, frames, g.first_event, &weights);
    }
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> RecordError {
    move |source| RecordError::Io { what, source }
}

impl<'a> Session<'a> {
    /// Validates the options, loads and configures the program, attaches it to one event per
    /// CPU per requested event, enables them and starts the command.
    pub fn setup(opts: &'a RecordOptions) -> Result<Self, RecordError> {
        validate(opts)?;
        // Signals are hooked first, so a Ctrl-C during set-up still ends in an orderly report.
        let signals = StopSignals::hook()?;

        // Events are resolved before a command is started: a bad name starts nothing.
        let catalog = Catalog::load();
        let events = resolve_events(&catalog, &opts.events)?;
        let counters = resolve_events(&catalog, &opts.read)?;
        let mut workload = match &opts.target {
            Target::Command(argv) => {
                Some(Workload::prepare_with(argv, opts.command_stdout_to_stderr)?)
            }
            _ => None,
        };
        // The one table of opened files: the symbolizer names through it, the unwinder's
        // registry reads CFI through it.
        let mut collector = Collector::default();
        let (mut sampler, mut tables) = load_sampler(opts, collector.files())?;
        for i in 0..events.len() {
            let config = RequestConfig {
                index: i as u32,
                flags: if opts.stacks {
                    request_flags::STACKS
                } else {
                    0
                },
                ..Default::default()
            };
            sampler.set_request(i as u64, config)?;
        }
        let pidfds = add_targets(
            opts,
            &catalog,
            &mut sampler,
            tables.as_mut(),
            collector.files(),
            workload.as_ref(),
        )?;
        // Before the events: once they are attached, everything is.
        let off_cpu = match opts.off_cpu {
            true => Some(OffCpu::start(
                opts,
                &catalog,
                &mut sampler,
                events.len() as u32,
            )?),
            false => None,
        };
        attach_events(opts, &events, &mut sampler)?;
        let group = start_group(opts, &catalog, &events, &counters, &mut sampler)?;
        let records = RecordStream::new(sampler.take_records()?).map_err(BpfError::Ring)?;
        // Before the command starts: its exec and every mapping after are reported.
        let sideband = match opts.stacks && opts.mode != Mode::Kernel {
            true => match Sideband::open(&online_cpus()?) {
                Ok(s) => Some(s),
                Err(e) => {
                    eprintln!(
                        "profiler: warning: mappings are read from /proc only (processes \
                         that end before their samples are read lose their modules): {e}"
                    );
                    None
                }
            },
            false => None,
        };
        for event in sampler.events() {
            event.enable(false)?;
        }
        // The run's duration is the time sampled: from here, not from before the set-up
        // (loading and attaching take a tenth of a second, which would inflate short runs'
        // durations).
        let started = Instant::now();
        let exit_watch = match workload.as_mut() {
            Some(w) => {
                w.start()?;
                // The exec has happened: the program and its loader are mapped.
                if let Some(t) = tables.as_mut() {
                    t.load(w.pid(), true, collector.files(), &MapHistory::default())?;
                }
                Some(w.pidfd().map_err(io("pidfd_open"))?)
            }
            None => None,
        };
        Ok(Session {
            opts,
            signals,
            names: offcpu::event_names(opts)
                .into_iter()
                .chain(counters.iter().map(|e| e.name.clone()))
                .map(|e| Arc::from(e.as_str()))
                .collect(),
            sampler,
            records,
            tables,
            pidfds,
            exit_watch,
            collector,
            symbolizer: SymbolizeWorker::start(
                opts.debug_dirs.clone(),
                opts.symbolize_user,
                opts.mode != Mode::User,
            )
            .map_err(io("starting the symbolizing thread"))?,
            aggregated: AggregateReader::new(group.as_ref().map(|g| g.first_event)),
            off_cpu,
            status: StatusLine::new(opts.status_line, opts.status_extra.clone()),
            reported: SamplerStats::default(),
            ring_bytes: 0,
            started,
            interval_started: Instant::now(),
            workload,
            group,
            sideband,
            held: Vec::new(),
        })
    }

    /// Reads samples until a signal, the duration, the command's or the targets' exit; hands
    /// `on_interval` the profile of each interval in continuous mode.
    pub async fn run(&mut self, on_interval: &mut dyn FnMut(Profile)) -> Result<Stop, RecordError> {
        let opts = self.opts;
        let deadline: Pin<Box<dyn Future<Output = ()>>> = match opts.duration {
            Some(d) => Box::pin(tokio::time::sleep(d)),
            None => Box::pin(std::future::pending()),
        };
        tokio::pin!(deadline);
        let pidfds = &self.pidfds;
        let all_targets_exited = async {
            if pidfds.is_empty() {
                std::future::pending::<()>().await;
            }
            for fd in pidfds {
                fd.exited().await;
            }
        };
        tokio::pin!(all_targets_exited);
        let exit_watch = &self.exit_watch;
        let command_exited = async {
            match exit_watch {
                Some(fd) => fd.exited().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(command_exited);
        let every = |d: Option<Duration>| {
            let d = d.unwrap_or(Duration::from_secs(3600));
            tokio::time::interval_at(tokio::time::Instant::now() + d, d)
        };
        let mut intervals = every(opts.interval);
        let mut status_ticks = every(Some(Duration::from_secs(1)));
        // In aggregate mode, new processes are looked for once a second (to capture their
        // maps).
        let mut observe_ticks = every(Some(Duration::from_secs(1)));
        let mut prefetch_ticks = every(Some(PREFETCH_EVERY));
        let signals = &mut self.signals;
        let sampler = &mut self.sampler;
        let collector = &mut self.collector;
        let symbolizer = &mut self.symbolizer;
        let aggregated = &mut self.aggregated;
        let off_cpu = &mut self.off_cpu;
        let records = &mut self.records;
        let tables = &mut self.tables;
        let ring_bytes = &mut self.ring_bytes;
        let status = &mut self.status;
        let reported = &mut self.reported;
        let interval_started = &mut self.interval_started;
        let group = &mut self.group;
        let sideband = &mut self.sideband;
        let held = &mut self.held;
        // The records of one wake-up, kept until the unwind tables they ask for are loaded.
        let mut batch = Batch::default();
        let stop = loop {
            tokio::select! {
                biased;
                _ = signals.int.recv() => break Stop::Signal(libc::SIGINT),
                _ = signals.term.recv() => break Stop::Signal(libc::SIGTERM),
                _ = signals.hup.recv() => break Stop::Signal(libc::SIGHUP),
                _ = &mut deadline => break Stop::Duration,
                _ = &mut command_exited => break Stop::CommandExited,
                _ = &mut all_targets_exited => break Stop::TargetsExited,
                _ = intervals.tick(), if opts.interval.is_some() => {
                    if opts.aggregate {
                        read_sideband(sideband, collector);
                        aggregated.read(sampler, collector)?;
                    }
                    if let Some(o) = off_cpu.as_mut() {
                        o.read_totals(sampler, collector)?;
                    }
                    let stats = sampler.stats()?;
                    let now = Instant::now();
                    let mut info = run_info(opts, &stats, reported, *interval_started, now);
                    if let Some(g) = group.as_mut() {
                        let values = sampler.group_values()?;
                        info.counters = g.counters(&values, opts.aggregate.then_some(&*aggregated));
                    }
                    *interval_started = Instant::now();
                    // Symbolized on the worker's thread; the profile comes back below.
                    symbolizer.submit(collector.take_batch(info, &self.names));
                }
                Some(profile) = symbolizer.next(), if symbolizer.busy() => on_interval(profile),
                _ = status_ticks.tick(), if status.enabled() => {
                    let stats = sampler.stats()?;
                    status.show(
                        self.started.elapsed(),
                        stats.submitted + stats.aggregated,
                        stats.lost,
                    );
                }
                _ = prefetch_ticks.tick() => {
                    if let Some(p) = collector.take_prefetch() {
                        symbolizer.prefetch(p);
                    }
                }
                _ = observe_ticks.tick(), if opts.aggregate => {
                    // Processes that ended since are named from what the kernel reported.
                    read_sideband(sideband, collector);
                    aggregated.observe(sampler, collector)?;
                }
                _ = records.next_batch_bytes(opts.poll, |bytes| {
                    batch.take(bytes, ring_bytes, tables.as_mut());
                }) => {
                    // The mappings reported up to now: those of every sample just read.
                    read_sideband(sideband, collector);
                    // Tables first: a new process's next samples are walked whole as soon as
                    // they are in the kernel, not after this batch is normalized.
                    if let Some(t) = tables.as_mut() {
                        for pid in t.load_pending(collector.files_and_history())? {
                            collector.refresh_maps(pid);
                        }
                    }
                    // In chunks: between two, what arrived meanwhile is taken in and the
                    // tables it asks for are loaded, so a process started while a long batch
                    // is being normalized (a busy host) does not wait for all of it.
                    let mut done = 0;
                    while done < batch.len() {
                        let end = (done + CHUNK_RECORDS).min(batch.len());
                        for i in done..end {
                            let record = batch.get(i);
                            match tables.as_mut().map(|t| t.rewrite(record, held.len() < MAX_HELD)) {
                                Some(Rewritten::Walked(r)) => Group::add(group, collector, &r),
                                Some(Rewritten::Wait) => held.push(record.to_vec()),
                                _ => Group::add(group, collector, record),
                            }
                        }
                        done = end;
                        if let Some(t) = tables.as_mut()
                            && batch.len() < MAX_BATCH_RECORDS
                        {
                            records.drain_bytes(|bytes| batch.take(bytes, ring_bytes, Some(t)));
                            read_sideband(sideband, collector);
                            for pid in t.load_pending(collector.files_and_history())? {
                                collector.refresh_maps(pid);
                            }
                        }
                    }
                    batch.clear();
                    // Copies held for modules built since.
                    if let Some(t) = tables.as_mut() && !held.is_empty() {
                        for record in std::mem::take(held) {
                            match t.rewrite(&record, true) {
                                Rewritten::Walked(r) => Group::add(group, collector, &r),
                                Rewritten::Wait => held.push(record),
                                Rewritten::Same => Group::add(group, collector, &record),
                            }
                        }
                    }
                }
            }
        };
        Ok(stop)
    }

    /// Stops sampling, detaches, takes what is still in the ring and returns the profile
    /// (handing `on_interval` the profiles of intervals still being symbolized).
    pub async fn finish(
        mut self,
        stop: Stop,
        on_interval: &mut dyn FnMut(Profile),
    ) -> Result<RecordOutcome, RecordError> {
        self.status.clear();
        // Close the events first so nothing new arrives, then take what is still in the
        // ring. Disabling is immediate on every CPU (detaching waits for RCU grace periods,
        // event by event), so the duration ends where sampling really ended.
        for event in self.sampler.events() {
            let _ = event.disable(false);
        }
        let ended = Instant::now();
        if let Some(g) = &self.group {
            // The counters are stopped: a switch on every CPU accounts what the tasks
            // running there counted since their last switch or sample.
            crate::bpf::switch_every_cpu(&g.cpus);
        }
        let group_values = match self.group {
            Some(_) => Some(self.sampler.group_values()?),
            None => None,
        };
        // Every mapping of the samples still in the ring was reported before them.
        read_sideband(&mut self.sideband, &mut self.collector);

        let ring_bytes = &mut self.ring_bytes;
        let records = &mut self.records;
        let group = &mut self.group;
        let tables = &mut self.tables;
        let held = &mut self.held;
        let mut drain = |collector: &mut Collector| {
            records.drain_bytes(|bytes| {
                *ring_bytes += bytes.len() as u64;
                // A copied stack needs its process's tables: loaded now if they are not.
                let walked = tables.as_mut().and_then(|t| {
                    if let Some((header, _)) = StackSampleHeader::parse(bytes) {
                        t.note(&header);
                        let _ = t.load_pending(collector.files_and_history());
                    }
                    match t.rewrite(bytes, held.len() < MAX_HELD) {
                        Rewritten::Walked(r) => Some(Some(r)),
                        Rewritten::Wait => None,
                        Rewritten::Same => Some(None),
                    }
                });
                match walked {
                    Some(Some(r)) => Group::add(group, collector, &r),
                    None => held.push(bytes.to_vec()),
                    Some(None) => Group::add(group, collector, bytes),
                }
            });
        };
        let collector = &mut self.collector;
        // Unfinished waits whose stack is a copy: walked with the copies held below.
        match self.off_cpu.take() {
            Some(off_cpu) => {
                let copied = off_cpu.stop(&mut self.sampler, collector, drain)?;
                self.held.extend(copied);
            }
            None => drain(collector),
        }
        // The copies held for tables being built: walked once they are (or the time is up).
        if let Some(t) = self.tables.as_mut() {
            for record in &self.held {
                if let Some((header, _)) = StackSampleHeader::parse(record) {
                    t.note(&header);
                }
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            t.finish_building(deadline, collector.files_and_history())?;
            for record in std::mem::take(&mut self.held) {
                match t.rewrite(&record, false) {
                    Rewritten::Walked(r) => Group::add(&mut self.group, collector, &r),
                    _ => Group::add(&mut self.group, collector, &record),
                }
            }
        }
        if self.opts.aggregate {
            self.aggregated.read(&mut self.sampler, collector)?;
        }
        let stats = self.sampler.stats()?;
        if let Some(t) = &self.tables {
            let t = t.stats();
            if t.copies_cut > 0 {
                eprintln!(
                    "profiler: {} of {} samples taken before their process's unwind tables \
                     were loaded could not be walked whole from their stack copy (kept as \
                     their sampled address)",
                    t.copies_cut, t.copies_walked
                );
            }
        }
        if self.opts.unwind_stats {
            self.print_unwind_stats(&stats)?;
        }
        // Detaching waits for an RCU grace period per event (0.17-0.27 s for a one-process
        // run here): done beside the symbolization and the writing of the profile; the
        // outcome's `Detaching` waits for it when dropped.
        let mut sampler = self.sampler;
        let teardown = std::thread::Builder::new()
            .name("detach".into())
            .spawn(move || {
                sampler.detach_all();
                drop(sampler);
            })
            .map_err(|source| RecordError::Io {
                what: "starting the detaching thread",
                source,
            })?;
        let command_status = self.workload.as_mut().and_then(|w| w.try_reap());
        let since = if self.opts.interval.is_some() {
            self.interval_started
        } else {
            self.started
        };
        let mut info = run_info(self.opts, &stats, &mut self.reported, since, ended);
        if let (Some(g), Some(values)) = (&mut self.group, &group_values) {
            let aggregated = self.opts.aggregate.then_some(&self.aggregated);
            info.counters = g.counters(values, aggregated);
            if values.aggregate_full > 0 {
                eprintln!(
                    "profiler: warning: the counters of {} samples found the in-kernel \
                     aggregation full (they count on their thread's next sample, or as \
                     unattributed)",
                    values.aggregate_full
                );
            }
            if values.read_errors > 0 {
                eprintln!(
                    "profiler: warning: {} counter reads failed (a CPU without the counter)",
                    values.read_errors
                );
            }
        }
        let last = self.collector.take_batch(info, &self.names);
        let (earlier, last) = self.symbolizer.finish(last).await;
        let detaching = Detaching::new(teardown);
        for profile in earlier {
            on_interval(profile);
        }
        Ok(RecordOutcome {
            profile: last.ok_or(RecordError::Io {
                what: "symbolizing the profile",
                source: std::io::Error::other("the symbolizing thread stopped"),
            })?,
            stop,
            command_status,
            detaching,
        })
    }

    /// The unwinder's and the ring's totals, one line on stderr (for the benchmark).
    fn print_unwind_stats(&mut self, stats: &SamplerStats) -> Result<(), RecordError> {
        let (partial, no_process) = self.sampler.unwind_counts()?;
        let t = self.tables.as_ref().map(|t| t.stats()).unwrap_or_default();
        eprintln!(
            "unwind-stats samples={} ring_bytes={} partial={partial} \
             no_process={no_process} modules={} processes={} loads={} \
             modules_without_table={} modules_evicted={} row_bytes={} reserved_bytes={} \
             user_bytes={} copies_walked={} copies_cut={}",
            stats.submitted,
            self.ring_bytes,
            t.modules,
            t.processes,
            t.loads,
            t.modules_without_table,
            t.modules_evicted,
            t.row_bytes,
            t.reserved_bytes,
            t.user_bytes,
            t.copies_walked,
            t.copies_cut
        );
        Ok(())
    }
}

/// What the program is told: which filter, which stacks (and whether user stacks are walked
/// with unwind tables), when to wake the reader (a quarter of the ring's `ring_bytes`).
fn sampler_config(opts: &RecordOptions, ring_bytes: u32) -> SamplerConfig {
    let stacks = match opts.mode {
        Mode::Both => capture::USER_STACK | capture::KERNEL_STACK,
        Mode::User => capture::USER_STACK,
        Mode::Kernel => capture::KERNEL_STACK,
    };
    // Unwind tables serve ring-buffer records of user stacks (in-kernel aggregation keys
    // stacks by the kernel's stack map, which only frame pointers fill).
    let mut tables = opts.call_graph == CallGraph::Dwarf
        && !opts.aggregate
        && opts.stacks
        && stacks & capture::USER_STACK != 0;
    if tables && !crate::bpf::KernelFeatures::get().bpf_loop() {
        // Known from the kernel's BTF: no failed load, one line.
        eprintln!(
            "profiler: this kernel ({}) has no bpf_loop (Linux 5.17): walking user stacks \
             with frame pointers",
            crate::bpf::kernel_release()
        );
        tables = false;
    }
    SamplerConfig {
        filter: match &opts.target {
            _ if opts.whole_system => 0,
            Target::SystemWide => 0,
            Target::Tids(_) => filter::TID,
            Target::Cgroup(_) => filter::CGROUP,
            Target::Pids(_) | Target::Command(_) => filter::TGID,
        },
        capture: stacks
            | if opts.aggregate {
                capture::AGGREGATE
            } else {
                0
            }
            | if tables { capture::UNWIND_TABLES } else { 0 }
            | if opts.off_cpu { capture::OFF_CPU } else { 0 },
        wakeup_bytes: u64::from(ring_bytes / 4),
        ..Default::default()
    }
}

/// Loads `record`'s program; with unwind tables, also their loader (our own libraries'
/// tables built) and the exec and exit hooks that drop a process's tables.
fn load_sampler(
    opts: &RecordOptions,
    files: &mut ElfFiles,
) -> Result<(Sampler, Option<TableLoader>), RecordError> {
    let ring = opts.ring_size();
    let config = sampler_config(opts, ring);
    let wants_tables = config.capture & capture::UNWIND_TABLES != 0;
    let group = !opts.read.is_empty();
    let sampler = match Sampler::load_record_group(config, ring, opts.unwind_rows, group) {
        // The unwinder needs bpf_loop (Linux 5.17); older kernels walk frame pointers.
        Err(BpfError::Program(e)) if wants_tables => {
            eprintln!(
                "profiler: warning: the kernel refused the unwind-table program (it needs \
                 Linux 5.17 or newer for bpf_loop); walking stacks with frame pointers: {e}"
            );
            let config = SamplerConfig {
                capture: config.capture & !capture::UNWIND_TABLES,
                ..config
            };
            Sampler::load_record_group(config, ring, opts.unwind_rows, group)?
        }
        other => other?,
    };
    let mut sampler = sampler;
    if !(wants_tables && sampler.program_name() == "record_sample") {
        return Ok((sampler, None));
    }
    let mut loader = TableLoader::new(sampler.take_unwind_maps()?);
    loader.preload_own(files)?;
    if let Err(e) = sampler.hook_unwind_lifecycle() {
        eprintln!("profiler: warning: exec and exit do not refresh unwind tables: {e}");
    }
    Ok((sampler, Some(loader)))
}

/// Puts the targets into the program's filter (and their tables into the unwinder's maps);
/// returns pidfds of the given processes, whose exits end the run.
fn add_targets(
    opts: &RecordOptions,
    catalog: &Catalog,
    sampler: &mut Sampler,
    mut tables: Option<&mut TableLoader>,
    files: &mut ElfFiles,
    workload: Option<&Workload>,
) -> Result<Vec<PidFd>, RecordError> {
    let mut pidfds = Vec::new();
    match (&opts.target, workload) {
        (Target::Pids(pids), _) => {
            for &pid in pids {
                sampler.add_tgid(pid)?;
                if let Some(t) = tables.as_deref_mut() {
                    t.load(pid, true, files, &MapHistory::default())?;
                }
                // A target that is already gone is not an error: it simply contributes
                // nothing.
                if let Ok(fd) = PidFd::open(pid) {
                    pidfds.push(fd);
                }
            }
            // Children the targets start while profiled are profiled too (as perf's
            // inherited events do); the run still ends when the given processes exit.
            follow_children(catalog, sampler, "the processes'");
        }
        (Target::Tids(tids), _) => {
            for &tid in tids {
                sampler.add_tid(tid)?;
            }
        }
        (Target::Cgroup(path), _) => sampler.add_cgroup(cgroup_id(path)?)?,
        // The whole system while the command runs: nothing to filter on.
        (Target::Command(_), Some(_)) if opts.whole_system => {}
        (Target::Command(_), Some(w)) => {
            sampler.add_tgid(w.pid())?;
            // Children of the command are profiled too (a shell script's commands, say).
            follow_children(catalog, sampler, "the command's");
        }
        _ => {}
    }
    Ok(pidfds)
}

/// One event per CPU per requested event, shared by all targets: the program filters in the
/// kernel and labels each sample with its event (the link's cookie).
fn attach_events(
    opts: &RecordOptions,
    events: &[Event],
    sampler: &mut Sampler,
) -> Result<(), RecordError> {
    let policy = match opts.period {
        Some(n) => SamplePolicy::Period(n),
        None => SamplePolicy::Frequency(opts.frequency_hz),
    };
    let cpus = match &opts.cpus {
        Some(c) => c.clone(),
        None => online_cpus()?,
    };
    for (i, event) in events.iter().enumerate() {
        let mut attr = event.attr();
        attr.set_sample_policy(policy);
        attr.set_exclude_user(opts.mode == Mode::Kernel);
        attr.set_exclude_kernel(opts.mode == Mode::User);
        for &cpu in &cpus {
            let ev = PerfEvent::open(&attr, Scope::Cpu(cpu), None, || event.name.clone())?;
            sampler.attach(ev, i as u64)?;
        }
    }
    Ok(())
}

/// Opens the counters of a group (`opts.read`) on every sampled CPU and has the program
/// read them per thread; `None` without a group.
fn start_group(
    opts: &RecordOptions,
    catalog: &Catalog,
    events: &[Event],
    counters: &[Event],
    sampler: &mut Sampler,
) -> Result<Option<Group>, RecordError> {
    if counters.is_empty() {
        return Ok(None);
    }
    let cpus = match &opts.cpus {
        Some(c) => c.clone(),
        None => online_cpus()?,
    };
    let mut opened = Vec::with_capacity(cpus.len());
    for &cpu in &cpus {
        let mut on_cpu = Vec::with_capacity(counters.len());
        for event in counters {
            let attr = group::counter_attr(event, opts.mode);
            on_cpu.push(PerfEvent::open(&attr, Scope::Cpu(cpu), None, || {
                event.name.clone()
            })?);
        }
        opened.push((cpu, on_cpu));
    }
    // Processes and threads are counted as `perf stat -p` counts them: up to their exit
    // (system-wide and cgroup counts take every event on the CPUs, as `perf stat -a/-G`).
    let fork_child_offset = match opts.target {
        Target::Pids(_) | Target::Tids(_) | Target::Command(_) => {
            let offset = super::tracepoint_field_offset(catalog, "sched_process_fork", "child_pid");
            if offset.is_none() {
                eprintln!(
                    "profiler: warning: sched:sched_process_fork is not in tracefs: the \
                     counters may count a few events of a thread's exit that `perf stat -p` \
                     does not"
                );
            }
            offset
        }
        Target::SystemWide | Target::Cgroup(_) => None,
    };
    sampler.start_group(
        opened,
        group::group_config(counters, opts.mode, fork_child_offset),
    )?;
    Ok(Some(Group {
        names: counters.iter().map(|e| e.name.clone()).collect(),
        cpus,
        first_event: events.len() as u32,
        deltas: group::GroupDeltas::default(),
        attributed_before: [0; profiler_common::group::MAX_COUNTERS],
    }))
}

/// The run's (or interval's) statistics: counts since the last report.
fn run_info(
    opts: &RecordOptions,
    stats: &SamplerStats,
    reported: &mut SamplerStats,
    since: Instant,
    until: Instant,
) -> RunInfo {
    let info = RunInfo {
        event: opts.events.join(","),
        frequency_hz: opts.frequency_hz,
        period: opts.period,
        duration_ms: until.duration_since(since).as_millis() as u64,
        samples: 0,
        lost: stats.lost - reported.lost,
        filtered: stats.filtered - reported.filtered,
        stack_errors: stats.stack_errors - reported.stack_errors,
        collisions: stats.collisions - reported.collisions,
        untracked: stats.follow_failed - reported.follow_failed,
        refused: 0,
        unsymbolized: 0,
        counters: Vec::new(),
        event_samples: Default::default(),
    };
    *reported = *stats;
    info
}

/// How often the addresses of new stacks are sent to be named ahead of the end (see
/// [`super::prefetch`]).
const PREFETCH_EVERY: Duration = Duration::from_millis(200);
