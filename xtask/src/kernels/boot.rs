//! One boot of one kernel under qemu (TCG: this machine's /dev/kvm cannot run stock
//! kernels), its console saved, the guest suite's lines parsed as they arrive.

use std::{
    fs,
    io::{BufRead, BufReader, Write as _},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::arch::Arch;

/// One check's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckOutcome {
    pub name: String,
    pub passed: bool,
    pub secs: f64,
    pub summary: String,
    /// The failure's evidence (`KDETAIL` lines): the profiler's stderr and stdout.
    pub detail: Vec<String>,
}

/// What a run of the suite (in a guest or natively) printed.
#[derive(Debug, Default)]
pub struct SuiteOutput {
    /// `uname -r` as the suite saw it.
    pub release: Option<String>,
    /// Seconds from qemu's start to the suite's start (the boot).
    pub boot_secs: Option<f64>,
    pub checks: Vec<CheckOutcome>,
    /// The checks the image cannot run (`KSKIP NAME WHY`), with why.
    pub skipped: Vec<(String, String)>,
    /// The suite ran to its end (`KDONE`).
    pub done: bool,
}

impl SuiteOutput {
    /// Takes one line of the suite's output (console noise is ignored).
    pub fn line(&mut self, line: &str, elapsed: f64) {
        // The console may put a carriage return or kernel messages before our text.
        let line = line.trim_end_matches('\r');
        let Some(at) = ["KSTART ", "KCHECK ", "KSKIP ", "KDETAIL ", "KDONE"]
            .iter()
            .filter_map(|m| line.find(m))
            .min()
        else {
            return;
        };
        let line = &line[at..];
        if let Some(rest) = line.strip_prefix("KSTART kernel=") {
            self.release = Some(rest.trim().to_string());
            self.boot_secs = Some(elapsed);
        } else if let Some(rest) = line.strip_prefix("KCHECK ") {
            let mut f = rest.splitn(4, ' ');
            let (Some(name), Some(status), Some(secs)) = (f.next(), f.next(), f.next()) else {
                return;
            };
            self.checks.push(CheckOutcome {
                name: name.to_string(),
                passed: status == "PASS",
                secs: secs.parse().unwrap_or(0.0),
                summary: f.next().unwrap_or("").to_string(),
                detail: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("KSKIP ") {
            let (name, why) = rest.split_once(' ').unwrap_or((rest, ""));
            self.skipped.push((name.to_string(), why.to_string()));
        } else if let Some(rest) = line.strip_prefix("KDETAIL ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            if let Some(c) = self.checks.iter_mut().rev().find(|c| c.name == name) {
                c.detail.push(text.to_string());
            }
        } else if line.starts_with("KDONE") {
            self.done = true;
        }
    }
}

/// The qemu command booting `vmlinuz` with `initrd`, the kernel's command line ending with
/// `append`; the console on stdout.
pub fn qemu_command(arch: Arch, vmlinuz: &Path, initrd: &Path, append: &str) -> Command {
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "10"]);
    // profiler.emulated: the suite keeps the bounds only a real CPU holds for the host.
    // softlockup_panic: a soft lockup (seen once in about 30 runs of 6.1) ends the boot at
    // once with its stack on the console (a panic prints at every log level), not at the
    // time limit.
    let common = "panic=-1 quiet loglevel=3 softlockup_panic=1 profiler.emulated";
    let cmdline = match arch {
        Arch::Amd64 => {
            cmd.args(["qemu-system-x86_64", "-cpu", "max"]);
            // no_timer_check: a slow TCG vCPU (a loaded host) fails the IO-APIC timer check
            // and panics ("IO-APIC + timer doesn't work!"), as seen with 7.3.
            format!("console=ttyS0 {common} no_timer_check {append}")
        }
        Arch::Arm64 => {
            // virt: the generic board (PL011 serial, GIC, PSCI power-off). pauth-impdef: `max`
            // has pointer authentication, which qemu computes with QARMA (the architected
            // cipher) unless told to use its own cheaper one; the guest sees PAC either way.
            cmd.args([
                "qemu-system-aarch64",
                "-M",
                "virt",
                "-cpu",
                "max,pauth-impdef=on",
            ]);
            format!("console=ttyAMA0 {common} {append}")
        }
    };
    cmd.args(["-accel", "tcg,thread=multi", "-m", "2G", "-smp", "2"])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(cmdline.trim_end())
        .args([
            "-nographic",
            "-no-reboot",
            "-nodefaults",
            "-serial",
            "stdio",
        ]);
    cmd
}

