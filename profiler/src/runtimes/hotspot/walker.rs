//! The user-space half of the kernel's HotSpot walker (`profiler-ebpf/src/hotspot.rs`): for
//! each process the native unwinder publishes, whether it runs a HotSpot we can walk and the
//! [`HsProc`] entry that tells the kernel how (its code cache read once the JVM created it);
//! then, for each Java frame a record carries, its method, file and line (inlined methods
//! expanded), read from the process soon after the sample. Names are cached by the frame's
//! words, which carry their own checks (the ConstMethod's low bits, the compile id).

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use profiler_common::{
    hotspot::{
        HS_BLOCK_BYTES, HS_COMPILED, HS_TOP, HS_VEP_NONE, HS_VEP_OFFSET, HS_VEP_POINTER, HsField,
        HsHeap, HsProc, MAX_HS_HEAPS,
    },
    runtimes::{rt_flags, rt_payload},
};

use super::{
    code::{BlobKind, CodeCache, read_blob},
    detect::{Detection, detect_in, libjvm_mapping},
    layout::{CodeStart, DeoptHandler, Layout, Scalar, VerifiedEntry},
    naming::{JavaFrame, Namer, NamerCache, PcKind, Tier},
};
use crate::{
    modules::Mapping,
    runtimes::{
        kernel::Entry,
        seam::Published,
        shared::{jit::jit_walk_refused, memory::ProcessMemory},
    },
};

/// Frames named per process before its cache is cleared.
const MAX_NAMED: usize = 1 << 16;

/// A JVM the walker knows.
struct Jvm {
    path: Arc<str>,
    layout: Arc<Layout>,
    entry: HsProc,
    cache: NamerCache,
    /// (word, data) → the frames.
    named: HashMap<(u64, u64), Arc<[JavaFrame]>>,
    /// (nmethod, compile id) → its tier and code start (the id makes the entry exact: a
    /// freed nmethod's memory is reused with a new one).
    nmethods: HashMap<(u64, u32), (Tier, u64, u64)>,
    code: CodeCache,
    /// A stub's PC → its blob's name (`None`: not a stub).
    stubs: HashMap<u64, Option<Arc<str>>>,
}

/// JVMs the kernel walker knows, and their frames' names (a process not walked has no
/// entry).
#[derive(Default)]
pub struct HotspotWalker {
    procs: HashMap<u32, Box<Jvm>>,
    /// JVMs looked at too early (libjvm mapped, its tables or code heaps not made yet):
    /// looked at again at each rescan, since a JVM's executable mappings may never change
    /// again once it runs (a program that mostly sleeps).
    early: HashSet<u32>,
}

impl HotspotWalker {
    /// Looks at a process the native unwinder is publishing (new, or its mappings changed).
    pub fn publish(&mut self, pid: u32, mappings: &[Mapping]) -> Published {
        self.early.remove(&pid);
        let Some(mapping) = libjvm_mapping(mappings) else {
            self.procs.remove(&pid);
            return Published::Native(None);
        };
        if let Some(why) = jit_walk_refused(pid, &mapping.name, "HotSpot") {
            self.procs.remove(&pid);
            return Published::Native(Some(why));
        }
        if let Some(jvm) = self.procs.get(&pid)
            && *jvm.path == *mapping.name
        {
            return Published::Walk(Entry::Hotspot(Box::new(jvm.entry)));
        }
        let mem = ProcessMemory::new(pid);
        let (path, version, layout) = match detect_in(pid, mappings, &mem) {
            Ok(Detection::Found {
                path,
                version,
                layout,
            }) => (path, version, layout),
            Ok(Detection::Unsupported { path, reason }) => {
                self.procs.remove(&pid);
                return Published::Native(Some(format!("{path}: {reason}")));
            }
            Ok(Detection::NotJvm) => {
                self.procs.remove(&pid);
                return Published::Native(None);
            }
            // Read too early (libjvm's constructors not run yet): looked at again at the
            // next rescan.
            Ok(Detection::NotReady) | Err(_) => {
                self.early.insert(pid);
                return Published::Native(None);
            }
        };
        let cache = match CodeCache::read(&mem, &layout) {
            // The interpreter and the call stub are generated after the heaps are made: a
            // walk published before would never recognise them.
            Ok(Some(c)) if !c.interpreter.is_empty() && c.call_stub_return != 0 => c,
            // Heaps, interpreter or call stub not made yet: again at the next rescan.
            Ok(_) => {
                self.early.insert(pid);
                return Published::Native(None);
            }
            Err(e) => {
                self.procs.remove(&pid);
                return Published::Native(Some(format!("{path}: HotSpot {version}: {e}")));
            }
        };
        let entry = match entry(&layout, &cache) {
            Ok(e) => e,
            Err(why) => {
                self.procs.remove(&pid);
                return Published::Native(Some(format!("{path}: HotSpot {version}: {why}")));
            }
        };
        self.procs.insert(
            pid,
            Box::new(Jvm {
                path: Arc::from(path),
                layout: Arc::from(layout),
                entry,
                cache: NamerCache::default(),
                named: HashMap::new(),
                nmethods: HashMap::new(),
                code: cache,
                stubs: HashMap::new(),
            }),
        );
        Published::Walk(Entry::Hotspot(Box::new(entry)))
    }

