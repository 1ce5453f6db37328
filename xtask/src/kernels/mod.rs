//! `cargo xtask kernels [LABEL..]`: the eBPF programs on the kernels users run. Each kernel
//! of `xtask/kernels.txt` (Debian's images, fetched and cached) boots under qemu with an
//! initramfs holding the release profiler, libcpc.so and the compiled fixtures, and runs the
//! guest suite (`guest.rs`, running the scenarios of `profiler-scenarios`, which the host tests
//! run too); `host` runs the same suite natively on this machine's kernel. arm64 kernels boot
//! under qemu-system-aarch64 with an image of the same parts cross-built for aarch64.
//! One line per kernel and check; the consoles, failure evidence and verifier logs go to
//! target/kernels/, with results.md (the table in docs/kernels.md) and results.json.

mod boot;
mod fetch;
pub mod guest;
mod image;

use std::{
    fmt::Write as _,
    fs,
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{arch::Arch, util::workspace_root};
use boot::{CheckOutcome, SuiteOutput};

/// One line of `kernels.txt`.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub label: String,
    /// The Debian suite and package pattern; none for `host`.
    pub suite: Option<String>,
    pub package: Option<String>,
    /// What the image is built for and qemu emulates (`host`: this machine's).
    pub arch: Arch,
}

impl Kernel {
    fn is_host(&self) -> bool {
        self.suite.is_none()
    }
}

/// Parses the kernel list (see `xtask/kernels.txt`).
pub fn parse_list(text: &str) -> anyhow::Result<Vec<Kernel>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let kernel = match f[..] {
            ["host"] => Kernel {
                label: "host".into(),
                suite: None,
                package: None,
                arch: Arch::HOST,
            },
            [label, suite, package, ref arch @ ..] if arch.len() <= 1 => {
                let arch = match arch.first() {
                    None => Arch::Amd64,
                    Some(name) => Arch::from_debian(name).with_context(|| {
                        format!(
                            "kernels.txt line {}: unknown architecture {name} (amd64, arm64)",
                            n + 1
                        )
                    })?,
                };
                Kernel {
                    label: label.into(),
                    suite: Some(suite.into()),
                    package: Some(package.into()),
                    arch,
                }
            }
            _ => bail!(
                "kernels.txt line {}: expected `LABEL SUITE PACKAGE [ARCH]` or `host`",
                n + 1
            ),
        };
        out.push(kernel);
    }
    Ok(out)
}

/// Options of `cargo xtask kernels`.
pub struct Options {
    /// Labels (or their prefixes) to run; all when empty.
    pub labels: Vec<String>,
    /// Re-resolve and re-fetch the images even when cached.
    pub refresh: bool,
    /// Only the checks whose name contains this.
    pub only: Option<String>,
    /// Build the deliberately broken eBPF program (the harness must fail with the verifier's
    /// message).
    pub broken: bool,
    /// Seconds allowed per kernel (boot and suite).
    pub limit: u64,
}

/// The time a kernel may take, boot and suite. The suite takes under a minute on 5.10-6.12;
/// on 7.x under TCG each check that loads the unwind-table program spends ~35 s in the
/// verifier since the Python walker joined it (about 6 minutes in all).
pub const DEFAULT_LIMIT_SECS: u64 = 900;

/// The kernels `labels` name (all when empty): each by its label, else the first whose
/// label starts with it, or `amd64` / `arm64` for every Debian kernel of that architecture.
fn select(all: &[Kernel], labels: &[String]) -> anyhow::Result<Vec<Kernel>> {
    if labels.is_empty() {
        return Ok(all.to_vec());
    }
    let mut out = Vec::new();
    for want in labels {
        if let Some(arch) = Arch::from_debian(want) {
            out.extend(
                all.iter()
                    .filter(|k| !k.is_host() && k.arch == arch)
                    .cloned(),
            );
            continue;
        }
        let k = all
            .iter()
            .find(|k| &k.label == want)
            .or_else(|| all.iter().find(|k| k.label.starts_with(want.as_str())))
            .with_context(|| format!("no kernel {want} in xtask/kernels.txt"))?;
        out.push(k.clone());
    }
    Ok(out)
}

