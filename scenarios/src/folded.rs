//! Reading what a scenario's profiler run wrote: folded stacks and the report's lines.

use crate::run::Failure;

/// A folded stack: its frames (the process name first) and its count.
pub type Stack = (Vec<String>, u64);

/// Folded stacks of `path` (the host tests read theirs with this too). Counts are events,
/// nanoseconds for cpu-clock and task-clock: a clock sampled at a frequency (or a period)
/// weighs 1e9 / HZ ns (the period) a sample, and is given back as samples.
pub fn read(path: &str) -> Result<Vec<Stack>, Failure> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Failure::new(format!("reading {path}: {e}")))?;
    parse(&text).map_err(|m| Failure::with(format!("{path}: {m}"), &text))
}

fn parse(text: &str) -> Result<Vec<Stack>, String> {
    let header: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# profiler-folded "))
        .collect();
    let field = |line: &str, key: &str| -> Option<String> {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    };
    let num = |key: &str| -> u64 {
        header
            .iter()
            .find_map(|l| field(l, key)?.parse().ok())
            .unwrap_or(0)
    };
    let events: Vec<String> = header.iter().filter_map(|l| field(l, "event")).collect();
    let sample_ns = match (num("period"), num("frequency_hz")) {
        (0, 0) => None,
        (0, hz) => Some(1_000_000_000 / hz),
        (p, _) => Some(p),
    };
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (stack, n) = l
                .rsplit_once(' ')
                .ok_or_else(|| format!("folded line without a count: {l}"))?;
            let frames: Vec<String> = stack.split(';').map(str::to_string).collect();
            let mut n: u64 = n.parse().map_err(|e| format!("count in {l}: {e}"))?;
            // One event: its lines are bare stacks; several: each line starts with its event.
            let event = match events.len() {
                0 => None,
                1 => Some(events[0].as_str()),
                _ => frames.first().map(String::as_str),
            };
            if let (Some("cpu-clock" | "task-clock"), Some(p)) = (event, sample_ns) {
                if !n.is_multiple_of(p) {
                    return Err(format!(
                        "{n} ns is not a whole number of {p} ns samples: {l}"
                    ));
                }
                n /= p;
            }
            Ok((frames, n))
        })
        .collect()
}

/// The user frames of a folded stack (kernel frames carry `_[k]`), outermost first.
pub fn user_frames(frames: &[String]) -> Vec<&str> {
    frames
        .iter()
        .filter(|f| !f.ends_with("_[k]"))
        .map(String::as_str)
        .collect()
}

pub fn innermost_user(frames: &[String]) -> Option<&str> {
    user_frames(frames).last().copied()
}

/// The sample count of the report's first line (`N samples of ...`).
pub fn reported_samples(stdout: &str) -> Option<u64> {
    stdout.lines().find_map(|l| {
        l.split_once(" samples of ")
            .and_then(|(n, _)| n.trim().parse().ok())
    })
}

/// Leaf samples taken in kernel mode (an interrupt) at leaf's first instruction, before its
/// frame-pointer prologue: `main > outer > leaf`, as the frame pointers give it. Recovering
/// `middle` needs the user stack pointer of a kernel-mode sample (`bpf_task_pt_regs`, 5.15).
pub fn kernel_mode_at_entry(stacks: &[Stack]) -> u64 {
    stacks
        .iter()
        .filter(|(f, _)| f[0] == "chain" && f.last().is_some_and(|x| x.ends_with("_[k]")))
        .filter(|(f, _)| user_frames(f).ends_with(&["main", "outer", "leaf"]))
        .map(|(_, n)| n)
        .sum()
}

