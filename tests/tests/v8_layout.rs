//! V8's user-space half on the real runtime: Node 20 runs `fixtures/node/chain.js`; the test
//! stops its main thread (ptrace), walks the frame-pointer chain from its registers in user
//! space as the kernel half will, reads each JS frame's function slot and names it with
//! `profiler::runtimes::v8` (layout read from the node file, names and lines from the heap).
//! The chain inner > outer > main must come out exactly, with the script's path and lines,
//! interpreted (`--no-opt --no-sparkplug --no-maglev`) and with inner optimized by TurboFan.

use std::{
    ops::Range,
    path::PathBuf,
    process::{Child, Command},
    time::{Duration, Instant},
};

use nix::{
    sys::{
        ptrace,
        wait::{WaitPidFlag, waitpid},
    },
    unistd::Pid,
};
use profiler::runtimes::{
    shared::memory::{Memory, ProcessMemory},
    v8::{self, Detection, JsFrame, Layout, LineKind, Namer, Position, code::code_of},
};

const NODE: &str = "/usr/bin/node";
const SCRIPT: &str = include_str!("../fixtures/node/chain.js");

/// How a frame's code ran, told from its slots (not from its PC: with short builtin calls
/// V8 copies the interpreter's handlers out of the node file into its anonymous code range).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    /// A BytecodeArray below the function slot and a Smi bytecode offset below it.
    Interpreted,
    /// A BytecodeArray, and the feedback vector where the offset would be (Sparkplug).
    Baseline,
    /// Neither (Maglev, TurboFan: spill slots there).
    Optimized,
}

#[derive(Debug)]
struct Seen {
    frame: JsFrame,
    tier: Tier,
    /// The function's current Code: its kind, and whether it holds the frame's PC.
    code: Option<(u32, bool)>,
    /// Whether the frame's PC is in the node file's text (not asserted: see [`Tier`]).
    #[allow(dead_code)]
    in_node_text: bool,
}

/// The node process, killed on drop.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn script_path() -> PathBuf {
    std::fs::canonicalize(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/node/chain.js"
    ))
    .expect("fixture")
}

/// The 1-based line of the fixture holding `marker`.
fn line_of(marker: &str) -> u32 {
    SCRIPT
        .lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("{marker} not in chain.js")) as u32
        + 1
}

/// The lines of `function inner`'s body, from its first statement to its closing brace:
/// a stop is mostly in its loop, now and then at a call's first statement or its return (CI
/// once stopped one at `let x = 0`).
fn inner_body() -> Vec<u32> {
    let first = line_of("function inner(") + 1;
    let last = SCRIPT
        .lines()
        .enumerate()
        .skip(first as usize)
        .find(|(_, l)| *l == "}")
        .map(|(i, _)| i as u32 + 1)
        .expect("inner's closing brace");
    (first..=last).collect()
}

/// Most stops in inner are in its loop (the header's line or the body's): at least 4 of 5.
fn mostly_in_the_loop(chains: &[Vec<Seen>]) {
    let body = line_of("L_INNER");
    let in_loop = chains
        .iter()
        .filter(|c| c[0].frame.line.is_some_and(|l| l == body || l + 1 == body))
        .count();
    assert!(
        in_loop * 5 >= chains.len() * 4,
        "{in_loop} of {} stops in inner's loop",
        chains.len()
    );
}

fn start(flags: &[&str]) -> Option<Node> {
    if !std::path::Path::new(NODE).exists() {
        // `cargo xtask test` installs Debian's nodejs; under CI a missing one is a failure.
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no {NODE} under CI=true"
        );
        eprintln!("SKIP: no {NODE}");
        return None;
    }
    Some(Node(profiler_tests::spawn_ready(
        Command::new(NODE).args(flags).arg(script_path()).arg("120"),
    )))
}

/// The executable range of the node file in the process.
fn node_text(pid: u32) -> Range<u64> {
    let maps = profiler::modules::exec_mappings(pid).expect("maps");
    let m = maps
        .iter()
        .find(|m| &*m.name == NODE)
        .expect("node's text mapped");
    m.start..m.end
}

/// Stops the thread `tid`, walks its frame-pointer chain and names its JS frames
/// (innermost first); the thread runs on whatever happens.
fn stop_and_walk(tid: u32, layout: &Layout, text: &Range<u64>) -> Vec<Seen> {
    let pid = Pid::from_raw(tid as i32);
    ptrace::seize(pid, ptrace::Options::empty()).expect("PTRACE_SEIZE");
    ptrace::interrupt(pid).expect("PTRACE_INTERRUPT");
    waitpid(pid, Some(WaitPidFlag::__WALL)).expect("waitpid");
    let walked = ptrace::getregs(pid).map(|regs| walk(tid, layout, text, regs.rip, regs.rbp));
    ptrace::detach(pid, None).expect("PTRACE_DETACH");
    walked.expect("PTRACE_GETREGS")
}