/// The suites `all` names for `arch`'s kernels (the private apt sources, one set per
/// architecture), and for another architecture than this machine's the suite its busybox
/// comes from.
/// The architectures of `kernels`, each once, in their order.
fn archs_of(kernels: &[Kernel]) -> Vec<Arch> {
    let mut archs: Vec<Arch> = Vec::new();
    for k in kernels {
        if !archs.contains(&k.arch) {
            archs.push(k.arch);
        }
    }
    archs
}

fn suites_for(all: &[Kernel], arch: Arch) -> Vec<String> {
    let mut suites: Vec<String> = all
        .iter()
        .filter(|k| k.arch == arch)
        .filter_map(|k| k.suite.clone())
        .collect();
    if !arch.is_host() {
        suites.push(fetch::busybox_suite());
    }
    suites.sort_unstable();
    suites.dedup();
    suites
}

/// The initramfs for `arch`: its release build (and, for another architecture, the guest
/// suite's binary, cross-built too), the fixtures compiled for it, its busybox.
fn image_for(
    arch: Arch,
    all: &[Kernel],
    opts: &Options,
    out: &Path,
) -> anyhow::Result<image::Initramfs> {
    let features: &[&str] = if opts.broken {
        &["profiler/broken-ebpf"]
    } else {
        &[]
    };
    // Laid out as `cargo xtask install` does, so everything it installs is built.
    let mut packages = crate::release::INSTALLED.to_vec();
    if !arch.is_host() {
        packages.push("xtask");
    }
    let built = crate::release::build_release(arch, &packages, features)?;
    let parts = if arch.is_host() {
        image::Parts {
            arch,
            suite: std::env::current_exe().context("locating the xtask binary")?,
            busybox: image::host_busybox()?,
            built,
        }
    } else {
        let suites = suites_for(all, arch);
        let suites: Vec<&str> = suites.iter().map(String::as_str).collect();
        image::Parts {
            arch,
            suite: built.join("xtask"),
            busybox: fetch::busybox(arch, &suites, opts.refresh)?,
            built,
        }
    };
    // This machine's image where it always was (target/kernels/root), others beside it.
    let dir = if arch.is_host() {
        out.to_path_buf()
    } else {
        out.join(format!("image-{}", arch.debian()))
    };
    fs::create_dir_all(&dir)?;
    image::build(&parts, &dir)
}

/// What [`kernels`] fetches and builds before its first boot, made ahead of it (`cargo xtask
/// warm`): every kernel image and each other architecture's busybox, then each architecture's
/// release build, the host's also with the broken program (CI's refusal check). It installs
/// no package: an architecture whose cross toolchain is not installed within `wait` is left
/// to [`kernels`], saying so.
pub fn warm(wait: Duration) -> anyhow::Result<()> {
    let all = parse_list(&fs::read_to_string(
        workspace_root().join("xtask/kernels.txt"),
    )?)?;
    let mut archs = archs_of(&all);
    for k in all.iter().filter(|k| !k.is_host()) {
        let suites = suites_for(&all, k.arch);
        let suites: Vec<&str> = suites.iter().map(String::as_str).collect();
        fetch::image(k, &suites, false)?;
    }
    for &arch in archs.iter().filter(|a| !a.is_host()) {
        let suites = suites_for(&all, arch);
        let suites: Vec<&str> = suites.iter().map(String::as_str).collect();
        fetch::busybox(arch, &suites, false)?;
    }
    // The host's first: the bench needs it sooner, and another architecture's toolchain may
    // still be on its way (the test command installs it).
    archs.sort_by_key(|a| !a.is_host());
    for arch in archs {
        let mut packages = crate::release::INSTALLED.to_vec();
        if arch.is_host() {
            crate::release::build_release(arch, &packages, &["profiler/broken-ebpf"])?;
        } else {
            let deadline = Instant::now() + wait;
            while !crate::packages::present(crate::packages::cross(arch)) {
                if Instant::now() >= deadline {
                    eprintln!(
                        "warm: no {} cross toolchain after {} s; its build is left to `kernels`",
                        arch.debian(),
                        wait.as_secs()
                    );
                    return Ok(());
                }
                std::thread::sleep(Duration::from_secs(5));
            }
            packages.push("xtask");
        }
        crate::release::build_release(arch, &packages, &[])?;
    }
    Ok(())
}