    /// The kernel's entry for process `pid`, if it runs a HotSpot this walks.
    pub fn entry(&self, pid: u32) -> Option<HsProc> {
        self.procs.get(&pid).map(|jvm| jvm.entry)
    }

    /// Whether process `pid` is a JVM looked at before it could be read, to look at again
    /// even if its mappings stay the same.
    pub fn waiting(&self, pid: u32) -> bool {
        self.early.contains(&pid)
    }

    /// The JVMs looked at before they could be read.
    pub fn waiting_pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.early.iter().copied()
    }

    /// A process that exited.
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.early.remove(&pid);
    }

    /// The name of the VM stub (the call stub, an adapter, a runtime stub: code-cache code
    /// that is no Java method) holding the native frame address `pc` in process `pid`, as
    /// the code cache calls it (`StubRoutines (1)`); `None` for any other address.
    pub fn stub(&mut self, pid: u32, pc: u64) -> Option<Arc<str>> {
        let jvm = self.procs.get_mut(&pid)?;
        if !jvm.code.contains(pc) {
            return None;
        }
        if let Some(name) = jvm.stubs.get(&pc) {
            return name.clone();
        }
        let mem = ProcessMemory::new(pid);
        // A process gone reads nothing: its stubs not named before stay addresses.
        let blob = jvm.code.blob_at(&mem, &jvm.layout, pc).ok()?;
        let name = blob
            .filter(|b| b.kind == BlobKind::Stub)
            .map(|b| Arc::from(b.name.as_str()));
        if jvm.stubs.len() >= MAX_NAMED {
            jvm.stubs.clear();
        }
        jvm.stubs.insert(pc, name.clone());
        name
    }

    /// The Java frames of the words `word` and `data` (`profiler_common::hotspot`) in
    /// process `pid`, innermost first (methods inlined at that PC before the one compiled);
    /// `None` when they cannot be read (the method or nmethod is gone, or the process).
    pub fn frame(&mut self, pid: u32, word: u64, data: u64) -> Option<Arc<[JavaFrame]>> {
        let jvm = self.procs.get_mut(&pid)?;
        let Jvm {
            layout,
            cache,
            named,
            nmethods,
            ..
        } = &mut **jvm;
        if let Some(f) = named.get(&(word, data)) {
            return Some(f.clone());
        }
        let mem = ProcessMemory::new(pid);
        let mut namer = Namer::resume(&mem, layout, std::mem::take(cache));
        let frames: Option<Arc<[JavaFrame]>> =
            name(&mem, layout, &mut namer, nmethods, word, data).map(Arc::from);
        *cache = namer.into_cache();
        if named.len() >= MAX_NAMED {
            named.clear();
        }
        if nmethods.len() >= MAX_NAMED {
            nmethods.clear();
        }
        // Only names are kept: a frame not read now (an nmethod being installed, a read
        // that failed) is tried again at its next sample.
        if let Some(f) = &frames {
            named.insert((word, data), f.clone());
        }
        frames
    }
}

