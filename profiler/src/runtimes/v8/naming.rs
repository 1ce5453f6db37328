//! Naming a JavaScript frame from its JSFunction (or SharedFunctionInfo) and where in the
//! function it was: function name, script name, line.

use std::{
    cell::RefCell,
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use super::{
    baseline::bytecode_offset,
    code::{
        CodeInfo, code_at_pc, code_holding, code_of, code_shared, position_of_pc, positions_of_pc,
    },
    heap::Heap,
    layout::Layout,
    positions::{SourcePosition, count_line_ends, decode_source_positions, line_of, position_at},
};
use crate::runtimes::shared::memory::{Memory, ReadError};

/// Where in its function a frame was, as the kernel half can read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    /// An interpreted frame's bytecode offset slot, raw (a Smi biased by the BytecodeArray
    /// header): exact.
    RawBytecodeOffset(u64),
    /// A bytecode offset already unbiased.
    BytecodeOffset(u32),
    /// A JIT frame's PC (`top`: the stopped instruction, else a return address): exact in
    /// Maglev/TurboFan code the function still runs, unless inlined code is there.
    Pc { pc: u64, top: bool },
    /// A script offset already found (from optimized code's table).
    ScriptOffset(u32),
    /// Nothing more.
    Unknown,
}

/// How a frame's line was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineKind {
    /// The statement being run (interpreted frames with the bytecode offset).
    Exact,
    /// The function's first statement (JIT frames; or the offset was not usable).
    FunctionStart,
    /// No line: V8 had not built the function's source positions (it builds them lazily,
    /// when a stack trace or a profiler first needs them), the script's source is not
    /// readable (an external string: Node's built-in modules), or the frame stopped in code
    /// outside its function (a builtin it called without a frame).
    None,
}

/// A named JavaScript frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsFrame {
    /// The function's name, `(anonymous)` when it has none.
    pub function: String,
    /// The script's name (a path or `node:` URL), empty when the script has none.
    pub script: String,
    /// 1-based line.
    pub line: Option<u32>,
    pub line_kind: LineKind,
    /// Runs inlined into the frame before it (else its own frame).
    pub inlined: bool,
}

/// Slots of a ScopeInfo scanned for the function name after the context locals.
const SCOPE_INFO_SCAN: u64 = 6;
/// More context locals than this and their names sit in one hash table slot (V8's
/// `kScopeInfoMaxInlinedLocalNamesSize`).
const MAX_INLINED_LOCAL_NAMES: u64 = 75;
/// `String::kMaxLength`-sized garbage is refused before it is read.
const MAX_LOCALS: i64 = 1 << 16;

/// How long what a SharedFunctionInfo's frames share (its name, its script's name, its
/// position table and the script's line ends) serves its other positions before it is read
/// again: a busy process's functions are sampled at new bytecode offsets and PCs for as long
/// as it runs, and naming each was some twenty reads of its memory. V8 builds position
/// tables lazily, so one found missing is looked for again after this.
const SHARED_FRESH: Duration = Duration::from_secs(1);

/// SharedFunctionInfos kept per process before the cache is cleared.
const MAX_SHARED: usize = 1 << 14;

/// What [`Namer`] read of one process's SharedFunctionInfos, by address (kept by its caller
/// between frames).
#[derive(Default)]
pub struct SharedCache {
    map: RefCell<HashMap<u64, (Instant, Arc<SharedInfo>)>>,
    /// Scripts' line ends by address, with the script's name they were read under: a
    /// script's source never changes, and one without V8's own line table was read whole
    /// to count them.
    scripts: RefCell<HashMap<u64, ScriptLines>>,
}

/// A script's name and its line ends.
type ScriptLines = (String, Arc<[u32]>);

/// Inserts into one of [`SharedCache`]'s maps, cleared first once it holds [`MAX_SHARED`].
fn insert_bounded<V>(map: &mut HashMap<u64, V>, key: u64, value: V) {
    if map.len() >= MAX_SHARED {
        map.clear();
    }
    map.insert(key, value);
}

/// A SharedFunctionInfo's names and what finds a line in it.
struct SharedInfo {
    function: String,
    script: String,
    /// Its source positions and its script's line ends, when both could be read.
    lines: Option<(Vec<SourcePosition>, Arc<[u32]>)>,
}