pub fn kernels(opts: &Options) -> anyhow::Result<()> {
    let root = workspace_root();
    let all = parse_list(&fs::read_to_string(root.join("xtask/kernels.txt"))?)?;
    let selected = select(&all, &opts.labels)?;
    crate::setup::setup()?;
    let archs = archs_of(&selected);
    for &arch in &archs {
        let needs_qemu = selected.iter().any(|k| !k.is_host() && k.arch == arch);
        crate::packages::ensure_minimal(if needs_qemu {
            crate::packages::kernels(arch)
        } else {
            crate::packages::KERNELS_HOST
        })?;
    }
    let out = root.join("target/kernels");
    fs::create_dir_all(&out)?;
    let mut images = std::collections::HashMap::new();
    for &arch in &archs {
        images.insert(arch, image_for(arch, &all, opts, &out)?);
    }
    let mut results = Vec::new();
    for k in &selected {
        let initramfs = &images[&k.arch];
        let dir = out.join(&k.label);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let mut start = Instant::now();
        let (source, suite) = if k.is_host() {
            let _lock = TestLock::take()?;
            // The time is the suite's, not the wait for other checkouts' tests.
            start = Instant::now();
            (
                "this machine, natively".to_string(),
                run_native(&initramfs.prefix, &dir, opts)?,
            )
        } else {
            let suites = suites_for(&all, k.arch);
            let suites: Vec<&str> = suites.iter().map(String::as_str).collect();
            let img = fetch::image(k, &suites, opts.refresh)?;
            // The guest reads `--only` from its command line.
            let append = opts
                .only
                .as_ref()
                .map(|o| format!("profiler.only={o}"))
                .unwrap_or_default();
            let boot = |log: &str| {
                boot::boot(
                    &k.label,
                    k.arch,
                    &img.vmlinuz,
                    &initramfs.cpio,
                    &append,
                    &dir.join(log),
                    Duration::from_secs(opts.limit),
                )
            };
            let mut suite = boot("console.log")?;
            // Once more, visibly, the first console kept, when the kernel did not reach the
            // suite (a boot-time panic of a starved TCG vCPU) or oopsed during it (seen once
            // in five runs of 7.x under TCG: "Oops: int3" in the page-fault path, likely
            // text patching racing the emulator) or locked up (6.1, once in about 30 runs,
            // cause not known: the console kept says where). Only the second run counts.
            let again = if suite.release.is_none() {
                Some(("did not start", "console-first-boot.log"))
            } else if !suite.done && kernel_oopsed(&dir.join("console.log")) {
                Some(("oopsed or locked up during the suite", "console-oops.log"))
            } else {
                None
            };
            if let Some((what, kept)) = again {
                eprintln!(
                    "kernels: {} {what} (see {}); booting it again",
                    k.label,
                    dir.join(kept).display()
                );
                fs::rename(dir.join("console.log"), dir.join(kept))?;
                suite = boot("console.log")?;
            }
            (img.package, suite)
        };
        let wall = start.elapsed().as_secs_f64();
        save_evidence(&dir, &suite.checks)?;
        results.push(KernelResult {
            kernel: k.clone(),
            source,
            suite,
            wall,
        });
    }
    let expected = guest::check_names()
        .into_iter()
        .filter(|c| opts.only.as_deref().is_none_or(|o| c.contains(o)))
        .count();
    let table = summary(&results, &out, expected);
    eprint!("{table}");
    fs::write(out.join("results.md"), markdown(&results))?;
    fs::write(out.join("results.json"), json(&results).to_string())?;
    let failed: Vec<String> = results
        .iter()
        .filter(|r| !r.ok(expected))
        .map(|r| r.kernel.label.clone())
        .collect();
    if !failed.is_empty() {
        bail!(
            "kernels failing: {} (consoles and evidence in {})",
            failed.join(", "),
            out.display()
        );
    }
    Ok(())
}

