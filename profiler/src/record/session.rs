//! One recording as a value: [`Session::setup`] loads the program, attaches it and starts
//! sampling (and the command, if there is one); [`Session::run`] reads samples until a stop
//! condition; [`Session::finish`] detaches, drains the ring and returns the profile with the
//! run's statistics. Everything attached is owned here and detaches on drop.

use crate::record::Warn;
use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant},
};

use profiler_common::{RequestConfig, request_flags};

use super::{
    Detaching, Mode, RecordError, RecordOptions, RecordOutcome, Stop, Target, Warning,
    batch::read_sideband,
    collect::Collector,
    decode::Decoder,
    feature::{self, Feature, Kernel, Shared},
    online_cpus,
    pidfd::PidFd,
    resolve_events, runtime,
    skipped::Skipped,
    sources::{add_targets, attach_events, load_sampler},
    status::StatusLine,
    stops::StopSignals,
    symbolizing::SymbolizeWorker,
    validate,
    workload::Workload,
};
use crate::{
    bpf::{BpfError, RecordProgram, RecordStream, SamplerStats},
    cpc::events::Catalog,
    modules::MapHistory,
    perf::Sideband,
    profile::{Profile, RunInfo},
};

/// A recording in progress.
pub struct Session<'a> {
    opts: &'a RecordOptions,
    signals: StopSignals,
    names: Vec<Arc<str>>,
    // Dropped in this order: the program and its events, then the command (as before the
    // split: the command outlives the sampling of it).
    sampler: RecordProgram,
    records: RecordStream,
    /// Walks copied stacks and hands records to the features.
    decoder: Decoder,
    /// The given processes (their exits end the run).
    pidfds: Vec<PidFd>,
    /// The started command's exit ends the run.
    exit_watch: Option<PidFd>,
    collector: Collector,
    /// Symbolizes finished intervals on a thread of its own.
    symbolizer: SymbolizeWorker,
    /// What the options asked for besides samples (see `feature`), in `FEATURES`' order.
    features: Vec<Box<dyn Feature>>,
    status: StatusLine,
    /// What the kernel counted up to the last interval (continuous mode reports deltas).
    reported: SamplerStats,
    /// Samples the kernel skipped (the clocks' running time against the program's runs).
    skipped: Skipped,
    started: Instant,
    interval_started: Instant,
    workload: Option<Workload>,
    /// Mmaps, execs, forks and exits reported by the kernel (`None` where it could not be
    /// opened: mappings are then read from /proc, while processes live).
    sideband: Option<Sideband>,
    /// What the run has to say besides the profile: the caller's, kept if the run fails.
    warnings: &'a mut dyn Warn,
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> RecordError {
    move |source| RecordError::Io { what, source }
}

