//! The `ruby` scenario: `record` of Debian's CRuby 3.1 running a known stack
//! (`tests/fixtures/ruby/chain.rb`: the main thread in <main> > main > Chain#outer >
//! Chain#middle > a block > Chain.leaf > a block, a second thread in worker > spin). Where
//! the kernel runs the unwind-table walker (5.17+), each thread's samples carry its exact
//! Ruby chain with lines; before it, the run says once that it walks frame pointers and no
//! sample has a Ruby frame.

use std::path::{Path, PathBuf};

use crate::{
    env::Env,
    folded::{Stack, user_frames},
    run::{Failure, Outcome},
    runtime::{self, NO_WALKER, Script},
};

const SCRIPT: &str = include_str!("../../tests/fixtures/ruby/chain.rb");
const SCRIPT_NAME: &str = "chain.rb";

/// Debian's ruby, the one the walker's live tests run (images carry it at the same path).
pub const RUBY: &str = "/usr/bin/ruby3.1";

/// Fewest samples in each thread's innermost method for its chain check to mean something.
const MIN_SAMPLES: u64 = 150;

/// This machine's ruby for the scenario, if it has one.
pub fn host_ruby() -> Option<PathBuf> {
    Path::new(RUBY).exists().then(|| PathBuf::from(RUBY))
}

/// The folded Ruby frame `label (chain.rb:LINE)`, its line the one marked `# at: mark`.
fn frame(label: &str, mark: &str) -> Result<String, Failure> {
    let at = format!("# at: {mark}");
    let line = SCRIPT
        .lines()
        .position(|l| l.trim_end().ends_with(&at))
        .ok_or_else(|| Failure::new(format!("{SCRIPT_NAME} has no line marked {at:?}")))?;
    Ok(format!("{label} ({SCRIPT_NAME}:{})", line + 1))
}

/// A Ruby method's or block's folded frame: `label (file.rb:line)`.
fn is_ruby(frame: &str) -> bool {
    frame
        .strip_suffix(')')
        .and_then(|f| f.rsplit_once(" ("))
        .is_some_and(|(_, at)| at.contains(".rb:"))
}

/// One thread's chain: its samples in its innermost method, and those whose Ruby frames
/// (methods and blocks: C methods are the host test's) are exactly the chain.
#[derive(Debug, Default)]
struct Thread {
    samples: u64,
    exact: u64,
    miss: Option<String>,
}

fn thread(stacks: &[Stack], chain: &[String]) -> Thread {
    let mut t = Thread::default();
    for (frames, n) in stacks {
        let rb: Vec<&str> = user_frames(frames)
            .into_iter()
            .filter(|f| is_ruby(f))
            .collect();
        if rb.last() != chain.last().map(String::as_str).as_ref() {
            continue;
        }
        t.samples += n;
        if rb == chain {
            t.exact += n;
        } else if t.miss.is_none() {
            t.miss = Some(frames.join(";"));
        }
    }
    t
}

pub fn ruby(env: &Env) -> Outcome {
    let ruby = env.ruby.as_ref().ok_or_else(|| {
        Failure::new(format!(
            "no {RUBY} on the machine that built this environment"
        ))
    })?;
    let run = runtime::record(
        env,
        &Script {
            name: "ruby",
            interpreter: ruby,
            // The guests carry the interpreter and its encodings, no library.
            options: &["--disable-gems"],
            file: SCRIPT_NAME,
            text: SCRIPT,
        },
    )?;
    let (stacks, total) = (&run.stacks, run.total);
    let check = |cond: bool, what: &str| run.check(cond, what);
    let said = run.no_walker_notes();
    if !env.kernel.unwind_tables {
        check(said == 1, &format!("{NO_WALKER:?} said once ({said})"))?;
        let with_ruby = run.samples_with(is_ruby);
        check(
            with_ruby == 0,
            &format!("no Ruby frame ({with_ruby} samples with one)"),
        )?;
        return Ok(format!(
            "{total} samples, native only; the frame-pointer note said once"
        ));
    }
    check(said == 0, "no frame-pointer note with the walker")?;
    let main = [
        ("<main>", "<main>"),
        ("Object#main", "main"),
        ("Chain#outer", "outer"),
        ("Chain#middle", "middle"),
        ("block in Chain#middle", "block in middle"),
        ("Chain.leaf", "leaf"),
        ("block in Chain.leaf", "leaf"),
    ];
    let worker = [
        ("block in Object#main", "thread"),
        ("Object#worker", "worker"),
        ("Object#spin", "spin"),
    ];
    let chain = |c: &[(&str, &str)]| -> Result<Vec<String>, Failure> {
        c.iter().map(|(label, mark)| frame(label, mark)).collect()
    };
    let m = thread(stacks, &chain(&main)?);
    let w = thread(stacks, &chain(&worker)?);
    for (name, t) in [("block in Chain.leaf", &m), ("Object#spin", &w)] {
        // Enough samples to judge the chain by, not a share of the run: the two threads
        // take turns on the GVL in 100 ms slices, and on a busy host a vCPU that waits
        // for its turn gets fewer of them (leaf had 285 of 2011 beside a loaded host, 840
        // of 2996 on a quiet one).
        check(
            t.samples >= MIN_SAMPLES && t.samples * 10 >= total,
            &format!(
                "{MIN_SAMPLES} samples and a tenth of the run in {name} ({} of {total})",
                t.samples
            ),
        )?;
        check(
            t.exact * 100 >= t.samples * 99,
            &format!(
                "99% of {name}'s samples carry its exact Ruby chain ({} of {}; first miss: {})",
                t.exact,
                t.samples,
                t.miss.as_deref().unwrap_or("none")
            ),
        )?;
    }
    Ok(format!(
        "{total} samples; leaf {} ({} exact), spin {} ({} exact)",
        m.samples, m.exact, w.samples, w.exact
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_found_by_their_marks() {
        let leaf = frame("Chain.leaf", "leaf").unwrap();
        assert!(leaf.starts_with("Chain.leaf (chain.rb:"));
        assert!(is_ruby(&leaf));
        assert!(is_ruby("block in Chain#middle (chain.rb:26)"));
        assert!(!is_ruby("Integer#times"));
        assert!(!is_ruby("[libruby-3.1.so.3.1.2]+0x24ec3d"));
        assert!(!is_ruby("do_syscall_64_[k]"));
        assert!(frame("Chain.leaf", "nowhere").is_err());
    }
}