/// Names frames of one process.
pub struct Namer<'a, M: Memory + ?Sized> {
    heap: Heap<'a, M>,
    shared: Option<&'a SharedCache>,
}

/// What holds a stopped PC that is not in the code its frame's function runs
/// ([`Namer::code_at_pc`]), outermost frame first.
pub enum AtPc {
    /// Another function, called without a frame of its own yet: its frames go under the
    /// caller's.
    Callee(Vec<JsFrame>),
    /// Other code of the same function: its frames replace the caller's.
    Own(Vec<JsFrame>),
}

impl<'a, M: Memory + ?Sized> Namer<'a, M> {
    pub fn new(mem: &'a M, layout: &'a Layout) -> Self {
        Namer {
            heap: Heap::new(mem, layout),
            shared: None,
        }
    }

    /// A namer that reads each SharedFunctionInfo's names once per [`SHARED_FRESH`],
    /// through `shared`.
    pub fn with_cache(mem: &'a M, layout: &'a Layout, shared: &'a SharedCache) -> Self {
        Namer {
            heap: Heap::new(mem, layout),
            shared: Some(shared),
        }
    }

    pub fn heap(&self) -> &Heap<'a, M> {
        &self.heap
    }

    fn layout(&self) -> &Layout {
        self.heap.layout
    }

    /// Whether `tagged` is a JSFunction (or one of its constructor subtypes).
    pub fn is_js_function(&self, tagged: u64) -> bool {
        let t = &self.layout().types;
        self.heap
            .instance_type(tagged)
            .is_ok_and(|ty| (t.js_function..=t.js_function_last).contains(&ty))
    }

    /// The frame of the JSFunction `function` at `position`.
    pub fn frame(&self, function: u64, position: Position) -> Result<JsFrame, ReadError> {
        let (sfi, code) = self.function_code(function, position)?;
        self.frame_in(sfi, code.as_ref(), position)
    }

    /// `function`'s SharedFunctionInfo and, for a PC, the Code holding it (looked up once:
    /// on-stack-replaced code is found by scanning the function's FeedbackVector).
    fn function_code(
        &self,
        function: u64,
        position: Position,
    ) -> Result<(u64, Option<CodeInfo>), ReadError> {
        if !self.is_js_function(function) {
            return Err(ReadError::invalid(
                "JSFunction",
                function,
                "not a JSFunction",
            ));
        }
        let sfi = self
            .heap
            .field(function, self.layout().fields.js_function_shared)?;
        let code = match position {
            Position::Pc { pc, top } => code_at_pc(&self.heap, function, pc, top),
            _ => None,
        };
        Ok((sfi, code))
    }

    /// The frame of the function `sfi` at `position`, in `code` when it holds a PC.
    fn frame_in(
        &self,
        sfi: u64,
        code: Option<&CodeInfo>,
        position: Position,
    ) -> Result<JsFrame, ReadError> {
        if let Position::Pc { pc, top } = position
            && let Some(code) = code
        {
            if let Some(at) = position_of_pc(&self.heap, code, pc, top) {
                return self.frame_of_shared(sfi, Position::ScriptOffset(at));
            }
            if let Some(offset) = self.baseline_offset(sfi, code, pc, top) {
                return self.frame_of_shared(sfi, offset);
            }
        }
        self.frame_of_shared(sfi, position)
    }

    /// Where `pc` is in baseline (Sparkplug) `code` of the function `sfi`: the bytecode it
    /// runs, or `Unknown` in its prologue; `None` when `code` is not baseline code holding
    /// `pc`, or its tables cannot be read.
    fn baseline_offset(&self, sfi: u64, code: &CodeInfo, pc: u64, top: bool) -> Option<Position> {
        let l = self.layout();
        let sizes = l.bytecode_sizes.as_ref()?;
        // A return address is looked up as it is (V8 counts a bytecode's code as the range
        // (start, end]); the stopped instruction one byte on.
        let inside = if top { pc } else { pc.checked_sub(1)? };
        if code.kind != l.code_kinds.baseline || !code.contains(inside) {
            return None;
        }
        // Baseline code keeps its bytecode offset table where optimized code keeps its
        // source positions.
        let table = self
            .heap
            .field(code.code, l.fields.code_source_positions)
            .ok()?;
        if self.heap.instance_type(table).ok()? != l.types.byte_array {
            return None;
        }
        let table = self.heap.byte_array(table).ok()?;
        let bytecodes = self.heap.bytecodes(self.bytecode_array(sfi)?).ok()?;
        match bytecode_offset(&table, &bytecodes, sizes, pc - code.start + u64::from(top))? {
            -1 => Some(Position::Unknown),
            o => Some(Position::BytecodeOffset(u32::try_from(o).ok()?)),
        }
    }

    /// The frames of the JSFunction `function` at `position`, outermost first: with a PC in
    /// optimized code, the functions inlined there follow the one that runs them. With a PC,
    /// the Code that holds it (none when neither the function nor its FeedbackVector does).
    pub fn frames(
        &self,
        function: u64,
        position: Position,
    ) -> Result<(Vec<JsFrame>, Option<CodeInfo>), ReadError> {
        let (sfi, code) = self.function_code(function, position)?;
        Ok((self.frames_in(sfi, code.as_ref(), position)?, code))
    }

    /// The frames of the optimized code holding the stopped `pc`, found from the code
    /// `caller`'s frame runs (whose frame the frame pointer still holds: the code at `pc`
    /// has not built its own, or has taken it down), outermost first. `None` when no
    /// optimized Code is found to hold `pc` (the PC is in a builtin, or in baseline code).
    pub fn code_at_pc(&self, caller: u64, pc: u64) -> Option<AtPc> {
        let l = self.layout();
        let known = code_of(&self.heap, caller).ok()?;
        let code = code_holding(&self.heap, &known, pc)?;
        if code.kind != l.code_kinds.turbofan && code.kind != l.code_kinds.maglev {
            return None;
        }
        let sfi = code_shared(&self.heap, &code)?;
        let frames = self
            .frames_in(sfi, Some(&code), Position::Pc { pc, top: true })
            .ok()?;
        // Other code of the caller's own function (compiled again, or deoptimized, under
        // its frame): the caller itself, not a callee.
        let own = self.heap.field(caller, l.fields.js_function_shared).ok() == Some(sfi);
        Some(if own {
            AtPc::Own(frames)
        } else {
            AtPc::Callee(frames)
        })
    }

    /// The frames of the function `sfi` at `position`, in `code` when it holds a PC.
    fn frames_in(
        &self,
        sfi: u64,
        code: Option<&CodeInfo>,
        position: Position,
    ) -> Result<Vec<JsFrame>, ReadError> {
        if let Position::Pc { pc, top } = position
            && let Some(code) = code
            && let Some(chain) = positions_of_pc(&self.heap, code, pc, top)
            && chain.len() > 1
        {
            return chain
                .iter()
                .rev()
                .enumerate()
                .map(|(i, &(inlined, at))| {
                    let mut f =
                        self.frame_of_shared(inlined.unwrap_or(sfi), Position::ScriptOffset(at))?;
                    f.inlined = i > 0;
                    Ok(f)
                })
                .collect();
        }
        Ok(vec![self.frame_in(sfi, code, position)?])
    }

    /// The frame of the SharedFunctionInfo `sfi` at `position`.
    pub fn frame_of_shared(&self, sfi: u64, position: Position) -> Result<JsFrame, ReadError> {
        let info = self.shared_info(sfi)?;
        let (line, line_kind) = match &info.lines {
            Some((entries, ends)) => self.line_in(entries, ends, position),
            None => (None, LineKind::None),
        };
        Ok(JsFrame {
            function: info.function.clone(),
            script: info.script.clone(),
            line,
            line_kind,
            inlined: false,
        })
    }

    /// `sfi`'s names and lines: from the cache while fresh, else read.
    fn shared_info(&self, sfi: u64) -> Result<Arc<SharedInfo>, ReadError> {
        if let Some(cache) = self.shared
            && let Some((at, info)) = cache.map.borrow().get(&sfi)
            && at.elapsed() < SHARED_FRESH
        {
            return Ok(info.clone());
        }
        let info = Arc::new(self.read_shared(sfi)?);
        if let Some(cache) = self.shared {
            insert_bounded(
                &mut cache.map.borrow_mut(),
                sfi,
                (Instant::now(), info.clone()),
            );
        }
        Ok(info)
    }

    fn read_shared(&self, sfi: u64) -> Result<SharedInfo, ReadError> {
        let l = self.layout();
        self.heap
            .expect(sfi, l.types.shared_function_info, "SharedFunctionInfo")?;
        let function = self.function_name(sfi)?;
        let script = self.heap.field(sfi, l.fields.sfi_script_or_debug_info)?;
        let script = self.heap.expect(script, l.types.script, "Script").ok();
        let script_name = match script {
            Some(s) => {
                let name = self.heap.field(s, l.fields.script_name)?;
                if self.heap.is_string(name) {
                    self.heap.string(name)?
                } else {
                    String::new()
                }
            }
            None => String::new(),
        };
        let lines = script.and_then(|s| {
            let positions = self.source_positions(sfi)?;
            Some((positions, self.script_line_ends(s, &script_name)?))
        });
        Ok(SharedInfo {
            function,
            script: script_name,
            lines,
        })
    }

    /// The function's name: a string in `name_or_scope_info`, or the name slot of its
    /// ScopeInfo (after the header and the context locals' names and infos).
    fn function_name(&self, sfi: u64) -> Result<String, ReadError> {
        let l = self.layout();
        let nos = self.heap.field(sfi, l.fields.sfi_name_or_scope_info)?;
        let name = if !l.is_heap_object(nos) {
            String::new()
        } else if self.heap.is_string(nos) {
            self.heap.string(nos)?
        } else if self.heap.instance_type(nos)? == l.types.scope_info {
            self.scope_info_name(nos)?
        } else {
            String::new()
        };
        Ok(if name.is_empty() {
            "(anonymous)".to_string()
        } else {
            name
        })
    }

    /// ScopeInfo (11.x): map, flags, parameter count, context local count N, N names (or
    /// one hash table), N infos, then optional slots of which the function variable's name
    /// comes first when present. The first string there is the name; none is anonymous.
    fn scope_info_name(&self, scope_info: u64) -> Result<String, ReadError> {
        let word = u64::from(self.layout().tagged_size);
        let base = u16::try_from(word).expect("8");
        let locals = self.heap.smi_field(scope_info, base * 3)?;
        if !(0..MAX_LOCALS).contains(&locals) {
            return Err(ReadError::invalid(
                "ScopeInfo",
                scope_info,
                format!("{locals} locals"),
            ));
        }
        let locals = locals as u64;
        let names = if locals > MAX_INLINED_LOCAL_NAMES {
            1
        } else {
            locals
        };
        let first = 1 + 3 + names + locals;
        for slot in first..first + SCOPE_INFO_SCAN {
            let w = self
                .heap
                .mem
                .read_u64(self.layout().untag(scope_info) + slot * word)?;
            if self.layout().is_heap_object(w) && self.heap.is_string(w) {
                return self.heap.string(w);
            }
        }
        Ok(String::new())
    }

    /// The BytecodeArray of a function: its data, or inside InterpreterData or baseline
    /// Code.
    fn bytecode_array(&self, sfi: u64) -> Option<u64> {
        let l = self.layout();
        let data = self.heap.field(sfi, l.fields.sfi_function_data).ok()?;
        let ty = self.heap.instance_type(data).ok()?;
        let inner = if ty == l.types.bytecode_array {
            return Some(data);
        } else if ty == l.types.interpreter_data {
            // InterpreterData: map, bytecode_array, interpreter_trampoline.
            self.heap.field(data, u16::from(l.tagged_size)).ok()?
        } else if ty == l.types.code {
            // Sparkplug code: bytecode_or_interpreter_data.
            self.heap
                .field(data, l.fields.code_deoptimization_data)
                .ok()?
        } else {
            return None;
        };
        let ty = self.heap.instance_type(inner).ok()?;
        if ty == l.types.bytecode_array {
            Some(inner)
        } else if ty == l.types.interpreter_data {
            self.heap.field(inner, u16::from(l.tagged_size)).ok()
        } else {
            None
        }
    }

    /// The line ends of `script`, named `name`: kept by the cache for a named script.
    fn script_line_ends(&self, script: u64, name: &str) -> Option<Arc<[u32]>> {
        let cache = self.shared.filter(|_| !name.is_empty());
        if let Some(cache) = cache
            && let Some((known, ends)) = cache.scripts.borrow().get(&script)
            && known == name
        {
            return Some(ends.clone());
        }
        let ends: Arc<[u32]> = self.line_ends(script)?.into();
        if let Some(cache) = cache {
            let entry = (name.to_string(), ends.clone());
            insert_bounded(&mut cache.scripts.borrow_mut(), script, entry);
        }
        Some(ends)
    }

    /// The function's source positions (its BytecodeArray's table), when V8 has built them.
    fn source_positions(&self, sfi: u64) -> Option<Vec<SourcePosition>> {
        let l = self.layout();
        let bytecode = self.bytecode_array(sfi)?;
        let table = self
            .heap
            .field(bytecode, l.fields.bytecode_array_source_positions)
            .ok()?;
        match self.heap.instance_type(table) {
            Ok(ty) if ty == l.types.byte_array => {
                let bytes = self.heap.byte_array(table).ok()?;
                Some(decode_source_positions(&bytes))
            }
            _ => None,
        }
    }

    /// The line of `position` in a function with these source positions, in a script with
    /// these line ends.
    fn line_in(
        &self,
        entries: &[SourcePosition],
        ends: &[u32],
        position: Position,
    ) -> (Option<u32>, LineKind) {
        let l = self.layout();
        let offset = match position {
            Position::RawBytecodeOffset(raw) => l
                .smi(raw)
                .and_then(|v| {
                    v.checked_sub(
                        i64::from(l.fields.bytecode_array_header) - l.heap_object_tag as i64,
                    )
                })
                .and_then(|v| u32::try_from(v).ok()),
            Position::BytecodeOffset(o) => Some(o),
            Position::Pc { .. } | Position::Unknown | Position::ScriptOffset(_) => None,
        };
        let exact = match position {
            Position::ScriptOffset(at) => Some(at),
            _ => offset.and_then(|o| position_at(entries, o)),
        };
        let (pos, kind) = match exact {
            Some(p) => (p, LineKind::Exact),
            None => match entries.iter().find(|e| e.statement) {
                Some(e) => (e.script_offset, LineKind::FunctionStart),
                None => return (None, LineKind::None),
            },
        };
        (Some(line_of(ends, pos)), kind)
    }

    /// The script's line ends: V8's own table when it built one, else counted from the
    /// source.
    fn line_ends(&self, script: u64) -> Option<Vec<u32>> {
        let l = self.layout();
        let ends = self.heap.field(script, l.fields.script_line_ends).ok()?;
        if self
            .heap
            .instance_type(ends)
            .is_ok_and(|t| t == l.types.fixed_array)
            && let Ok(words) = self.heap.fixed_array(ends)
        {
            return words
                .iter()
                .map(|&w| l.smi(w).and_then(|v| u32::try_from(v).ok()))
                .collect();
        }
        let source = self.heap.field(script, l.fields.script_source).ok()?;
        let text = self.heap.string(source).ok()?;
        Some(count_line_ends(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::v8::{heap::tests::FakeHeap, testdata::layout_11_3};

    fn smi(v: i64) -> u64 {
        (v << 32) as u64
    }

    /// A one-byte sequential string at `addr`.
    fn string(h: &FakeHeap, addr: u64, text: &str) -> u64 {
        let map = h.map(addr + 0x800, 8);
        let t = h.string_header(addr, map, text.len() as i32);
        h.put(addr + 16, text.as_bytes());
        t
    }

    /// JSFunction > SharedFunctionInfo > ScopeInfo (with `locals` context locals) and
    /// Script, BytecodeArray with a source position table, as Node 20 lays them out.
    fn function(h: &FakeHeap, locals: u64) -> u64 {
        let l = layout_11_3();
        let (f, sfi, scope, script, ends, bytecode, table) = (
            0x10000, 0x11000, 0x12000, 0x20000, 0x14000, 0x15000, 0x16000,
        );
        h.put_u64(f, h.map(f + 0x800, l.types.js_function + 3));
        h.put_u64(f + 24, sfi + 1);
        h.put_u64(sfi, h.map(sfi + 0x800, l.types.shared_function_info));
        h.put_u64(sfi + 16, scope + 1);
        h.put_u64(sfi + 8, bytecode + 1);
        h.put_u64(sfi + 32, script + 1);
        h.put_u64(scope, h.map(scope + 0x800, l.types.scope_info));
        h.put_u64(scope + 8, smi(0));
        h.put_u64(scope + 16, smi(1));
        h.put_u64(scope + 24, smi(locals as i64));
        let names = if locals > 75 { 1 } else { locals };
        // Local names are strings too: the name is the first string *after* them.
        for i in 0..names {
            h.put_u64(scope + 32 + 8 * i, string(h, 0x30000 + 0x1000 * i, "local"));
        }
        for i in 0..locals {
            h.put_u64(scope + 32 + 8 * (names + i), smi(0));
        }
        let after = scope + 32 + 8 * (names + locals);
        h.put_u64(after, smi(7));
        h.put_u64(after + 8, string(h, 0x17000, "inner"));
        h.put_u64(script, h.map(script + 0x800, l.types.script));
        h.put_u64(script + 16, string(h, 0x18000, "/srv/app.js"));
        h.put_u64(script + 56, ends + 1);
        h.put_u64(ends, h.map(ends + 0x800, l.types.fixed_array));
        h.put_u64(ends + 8, smi(3));
        for (i, e) in [10i64, 25, 60].iter().enumerate() {
            h.put_u64(ends + 16 + 8 * i as u64, smi(*e));
        }
        h.put_u64(bytecode, h.map(bytecode + 0x800, l.types.bytecode_array));
        h.put_u64(bytecode + 32, table + 1);
        // (function entry), statement at 0 -> offset 12 (line 2), at 6 -> offset 30 (line 3).
        let bytes = [0x01u8, 0x00, 0x02, 0x34, 0x0c, 0x48];
        h.put_u64(table, h.map(table + 0x800, l.types.byte_array));
        h.put_u64(table + 8, smi(bytes.len() as i64));
        h.put(table + 16, &bytes);
        f + 1
    }

    #[test]
    fn names_a_function_from_its_heap() {
        let l = layout_11_3();
        for locals in [0, 2, 80] {
            let h = FakeHeap::default();
            let f = function(&h, locals);
            let namer = Namer::new(&h, &l);
            let at = |p| namer.frame(f, p).unwrap();
            let want = |line, line_kind| JsFrame {
                function: "inner".into(),
                script: "/srv/app.js".into(),
                line: Some(line),
                line_kind,
                inlined: false,
            };
            assert_eq!(
                at(Position::BytecodeOffset(3)),
                want(2, LineKind::Exact),
                "{locals}"
            );
            assert_eq!(at(Position::BytecodeOffset(9)), want(3, LineKind::Exact));
            // The frame slot's Smi is biased by the header (54) minus the tag.
            assert_eq!(
                at(Position::RawBytecodeOffset(smi(6 + 53))),
                want(3, LineKind::Exact)
            );
            assert_eq!(at(Position::Unknown), want(2, LineKind::FunctionStart));
            // Not a JSFunction: refused.
            assert!(namer.frame(0x11001, Position::Unknown).is_err());
        }
    }

    #[test]
    fn a_function_read_once_names_its_other_positions_until_stale() {
        let l = layout_11_3();
        let h = FakeHeap::default();
        let f = function(&h, 2);
        let cache = SharedCache::default();
        let namer = Namer::with_cache(&h, &l, &cache);
        let first = namer.frame(f, Position::BytecodeOffset(3)).unwrap();
        assert_eq!((first.function.as_str(), first.line), ("inner", Some(2)));
        // The script's name changes in memory: the cached function still gives the lines of
        // its other positions from what was read, without reading it again.
        string(&h, 0x18000, "/srv/new.js");
        let other = namer.frame(f, Position::BytecodeOffset(9)).unwrap();
        assert_eq!(
            (other.script.as_str(), other.line, other.line_kind),
            ("/srv/app.js", Some(3), LineKind::Exact)
        );
        // A namer without the cache reads it.
        let fresh = Namer::new(&h, &l)
            .frame(f, Position::BytecodeOffset(9))
            .unwrap();
        assert_eq!(fresh.script, "/srv/new.js");
        // Past its freshness, the cached entry is read again.
        for (at, _) in cache.map.borrow_mut().values_mut() {
            *at -= SHARED_FRESH;
        }
        let again = namer.frame(f, Position::BytecodeOffset(9)).unwrap();
        assert_eq!(again.script, "/srv/new.js");
    }
}