impl<'a> Session<'a> {
    /// Validates the options, loads and configures the program, attaches it to one event per
    /// CPU per requested event, enables them and starts the command.
    pub fn setup(opts: &'a RecordOptions, warnings: &'a mut dyn Warn) -> Result<Self, RecordError> {
        let set_up = Instant::now();
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
        collector.name_ahead(opts.interval.is_none());
        let (mut sampler, mut tables) = load_sampler(opts, collector.files(), warnings)?;
        runtime::start(opts, tables.as_mut(), &mut collector, warnings);
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
            warnings,
        )?;
        // Before the events: once they are attached, everything is.
        let mut features = super::features::start(&mut feature::Start {
            opts,
            catalog: &catalog,
            sampler: &mut sampler,
            counters: &counters,
            first_event: events.len() as u32,
            warnings: &mut *warnings,
        })?;
        let skipped = attach_events(opts, &events, &mut sampler)?;
        for f in &mut features {
            f.attach(&mut sampler)?;
        }
        let records = RecordStream::new(sampler.take_records()?).map_err(BpfError::Ring)?;
        // Before the command starts: its exec and every mapping after are reported.
        let sideband = match opts.stacks && opts.mode != Mode::Kernel {
            true => match Sideband::open(&online_cpus()?) {
                Ok(s) => Some(s),
                Err(e) => {
                    warnings.warn(Warning::new(format!(
                        "mappings are read from /proc only (processes that end before their \
                         samples are read lose their modules): {e}"
                    )));
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
        // The kernel matrix's load check reports how long `record` takes to start.
        if std::env::var_os("PROFILER_DEBUG_VERIFIER").is_some() {
            let secs = started.duration_since(set_up).as_secs_f64();
            eprintln!("verifier: set-up took {secs:.2} s (loads, tables, attaching)");
        }
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
        if let Some(t) = tables.as_mut() {
            warnings.warn_all(t.take_warnings());
        }
        if let Some(line) = started_line(opts) {
            warnings.warn(Warning::started(line));
        }
        Ok(Session {
            opts,
            signals,
            names: opts
                .events
                .iter()
                .cloned()
                .chain(features.iter().flat_map(|f| f.event_names()))
                .map(|e| Arc::from(e.as_str()))
                .collect(),
            sampler,
            records,
            decoder: Decoder::new(tables),
            pidfds,
            exit_watch,
            collector,
            symbolizer: SymbolizeWorker::start(
                opts.debug_dirs.clone(),
                opts.symbolize_user,
                opts.mode != Mode::User,
            )
            .map_err(io("starting the symbolizing thread"))?,
            features,
            status: StatusLine::new(opts.status_line, opts.status_extra.clone()),
            reported: SamplerStats::default(),
            skipped,
            started,
            interval_started: Instant::now(),
            workload,
            sideband,
            warnings,
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
        // Features look at what the kernel keeps once a second (new processes, say, to
        // capture their maps).
        let mut observe_ticks = every(Some(Duration::from_secs(1)));
        let mut prefetch_ticks = every(Some(PREFETCH_EVERY));
        let signals = &mut self.signals;
        let sampler = &mut self.sampler;
        let collector = &mut self.collector;
        let symbolizer = &mut self.symbolizer;
        let features = &mut self.features;
        let warnings = &mut *self.warnings;
        let records = &mut self.records;
        let decoder = &mut self.decoder;
        let status = &mut self.status;
        let reported = &mut self.reported;
        let skipped = &mut self.skipped;
        let interval_started = &mut self.interval_started;
        let sideband = &mut self.sideband;
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
                    let mut shared = Shared::default();
                    let mut kernel = Kernel { sampler, sideband };
                    for f in features.iter_mut() {
                        f.read(&mut kernel, collector, &mut shared)?;
                    }
                    let stats = sampler.stats()?;
                    let now = Instant::now();
                    let mut info = run_info(opts, &stats, reported, *interval_started, now);
                    info.skipped = skipped.take(sampler.events(), stats.runs());
                    for f in features.iter_mut() {
                        f.info(sampler, &mut info, &shared, false, warnings)?;
                    }
                    *interval_started = Instant::now();
                    // Symbolized on the worker's thread; the profile comes back below.
                    symbolizer.submit(collector.take_normalized(info, &self.names));
                    warnings.warn_all(collector.take_warnings());
                }
                Some((profile, said)) = symbolizer.next(), if symbolizer.busy() => {
                    warnings.warn_all(said);
                    on_interval(profile);
                }
                _ = status_ticks.tick(), if status.enabled() => {
                    let stats = sampler.stats()?;
                    status.show(
                        self.started.elapsed(),
                        stats.submitted + stats.aggregated,
                        stats.lost,
                    );
                }
                _ = prefetch_ticks.tick(), if opts.interval.is_none() => {
                    if let Some(p) = collector.take_prefetch() {
                        symbolizer.prefetch(p);
                    }
                }
                _ = observe_ticks.tick() => {
                    let mut kernel = Kernel { sampler, sideband };
                    for f in features.iter_mut() {
                        f.observe(&mut kernel, collector)?;
                    }
                }
                _ = records.next_batch_bytes(
                    if decoder.starting() { STARTING_POLL } else { opts.poll },
                    |bytes| decoder.take(bytes),
                ) => {
                    decoder.decode_batch(records, sideband, collector, features)?;
                    warnings.warn_all(decoder.take_warnings());
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
        for f in &mut self.features {
            f.stopped(&mut self.sampler)?;
        }
        // Every mapping of the samples still in the ring was reported before them.
        read_sideband(&mut self.sideband, &mut self.collector);

        for f in &mut self.features {
            f.detach(&mut self.sampler)?;
        }
        let collector = &mut self.collector;
        self.decoder
            .drain_last(&mut self.records, collector, &mut self.features);
        // Records only the end knows (waits unfinished at the stop whose stack is a copy):
        // walked with the copies held.
        for f in &mut self.features {
            let records = f.drained(&mut self.sampler, collector, self.warnings)?;
            self.decoder.hold(records);
        }
        self.decoder.finish(collector, &mut self.features)?;
        self.warnings.warn_all(self.decoder.take_warnings());
        // What the kernel summed up to the end.
        let mut shared = Shared::default();
        let mut kernel = Kernel {
            sampler: &mut self.sampler,
            sideband: &mut self.sideband,
        };
        for f in &mut self.features {
            f.read(&mut kernel, collector, &mut shared)?;
        }
        let stats = self.sampler.stats()?;
        if let Some(t) = self.decoder.table_stats()
            && t.copies_cut > 0
        {
            self.warnings.warn(Warning::note(format!(
                "{} of {} samples taken before their process's unwind tables were loaded \
                     could not be walked whole from their stack copy (kept as their sampled \
                     address)",
                t.copies_cut, t.copies_walked
            )));
        }
        if self.opts.unwind_stats {
            let line = self.unwind_stats(&stats)?;
            self.warnings.warn(line);
        }
        let since = if self.opts.interval.is_some() {
            self.interval_started
        } else {
            self.started
        };
        let mut info = run_info(self.opts, &stats, &mut self.reported, since, ended);
        info.skipped = self.skipped.take(self.sampler.events(), stats.runs());
        for f in &mut self.features {
            f.info(&mut self.sampler, &mut info, &shared, true, self.warnings)?;
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
        let last = self.collector.take_normalized(info, &self.names);
        self.warnings.warn_all(self.collector.take_warnings());
        let (earlier, last) = self.symbolizer.finish(last).await;
        let detaching = Detaching::new(teardown);
        for (profile, said) in earlier {
            self.warnings.warn_all(said);
            on_interval(profile);
        }
        let (profile, said) = last.ok_or(RecordError::Io {
            what: "symbolizing the profile",
            source: std::io::Error::other("the symbolizing thread stopped"),
        })?;
        self.warnings.warn_all(said);
        Ok(RecordOutcome {
            profile,
            stop,
            command_status,
            detaching,
        })
    }

    /// The unwinder's and the ring's totals, one line for stderr (for the benchmark): ring
    /// records (`samples`) and samples counted in the kernel (`aggregated`).
    fn unwind_stats(&mut self, stats: &SamplerStats) -> Result<Warning, RecordError> {
        let (partial, no_process) = self.sampler.unwind_counts()?;
        let t = self.decoder.table_stats().unwrap_or_default();
        Ok(Warning::figures(format!(
            "unwind-stats samples={} aggregated={} ring_bytes={} partial={partial} \
             no_process={no_process} modules={} processes={} loads={} \
             modules_without_table={} modules_evicted={} row_bytes={} reserved_bytes={} \
             user_bytes={} copies_walked={} copies_cut={}",
            stats.submitted,
            stats.aggregated,
            self.decoder.ring_bytes(),
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
        )))
    }
}

/// The run's (or interval's) statistics: counts since the last report.
/// What a run attached to running tasks says once its events are enabled (a started command
/// needs no such line: it runs only once everything is).
fn started_line(opts: &RecordOptions) -> Option<String> {
    let list = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let what = match &opts.target {
        Target::Command(_) => return None,
        Target::Pids(p) => format!("pid {}", list(p)),
        Target::Tids(t) => format!("tid {}", list(t)),
        Target::SystemWide => match &opts.cpus {
            Some(c) => format!("CPU {}", list(c)),
            None => "all CPUs".into(),
        },
        Target::Cgroup(c) => format!("cgroup {}", c.display()),
    };
    let rate = match opts.period {
        Some(p) => format!("every {p} events"),
        None => format!("at {} Hz", opts.frequency_hz),
    };
    let until = match opts.duration {
        Some(d) => format!("for {}", humantime_secs(d)),
        None => "until Ctrl-C".into(),
    };
    Some(format!(
        "recording {what} ({} {rate}) {until}",
        opts.events.join(", ")
    ))
}

/// `5 s`, `1.5 s`, `250 ms`.
fn humantime_secs(d: Duration) -> String {
    match d.as_millis() {
        ms if ms < 1000 => format!("{ms} ms"),
        ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
        _ => format!("{:.1} s", d.as_secs_f64()),
    }
}

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
        skipped: 0,
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
/// The ring's poll while a starting process waits for a runtime to become readable (a
/// JVM's tables): it is published at a batch, and its samples until then miss its frames.
const STARTING_POLL: Duration = Duration::from_millis(10);