/// The profile of a process built from chain.c (`chain`, `nofp`): its samples, those in its
/// chain (a frame of `main > outer > middle > leaf` among their user frames: the process's
/// start-up, the dynamic loader's work before `main`, is not the chain's), its samples in
/// leaf, and the leaf samples whose stack is the whole chain (below whatever starts main).
/// Shares are of `chain`: start-up is a fixed amount of CPU, and on a busy host (a starved
/// emulated CPU) it is a larger part of a run timed by the clock, while the chain's own
/// split between leaf and its callers is the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainProfile {
    pub total: u64,
    pub chain: u64,
    pub leaf: u64,
    pub whole: u64,
    /// The leaf samples that were not whole, by their innermost user frames, most first.
    pub misses: Vec<(String, u64)>,
}

impl ChainProfile {
    /// Whether at least `pct` percent of the chain's samples are in leaf.
    pub fn leaf_share_at_least(&self, pct: u64) -> bool {
        self.leaf * 100 >= self.chain * pct
    }

    /// The bound of the checks of a program without frame pointers walked by the tables: 300
    /// samples in the chain, `pct` percent of them in leaf, 99 % of those whole to `main`.
    pub fn whole_to_main(&self, pct: u64) -> bool {
        self.chain >= 300 && self.leaf_share_at_least(pct) && self.whole * 100 >= self.leaf * 99
    }

    /// The misses, for a failure's one line: the three commonest, innermost frames last.
    pub fn misses_line(&self) -> String {
        if self.misses.is_empty() {
            return String::new();
        }
        let shown: Vec<String> = self
            .misses
            .iter()
            .take(3)
            .map(|(s, n)| format!("{n}x {s}"))
            .collect();
        format!("; not whole: {}", shown.join(", "))
    }
}

/// [`ChainProfile`] of the process named `comm`.
pub fn chain_profile(comm: &str, stacks: &[Stack]) -> ChainProfile {
    chain_profile_named(comm, "", stacks)
}

/// [`chain_profile`] of functions named with `prefix` (`chain_rs::` for the Rust fixture).
pub fn chain_profile_named(comm: &str, prefix: &str, stacks: &[Stack]) -> ChainProfile {
    let name = |f: &str| format!("{prefix}{f}");
    let chain = ["main", "outer", "middle", "leaf"].map(name);
    let mine: Vec<_> = stacks.iter().filter(|(f, _)| f[0] == comm).collect();
    let total = mine.iter().map(|(_, n)| n).sum();
    let in_chain = mine
        .iter()
        .filter(|(f, _)| {
            user_frames(&f[1..])
                .iter()
                .any(|u| chain.contains(&u.to_string()))
        })
        .map(|(_, n)| n)
        .sum();
    let (mut leaf, mut whole) = (0, 0);
    let mut misses: Vec<(String, u64)> = Vec::new();
    for (f, n) in mine {
        // (The process name first: not a frame.)
        let user = user_frames(&f[1..]);
        if user.last().copied() != Some(chain[3].as_str()) {
            continue;
        }
        leaf += n;
        if user.len() >= 4 && user[user.len() - 4..] == chain {
            whole += n;
            continue;
        }
        let key = innermost_line(&user, prefix);
        match misses.iter_mut().find(|(k, _)| *k == key) {
            Some((_, c)) => *c += n,
            None => misses.push((key, *n)),
        }
    }
    misses.sort_by_key(|m| std::cmp::Reverse(m.1));
    ChainProfile {
        total,
        chain: in_chain,
        leaf,
        whole,
        misses,
    }
}

/// A stack's innermost five user frames, outermost first (`prefix` dropped, long names cut):
/// enough to tell a lost caller from a wrong one in a failure's line.
fn innermost_line(user: &[&str], prefix: &str) -> String {
    let from = user.len().saturating_sub(5);
    let frames: Vec<String> = user[from..]
        .iter()
        .map(|f| {
            let f = f.strip_prefix(prefix).unwrap_or(f);
            match f.char_indices().nth(40) {
                Some((i, _)) => format!("{}..", &f[..i]),
                None => f.to_string(),
            }
        })
        .collect();
    let cut = if from > 0 { "... > " } else { "" };
    format!("{cut}{}", frames.join(" > "))
}

