//! The top-functions table: self and total share of samples per function.

use std::{collections::HashMap, fmt::Write as _, sync::Arc};

use super::Profile;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopEntry {
    pub function: Arc<str>,
    pub module: Option<Arc<str>>,
    /// Samples where this function was the innermost frame.
    pub self_samples: u64,
    /// Samples where this function was anywhere on the stack (counted once per sample).
    pub total_samples: u64,
}

#[derive(Clone, Debug, Default)]
pub struct TopTable {
    pub entries: Vec<TopEntry>,
    pub total: u64,
}

impl TopTable {
    /// Builds the table, sorted by self samples, then total samples, then name.
    pub fn build(profile: &Profile) -> Self {
        type Key = (Arc<str>, Option<Arc<str>>);
        let mut acc: HashMap<Key, (u64, u64)> = HashMap::new();
        for stack in &profile.stacks {
            let mut seen: Vec<&Key> = Vec::new();
            let mut keys: Vec<Key> = Vec::with_capacity(stack.frames.len());
            for f in &stack.frames {
                keys.push((f.function.clone(), f.module.clone()));
            }
            for key in &keys {
                if !seen.contains(&key) {
                    seen.push(key);
                    acc.entry(key.clone()).or_default().1 += stack.count;
                }
            }
            if let Some(leaf) = keys.last() {
                acc.entry(leaf.clone()).or_default().0 += stack.count;
            }
        }
        let mut entries: Vec<TopEntry> = acc
            .into_iter()
            .map(|((function, module), (s, t))| TopEntry {
                function,
                module,
                self_samples: s,
                total_samples: t,
            })
            .collect();
        entries.sort_by(|a, b| {
            b.self_samples
                .cmp(&a.self_samples)
                .then(b.total_samples.cmp(&a.total_samples))
                .then(a.function.cmp(&b.function))
        });
        Self {
            entries,
            total: profile.total(),
        }
    }

    fn pct(&self, n: u64) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            100.0 * n as f64 / self.total as f64
        }
    }

    /// The table as text, at most `limit` rows.
    pub fn render(&self, limit: usize) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:>7} {:>7} {:>8}  {:<40} MODULE",
            "SELF%", "TOTAL%", "SAMPLES", "FUNCTION"
        );
        for e in self.entries.iter().take(limit) {
            let _ = writeln!(
                s,
                "{:>6.2}% {:>6.2}% {:>8}  {:<40} {}",
                self.pct(e.self_samples),
                self.pct(e.total_samples),
                e.self_samples,
                e.function,
                e.module.as_deref().unwrap_or("?")
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        profile::StackCount,
        symbolize::{Frame, FrameKind},
    };

    fn f(name: &str) -> Frame {
        Frame {
            function: Arc::from(name),
            module: Some(Arc::from("chain")),
            file: None,
            line: None,
            kind: FrameKind::User,
            inlined: false,
        }
    }

    #[test]
    fn self_and_total_with_recursion_counted_once() {
        let profile = Profile {
            stacks: vec![
                StackCount {
                    event: "cpu-clock".into(),
                    pid: 1,
                    comm: "c".into(),
                    frames: vec![f("main"), f("a"), f("a"), f("leaf")],
                    count: 8,
                },
                StackCount {
                    event: "cpu-clock".into(),
                    pid: 1,
                    comm: "c".into(),
                    frames: vec![f("main"), f("b")],
                    count: 2,
                },
            ],
            info: Default::default(),
        };
        let t = TopTable::build(&profile);
        assert_eq!(t.total, 10);
        let get = |n: &str| t.entries.iter().find(|e| e.function.as_ref() == n).unwrap();
        assert_eq!(
            (get("leaf").self_samples, get("leaf").total_samples),
            (8, 8)
        );
        assert_eq!(
            (get("a").self_samples, get("a").total_samples),
            (0, 8),
            "recursion counted once"
        );
        assert_eq!(
            (get("main").self_samples, get("main").total_samples),
            (0, 10)
        );
        assert_eq!(t.entries[0].function.as_ref(), "leaf");
        assert_eq!(t.entries[1].function.as_ref(), "b");
        let text = t.render(2);
        assert_eq!(
            text,
            "  SELF%  TOTAL%  SAMPLES  FUNCTION                                 MODULE\n \
             80.00%  80.00%        8  leaf                                     chain\n \
             20.00%  20.00%        2  b                                        chain\n"
        );
    }
}