/// The walk the kernel half will do: from each frame pointer, the context-or-marker slot
/// tells a JS frame (a tagged context) from a typed frame (a marker, low bit clear); a JS
/// frame's function slot holds the JSFunction; an interpreted frame's bytecode offset slot
/// holds a Smi.
fn walk(tid: u32, layout: &Layout, text: &Range<u64>, rip: u64, rbp: u64) -> Vec<Seen> {
    let mem = ProcessMemory::new(tid);
    let namer = Namer::new(&mem, layout);
    let slot = |fp: u64, off: i8| mem.read_u64(fp.wrapping_add_signed(i64::from(off)));
    let (mut fp, mut pc) = (rbp, rip);
    let mut out = Vec::new();
    for depth in 0..128 {
        if fp == 0 || fp % 8 != 0 {
            break;
        }
        let Ok(marker) = slot(fp, layout.frame.context_or_marker) else {
            break;
        };
        if layout.frame_marker(marker).is_none()
            && let Ok(function) = slot(fp, layout.frame.function)
            && namer.is_js_function(function)
        {
            let bytecode = slot(fp, layout.frame.bytecode_array).is_ok_and(|b| {
                namer
                    .heap()
                    .instance_type(b)
                    .is_ok_and(|t| t == layout.types.bytecode_array)
            });
            let offset = slot(fp, layout.frame.bytecode_offset).ok();
            let (tier, position) = match offset {
                Some(raw) if bytecode && layout.smi(raw).is_some() => {
                    (Tier::Interpreted, Position::RawBytecodeOffset(raw))
                }
                _ if bytecode => (Tier::Baseline, Position::Unknown),
                _ => (
                    Tier::Optimized,
                    Position::Pc {
                        pc,
                        top: depth == 0,
                    },
                ),
            };
            let code = code_of(namer.heap(), function)
                .ok()
                .map(|c| (c.kind, c.contains(pc)));
            if let Ok(frame) = namer.frame(function, position) {
                out.push(Seen {
                    frame,
                    tier,
                    code,
                    in_node_text: text.contains(&pc),
                });
            }
        }
        let (Ok(next), Ok(ret)) = (mem.read_u64(fp), mem.read_u64(fp + 8)) else {
            break;
        };
        if next <= fp {
            break;
        }
        (fp, pc) = (next, ret);
    }
    out
}

fn layout_of(pid: u32) -> Layout {
    match v8::detect(pid).expect("detecting V8") {
        Detection::Found { path, layout } => {
            assert_eq!(path, NODE);
            *layout
        }
        other => panic!("node not detected as V8: {other:?}"),
    }
}

/// Stops node until `accept` took `want` walked chains (at most 60 s: a busy machine only
/// makes it slower), then returns each chain from inner down (inner, outer, main, then the
/// module's top level and Node's loader).
fn find_chains(
    node: &Node,
    want: usize,
    accept: impl Fn(&[&Seen]) -> bool,
) -> (Vec<Vec<Seen>>, u32) {
    let pid = node.0.id();
    let layout = layout_of(pid);
    let text = node_text(pid);
    let mut chains = Vec::new();
    let mut stops = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while chains.len() < want {
        let (chain, n) = find_chain(pid, &layout, &text, deadline, &accept);
        stops += n;
        chains.push(chain);
    }
    (chains, stops)
}

