//! A bound set as one perf event group per context: the requests in index order, then a
//! hidden tick member. The whole group is read in one read(2), so all values of a sample
//! come from the same instant.

use perf_event_open_sys::bindings::{
    PERF_FORMAT_GROUP, PERF_FORMAT_ID, PERF_FORMAT_TOTAL_TIME_ENABLED,
    PERF_FORMAT_TOTAL_TIME_RUNNING,
};

use crate::{
    kernel::Kernel,
    perf::{EventAttr, PerfError, PerfEvent, Scope},
};

pub(crate) const READ_FORMAT: u64 = (PERF_FORMAT_GROUP
    | PERF_FORMAT_TOTAL_TIME_ENABLED
    | PERF_FORMAT_TOTAL_TIME_RUNNING
    | PERF_FORMAT_ID) as u64;

/// One context's group: `events[..nreq]` are the requests (in the order `open` chose: the
/// leader may be any request), then the tick member if it could be opened (a host may refuse
/// it, e.g. kernel-mode cycles to an unprivileged user; the set still counts, with a tick of
/// 0).
pub(crate) struct Group {
    events: Vec<PerfEvent>,
    /// `position[i]`: where request `i` sits in `events`.
    position: Vec<usize>,
    nreq: usize,
    /// The last read of the group, sized for it at open: sampling allocates nothing.
    last: Vec<u64>,
    last_words: usize,
}

/// One read of a group.
#[cfg(test)]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    pub counts: Vec<u64>,
    pub tick: u64,
    pub enabled: u64,
    pub running: u64,
}

/// Why a group could not be opened: which request, and the error.
pub(crate) struct OpenFailure {
    pub request: usize,
    pub error: PerfError,
}

impl Group {
    /// Opens `requests` and `tick` as one disabled group on `scope`, led by request `leader`.
    pub fn open(
        kernel: &'static dyn Kernel,
        requests: &[(EventAttr, String)],
        tick: &EventAttr,
        scope: Scope,
        leader: usize,
    ) -> Result<Group, OpenFailure> {
        let mut order: Vec<usize> = vec![leader];
        order.extend((0..requests.len()).filter(|&i| i != leader));
        let mut events: Vec<PerfEvent> = Vec::with_capacity(requests.len() + 1);
        for (k, &i) in order.iter().enumerate() {
            let (attr, name) = &requests[i];
            let mut attr = *attr;
            attr.set_read_format(READ_FORMAT);
            attr.set_disabled(k == 0);
            let event = PerfEvent::open_in(kernel, &attr, scope, events.first(), || name.clone())
                .map_err(|error| OpenFailure { request: i, error })?;
            events.push(event);
        }
        let mut t = *tick;
        t.set_read_format(READ_FORMAT);
        t.set_disabled(false);
        let open =
            |t: &EventAttr| PerfEvent::open_in(kernel, t, scope, events.first(), || "tick".into());
        let tick = open(&t).or_else(|_| {
            t.set_exclude_kernel(true);
            open(&t)
        });
        if let Ok(event) = tick {
            events.push(event);
        }
        let mut position = vec![0; requests.len()];
        for (k, &i) in order.iter().enumerate() {
            position[i] = k;
        }
        Ok(Group {
            last: vec![0; 3 + 2 * events.len()],
            last_words: 0,
            events,
            position,
            nreq: requests.len(),
        })
    }

    fn leader(&self) -> &PerfEvent {
        &self.events[0]
    }

    pub fn enable(&self) -> Result<(), PerfError> {
        self.leader().enable(true)
    }

    pub fn disable(&self) -> Result<(), PerfError> {
        self.leader().disable(true)
    }

    pub fn reset(&self) -> Result<(), PerfError> {
        self.leader().reset(true)
    }

    /// The event counting request `index`.
    pub fn event(&self, index: usize) -> &PerfEvent {
        &self.events[self.position[index]]
    }

