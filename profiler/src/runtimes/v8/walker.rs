//! The user-space half of the kernel's V8 walker: for each process the native unwinder
//! publishes, whether it runs a V8 we can walk and the [`V8Proc`] entry that tells the kernel
//! how; then, for each JS frame a record carries, its name, script and line, read from the
//! process's heap soon after the sample (a moving GC may reuse a JSFunction's address, so a
//! cached name is kept only while the address still holds the same SharedFunctionInfo).

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use profiler_common::{
    runtimes::rt_payload,
    v8::{V8_BYTECODE, V8_PC_TOP, V8Proc, v8_bytecode_offset, v8_frame},
};

use super::{
    detect::{Detection, detect_in, v8_mapping},
    layout::Layout,
    naming::{AtPc, JsFrame, LineKind, Namer, Position, SharedCache},
    ranges::CodeRanges,
};
use crate::{
    modules::Mapping,
    runtimes::{
        kernel::Entry,
        seam::Published,
        shared::{
            jit::jit_walk_refused,
            memory::{Memory, ProcessMemory},
        },
    },
};

/// Names cached per process before its cache is cleared.
const MAX_CACHED: usize = 1 << 16;

/// How long a JSFunction's SharedFunctionInfo, once read, stands for the address: the
/// records of one read of the ring were sampled together, and a busy node's samples carry
/// the same outer functions over and over (a read of the process's memory for each of them,
/// each time, was 8 % of the reader's time under the fleet load).
const RECHECK: Duration = Duration::from_millis(20);

/// What a process runs, as far as the walker is concerned.
enum Proc {
    V8 {
        path: Arc<str>,
        layout: Arc<Layout>,
        /// (JSFunction, second word) → its frames, as named.
        names: HashMap<(u64, u64), Named>,
        /// JSFunction → its SharedFunctionInfo as last read.
        checked: HashMap<u64, Checked>,
        /// What its SharedFunctionInfos' frames share, read once for their positions.
        shared: Box<SharedCache>,
        /// The code its functions were seen running.
        code: CodeRanges,
        /// Its executable file mappings, sorted: code there (V8's builtins, in the binary
        /// or remapped from it) is never a JS function's.
        modules: Vec<(u64, u64)>,
    },
    Native,
}

/// A JSFunction's SharedFunctionInfo, when it was read and when the function was last seen.
#[derive(Clone, Copy)]
struct Checked {
    sfi: u64,
    read: Instant,
    used: Instant,
}

/// Functions seen within this long are checked again together with the one that needs it
/// (one read of the process for all of them).
const CHECK_TOGETHER: Duration = Duration::from_secs(1);

/// A frame's names.
struct Named {
    /// The SharedFunctionInfo its JSFunction had when they were read.
    sfi: u64,
    frames: Option<Arc<[JsFrame]>>,
    /// A stopped PC in code of no function then known: [`CodeRanges::generation`] then,
    /// to look again once more code is known.
    unplaced: Option<u64>,
}

/// V8 processes the kernel walker knows, and their functions' names.
#[derive(Default)]
pub struct V8Walker {
    procs: HashMap<u32, Proc>,
}