/// The `unwind-stats ...` line `record --unwind-stats` prints on stderr, for a failure's
/// message (copies, partial walks and loads tell a late table from a wrong one).
pub fn unwind_stats(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.find("unwind-stats ").map(|i| format!("; {}", &l[i..])))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(s: &str, n: u64) -> Stack {
        (s.split(';').map(str::to_string).collect(), n)
    }

    #[test]
    fn chain_profile_counts_whole_stacks() {
        let stacks = [
            stack("chain;_start;__libc_start_main;main;outer;middle;leaf", 90),
            stack("chain;main;outer;leaf", 5),
            stack(
                "chain;main;outer;middle;leaf;asm_sysvec_apic_timer_interrupt_[k]",
                3,
            ),
            stack("chain;main", 2),
            stack("chain;_dl_start;_dl_relocate_object", 10),
            stack("other;leaf", 7),
        ];
        let p = chain_profile("chain", &stacks);
        assert_eq!((p.total, p.chain, p.leaf, p.whole), (110, 100, 98, 93));
        assert!(p.leaf_share_at_least(98) && !p.leaf_share_at_least(99));
        // 93 of 98 whole, and fewer than 300 in the chain.
        assert!(!p.whole_to_main(80));
        assert_eq!(p.misses, [("main > outer > leaf".to_string(), 5)]);
        assert_eq!(p.misses_line(), "; not whole: 5x main > outer > leaf");
        let at_entry = [
            stack(
                "chain;main;outer;leaf;asm_sysvec_apic_timer_interrupt_[k]",
                4,
            ),
            stack("chain;main;outer;leaf", 5),
        ];
        assert_eq!(kernel_mode_at_entry(&at_entry), 4);
    }

    #[test]
    fn reads_the_sample_line() {
        assert_eq!(
            reported_samples("1234 samples of cpu-clock at 999 Hz; lost 0\n"),
            Some(1234)
        );
        assert_eq!(reported_samples("nothing"), None);
    }

    #[test]
    fn cpu_clock_alone_counts_samples_other_events_count_events() {
        let clock = "# profiler-folded frequency_hz=1000 period=0 duration_ms=3\n\
                     # profiler-folded event=cpu-clock samples=3 unit=ns\n\
                     chain;main;leaf 3000000\n";
        assert_eq!(parse(clock).unwrap(), [stack("chain;main;leaf", 3)]);
        let faults = "# profiler-folded frequency_hz=0 period=100 duration_ms=9\n\
                      # profiler-folded event=page-faults samples=199 unit=events\n\
                      touch;main;run 19900\n";
        assert_eq!(parse(faults).unwrap(), [stack("touch;main;run", 19900)]);
        assert!(parse("chain;main").is_err());
        // Several events: each line's first frame names its event; off-CPU time stays ns.
        let group = "# profiler-folded frequency_hz=1000 period=0 duration_ms=9\n\
                     # profiler-folded event=cpu-clock samples=2 unit=ns\n\
                     # profiler-folded event=page-faults samples=2 unit=events\n\
                     cpu-clock;group;faulter 2000000\n\
                     page-faults;group;faulter 7\n";
        assert_eq!(
            parse(group).unwrap(),
            [
                stack("cpu-clock;group;faulter", 2),
                stack("page-faults;group;faulter", 7)
            ]
        );
        let wall = "# profiler-folded frequency_hz=999 period=0 duration_ms=604\n\
                    # profiler-folded event=wall samples=1 unit=ns\n\
                    waits;main;[off-cpu] 300067153\n";
        assert_eq!(
            parse(wall).unwrap(),
            [stack("waits;main;[off-cpu]", 300067153)]
        );
        let torn = "# profiler-folded frequency_hz=1000 period=0 duration_ms=3\n\
                    # profiler-folded event=cpu-clock samples=3 unit=ns\n\
                    chain;main;leaf 3000001\n";
        assert!(parse(torn).is_err());
    }
}
