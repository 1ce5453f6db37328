//! `record --export`: the profiles that reach a store are the files written beside them.
//! The stores are `tests/export/receiver.py`: OTLP gRPC and HTTP receivers built on the
//! official `opentelemetry-proto` package and `grpcio`, and a Pyroscope-shaped `/ingest` and
//! Push API (`push.v1.PusherService/Push`, decoded with Google's protobuf), on 127.0.0.1
//! only, in a virtualenv under `target/` that the first test creates (`pip install
//! opentelemetry-proto grpcio`). Each receiver logs every request with its
//! samples in a normal form, which `receiver.py decode` gives for a pprof file too.

mod stores;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use profiler_tests::*;
use serde_json::Value;
use stores::*;

#[test]
fn every_interval_reaches_four_stores_as_its_file_says() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("export-all");
    let log = dir.join("requests.jsonl");
    let receiver = Receiver::start(&log, [0; 3], None);
    let (series, mut args) = interval_args(&dir, "199");
    args.extend(receiver.exports(&PROTOCOLS));
    args.extend(["--export-header", "Authorization=Bearer t0ken"].map(String::from));
    // A minute of intervals, as a continuous recording runs. The chain inherits the
    // profiler's OTEL_SERVICE_NAME: its own service name, for every store.
    args.extend(["--", &path("chain"), "60.5"].map(String::from));
    let out = Command::new(profiler_bin())
        .args(&args)
        .env("OTEL_SERVICE_NAME", "chain-service")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let files = written(&series);
    assert!(files.len() >= 60, "{} files: {stderr}", files.len());
    for p in PROTOCOLS {
        assert_same_intervals(&log, p, &files);
    }
    // Pyroscope gets the files themselves, byte for byte, through either API.
    let hashes: Vec<Value> = files.iter().map(|f| f["sha256"].clone()).collect();
    for p in ["pyroscope", "push"] {
        let uploads: Vec<Value> = accepted(&log, p)
            .iter()
            .map(|s| s["sha256"].clone())
            .collect();
        assert_eq!(uploads, hashes, "{p}");
    }
    // Each destination's line: every interval sent, none spooled or dropped.
    let totals = totals(&stderr);
    assert_eq!(totals.len(), PROTOCOLS.len(), "{stderr}");
    for (url, n) in &totals {
        assert_eq!(*n, [files.len() as u64, 0, 0], "{url}: {stderr}");
    }
    // The chain's samples: its resource names it and its service (from its environment).
    let reqs = requests(&log);
    let chain = reqs
        .iter()
        .filter(|r| r["protocol"] == "grpc")
        .flat_map(|r| {
            r["summary"]["resources"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|r| r["process.executable.name"] == "chain")
        .expect("a resource for the chain");
    assert_eq!(chain["service.name"], "chain-service", "{chain}");
    assert!(chain["host.name"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(chain["process.pid"].as_i64().is_some_and(|p| p > 0));
    let leafs: u64 = files
        .iter()
        .flat_map(|f| f["rows"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["type"] == "samples" && r["stack"][0] == "leaf")
        .map(|r| r["value"].as_u64().unwrap())
        .sum();
    let all: u64 = files
        .iter()
        .flat_map(|f| f["rows"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["type"] == "samples")
        .map(|r| r["value"].as_u64().unwrap())
        .sum();
    assert!(
        leafs * 10 >= all * 9,
        "the chain spends its time in leaf: {leafs} of {all}"
    );
    // Headers reached every store; Pyroscope got the upload's metadata.
    for r in &reqs {
        assert_eq!(r["headers"]["authorization"], "Bearer t0ken", "{r}");
        if r["protocol"] == "pyroscope" {
            let q = &r["query"];
            assert!(
                q["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("chain-service{hostname="),
                "{q}"
            );
            assert_eq!(
                (&q["format"], &q["sampleRate"]),
                (&"pprof".into(), &"199".into())
            );
            let (from, until): (u64, u64) = (
                q["from"].as_str().unwrap().parse().unwrap(),
                q["until"].as_str().unwrap().parse().unwrap(),
            );
            assert!(from < until, "{q}");
        }
    }
    // The Push API's series: the labels /ingest's name carries, the profile type, and a
    // UUID per interval.
    let ingest_name = reqs
        .iter()
        .find(|r| r["protocol"] == "pyroscope")
        .and_then(|r| r["query"]["name"].as_str())
        .unwrap()
        .to_string();
    let pushes: Vec<&Value> = reqs.iter().filter(|r| r["protocol"] == "push").collect();
    let mut ids = std::collections::BTreeSet::new();
    for r in &pushes {
        // One application, one series.
        let series = r["series"].as_array().unwrap();
        assert_eq!(series.len(), 1, "{r}");
        let l = &series[0]["labels"];
        let host = l["hostname"].as_str().unwrap();
        assert_eq!(
            ingest_name,
            format!("chain-service{{hostname={host}}}"),
            "{l}"
        );
        assert_eq!(
            (&l["__name__"], &l["__delta__"], &l["service_name"]),
            (
                &"process_cpu".into(),
                &"false".into(),
                &"chain-service".into()
            ),
            "{l}"
        );
        assert_eq!(l.as_object().unwrap().len(), 4, "{l}");
        assert_eq!(r["connect_version"], "1", "{r}");
        let id = series[0]["id"].as_str().unwrap();
        assert_eq!(id.len(), 36, "{id}");
        ids.insert(id.to_string());
    }
    assert_eq!(ids.len(), pushes.len(), "one ID per interval");
    receiver.stop();
}

#[test]
fn a_one_shot_profile_goes_out_at_the_end_with_build_ids_and_offsets() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("export-once");
    let log = dir.join("requests.jsonl");
    let receiver = Receiver::start(&log, [0; 3], None);
    let file = dir.join("once.pb.gz");
    let mut args: Vec<String> = ["record", "-F", "199", "-q", "--symbolize", "none", "-o"]
        .map(String::from)
        .to_vec();
    args.push(file.display().to_string());
    args.extend(receiver.exports(&["http"]));
    args.extend(["--", &path("chain"), "1.5"].map(String::from));
    let out = Command::new(profiler_bin()).args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let want = decode(&file);
    assert_same_intervals(&log, "http", std::slice::from_ref(&want));
    // Unnamed user frames travel as file, build id and file offset.
    let raw = want["rows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["stack"].as_array().unwrap().clone())
        .filter_map(|f| f.as_str().map(str::to_string))
        .find(|f| f.contains("/chain@"))
        .unwrap_or_else(|| panic!("no unsymbolized chain frame: {want}"));
    let (_, build) = raw.split_once('@').unwrap();
    assert!(build.split('+').next().unwrap().len() >= 16, "{raw}");
    receiver.stop();
}

#[test]
fn intervals_outlive_a_store_outage_in_order_and_once() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("export-outage");
    let log = dir.join("requests.jsonl");
    let receiver = Receiver::start(&log, [0; 3], None);
    let ports = receiver.ports();
    let (series, mut args) = interval_args(&dir, "99");
    args.extend(receiver.exports(&PROTOCOLS));
    args.extend([
        "--spool".to_string(),
        dir.join("spool").display().to_string(),
    ]);
    // A bound, not a wait: the run ends as soon as everything is sent (a busy machine may
    // take a few seconds to reconnect after the outage).
    args.extend(["--export-flush", "20"].map(String::from));
    args.extend(["--", &path("chain"), "45.5"].map(String::from));
    let child = Command::new(profiler_bin())
        .args(&args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let child = KillOnDrop(child);
    // Down after the first interval arrived everywhere, for 30 intervals (30 s).
    wait_for("the first interval at every store", 30, || {
        PROTOCOLS
            .iter()
            .all(|p| !accepted(&log, p).is_empty())
            .then_some(())
    });
    receiver.stop();
    let down_at = count_files(&series);
    wait_for("30 intervals while the store is down", 90, || {
        (count_files(&series) >= down_at + 30).then_some(())
    });
    let receiver = Receiver::start(&log, ports, None);
    let mut child = child;
    // The profiler's peak resident size (VmHWM), as late in the run as it can be read.
    let mut peak_kib = 0u64;
    let status = wait_for("the recording to end", 60, || {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{}/status", child.id())) {
            peak_kib = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
                .unwrap_or(peak_kib);
        }
        child.try_wait().unwrap()
    });
    eprintln!(
        "peak RSS of the profiler through the outage: {} MiB",
        peak_kib >> 10
    );
    assert!(peak_kib < 400 << 10, "peak RSS {peak_kib} KiB");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    let files = written(&series);
    assert!(stderr.contains("spooling intervals meanwhile"), "{stderr}");
    assert!(stderr.contains("reachable again"), "{stderr}");
    for (url, n) in totals(&stderr) {
        assert_eq!(n, [files.len() as u64, 0, 0], "{url}: {stderr}");
    }
    for p in PROTOCOLS {
        assert_same_intervals(&log, p, &files);
    }
    receiver.stop();
}

#[test]
fn a_store_answering_503_for_a_while_gets_every_interval() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("export-503");
    let log = dir.join("requests.jsonl");
    let receiver = Receiver::start(&log, [0; 3], Some("503:3"));
    let (series, mut args) = interval_args(&dir, "99");
    args.extend(receiver.exports(&PROTOCOLS));
    args.extend(["--", &path("chain"), "5.5"].map(String::from));
    let out = Command::new(profiler_bin()).args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let files = written(&series);
    for p in PROTOCOLS {
        assert_same_intervals(&log, p, &files);
        let refused = requests(&log)
            .iter()
            .filter(|r| r["protocol"] == p && r["status"] == 503)
            .count();
        assert_eq!(refused, 3, "{p}");
    }
    for (url, n) in totals(&stderr) {
        assert_eq!(n, [files.len() as u64, 0, 0], "{url}: {stderr}");
    }
    receiver.stop();
}

#[test]
fn a_store_refusing_auth_costs_one_line_an_interval_and_nothing_else() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("export-401");
    let log = dir.join("requests.jsonl");
    let receiver = Receiver::start(&log, [0; 3], Some("401"));
    let (series, mut args) = interval_args(&dir, "99");
    args.extend(receiver.exports(&PROTOCOLS));
    args.extend(["--", &path("chain"), "3.5"].map(String::from));
    let out = Command::new(profiler_bin()).args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let n = count_files(&series);
    assert!(n >= 4, "files are still written: {n}");
    let lines = |needle: &str| {
        stderr
            .lines()
            .filter(|l| l.contains("not accepted") && l.contains(needle))
            .count()
    };
    assert_eq!(lines("Unauthenticated"), n, "gRPC: {stderr}");
    // The store's own explanation is in the line (OTLP/HTTP's google.rpc.Status decoded).
    assert_eq!(
        lines("HTTP 401: test receiver answers 401"),
        2 * n,
        "OTLP HTTP and Pyroscope: {stderr}"
    );
    // The Push API's Connect error, its code and message.
    assert_eq!(
        lines("Connect unauthenticated (HTTP 401): test receiver answers 401"),
        n,
        "Pyroscope's Push API: {stderr}"
    );
    for (url, t) in totals(&stderr) {
        assert_eq!(t, [0, 0, n as u64], "{url}: {stderr}");
    }
    receiver.stop();
}

#[test]
fn what_a_stopped_run_could_not_send_is_sent_first_by_the_next() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("export-spool");
    let log = dir.join("requests.jsonl");
    let spool = dir.join("spool");
    let port = free_port();
    let url = format!("otlp+http://127.0.0.1:{port}");
    // The target is the test's own: a recording stopped by SIGTERM leaves its command
    // running, and this one is killed when the test ends, which also ends any recording.
    let target = KillOnDrop(
        Command::new(fixture("chain"))
            .arg("60")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let record = |series: &Path| {
        std::fs::create_dir_all(series).unwrap();
        let mut args: Vec<String> = ["record", "-F", "99", "-q", "--interval", "1", "-o"]
            .map(String::from)
            .to_vec();
        args.push(series.display().to_string());
        args.extend(["--export".to_string(), url.clone()]);
        args.extend(["--spool".to_string(), spool.display().to_string()]);
        // Room for two or three intervals of this profile (1.4 to 1.8 KB each).
        args.extend(["--spool-max".to_string(), "4K".to_string()]);
        args.extend(["--export-flush".to_string(), "1".to_string()]);
        args.extend(["-p".to_string(), target.id().to_string()]);
        Command::new(profiler_bin())
            .args(&args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let stop = |child: std::process::Child| {
        // SAFETY: kill(2) on our own child, which has not been reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        child.wait_with_output().unwrap()
    };
    // Nothing listens: the intervals wait in the spool; SIGTERM ends the run.
    let first = dir.join("first");
    let child = record(&first);
    wait_for("three intervals", 30, || {
        (count_files(&first) >= 3).then_some(())
    });
    let out = stop(child);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let before = written(&first);
    let store = spool.join(format!("otlp_http___127.0.0.1_{port}"));
    let files: Vec<std::fs::Metadata> = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .collect();
    let bytes: u64 = files.iter().map(|m| m.len()).sum();
    assert!(bytes <= 4096, "the spool holds {bytes} bytes, over its 4K");
    let kept = files.len();
    // The oldest were dropped to keep the newest, and counted.
    assert!(
        kept >= 1 && kept < before.len(),
        "{kept} of {}",
        before.len()
    );
    assert_eq!(
        totals(&stderr),
        [(
            "otlp+http".to_string(),
            [0, kept as u64, (before.len() - kept) as u64]
        )],
        "{stderr}"
    );
    let before = before[before.len() - kept..].to_vec();
    // The store is back: the next run sends the earlier run's intervals first, in order.
    let receiver = Receiver::start(&log, [0, port, 0], None);
    let second = dir.join("second");
    let child = record(&second);
    wait_for("two intervals of the second run", 30, || {
        (count_files(&second) >= 2).then_some(())
    });
    let out = stop(child);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spooled by an earlier run are sent first"),
        "{stderr}"
    );
    let mut all = before;
    all.extend(written(&second));
    assert_same_intervals(&log, "http", &all);
    receiver.stop();
}

/// Off-CPU time and a counter group's counts are sample types of their own in the file; each
/// reaches the stores as its own OTLP profile (and in Pyroscope's pprof as is), sample for
/// sample.
#[test]
fn off_cpu_and_counter_group_columns_go_out_as_their_own_sample_types() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    for (name, extra, fixture_args) in [
        ("offcpu", &["--off-cpu"][..], &["waits", "25", "2"][..]),
        (
            "group",
            &["--read", "page-faults"][..],
            &["chain", "3.5"][..],
        ),
    ] {
        let dir = scratch(&format!("export-{name}"));
        let log = dir.join("requests.jsonl");
        let receiver = Receiver::start(&log, [0; 3], None);
        let (series, mut args) = interval_args(&dir, "99");
        args.extend(extra.iter().map(|a| a.to_string()));
        args.extend(receiver.exports(&PROTOCOLS));
        args.push("--".into());
        args.push(path(fixture_args[0]));
        args.extend(fixture_args[1..].iter().map(|a| a.to_string()));
        let out = Command::new(profiler_bin())
            .args(&args)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        let files = written(&series);
        let types: std::collections::BTreeSet<String> = files
            .iter()
            .flat_map(|f| f["rows"].as_array().cloned().unwrap_or_default())
            .map(|r| {
                format!(
                    "{}/{}",
                    r["type"].as_str().unwrap(),
                    r["unit"].as_str().unwrap()
                )
            })
            .collect();
        let wanted = match name {
            "offcpu" => "off-cpu/nanoseconds",
            _ => "page-faults/count",
        };
        assert!(types.contains(wanted), "{name}: {types:?}");
        for p in PROTOCOLS {
            assert_same_intervals(&log, p, &files);
        }
        receiver.stop();
    }
}

/// TLS to every store: trusted through --export-ca, and refused without it (the test CA is
/// in no system store).
#[test]
fn tls_exports_trust_the_given_ca_and_only_it() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("export-tls");
    // A CA, and a certificate it signs for 127.0.0.1.
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=profiler test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
    let log = dir.join("requests.jsonl");
    let receiver = Receiver::start_with(
        &log,
        [0; 3],
        None,
        Some((&dir.join("server.pem"), &dir.join("server.key"))),
    );
    let exports: Vec<String> = [
        ("otlp+grpcs", "grpc"),
        ("otlp+https", "http"),
        ("pyroscope+https", "pyroscope"),
        ("pyroscope+connects", "push"),
    ]
    .iter()
    .flat_map(|(scheme, p)| {
        [
            "--export".to_string(),
            format!("{scheme}://127.0.0.1:{}", receiver.port(p)),
        ]
    })
    .collect();
    let run = |name: &str, ca: bool| {
        let file = dir.join(format!("{name}.pb.gz"));
        let mut args: Vec<String> = ["record", "-F", "99", "-q", "--export-flush", "2", "-o"]
            .map(String::from)
            .to_vec();
        args.push(file.display().to_string());
        args.extend(exports.iter().cloned());
        if ca {
            args.push("--export-ca".into());
            args.push(dir.join("ca.pem").display().to_string());
        }
        args.extend(["--", &path("chain"), "1"].map(String::from));
        let out = Command::new(profiler_bin()).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        (decode(&file), stderr)
    };
    let (want, stderr) = run("trusted", true);
    for p in PROTOCOLS {
        assert_same_intervals(&log, p, std::slice::from_ref(&want));
    }
    for (url, n) in totals(&stderr) {
        assert_eq!(n, [1, 0, 0], "{url}: {stderr}");
    }
    // System roots only: the handshake fails, nothing reaches a store.
    let (_, stderr) = run("untrusted", false);
    for (url, n) in totals(&stderr) {
        assert_eq!(n, [0, 0, 1], "{url}: {stderr}");
    }
    assert_eq!(
        requests(&log).len(),
        PROTOCOLS.len(),
        "only the trusted run's requests arrived"
    );
    receiver.stop();
}

/// A sink that fails does not cost the others what they hold: the run's file cannot be put
/// in place (its directory is removed during the run), yet the store gets the profile and
/// the table is printed; the run then fails with the file named.
#[test]
fn a_file_that_cannot_be_written_costs_the_store_nothing() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("export-file-fails");
    let log = dir.join("requests.jsonl");
    let receiver = Receiver::start(&log, [0; 3], None);
    let out_dir = dir.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let file = out_dir.join("run.pb.gz");
    let mut target = KillOnDrop(
        Command::new(fixture("chain"))
            .arg("30")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = target.0.id().to_string();
    let mut args: Vec<String> = ["record", "-F", "199", "-p", &pid, "-o"]
        .map(String::from)
        .to_vec();
    args.push(file.display().to_string());
    args.extend(receiver.exports(&["http"]));
    let mut child = Command::new(profiler_bin())
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = wait_recording(&mut child);
    // The file was created (hidden) at the start; its directory goes away under it.
    std::fs::remove_dir_all(&out_dir).unwrap();
    // SAFETY: kill(2) on our own child, which has not been waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let status = child.wait().unwrap();
    let stderr = lines.finish();
    let _ = target.0.kill();
    // The file's error, once, and the run's status 1 (its own error comes before the signal).
    assert_eq!(status.code(), Some(1), "{stderr}");
    let failed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("profiler: error: "))
        .collect();
    let needle = format!("profiler: error: writing {}: ", file.display());
    assert!(
        matches!(failed[..], [one] if one.starts_with(&needle)),
        "{stderr}"
    );
    assert!(!file.exists());
    // The store got the profile; the table was printed.
    assert_eq!(totals(&stderr).len(), 1, "{stderr}");
    for (url, n) in totals(&stderr) {
        assert_eq!(n, [1, 0, 0], "{url}: {stderr}");
    }
    assert_eq!(accepted(&log, "http").len(), 1, "{stderr}");
    assert!(stdout.contains(" samples of cpu-clock"), "{stdout}");
    receiver.stop();
}

/// Each process is its own service in the stores, as it names itself (OTEL_SERVICE_NAME, or
/// service.name in OTEL_RESOURCE_ATTRIBUTES, in its environment), else by its executable
/// (OTLP's `unknown_service:chain`, Pyroscope's `chain`), also once it has exited; Pyroscope
/// gets a series (an `/ingest` upload) per application, together the file. `--service-name`
/// names them all one service, and Pyroscope gets the file itself again.
#[test]
fn each_process_is_its_own_service_unless_one_is_forced() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("export-services");
    let log = dir.join("requests.jsonl");
    let receiver = Receiver::start(&log, [0; 3], None);
    let spawn = |env: &[(&str, &str)]| {
        let mut cmd = Command::new(fixture("chain"));
        cmd.arg("60")
            .stdout(Stdio::null())
            .env_remove("OTEL_SERVICE_NAME")
            .env_remove("OTEL_RESOURCE_ATTRIBUTES")
            .envs(env.iter().copied());
        KillOnDrop(cmd.spawn().unwrap())
    };
    let named = spawn(&[("OTEL_SERVICE_NAME", "checkout")]);
    let attributed = spawn(&[(
        "OTEL_RESOURCE_ATTRIBUTES",
        "deployment.environment=test,service.name=bill%20ing",
    )]);
    let unnamed = spawn(&[]);
    let mut brief = spawn(&[("OTEL_SERVICE_NAME", "brief")]);
    let pid = |c: &KillOnDrop| c.id() as i64;
    let (named_pid, attributed_pid, unnamed_pid, brief_pid) =
        (pid(&named), pid(&attributed), pid(&unnamed), pid(&brief));
    let live = format!("{named_pid},{attributed_pid},{unnamed_pid}");
    let record = |name: &str, pids: &str, extra: &[&str]| {
        let file = dir.join(format!("{name}.pb.gz"));
        // Not -q: wait_recording waits for the start line.
        let mut args: Vec<String> = ["record", "-F", "199", "-d", "4", "-p", pids, "-o"]
            .map(String::from)
            .to_vec();
        args.push(file.display().to_string());
        args.extend(receiver.exports(&PROTOCOLS));
        args.extend(extra.iter().map(|a| a.to_string()));
        let child = Command::new(profiler_bin())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        (KillOnDrop(child), file)
    };
    let sorted = |rows: Vec<Value>| {
        let mut rows: Vec<String> = rows.iter().map(Value::to_string).collect();
        rows.sort();
        rows
    };
    let rows = |v: &Value| v["rows"].as_array().cloned().unwrap_or_default();

    // Four processes, the last killed (and reaped) a while into the run: gone by the end.
    let (mut child, file) = record("own", &format!("{live},{brief_pid}"), &[]);
    let lines = wait_recording(&mut child);
    let cpu = cpu_seconds(brief.id());
    wait_for("the brief process to run under the recording", 30, || {
        (cpu_seconds(brief.id()) > cpu + 0.5).then_some(())
    });
    brief.kill().unwrap();
    brief.wait().unwrap();
    let status = child.wait().unwrap();
    let stderr = lines.finish();
    assert!(status.success(), "{stderr}");
    // OTLP's two requests, /ingest's three uploads and the Push API's one request, logged
    // (a gRPC request is, once its answer is out).
    wait_for("every request in the log", 10, || {
        (requests(&log).len() >= 6).then_some(())
    });
    let want = decode(&file);
    let pids_of = |rows: &[Value]| -> std::collections::BTreeSet<i64> {
        rows.iter()
            .map(|r| r["labels"]["pid"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(
        pids_of(&rows(&want)),
        [named_pid, attributed_pid, unnamed_pid, brief_pid].into(),
        "every process was sampled"
    );
    // OTLP: a resource per process, with its service.
    for p in ["grpc", "http"] {
        assert_same_intervals(&log, p, std::slice::from_ref(&want));
        let got = accepted(&log, p);
        let resources = got[0]["resources"].as_array().unwrap();
        let of = |pid: i64| {
            resources
                .iter()
                .find(|r| r["process.pid"] == pid)
                .unwrap_or_else(|| panic!("{p}: no resource for {pid}: {resources:?}"))
        };
        for (pid, service) in [
            (named_pid, "checkout"),
            (attributed_pid, "bill ing"),
            (unnamed_pid, "unknown_service:chain"),
            // Gone before the export: its executable's name, from its samples.
            (brief_pid, "unknown_service:chain"),
        ] {
            assert_eq!(of(pid)["service.name"], service, "{p}: {}", of(pid));
            assert_eq!(of(pid)["process.executable.name"], "chain", "{p}");
        }
        assert!(of(unnamed_pid)["process.executable.path"].is_string());
        assert!(of(brief_pid)["process.executable.path"].is_null());
    }
    // Pyroscope: a series per application, of its processes' samples; together, the file.
    let app_pids = |app: &str| -> std::collections::BTreeSet<i64> {
        match app {
            "checkout" => [named_pid].into(),
            "bill ing" => [attributed_pid].into(),
            _ => [unnamed_pid, brief_pid].into(),
        }
    };
    let uploads: Vec<Value> = requests(&log)
        .into_iter()
        .filter(|r| r["protocol"] == "pyroscope" && r["status"] == 200)
        .collect();
    let mut names = Vec::new();
    let mut together = Vec::new();
    for u in &uploads {
        let name = u["query"]["name"].as_str().unwrap();
        let app = name.split('{').next().unwrap();
        assert!(name[app.len()..].starts_with("{hostname="), "{name}");
        assert_eq!(pids_of(&rows(&u["summary"])), app_pids(app), "{name}");
        names.push(app.to_string());
        together.extend(rows(&u["summary"]));
    }
    names.sort();
    assert_eq!(names, ["bill ing", "chain", "checkout"]);
    assert_eq!(
        sorted(together),
        sorted(rows(&want)),
        "/ingest's uploads are the file"
    );
    let pushes = accepted(&log, "push");
    assert_eq!(pushes.len(), 1);
    assert_eq!(
        samples(&pushes[0]),
        samples(&want),
        "the Push API's series are the file"
    );
    let push = requests(&log)
        .into_iter()
        .find(|r| r["protocol"] == "push")
        .unwrap();
    let mut apps: Vec<String> = Vec::new();
    for s in push["series"].as_array().unwrap() {
        let app = s["labels"]["service_name"].as_str().unwrap().to_string();
        assert_eq!(pids_of(&rows(s)), app_pids(&app), "{app}");
        apps.push(app);
    }
    apps.sort();
    assert_eq!(apps, names);

    // --service-name: one service for every process, and Pyroscope gets the file itself.
    let start = requests(&log).len();
    let (mut child, file) = record("forced", &live, &["--service-name", "all-of-them"]);
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    wait_for("every request in the log", 10, || {
        (requests(&log).len() >= start + PROTOCOLS.len()).then_some(())
    });
    let want = decode(&file);
    let since: Vec<Value> = requests(&log).split_off(start);
    assert_eq!(
        since.len(),
        PROTOCOLS.len(),
        "one request per store: {since:?}"
    );
    for r in &since {
        assert_eq!(r["status"], 200, "{r}");
        assert_eq!(samples(&r["summary"]), samples(&want), "{r}");
        match r["protocol"].as_str().unwrap() {
            "grpc" | "http" => {
                let resources = r["summary"]["resources"].as_array().unwrap();
                assert_eq!(resources.len(), 3, "{r}");
                for res in resources {
                    assert_eq!(res["service.name"], "all-of-them", "{res}");
                }
            }
            "pyroscope" => {
                let name = r["query"]["name"].as_str().unwrap();
                assert!(name.starts_with("all-of-them{hostname="), "{name}");
                assert_eq!(r["summary"]["sha256"], want["sha256"]);
            }
            _ => {
                let series = r["series"].as_array().unwrap();
                assert_eq!(series.len(), 1, "{r}");
                assert_eq!(series[0]["labels"]["service_name"], "all-of-them");
                assert_eq!(series[0]["sha256"], want["sha256"]);
            }
        }
    }
    receiver.stop();
}

/// A continuous agent that only ships to stores needs no directory: `--interval` with
/// `--export` and no `-o` sends every interval and writes no file (not even the one-shot
/// default, `profile.pb.gz`).
#[test]
fn intervals_go_to_the_stores_without_a_directory() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("export-no-output");
    let cwd = dir.join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let log = dir.join("requests.jsonl");
    let receiver = Receiver::start(&log, [0; 3], None);
    let mut args: Vec<String> = ["record", "-F", "99", "-q", "--interval", "1"]
        .map(String::from)
        .to_vec();
    args.extend(receiver.exports(&["grpc", "http"]));
    args.extend(["--", &path("chain"), "3.5"].map(String::from));
    let out = Command::new(profiler_bin())
        .args(&args)
        .current_dir(&cwd)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(dir_entries(&cwd).is_empty(), "{:?}", dir_entries(&cwd));
    assert!(!stderr.contains("wrote "), "{stderr}");
    // 3.5 s in intervals of 1 s: three whole ones and the last half.
    let grpc = accepted(&log, "grpc");
    assert!(
        (4..=5).contains(&grpc.len()),
        "{} intervals: {stderr}",
        grpc.len()
    );
    assert_eq!(
        grpc.iter().map(samples).collect::<Vec<_>>(),
        accepted(&log, "http")
            .iter()
            .map(samples)
            .collect::<Vec<_>>(),
        "both stores got the same intervals"
    );
    let rows: Vec<Value> = grpc
        .iter()
        .flat_map(|s| s["rows"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["type"] == "samples")
        .collect();
    let sum = |leaf_only: bool| -> u64 {
        rows.iter()
            .filter(|r| !leaf_only || r["stack"][0] == "leaf")
            .map(|r| r["value"].as_u64().unwrap())
            .sum()
    };
    // The chain's samples, whatever CPU a busy host gave it (a loaded one gave it a third).
    let (leafs, all) = (sum(true), sum(false));
    assert!(
        all >= 50 && leafs * 10 >= all * 9,
        "the chain's leaf: {leafs} of {all} samples"
    );
    for (url, n) in totals(&stderr) {
        assert_eq!(n, [grpc.len() as u64, 0, 0], "{url}: {stderr}");
    }
    receiver.stop();
}

/// `record -F RATE -q --interval 1 -o DIR/profiles` (the directory made first: --interval
/// writes into an existing one), and that directory.
fn interval_args(dir: &Path, rate: &str) -> (PathBuf, Vec<String>) {
    let series = dir.join("profiles");
    std::fs::create_dir_all(&series).unwrap();
    let mut args: Vec<String> = ["record", "-F", rate, "-q", "--interval", "1", "-o"]
        .map(String::from)
        .to_vec();
    args.push(series.display().to_string());
    (series, args)
}

/// A Go service traced with OpenTelemetry's Go SDK (Debian's), each request a span whose
/// trace and span ids its work carries as pprof labels (`tests/fixtures/go/traced.go`): the
/// OTLP stores get every sample of a request linked to its trace, the labels as
/// `process.context.label.*` attributes, and Pyroscope's Push API the same labels as the file.
#[test]
fn a_go_services_spans_link_its_samples_to_their_traces() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("export-traced");
    let sdk = Path::new("/usr/share/gocode/src/go.opentelemetry.io/otel/sdk/trace");
    if !sdk.is_dir() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "OpenTelemetry's Go SDK is missing under CI: cargo xtask test installs \
             golang-opentelemetry-otel-dev"
        );
        eprintln!("skipped: no {}", sdk.display());
        return;
    }
    let bin = dir.join("traced");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/go/traced.go");
    let built = Command::new("go")
        .args(["build", "-ldflags", "-s -w", "-o"])
        .arg(&bin)
        .arg(&src)
        .env("GO111MODULE", "off")
        .env("GOPATH", "/usr/share/gocode")
        .env("GOCACHE", dir.join("gocache"))
        .env("HOME", &dir)
        .env("GOTOOLCHAIN", "local")
        .output()
        .expect("go build");
    assert!(
        built.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let log = dir.join("requests.jsonl");
    let receiver = Receiver::start(&log, [0; 3], None);
    let file = dir.join("traced.pb.gz");
    let printed = dir.join("spans.txt");
    let mut args: Vec<String> = ["record", "-F", "499", "-q", "-o"]
        .map(String::from)
        .to_vec();
    args.push(file.display().to_string());
    args.extend(receiver.exports(&["grpc", "push"]));
    // The requests' spans, as the service prints them.
    let script = format!("{} 4 0.5 > {}", bin.display(), printed.display());
    args.extend(["--", "sh", "-c", &script].map(String::from));
    let out = Command::new(profiler_bin()).args(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let want = decode(&file);
    assert_same_intervals(&log, "grpc", std::slice::from_ref(&want));
    assert_same_intervals(&log, "push", std::slice::from_ref(&want));
    let spans: Vec<String> = std::fs::read_to_string(&printed)
        .unwrap()
        .lines()
        .map(|l| l.replace(' ', "/"))
        .collect();
    assert_eq!(spans.len(), 4, "{spans:?}");
    let got = accepted(&log, "grpc");
    let links = &got[0]["links"];
    // The file's samples in main.handle whose labels `labels_match`.
    let in_handle = |labels_match: &dyn Fn(&Value) -> bool| -> u64 {
        want["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["type"] == "samples"
                    && labels_match(&r["labels"])
                    && r["stack"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|f| f.as_str().is_some_and(|f| f.contains("main.handle")))
            })
            .map(|r| r["value"].as_u64().unwrap_or(0))
            .sum()
    };
    let span_of = |l: &Value| {
        format!(
            "{}/{}",
            l["trace_id"].as_str().unwrap_or(""),
            l["span_id"].as_str().unwrap_or("")
        )
    };
    let mut labelled_all = 0;
    for span in &spans {
        let linked = links[span.as_str()]["samples"].as_u64().unwrap_or(0);
        // Each request's samples: its half second of CPU at 499 Hz (less on a busy host).
        let labelled = in_handle(&|l| span_of(l) == *span);
        eprintln!("{span}: {linked} samples linked, {labelled} labelled in main.handle");
        assert!(labelled >= 50, "{span}: {labelled} samples in main.handle");
        assert!(
            linked >= labelled,
            "{span}: {linked} linked, {labelled} labelled"
        );
        labelled_all += labelled;
    }
    // main.handle runs only inside a request's span.
    let handle = in_handle(&|_| true);
    assert!(
        labelled_all * 100 >= handle * 95,
        "{labelled_all} of {handle} samples in main.handle carry their span"
    );
    assert_eq!(
        links.as_object().map_or(0, |l| l.len()),
        spans.len(),
        "links to traces the service never made: {links}"
    );
    receiver.stop();
}
