//! What a perf user and any Unix user expect of a run (issue 38): the command's exit
//! status, counts printed when a signal ends a count, `-o -`, a default output file, the
//! command without `--`, `-g`, `-a` or `-C` bounded by a command, track's default events.

use std::{
    io::Write as _,
    path::Path,
    process::{Command, Output, Stdio},
};

use profiler_tests::*;

/// The profiler run in `dir` (a scratch directory of the test's own).
fn in_dir(dir: &Path, args: &[&str]) -> Output {
    profiler_command()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("running the profiler")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The leading number of a summary line ("52 samples of page-faults ...").
fn leading_number(line: &str) -> u64 {
    line.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no leading number: {line:?}"))
}

#[test]
fn record_and_track_exit_with_the_commands_status() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("habits-exit");
    let folded = dir.join("x.folded");
    let folded = folded.to_str().unwrap();
    let cases: [(&[&str], i32); 6] = [
        (
            &["record", "-q", "-o", folded, "--", "sh", "-c", "exit 3"],
            3,
        ),
        (
            &[
                "record",
                "-q",
                "-o",
                folded,
                "--",
                "sh",
                "-c",
                "kill -TERM $$",
            ],
            143,
        ),
        (&["record", "-q", "-o", folded, "--", "true"], 0),
        (
            &["track", "-c", "page-faults", "--", "sh", "-c", "exit 5"],
            5,
        ),
        (
            &[
                "track",
                "-c",
                "page-faults",
                "--",
                "sh",
                "-c",
                "kill -KILL $$",
            ],
            137,
        ),
        (&["track", "-c", "page-faults", "--", "true"], 0),
    ];
    for (args, code) in cases {
        let out = in_dir(&dir, args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // The Solaris persona follows the same rule.
    let links = persona_links("habits-exit");
    let out = Command::new(links.join("cputrack"))
        .args(["-c", "page-faults", "sh", "-c", "exit 5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    // And keeps Solaris's rule that -c is required (the default set is `profiler track`'s).
    let out = Command::new(links.join("cputrack"))
        .arg("true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no event specification"));
    // The profiler's own errors keep 1 (and 2 for usage), whatever the command would do.
    let out = in_dir(
        &dir,
        &["record", "-o", "/nonexistent-dir/x", "sh", "-c", "exit 3"],
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn stat_stopped_by_a_signal_prints_what_it_counted() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let mut stat = profiler_command()
        .args(["stat", "-c", "page-faults", "60"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Lines::of(&mut stat);
    wait_for("stat's header", 60, || {
        lines.now().contains("time").then_some(())
    });
    // Exactly 20000 faults of our own, counted in user mode, on some CPU.
    touch_pages(20000);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(stat.id() as i32, libc::SIGINT) };
    let status = stat.wait().unwrap();
    let stdout = lines.finish();
    assert_eq!(status.code(), Some(130), "{stdout}");
    let rows = table(&stdout);
    let partial: Vec<&TableRow> = rows.iter().filter(|r| r.is(2, "partial")).collect();
    assert!(!partial.is_empty(), "a partial row per CPU:\n{stdout}");
    assert!(!rows.iter().any(|r| r.is(2, "tick")), "{stdout}");
    let total = rows
        .last()
        .filter(|r| r.is(2, "total"))
        .expect("a total row");
    let sum: i64 = partial.iter().map(|r| r.num(3)).sum();
    assert_eq!(
        total.num(3),
        sum,
        "the total is the partial rows':\n{stdout}"
    );
    assert!(sum >= 20000, "our 20000 faults are in it:\n{stdout}");
}

#[test]
fn track_stopped_by_a_signal_prints_the_totals_so_far() {
    if !privileged() {
        return;
    }
    let _s = serial();
    // 20000 fresh pages touched, then a long wait for the signal.
    let script = "import mmap, sys, time\n\
                  m = mmap.mmap(-1, 20000 * 4096)\n\
                  for i in range(20000): m[i * 4096] = 1\n\
                  print('touched', flush=True)\n\
                  time.sleep(600)\n";
    // -e: a python3 that is a shim execs the real one.
    let mut track = profiler_command()
        .args(["track", "-e", "-c", "page-faults", "-T", "0.2", "--"])
        .args(["/usr/bin/python3", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Lines::of(&mut track);
    wait_for("the pages touched", 120, || {
        lines.now().contains("touched").then_some(())
    });
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(track.id() as i32, libc::SIGINT) };
    let status = track.wait().unwrap();
    let exit = wait_for("the exit row", 60, || {
        table(&lines.now()).into_iter().find(|r| r.is(2, "exit"))
    });
    // The command got the signal too; one that inherited SIGINT ignored (a background
    // job's) still runs, and holds the pipe: it is ended here.
    // SAFETY: kill(2) on the command's pid, from its exit row.
    unsafe { libc::kill(exit.num(1) as i32, libc::SIGKILL) };
    let stdout = lines.finish();
    assert_eq!(status.code(), Some(130), "{stdout}");
    let rows = table(&stdout);
    assert!(rows.last().is_some_and(|r| r.is(2, "exit")), "{stdout}");
    let ticks: i64 = rows
        .iter()
        .filter(|r| r.is(2, "tick"))
        .map(|r| r.num(3))
        .sum();
    assert!(exit.num(3) >= 20000, "{stdout}");
    assert!(
        exit.num(3) >= ticks,
        "the total holds every tick:\n{stdout}"
    );
}

#[test]
fn dash_is_standard_output_for_every_format() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("habits-dash");
    let touch = path("touch");
    for format in ["pprof", "folded", "svg", "speedscope", "report"] {
        let out = in_dir(
            &dir,
            &[
                "record",
                "-e",
                "page-faults",
                "-c",
                "1",
                "--format",
                format,
                "-o",
                "-",
                "--",
                &touch,
                "2000",
            ],
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{format}: {stderr}");
        // The table and summary went to stderr.
        // The summary line ("N samples of ..."); `profiler:` notes may come before it.
        let summary = stderr
            .lines()
            .find(|l| !l.starts_with("profiler:"))
            .unwrap_or_default();
        let samples = leading_number(summary);
        assert!(samples >= 2000, "{format}: {stderr}");
        let data = out.stdout;
        match format {
            "pprof" => {
                // Decoded by `report -i -` from a pipe: the same count.
                let mut report = profiler_command()
                    .args(["report", "-i", "-"])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap();
                report.stdin.take().unwrap().write_all(&data).unwrap();
                let got = report.wait_with_output().unwrap();
                let table = text(&got.stdout);
                assert_eq!(table.lines().next(), Some(summary), "{table}");
            }
            "folded" => {
                // At -c 1 every sample is one page fault: events and samples agree.
                let sum: u64 = text(&data)
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                    .sum();
                assert_eq!(sum, samples, "{format}");
            }
            "svg" => {
                let svg = text(&data);
                assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
            }
            "speedscope" => {
                let json: serde_json::Value = serde_json::from_slice(&data).unwrap();
                assert!(json["$schema"].as_str().unwrap().contains("speedscope"));
            }
            _ => assert_eq!(text(&data).lines().next(), Some(summary)),
        }
    }
    assert!(!dir.join("-").exists(), "no file named '-'");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written here"
    );
}

#[test]
fn record_writes_profile_pb_gz_and_keeps_the_previous() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("habits-default");
    let touch = path("touch");
    let run = |pages: &str| {
        let out = in_dir(
            &dir,
            &[
                "record",
                "-q",
                "-e",
                "page-faults",
                "-c",
                "1",
                &touch,
                pages,
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        std::fs::read(dir.join("profile.pb.gz")).expect("profile.pb.gz written")
    };
    let first = run("1000");
    assert!(!dir.join("profile.pb.gz.old").exists());
    let second = run("3000");
    assert_eq!(std::fs::read(dir.join("profile.pb.gz.old")).unwrap(), first);
    assert_ne!(first, second);
    // `report` reads it with no argument.
    let out = in_dir(&dir, &["report"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(leading_number(&text(&out.stdout)) >= 3000);
    // With --format and no -o, the name follows the format.
    let out = in_dir(
        &dir,
        &["record", "-q", "--format", "folded", &touch, "1000"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let folded = std::fs::read_to_string(dir.join("profile.folded")).unwrap();
    assert!(
        folded.lines().all(|l| l.rsplit_once(' ').is_some()),
        "{folded}"
    );
    assert_eq!(std::fs::read(dir.join("profile.pb.gz")).unwrap(), second);
}

#[test]
fn record_takes_a_trailing_command_and_g() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("habits-trailing");
    let out = in_dir(
        &dir,
        &[
            "record",
            "-g",
            "-F",
            "999",
            "-q",
            "-o",
            "c.folded",
            &path("chain"),
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let folded = std::fs::read_to_string(dir.join("c.folded")).unwrap();
    assert!(
        folded
            .lines()
            .any(|l| l.contains("main;outer;middle;leaf ")),
        "{folded}"
    );
}

/// The rows of a `report` table (between its header and the "hottest" line).
fn table_rows(report: &str) -> Vec<Vec<String>> {
    report
        .lines()
        .skip_while(|l| !l.contains("SELF%"))
        .skip(1)
        .take_while(|l| !l.starts_with("hottest"))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

#[test]
fn all_cpus_or_a_cpu_list_for_as_long_as_the_command_runs() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let dir = scratch("habits-all");
    let idle = path("idle");
    let started = std::time::Instant::now();
    let out = in_dir(
        &dir,
        &["record", "-a", "-q", "-o", "a.pb.gz", "--", &idle, "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(started.elapsed().as_secs() < 30, "ended with the command");
    let out = in_dir(&dir, &["report", "-i", "a.pb.gz", "--by", "comm"]);
    let comms: Vec<String> = table_rows(&text(&out.stdout))
        .into_iter()
        .map(|r| r.last().unwrap().clone())
        .collect();
    // The idle command takes no CPU: what was sampled is everything else.
    assert!(comms.iter().any(|c| c != "idle"), "{comms:?}");

    let out = in_dir(
        &dir,
        &["record", "-C", "0", "-q", "-o", "c.pb.gz", &idle, "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = in_dir(&dir, &["report", "-i", "c.pb.gz", "--by", "cpu"]);
    let report = text(&out.stdout);
    let cpus: Vec<String> = table_rows(&report)
        .into_iter()
        .map(|r| r.last().unwrap().clone())
        .collect();
    assert_eq!(cpus, ["0"], "{report}");
}

#[test]
fn track_counts_perf_stats_default_events_without_c() {
    if !privileged() {
        return;
    }
    let _s = serial();
    let out = profiler(&["track", "--", &path("touch"), "5000", "1"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // This host has no PMU: the software set, named above the header.
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some("# no -c given: counting task-clock,context-switches,cpu-migrations,page-faults,sys")
    );
    assert_eq!(
        lines.next().map(str::trim_end),
        Some("   time lwp      event      pic0      pic1      pic2      pic3")
    );
    let rows = table(&stdout);
    let exit = rows.iter().find(|r| r.is(2, "exit")).expect("an exit row");
    assert!(exit.num(3) > 0, "task-clock: {stdout}");
    assert!(
        (5000..7000).contains(&exit.num(6)),
        "page faults, user and system: {stdout}"
    );
}

#[test]
fn interval_refuses_a_file_name_and_a_missing_directory() {
    let dir = scratch("habits-interval");
    let out = in_dir(
        &dir,
        &["record", "-a", "--interval", "1", "-o", "foo.pb.gz"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("names a file"),
        "{}",
        text(&out.stderr)
    );
    let missing = dir.join("new/dir");
    let out = in_dir(
        &dir,
        &[
            "record",
            "-a",
            "--interval",
            "1",
            "-o",
            missing.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no such directory"));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "nothing made");
}

#[test]
fn flamegraph_names_follow_the_format_and_dash_is_a_pipe() {
    let dir = scratch("habits-flamegraph");
    std::fs::write(dir.join("in.folded"), "main;work 3\nmain 1\n").unwrap();
    let out = in_dir(&dir, &["flamegraph", "-i", "in.folded", "--folded"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let folded = std::fs::read_to_string(dir.join("flamegraph.folded")).unwrap();
    assert!(folded.contains("main;work 3"), "{folded}");
    assert!(!dir.join("flamegraph.svg").exists());
    let out = in_dir(&dir, &["flamegraph", "-i", "in.folded"]);
    assert_eq!(out.status.code(), Some(0));
    let svg = std::fs::read_to_string(dir.join("flamegraph.svg")).unwrap();
    assert!(svg.starts_with("<?xml"), "{svg}");
    // `-o -`: the same bytes on stdout, nothing on disk.
    let out = in_dir(
        &dir,
        &["flamegraph", "-i", "in.folded", "--folded", "-o", "-"],
    );
    assert_eq!(text(&out.stdout), folded);
    assert!(!dir.join("-").exists());
}

#[test]
fn a_typo_gets_a_suggestion_and_every_help_ends_with_examples() {
    let out = profiler(&["reprot"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "profiler: unrecognized subcommand 'reprot'; did you mean 'report'? \
         (see 'profiler --help')\n"
    );
    for sub in [
        "record",
        "report",
        "flamegraph",
        "track",
        "stat",
        "list",
        "symbolize",
    ] {
        let out = profiler(&[sub, "--help"]);
        assert_eq!(out.status.code(), Some(0), "{sub}");
        let help = text(&out.stdout);
        let (_, examples) = help.rsplit_once("Examples:\n").expect(sub);
        let lines: Vec<&str> = examples.lines().collect();
        assert!(
            (2..=3).contains(&lines.len()) && lines.iter().all(|l| l.starts_with("  profiler ")),
            "{sub}: {examples}"
        );
    }
}