impl V8Walker {
    /// Looks at a process the native unwinder is publishing (new, or its mappings changed).
    pub fn publish(&mut self, pid: u32, mappings: &[Mapping]) -> Published {
        let Some(mapping) = v8_mapping(mappings) else {
            self.procs.insert(pid, Proc::Native);
            return Published::Native(None);
        };
        if let Some(why) = jit_walk_refused(pid, &mapping.name, "V8") {
            self.procs.insert(pid, Proc::Native);
            return Published::Native(Some(why));
        }
        if let Some(Proc::V8 {
            path,
            layout,
            modules,
            ..
        }) = self.procs.get_mut(&pid)
            && *path == mapping.name
        {
            *modules = module_ranges(mappings);
            return Published::Walk(Entry::V8(Box::new(entry(layout))));
        }
        let (path, layout) = match detect_in(pid, mappings) {
            Ok(Detection::Found { path, layout }) => (path, layout),
            Ok(Detection::Unsupported { path, reason }) => {
                self.procs.insert(pid, Proc::Native);
                return Published::Native(Some(format!("{path}: {reason}")));
            }
            Ok(Detection::NotV8) => {
                self.procs.insert(pid, Proc::Native);
                return Published::Native(None);
            }
            Err(e) => {
                self.procs.insert(pid, Proc::Native);
                return Published::Native(Some(e.to_string()));
            }
        };
        if let Err(why) = walkable(&layout) {
            self.procs.insert(pid, Proc::Native);
            return Published::Native(Some(format!("{path}: V8 {}: {why}", layout.version)));
        }
        let e = entry(&layout);
        self.procs.insert(
            pid,
            Proc::V8 {
                path: Arc::from(path),
                layout: Arc::from(layout),
                names: HashMap::new(),
                checked: HashMap::new(),
                shared: Box::default(),
                code: CodeRanges::default(),
                modules: module_ranges(mappings),
            },
        );
        Published::Walk(Entry::V8(Box::new(e)))
    }

    /// The kernel's entry for process `pid`, if it runs a V8 this walks.
    pub fn entry(&self, pid: u32) -> Option<V8Proc> {
        match self.procs.get(&pid)? {
            Proc::V8 { layout, .. } => Some(entry(layout)),
            Proc::Native => None,
        }
    }

    /// A process that exited.
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// The JS frames of the words `word` ([`profiler_common::v8::V8_FRAME`] | JSFunction)
    /// and `data` in process `pid`, outermost first (functions inlined at that PC after the
    /// one running them); `None` when they cannot be read (the function died, or the
    /// process).
    pub fn frame(&mut self, pid: u32, word: u64, data: u64) -> Option<Arc<[JsFrame]>> {
        let Some(Proc::V8 {
            layout,
            names,
            checked,
            shared,
            code,
            modules,
            ..
        }) = self.procs.get_mut(&pid)
        else {
            return None;
        };
        let function = rt_payload(word);
        let mem = ProcessMemory::new(pid);
        let namer = Namer::with_cache(&mem, layout, shared);
        let now = Instant::now();
        let shared = match checked.get_mut(&function) {
            Some(c) if now.duration_since(c.read) < RECHECK => {
                c.used = now;
                Some(c.sfi)
            }
            _ => recheck(&mem, layout, checked, function, now),
        };
        // A process gone (its last samples are read after it exits) moves nothing more:
        // what was named at this address is kept.
        if let Some(named) = names.get(&(function, data))
            && (Some(named.sfi) == shared || shared.is_none())
            && named.unplaced.is_none_or(|g| g == code.generation())
        {
            return named.frames.clone();
        }
        let position = if data & V8_BYTECODE != 0 {
            Position::RawBytecodeOffset((data & 0xffff_ffff) << layout.smi_shift)
        } else {
            Position::Pc {
                pc: data & !V8_PC_TOP,
                top: data & V8_PC_TOP != 0,
            }
        };
        let (frames, unplaced) = match namer.frames(function, position) {
            Ok((frames, Some(c))) => {
                code.learn(c.start, c.size, function);
                (Some(frames), None)
            }
            Ok((mut frames, None)) => match position {
                Position::Pc { pc, top: true } => {
                    // A builtin's PC (in a file mapping) is never JS code: not looked up,
                    // nor again as more code is learned.
                    let builtin = in_ranges(modules, pc);
                    let callee = (!builtin)
                        .then(|| callee_frames(&namer, code, function, pc))
                        .flatten();
                    match callee {
                        Some(AtPc::Callee(callee)) => {
                            // Its call's return address is not in any frame yet: the
                            // caller's line is not known (its first line would be made up).
                            if let Some(f) = frames.last_mut() {
                                (f.line, f.line_kind) = (None, LineKind::None);
                            }
                            frames.extend(callee);
                            (Some(frames), None)
                        }
                        Some(AtPc::Own(own)) => (Some(own), None),
                        None => {
                            // Stopped in code the function called without a frame (a V8
                            // builtin, mostly): the function is the caller, its line unknown.
                            if let Some(f) = frames.last_mut() {
                                (f.line, f.line_kind) = (None, LineKind::None);
                            }
                            (Some(frames), (!builtin).then(|| code.generation()))
                        }
                    }
                }
                _ => (Some(frames), None),
            },
            Err(_) => (None, None),
        };
        let frames: Option<Arc<[JsFrame]>> = frames.map(Arc::from);
        if names.len() >= MAX_CACHED {
            names.clear();
        }
        if let Some(sfi) = shared {
            names.insert(
                (function, data),
                Named {
                    sfi,
                    frames: frames.clone(),
                    unplaced,
                },
            );
        }
        frames
    }
}

