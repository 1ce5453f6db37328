//! Following a command's children for as long as it runs: exited tasks leave the in-kernel
//! filter (so `make -j` or a test runner never fills it), and a child that cannot join it is
//! counted in every output, never lost silently.

use profiler_tests::*;

#[test]
fn a_long_child_after_twenty_thousand_short_ones_is_profiled_whole() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("follow-many");
    let folded = dir.join("many.folded");
    // 20,000 children that exec /bin/true, then one that runs chain's leaf for 2 s.
    let script = format!(
        "{} 20000 && {} 2 >/dev/null",
        fixture("forker").display(),
        fixture("chain").display()
    );
    let out = profiler(&[
        "record",
        "-F",
        "499",
        "-o",
        folded.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        summary_count(&stdout, "children not followed "),
        0,
        "{stdout}"
    );
    let stacks = read_folded(&folded);
    let chain: u64 = stacks
        .iter()
        .filter(|(f, _)| f[0] == "chain")
        .map(|(_, n)| n)
        .sum();
    let leaf: u64 = stacks
        .iter()
        .filter(|(f, _)| f[0] == "chain" && innermost_user(f) == Some("leaf"))
        .map(|(_, n)| n)
        .sum();
    // chain runs 2 s of wall time on a CPU of its own; on a busy machine it gets less of it.
    assert!(
        chain >= 400,
        "the late child got {chain} samples:\n{stdout}"
    );
    assert!(leaf * 100 >= chain * 90, "leaf {leaf} of {chain}");
}

#[test]
fn children_that_cannot_be_followed_are_counted_in_every_output() {
    if !privileged() {
        return;
    }
    let _guard = serial();
    let dir = scratch("follow-full");
    // 9000 threads alive at once, each followed as a task of its own: the filter holds
    // 8192 tasks (the command itself is one of them).
    let threads = 9000u64;
    let capacity = 8192u64;
    let expected = threads + 1 - capacity;
    let mut outputs = Vec::new();
    for ext in ["pb.gz", "folded", "svg", "json"] {
        let file = dir.join(format!("crowd.{ext}"));
        let out = profiler(&[
            "record",
            "-F",
            "99",
            "-o",
            file.to_str().unwrap(),
            "--",
            fixture("crowd").to_str().unwrap(),
            &threads.to_string(),
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            summary_count(&stdout, "children not followed "),
            expected,
            "summary line:\n{stdout}"
        );
        outputs.push((ext, file, stdout));
    }
    for (ext, file, _) in &outputs {
        let text = match *ext {
            // The pprof file is read back by `report`, whose summary shows the count.
            "pb.gz" => {
                String::from_utf8_lossy(&profiler(&["report", "-i", file.to_str().unwrap()]).stdout)
                    .into_owned()
            }
            _ => std::fs::read_to_string(file).unwrap(),
        };
        let shown = match *ext {
            "pb.gz" => format!("children not followed {expected}"),
            "folded" => format!("[children not followed] {expected}"),
            _ => format!("{expected} children not followed"),
        };
        assert!(text.contains(&shown), "{ext} lacks `{shown}`");
    }
}