/// Names one frame's words.
fn name(
    mem: &ProcessMemory,
    layout: &Layout,
    namer: &mut Namer<'_, ProcessMemory>,
    nmethods: &mut HashMap<(u64, u32), (Tier, u64, u64)>,
    word: u64,
    data: u64,
) -> Option<Vec<JavaFrame>> {
    let (addr, flags) = (rt_payload(word), rt_flags(word));
    let (high, low) = ((data >> 32) as u32, data as u32);
    if flags & HS_COMPILED == 0 {
        // The method still has the ConstMethod it had when sampled.
        let cm = namer.const_method(addr).ok()?;
        if cm as u32 != high {
            return None;
        }
        return namer.interpreted(addr, low as i32).ok().map(|f| vec![f]);
    }
    let (tier, code_begin, frame_complete) = match nmethods.get(&(addr, high)) {
        Some(known) => *known,
        None => {
            let blob = read_blob(mem, layout, addr).ok()?;
            let tier = match blob.kind {
                BlobKind::Nmethod {
                    compile_id, level, ..
                } if compile_id == high => Tier::of_level(level),
                BlobKind::NativeNmethod { compile_id } if compile_id == high => Tier::Native,
                _ => return None,
            };
            let known = (tier, blob.code_begin, blob.frame_complete);
            nmethods.insert((addr, high), known);
            known
        }
    };
    let pc = addr + u64::from(low);
    let offset = u32::try_from(pc.checked_sub(code_begin)?).ok()?;
    let kind = if flags & HS_TOP != 0 && pc < frame_complete {
        PcKind::Entry
    } else if flags & HS_TOP != 0 {
        PcKind::Stopped
    } else {
        PcKind::ReturnAddress
    };
    namer.compiled(addr, high, tier, offset, kind).ok()
}

/// The kernel's entry for a JVM of this layout and code cache, or why the kernel cannot
/// walk it.
pub fn entry(l: &Layout, cache: &CodeCache) -> Result<HsProc, String> {
    if cache.heaps.len() > MAX_HS_HEAPS {
        return Err(format!(
            "{} code heaps (the walk reads {MAX_HS_HEAPS})",
            cache.heaps.len()
        ));
    }
    let mut heaps = [HsHeap::default(); MAX_HS_HEAPS];
    for (h, c) in heaps.iter_mut().zip(&cache.heaps) {
        *h = HsHeap {
            low: c.memory.start,
            high: c.memory.end,
            segmap: c.segmap,
            log2_segment: c.log2_segment_size,
            _pad: 0,
        };
    }
    let blob = l.code_cache.heap_block_size;
    let mut end = 0u32;
    let mut at = |offset: u16, size: u8, signed: bool| -> HsField {
        end = end.max(u32::from(offset) + 8);
        HsField {
            offset,
            size,
            signed: u8::from(signed),
        }
    };
    let mut scalar = |s: &Scalar, base: u16| at(base + s.offset, s.size, s.signed);
    let used = scalar(&l.code_cache.block_used, 0);
    let b = &l.blob;
    let n = &l.nmethod;
    let frame_size = scalar(&b.frame_size, blob);
    let frame_complete = scalar(&b.frame_complete_offset, blob);
    let (code, code_is_offset) = match b.code {
        CodeStart::Pointer { begin } => (scalar(&pointer(begin), blob), 0),
        CodeStart::Offset { code } => (scalar(&code, blob), 1),
    };
    let compile_id = scalar(&n.compile_id, blob);
    let orig_pc_offset = scalar(&n.orig_pc_offset, blob);
    let (deopt, deopt_is_offset) = match n.deopt_handler {
        DeoptHandler::Pointer(at) => (scalar(&pointer(at), blob), 0),
        DeoptHandler::Offset(off) => (scalar(&off, blob), 1),
    };
    let (verified_entry, verified_entry_is) = match n.verified_entry {
        Some(VerifiedEntry::Pointer(at)) => (scalar(&pointer(at), blob), HS_VEP_POINTER),
        Some(VerifiedEntry::Offset(off)) => (scalar(&off, blob), HS_VEP_OFFSET),
        None => (HsField::default(), HS_VEP_NONE),
    };
    let name = scalar(&pointer(b.name), blob);
    if end > HS_BLOCK_BYTES {
        return Err(format!(
            "code blob fields end at byte {end} (the walk reads {HS_BLOCK_BYTES})"
        ));
    }
    let i = &l.interpreter;
    Ok(HsProc {
        enabled: 1,
        heaps_len: cache.heaps.len() as u8,
        slot_method: i.method,
        slot_bcp: i.bcp,
        slot_sender_sp: i.sender_sp,
        code_is_offset,
        deopt_is_offset,
        verified_entry_is,
        block_bytes: end.next_multiple_of(8) as u16,
        method_const_method: l.method.const_method,
        cm_code_size: l.method.cm_code_size.offset,
        cm_size: l.method.cm_size,
        low: cache.bounds.start,
        high: cache.bounds.end,
        interpreter_low: cache.interpreter.start,
        interpreter_high: cache.interpreter.end,
        call_stub_return: cache.call_stub_return,
        heaps,
        blob,
        used,
        name,
        frame_size,
        code,
        frame_complete,
        compile_id,
        deopt,
        orig_pc_offset,
        verified_entry,
        ..HsProc::default()
    })
}

