//! Samples the kernel never took. A software clock (cpu-clock, task-clock) overflows on an
//! hrtimer, once per period of the time its event runs; an expiry that comes late (a busy
//! or descheduled vCPU) takes one sample and skips the periods in between, and a throttled
//! event takes none. Each such sample is missing before the program ever runs, so the
//! program's own counts cannot see it: the event's running time over its timer's period
//! can (for that, clocks do not exclude the idle task in the kernel: the program drops it).

use std::ops::Range;

use crate::perf::PerfEvent;

/// The clocks of a run and what was already said about them.
#[derive(Debug, Default)]
pub(super) struct Skipped {
    /// Each clock's perf events (a range of the sampler's events) and its timer's period.
    clocks: Vec<(Range<usize>, u64)>,
    /// A sampled event that is not a clock: the program's runs cannot be split by event,
    /// so nothing is said.
    other: bool,
    /// Skipped samples already reported (continuous mode reports each interval's).
    reported: u64,
}

impl Skipped {
    /// Notes a sampled event: its perf events and, for a clock, its timer's period.
    pub fn add(&mut self, events: Range<usize>, clock_timer_ns: Option<u64>) {
        match clock_timer_ns {
            Some(ns) => self.clocks.push((events, ns)),
            None => self.other = true,
        }
    }

    /// Overflows the clocks' running time called for so far (None when it cannot be
    /// known: no clock, another event beside them, or an event that could not be read).
    fn expected(&self, events: &[PerfEvent]) -> Option<u64> {
        if self.other || self.clocks.is_empty() {
            return None;
        }
        let mut sum = 0u64;
        for (range, timer_ns) in &self.clocks {
            for event in events.get(range.clone())? {
                // PERF_FORMAT_TOTAL_TIME_RUNNING: the count, then the time running.
                let mut words = [0u64; 2];
                if event.read_into(&mut words).ok()? != 16 {
                    return None;
                }
                sum += words[1] / timer_ns;
            }
        }
        Some(sum)
    }

    /// Samples skipped since the last call, given the program's runs so far: the run's
    /// shortfall (the periods' floor per CPU errs towards none) less what was reported.
    pub fn take(&mut self, events: &[PerfEvent], runs: u64) -> u64 {
        let Some(expected) = self.expected(events) else {
            return 0;
        };
        let total = expected.saturating_sub(runs);
        let new = total.saturating_sub(self.reported);
        self.reported = self.reported.max(total);
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_said_without_clocks_or_beside_another_event() {
        let mut s = Skipped::default();
        assert_eq!(s.take(&[], 0), 0, "no clock");
        s.add(0..0, Some(1_000_000));
        s.add(0..0, None);
        assert_eq!(s.expected(&[]), None, "page-faults beside the clock");
    }

    #[test]
    fn the_shortfall_is_reported_once() {
        let mut s = Skipped::default();
        s.add(0..0, Some(1_000_000));
        // No perf events: the clock ran for no time, so nothing was expected.
        assert_eq!(s.expected(&[]), Some(0));
        s.reported = 5;
        assert_eq!(
            s.take(&[], 0),
            0,
            "an earlier interval's shortfall is not said again"
        );
    }
}
