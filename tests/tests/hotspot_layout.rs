//! HotSpot's user-space half on the real runtime: `java` (Debian's 17, and Temurin 25 when
//! installed) runs `fixtures/java/Chain.java`, compiled here with `javac`; the test stops its
//! main thread (ptrace), walks its frames in user space as the kernel half will (frame
//! pointer for interpreted frames, the blob's frame size for compiled ones, the segment map
//! to find each PC's blob) and names them with `profiler::runtimes::hotspot` (layout read
//! from the live VMStructs, names and lines from metaspace). The chain leaf > middle > top >
//! main must come out exactly, with file and lines: all interpreted (`-Xint`), with middle and
//! leaf inlined into C2-compiled top, with C1 only (middle inlined into top, leaf on its own),
//! and with an interpreted middle between compiled frames;
//! and stops in the JDK's own library code (`Library.java`) must nearly all walk to main.

use std::{
    path::Path,
    process::{Child, Command},
    time::{Duration, Instant},
};

use profiler::runtimes::{
    hotspot::{self, BlobKind, CodeCache, Detection, JavaFrame, Layout, LineKind, Namer, Tier},
    shared::memory::ProcessMemory,
};

mod hotspot_walk;

use profiler_tests::java::{classes, jdks, main_thread};

use hotspot_walk::{End, Tally, Walk, stop_and_walk};

const SOURCE: &str = include_str!("../fixtures/java/Chain.java");
const LIBRARY: &str = include_str!("../fixtures/java/Library.java");
const CLASS: &str = "fixture.Chain";

/// The JVM, killed on drop.
struct Jvm {
    child: Child,
    major: u32,
}

impl Drop for Jvm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The 1-based line of the fixture holding `marker`.
fn line_of(marker: &str) -> u32 {
    line_in(SOURCE, marker)
}

fn line_in(source: &str, marker: &str) -> u32 {
    source
        .lines()
        .position(|l| l.ends_with(&format!("// {marker}")))
        .unwrap_or_else(|| panic!("{marker} not in Chain.java")) as u32
        + 1
}

fn start(major: u32, home: &str, flags: &[&str]) -> Jvm {
    start_class(major, home, CLASS, flags)
}

fn start_class(major: u32, home: &str, class: &str, flags: &[&str]) -> Jvm {
    let child = profiler_tests::spawn_ready(
        Command::new(Path::new(home).join("bin/java"))
            .arg("-XX:+UseG1GC")
            .args(flags)
            .arg("-cp")
            .arg(classes())
            .args([class, "120"]),
    );
    Jvm { child, major }
}

fn layout_of(jvm: &Jvm) -> Layout {
    match hotspot::detect(jvm.child.id()).expect("detecting HotSpot") {
        Detection::Found {
            path,
            version,
            layout,
        } => {
            assert!(path.ends_with("/lib/server/libjvm.so"), "{path}");
            assert_eq!(version.major, jvm.major, "{version}");
            assert!(
                version.release.starts_with(&format!("{}.", jvm.major)),
                "{version:?}"
            );
            *layout
        }
        other => panic!("java not detected as HotSpot: {other:?}"),
    }
}

