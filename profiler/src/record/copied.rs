//! Walking a copied user stack in user space: the records of a process the kernel had no
//! unwind tables for yet carry its user registers and the top of its stack
//! (`record_flags::STACK_COPY`); once its tables are loaded, the stack is walked here with
//! the same rows and the same rules as the kernel's walk (`profiler-ebpf/src/unwind.rs`,
//! `step`), reading memory from the copy only. The record is then rewritten as if the kernel
//! had walked it, so everything after the reader sees ordinary records.

use crate::runtimes::seam::{CopiedStep, RegsAt};
use profiler_common::{
    MAX_STACK_DEPTH, record_flags,
    stack::{STACK_COPY_BLOCK, STACK_HEADER_SIZE, StackCopyHead, StackSampleHeader, stack_copy},
    unwind::{
        AARCH64_USER_ADDR_MASK, SIGNAL_FRAME_AARCH64, SIGNAL_FRAME_X86_64, SignalFrame,
        UnwindMapping, UnwindRow, cfa,
    },
};

/// Where the signal trampoline's stack pointer has the interrupted frame's registers, and
/// what a return address keeps (pointer authentication's bits cleared), on the architecture
/// the profiler runs on, whose processes it walks (as the kernel's walk does).
const SIGNAL: SignalFrame = if cfg!(target_arch = "aarch64") {
    SIGNAL_FRAME_AARCH64
} else {
    SIGNAL_FRAME_X86_64
};

fn strip_ra(ra: u64) -> u64 {
    if cfg!(target_arch = "aarch64") {
        ra & AARCH64_USER_ADDR_MASK
    } else {
        ra
    }
}

/// The copied bytes and the address they start at.
pub struct Copy<'a> {
    start: u64,
    bytes: &'a [u8],
}

impl<'a> Copy<'a> {
    pub fn new(head: &StackCopyHead, bytes: &'a [u8]) -> Self {
        Self {
            start: head.sp & !(STACK_COPY_BLOCK as u64 - 1),
            bytes,
        }
    }

    /// The word at `addr`, if the copy holds it (the only stack memory a copied walk reads).
    pub fn read(&self, addr: u64) -> Option<u64> {
        let at = usize::try_from(addr.checked_sub(self.start)?).ok()?;
        let word = self.bytes.get(at..at.checked_add(8)?)?;
        Some(u64::from_ne_bytes(word.try_into().ok()?))
    }
}

/// What finds a runtime's frame in a copy: (copy, frame pointer, pc, pc is the stopped
/// instruction) → its two words.
pub type JsFrames<'f> = dyn Fn(&Copy<'_>, u64, u64, bool) -> Option<[u64; 2]> + 'f;

/// What steps a frame in a JVM's code cache (as the kernel's HotSpot step): `None` outside
/// it.
pub type JavaFrames<'f> = dyn Fn(&Copy<'_>, RegsAt) -> Option<CopiedStep> + 'f;

struct Regs {
    pc: u64,
    sp: u64,
    bp: u64,
    /// The link register while it may hold this frame's return address (0 otherwise).
    lr: u64,
    exact: bool,
}

