//! The code cache of a live JVM: its heaps and segment maps, the interpreter's code, and the
//! code blob holding a PC, found as the kernel walk will find it (segment map, bounded hops).

use std::ops::Range;

use super::layout::{CodeStart, DeoptHandler, Layout};
use crate::runtimes::shared::memory::{Memory, ReadError};

/// Segment map hops followed before giving up: measured up to 18 in a small JVM (OTel's 12 is
/// too few); a chain longer than this is treated as no blob.
pub const MAX_SEGMAP_HOPS: u32 = 32;
/// Code heaps read (17 and 25 with tiered compilation: 3).
const MAX_HEAPS: i64 = 8;
/// A segment map byte saying the segment is free.
const FREE_SEGMENT: u8 = 0xff;
/// Longest blob name read.
const MAX_BLOB_NAME: usize = 64;

/// One `CodeHeap`: its reserved range, its segment map and segment size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeHeap {
    pub memory: Range<u64>,
    /// Committed end: PCs at or above it are in no blob.
    pub committed_end: u64,
    pub segmap: u64,
    pub log2_segment_size: u32,
}

/// The code cache as one JVM has it laid out (fixed once the JVM has started).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeCache {
    pub heaps: Vec<CodeHeap>,
    /// `[CodeCache::_low_bound, _high_bound)`: outside it a PC is native code.
    pub bounds: Range<u64>,
    /// The template interpreter's code (`AbstractInterpreter::_code`'s buffer).
    pub interpreter: Range<u64>,
    /// Where Java code returns into the call stub (native code called Java there).
    pub call_stub_return: u64,
}

/// What a code blob is, from its name (the same names on 17 and 25; 25 also has `_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobKind {
    /// The template interpreter: frames walked by frame pointer.
    Interpreter,
    /// JIT code of a Java method (`level` 1–3 C1, 4 C2; `osr` for on-stack replacement).
    Nmethod {
        compile_id: u32,
        level: u8,
        osr: bool,
    },
    /// A JNI wrapper around a native method.
    NativeNmethod { compile_id: u32 },
    /// Anything else: stubs, adapters, runtime blobs (named by their `_name`).
    Stub,
}

/// A code blob as the walk and naming need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blob {
    pub addr: u64,
    pub name: String,
    pub kind: BlobKind,
    /// Frame size in bytes (0 for blobs that build no frame of their own or keep rbp).
    pub frame_size: u64,
    pub code_begin: u64,
    /// First PC where the frame is complete (before it: the prologue).
    pub frame_complete: u64,
    pub size: u64,
    /// nmethods: the deoptimisation handler (a return address equal to it means the frame
    /// was deoptimised; the real PC is then at `sp + orig_pc_offset`).
    pub deopt_handler: Option<u64>,
    pub orig_pc_offset: Option<i64>,
}

impl Blob {
    pub fn contains(&self, pc: u64) -> bool {
        (self.addr..self.addr + self.size).contains(&pc)
    }
}

impl CodeCache {
    /// Reads the code cache's shape; `None` while the JVM has not created its heaps yet.
    pub fn read<M: Memory + ?Sized>(
        mem: &M,
        layout: &Layout,
    ) -> Result<Option<CodeCache>, ReadError> {
        let l = &layout.code_cache;
        let array = mem.read_u64(l.heaps)?;
        if array == 0 {
            return Ok(None);
        }
        let len = l.array_len.read(mem, array)?;
        // The array is made before the heaps are added to it.
        if len == 0 {
            return Ok(None);
        }
        if !(1..=MAX_HEAPS).contains(&len) {
            return Err(ReadError::invalid(
                "CodeCache::_heaps",
                array,
                format!("{len} heaps"),
            ));
        }
        let data = mem.read_u64(array + u64::from(l.array_data))?;
        let mut heaps = Vec::new();
        for i in 0..len as u64 {
            let heap = mem.read_u64(data + 8 * i)?;
            let space = heap + u64::from(l.heap_memory);
            let low = mem.read_u64(space + u64::from(l.space_low_boundary))?;
            let high = mem.read_u64(space + u64::from(l.space_high_boundary))?;
            let committed_end = mem.read_u64(space + u64::from(l.space_high))?;
            let segmap_space = heap + u64::from(l.heap_segmap);
            let segmap = mem.read_u64(segmap_space + u64::from(l.space_low_boundary))?;
            let log2 = l.heap_log2_segment_size.read(mem, heap)?;
            if !(4..=16).contains(&log2) || low >= high {
                return Err(ReadError::invalid(
                    "CodeHeap",
                    heap,
                    format!("range {low:#x}..{high:#x}, segment 2^{log2}"),
                ));
            }
            heaps.push(CodeHeap {
                memory: low..high,
                committed_end,
                segmap,
                log2_segment_size: log2 as u32,
            });
        }
        let bounds = mem.read_u64(l.low_bound)?..mem.read_u64(l.high_bound)?;
        let i = &layout.interpreter;
        let queue = mem.read_u64(i.code)?;
        let interpreter = if queue == 0 {
            0..0
        } else {
            let start = mem.read_u64(queue + u64::from(i.stub_buffer))?;
            let limit = i.buffer_limit.read(mem, queue)?;
            start..start + limit.max(0) as u64
        };
        Ok(Some(CodeCache {
            heaps,
            bounds,
            interpreter,
            call_stub_return: mem.read_u64(layout.call_stub_return)?,
        }))
    }