fn find_chain(
    pid: u32,
    layout: &Layout,
    text: &Range<u64>,
    deadline: Instant,
    accept: impl Fn(&[&Seen]) -> bool,
) -> (Vec<Seen>, u32) {
    let mut stops = 0;
    let mut last = Vec::new();
    while Instant::now() < deadline {
        stops += 1;
        let seen = stop_and_walk(pid, layout, text);
        let names: Vec<&str> = seen.iter().map(|s| s.frame.function.as_str()).collect();
        if let Some(at) = names
            .windows(3)
            .position(|w| w == ["inner", "outer", "main"])
        {
            let chain: Vec<&Seen> = seen[at..at + 3].iter().collect();
            if accept(&chain) {
                let mut seen = seen;
                return (seen.drain(at..).collect(), stops);
            }
        }
        last = seen;
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no accepted inner > outer > main chain in {stops} stops; last walk: {last:#?}");
}

fn check_frame(seen: &Seen, function: &str, lines: &[u32], kind: LineKind, tier: Tier) {
    let script = script_path().to_string_lossy().into_owned();
    assert_eq!(seen.frame.function, function, "{seen:?}");
    assert_eq!(seen.frame.script, script, "{seen:?}");
    assert_eq!(seen.tier, tier, "{seen:?}");
    assert_eq!(seen.frame.line_kind, kind, "{seen:?}");
    let line = seen.frame.line.expect("a line");
    assert!(
        lines.contains(&line),
        "{function}: line {line}, want one of {lines:?}: {seen:?}"
    );
}

#[test]
fn interpreted_chain_named_exactly() {
    let Some(node) = start(&["--no-opt", "--no-sparkplug", "--no-maglev"]) else {
        return;
    };
    let (chains, stops) = find_chains(&node, 5, |_| true);
    eprintln!(
        "5 interpreted chains in {stops} stops; the first: {:#?}",
        chains[0]
    );
    mostly_in_the_loop(&chains);
    let inner = inner_body();
    for chain in &chains {
        check_frame(
            &chain[0],
            "inner",
            &inner,
            LineKind::Exact,
            Tier::Interpreted,
        );
        // Callers stand at their call.
        let outer = [line_of("L_OUTER")];
        check_frame(
            &chain[1],
            "outer",
            &outer,
            LineKind::Exact,
            Tier::Interpreted,
        );
        let main = [line_of("L_MAIN")];
        check_frame(&chain[2], "main", &main, LineKind::Exact, Tier::Interpreted);
        // The module's top level (Node's CommonJS wrapper function) at its call of main.
        let call = [line_of("L_TOP")];
        check_frame(
            &chain[3],
            "(anonymous)",
            &call,
            LineKind::Exact,
            Tier::Interpreted,
        );
        // Node's own loader below, its script named by a node: URL.
        assert!(
            chain[4..]
                .iter()
                .any(|s| s.frame.script == "node:internal/modules/cjs/loader"),
            "{chain:#?}"
        );
    }
}

#[test]
fn optimized_inner_named_under_interpreted_main() {
    // Inlined frames (inner inside an optimized outer) are the next slice's: named as the
    // outer function at its start line for now.
    let Some(node) = start(&["--no-turbo-inlining"]) else {
        return;
    };
    let layout = layout_of(node.0.id());
    let turbofan = layout.code_kinds.turbofan;
    // inner in the TurboFan code its JSFunction holds (not the on-stack-replaced loop).
    let (chains, stops) = find_chains(&node, 5, |c| {
        c[0].tier == Tier::Optimized && c[0].code == Some((turbofan, true))
    });
    eprintln!(
        "5 optimized chains in {stops} stops; the first: {:#?}",
        chains[0]
    );
    mostly_in_the_loop(&chains);
    let inner = inner_body();
    for chain in &chains {
        // The PC's line from TurboFan's own source position table.
        check_frame(&chain[0], "inner", &inner, LineKind::Exact, Tier::Optimized);
        // outer: interpreted at its call, Sparkplug or optimized.
        let outer = [line_of("L_OUTER")];
        match chain[1].tier {
            Tier::Interpreted => check_frame(
                &chain[1],
                "outer",
                &outer,
                LineKind::Exact,
                Tier::Interpreted,
            ),
            Tier::Baseline => {
                let start = [line_of("function outer") + 1];
                check_frame(
                    &chain[1],
                    "outer",
                    &start,
                    LineKind::FunctionStart,
                    Tier::Baseline,
                )
            }
            Tier::Optimized => assert_eq!(chain[1].frame.function, "outer"),
        }
        // main: called once, interpreted at its call, or later Sparkplug code (start line).
        let main = [line_of("L_MAIN")];
        if chain[2].tier == Tier::Baseline {
            let start = [line_of("function main") + 1];
            check_frame(
                &chain[2],
                "main",
                &start,
                LineKind::FunctionStart,
                Tier::Baseline,
            );
        } else {
            check_frame(&chain[2], "main", &main, LineKind::Exact, Tier::Interpreted);
        }
    }
}

/// Node 18.4 (PyPI's nodejs-bin 18.4.0a4, V8 10.2.154.4-node.8), which `cargo xtask
/// test` installs into target/tools-venv (skipped when it is not there). The exported
/// values were read from the file independently (`nm -S` for each `v8dbg_*` symbol's
/// address, then its bytes in the section `readelf -SW` places it in): instruction size
/// 40, flags 48, instruction start 128, `JSFunction::code` 48, frame types 12/13/14.
#[test]
fn node18_layout() {
    let Some(path) = profiler_tests::node18() else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "no Node 18 in target/tools-venv under CI=true"
        );
        eprintln!("SKIP: no Node 18 in target/tools-venv (cargo xtask test installs it)");
        return;
    };
    let file = std::fs::File::open(path).expect("open");
    let cache = object::read::ReadCache::new(&file);
    let obj = object::File::parse(&cache).expect("node is an ELF file");
    let l = Layout::from_elf(&obj, &cache).expect("Node 18's V8 is read");
    assert_eq!(
        (l.version.major, l.version.minor, l.version.build),
        (10, 2, 154)
    );
    assert!(!l.pointer_compression());
    assert_eq!(l.fields.js_function_code, 48);
    assert_eq!(l.fields.code_instruction_size, 40);
    assert_eq!(l.fields.code_deoptimization_data, 16);
    assert_eq!(l.fields.code_source_positions, 24);
    assert_eq!(
        l.fields.code_instructions,
        v8::layout::CodeStart::Inline(128)
    );
    assert_eq!(l.fields.code_flags, 48);
    assert_eq!(l.fields.bytecode_array_header, 56);
    assert_eq!(
        (
            l.frame_types.interpreted,
            l.frame_types.baseline,
            l.frame_types.turbofan
        ),
        (12, 13, 14)
    );
    assert_eq!(l.frame_types.maglev, u8::MAX);
    assert_eq!(
        l.deopt,
        Some(v8::layout::DeoptSlots {
            literal_array: 2,
            inlining_positions: 7
        })
    );
    assert!(l.derived.contains(&"Code::source_position_table"));
}

