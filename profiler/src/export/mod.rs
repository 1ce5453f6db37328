//! Shipping profiles to the stores people run: OTLP profiles (gRPC or HTTP, to an
//! OpenTelemetry Collector, Pyroscope, Parca behind a Collector, ...) and Pyroscope's own
//! `/ingest` and Push API. Each interval becomes one request per destination; each
//! destination has its own queue (memory, then a bounded on-disk spool while the store is
//! away) and its own task on the exporter's thread, retrying with backoff. Every interval
//! ends up sent, spooled (for the next run), or counted as dropped.

mod deliver;
mod error;
mod notice;
pub mod otlp;
pub mod otlp_proto;
mod process;
mod push;
mod queue;
mod retry;
mod send;
mod spool;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    thread::JoinHandle,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use prost::Message as _;

pub use error::ExportError;
pub use notice::{Notice, Notify};
pub use process::ProcessInfo;
pub use queue::Counts;

use crate::profile::pprof;

/// The wire protocol of a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    OtlpGrpc,
    OtlpHttp,
    /// pprof uploads to `/ingest`.
    Pyroscope,
    /// pprof in a `push.v1.PushRequest` over Connect (`/push.v1.PusherService/Push`).
    PyroscopePush,
}

impl Protocol {
    /// Whether the destination takes the pprof file itself (Pyroscope's two APIs).
    pub fn is_pyroscope(self) -> bool {
        matches!(self, Self::Pyroscope | Self::PyroscopePush)
    }
}

/// A parsed `--export` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// As given, for messages.
    pub url: String,
    pub protocol: Protocol,
    pub tls: bool,
    /// `http(s)://host:port[/path]` without a trailing slash: what requests are made to.
    pub base: String,
}

impl Endpoint {
    /// `otlp+grpc://host:4317`, `otlp+grpcs://`, `otlp+http://host:4318`, `otlp+https://`,
    /// `pyroscope+http://host:4040`, `pyroscope+https://` (`/ingest`),
    /// `pyroscope+connect://host:4040`, `pyroscope+connects://` (the Push API; ports default
    /// to those).
    pub fn parse(url: &str) -> Result<Self, ExportError> {
        let err = |reason: &str| ExportError::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| err("expected SCHEME://HOST[:PORT]"))?;
        let (protocol, tls, port) = match scheme {
            "otlp+grpc" => (Protocol::OtlpGrpc, false, 4317),
            "otlp+grpcs" => (Protocol::OtlpGrpc, true, 4317),
            "otlp+http" => (Protocol::OtlpHttp, false, 4318),
            "otlp+https" => (Protocol::OtlpHttp, true, 4318),
            "pyroscope+http" => (Protocol::Pyroscope, false, 4040),
            "pyroscope+https" => (Protocol::Pyroscope, true, 4040),
            "pyroscope+connect" => (Protocol::PyroscopePush, false, 4040),
            "pyroscope+connects" => (Protocol::PyroscopePush, true, 4040),
            _ => {
                return Err(err(
                    "the scheme must be otlp+grpc, otlp+grpcs, otlp+http, otlp+https, pyroscope+http, pyroscope+https, pyroscope+connect or pyroscope+connects",
                ));
            }
        };
        let web = format!("{}://{rest}", if tls { "https" } else { "http" });
        let parsed = reqwest::Url::parse(&web).map_err(|e| err(&e.to_string()))?;
        let host = parsed.host_str().ok_or_else(|| err("no host"))?;
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(err("no query or fragment allowed"));
        }
        if protocol == Protocol::OtlpGrpc && parsed.path() != "/" {
            return Err(err("a gRPC endpoint has no path"));
        }
        // The URL parser forgets a port equal to http(s)'s default (`:443`): look at the text.
        let authority = rest.split('/').next().unwrap_or("");
        let explicit = authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        let port = match explicit {
            true => parsed.port_or_known_default().unwrap_or(port),
            false => port,
        };
        let path = parsed.path().trim_end_matches('/');
        Ok(Self {
            url: url.to_string(),
            protocol,
            tls,
            base: format!("{}://{host}:{port}{path}", parsed.scheme()),
        })
    }

    /// The spool's subdirectory for this destination: the URL with every character that is
    /// not a letter, digit, `.` or `-` replaced.
    fn spool_name(&self) -> String {
        self.url
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }
}

