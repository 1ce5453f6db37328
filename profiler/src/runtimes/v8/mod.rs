//! V8 (Node.js), user-space half: find V8 in a process, read its layout from the file, and
//! name JavaScript frames from the process's heap. [`walker`] does it for the profiler (as a
//! [`runtime`], what the profiler goes through): the
//! kernel walk (`profiler-ebpf/src/v8.rs`) writes (JSFunction, offset or PC) pairs, named
//! here soon after the sample (`tests/tests/js_frames.rs`); `tests/tests/v8_layout.rs` does
//! the same walk in user space on a live Node 20 (ptrace), the reference it was built to.
//!
//! Node 18.4 (V8 10.2, PyPI's `nodejs-bin`) is read too: its differences are in
//! [`layout`] (the Code's instructions inline, its tagged fields and the deoptimization
//! slots derived, no Maglev). Findings on Node 20.20.2 (Debian, static `/usr/bin/node`, V8
//! 11.3.244.8):
//! - **Metadata**: 531 `v8dbg_*` symbols in `.symtab` and `.dynsym` (so they survive
//!   stripping `.symtab`); each is the address of an `int` in `.data`, or in `.bss` when it
//!   is 0 (`HeapObject::map` offset, `SmiTag`, `SeqStringTag`, `TwoByteStringTag`, ...): a
//!   `.bss` symbol reads as 0, never as "missing". [`layout`] uses about 70 of them. The
//!   version is `v8::internal::Version::{major_,minor_,build_,patch_}` in `.data`.
//! - **No pointer compression**: `TaggedSize` 8, `SmiShiftSize` 31: tagged words are full
//!   pointers with tag `01` (`HeapObjectTagMask` 3); a Smi is `value << 32`.
//! - **Lost from the metadata in 11.x, derived** (and checked live by the test: the
//!   JSFunction's Code has kind TURBOFAN and its instruction range holds the PC):
//!   `JSFunction::code` = shared + 24 (48); Code: deoptimization data 16, source positions 24,
//!   instruction start 40 (a pointer since 11.1.204), flags 48 (kind = flags & 15), size 56
//!   (kinds: INTERPRETED_FUNCTION 10, BASELINE 11, then MAGLEV 12, TURBOFAN 13);
//!   `BytecodeArray::source_position_table` 32; JSFunction instance types 2066..=2080.
//!
//! What the kernel half reads per frame, in this order (frame pointers are kept in all JS,
//! stub and builtin frames; native C++ frames of node are walked as today):
//! 1. `fp - 8` (`off_fp_context_or_frame_type`): low bit clear → a typed frame whose type
//!    is `value >> 1` (entry 1, exit 3, stub 17, builtin-exit 25, ... from `frametype_*`:
//!    a marker, not a Smi); low bit set → a JS frame (the slot holds its context).
//! 2. JS frame: `fp - 16` the JSFunction (check its map's instance type is in the JSFunction
//!    range before trusting it); `fp - 32` a BytecodeArray for interpreted and Sparkplug
//!    frames; `fp - 40` the bytecode offset as a Smi **only in interpreted frames** (biased:
//!    offset + BytecodeArray header 54 - tag 1); Sparkplug keeps its feedback vector there
//!    (a heap object), Maglev/TurboFan frames have spill slots at both.
//! 3. Record (JSFunction, raw offset slot) for interpreted frames and (JSFunction, PC) for
//!    the others; `fp + 0` / `fp + 8` are the caller's frame pointer and return address.
//!
//! Telling frames apart: **not by PC range**. With short builtin calls V8 copies the
//! embedded builtins (the interpreter's bytecode handlers included) out of the node file
//! into its anonymous code range, so interpreted frames' PCs are in anonymous memory too;
//! an interpreted frame's JSFunction holds the InterpreterEntryTrampoline (kind BUILTIN).
//! Use the slots above. OTel's "every anonymous executable mapping is V8 code" is not
//! needed: a frame is JS when its marker slot says so and its function slot checks out.
//!
//! Naming ([`naming::Namer`]): JSFunction → SharedFunctionInfo → name (a string, or the
//! first string after the context locals of its ScopeInfo: heuristic, as 11.x's ScopeInfo
//! layout is not in the metadata; every compiled function the test names, `inner` to
//! Node's `executeUserEntryPoint`, has a ScopeInfo there, not a string) and Script → name
//! (the path as node was given it, or a `node:` URL for built-in modules). Lines (1-based,
//! from the script's `line_ends` or counted from its source):
//! - interpreted frames: **exact** (bytecode offset → the BytecodeArray's source position
//!   table → the last statement at or before it; the table's code offset deltas start at
//!   -1, the function entry's own entry, checked against `node --print-bytecode`);
//! - Maglev/TurboFan frames whose PC is in the code the JSFunction holds, or in code
//!   compiled for on-stack replacement that its FeedbackVector holds (V8 10.4+,
//!   [`code::code_at_pc`]): **exact** (the Code's own source position table by PC offset; a
//!   return address is looked up 1 byte back); a PC inside an inlined callee (inlining
//!   id ≠ 0) gives the callee and each caller's position from the Code's deoptimization data
//!   ([`code::positions_of_pc`], [`Namer::frames`]); not in deoptimized code;
//! - Sparkplug frames and the cases above: the function's first statement
//!   ([`LineKind::FunctionStart`]);
//! - no line ([`LineKind::None`]) when V8 has not built the function's source positions
//!   (built lazily, when a stack trace, an optimization or a profiler first needs them) or
//!   the source is an external string (Node's built-in modules);
//! - a stopped PC in code other than the frame's function's (its callee before its frame
//!   is built or after it is gone, or a leaf TurboFan runs without one): that code's own
//!   frames under the caller, found in the code ranges frames were seen running
//!   ([`ranges::CodeRanges`]) or from the Code header before the PC
//!   ([`code::code_holding`]); when neither (a builtin called without a frame), the
//!   caller without a line.
//!
//! Ambiguous or open: the ScopeInfo name heuristic (more than 75 context locals keep their
//! names in one hash table slot: followed, tested on synthetic memory; an optional
//! ScopeInfo field holding a string before the name would be misread); Maglev's lines are
//! tested with `--maglev --max-opt=2` only (Node 20 runs without Maglev by default); a
//! JSFunction's code
//! changes under a sampled frame (tier-up, deoptimization), so the PC check above is what
//! keeps a line honest; strings are read while the process runs, so frames are named soon
//! after the sample, cached by (JSFunction, position) and checked against the function's
//! SharedFunctionInfo at each use (a moving GC reuses addresses).

pub mod baseline;
pub mod code;
pub mod detect;
pub mod heap;
pub mod layout;
pub mod naming;
pub mod positions;
pub mod ranges;
pub mod runtime;
#[cfg(test)]
pub(crate) mod testdata;
pub mod walker;

pub use detect::{Detection, detect, detect_in};
pub use layout::{Layout, Unsupported, V8Version};
pub use naming::{JsFrame, LineKind, Namer, Position};
pub use walker::V8Walker;