/// Walks a copied stack from its registers (addresses wrap as the kernel's u64 arithmetic
/// does: a garbage frame pointer ends the walk by failing to read, never by a panic) with a
/// process's mappings (sorted by start, as the kernel's entry has them) and
/// `row(start, len, pc)`, the row of a module's run (the row array's `[start, start + len)`)
/// whose range holds `pc` (the last row at or below it). Before a frame is left by frame pointer,
/// `js(copy, fp, pc, top)` may give the two words of a runtime's frame there (V8's JS frames,
/// as the kernel's walk writes them) in place of its pc; `jit`: the process runs a JIT whose
/// code may be in no mapping the tables list (V8 flips its code pages between writable and
/// executable), so a leaf in none is walked on by frame pointer; `java` steps a frame in a
/// JVM's code cache before its mapping is looked up, as the kernel's walk does. Returns the
/// frames, innermost first, and the walk's `record_flags`.
pub fn walk(
    mappings: &[UnwindMapping],
    mut row_at: impl FnMut(u32, u32, u32) -> Option<UnwindRow>,
    js: &JsFrames<'_>,
    java: &JavaFrames<'_>,
    jit: bool,
    head: &StackCopyHead,
    copy: &Copy<'_>,
) -> (Vec<u64>, u32) {
    let mut frames = Vec::new();
    let mut flags = record_flags::UNWIND_TABLES;
    let mut r = Regs {
        pc: head.ip,
        sp: head.sp,
        bp: head.bp,
        lr: strip_ra(head.lr),
        exact: true,
    };
    loop {
        if frames.len() >= MAX_STACK_DEPTH {
            flags |= record_flags::UNWIND_PARTIAL;
            break;
        }
        frames.push(r.pc);
        if r.pc == 0 {
            break;
        }
        let at = if r.exact { r.pc } else { r.pc.wrapping_sub(1) };
        let top = r.exact;
        r.exact = false;
        let here = RegsAt {
            pc: r.pc,
            sp: r.sp,
            bp: r.bp,
            top,
        };
        match java(copy, here) {
            None => {}
            Some(CopiedStep::Next { words, pc, sp, bp }) => {
                if let Some(words) = words {
                    if frames.len() >= MAX_STACK_DEPTH {
                        flags |= record_flags::UNWIND_PARTIAL;
                        break;
                    }
                    // Its two words in place of its native one.
                    frames.pop();
                    frames.extend(words);
                    flags |= record_flags::RUNTIME_FRAMES;
                }
                r = Regs {
                    pc,
                    sp,
                    bp,
                    lr: 0,
                    exact: false,
                };
                if r.pc == 0 {
                    break;
                }
                continue;
            }
            Some(CopiedStep::FramePointer) => {
                if !frame_pointer_step(&mut r, copy, &mut flags) {
                    break;
                }
                continue;
            }
            Some(CopiedStep::Stop) => {
                flags |= record_flags::UNWIND_PARTIAL;
                break;
            }
        }
        // A frame without a row is left by frame pointer, after `js` looked at it.
        let by_fp = |r: &mut Regs, frames: &mut Vec<u64>, flags: &mut u32| {
            if let Some([word, data]) = js(copy, r.bp, r.pc, top)
                && frames.len() < MAX_STACK_DEPTH
            {
                frames.pop();
                frames.extend([word, data]);
                *flags |= record_flags::RUNTIME_FRAMES;
            }
            frame_pointer_step(r, copy, flags)
        };
        let i = mappings.partition_point(|m| m.end <= at);
        let m = mappings.get(i).filter(|m| m.start <= at);
        let Some(m) = m else {
            if frames.len() == 1 && !jit {
                // The sampled address in none of the process's mappings: the copy is of an
                // image it has replaced since (an exec), not one to guess through.
                flags |= record_flags::UNWIND_PARTIAL;
                break;
            }
            flags |= record_flags::UNWIND_NO_MAPPING;
            if !by_fp(&mut r, &mut frames, &mut flags) {
                break;
            }
            continue;
        };
        let row = (m.rows_len != 0 && at >= m.bias && at - m.bias <= u64::from(u32::MAX))
            .then(|| row_at(m.rows_start, m.rows_len, (at - m.bias) as u32))
            .flatten();
        let Some(row) = row else {
            if !by_fp(&mut r, &mut frames, &mut flags) {
                break;
            }
            continue;
        };
        let cfa_addr = match row.cfa & cfa::KIND {
            cfa::RSP => r.sp.wrapping_add(u64::from(row.cfa_offset)),
            cfa::RBP => r.bp.wrapping_add(u64::from(row.cfa_offset)),
            cfa::PLT => {
                r.sp.wrapping_add(u64::from(row.cfa_offset))
                    .wrapping_add(if r.pc & 15 >= 11 { 8 } else { 0 })
            }
            cfa::END => break,
            cfa::SIGNAL => {
                let (Some(bp), Some(sp), Some(pc)) = (
                    copy.read(r.sp.wrapping_add(SIGNAL.bp)),
                    copy.read(r.sp.wrapping_add(SIGNAL.sp)),
                    copy.read(r.sp.wrapping_add(SIGNAL.pc)),
                ) else {
                    flags |= record_flags::UNWIND_PARTIAL;
                    break;
                };
                let lr = SIGNAL
                    .lr
                    .and_then(|at| copy.read(r.sp.wrapping_add(at)))
                    .map_or(0, strip_ra);
                r = Regs {
                    pc,
                    sp,
                    bp,
                    lr,
                    exact: true,
                };
                continue;
            }
            _ => {
                if !by_fp(&mut r, &mut frames, &mut flags) {
                    break;
                }
                continue;
            }
        };
        // Above this frame's stack, or at it for a frame returning through the link
        // register (as the kernel's walk checks).
        let ra_at = row.return_address_at(cfa_addr);
        if cfa_addr < r.sp || (cfa_addr == r.sp && ra_at.is_some()) {
            flags |= record_flags::UNWIND_PARTIAL;
            break;
        }
        let ra = match ra_at {
            Some(at) => copy.read(at),
            None => (r.lr != 0).then_some(r.lr),
        };
        let Some(ra) = ra else {
            flags |= record_flags::UNWIND_PARTIAL;
            break;
        };
        if let Some(at) = row.saved_bp_at(cfa_addr) {
            match copy.read(at) {
                Some(bp) => r.bp = bp,
                None => {
                    flags |= record_flags::UNWIND_PARTIAL;
                    break;
                }
            }
        }
        r.sp = cfa_addr;
        r.pc = strip_ra(ra);
        r.lr = 0;
        if r.pc == 0 {
            break;
        }
    }
    (frames, flags)
}