    /// Whether `pc` is JIT or stub code (else native: libjvm, libc, ...).
    pub fn contains(&self, pc: u64) -> bool {
        self.bounds.contains(&pc)
    }

    /// The start of the code blob holding `pc` (past its HeapBlock header), by the segment
    /// map: each used segment's byte says how many segments back the block's start is (or
    /// 0 at the start), hops bounded by [`MAX_SEGMAP_HOPS`]. `None`: no blob holds `pc`.
    pub fn blob_start<M: Memory + ?Sized>(
        &self,
        mem: &M,
        layout: &Layout,
        pc: u64,
    ) -> Result<Option<u64>, ReadError> {
        let Some(heap) = self
            .heaps
            .iter()
            .find(|h| h.memory.contains(&pc) && pc < h.committed_end)
        else {
            return Ok(None);
        };
        let mut segment = (pc - heap.memory.start) >> heap.log2_segment_size;
        let mut tag = [0u8];
        mem.read(heap.segmap + segment, &mut tag)?;
        if tag[0] == FREE_SEGMENT {
            return Ok(None);
        }
        let mut hops = 0;
        while tag[0] != 0 {
            hops += 1;
            if hops > MAX_SEGMAP_HOPS || u64::from(tag[0]) > segment {
                return Ok(None);
            }
            segment -= u64::from(tag[0]);
            mem.read(heap.segmap + segment, &mut tag)?;
        }
        let block = heap.memory.start + (segment << heap.log2_segment_size);
        let used = layout.code_cache.block_used.read(mem, block)?;
        Ok((used != 0).then_some(block + u64::from(layout.code_cache.heap_block_size)))
    }

    /// The blob holding `pc`, read.
    pub fn blob_at<M: Memory + ?Sized>(
        &self,
        mem: &M,
        layout: &Layout,
        pc: u64,
    ) -> Result<Option<Blob>, ReadError> {
        let Some(addr) = self.blob_start(mem, layout, pc)? else {
            return Ok(None);
        };
        read_blob(mem, layout, addr).map(Some)
    }
}

