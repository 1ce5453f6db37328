//! HotSpot (Java), user-space half: find libjvm in a process, read its VMStructs from the
//! live process into one typed [`Layout`], find the code blob of a PC, and name Java frames
//! from metaspace. [`walker`] does it for the profiler (as a [`runtime`], what the profiler
//! goes through): the entry the kernel's walk
//! (`profiler-ebpf/src/hotspot.rs`) reads, and the naming of the words it writes.
//! `tests/tests/hotspot_layout.rs` does the same walk in user space (`tests/tests/hotspot_walk`)
//! on live JDK 17.0.15 (Debian) and 25.0.3 (Temurin): the reference the kernel's matches.
//! Research: `HOTSPOT-RESEARCH.md` beside this module.
//!
//! Findings (x86_64):
//! - **Metadata**: libjvm's `.dynsym` exports the 4 table pointers and 20 entry-layout words
//!   ([`vmstructs`]); the words and every member offset are 0 in the file, so the tables are
//!   read from the process (any time after libjvm's constructors ran; a stride of 0 says
//!   "not yet"). [`Layout::from_tables`] takes ~60 entries; a missing one is one line naming
//!   it ([`Unsupported`]). Layout differences are told by field presence, not version:
//!   `_code_begin` pointer (≤ 22) or `_code_offset`, `CompiledMethod` fields (17) or
//!   `nmethod`'s, debug data inside the blob or in `_immutable_data` (23+), `int` or `int16_t`
//!   frame-complete offset (widths come from VMStructs' type strings). Two facts are not
//!   exported and are constants here ([`Layout::derived`]): the interpreter frame's Method*
//!   (fp-24) and bcp (fp-64) slots, pinned by the exported sender-sp (-1) and last-sp (-2)
//!   slots being checked; and (25) the line-table flag bit. One is by version: UNSIGNED5
//!   streams exclude byte 0 from 20.0.0+15.
//! - **Code lookup** ([`CodeCache`]): PC in `[_low_bound, _high_bound)` → the heap holding it
//!   → segment map hops (≤ [`MAX_SEGMAP_HOPS`]) → block header `_used` → blob; kind by name
//!   (`Interpreter`, `nmethod`, `native nmethod`, else a stub); 3 heaps, 128-byte segments
//!   on both JDKs.
//! - **Naming** ([`Namer`]): Method* → ConstMethod* (the cache key: a redefined class gets a
//!   new one) → ConstantPool → holder Klass name, name/signature/SourceFile symbols, line
//!   table after the bytecodes; class names dotted as JFR prints them (`java.util.TimSort`,
//!   `java.util.regex.Pattern$Curly`). nmethods are cached by (address, compile id): a
//!   different id at the address means freed and reused, refused rather than misnamed.
//!
//! What is exact, and what is not:
//! - interpreted frames: **exact** bci and line (`LineKind::Exact`);
//! - compiled frames below the top (return addresses): **exact**, from the PcDesc at that
//!   very PC (the call's), inlined methods expanded innermost first, each with its line;
//! - the top compiled frame: the first debug point after the PC (`LineKind::
//!   NextDebugPoint`, AsyncGetCallTrace's and JFR's `pc_desc_near(pc + 1)`); when that is the end
//!   sentinel, the last one at or before the PC (`LineKind::PreviousDebugPoint`: C1 lays a loop's
//!   header out after its back-edge poll, so most stops in a C1 loop need it), for the
//!   compiled method only (the PC may have left what was inlined there). Debug points
//!   are calls and safepoint polls, so a hot loop's samples all land on its back-edge poll's
//!   line, and a PC in inlined code between polls may be attributed to a neighbour scope;
//! - no PcDesc (a return address with none, or code with no polls, e.g. SerialGC's counted
//!   loops): the nmethod's method only, no line (`LineKind::None`).
//!
//! Measured with the test's stops of the JDK's library code (`Library.java`: regex, TimSort,
//! String.format; default flags): of the stops in Java code, 95–97 % walked to the call
//! stub in the first 400 stops from start (warm-up: interpreted and C1 code, compiles) and
//! 98–99.5 % in 1000 stops after 3 s (17: 938 of 943; 25: 907 of 928); the rest: the top
//! compiled frame in its prologue (truncated); a top PC in a `StubRoutines` stub (frame size
//! 0) whose rbp is no frame pointer (seen: fp 0x40; the walk must check fp against sp); an
//! interpreted frame still being built; and the frame below the top one returning outside
//! the code cache (not yet understood). Top frames after warm-up against JFR's
//! `jdk.ExecutionSample` (another run of 8 s, JDK 17, main thread): `TimSort.mergeHi` 33 % /
//! 36 %, `mergeLo` 23 / 25, `binarySort` 18 / 14, `Integer.compare` 12 / 10, `Arrays.sort`
//! 3 / 4 (JFR's run includes its warm-up; not yet an acceptance check).
//!
//! What the kernel walk reads per frame (bytes from the registers of the frame):
//! - PC outside the code cache bounds → native: the `.eh_frame` walker goes on. PC ==
//!   `StubRoutines::_call_stub_return_address` → native called Java there: hand back too.
//! - the blob: segment map (one byte per hop), `HeapBlock` `_used`, then from the blob its
//!   name pointer's first bytes (or 25's `_kind`), `_frame_size`, code start,
//!   `_frame_complete_offset`, and for nmethods `_compile_id`, `_comp_level`, the deopt
//!   handler and `_orig_pc_offset`.
//! - interpreted: Method* at fp-24; bcp in r13 for the top frame **unless it gives no bci in
//!   `[0, code_size)`** (the interpreter uses r13 as a temporary in its invoke and return
//!   paths: 14 % of library stops before this rule), then the bcp slot fp-64 (saved for the
//!   call); ConstMethod* (Method+8) to turn bcp into bci and as the cookie. Caller: pc
//!   `[fp+8]`, fp `[fp]`, sp `[fp-8]` (the sender sp: a c2i adapter may have extended the caller).
//! - compiled: record (nmethod, compile id, PC offset, top?); caller sp = sp + frame size,
//!   return address `[sp-8]`, rbp `[sp-16]`. A compiled frame returns only into the code cache
//!   (native code enters Java through the call stub): a top frame whose return address is
//!   outside it was stopped in its epilogue, frame popped, return address at `[sp]`. Top PC
//!   before `code + _frame_complete_offset`: the prologue (`hs_prologue`): at or before the
//!   verified entry (`_verified_entry_point`, 25's `_verified_entry_offset`) the return
//!   address is at `[sp]`; after it the stopped instruction says (stack bang or `push rbp`:
//!   `[sp]`; `sub rsp` after `push rbp`: rbp `[sp]`, return address `[sp+8]`; else built:
//!   by frame size); a build exporting no verified entry: truncated. A return address
//!   equal to the deopt handler: the real PC is at `[sp + _orig_pc_offset]`.
//! - stubs: step by their frame size when it is not 0, else by rbp, which must point into
//!   the stack above sp (a top PC in a stub may have rbp as a general register).
//!
//! A JVM whose heaps are not created yet (`CodeCache::_heaps` null) is read again later.

pub mod code;
pub mod copied;
pub mod detect;
pub mod layout;
pub mod naming;
pub mod runtime;
pub mod stream;
#[cfg(test)]
pub(crate) mod testdata;
pub mod version;
pub mod vmstructs;
pub mod walker;

pub use code::{Blob, BlobKind, CodeCache, MAX_SEGMAP_HOPS};
pub use detect::{Detection, NotWalked, detect, detect_in};
pub use layout::{Layout, Unsupported};
pub use naming::{JavaFrame, LineKind, MethodInfo, Namer, NamerCache, PcKind, Tier};
pub use version::JvmVersion;
