//! Positioned reads of an opened file, for `object` to parse it without opening it again.

use std::{fs::File, io, os::unix::fs::FileExt};

use object::read::ReadCacheOps;

/// One reader's position in a shared file: reads are positional (pread), so the threads
/// that read one descriptor (the unwinder's registry, the symbolizer) never move each
/// other's offset. Wrap it in [`object::ReadCache`] to parse the file.
pub struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
}

impl<'a> ReadAt<'a> {
    pub fn new(file: &'a File) -> Self {
        Self { file, pos: 0 }
    }

    /// Reading on from `pos` (as an [`io::Read`]).
    pub fn positioned(file: &'a File, pos: u64) -> Self {
        Self { file, pos }
    }
}

impl io::Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl ReadCacheOps for ReadAt<'_> {
    fn len(&mut self) -> Result<u64, ()> {
        self.file.metadata().map(|m| m.len()).map_err(drop)
    }

    fn seek(&mut self, pos: u64) -> Result<u64, ()> {
        self.pos = pos;
        Ok(pos)
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<usize, ()> {
        io::Read::read(self, buf).map_err(drop)
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), ()> {
        self.file.read_exact_at(buf, self.pos).map_err(drop)?;
        self.pos += buf.len() as u64;
        Ok(())
    }
}
