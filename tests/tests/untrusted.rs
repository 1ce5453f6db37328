//! Files that other users control, read as root: an unprivileged user's JIT process is
//! profiled by root while its perf map is made a FIFO, a symlink to /dev/zero or to a
//! root-only file, a 2 GiB sparse file, a file of another user, or swapped back and forth.
//! Each recording must end on time with its report, keep its memory, say once what it
//! refused, and show nothing of the foreign file.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use profiler_tests::*;

const NOBODY: u32 = 65534;
const SECRET: &str = "SECRET_ROOT_ONLY_NAME";
const FOREIGN: &str = "FOREIGN_USERS_NAME";

/// The jit fixture run as nobody from a copy nobody can reach; it names its code in
/// /tmp/perf-PID.map (kept at exit). Returns the child and the map's line.
fn jit_as_nobody(dir: &Path) -> (KillOnDrop, PathBuf, String) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.join("jit");
    std::fs::copy(fixture("jit"), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args(["60", "keep"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Killed by the caller when done (or on a panic): it must outlive every recording of it
    // however slowly they attach on a busy host (8 s was not enough for three, beside a
    // release build).
    let child = KillOnDrop(child);
    let map = PathBuf::from(format!("/tmp/perf-{}.map", child.id()));
    let line = wait_for("the jit's perf map", 10, || {
        std::fs::read_to_string(&map)
            .ok()
            .filter(|l| l.ends_with('\n'))
    });
    (child, map, line)
}

/// A root-only file (in a 0700 directory, mode 0600) holding `line` renamed to SECRET.
fn secret_file(dir: &Path, line: &str) -> PathBuf {
    let private = dir.join("private");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let secret = private.join("secret.map");
    std::fs::write(&secret, line.replace("jitted_spin_loop", SECRET)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    secret
}

struct Outcome {
    elapsed: Duration,
    stdout: String,
    stderr: String,
    folded: String,
    peak_rss_kib: u64,
}

/// `record -d 2 -p PID` as root, watched for memory.
fn record_pid(pid: u32, dir: &Path, name: &str) -> Outcome {
    let folded = dir.join(format!("{name}.folded"));
    let start = Instant::now();
    let child = profiler_command()
        .args([
            "record",
            "-F",
            "499",
            "-d",
            "2",
            "-p",
            &pid.to_string(),
            "-o",
        ])
        .arg(&folded)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, held) = watch(child, Duration::from_millis(50));
    let elapsed = start.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Outcome {
        elapsed,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        folded: std::fs::read_to_string(&folded).unwrap_or_default(),
        peak_rss_kib: held.iter().map(|h| h.rss_kib).max().unwrap_or(0),
    }
}

/// One attack: `plant` replaces the map; the recording must end on time, exit 0, name the
/// refusal once, and show no foreign name.
fn attack(name: &str, plant: impl FnOnce(&Path, &str, &Path)) -> Outcome {
    let dir = scratch(&format!("untrusted-{name}"));
    let (mut jit, map, line) = jit_as_nobody(&dir);
    std::fs::remove_file(&map).unwrap();
    plant(&map, &line, &dir);
    let out = record_pid(jit.id(), &dir, name);
    let _ = (jit.kill(), jit.wait());
    let _ = std::fs::remove_file(&map);
    eprintln!(
        "{name}: recording of 2 s took {:.2} s, peak RSS {} MiB; {}",
        out.elapsed.as_secs_f64(),
        out.peak_rss_kib / 1024,
        out.stderr
            .lines()
            .find(|l| l.contains("not read"))
            .unwrap_or("")
    );
    // On time: 2 s of sampling plus set-up and symbolization, never an unending read.
    assert!(
        out.elapsed < Duration::from_secs(12),
        "{name}: took {:?}",
        out.elapsed
    );
    for text in [&out.stdout, &out.folded, &out.stderr] {
        assert!(!text.contains(SECRET), "{name}: the root-only file leaked");
        assert!(
            !text.contains(FOREIGN),
            "{name}: another user's file was used"
        );
    }
    // Memory stays that of a small recording (no file read into it).
    assert!(
        out.peak_rss_kib < 256 * 1024,
        "{name}: {} KiB",
        out.peak_rss_kib
    );
    out
}

fn refused_once(out: &Outcome, what: &str) {
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("not read: perf map"))
        .collect();
    assert_eq!(lines.len(), 1, "one refusal line: {}", out.stderr);
    assert!(lines[0].contains(what), "{}", lines[0]);
    let summary = out.stdout.lines().next().unwrap_or_default();
    assert!(summary.contains("files refused 1"), "{summary}");
}

#[test]
fn a_fifo_as_perf_map_neither_hangs_nor_is_read() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let out = attack("fifo", |map, _, _| {
        let c = std::ffi::CString::new(map.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    });
    refused_once(&out, "FIFO");
}

#[test]
fn symlinks_to_dev_zero_and_to_a_root_only_file_are_not_followed() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let out = attack("dev-zero", |map, _, _| {
        std::os::unix::fs::symlink("/dev/zero", map).unwrap();
    });
    refused_once(&out, "symbolic link");
    let out = attack("secret", |map, line, dir| {
        std::os::unix::fs::symlink(secret_file(dir, line), map).unwrap();
    });
    refused_once(&out, "symbolic link");
}

