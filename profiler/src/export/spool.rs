//! The on-disk queue of one destination: one file per interval, named by its sequence
//! number so a directory listing is the queue's order, written to a hidden temp file and
//! renamed so a crash leaves whole files only. Bounded in bytes: past the bound the oldest
//! files are deleted (and counted). What a run leaves here is sent first by the next.

use std::{
    collections::VecDeque,
    fs,
    io::{self, Write as _},
    path::{Path, PathBuf},
};

/// One interval's request to one destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// Order of creation; across runs too (the next run numbers on from the spool's last).
    pub seq: u64,
    /// Unix seconds the interval started and ended (Pyroscope's `from` and `until`).
    pub from: u64,
    pub until: u64,
    /// Samples per second the interval was taken at (Pyroscope's `sampleRate`; 0 unknown).
    pub rate: u64,
    pub body: Vec<u8>,
}

impl Item {
    fn file_name(&self) -> String {
        format!(
            "{:020}-{}-{}-{}.item",
            self.seq, self.from, self.until, self.rate
        )
    }

    fn parse_name(name: &str) -> Option<(u64, u64, u64, u64)> {
        let stem = name.strip_suffix(".item")?;
        let mut parts = stem.split('-').map(|p| p.parse::<u64>().ok());
        let out = (
            parts.next()??,
            parts.next()??,
            parts.next()??,
            parts.next()??,
        );
        parts.next().is_none().then_some(out)
    }
}

#[derive(Debug)]
struct Entry {
    seq: u64,
    name: String,
    size: u64,
}

#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    entries: VecDeque<Entry>,
    bytes: u64,
}

impl Spool {
    /// Opens (creating) `dir` and lists what an earlier run left, oldest first; temp files
    /// of a write that never finished are removed.
    pub fn open(dir: &Path, max_bytes: u64) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let mut entries = Vec::new();
        for e in fs::read_dir(dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                let _ = fs::remove_file(e.path());
                continue;
            }
            if let Some((seq, ..)) = Item::parse_name(&name) {
                entries.push(Entry {
                    seq,
                    name,
                    size: e.metadata()?.len(),
                });
            }
        }
        entries.sort_by_key(|e| e.seq);
        let bytes = entries.iter().map(|e| e.size).sum();
        Ok(Self {
            dir: dir.to_path_buf(),
            max_bytes,
            entries: entries.into(),
            bytes,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The next sequence number after everything spooled.
    pub fn next_seq(&self) -> u64 {
        self.entries.back().map_or(0, |e| e.seq + 1)
    }

    /// Adds `item` in its place (by sequence number), then deletes the oldest files while
    /// the spool is over its bound; returns how many were deleted.
    pub fn push(&mut self, item: &Item) -> io::Result<u64> {
        let name = item.file_name();
        let tmp = self.dir.join(format!(".{name}"));
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&item.body)?;
        f.sync_data()?;
        drop(f);
        fs::rename(&tmp, self.dir.join(&name))?;
        let entry = Entry {
            seq: item.seq,
            name,
            size: item.body.len() as u64,
        };
        self.bytes += entry.size;
        let at = self.entries.partition_point(|e| e.seq < item.seq);
        self.entries.insert(at, entry);
        let mut dropped = 0;
        while self.bytes > self.max_bytes && !self.entries.is_empty() {
            self.pop_front()?;
            dropped += 1;
        }
        Ok(dropped)
    }

    /// The oldest item, read back.
    pub fn front(&self) -> Option<io::Result<Item>> {
        let e = self.entries.front()?;
        let (seq, from, until, rate) = Item::parse_name(&e.name).expect("listed names parse");
        Some(fs::read(self.dir.join(&e.name)).map(|body| Item {
            seq,
            from,
            until,
            rate,
            body,
        }))
    }

    /// Deletes the oldest item.
    pub fn pop_front(&mut self) -> io::Result<()> {
        if let Some(e) = self.entries.pop_front() {
            self.bytes -= e.size;
            match fs::remove_file(self.dir.join(&e.name)) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(seq: u64, len: usize) -> Item {
        Item {
            seq,
            from: 100 + seq,
            until: 101 + seq,
            rate: 99,
            body: vec![seq as u8; len],
        }
    }

    #[test]
    fn items_come_back_in_order_across_opens_and_the_oldest_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(dir.path(), 250).unwrap();
        for seq in [3, 1, 2] {
            assert_eq!(s.push(&item(seq, 100)).unwrap(), u64::from(seq == 2));
        }
        // 300 bytes > 250: the oldest (1) went when the third arrived.
        assert_eq!((s.len(), s.bytes()), (2, 200));
        assert_eq!(s.front().unwrap().unwrap(), item(2, 100));
        std::fs::write(dir.path().join(".00000000000000000009-0-0-0.item"), b"x").unwrap();
        drop(s);
        let mut s = Spool::open(dir.path(), 250).unwrap();
        assert_eq!(s.next_seq(), 4);
        assert_eq!(s.front().unwrap().unwrap(), item(2, 100));
        s.pop_front().unwrap();
        assert_eq!(s.front().unwrap().unwrap(), item(3, 100));
        s.pop_front().unwrap();
        assert!(s.front().is_none());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "temp removed"
        );
    }

    #[test]
    fn an_item_larger_than_the_bound_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(dir.path(), 50).unwrap();
        assert_eq!(s.push(&item(0, 100)).unwrap(), 1);
        assert!(s.is_empty());
    }
}