/// Parses a `K=V` (or `K: V`) header.
pub fn parse_header(text: &str) -> Result<(String, String), ExportError> {
    // The first `=` or `:` ends the name (values may hold either).
    let (k, v) = text
        .find(['=', ':'])
        .map(|i| (&text[..i], &text[i + 1..]))
        .ok_or_else(|| ExportError::Header {
            header: text.to_string(),
            reason: "expected KEY=VALUE".into(),
        })?;
    let (k, v) = (k.trim(), v.trim());
    if k.is_empty()
        || !k
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(ExportError::Header {
            header: k.to_string(),
            reason: "a header name is letters, digits, `-` and `_`".into(),
        });
    }
    Ok((k.to_string(), v.to_string()))
}

/// Headers from a file: one `K=V` or `K: V` a line; blank lines and `#` comments skipped.
pub fn read_header_file(path: &Path) -> Result<Vec<(String, String)>, ExportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ExportError::ReadFile {
        path: path.to_path_buf(),
        source,
    })?;
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(parse_header)
        .collect()
}

#[derive(Clone, Debug)]
pub struct ExportOptions {
    pub endpoints: Vec<Endpoint>,
    pub headers: Vec<(String, String)>,
    /// One `service.name` (and Pyroscope application) for every process, instead of each
    /// process's own (see [`ProcessInfo::otel_service_name`] and
    /// [`ProcessInfo::application_name`]).
    pub service_name: Option<String>,
    /// PEM file of the CA certificates to trust instead of the system's.
    pub ca_file: Option<PathBuf>,
    pub spool: Option<PathBuf>,
    pub spool_max_bytes: u64,
    /// How long the end of a run waits for pending intervals to be sent.
    pub flush_timeout: Duration,
    /// Where notices go (the store down and back, drops, the totals at the end).
    pub notify: Notify,
}

/// The default bound of a spool: 256 MiB per destination.
pub const DEFAULT_SPOOL_MAX: u64 = 256 << 20;

/// One destination's queue and the signals between the recording and its task.
struct Shared {
    endpoint: Endpoint,
    notify: Notify,
    queue: Mutex<queue::Queue>,
    wake: tokio::sync::Notify,
}

/// The exporter: hand it each interval's pprof message ([`Exporter::submit`]), then
/// [`Exporter::finish`]. As a sink (`crate::sink`) it takes every interval and the last.
pub struct Exporter {
    destinations: Vec<Arc<Shared>>,
    /// To the exporter's thread, which makes each protocol's request of an interval there,
    /// off the recording's thread (the ring's reader); dropped to end the run.
    intervals: Option<tokio::sync::mpsc::UnboundedSender<Interval>>,
    thread: Option<JoinHandle<()>>,
}

/// One interval handed over: its pprof message (shared with the pprof file written beside
/// it), sampling rate, and when it ended.
struct Interval {
    message: Arc<pprof::proto::Profile>,
    rate: u64,
    until: u64,
}

/// What the exporter's thread needs to turn an interval into each destination's request.
struct Requests {
    destinations: Vec<Arc<Shared>>,
    defaults: otlp::ResourceDefaults,
    pyroscope_wanted: bool,
    otlp_wanted: bool,
    /// What was read of each process of the last interval while it lived, for those that
    /// have exited by the next.
    known: HashMap<i64, ProcessInfo>,
}