#[test]
fn a_sparse_2_gib_map_and_another_users_map_are_refused() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let out = attack("sparse", |map, line, _| {
        std::fs::write(map, line.replace("jitted_spin_loop", FOREIGN)).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(map)
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
    });
    refused_once(&out, "over the");
    let out = attack("foreign", |map, line, _| {
        std::fs::write(map, line.replace("jitted_spin_loop", FOREIGN)).unwrap();
        std::os::unix::fs::chown(map, Some(4242), Some(4242)).unwrap();
    });
    refused_once(&out, "owned by uid 4242");
}

#[test]
fn a_map_swapped_with_a_symlink_during_the_run_never_leaks() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let stop = Arc::new(AtomicBool::new(false));
    let mut swapper = None;
    let out = attack("swap", |map, line, dir| {
        // The process's own map (its name is fine to show) and a symlink to the root-only
        // file, renamed over the path in turn, as fast as possible, for the whole run.
        let planted = map.to_path_buf();
        let (map, real, link) = (
            map.to_path_buf(),
            dir.join("real.map"),
            dir.join("link.map"),
        );
        let secret = secret_file(dir, line);
        let line = line.to_string();
        let stop = stop.clone();
        swapper = Some(std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::fs::write(&real, &line).unwrap();
                std::os::unix::fs::chown(&real, Some(NOBODY), Some(NOBODY)).unwrap();
                let _ = std::fs::rename(&real, &map);
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(&secret, &link).unwrap();
                let _ = std::fs::rename(&link, &map);
                swaps += 1;
            }
            swaps
        }));
        wait_for("the first swaps", 10, || {
            std::fs::symlink_metadata(&planted).is_ok().then_some(())
        });
    });
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.expect("planted").join().unwrap();
    eprintln!("swap: {swaps} swaps during the run");
    assert!(swaps > 10, "the path was swapped during the run");
    drop(out);
}

#[test]
fn sigterm_ends_a_run_whose_target_planted_a_fifo_promptly() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("untrusted-sigterm");
    let (mut jit, map, _) = jit_as_nobody(&dir);
    std::fs::remove_file(&map).unwrap();
    let c = std::ffi::CString::new(map.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    let mut worst = Duration::ZERO;
    for _ in 0..3 {
        let mut child = profiler_command()
            .args([
                "record",
                "-F",
                "499",
                "-d",
                "30",
                "-p",
                &jit.id().to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = wait_recording(&mut child);
        // Some samples first (the perf map is read for them).
        wait_for("the kernel to submit a few samples", 30, || {
            (kernel_records_submitted(child.id()) >= 5).then_some(())
        });
        let sent = Instant::now();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let out = child.wait_with_output().unwrap();
        let latency = sent.elapsed();
        worst = worst.max(latency);
        assert_eq!(out.status.code(), Some(143), "{}", stderr.finish());
        assert!(reported_samples(&String::from_utf8_lossy(&out.stdout)) > 0);
    }
    let _ = (jit.kill(), jit.wait());
    let _ = std::fs::remove_file(&map);
    eprintln!(
        "SIGTERM to exit, FIFO planted: worst {} ms of 3",
        worst.as_millis()
    );
    assert!(
        worst < Duration::from_secs(5),
        "worst stop latency {worst:?}"
    );
}
