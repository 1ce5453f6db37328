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
    /// `service.name` for processes without their own `OTEL_SERVICE_NAME`, and Pyroscope's
    /// application name (`service_name`).
    pub service_name: String,
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
}

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
                send::Client::new(endpoint, &opts.headers, &ca, &opts.service_name, &host_name)?
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
        let requests = Requests {
            pyroscope_wanted: opts.endpoints.iter().any(|e| e.protocol.is_pyroscope()),
            otlp_wanted: opts.endpoints.iter().any(|e| !e.protocol.is_pyroscope()),
            destinations: destinations.clone(),
            defaults: otlp::ResourceDefaults {
                host_name,
                service_name: opts.service_name.clone(),
            },
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
    fn queue(&self, interval: &Interval) {
        let message = &interval.message;
        let until = interval.until;
        let duration = (message.duration_nanos.max(0) as u64).div_ceil(1_000_000_000);
        // Whole seconds, at least one (Pyroscope wants from < until).
        let from = until.saturating_sub(duration.max(1));
        let otlp_body = self.otlp_wanted.then(|| {
            otlp::request(message, &self.defaults, |pid, labels| {
                ProcessInfo::read(
                    Path::new("/proc"),
                    pid,
                    labels.text("comm"),
                    labels.text("cgroup"),
                )
            })
            .encode_to_vec()
        });
        let pprof_body = self.pyroscope_wanted.then(|| {
            let mut out = Vec::new();
            pprof::write_message(message, &mut out).expect("writing to memory");
            out
        });
        for d in &self.destinations {
            let body = match d.endpoint.protocol {
                // The Push API's request is made when sending, around these bytes: the spool
                // holds the pprof file for both Pyroscope APIs.
                Protocol::Pyroscope | Protocol::PyroscopePush => pprof_body.clone(),
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