/// Pyroscope's application of an interval without samples (which the store drops; it
/// still goes, as every interval does, with the run's counters).
const EMPTY_INTERVAL_APPLICATION: &str = "profiler";

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Exporter {
    /// Opens the spools and starts the exporter's thread; nothing is connected yet (a store
    /// that is down at the start is retried like one that goes down later).
    pub fn start(opts: &ExportOptions) -> Result<Self, ExportError> {
        let ca = opts
            .ca_file
            .as_ref()
            .map(|p| {
                std::fs::read(p).map_err(|source| ExportError::ReadFile {
                    path: p.clone(),
                    source,
                })
            })
            .transpose()?;
        let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ExportError::Client {
                endpoint: "(all)".into(),
                reason: format!("starting the exporter's runtime: {e}"),
            })?;
        let mut destinations = Vec::new();
        let mut clients = Vec::new();
        for endpoint in &opts.endpoints {
            let spool = match &opts.spool {
                Some(dir) => {
                    let dir = dir.join(endpoint.spool_name());
                    Some(
                        spool::Spool::open(&dir, opts.spool_max_bytes)
                            .map_err(|source| ExportError::Spool { path: dir, source })?,
                    )
                }
                None => None,
            };
            if let Some(s) = spool.as_ref().filter(|s| !s.is_empty()) {
                opts.notify.tell(&Notice::Resuming {
                    url: endpoint.url.clone(),
                    intervals: s.len(),
                });
            }
            let client = {
                let _enter = runtime.enter();
                let legacy = opts
                    .service_name
                    .as_deref()
                    .unwrap_or(EMPTY_INTERVAL_APPLICATION);
                send::Client::new(endpoint, &opts.headers, &ca, legacy, &host_name)?
            };
            clients.push(client);
            destinations.push(Arc::new(Shared {
                endpoint: endpoint.clone(),
                notify: opts.notify.clone(),
                queue: Mutex::new(queue::Queue::new(spool)),
                wake: tokio::sync::Notify::new(),
            }));
        }
        let closing = Arc::new(deliver::Closing::new(opts.flush_timeout));
        let tasks: Vec<_> = destinations.iter().cloned().zip(clients).collect();
        let mut requests = Requests {
            pyroscope_wanted: opts.endpoints.iter().any(|e| e.protocol.is_pyroscope()),
            otlp_wanted: opts.endpoints.iter().any(|e| !e.protocol.is_pyroscope()),
            destinations: destinations.clone(),
            defaults: otlp::ResourceDefaults {
                host_name,
                service_name: opts.service_name.clone(),
            },
            known: HashMap::new(),
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Interval>();
        let thread = std::thread::Builder::new()
            .name("profiler-export".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let handles: Vec<_> = tasks
                        .into_iter()
                        .map(|(shared, client)| {
                            tokio::spawn(deliver::run(shared, client, closing.clone()))
                        })
                        .collect();
                    // Every interval handed over is queued before the flush deadline starts.
                    while let Some(interval) = rx.recv().await {
                        requests.queue(&interval);
                    }
                    closing.close();
                    for d in &requests.destinations {
                        d.wake.notify_one();
                    }
                    for h in handles {
                        let _ = h.await;
                    }
                })
            })
            .map_err(|e| ExportError::Client {
                endpoint: "(all)".into(),
                reason: format!("starting the exporter's thread: {e}"),
            })?;
        Ok(Self {
            destinations,
            intervals: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues one interval's pprof message (sampled at `rate` Hz) for every destination;
    /// each protocol's request is made once, on the exporter's thread.
    pub fn submit(&mut self, message: Arc<pprof::proto::Profile>, rate: u64) {
        let interval = Interval {
            message,
            rate,
            until: unix_now(),
        };
        if let Some(tx) = &self.intervals {
            // The thread ends only when this sender is dropped (finish).
            let _ = tx.send(interval);
        }
    }

    /// The status line's part: all stores' totals so far (`export: 12 sent, 2 spooled, 0
    /// dropped`), spooled meaning waiting in the spool now.
    pub fn status(&self) -> crate::record::StatusExtra {
        let destinations = self.destinations.clone();
        crate::record::StatusExtra(Arc::new(move || {
            let (mut sent, mut spooled, mut dropped) = (0, 0, 0);
            for d in &destinations {
                let q = d.queue.lock().unwrap_or_else(|p| p.into_inner());
                sent += q.counts.sent;
                spooled += q.spooled_now();
                dropped += q.counts.dropped;
            }
            format!("export: {sent} sent, {spooled} spooled, {dropped} dropped")
        }))
    }

    /// Sends what is pending within the flush timeout, leaves the rest in the spool, and
    /// prints and returns each destination's totals.
    pub fn finish(mut self) -> Vec<(Endpoint, Counts)> {
        // The thread queues what it was handed, then flushes until the deadline.
        self.intervals = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.destinations
            .iter()
            .map(|d| {
                let (counts, spill) = d.queue.lock().unwrap_or_else(|p| p.into_inner()).close();
                if let Err(source) = spill {
                    d.notify.tell(&Notice::SpoolAtExit { source });
                }
                // A run that failed before its first interval has nothing to say here.
                if counts == Counts::default() {
                    return (d.endpoint.clone(), counts);
                }
                d.notify.tell(&Notice::Totals {
                    url: d.endpoint.url.clone(),
                    counts,
                });
                (d.endpoint.clone(), counts)
            })
            .collect()
    }
}

impl Requests {
    /// Makes each protocol's request of `interval` and queues it for every destination.
    fn queue(&mut self, interval: &Interval) {
        let message = &interval.message;
        let until = interval.until;
        let duration = (message.duration_nanos.max(0) as u64).div_ceil(1_000_000_000);
        // Whole seconds, at least one (Pyroscope wants from < until).
        let from = until.saturating_sub(duration.max(1));
        // Each process of the interval, read once.
        let processes: HashMap<i64, ProcessInfo> = otlp::Labels::by_pid(message)
            .into_iter()
            .map(|(pid, labels)| (pid, self.process(pid, &labels)))
            .collect();
        self.known.retain(|pid, _| processes.contains_key(pid));
        let otlp_body = self.otlp_wanted.then(|| {
            otlp::request(message, &self.defaults, |pid, _| {
                processes.get(&pid).cloned().unwrap_or_default()
            })
            .encode_to_vec()
        });
        let pyroscope_body = self
            .pyroscope_wanted
            .then(|| self.pyroscope(message, &processes));
        for d in &self.destinations {
            let body = match d.endpoint.protocol {
                // Both Pyroscope APIs queue (and spool) the Push API's request; `/ingest`
                // uploads its files one by one.
                Protocol::Pyroscope | Protocol::PyroscopePush => pyroscope_body.clone(),
                _ => otlp_body.clone(),
            }
            .expect("encoded for every protocol asked");
            let mut q = d.queue.lock().unwrap_or_else(|p| p.into_inner());
            let item = spool::Item {
                seq: q.next_seq(),
                from,
                until,
                rate: interval.rate,
                body,
            };
            if let Err(source) = q.push(item) {
                d.notify.tell(&Notice::SpoolPush {
                    url: d.endpoint.url.clone(),
                    source,
                });
                q.counts.dropped += 1;
            }
            drop(q);
            d.wake.notify_one();
        }
    }

    /// What is known of process `pid`: read now if it runs (and kept for the next
    /// interval), else what was read while it did, completed by its samples' labels.
    fn process(&mut self, pid: i64, labels: &otlp::Labels) -> ProcessInfo {
        let info = match (
            ProcessInfo::read(Path::new("/proc"), pid),
            self.known.get(&pid),
        ) {
            // An exited process not yet reaped reads as no executable and no environment:
            // what it was while it ran.
            (Some(now), Some(known)) if now.executable_path.is_none() => known.clone(),
            (Some(now), _) => {
                self.known.insert(pid, now.clone());
                now
            }
            (None, known) => known.cloned().unwrap_or_default(),
        };
        info.with_labels(labels.text("comm"), labels.text("cgroup"))
    }

    /// Pyroscope's request of an interval: a series per application (`--service-name`, or
    /// each process's), with the pprof file of its processes' samples. An interval of one
    /// application (or none) is sent as the file beside it, byte for byte.
    fn pyroscope(
        &self,
        message: &pprof::proto::Profile,
        processes: &HashMap<i64, ProcessInfo>,
    ) -> Vec<u8> {
        let host = &self.defaults.host_name;
        let application = |pid: i64| match &self.defaults.service_name {
            Some(forced) => forced.clone(),
            None => processes.get(&pid).map_or_else(
                || ProcessInfo::default().application_name(),
                ProcessInfo::application_name,
            ),
        };
        let file = |m: &pprof::proto::Profile| {
            let mut out = Vec::new();
            pprof::write_message(m, &mut out).expect("writing to memory");
            out
        };
        let mut parts = pprof::split(message, |s| application(otlp::Labels::pid_of(message, s)));
        let series: Vec<(Vec<push::LabelPair>, Vec<u8>)> = match parts.len() {
            0 | 1 => {
                let name = parts.pop().map_or_else(
                    || {
                        self.defaults
                            .service_name
                            .clone()
                            .unwrap_or_else(|| EMPTY_INTERVAL_APPLICATION.into())
                    },
                    |(name, _)| name,
                );
                vec![(push::labels(&name, host), file(message))]
            }
            _ => parts
                .iter()
                .map(|(name, part)| (push::labels(name, host), file(part)))
                .collect(),
        };
        push::request(&series)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_urls() {
        let e = Endpoint::parse("otlp+grpc://127.0.0.1").unwrap();
        assert_eq!(
            (e.protocol, e.tls, e.base.as_str()),
            (Protocol::OtlpGrpc, false, "http://127.0.0.1:4317")
        );
        let e = Endpoint::parse("otlp+https://collector.example:443/otlp/").unwrap();
        assert_eq!(
            (e.protocol, e.tls, e.base.as_str()),
            (
                Protocol::OtlpHttp,
                true,
                "https://collector.example:443/otlp"
            )
        );
        let e = Endpoint::parse("pyroscope+http://localhost").unwrap();
        assert_eq!(e.base, "http://localhost:4040");
        let e = Endpoint::parse("pyroscope+connect://localhost").unwrap();
        assert_eq!(
            (e.protocol, e.tls, e.base.as_str()),
            (Protocol::PyroscopePush, false, "http://localhost:4040")
        );
        let e = Endpoint::parse("pyroscope+connects://profiles.example/pyroscope").unwrap();
        assert_eq!(
            (e.protocol, e.tls, e.base.as_str()),
            (
                Protocol::PyroscopePush,
                true,
                "https://profiles.example:4040/pyroscope"
            )
        );
        for bad in [
            "http://x",
            "otlp+grpc:/x",
            "otlp+grpc://x/path",
            "pyroscope+http://x?a=b",
            "pyroscope+connect://x?api=push",
            "pyroscope+push://x",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Endpoint::parse("otlp+grpc://127.0.0.1:4317")
                .unwrap()
                .spool_name(),
            "otlp_grpc___127.0.0.1_4317"
        );
    }

    #[test]
    fn pyroscope_gets_a_series_per_application() {
        use crate::{
            profile::Profile,
            symbolize::{Frame, FrameKind},
        };
        let mut p = Profile::default();
        p.info.event = "cpu-clock".into();
        p.info.frequency_hz = 100;
        let main = Frame::named("main", FrameKind::User);
        for (pid, tid, comm) in [
            (10, 10, "api"),
            (10, 11, "api-worker"),
            (20, 20, "batch"),
            (30, 30, "cron"),
        ] {
            let s = p.push("cpu-clock", comm, std::slice::from_ref(&main), 10_000_000);
            (s.pid, s.tid) = (pid, tid);
        }
        let message = pprof::encode(&p);
        let mut requests = Requests {
            destinations: Vec::new(),
            defaults: otlp::ResourceDefaults {
                host_name: "h".into(),
                service_name: None,
            },
            pyroscope_wanted: true,
            otlp_wanted: true,
            known: HashMap::new(),
        };
        // 10 names itself; 20 and 30 are the same executable.
        let processes: HashMap<i64, ProcessInfo> = [
            (10, Some("checkout"), "java"),
            (20, None, "batch"),
            (30, None, "batch"),
        ]
        .into_iter()
        .map(|(pid, own, exe)| {
            let info = ProcessInfo {
                service_name: own.map(str::to_string),
                executable_name: Some(exe.into()),
                ..Default::default()
            };
            (pid, info)
        })
        .collect();
        let series = |requests: &Requests, message: &pprof::proto::Profile| {
            let body = requests.pyroscope(message, &processes);
            push::PushRequest::decode(body.as_slice())
                .unwrap()
                .series
                .into_iter()
                .map(|s| {
                    let gz = &s.samples[0].raw_profile;
                    let file = pprof::read_message(gz).unwrap();
                    let mut pids: Vec<i64> = file
                        .sample
                        .iter()
                        .map(|x| otlp::Labels::pid_of(&file, x))
                        .collect();
                    pids.sort();
                    (s.label("service_name").to_string(), pids, gz.clone())
                })
                .collect::<Vec<_>>()
        };
        let got = series(&requests, &message);
        let names: Vec<(&str, &[i64])> = got.iter().map(|(n, p, _)| (n.as_str(), &p[..])).collect();
        assert_eq!(
            names,
            [("batch", &[20, 30][..]), ("checkout", &[10, 10][..])]
        );
        // --service-name: one series, the interval's file itself.
        requests.defaults.service_name = Some("all".into());
        let mut file = Vec::new();
        pprof::write_message(&message, &mut file).unwrap();
        let got = series(&requests, &message);
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0.as_str(), &got[0].2), ("all", &file));
        // An empty interval still goes (the store drops it), under the profiler's name.
        requests.defaults.service_name = None;
        let got = series(&requests, &pprof::proto::Profile::default());
        assert_eq!((got.len(), got[0].0.as_str()), (1, "profiler"));
    }

    #[test]
    fn a_process_gone_since_keeps_what_was_read_while_it_ran() {
        use crate::{
            profile::Profile,
            symbolize::{Frame, FrameKind},
        };
        // Above any pid_max: never a live process.
        const GONE: u32 = 4_999_999;
        let me = std::process::id();
        let mut p = Profile::default();
        p.info.event = "cpu-clock".into();
        let main = Frame::named("main", FrameKind::User);
        for (pid, comm) in [(me, "tests-thread"), (GONE, "w")] {
            let s = p.push("cpu-clock", comm, std::slice::from_ref(&main), 1);
            (s.pid, s.tid) = (pid, pid);
        }
        let labels = otlp::Labels::by_pid(&pprof::encode(&p));
        let mut requests = Requests {
            destinations: Vec::new(),
            defaults: otlp::ResourceDefaults {
                host_name: "h".into(),
                service_name: None,
            },
            pyroscope_wanted: false,
            otlp_wanted: true,
            known: HashMap::new(),
        };
        // Never read alive: its samples' command name.
        let gone = requests.process(GONE.into(), &labels[&GONE.into()]);
        assert_eq!(gone.otel_service_name(), "unknown_service:w");
        // Read alive, then gone: what was read.
        requests.known.insert(
            GONE.into(),
            ProcessInfo {
                executable_name: Some("api".into()),
                service_name: Some("checkout".into()),
                ..Default::default()
            },
        );
        let gone = requests.process(GONE.into(), &labels[&GONE.into()]);
        assert_eq!(gone.otel_service_name(), "checkout");
        assert_eq!(gone.executable_name.as_deref(), Some("api"));
        // A live one is read (its executable's name, not the thread's) and kept.
        let live = requests.process(me.into(), &labels[&me.into()]);
        assert_ne!(live.executable_name.as_deref(), Some("tests-thread"));
        assert!(live.executable_path.is_some());
        assert_eq!(
            requests.known.get(&me.into()).map(|k| &k.executable_path),
            Some(&live.executable_path)
        );
    }

    #[test]
    fn headers() {
        assert_eq!(
            parse_header("Authorization=Bearer a=b").unwrap(),
            ("Authorization".into(), "Bearer a=b".into())
        );
        assert_eq!(
            parse_header("X-Scope-OrgID: t1").unwrap(),
            ("X-Scope-OrgID".into(), "t1".into())
        );
        assert!(parse_header("novalue").is_err());
        assert!(parse_header("bad name=1").is_err());
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("h");
        std::fs::write(&f, "# secrets\n\nAuthorization=Basic eA==\nX-A: 1\n").unwrap();
        assert_eq!(read_header_file(&f).unwrap().len(), 2);
    }
}
