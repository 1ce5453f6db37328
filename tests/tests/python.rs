//! The user-space Python stack reader (`profiler::runtimes::python`) against what each
//! interpreter says of its own threads: every pyenv CPython 3.6-3.13 installed here and
//! Debian's python3.11. No BPF: this is the reference the kernel walker is checked against.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use profiler::runtimes::{
    python::{PyFrame, PythonProcess, ThreadStack, Version},
    shared::{libc::tsd_layout, memory::Memory},
};
use profiler_tests::*;

const SCRIPT: &str = include_str!("../fixtures/python/stacks.py");

/// A process killed (and continued first, if stopped) when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory preconditions; pid is our own child, still unreaped.
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

/// What the script wrote of each thread: ident → (native id, frames innermost first).
type Expected = Vec<(u64, Option<u32>, Vec<(String, String, i32)>)>;

fn expected(path: &Path) -> Expected {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json");
    v.as_object()
        .expect("object")
        .iter()
        .map(|(ident, t)| {
            let frames = t["stack"]
                .as_array()
                .expect("stack")
                .iter()
                .map(|f| {
                    (
                        f[0].as_str().unwrap().to_string(),
                        f[1].as_str().unwrap().to_string(),
                        f[2].as_i64().unwrap() as i32,
                    )
                })
                .collect();
            (
                ident.parse().unwrap(),
                t["native"].as_u64().map(|n| n as u32),
                frames,
            )
        })
        .collect()
}

fn frames_of(t: &ThreadStack) -> Result<Vec<(String, String, i32)>, String> {
    t.frames
        .iter()
        .map(|f| match f {
            Ok(PyFrame {
                name,
                filename,
                line: Some(line),
            }) => Ok((name.to_string(), filename.to_string(), *line)),
            Ok(f) => Err(format!("no line: {f:?}")),
            Err(e) => Err(e.to_string()),
        })
        .collect()
}

/// Compares one read of every thread with what the script wrote; `Err` says the first
/// difference.
fn compare(stacks: &[ThreadStack], want: &Expected, version: Version) -> Result<(), String> {
    if stacks.len() != want.len() {
        return Err(format!(
            "{} threads read, {} expected",
            stacks.len(),
            want.len()
        ));
    }
    for (ident, native, frames) in want {
        let t = stacks
            .iter()
            .find(|t| t.thread_id == *ident)
            .ok_or_else(|| format!("thread {ident} not read"))?;
        if version.minor >= 11 && t.native_thread_id != *native {
            return Err(format!(
                "thread {ident}: native id {:?}, want {native:?}",
                t.native_thread_id
            ));
        }
        let got = frames_of(t)?;
        if got != *frames {
            return Err(format!("thread {ident}:\n got  {got:?}\n want {frames:?}"));
        }
    }
    Ok(())
}

fn check_interpreter(python: &Path, version: Version, dir: &Path) {
    let what = format!("{} ({version})", python.display());
    let script = dir.join(format!("stacks-{version}.py"));
    std::fs::write(&script, SCRIPT).expect("write script");
    let out = dir.join(format!("stacks-{version}.json"));
    let child = Command::new(python)
        .arg(&script)
        .arg(&out)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn python");
    let mut p = Running(child);
    let pid = p.0.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !out.exists() {
        assert!(
            p.0.try_wait().unwrap().is_none(),
            "{what}: the script exited"
        );
        assert!(
            Instant::now() < deadline,
            "{what}: no stacks written in 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let want = expected(&out);
    assert_eq!(want.len(), 6, "{what}");
    assert!(
        want.iter().any(|(_, _, f)| f.len() > 200),
        "{what}: the recursion is in the expectations"
    );

    // Running (the spinners hold their lines while the GIL moves between them; the last
    // reporter may still be returning from `report` when the file appears): reads retried
    // until one is exact, with a deadline.
    let mut proc = PythonProcess::attach(pid).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(proc.interpreter.version, version, "{what}");
    // glibc's PTHREAD_KEYS_MAX is 1024: a key outside is a wrong offset.
    let key = proc.tss_key().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(key < 1024, "{what}: TSS key {key}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut reads = 0;
    loop {
        reads += 1;
        let last = match proc
            .stacks()
            .map_err(|e| e.to_string())
            .and_then(|s| compare(&s, &want, version))
        {
            Ok(()) => break,
            Err(e) => e,
        };
        assert!(Instant::now() < deadline, "{what} (running): {last}");
    }
    let codes = proc.cached_codes();

    // Stopped, once the threads are where they stay: one read, exact, from the cache.
    signal(pid, libc::SIGSTOP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while trace_state(pid).1 != 'T' {
        assert!(Instant::now() < deadline, "{what}: never stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    let stacks = proc.stacks().unwrap_or_else(|e| panic!("{what}: {e}"));
    if let Err(diff) = compare(&stacks, &want, version) {
        panic!("{what} (stopped): {diff}");
    }
    assert_eq!(
        proc.cached_codes(),
        codes,
        "{what}: the second read came from the cache"
    );

    // The kernel's way to the current thread state: pthread_getspecific(autoTSSkey)
    // emulated from each thread's `struct pthread` (glibc's pthread_t is its address) gives
    // the very PyThreadState the interpreter's thread list holds.
    let tsd = tsd_layout(pid).unwrap_or_else(|e| panic!("{what}: {e}"));
    for t in &stacks {
        let at = tsd
            .value_addr(t.thread_id, key)
            .expect("key in the first block");
        let via_tsd = proc
            .memory()
            .read_u64(at)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(via_tsd, t.tstate, "{what}: thread {}", t.thread_id);
    }
    signal(pid, libc::SIGCONT);
    let depth: usize = want.iter().map(|(_, _, f)| f.len()).sum();
    eprintln!(
        "{what}: 6 threads, {depth} frames exact (running after {reads} read(s), then stopped), {codes} code objects, TSS key {key} (each thread's state found through it)"
    );
}

#[test]
fn every_thread_reads_as_the_interpreter_says() {
    let found = python_interpreters();
    assert!(
        !found.is_empty() || std::env::var("CI").is_err(),
        "no Python installed under CI"
    );
    let dir = scratch("python-stacks");
    for (python, version) in found {
        check_interpreter(&python, version, &dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