/// The ranges of the executable file mappings (and the vDSO) among `mappings` (sorted).
fn module_ranges(mappings: &[Mapping]) -> Vec<(u64, u64)> {
    mappings
        .iter()
        .filter(|m| m.has_module())
        .map(|m| (m.start, m.end))
        .collect()
}

/// Whether `pc` is in one of `ranges` (sorted, disjoint).
fn in_ranges(ranges: &[(u64, u64)], pc: u64) -> bool {
    let i = ranges.partition_point(|&(start, _)| start <= pc);
    i > 0 && pc < ranges[i - 1].1
}

/// The frames of the function whose code holds the stopped `pc`, when that is not the code
/// of `caller`, the function whose frame the frame pointer holds: a callee stopped before
/// its frame was built (or after it was taken down), or a small function run without one,
/// as V8's own sampler names it from its code map. First from the code seen running so
/// far, else from the code's header before the PC. `None` when neither finds it (a
/// builtin, or code not optimized).
fn callee_frames<M: Memory + ?Sized>(
    namer: &Namer<'_, M>,
    code: &mut CodeRanges,
    caller: u64,
    pc: u64,
) -> Option<AtPc> {
    if let Some(callee) = code.at(pc).filter(|&f| f != caller) {
        match namer.frames(callee, Position::Pc { pc, top: true }) {
            Ok((frames, Some(_))) => return Some(AtPc::Callee(frames)),
            _ => code.forget(pc),
        }
    }
    namer.code_at_pc(caller, pc)
}

/// The two words the kernel's walk writes for the frame at `fp` if it is a JS frame
/// (`profiler-ebpf/src/v8.rs`, `js_frame`, step for step): its slots read with `slot` (from a
/// stack copy), the objects they point to from `heap`; `top`: `pc` is the stopped
/// instruction.
pub fn js_words<M: Memory + ?Sized>(
    e: &V8Proc,
    slot: impl Fn(u64) -> Option<u64>,
    heap: &M,
    fp: u64,
    pc: u64,
    top: bool,
) -> Option<[u64; 2]> {
    if e.enabled == 0 || fp == 0 || !fp.is_multiple_of(8) {
        return None;
    }
    let at = |off: i8| slot(fp.wrapping_add_signed(i64::from(off)));
    if at(e.slot_marker)? & 1 == 0 {
        return None;
    }
    let function = at(e.slot_function)?;
    let ty = instance_type(e, heap, function)?;
    if ty < e.js_function_first || ty > e.js_function_last {
        return None;
    }
    let mut data = pc | if top { V8_PC_TOP } else { 0 };
    if let Some(bytecode) = at(e.slot_bytecode_array)
        && instance_type(e, heap, bytecode) == Some(e.bytecode_array_type)
        && let Some(offset) = at(e.slot_bytecode_offset)
        && offset & 1 == 0
    {
        data = v8_bytecode_offset((offset >> (e.smi_shift & 63)) as u32);
    }
    Some([v8_frame(function), data])
}

