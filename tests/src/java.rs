//! The JVMs the Java tests run on, their fixtures compiled once, and the thread running
//! `main` (shared by `hotspot_layout.rs` and `java_frames.rs`).

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

pub const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";
pub const JDK25: &str = "/usr/lib/jvm/temurin-25-jdk-amd64";

/// Debug information at every PC of compiled code, not only at calls and safepoint polls,
/// for both samplers: a sample between two inlined calls then has its own scope. (Without
/// it, ours take the next debug point's scope and JFR another: Integer.valueOf 9.6 % in JFR
/// and 0.4 % in ours, Random.next 0.6 / 7.7 %, in one CI run on JDK 17.)
pub const DEBUG_NON_SAFEPOINTS: &[&str] =
    &["-XX:+UnlockDiagnosticVMOptions", "-XX:+DebugNonSafepoints"];

/// The JDKs to run on: Debian's 17 (its javac compiles the fixtures; `cargo xtask test`
/// installs it, and under CI=true a missing one is a failure), then Temurin 25 when
/// installed.
pub fn jdks() -> Vec<(u32, &'static str)> {
    if !Path::new(JDK17).join("bin/javac").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no {JDK17}/bin/javac under CI=true"
        );
        eprintln!("SKIP: no {JDK17}/bin/javac");
        return Vec::new();
    }
    let mut out = vec![(17, JDK17)];
    if Path::new(JDK25).join("bin/java").exists() {
        out.push((25, JDK25));
    }
    out
}

/// `fixtures/java` compiled once (by JDK 17's javac: class files 61 run on both).
pub fn classes() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = crate::scratch("java-classes");
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/java");
        let out = Command::new(Path::new(JDK17).join("bin/javac"))
            .args(["-g", "-d"])
            .arg(&dir)
            .args(["Chain", "Library", "Services", "Sleeper"].map(|c| format!("{src}/{c}.java")))
            .output()
            .expect("running javac");
        assert!(
            out.status.success(),
            "javac: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
}

/// The thread running `main`: the launcher's primordial thread only waits, and starts the
/// Java main thread first (HotSpot names neither; both are "java").
pub fn main_thread(pid: u32) -> u32 {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort();
    tids.into_iter()
        .find(|&t| {
            t != pid
                && std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
                    .is_ok_and(|c| c.trim() == "java" || c.trim() == "main")
        })
        .expect("the Java main thread")
}
