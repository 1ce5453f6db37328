//! The JIT code a process's functions were seen running, learned from the frames named: for
//! a sample stopped in code whose own frame is not built yet (a callee's first instructions,
//! a small leaf function between its calls' frames), the frame pointer still holds the
//! caller's frame, so the code holding the PC must be found another way. V8's own sampler
//! looks the PC up in its code map; this is the part of that map the profiler has seen.
//! A range is a hint: the function it names is checked to still run code holding the PC
//! before it is used (code is freed and its space reused).

use std::collections::BTreeMap;

/// Ranges kept per process before they are dropped and learned again.
const MAX_RANGES: usize = 1 << 16;

/// Code ranges (start → end, JSFunction) that do not overlap.
#[derive(Default)]
pub struct CodeRanges {
    ranges: BTreeMap<u64, (u64, u64)>,
    /// Bumped at each new range, so that a PC no range held is looked up again once
    /// more are known.
    generation: u64,
}

impl CodeRanges {
    /// `function` ran the code at `start..start + size`; ranges it overlaps are stale.
    pub fn learn(&mut self, start: u64, size: u32, function: u64) {
        let end = start.saturating_add(u64::from(size));
        if size == 0 || self.ranges.get(&start) == Some(&(end, function)) {
            return;
        }
        let stale: Vec<u64> = self
            .ranges
            .range(..end)
            .rev()
            .take_while(|(_, (e, _))| *e > start)
            .map(|(&s, _)| s)
            .collect();
        for s in stale {
            self.ranges.remove(&s);
        }
        if self.ranges.len() >= MAX_RANGES {
            self.ranges.clear();
        }
        self.ranges.insert(start, (end, function));
        self.generation += 1;
    }

    /// The function seen running the code holding `pc`.
    pub fn at(&self, pc: u64) -> Option<u64> {
        let (_, &(end, function)) = self.ranges.range(..=pc).next_back()?;
        (pc < end).then_some(function)
    }

    /// The range holding `pc` no longer is its function's code.
    pub fn forget(&mut self, pc: u64) {
        if let Some((&s, &(end, _))) = self.ranges.range(..=pc).next_back()
            && pc < end
        {
            self.ranges.remove(&s);
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pc_is_found_in_the_range_that_holds_it() {
        let mut r = CodeRanges::default();
        r.learn(0x1000, 0x100, 0xa1);
        r.learn(0x1200, 0x40, 0xb1);
        assert_eq!(r.at(0x1000), Some(0xa1));
        assert_eq!(r.at(0x10ff), Some(0xa1));
        assert_eq!(r.at(0x1100), None, "between the two");
        assert_eq!(r.at(0x123f), Some(0xb1));
        assert_eq!(r.at(0x1240), None);
        assert_eq!(r.at(0xfff), None);
        assert_eq!(r.generation(), 2);
        r.learn(0x1000, 0x100, 0xa1);
        assert_eq!(r.generation(), 2, "a range seen again is nothing new");
    }

    #[test]
    fn new_code_where_old_code_was_replaces_it() {
        let mut r = CodeRanges::default();
        r.learn(0x1000, 0x100, 0xa1);
        r.learn(0x1200, 0x100, 0xb1);
        // Freed and reused: one new range over the end of the first and the second's start.
        r.learn(0x10c0, 0x180, 0xc1);
        assert_eq!(r.at(0x1010), None);
        assert_eq!(r.at(0x10c0), Some(0xc1));
        assert_eq!(r.at(0x1230), Some(0xc1));
        assert_eq!(r.at(0x1250), None);
        r.forget(0x1100);
        assert_eq!(r.at(0x10c0), None);
        r.forget(0x5000);
    }
}