/// Whether a guest's console shows a kernel oops or panic.
fn kernel_oopsed(console: &Path) -> bool {
    fs::read(console).is_ok_and(|bytes| {
        let text = String::from_utf8_lossy(&bytes);
        text.contains("Oops:") || text.contains("Kernel panic")
    })
}

/// The suite run natively on this machine's kernel; the caller holds the lock the
/// privileged tests share (they measure the same CPUs and look at system-wide state).
fn run_native(prefix: &Path, dir: &Path, opts: &Options) -> anyhow::Result<SuiteOutput> {
    let scratch = std::env::temp_dir().join(format!("profiler-kernels-{}", std::process::id()));
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("kernels-guest")
        .arg("--root")
        .arg(prefix)
        .arg("--scratch")
        .arg(&scratch)
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .stdout(Stdio::piped());
    if let Some(only) = &opts.only {
        cmd.args(["--only", only]);
    }
    let start = Instant::now();
    let mut child = cmd.spawn().context("starting the suite")?;
    let mut suite = SuiteOutput::default();
    let mut log = String::new();
    for line in BufReader::new(child.stdout.take().context("suite stdout")?).lines() {
        let line = line?;
        let before = suite.checks.len();
        suite.line(&line, start.elapsed().as_secs_f64());
        if suite.checks.len() > before
            && let Some(c) = suite.checks.last()
        {
            eprintln!(
                "kernels: host  {:<17} {} {:>5.1}s  {}",
                c.name,
                if c.passed { "PASS" } else { "FAIL" },
                c.secs,
                c.summary
            );
        }
        log.push_str(&line);
        log.push('\n');
    }
    child.wait()?;
    let _ = fs::remove_dir_all(&scratch);
    fs::write(dir.join("console.log"), log)?;
    Ok(suite)
}

/// flock on /tmp/profiler-tests.lock, released when the file closes (on drop).
struct TestLock {
    _file: fs::File,
}

impl TestLock {
    fn take() -> anyhow::Result<Self> {
        use std::os::fd::AsRawFd as _;
        let file = fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(std::env::temp_dir().join("profiler-tests.lock"))?;
        // SAFETY: flock on a descriptor we own; released when it closes.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            bail!("flock: {}", std::io::Error::last_os_error());
        }
        Ok(Self { _file: file })
    }
}

struct KernelResult {
    kernel: Kernel,
    /// The package booted, or "this machine, natively".
    source: String,
    suite: SuiteOutput,
    wall: f64,
}

impl KernelResult {
    fn ok(&self, expected: usize) -> bool {
        self.suite.done
            && self.suite.checks.len() + self.suite.skipped.len() == expected
            && self.suite.checks.iter().all(|c| c.passed)
    }
}

/// Each failing check's evidence as `CHECK.log`, and its verifier log (the profiler's
/// message from `Verifier output` on) as `CHECK.verifier.log`.
fn save_evidence(dir: &Path, checks: &[CheckOutcome]) -> anyhow::Result<()> {
    for c in checks.iter().filter(|c| !c.passed) {
        fs::write(dir.join(format!("{}.log", c.name)), c.detail.join("\n"))?;
        if let Some(log) = verifier_log(&c.detail) {
            fs::write(dir.join(format!("{}.verifier.log", c.name)), log.join("\n"))?;
        }
    }
    Ok(())
}

/// The verifier's log in a failure's evidence: from the line with `Verifier output` to the
/// end of the stderr section.
fn verifier_log(detail: &[String]) -> Option<Vec<String>> {
    let start = detail.iter().position(|l| l.contains("Verifier output"))?;
    Some(
        detail[start..]
            .iter()
            .take_while(|l| l.as_str() != "stdout:")
            .cloned()
            .collect(),
    )
}

/// The verifier's verdict: the last line of its log that is not a statistic.
fn verifier_verdict(log: &[String]) -> Option<&str> {
    log.iter().map(|l| l.trim()).rev().find(|l| {
        !l.is_empty()
            && !l.starts_with("processed ")
            && !l.starts_with("verification time")
            && !l.starts_with("stack depth")
            && !l.starts_with("-- END PROG LOAD LOG --")
    })
}

