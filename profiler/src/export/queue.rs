//! One destination's queue: a few intervals in memory while the store keeps up, the spool
//! on disk while it does not. Memory items are always older than spooled ones, so the queue's
//! order is memory then spool, and the front is what is sent next.

use std::collections::VecDeque;

use super::spool::{Item, Spool};

/// Intervals held in memory with a spool (the rest waits on disk).
const MEMORY_WITH_SPOOL: usize = 2;
/// Intervals held in memory without one (older ones are dropped, and counted).
const MEMORY_WITHOUT_SPOOL: usize = 8;

/// What became of the intervals handed to one destination.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub sent: u64,
    /// In the spool at the end (sent by the next run).
    pub spooled: u64,
    /// Lost: evicted from a full spool or memory, refused by the store (`rejected`), or
    /// pending at the end without a spool.
    pub dropped: u64,
    /// Of `dropped`, refused by the store with a permanent error.
    pub rejected: u64,
    /// Bytes of the requests sent (as sent: compressed when the protocol compresses).
    pub bytes_sent: u64,
}

#[derive(Debug)]
pub struct Queue {
    memory: VecDeque<Item>,
    spool: Option<Spool>,
    /// Set while the store fails: everything new goes to the spool.
    pub down: bool,
    next_seq: u64,
    pub counts: Counts,
}

impl Queue {
    pub fn new(spool: Option<Spool>) -> Self {
        let next_seq = spool.as_ref().map_or(0, Spool::next_seq);
        Self {
            memory: VecDeque::new(),
            spool,
            down: false,
            next_seq,
            counts: Counts::default(),
        }
    }

    /// The sequence number of the next interval.
    pub fn next_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq - 1
    }

    /// Queues an interval: in memory while there is room and nothing waits on disk, else on
    /// disk; without a spool the oldest in memory makes room.
    pub fn push(&mut self, item: Item) -> Result<(), std::io::Error> {
        let room = |memory: &VecDeque<Item>, cap| memory.len() < cap;
        match &mut self.spool {
            Some(s) if self.down || !s.is_empty() || !room(&self.memory, MEMORY_WITH_SPOOL) => {
                self.counts.dropped += s.push(&item)?;
            }
            Some(_) => self.memory.push_back(item),
            None => {
                if !room(&self.memory, MEMORY_WITHOUT_SPOOL) {
                    self.memory.pop_front();
                    self.counts.dropped += 1;
                }
                self.memory.push_back(item);
            }
        }
        Ok(())
    }

    /// Intervals waiting in the spool now.
    pub fn spooled_now(&self) -> u64 {
        self.spool.as_ref().map_or(0, |s| s.len() as u64)
    }

    /// The next interval to send (read back from the spool when it is there).
    pub fn front(&self) -> Option<Result<Item, std::io::Error>> {
        match self.memory.front() {
            Some(item) => Some(Ok(item.clone())),
            None => self.spool.as_ref()?.front(),
        }
    }

    /// Removes the front (sent, refused, or unreadable).
    pub fn pop_front(&mut self) -> Result<(), std::io::Error> {
        if self.memory.pop_front().is_none()
            && let Some(s) = &mut self.spool
        {
            s.pop_front()?;
        }
        Ok(())
    }

    /// Moves what is in memory to the spool (the store failed, or the run ends); without a
    /// spool nothing moves. Returns whether memory is empty now.
    pub fn spill(&mut self) -> Result<bool, std::io::Error> {
        let Some(s) = &mut self.spool else {
            return Ok(self.memory.is_empty());
        };
        while let Some(item) = self.memory.pop_back() {
            self.counts.dropped += s.push(&item)?;
        }
        Ok(true)
    }

    /// At the end: what is left is spooled, or dropped without a spool (and why spooling
    /// failed, if it did).
    pub fn close(&mut self) -> (Counts, std::io::Result<()>) {
        let spilled = self.spill().map(|_| ());
        self.counts.dropped += self.memory.len() as u64;
        self.memory.clear();
        self.counts.spooled = self.spool.as_ref().map_or(0, |s| s.len() as u64);
        (self.counts, spilled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(q: &mut Queue) -> Item {
        Item {
            seq: q.next_seq(),
            from: 0,
            until: 0,
            rate: 0,
            body: vec![7; 10],
        }
    }

    fn drain(q: &mut Queue) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(i) = q.front() {
            out.push(i.unwrap().seq);
            q.pop_front().unwrap();
        }
        out
    }

    #[test]
    fn order_holds_through_memory_spool_and_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut q = Queue::new(Some(Spool::open(dir.path(), 1000).unwrap()));
        for _ in 0..2 {
            let i = item(&mut q);
            q.push(i).unwrap();
        }
        // The store fails: memory moves to disk, new intervals follow it there.
        q.down = true;
        q.spill().unwrap();
        for _ in 0..3 {
            let i = item(&mut q);
            q.push(i).unwrap();
        }
        assert_eq!(q.close().0.spooled, 5);
        let mut q = Queue::new(Some(Spool::open(dir.path(), 1000).unwrap()));
        let i = item(&mut q);
        assert_eq!(i.seq, 5, "numbering goes on");
        q.push(i).unwrap();
        assert_eq!(drain(&mut q), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn without_a_spool_memory_is_bounded_and_drops_are_counted() {
        let mut q = Queue::new(None);
        for _ in 0..10 {
            let i = item(&mut q);
            q.push(i).unwrap();
        }
        assert_eq!(q.counts.dropped, 2);
        assert_eq!(drain(&mut q), (2..10).collect::<Vec<_>>());
        let i = item(&mut q);
        q.push(i).unwrap();
        let (c, _) = q.close();
        assert_eq!((c.dropped, c.spooled), (3, 0));
    }
}