/// The instance type of the heap object `tagged` (tagged `01`), through its map.
fn instance_type<M: Memory + ?Sized>(e: &V8Proc, heap: &M, tagged: u64) -> Option<u16> {
    if tagged & 3 != 1 {
        return None;
    }
    let map = heap
        .read_u64(tagged - 1 + u64::from(e.heap_object_map))
        .ok()?;
    if map & 3 != 1 {
        return None;
    }
    let mut b = [0u8; 2];
    heap.read(map - 1 + u64::from(e.map_instance_type), &mut b)
        .ok()?;
    Some(u16::from_le_bytes(b))
}

/// Why the kernel walker cannot read this build's frames, if it cannot: it reads full
/// 8-byte tagged pointers tagged `01`.
fn walkable(layout: &Layout) -> Result<(), &'static str> {
    if layout.tagged_size != 8 {
        return Err("pointer compression is not walked yet");
    }
    if (layout.heap_object_tag, layout.heap_object_tag_mask) != (1, 3) {
        return Err("heap objects are not tagged 01");
    }
    Ok(())
}

/// Reads `function`'s SharedFunctionInfo again, and in the same read those of the functions
/// seen within [`CHECK_TOGETHER`] whose check is due too: a busy process's samples carry the
/// same functions batch after batch, and one read per function was most of the reader's
/// reads of its memory. Returns `function`'s (`None`: not readable, forgotten).
fn recheck(
    mem: &ProcessMemory,
    layout: &Layout,
    checked: &mut HashMap<u64, Checked>,
    function: u64,
    now: Instant,
) -> Option<u64> {
    if checked.len() >= MAX_CACHED {
        checked.clear();
    }
    let mut due: Vec<u64> = checked
        .iter()
        .filter(|&(&f, c)| {
            f != function
                && now.duration_since(c.read) >= RECHECK
                && now.duration_since(c.used) < CHECK_TOGETHER
        })
        .map(|(&f, _)| f)
        .collect();
    due.insert(0, function);
    let field = u64::from(layout.fields.js_function_shared);
    let addrs: Vec<u64> = due.iter().map(|&f| layout.untag(f) + field).collect();
    let read = mem.read_words(&addrs);
    let mut mine = None;
    let mut unreadable_seen = false;
    for (i, (f, sfi)) in due.iter().zip(read).enumerate() {
        match sfi {
            Some(sfi) => {
                let used = if i == 0 {
                    now
                } else {
                    checked.get(f).map_or(now, |c| c.used)
                };
                checked.insert(
                    *f,
                    Checked {
                        sfi,
                        read: now,
                        used,
                    },
                );
                if i == 0 {
                    mine = Some(sfi);
                }
            }
            // The first word not read is unreadable: its function is forgotten. The ones
            // after it in its call are unknown, left for their own checks.
            None if !unreadable_seen => {
                unreadable_seen = true;
                checked.remove(f);
            }
            None => {}
        }
    }
    mine
}