/// A pointer field at `offset`.
fn pointer(offset: u16) -> Scalar {
    Scalar {
        offset,
        size: 8,
        signed: false,
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use super::*;
    use crate::runtimes::hotspot::{
        code::CodeHeap,
        testdata::{layout17, layout25},
    };

    fn cache() -> CodeCache {
        let heap = |r: Range<u64>| CodeHeap {
            memory: r.clone(),
            committed_end: r.end,
            segmap: r.start - 0x100_0000,
            log2_segment_size: 7,
        };
        CodeCache {
            heaps: vec![
                heap(0x7f00_1000_0000..0x7f00_1100_0000),
                heap(0x7f00_2000_0000..0x7f00_2100_0000),
            ],
            bounds: 0x7f00_1000_0000..0x7f00_2100_0000,
            interpreter: 0x7f00_1000_8000..0x7f00_1002_0000,
            call_stub_return: 0x7f00_1000_0abc,
        }
    }

    #[test]
    fn entries_carry_each_jdks_fields() {
        let c = cache();
        let e17 = entry(&layout17(), &c).expect("17");
        assert_eq!((e17.enabled, e17.heaps_len), (1, 2));
        assert_eq!(
            (e17.slot_method, e17.slot_bcp, e17.slot_sender_sp),
            (-24, -64, -8)
        );
        // 17: HeapBlock of 16 bytes, `_code_begin` a pointer, `_compile_id` at 304.
        assert_eq!(e17.blob, 16);
        assert_eq!((e17.code_is_offset, e17.deopt_is_offset), (0, 0));
        assert_eq!(e17.code.offset, 16 + 32);
        assert_eq!((e17.code.size, e17.frame_complete.size), (8, 4));
        assert_eq!(e17.compile_id.offset, 16 + 304);
        assert_eq!(e17.used.offset, 8);
        // The verified entry: a pointer on 17, an offset from the code on 25.
        assert_eq!(e17.verified_entry_is, HS_VEP_POINTER);
        assert_eq!(
            (e17.verified_entry.offset, e17.verified_entry.size),
            (16 + 224, 8)
        );
        assert!(u32::from(e17.block_bytes) <= HS_BLOCK_BYTES);
        assert!(e17.block_bytes >= 16 + 308);
        assert_eq!(e17.heaps[1].low, 0x7f00_2000_0000);
        // 25: 8-byte HeapBlock, code and deopt handler as offsets, a 2-byte signed
        // frame-complete offset.
        let e25 = entry(&layout25(), &c).expect("25");
        assert_eq!(e25.blob, 8);
        assert_eq!((e25.code_is_offset, e25.deopt_is_offset), (1, 1));
        assert_eq!(e25.code.offset, 8 + 36);
        assert_eq!((e25.frame_complete.size, e25.frame_complete.signed), (2, 1));
        assert_eq!(e25.compile_id.offset, 8 + 212);
        assert_eq!(e25.verified_entry_is, HS_VEP_OFFSET);
        assert_eq!(
            (e25.verified_entry.offset, e25.verified_entry.size),
            (8 + 154, 2)
        );
    }

    #[test]
    fn too_many_heaps_is_said() {
        let mut c = cache();
        c.heaps = vec![c.heaps[0].clone(); MAX_HS_HEAPS + 1];
        let why = entry(&layout17(), &c).unwrap_err();
        assert!(why.contains("code heaps"), "{why}");
    }
}
