//! Where modules' rows go in the unwind row array: runs handed out first-fit from the gaps
//! that evicted modules left, else from the never-used end. The array cannot be compacted
//! (the kernel reads rows where processes' entries say they are), so gaps are coalesced.

/// A run of rows in the array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowRange {
    pub start: u32,
    pub len: u32,
}

impl RowRange {
    fn end(&self) -> u32 {
        self.start + self.len
    }
}

#[derive(Debug)]
pub struct RowSpace {
    capacity: u32,
    /// Rows below this were handed out at some time; above it, never.
    end: u32,
    /// Free runs below `end`, sorted by start, none adjacent to another.
    gaps: Vec<RowRange>,
    /// Rows handed out and not released.
    used: u32,
}

impl RowSpace {
    pub fn new(capacity: u32) -> Self {
        Self {
            capacity,
            end: 0,
            gaps: Vec::new(),
            used: 0,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Rows handed out and not released.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// A run of `len` rows, or `None` when no gap and not the end can hold it.
    pub fn alloc(&mut self, len: u32) -> Option<RowRange> {
        let range = if let Some(i) = self.gaps.iter().position(|g| g.len >= len) {
            let gap = &mut self.gaps[i];
            let range = RowRange {
                start: gap.start,
                len,
            };
            gap.start += len;
            gap.len -= len;
            if gap.len == 0 {
                self.gaps.remove(i);
            }
            range
        } else if u64::from(self.end) + u64::from(len) <= u64::from(self.capacity) {
            let range = RowRange {
                start: self.end,
                len,
            };
            self.end += len;
            range
        } else {
            return None;
        };
        self.used += len;
        Some(range)
    }

    /// Gives a run back (it must have come from `alloc` and not been released since).
    pub fn release(&mut self, range: RowRange) {
        if range.len == 0 {
            return;
        }
        self.used -= range.len;
        let i = self.gaps.partition_point(|g| g.start < range.start);
        self.gaps.insert(i, range);
        // Merge with the next gap, then the previous one.
        if i + 1 < self.gaps.len() && self.gaps[i].end() == self.gaps[i + 1].start {
            self.gaps[i].len += self.gaps[i + 1].len;
            self.gaps.remove(i + 1);
        }
        if i > 0 && self.gaps[i - 1].end() == self.gaps[i].start {
            self.gaps[i - 1].len += self.gaps[i].len;
            self.gaps.remove(i);
        }
        // A gap that reaches the end is the end again.
        if let Some(last) = self.gaps.last()
            && last.end() == self.end
        {
            self.end = last.start;
            self.gaps.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_from_the_end_then_refuses() {
        let mut s = RowSpace::new(10);
        assert_eq!(s.alloc(4), Some(RowRange { start: 0, len: 4 }));
        assert_eq!(s.alloc(6), Some(RowRange { start: 4, len: 6 }));
        assert_eq!(s.alloc(1), None);
        assert_eq!(s.used(), 10);
    }

    #[test]
    fn released_runs_are_reused_first_fit_and_coalesced() {
        let mut s = RowSpace::new(100);
        let a = s.alloc(10).unwrap();
        let b = s.alloc(20).unwrap();
        let c = s.alloc(30).unwrap();
        let _d = s.alloc(40).unwrap();
        assert_eq!(s.alloc(1), None);
        s.release(a);
        s.release(c);
        // 25 fits only in c's gap.
        assert_eq!(s.alloc(25), Some(RowRange { start: 30, len: 25 }));
        // b between two gaps: all three merge into one run of 10 + 20 + 0.
        s.release(b);
        assert_eq!(s.alloc(30), Some(RowRange { start: 0, len: 30 }));
        assert_eq!(s.alloc(5), Some(RowRange { start: 55, len: 5 }));
        assert_eq!(s.alloc(1), None);
        assert_eq!(s.used(), 100);
    }

    #[test]
    fn a_gap_at_the_end_gives_the_end_back() {
        let mut s = RowSpace::new(10);
        let a = s.alloc(3).unwrap();
        let b = s.alloc(3).unwrap();
        s.release(b);
        s.release(a);
        assert_eq!(s.used(), 0);
        // All free again: one run of the whole capacity.
        assert_eq!(s.alloc(10), Some(RowRange { start: 0, len: 10 }));
    }

    #[test]
    fn empty_runs_cost_nothing() {
        let mut s = RowSpace::new(4);
        let e = s.alloc(0).unwrap();
        s.release(e);
        assert_eq!(s.alloc(4), Some(RowRange { start: 0, len: 4 }));
    }
}
