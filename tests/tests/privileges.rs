//! Privileges and output safety: without root (or CAP_BPF + CAP_PERFMON) the error names
//! the capability and `kernel.perf_event_paranoid`, tested by dropping privileges in the
//! child; output files are atomic, belong to the sudo user under sudo, and are never
//! written through a symlink planted in the output directory.

use std::{
    os::unix::{fs::MetadataExt as _, process::CommandExt as _},
    process::{Command, Output},
};

use profiler_tests::*;

const NOBODY: u32 = 65534;
const CAP_PERFMON: libc::c_ulong = 38;
const CAP_BPF: libc::c_ulong = 39;

/// The profiler run as the unprivileged user `nobody`, from a copy nobody can reach (the
/// checkout may live in a directory only root may enter).
fn as_nobody(args: &[&str]) -> Output {
    static COPY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let bin = COPY.get_or_init(|| {
        let dir = scratch("nobody-bin");
        let bin = dir.join("profiler");
        std::fs::copy(profiler_bin(), &bin).expect("copying the profiler");
        bin
    });
    Command::new(bin)
        .args(args)
        .current_dir(work_dir())
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("running the profiler as nobody")
}

/// The profiler run as root without the capabilities `drop` (removed from the bounding set
/// before exec, so root's exec does not regain them).
fn as_root_without(drop: &'static [libc::c_ulong], args: &[&str]) -> Output {
    let mut cmd = profiler_command();
    cmd.args(args);
    // SAFETY: prctl is async-signal-safe; the closure allocates nothing and touches only
    // the child's own capability bounding set between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for &cap in drop {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.output()
        .expect("running the profiler without capabilities")
}

#[test]
fn without_privileges_the_error_names_the_capability_and_the_sysctl() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("unprivileged");
    // nobody must be able to create the marker a started command would leave.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let marker = dir.join("ran");
    let sh = format!("touch {}", marker.display());
    let before = our_programs();
    let both = ["CAP_BPF", "CAP_PERFMON", "kernel.perf_event_paranoid"];
    for (args, needles) in [
        (vec!["record", "-a", "-d", "1"], &both[..]),
        (vec!["record", "--", "sh", "-c", &sh], &both),
        (
            vec!["stat", "-c", "cpu-clock", "1", "1"],
            &["CAP_PERFMON", "kernel.perf_event_paranoid"],
        ),
        // Kernel-mode counting of one's own command needs CAP_PERFMON at paranoid 2.
        (
            vec!["track", "-c", "page-faults,sys", "--", "sh", "-c", &sh],
            &["CAP_PERFMON", "kernel.perf_event_paranoid"],
        ),
    ] {
        let out = as_nobody(&args);
        assert_fails(&out, 1, needles, &format!("nobody: {args:?}"));
        assert!(!marker.exists(), "{args:?}: the command ran");
        assert_eq!(our_programs(), before);
    }
    // Root without one of the two capabilities: the message names the one missing.
    for (drop, missing) in [
        (&[CAP_BPF][..], "missing: CAP_BPF)"),
        (&[CAP_PERFMON], "missing: CAP_PERFMON)"),
        (&[CAP_BPF, CAP_PERFMON], "missing: CAP_BPF, CAP_PERFMON)"),
    ] {
        let out = as_root_without(drop, &["record", "-a", "-d", "1"]);
        assert_fails(
            &out,
            1,
            &[missing, "kernel.perf_event_paranoid"],
            &format!("root without {drop:?}"),
        );
        assert_eq!(our_programs(), before);
    }
    // Own user-mode counts need nothing: cputrack works as nobody.
    let out = as_nobody(&["track", "-c", "page-faults", "--", "sh", "-c", &sh]);
    assert_eq!(out.status.code(), Some(0), "{}", one_error_line(&out));
    assert!(marker.exists());
}

#[test]
fn under_sudo_outputs_belong_to_the_invoking_user() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("sudo");
    let sudo = |args: &[&str]| {
        let out = profiler_command()
            .args(args)
            .env("SUDO_UID", NOBODY.to_string())
            .env("SUDO_GID", NOBODY.to_string())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let pb = dir.join("p.pb.gz");
    let svg = dir.join("p.svg");
    let rows = dir.join("rows.txt");
    let series = dir.join("series");
    // --interval writes into an existing directory.
    std::fs::create_dir_all(&series).unwrap();
    let (pbs, svgs) = (pb.to_str().unwrap(), svg.to_str().unwrap());
    sudo(&["record", "-q", "-o", pbs, "--", &path("chain"), "0.2"]);
    sudo(&["flamegraph", "-i", pbs, "-o", svgs]);
    sudo(&[
        "track",
        "-c",
        "page-faults",
        "-o",
        rows.to_str().unwrap(),
        "--",
        "/bin/true",
    ]);
    sudo(&[
        "record",
        "-q",
        "--interval",
        "0.2",
        "-o",
        series.to_str().unwrap(),
        "--",
        &path("chain"),
        "0.3",
    ]);
    let mut files = vec![pb.clone(), svg, rows];
    files.extend(
        std::fs::read_dir(&series)
            .unwrap()
            .map(|e| e.unwrap().path()),
    );
    assert!(files.len() > 3, "the series wrote files");
    for f in files {
        let m = std::fs::symlink_metadata(&f).unwrap();
        assert_eq!((m.uid(), m.gid()), (NOBODY, NOBODY), "{}", f.display());
        assert_eq!(m.mode() & 0o777, 0o644, "{}", f.display());
    }
    // Without SUDO_UID, root's files stay root's.
    let own = dir.join("root.folded");
    run_ok(&[
        "flamegraph",
        "--folded",
        "-i",
        pbs,
        "-o",
        own.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::metadata(&own).unwrap().uid(), 0);
}

#[test]
fn nothing_is_written_through_a_planted_symlink() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("planted");
    // The victim stands for a file like /etc/shadow that a planted link points at.
    let victims = scratch("planted-victim");
    let victim = victims.join("shadow");
    std::fs::write(&victim, "precious\n").unwrap();
    let link = |name: &str| {
        let p = dir.join(name);
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        p
    };
    // The final path is a link: replaced by the new file, never written through.
    let pb = link("p.pb.gz");
    // Links at the names a predictable temporary file would take.
    for pid in 0..64 {
        link(&format!(".p.pb.gz.{pid}.tmp"));
    }
    run_ok(&[
        "record",
        "-q",
        "-o",
        pb.to_str().unwrap(),
        "--",
        "/bin/true",
    ]);
    assert!(std::fs::symlink_metadata(&pb).unwrap().is_file());
    let svg = link("g.svg");
    run_ok(&[
        "flamegraph",
        "-i",
        pb.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert!(std::fs::symlink_metadata(&svg).unwrap().is_file());
    // cputrack's rows are written as they come, so a link there is refused, before the
    // command starts.
    let rows = link("rows.txt");
    let marker = dir.join("ran");
    let sh = format!("touch {}", marker.display());
    let out = profiler(&[
        "track",
        "-c",
        "page-faults",
        "-o",
        rows.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &sh,
    ]);
    assert_fails(&out, 1, &["rows.txt", "symbolic link"], "track -o link");
    assert!(!marker.exists());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(dir_entries(&victims), ["shadow".to_string()].into());
}