/// The bytecode sizes each node exports (`Bytecodes::kBytecodeSizes`, which the baseline
/// frames' lines rest on) agree with V8's own disassembler: `node --print-bytecode` lists a
/// function's bytecodes with their offsets and bytes (a Wide and an ExtraWide prefix among
/// them); walking those bytes with the sizes must land on every listed offset and end at the
/// function's length. On Debian's Node 20, the second Node 20 release and Node 18.
#[test]
fn bytecode_sizes_walk_as_v8_disassembles() {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let mut nodes = vec![PathBuf::from(NODE)];
    nodes.extend(profiler_tests::node20_release().map(|(_, p)| p));
    nodes.extend(profiler_tests::node18());
    assert!(!ci || nodes.len() == 3, "a Node missing under CI=true");
    // Operands past one byte and past two: Wide and ExtraWide prefixes.
    let source = "function f(a, b) { let s = 0; for (let i = 0; i < a; i++) { s += b[i] * 300000 \
                  + b[i] * 1000; } return s } f(3, [1, 2, 3]);";
    for node in nodes {
        let file = std::fs::File::open(&node).expect("open node");
        let cache = object::read::ReadCache::new(&file);
        let obj = object::File::parse(&cache).expect("node is an ELF file");
        let layout = Layout::from_elf(&obj, &cache).expect("V8 is read");
        let sizes = layout
            .bytecode_sizes
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no Bytecodes::kBytecodeSizes", node.display()));
        let out = Command::new(&node)
            .args([
                "--print-bytecode",
                "--print-bytecode-filter=f",
                "-e",
                source,
            ])
            .output()
            .expect("node --print-bytecode");
        let text = String::from_utf8_lossy(&out.stdout);
        // `   23 S> 0x3ad6d27acbd6 @    0 : 0c                LdaZero`
        let mut listed: Vec<usize> = Vec::new();
        let mut bytes = Vec::new();
        let mut prefixed = 0;
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" : ") else {
                continue;
            };
            let Some(offset) = left
                .rsplit_once('@')
                .and_then(|(_, o)| o.trim().parse().ok())
            else {
                continue;
            };
            let code: Vec<u8> = right
                .split_whitespace()
                .map_while(|w| u8::from_str_radix(w, 16).ok().filter(|_| w.len() == 2))
                .collect();
            assert_eq!(offset, bytes.len(), "{}: {line}", node.display());
            prefixed += usize::from(code[0] < 4);
            listed.push(offset);
            bytes.extend(code);
        }
        let length: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("Bytecode length: ")?.trim().parse().ok())
            .expect("the listing's length");
        assert_eq!(bytes.len(), length, "{}", node.display());
        assert!(
            prefixed >= 2,
            "{}: no Wide/ExtraWide in {text}",
            node.display()
        );
        let mut walked = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            walked.push(at);
            at += sizes.size_at(&bytes, at).expect("a known bytecode");
        }
        assert_eq!(walked, listed, "{}", node.display());
        assert_eq!(at, length);
        eprintln!(
            "{}: {} bytecodes ({prefixed} prefixed) walked as V8 lists them",
            node.display(),
            listed.len()
        );
    }
}