/// A frame without a row: its caller through the frame pointer, as the kernel's walk does.
/// False when the walk ends.
fn frame_pointer_step(r: &mut Regs, copy: &Copy<'_>, flags: &mut u32) -> bool {
    *flags |= record_flags::UNWIND_FP;
    if r.bp == 0 {
        return false;
    }
    if r.bp < r.sp {
        *flags |= record_flags::UNWIND_PARTIAL;
        return false;
    }
    let (Some(next_bp), Some(ra)) = (copy.read(r.bp), copy.read(r.bp.wrapping_add(8))) else {
        *flags |= record_flags::UNWIND_PARTIAL;
        return false;
    };
    r.sp = r.bp.wrapping_add(16);
    r.bp = next_bp;
    r.pc = strip_ra(ra);
    r.lr = 0;
    r.pc != 0
}

/// A record with a stack copy rewritten with `user` frames (innermost first) and `flags`
/// added in place of the copy: header, kernel frames, the user frames, then the group's
/// words the record had. `None` if the record carries no copy.
pub fn rewrite(record: &[u8], user: &[u64], flags: u32) -> Option<Vec<u8>> {
    let (mut header, frames) = StackSampleHeader::parse(record)?;
    let (_, _, copy_at) = stack_copy(&header, record)?;
    let kernel = usize::from(header.kernel_frames);
    let group_at = STACK_HEADER_SIZE + 8 * (kernel + usize::from(header.user_frames));
    let group = record.get(group_at..copy_at)?;
    header.user_frames = user.len().min(MAX_STACK_DEPTH) as u16;
    header.flags = (header.flags & !record_flags::STACK_COPY) | flags;
    let mut out = Vec::with_capacity(STACK_HEADER_SIZE + 8 * (kernel + user.len()) + group.len());
    // SAFETY: the header is repr(C) plain integers without padding (size asserted in
    // profiler_common::stack); its bytes are read as they are laid out.
    out.extend_from_slice(unsafe {
        std::slice::from_raw_parts(
            (&raw const header).cast::<u8>(),
            std::mem::size_of::<StackSampleHeader>(),
        )
    });
    out.extend_from_slice(frames.get(..8 * kernel)?);
    for &f in user.iter().take(MAX_STACK_DEPTH) {
        out.extend_from_slice(&f.to_ne_bytes());
    }
    out.extend_from_slice(group);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(start: u64, words: &[(u64, u64)], len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        for &(addr, value) in words {
            let at = (addr - start) as usize;
            bytes[at..at + 8].copy_from_slice(&value.to_ne_bytes());
        }
        bytes
    }

    fn row(pc: u32, cfa: u8, cfa_offset: u16, rbp: i8) -> UnwindRow {
        UnwindRow {
            pc,
            cfa,
            cfa_offset,
            rbp,
        }
    }

    /// Walks the copy `bytes` of `head`'s stack with one module at 0x1000..0x2000 (bias
    /// 0x1000) whose rows are `rows`, no runtime's frames.
    fn walk_rows(rows: &[UnwindRow], head: &StackCopyHead, bytes: &[u8]) -> (Vec<u64>, u32) {
        let maps = [UnwindMapping {
            start: 0x1000,
            end: 0x2000,
            bias: 0x1000,
            rows_start: 0,
            rows_len: rows.len() as u32,
        }];
        let copy = Copy::new(head, bytes);
        walk(
            &maps,
            |s, l, pc| {
                let rows = rows.get(s as usize..(s + l) as usize)?;
                let i = rows.partition_point(|row| row.pc <= pc);
                i.checked_sub(1).map(|i| rows[i])
            },
            &|_, _, _, _| None,
            &|_, _| None,
            false,
            head,
            &copy,
        )
    }

    #[test]
    fn walks_rsp_and_rbp_rules_to_the_end_row() {
        // One module at 0x1000..0x2000 (bias 0x1000): f at pc 0x000 (CFA rsp+16), g at
        // 0x100 (CFA rbp+16, rbp saved at CFA-16), _start at 0x200 (END).
        let rows = [
            row(0x000, cfa::RSP, 16, 0),
            row(0x100, cfa::RBP, 16, -2),
            row(0x200, cfa::END, 0, 0),
        ];
        let sp = 0x7000_0208;
        // f: CFA = sp + 16 = 0x218, return into g at 0x1150.
        // g: rbp = 0x7000_0240 -> CFA 0x250, return into _start at 0x1210; saved rbp 0.
        let start = sp & !511;
        let bytes = stack(
            start,
            &[
                (0x7000_0210, 0x1150),
                (0x7000_0248, 0x1210),
                (0x7000_0240, 0),
            ],
            1024,
        );
        let head = StackCopyHead {
            ip: 0x1010,
            sp,
            bp: 0x7000_0240,
            lr: 0,
            len: 1024,
        };
        let (frames, flags) = walk_rows(&rows, &head, &bytes);
        assert_eq!(frames, [0x1010, 0x1150, 0x1210]);
        assert_eq!(flags, record_flags::UNWIND_TABLES);
    }

    /// aarch64's rules: a leaf returning through the link register (CFA = sp), a frame
    /// record at the CFA's bottom, and one at the bottom of a 2 KiB frame (slots counted
    /// from sp), to the end row.
    #[test]
    fn walks_link_register_and_frame_records() {
        use profiler_common::unwind::ra;
        let rows = [
            row(0x000, cfa::RSP | ra::LR, 0, 0),
            row(0x100, cfa::RSP | ra::RECORD, 32, -4),
            row(0x200, cfa::RSP | ra::RECORD | ra::FROM_REGISTER, 2048, 0),
            row(0x300, cfa::END, 0, 0),
        ];
        let sp = 0x7000_0200;
        // f: returns through lr into g. g: CFA sp + 32, its record (x29, x30) at sp.
        // h: CFA = g's CFA + 2048, its record at g's CFA (the bottom of h's frame).
        let start = sp & !511;
        let bytes = stack(
            start,
            &[
                (sp, 0x7000_0220),
                (sp + 8, 0x1210),
                (sp + 32, 0),
                (sp + 40, 0x1310),
            ],
            4096,
        );
        let head = StackCopyHead {
            ip: 0x1010,
            sp,
            bp: sp,
            lr: 0x1150,
            len: 4096,
        };
        let (frames, flags) = walk_rows(&rows, &head, &bytes);
        assert_eq!(frames, [0x1010, 0x1150, 0x1210, 0x1310]);
        assert_eq!(flags, record_flags::UNWIND_TABLES);
        // The link register holds only the sampled frame's return address: a second frame
        // returning through it is a corrupt walk.
        let rows = [row(0x000, cfa::RSP | ra::LR, 0, 0)];
        let (frames, flags) = walk_rows(&rows, &head, &bytes);
        assert_eq!(frames, [0x1010, 0x1150]);
        assert_ne!(flags & record_flags::UNWIND_PARTIAL, 0);
    }

    #[test]
    fn a_read_outside_the_copy_stops_the_walk_as_partial() {
        let rows = [row(0, cfa::RSP, 4096, 0)];
        let head = StackCopyHead {
            ip: 0x1010,
            sp: 0x7000_0000,
            bp: 0,
            lr: 0,
            len: 512,
        };
        let bytes = vec![0u8; 512];
        let (frames, flags) = walk_rows(&rows, &head, &bytes);
        assert_eq!(frames, [0x1010]);
        assert_ne!(flags & record_flags::UNWIND_PARTIAL, 0);
    }

    #[test]
    fn rewrite_keeps_kernel_frames_and_group_words() {
        let header = StackSampleHeader {
            kernel_frames: 1,
            flags: record_flags::STACK_COPY | record_flags::GROUP_VALUES,
            ..Default::default()
        };
        // SAFETY: the header is plain integers, STACK_HEADER_SIZE bytes long.
        let mut rec = unsafe {
            std::slice::from_raw_parts((&raw const header).cast::<u8>(), STACK_HEADER_SIZE)
        }
        .to_vec();
        for w in [
            0xffff_ffff_8100_0000u64,
            1,
            42,
            0x1010,
            0x7000_0000,
            0,
            0,
            8,
            7,
        ] {
            rec.extend_from_slice(&w.to_ne_bytes());
        }
        let out = rewrite(&rec, &[0x1010, 0x1150], record_flags::UNWIND_TABLES).unwrap();
        let (h, frames) = StackSampleHeader::parse(&out).unwrap();
        assert_eq!((h.kernel_frames, h.user_frames), (1, 2));
        assert_eq!(
            h.flags,
            record_flags::GROUP_VALUES | record_flags::UNWIND_TABLES
        );
        assert_eq!(profiler_common::stack::frame_at(frames, 2), 0x1150);
        let values = profiler_common::stack::group_values(&h, &out).unwrap();
        assert_eq!(values, 42u64.to_ne_bytes());
    }
}
