//! BENCHMARKS.md and the raw numbers.

use std::{fmt::Write as _, fs, path::Path};

use serde_json::json;

use super::Section;

pub fn write(
    md: &Path,
    raw: &Path,
    machine: &[(String, String)],
    sections: &[Section],
    quick: bool,
) -> anyhow::Result<()> {
    let mut s = String::new();
    s.push_str("# Benchmarks: profiler vs perf\n\n");
    if quick {
        s.push_str(
            "**`--quick` run (one round, small sizes): checks the harness; the \
             numbers mean nothing.**\n\n",
        );
    }
    s.push_str(
        "Written by `cargo xtask bench` (xtask/src/bench/), which builds the profiler in \
         release mode, compiles the fixtures with the flags in their headers, holds the \
         host-wide lock `/tmp/profiler-tests.lock` for the whole run, and measures this project \
         and perf in the same run, interleaved (A B A B ...), so both see the same machine \
         state. Every run's numbers are in [bench/results.json](bench/results.json). The \
         targets are goals, not test assertions: `cargo xtask bench --quick` (in CI) only \
         fails when a measurement could not be taken.\n\n",
    );
    s.push_str("## Machine\n\n| | |\n|---|---|\n");
    for (k, v) in machine {
        let _ = writeln!(s, "| {k} | {v} |");
    }
    s.push_str(
        "\nThe VM is shared with other engineers' builds, so wall times carry their noise; \
         the interleaving spreads it over both tools alike.\n\n",
    );
    s.push_str("## Targets\n\n| target | measured | met |\n|---|---|---|\n");
    for sec in sections {
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            sec.goal.target,
            sec.goal.measured,
            if sec.goal.met { "yes" } else { "no" }
        );
    }
    s.push('\n');
    for sec in sections {
        let _ = writeln!(s, "## {}\n\n{}\n", sec.title, sec.method);
        let _ = writeln!(s, "| {} |", sec.headers.join(" | "));
        let _ = writeln!(s, "|{}", "---|".repeat(sec.headers.len()));
        for row in &sec.rows {
            let _ = writeln!(s, "| {} |", row.join(" | "));
        }
        let _ = writeln!(
            s,
            "\nTarget: {}. Measured: {}. **{}**.",
            sec.goal.target,
            sec.goal.measured,
            if sec.goal.met { "Met" } else { "Missed" }
        );
        if !sec.goal.met {
            let _ = writeln!(s, "{}", sec.goal.why);
        }
        for n in &sec.notes {
            let _ = writeln!(s, "\n{n}");
        }
        s.push_str("\nCommands (`$W` is the scratch directory target/bench):\n\n```sh\n");
        for c in &sec.commands {
            let _ = writeln!(s, "{c}");
        }
        s.push_str("```\n\n");
    }
    fs::write(md, s)?;
    let raw_doc = json!({
        "quick": quick,
        "machine": machine.iter().map(|(k, v)| json!({k: v})).collect::<Vec<_>>(),
        "sections": sections.iter().map(|s| json!({
            "title": s.title,
            "target": s.goal.target,
            "measured": s.goal.measured,
            "met": s.goal.met,
            "commands": s.commands,
            "raw": s.raw,
        })).collect::<Vec<_>>(),
    });
    if let Some(dir) = raw.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(raw, serde_json::to_string_pretty(&raw_doc)? + "\n")?;
    Ok(())
}