    /// Reads the group (one read(2) of the leader) into its buffer. `Ok(false)` means the
    /// kernel returned no data: the group is in error state (it could never be scheduled).
    #[inline]
    pub fn read(&mut self) -> Result<bool, PerfError> {
        self.last_words = self.events[0].read_into(&mut self.last)? / 8;
        Ok(self.last().is_some())
    }

    /// The last read, if it was complete.
    #[inline]
    pub fn last(&self) -> Option<GroupRead<'_>> {
        let has_tick = self.events.len() > self.nreq;
        GroupRead::new(&self.last[..self.last_words], self.nreq, has_tick)
    }

    /// The last read's value of request `index` (call after a successful `read`).
    #[inline]
    pub fn count(&self, index: usize) -> u64 {
        self.last[3 + 2 * self.position[index]]
    }
}

/// A checked view of `{nr, time_enabled, time_running, {value, id}[nr]}`: the member count
/// matches the group and every value is there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupRead<'a> {
    words: &'a [u64],
    nreq: usize,
    has_tick: bool,
}

impl<'a> GroupRead<'a> {
    #[inline]
    pub fn new(words: &'a [u64], nreq: usize, has_tick: bool) -> Option<Self> {
        let members = nreq + usize::from(has_tick);
        if *words.first()? as usize != members || words.len() < 3 + 2 * members {
            return None;
        }
        Some(Self {
            words,
            nreq,
            has_tick,
        })
    }

    /// The value of the `k`-th member in group order.
    #[inline]
    pub fn value(&self, k: usize) -> u64 {
        self.words[3 + 2 * k]
    }

    #[inline]
    pub fn tick(&self) -> u64 {
        if self.has_tick {
            self.value(self.nreq)
        } else {
            0
        }
    }

    #[inline]
    pub fn enabled(&self) -> u64 {
        self.words[1]
    }

    #[inline]
    pub fn running(&self) -> u64 {
        self.words[2]
    }
}

/// Parses `{nr, time_enabled, time_running, {value, id}[nr]}` into an owned reading.
#[cfg(test)]
pub(crate) fn parse(bytes: &[u8], nreq: usize, has_tick: bool) -> Option<Reading> {
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
        .collect();
    let r = GroupRead::new(&words, nreq, has_tick)?;
    Some(Reading {
        counts: (0..nreq).map(|k| r.value(k)).collect(),
        tick: r.tick(),
        enabled: r.enabled(),
        running: r.running(),
    })
}

/// `count × enabled / running`, perf stat's estimate for a multiplexed counter.
#[inline]
pub(crate) fn scale(count: u64, enabled: u64, running: u64) -> u64 {
    if running == 0 || running >= enabled {
        return count;
    }
    ((count as u128 * enabled as u128) / running as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[test]
    fn parses_a_group_read() {
        // nr=3 (2 requests + tick), enabled, running, {value, id}...
        let b = bytes(&[3, 1000, 500, 11, 101, 22, 102, 33, 103]);
        let r = parse(&b, 2, true).unwrap();
        assert_eq!(
            r,
            Reading {
                counts: vec![11, 22],
                tick: 33,
                enabled: 1000,
                running: 500
            }
        );
        assert!(parse(&b, 3, true).is_none(), "member count must match");
        assert!(parse(&b[..40], 2, true).is_none(), "short read");
        let r = parse(&b, 3, false).unwrap();
        assert_eq!((r.counts, r.tick), (vec![11, 22, 33], 0), "no tick member");
    }

    #[test]
    fn scaling_is_perf_stats() {
        assert_eq!(scale(100, 1000, 500), 200);
        assert_eq!(scale(100, 1000, 1000), 100);
        assert_eq!(scale(100, 1000, 0), 100, "never ran: nothing to scale");
        assert_eq!(
            scale(u64::MAX / 2, 4, 2),
            u64::MAX - 1,
            "no overflow in the product"
        );
    }

    #[test]
    fn read_format_is_group_with_times_and_ids() {
        assert_eq!(READ_FORMAT, 0b1111);
    }
}