/// Stops java's main thread until `accept` took `want` walks whose first four frames are
/// leaf, middle, top, main and which reached the call stub (at most 90 s: a busy machine only
/// makes it slower); returns them and what every stop saw.
fn find_chains(
    jvm: &Jvm,
    want: usize,
    accept: impl Fn(&[JavaFrame]) -> bool,
) -> (Vec<Walk>, Tally) {
    let pid = jvm.child.id();
    let tid = main_thread(pid);
    let layout = layout_of(jvm);
    let mem = ProcessMemory::new(pid);
    let cache = CodeCache::read(&mem, &layout)
        .expect("reading the code cache")
        .expect("heaps created before main runs");
    let mut namer = Namer::new(&mem, &layout);
    let mut tally = Tally::default();
    let mut chains = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = None;
    while chains.len() < want {
        assert!(
            Instant::now() < deadline,
            "{} of {want} accepted chains in {} stops ({tally:?}); last walk: {last:#?}",
            chains.len(),
            tally.stops
        );
        let walk = stop_and_walk(tid, &mem, &layout, &cache, &mut namer);
        tally.stops += 1;
        match &walk.end {
            End::CallStub => tally.complete += 1,
            End::Native if walk.frames.is_empty() => tally.native_top += 1,
            End::Native => tally.broken(format!("native after {:?}", walk.names())),
            End::Prologue => tally.prologue += 1,
            End::Broken(why) => tally.broken(why.clone()),
        }
        if walk.end == End::CallStub
            && walk.names().starts_with(&["leaf", "middle", "top", "main"])
            && accept(&walk.frames)
        {
            chains.push(walk);
        } else {
            last = Some(walk);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    (chains, tally)
}

/// Checks one frame: method (class dotted as JFR prints it), file, tier, inlining, line.
fn check(f: &JavaFrame, method: &str, tier: Tier, inlined: bool, lines: &[u32], kind: LineKind) {
    assert_eq!(f.method, format!("{CLASS}.{method}"), "{f:?}");
    assert_eq!(f.file.as_deref(), Some("Chain.java"), "{f:?}");
    assert_eq!(
        f.signature,
        if method == "main" {
            "([Ljava/lang/String;)V"
        } else {
            "(J)J"
        },
        "{f:?}"
    );
    assert_eq!((f.tier, f.inlined), (tier, inlined), "{f:?}");
    if kind == LineKind::NextDebugPoint {
        // A top compiled frame: the debug point after the PC, or the one before it when
        // none follows (C1 lays its loop header out after the back-edge poll).
        let near = [LineKind::NextDebugPoint, LineKind::PreviousDebugPoint];
        assert!(near.contains(&f.line_kind), "{f:?}");
    } else {
        assert_eq!(f.line_kind, kind, "{f:?}");
    }
    let line = f.line.expect("a line");
    assert!(
        lines.contains(&line),
        "{method}: line {line}, want one of {lines:?}: {f:?}"
    );
}

/// Any line of leaf's body: a stop lands anywhere in it (nearly always the loop).
fn leaf_lines() -> Vec<u32> {
    (line_of("L_LEAF_FIRST")..=line_of("L_LEAF_LAST")).collect()
}

/// Runs `body` on each installed JDK.
fn on_each_jdk(flags: &[&str], body: impl Fn(&Jvm)) {
    for (major, home) in jdks() {
        let jvm = start(major, home, flags);
        body(&jvm);
    }
}

#[test]
fn live_layout_and_code_cache() {
    on_each_jdk(&[], |jvm| {
        let l = layout_of(jvm);
        // The research's table (HOTSPOT-RESEARCH.md), read live.
        let want = match jvm.major {
            17 => (96, 28, 112, 304, 48, 16),
            25 => (8, 44, 80, 212, 56, 8),
            _ => unreachable!(),
        };
        assert_eq!(
            (
                l.blob.name,
                l.blob.frame_size.offset,
                l.nmethod.method,
                l.nmethod.compile_id.offset,
                l.method.cm_size,
                l.code_cache.heap_block_size
            ),
            want,
            "{l:#?}"
        );
        assert_eq!((l.interpreter.method, l.interpreter.bcp), (-24, -64));
        assert_eq!(l.unsigned5_x, u8::from(jvm.major >= 20));
        let mem = ProcessMemory::new(jvm.child.id());
        let cache = CodeCache::read(&mem, &l).expect("read").expect("heaps");
        // Tiered compilation: non-nmethods, profiled, non-profiled; 128-byte segments.
        assert_eq!(cache.heaps.len(), 3, "{cache:#?}");
        for h in &cache.heaps {
            assert_eq!(h.log2_segment_size, 7);
            assert!(cache.bounds.start <= h.memory.start && h.memory.end <= cache.bounds.end);
        }
        assert!(cache.contains(cache.call_stub_return));
        // The interpreter's code is one blob named "Interpreter" in the code cache.
        let mid = (cache.interpreter.start + cache.interpreter.end) / 2;
        let blob = cache.blob_at(&mem, &l, mid).expect("read").expect("a blob");
        assert_eq!(
            (blob.name.as_str(), blob.kind),
            ("Interpreter", BlobKind::Interpreter)
        );
        assert!(blob.contains(cache.interpreter.start) && blob.contains(cache.interpreter.end - 1));
        let stub = cache
            .blob_at(&mem, &l, cache.call_stub_return)
            .expect("read")
            .expect("the call stub's blob");
        assert!(stub.name.starts_with("StubRoutines"), "{stub:?}");
        assert_eq!(stub.kind, BlobKind::Stub);
    });
}

/// What one frame of the fixture's chain must be: `tier` `None` takes either compiler's.
struct Want {
    method: &'static str,
    tier: Option<Tier>,
    inlined: bool,
    lines: Vec<u32>,
    kind: LineKind,
}

fn want(method: &'static str, tier: Tier, inlined: bool, kind: LineKind) -> Want {
    let lines = match method {
        "leaf" => leaf_lines(),
        "middle" => vec![line_of("L_MIDDLE")],
        "top" => vec![line_of("L_TOP")],
        _ => vec![line_of("L_MAIN")],
    };
    Want {
        method,
        tier: Some(tier),
        inlined,
        lines,
        kind,
    }
}

/// On each JDK run with `flags`: the first chains `accept` takes are leaf, middle, top, main
/// as `wants` says, frame by frame; `leaf_line`: at least one names leaf's line (most stops
/// are in its loop, whose back-edge poll gives the line).
fn chains_are(
    flags: &[&str],
    accept: impl Fn(&[JavaFrame]) -> bool,
    wants: [Want; 4],
    leaf_line: bool,
) {
    on_each_jdk(flags, |jvm| {
        let (chains, tally) = find_chains(jvm, 5, &accept);
        eprintln!(
            "JDK {}: {tally:?}; the first: {:#?}",
            jvm.major, chains[0].frames
        );
        for c in &chains {
            let f = &c.frames;
            assert_eq!(f.len(), 4, "{f:#?}");
            for (frame, w) in f.iter().zip(&wants) {
                let tier = w.tier.unwrap_or(frame.tier);
                check(frame, w.method, tier, w.inlined, &w.lines, w.kind);
            }
        }
        if leaf_line {
            assert!(
                chains.iter().any(|c| c.frames[0].line.is_some()),
                "{chains:#?}"
            );
        }
    });
}

#[test]
fn interpreted_chain_named_exactly() {
    let exact = |m| want(m, Tier::Interpreted, false, LineKind::Exact);
    chains_are(
        &["-Xint"],
        |_| true,
        [exact("leaf"), exact("middle"), exact("top"), exact("main")],
        false,
    );
}

#[test]
fn inlined_into_c2_under_interpreted_main() {
    let flags = [
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=exclude,fixture.Chain::main",
    ];
    let near = LineKind::NextDebugPoint;
    // top compiled by C2 with middle and leaf inlined (C1 code comes first: wait).
    chains_are(
        &flags,
        |f| f[2].tier == Tier::C2 && f[0].inlined && f[1].inlined,
        [
            want("leaf", Tier::C2, true, near),
            want("middle", Tier::C2, true, near),
            want("top", Tier::C2, false, near),
            want("main", Tier::Interpreted, false, LineKind::Exact),
        ],
        false,
    );
}

#[test]
fn interpreted_middle_between_compiled_frames() {
    let flags = [
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=exclude,fixture.Chain::main",
        "-XX:CompileCommand=exclude,fixture.Chain::middle",
        "-XX:CompileCommand=dontinline,fixture.Chain::middle",
    ];
    // leaf compiled by C2 on its own, called by interpreted middle (an i2c transition),
    // called by compiled top (c2i: the sender-sp slot) under interpreted main; top is C1 or
    // C2, at its call of middle (the PcDesc of the return address).
    let exact = LineKind::Exact;
    chains_are(
        &flags,
        |f| f[0].tier == Tier::C2 && f[2].tier != Tier::Interpreted,
        [
            want("leaf", Tier::C2, false, LineKind::NextDebugPoint),
            want("middle", Tier::Interpreted, false, exact),
            Want {
                tier: None,
                ..want("top", Tier::C2, false, exact)
            },
            want("main", Tier::Interpreted, false, exact),
        ],
        true,
    );
}

#[test]
fn library_code_walks_to_main() {
    on_each_jdk_class("fixture.Library", |jvm| {
        let pid = jvm.child.id();
        let tid = main_thread(pid);
        let layout = layout_of(jvm);
        let mem = ProcessMemory::new(pid);
        let cache = CodeCache::read(&mem, &layout)
            .expect("read")
            .expect("heaps");
        let mut namer = Namer::new(&mem, &layout);
        let mut tally = Tally::default();
        let mut methods = std::collections::BTreeMap::<String, u32>::new();
        let mut tiers = std::collections::BTreeMap::<String, u32>::new();
        // To the loop's closing brace: javac gives the back branch (a debug point) its line.
        let loop_lines = line_in(LIBRARY, "L_LOOP_FIRST")..=line_in(LIBRARY, "L_LOOP_LAST");
        let main_lines = line_in(LIBRARY, "L_MAIN_FIRST")..=line_in(LIBRARY, "L_MAIN_LAST");
        // String.format is ~1 % of the loop on 17 and less on 25: a CI run on 17 stopped in
        // it 0 times in 400. So stop at least 400 times (in Java code or not: the JIT's
        // warm-up counts), and go on until each family below has been seen, up to 4000.
        let wanted = [
            "java.util.TimSort.",
            "java.util.regex.",
            "java.util.Formatter.",
        ];
        let missing = |methods: &std::collections::BTreeMap<String, u32>| {
            wanted
                .iter()
                .filter(|w| !methods.keys().any(|m| m.starts_with(**w)))
                .count()
        };
        while tally.stops < 400 || (missing(&methods) > 0 && tally.stops < 4000) {
            let walk = stop_and_walk(tid, &mem, &layout, &cache, &mut namer);
            tally.stops += 1;
            match &walk.end {
                End::CallStub => {
                    tally.complete += 1;
                    tally.epilogue += u32::from(walk.epilogue);
                    let last = walk.frames.last().expect("frames");
                    if last.method == "fixture.Library.main" {
                        match last.line {
                            Some(line) if last.line_kind == LineKind::PreviousDebugPoint => {
                                // Stopped past its last debug point: a line of main.
                                assert!(main_lines.contains(&line), "{last:?}");
                                tally.method_only += 1;
                            }
                            Some(line) => assert!(loop_lines.contains(&line), "{last:?}"),
                            // Compiled main with no debug point around the PC: named only.
                            None => {
                                assert_eq!(last.line_kind, LineKind::None, "{last:?}");
                                assert_ne!(last.tier, Tier::Interpreted, "{last:?}");
                                tally.method_only += 1;
                            }
                        }
                    } else {
                        // Java called from the VM through the call stub (a class's static
                        // initialiser run on first use); the native frames go on below.
                        tally.nested.push(last.method.clone());
                    }
                    for f in &walk.frames {
                        *methods.entry(f.method.clone()).or_default() += 1;
                        let tier =
                            format!("{:?}{}", f.tier, if f.inlined { " inlined" } else { "" });
                        *tiers.entry(tier).or_default() += 1;
                    }
                }
                End::Native if walk.frames.is_empty() => tally.native_top += 1,
                End::Native => tally.broken(format!("native after {:?}", walk.names())),
                End::Prologue => tally.prologue += 1,
                End::Broken(why) => tally.broken(why.clone()),
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let java_top = tally.stops - tally.native_top;
        eprintln!("JDK {}: {tally:?}\ntiers {tiers:?}", jvm.major);
        let mut top: Vec<_> = methods.iter().collect();
        top.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
        eprintln!(
            "methods (in complete walks): {:?}",
            &top[..top.len().min(25)]
        );
        // Nearly every stop in Java code walks to main through the JDK's own code.
        assert!(
            tally.complete * 100 >= java_top * 90,
            "{} of {java_top} stops in Java code walked to main: {tally:?}",
            tally.complete
        );
        for want in wanted {
            assert!(
                methods.keys().any(|m| m.starts_with(want)),
                "no {want}* in {} stops: {methods:?}",
                tally.stops
            );
        }
    });
}

fn on_each_jdk_class(class: &str, body: impl Fn(&Jvm)) {
    for (major, home) in jdks() {
        let jvm = start_class(major, home, class, &[]);
        body(&jvm);
    }
}

#[test]
fn c1_chain_with_inlining() {
    let flags = [
        "-XX:TieredStopAtLevel=1",
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=exclude,fixture.Chain::main",
    ];
    // C1 only: leaf compiled on its own (C1 does not inline it: it is too big), middle
    // inlined into top; the C1 leaf returns into top's code, where the PcDesc of that
    // return address names middle (inlined) at its call and top at its own.
    let exact = LineKind::Exact;
    chains_are(
        &flags,
        |f| f[0].tier == Tier::C1 && f[2].tier == Tier::C1,
        [
            want("leaf", Tier::C1, false, LineKind::NextDebugPoint),
            want("middle", Tier::C1, true, exact),
            want("top", Tier::C1, false, exact),
            want("main", Tier::Interpreted, false, exact),
        ],
        true,
    );
}