/// The kernel's entry for a V8 of this layout.
fn entry(l: &Layout) -> V8Proc {
    V8Proc {
        enabled: 1,
        slot_marker: l.frame.context_or_marker,
        slot_function: l.frame.function,
        slot_bytecode_array: l.frame.bytecode_array,
        slot_bytecode_offset: l.frame.bytecode_offset,
        heap_object_map: l.fields.heap_object_map,
        map_instance_type: l.fields.map_instance_type,
        js_function_first: l.types.js_function,
        js_function_last: l.types.js_function_last,
        bytecode_array_type: l.types.bytecode_array,
        smi_shift: l.smi_shift,
        ..V8Proc::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::runtimes::v8::{heap::tests::FakeHeap, testdata::layout_11_3};

    /// A frame at `fp` (stack slots in `stack`), objects in `heap`: a JSFunction (type 2066)
    /// at 0x10_0001, a BytecodeArray (191) at 0x20_0001, a Code-typed object (245) at
    /// 0x30_0001.
    fn world() -> (V8Proc, FakeHeap) {
        let e = entry(&layout_11_3());
        let heap = FakeHeap::default();
        for (obj, map, ty) in [
            (0x10_0000, 0x1000, 2066u16),
            (0x20_0000, 0x2000, 191),
            (0x30_0000, 0x3000, 245),
        ] {
            let tagged_map = heap.map(map, ty);
            heap.put_u64(obj, tagged_map);
        }
        (e, heap)
    }

    fn stack(slots: &[(i64, u64)], fp: u64) -> HashMap<u64, u64> {
        slots
            .iter()
            .map(|&(off, v)| (fp.wrapping_add_signed(off), v))
            .collect()
    }

    #[test]
    fn frames_are_told_by_their_slots() {
        let (e, heap) = world();
        let fp = 0x7ff0_0000u64;
        let words = |slots: &[(i64, u64)], top| {
            let s = stack(slots, fp);
            js_words(&e, |a| s.get(&a).copied(), &heap, fp, 0x5000, top)
        };
        // Interpreted: a context, the function, a BytecodeArray, a Smi offset (59 << 32).
        assert_eq!(
            words(
                &[
                    (-8, 0x40_0001),
                    (-16, 0x10_0001),
                    (-32, 0x20_0001),
                    (-40, 59 << 32)
                ],
                false
            ),
            Some([v8_frame(0x10_0001), v8_bytecode_offset(59)])
        );
        // Sparkplug: the BytecodeArray, then a heap object (its feedback vector): the PC.
        assert_eq!(
            words(
                &[
                    (-8, 0x40_0001),
                    (-16, 0x10_0001),
                    (-32, 0x20_0001),
                    (-40, 0x30_0001)
                ],
                true
            ),
            Some([v8_frame(0x10_0001), 0x5000 | V8_PC_TOP])
        );
        // Optimized: spill slots where the BytecodeArray would be (not one): the PC.
        assert_eq!(
            words(
                &[
                    (-8, 0x40_0001),
                    (-16, 0x10_0001),
                    (-32, 0x30_0001),
                    (-40, 0)
                ],
                false
            ),
            Some([v8_frame(0x10_0001), 0x5000])
        );
        // A typed frame (a stub's marker, 17 << 1): native.
        assert_eq!(words(&[(-8, 17 << 1), (-16, 0x10_0001)], false), None);
        // A context but no JSFunction in the function slot: native.
        assert_eq!(words(&[(-8, 0x40_0001), (-16, 0x30_0001)], false), None);
        assert_eq!(words(&[(-8, 0x40_0001), (-16, 0x1234)], false), None);
        // Slots the copy does not hold: native.
        assert_eq!(words(&[], false), None);
        // An unaligned or null frame pointer: native.
        let s = stack(&[(-8, 0x40_0001), (-16, 0x10_0001)], fp + 4);
        assert_eq!(
            js_words(&e, |a| s.get(&a).copied(), &heap, fp + 4, 0, false),
            None
        );
        assert_eq!(js_words(&e, |_| Some(1), &heap, 0, 0, false), None);
    }

    #[test]
    fn a_pc_is_in_a_module_mapping_or_not() {
        let r = [(0x1000, 0x2000), (0x5000, 0x6000)];
        assert!(in_ranges(&r, 0x1000) && in_ranges(&r, 0x1fff) && in_ranges(&r, 0x5800));
        assert!(!in_ranges(&r, 0xfff) && !in_ranges(&r, 0x2000) && !in_ranges(&r, 0x7000));
        assert!(!in_ranges(&[], 0x1000));
    }

    #[test]
    fn the_kernel_entry_is_the_layout() {
        let l = layout_11_3();
        let e = entry(&l);
        assert_eq!((e.enabled, e.slot_marker, e.slot_function), (1, -8, -16));
        assert_eq!((e.slot_bytecode_array, e.slot_bytecode_offset), (-32, -40));
        assert_eq!((e.js_function_first, e.bytecode_array_type), (2066, 191));
        assert_eq!(e.smi_shift, 32);
        assert!(walkable(&l).is_ok());
        let compressed = Layout {
            tagged_size: 4,
            ..l
        };
        assert!(walkable(&compressed).is_err());
    }
}