/// Boots `vmlinuz` with `initrd` and the suite, console to `log`; qemu is killed after
/// `limit`. Each check's line is echoed to stderr as it arrives, prefixed with `label`.
pub fn boot(
    label: &str,
    arch: Arch,
    vmlinuz: &Path,
    initrd: &Path,
    append: &str,
    log: &Path,
    limit: Duration,
) -> anyhow::Result<SuiteOutput> {
    // More for the guest's command line when diagnosing (e.g. `loglevel=7` to see the
    // stacks a soft lockup or an oops prints, which `loglevel=3` hides).
    let extra = std::env::var("PROFILER_GUEST_APPEND").unwrap_or_default();
    let mut cmd = qemu_command(arch, vmlinuz, initrd, &format!("{append} {extra}"));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", crate::util::show(&cmd)))?;
    let pid = child.id();
    // A watchdog: qemu (our child, `nice` execs it) is killed when the limit passes.
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if stop_rx.recv_timeout(limit).is_err() {
            // SAFETY: kill(2) on the qemu process we started and have not reaped yet (the
            // main thread reaps it only after this thread is told to stop or has fired).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            return true;
        }
        false
    });
    let stdout = child.stdout.take().context("qemu stdout")?;
    let stderr = child.stderr.take().context("qemu stderr")?;
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
        s
    });
    let mut console =
        fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut suite = SuiteOutput::default();
    for line in BufReader::new(stdout).split(b'\n') {
        let line = String::from_utf8_lossy(&line?).into_owned();
        writeln!(console, "{line}")?;
        let before = suite.checks.len();
        suite.line(&line, start.elapsed().as_secs_f64());
        if suite.checks.len() > before
            && let Some(c) = suite.checks.last()
        {
            eprintln!(
                "kernels: {label:<10} {:<22} {} {:>5.1}s  {}",
                c.name,
                if c.passed { "PASS" } else { "FAIL" },
                c.secs,
                c.summary
            );
        }
    }
    let status = child.wait()?;
    let _ = stop_tx.send(());
    let killed = watchdog.join().unwrap_or(false);
    let qemu_err = err_thread.join().unwrap_or_default();
    if !qemu_err.trim().is_empty() {
        writeln!(console, "=== qemu stderr:\n{qemu_err}")?;
    }
    writeln!(
        console,
        "=== qemu {status}, {:.1} s{}",
        start.elapsed().as_secs_f64(),
        if killed {
            ", killed at the time limit"
        } else {
            ""
        }
    )?;
    Ok(suite)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// The value after `flag` in `args`.
    fn after<'a>(args: &'a [String], flag: &str) -> &'a str {
        let i = args.iter().position(|a| a == flag).unwrap();
        &args[i + 1]
    }

    #[test]
    fn arm64_boots_the_virt_board_with_its_serial_console() {
        let cmd = qemu_command(
            Arch::Arm64,
            Path::new("/k/vmlinuz"),
            Path::new("/i.cpio"),
            "profiler.only=list ",
        );
        let a = args(&cmd);
        assert_eq!(a[..3], ["-n", "10", "qemu-system-aarch64"]);
        assert_eq!(after(&a, "-M"), "virt");
        assert_eq!(after(&a, "-cpu"), "max,pauth-impdef=on");
        assert_eq!(after(&a, "-accel"), "tcg,thread=multi");
        assert_eq!(after(&a, "-kernel"), "/k/vmlinuz");
        assert_eq!(after(&a, "-initrd"), "/i.cpio");
        let cmdline = after(&a, "-append");
        assert!(cmdline.starts_with("console=ttyAMA0 "), "{cmdline}");
        assert!(cmdline.ends_with(" profiler.emulated profiler.only=list"));
        assert!(!cmdline.contains("no_timer_check"), "x86's only");
        assert_eq!(after(&a, "-serial"), "stdio");
    }

    #[test]
    fn amd64_boots_as_before() {
        let cmd = qemu_command(Arch::Amd64, Path::new("v"), Path::new("i"), "");
        let a = args(&cmd);
        assert_eq!(a[2], "qemu-system-x86_64");
        assert_eq!(after(&a, "-cpu"), "max");
        assert!(!a.contains(&"-M".to_string()));
        assert_eq!(
            after(&a, "-append"),
            "console=ttyS0 panic=-1 quiet loglevel=3 softlockup_panic=1 profiler.emulated \
             no_timer_check"
        );
    }

    #[test]
    fn parses_checks_details_and_console_noise() {
        let mut s = SuiteOutput::default();
        for line in [
            "[    1.234] random: crng init done",
            "KSTART kernel=5.10.0-46-amd64\r",
            "KCHECK list PASS 0.3 120 lines",
            "KCHECK record-fp FAIL 1.2 `profiler record` exited with exit status: 1: refused",
            "KDETAIL record-fp stderr:",
            "KDETAIL record-fp Verifier output: 0: R1=ctx",
            "[   5.000] some message KCHECK track-pf PASS 2.0 workers [5001]",
            "KSKIP python no CPython in the arm64 image",
            "KDONE failed=1",
        ] {
            s.line(line, 3.5);
        }
        assert_eq!(s.release.as_deref(), Some("5.10.0-46-amd64"));
        assert_eq!(s.boot_secs, Some(3.5));
        assert!(s.done);
        assert_eq!(s.checks.len(), 3);
        assert!(s.checks[0].passed && !s.checks[1].passed && s.checks[2].passed);
        assert_eq!(
            s.checks[1].detail,
            ["stderr:", "Verifier output: 0: R1=ctx"]
        );
        assert_eq!(s.checks[2].summary, "workers [5001]");
        assert_eq!(
            s.skipped,
            [(
                "python".to_string(),
                "no CPython in the arm64 image".to_string()
            )]
        );
    }
}
