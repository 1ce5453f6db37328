//! The export tests' stores (`tests/export/receiver.py`) and what reads their logs.

use std::{
    io::{BufRead as _, BufReader},
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use profiler_tests::*;
use serde_json::Value;

/// The destinations: OTLP gRPC and HTTP, Pyroscope's `/ingest` and its Push API.
pub const PROTOCOLS: [&str; 4] = ["grpc", "http", "pyroscope", "push"];
/// The receivers' listening ports, in `Receiver::start`'s order (the Push API is served on
/// the Pyroscope port).
const SERVERS: [&str; 3] = ["grpc", "http", "pyroscope"];

pub fn receiver_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("export/receiver.py")
}

/// The virtualenv's python with `opentelemetry-proto` and `grpcio` under target/, which
/// `cargo xtask test` makes (xtask/src/venv.rs).
pub fn python() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>
    let target = exe.ancestors().nth(3).expect("target dir").to_path_buf();
    let py = target.join("otlp-venv/bin/python");
    let ready = Command::new(&py)
        .args([
            "-c",
            "import grpc, opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2_grpc",
        ])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ready,
        "{} cannot import the OTLP stubs: run `cargo xtask test` (it makes the venv), or \
         python3 -m venv target/otlp-venv && target/otlp-venv/bin/pip install \
         opentelemetry-proto grpcio",
        py.display()
    );
    py
}

/// The receivers, killed (and reaped) when dropped.
pub struct Receiver {
    child: KillOnDrop,
    ports: Value,
}

impl Receiver {
    /// Starts the three receivers logging to `log`; `ports` 0 takes free ones.
    pub fn start(log: &Path, ports: [u16; 3], fail: Option<&str>) -> Receiver {
        Self::start_with(log, ports, fail, None)
    }

    /// [`Receiver::start`], serving TLS with `tls` (certificate and key files) when given.
    pub fn start_with(
        log: &Path,
        ports: [u16; 3],
        fail: Option<&str>,
        tls: Option<(&Path, &Path)>,
    ) -> Receiver {
        let mut cmd = Command::new(python());
        cmd.arg(receiver_script())
            .args(["serve", "--out"])
            .arg(log)
            .args(["--grpc-port", &ports[0].to_string()])
            .args(["--http-port", &ports[1].to_string()])
            .args(["--pyroscope-port", &ports[2].to_string()])
            .args(["--max-seconds", "120"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(f) = fail {
            cmd.args(["--fail", f]);
        }
        if let Some((cert, key)) = tls {
            cmd.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
        }
        let mut child = KillOnDrop(cmd.spawn().expect("starting receiver.py"));
        let out = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the receivers did not start within 60 s");
        let ports: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("receiver.py said {line:?}: {e}"));
        Receiver { child, ports }
    }

    pub fn port(&self, protocol: &str) -> u16 {
        let server = if protocol == "push" {
            "pyroscope"
        } else {
            protocol
        };
        self.ports[server].as_u64().expect("port") as u16
    }

    pub fn ports(&self) -> [u16; 3] {
        SERVERS.map(|p| self.port(p))
    }

    /// `--export` arguments for the protocols.
    pub fn exports(&self, protocols: &[&str]) -> Vec<String> {
        protocols
            .iter()
            .flat_map(|p| {
                let scheme = match *p {
                    "grpc" => "otlp+grpc",
                    "http" => "otlp+http",
                    "push" => "pyroscope+connect",
                    _ => "pyroscope+http",
                };
                [
                    "--export".to_string(),
                    format!("{scheme}://127.0.0.1:{}", self.port(p)),
                ]
            })
            .collect()
    }

    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The requests logged so far: read under a shared lock on the log, which the receiver
/// holds while a request it has answered is not logged yet (tests/export/receiver.py, `Log`).
pub fn requests(log: &Path) -> Vec<Value> {
    let text = std::fs::File::open(log)
        .map(|f| {
            use std::os::fd::AsRawFd;
            // SAFETY: flock(2) on a descriptor this function owns; released when it closes.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH) };
            std::io::read_to_string(&f).unwrap_or_default()
        })
        .unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The samples a protocol's store accepted, request by request, in arrival order.
pub fn accepted(log: &Path, protocol: &str) -> Vec<Value> {
    requests(log)
        .into_iter()
        .filter(|r| r["protocol"] == protocol && r["status"] == 200)
        .map(|r| r["summary"].clone())
        .collect()
}

/// The pprof files of a series directory in order, and their normal forms.
pub fn written(dir: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gz"))
        .collect();
    files.sort();
    files.iter().map(|f| decode(f)).collect()
}

pub fn decode(file: &Path) -> Value {
    let out = Command::new(python())
        .arg(receiver_script())
        .arg("decode")
        .arg(file)
        .output()
        .expect("receiver.py decode");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The rows and counters of a normal form (what must match between file and store).
pub fn samples(v: &Value) -> Value {
    serde_json::json!({"rows": v["rows"], "counters": v["counters"]})
}

/// Asserts that `protocol`'s store got exactly the intervals of the files, in order.
pub fn assert_same_intervals(log: &Path, protocol: &str, files: &[Value]) {
    let got: Vec<Value> = accepted(log, protocol).iter().map(samples).collect();
    let want: Vec<Value> = files.iter().map(samples).collect();
    assert_eq!(
        got.len(),
        want.len(),
        "{protocol}: {} intervals accepted, {} files",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "{protocol}: interval {i} differs from its file");
    }
}

/// The `N sent, N spooled, N dropped` of each destination, by URL scheme's protocol.
pub fn totals(stderr: &str) -> Vec<(String, [u64; 3])> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("profiler: export: ")?;
            let (counts, url) = rest.split_once(" (")?;
            let n: Vec<u64> = counts
                .split(", ")
                .map(|c| c.split(' ').next()?.parse().ok())
                .collect::<Option<_>>()?;
            Some((url.split(':').next()?.to_string(), n.try_into().ok()?))
        })
        .collect()
}

/// A port nothing listens on (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "gz"))
        })
        .count()
    })
}

/// Runs openssl with `args` in `dir`.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (cargo xtask test installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