/// The code blob at `addr`.
pub fn read_blob<M: Memory + ?Sized>(
    mem: &M,
    layout: &Layout,
    addr: u64,
) -> Result<Blob, ReadError> {
    let b = &layout.blob;
    let name_ptr = mem.read_u64(addr + u64::from(b.name))?;
    let name = crate::runtimes::shared::memory::read_cstr(mem, name_ptr, MAX_BLOB_NAME)?;
    let size = b.size.read(mem, addr)?;
    let frame_words = b.frame_size.read(mem, addr)?;
    if !(0..1 << 30).contains(&size) || !(0..1 << 20).contains(&frame_words) {
        return Err(ReadError::invalid(
            "CodeBlob",
            addr,
            format!("size {size}, frame {frame_words} words"),
        ));
    }
    let code_begin = match b.code {
        CodeStart::Pointer { begin } => mem.read_u64(addr + u64::from(begin))?,
        CodeStart::Offset { code } => addr.wrapping_add_signed(code.read(mem, addr)?),
    };
    let frame_complete = code_begin.wrapping_add_signed(b.frame_complete_offset.read(mem, addr)?);
    let n = &layout.nmethod;
    let compile_id = || n.compile_id.read(mem, addr).map(|v| v as u32);
    let kind = match name.as_str() {
        "Interpreter" => BlobKind::Interpreter,
        "nmethod" => {
            let mut level = [0u8];
            mem.read(addr + u64::from(n.comp_level), &mut level)?;
            BlobKind::Nmethod {
                compile_id: compile_id()?,
                level: level[0],
                osr: n.entry_bci.read(mem, addr)? != -1,
            }
        }
        "native nmethod" => BlobKind::NativeNmethod {
            compile_id: compile_id()?,
        },
        _ => BlobKind::Stub,
    };
    let (deopt_handler, orig_pc_offset) = if matches!(kind, BlobKind::Nmethod { .. }) {
        let handler = match n.deopt_handler {
            DeoptHandler::Pointer(at) => mem.read_u64(addr + u64::from(at))?,
            DeoptHandler::Offset(off) => addr.wrapping_add_signed(off.read(mem, addr)?),
        };
        (Some(handler), Some(n.orig_pc_offset.read(mem, addr)?))
    } else {
        (None, None)
    };
    Ok(Blob {
        addr,
        name,
        kind,
        frame_size: frame_words as u64 * 8,
        code_begin,
        frame_complete,
        size: size as u64,
        deopt_handler,
        orig_pc_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::{hotspot::testdata::layout17, shared::memory::FakeMemory};

    const LOW: u64 = 0x7000_0000;
    const SEGMAP: u64 = 0x6000_0000;

    /// One heap of 128-byte segments: a free segment 0, blob A over segments 1..=40 (a
    /// segment map that counts back in steps of at most 31, as HotSpot writes it), blob B
    /// (freed) at 41.
    fn heap(m: &mut FakeMemory) -> CodeCache {
        let mut map = vec![FREE_SEGMENT; 64];
        map[1] = 0;
        for (i, tag) in map.iter_mut().enumerate().take(41).skip(2) {
            *tag = ((i - 2) % 31 + 1) as u8;
        }
        map[41] = 0;
        m.put(SEGMAP, &map);
        // Blob A: HeapBlock header (length, used) then the CodeBlob.
        let a = LOW + 128;
        let mut block = vec![0u8; 16 + 128];
        block[8] = 1;
        let cb = 16;
        block[cb + 12..cb + 16].copy_from_slice(&(40 * 128i32 - 16).to_le_bytes());
        block[cb + 20..cb + 24].copy_from_slice(&64i32.to_le_bytes());
        block[cb + 28..cb + 32].copy_from_slice(&4i32.to_le_bytes());
        block[cb + 32..cb + 40].copy_from_slice(&(a + 16 + 0x100).to_le_bytes());
        block[cb + 96..cb + 104].copy_from_slice(&0x5000_0000u64.to_le_bytes());
        m.put(a, &block);
        // The rest of the nmethod (from offset 128: the deopt handler first).
        let mut more = vec![0u8; 320];
        more[0..8].copy_from_slice(&0xdead_0000u64.to_le_bytes());
        more[304 - 128..308 - 128].copy_from_slice(&77i32.to_le_bytes());
        more[308 - 128] = 4;
        more[192 - 128..196 - 128].copy_from_slice(&(-1i32).to_le_bytes());
        m.put(a + 16 + 128, &more);
        m.put(LOW + 41 * 128, &[0u8; 16]);
        let mut name = b"nmethod\0".to_vec();
        name.resize(MAX_BLOB_NAME, 0);
        m.put(0x5000_0000, &name);
        CodeCache {
            heaps: vec![CodeHeap {
                memory: LOW..LOW + 64 * 128,
                committed_end: LOW + 64 * 128,
                segmap: SEGMAP,
                log2_segment_size: 7,
            }],
            bounds: LOW..LOW + 64 * 128,
            interpreter: 0..0,
            call_stub_return: 0,
        }
    }

    #[test]
    fn segment_map_finds_the_blob() {
        let l = layout17();
        let mut m = FakeMemory::default();
        let cache = heap(&mut m);
        let a = LOW + 128 + 16;
        // Every PC inside blob A (hops: up to 2 here) finds its start.
        for pc in [LOW + 128 + 20, LOW + 32 * 128 + 5, LOW + 41 * 128 - 1] {
            assert_eq!(cache.blob_start(&m, &l, pc).unwrap(), Some(a), "{pc:#x}");
        }
        assert_eq!(cache.blob_start(&m, &l, LOW + 3).unwrap(), None, "free");
        assert_eq!(
            cache.blob_start(&m, &l, LOW + 41 * 128).unwrap(),
            None,
            "unused block"
        );
        assert_eq!(cache.blob_start(&m, &l, LOW - 1).unwrap(), None, "outside");
        let blob = cache.blob_at(&m, &l, LOW + 2000).unwrap().expect("blob");
        assert_eq!(blob.name, "nmethod");
        assert_eq!(
            blob.kind,
            BlobKind::Nmethod {
                compile_id: 77,
                level: 4,
                osr: false
            }
        );
        assert_eq!(blob.frame_size, 32);
        assert_eq!(blob.code_begin, a + 0x100);
        assert_eq!(blob.frame_complete, a + 0x100 + 64);
        assert_eq!(blob.deopt_handler, Some(0xdead_0000));
    }

    #[test]
    fn hops_are_bounded() {
        let l = layout17();
        let mut m = FakeMemory::default();
        let mut cache = heap(&mut m);
        // 40 segments each pointing one back: 39 hops, more than the bound.
        let mut map = vec![1u8; 64];
        map[0] = 0;
        m.put(SEGMAP + 0x1000, &map);
        cache.heaps[0].segmap = SEGMAP + 0x1000;
        assert_eq!(cache.blob_start(&m, &l, LOW + 39 * 128).unwrap(), None);
        m.put(LOW, &[0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(
            cache.blob_start(&m, &l, LOW + 31 * 128).unwrap(),
            Some(LOW + 16)
        );
    }

    /// A JVM read between making the heaps' array and adding the heaps to it: not yet
    /// (looked at again), never an error that would give up on it.
    #[test]
    fn an_empty_heap_array_is_not_ready() {
        let l = layout17();
        let mut m = FakeMemory::default();
        let array = 0x6000_0000u64;
        m.put(l.code_cache.heaps, &array.to_le_bytes());
        let len = l.code_cache.array_len;
        m.put(
            array + u64::from(len.offset),
            &vec![0u8; usize::from(len.size)],
        );
        assert!(CodeCache::read(&m, &l).unwrap().is_none());
        m.put(l.code_cache.heaps, &0u64.to_le_bytes());
        assert!(CodeCache::read(&m, &l).unwrap().is_none());
    }
}