/// One line per kernel and check, then where the evidence is.
fn summary(results: &[KernelResult], out: &Path, expected: usize) -> String {
    let mut s = String::from("\n");
    for r in results {
        let release = r.suite.release.as_deref().unwrap_or("did not start");
        let boot = r
            .suite
            .boot_secs
            .filter(|_| !r.kernel.is_host())
            .map(|b| format!(", booted in {b:.1} s"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "{:<10} {release} ({}){boot}, {:.0} s in all: {}",
            r.kernel.label,
            r.source,
            r.wall,
            if r.ok(expected) { "ok" } else { "FAILED" }
        );
        for c in &r.suite.checks {
            let verdict = if c.passed { "ok  " } else { "FAIL" };
            let mut line = format!(
                "  {:<10} {:<22} {verdict} {:>5.1} s  {}",
                r.kernel.label, c.name, c.secs, c.summary
            );
            if let Some(v) = verifier_log(&c.detail)
                .as_deref()
                .and_then(verifier_verdict)
            {
                let _ = write!(
                    line,
                    "\n        verifier: {v} (log: {})",
                    out.join(&r.kernel.label)
                        .join(format!("{}.verifier.log", c.name))
                        .display()
                );
            }
            let _ = writeln!(s, "{line}");
        }
        for (name, why) in &r.suite.skipped {
            let _ = writeln!(
                s,
                "  {:<10} {name:<22} skip           {why}",
                r.kernel.label
            );
        }
        if !r.suite.done {
            let _ = writeln!(
                s,
                "  {:<10} the suite did not finish: see {}",
                r.kernel.label,
                out.join(&r.kernel.label).join("console.log").display()
            );
        }
    }
    s
}

/// The table of docs/kernels.md: one row per check, one column per kernel.
fn markdown(results: &[KernelResult]) -> String {
    let mut s = String::from("| check |");
    for r in results {
        let release = r.suite.release.as_deref().unwrap_or("did not start");
        let _ = write!(s, " {} (`{release}`) |", r.kernel.label);
    }
    s.push_str("\n|---|");
    s.push_str(&"---|".repeat(results.len()));
    s.push('\n');
    for name in guest::check_names() {
        if results.iter().all(|r| {
            r.suite.checks.iter().all(|c| c.name != name)
                && r.suite.skipped.iter().all(|(n, _)| n != name)
        }) {
            continue;
        }
        let _ = write!(s, "| {name} |");
        for r in results {
            match r.suite.checks.iter().find(|c| c.name == name) {
                Some(c) if c.passed && c.summary.starts_with("refused as documented") => {
                    let _ = write!(s, " refused, as documented ({:.1} s) |", c.secs);
                }
                Some(c) if c.passed => {
                    let _ = write!(s, " pass ({:.1} s) |", c.secs);
                }
                Some(c) => {
                    let _ = write!(s, " **FAIL** ({:.1} s) |", c.secs);
                }
                None if r.suite.skipped.iter().any(|(n, _)| n == name) => {
                    s.push_str(" skipped |");
                }
                None => s.push_str(" not run |"),
            }
        }
        s.push('\n');
    }
    s.push_str("| boot, and all in all |");
    for r in results {
        match r.suite.boot_secs.filter(|_| !r.kernel.is_host()) {
            Some(b) => {
                let _ = write!(s, " {b:.0} s, {:.0} s |", r.wall);
            }
            None => {
                let _ = write!(s, " native, {:.0} s |", r.wall);
            }
        }
    }
    s.push('\n');
    s
}

fn json(results: &[KernelResult]) -> serde_json::Value {
    serde_json::Value::Array(
        results
            .iter()
            .map(|r| {
                serde_json::json!({
                    "label": r.kernel.label,
                    "release": r.suite.release,
                    "source": r.source,
                    "boot_secs": r.suite.boot_secs,
                    "wall_secs": r.wall,
                    "finished": r.suite.done,
                    "skipped": r.suite.skipped.iter().map(|(name, why)| serde_json::json!({
                        "name": name,
                        "why": why,
                    })).collect::<Vec<_>>(),
                    "checks": r.suite.checks.iter().map(|c| serde_json::json!({
                        "name": c.name,
                        "passed": c.passed,
                        "secs": c.secs,
                        "summary": c.summary,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// The guest side: `xtask kernels-guest --root DIR --scratch DIR [--only NAME]`.
pub fn guest(root: &Path, scratch: &Path, only: Option<&str>) -> anyhow::Result<()> {
    // In a guest, `--only` comes on the kernel command line (`profiler.only=NAME`), beside
    // `profiler.emulated` (qemu's TCG; the host's kernel runs the suite natively).
    let cmdline = fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let words: Vec<&str> = cmdline.split_whitespace().collect();
    let cpu = if words.contains(&"profiler.emulated") {
        profiler_scenarios::Cpu::Emulated
    } else {
        profiler_scenarios::Cpu::Native
    };
    let mut env = guest::env_under(root, scratch, cpu);
    env.check()?;
    let from_cmdline = words.iter().find_map(|w| w.strip_prefix("profiler.only="));
    let only = only.or(from_cmdline);
    let skip = guest::read_skips(root);
    let failed = guest::run_suite(&mut env, only, &skip);
    if failed > 0 {
        bail!("{failed} checks failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_in_the_repository_parses() {
        let text = fs::read_to_string(workspace_root().join("xtask/kernels.txt")).unwrap();
        let list = parse_list(&text).unwrap();
        let labels: Vec<&str> = list.iter().map(|k| k.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "5.10",
                "6.1",
                "6.12",
                "7.x",
                "6.1-arm64",
                "6.12-arm64",
                "7.x-arm64",
                "host"
            ]
        );
        assert!(list[7].is_host());
        assert_eq!(list[0].suite.as_deref(), Some("bullseye-security"));
        assert_eq!(list[0].arch, Arch::Amd64);
        assert_eq!(list[4].arch, Arch::Arm64);
        assert_eq!(
            list[4].package.as_deref(),
            Some("linux-image-6.1.0-*-arm64")
        );
        assert!(parse_list("6.1 bookworm").is_err());
    }

    #[test]
    fn the_architecture_is_an_optional_fourth_field() {
        let list = parse_list("a s p\nb s p arm64 # comment\nhost").unwrap();
        assert_eq!(
            list.iter().map(|k| k.arch).collect::<Vec<_>>(),
            [Arch::Amd64, Arch::Arm64, Arch::HOST]
        );
        let err = parse_list("x s p mips").unwrap_err().to_string();
        assert!(err.contains("line 1: unknown architecture mips"), "{err}");
        assert!(parse_list("x s p arm64 extra").is_err());
    }

    #[test]
    fn kernels_are_chosen_by_label_start_or_architecture() {
        let all = parse_list("6.1 s p\n6.12 s p\n6.1-arm64 s p arm64\n6.12-arm64 s p arm64\nhost")
            .unwrap();
        let labels = |want: &[&str]| -> Vec<String> {
            let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
            select(&all, &want)
                .unwrap()
                .into_iter()
                .map(|k| k.label)
                .collect()
        };
        assert_eq!(labels(&[]).len(), 5);
        assert_eq!(labels(&["6.1"]), ["6.1"]);
        assert_eq!(labels(&["6.1-arm64", "host"]), ["6.1-arm64", "host"]);
        assert_eq!(labels(&["6.12-a"]), ["6.12-arm64"]);
        assert_eq!(labels(&["arm64"]), ["6.1-arm64", "6.12-arm64"]);
        assert_eq!(labels(&["amd64"]), ["6.1", "6.12"]);
        assert!(select(&all, &["5.4".to_string()]).is_err());
    }

    #[test]
    fn the_verdict_is_the_last_line_of_the_log() {
        let detail: Vec<String> = [
            "stderr:",
            "profiler: loading the eBPF object: the BPF_PROG_LOAD syscall failed. Verifier output: 0: (bf) r6 = r1",
            "1: (85) call unknown#174",
            "invalid func unknown#174",
            "processed 2 insns",
            "",
            "stdout:",
            "nothing",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let log = verifier_log(&detail).unwrap();
        assert_eq!(log.len(), 5);
        assert_eq!(verifier_verdict(&log), Some("invalid func unknown#174"));
    }
}
