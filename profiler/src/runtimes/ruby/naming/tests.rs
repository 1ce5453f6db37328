//! Frames named from synthetic iseqs, strings, classes and method entries laid out as a
//! 2.7, a 3.1 and a 3.4 VM lays them out.

use profiler_common::ruby::{FRAME_CFUNC, FRAME_ISEQ, ruby_frame};

use super::*;
use crate::runtimes::ruby::{
    classes::fake::class,
    layout::{Version, for_version},
    lines::fake::succ_table,
    objects::{T_CLASS, fake::Heap},
};

const ISEQ_TYPE_TOP: u32 = 0;
const ISEQ_TYPE_BLOCK: u32 = 2;

/// An iseq to lay out.
struct Spec<'a> {
    kind: u32,
    label: &'a str,
    base_label: &'a str,
    path: &'a str,
    /// `[path, realpath]` rather than a plain path string.
    path_pair: bool,
    first_lineno: i32,
    /// Instruction count, entry starts (positions) and each entry's line.
    size: u64,
    starts: &'a [u64],
    lines: &'a [i32],
    /// The method iseq a block belongs to (0: itself).
    local: u64,
}

impl Default for Spec<'_> {
    fn default() -> Self {
        Spec {
            kind: ISEQ_TYPE_TOP,
            label: "<main>",
            base_label: "<main>",
            path: "t.rb",
            path_pair: false,
            first_lineno: 1,
            size: 100,
            starts: &[0],
            lines: &[1],
            local: 0,
        }
    }
}

/// Lays out `s`: returns the iseq's address and its first instruction's.
fn iseq(h: &mut Heap, s: &Spec) -> (u64, u64) {
    let l = h.layout;
    let label = h.string(s.label);
    let base_label = h.string(s.base_label);
    let path = h.string(s.path);
    let pathobj = if s.path_pair {
        let real = h.string(&format!("/src/{}", s.path));
        h.array(&[path, real])
    } else {
        path
    };
    let encoded = h.put(&vec![0u8; s.size as usize * 8]);
    let entry = usize::from(l.insn_info_size);
    let mut entries = vec![0u8; entry * s.lines.len()];
    for (i, line) in s.lines.iter().enumerate() {
        entries[i * entry..i * entry + 4].copy_from_slice(&line.to_le_bytes());
    }
    let entries = h.put(&entries);
    let succ = h.put(&succ_table(s.size, s.starts));
    // imemo_iseq flags, wrapper, body (written once the body is).
    let flags = 0x1a | (7 << 12);
    let iseq = h.words(&[flags, 0, 0, 0]);
    // A method or top iseq is its own local iseq.
    let local = if s.local == 0 { iseq } else { s.local };
    let mut body = vec![0u8; usize::from(l.body_local_iseq) + 64];
    let mut set = |at: u16, v: u64| {
        let at = usize::from(at);
        body[at..at + 8].copy_from_slice(&v.to_le_bytes());
    };
    set(l.body_iseq_encoded, encoded);
    set(l.body_pathobj, pathobj);
    set(l.body_base_label, base_label);
    set(l.body_label, label);
    set(
        l.body_first_lineno,
        if l.first_lineno_value {
            ((s.first_lineno as u64) << 1) | 1
        } else {
            s.first_lineno as u32 as u64
        },
    );
    set(l.insns_body, entries);
    set(l.insns_positions, 0);
    set(l.insns_succ, succ);
    set(l.body_local_iseq, local);
    // After the words: the 4-byte fields (`type` and `iseq_size` share word 0).
    set(l.insns_size, s.lines.len() as u64);
    set(l.body_type, u64::from(s.kind) | (s.size << 32));
    let body = h.put(&body);
    let words: Vec<u8> = [flags, 0, body, 0]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    h.mem.put(iseq, &words);
    (iseq, encoded)
}

/// A method entry defined in `class` for the method named by `id`.
fn cme(h: &mut Heap, class: u64, id: u64) -> u64 {
    let def = h.words(&[0, 0, 0, 0, id, 0]);
    h.words(&[0x1a | (6 << 12), class, def, id, class])
}

fn name(n: &mut Names, h: &Heap, words: [u64; 3]) -> (String, Option<String>, Option<u32>) {
    let f = n.frame(&h.mem, &words).unwrap();
    (f.label.to_string(), f.file.map(|f| f.to_string()), f.line)
}

/// The pc of the instruction at position `pos` as a frame holds it (past it).
fn pc(encoded: u64, pos: u64) -> u64 {
    encoded + 8 * (pos + 1)
}

#[test]
fn a_3_4_process_names_methods_blocks_singletons_and_c_methods() {
    let layout = for_version(Version::new(3, 4, 7)).unwrap();
    let mut h = Heap::new(layout);
    let foo = class(&mut h, Some("Foo"), T_CLASS, 0, 0);
    let meta = class(&mut h, None, T_CLASS | layout.fl_singleton, foo, 0);
    let array = class(&mut h, Some("Array"), T_CLASS, 0, 0);
    let (first_serial, names) = (3000, ["bar", "baz", "each"]);
    let symbols = h.symbols(first_serial, &names);
    let id = |i: u64| ((first_serial + i) << 4) | 1;
    let (bar, bar_code) = iseq(
        &mut h,
        &Spec {
            kind: ISEQ_TYPE_METHOD,
            label: "bar",
            base_label: "bar",
            path: "lib/foo.rb",
            first_lineno: 10,
            size: 700,
            starts: &[0, 3, 60, 600],
            lines: &[10, 11, 12, 14],
            ..Spec::default()
        },
    );
    let (block, block_code) = iseq(
        &mut h,
        &Spec {
            kind: ISEQ_TYPE_BLOCK,
            label: "block in bar",
            base_label: "bar",
            path: "lib/foo.rb",
            first_lineno: 12,
            starts: &[0, 5],
            lines: &[12, 13],
            local: bar,
            ..Spec::default()
        },
    );
    let (baz, baz_code) = iseq(
        &mut h,
        &Spec {
            kind: ISEQ_TYPE_METHOD,
            label: "baz",
            base_label: "baz",
            path: "lib/foo.rb",
            starts: &[0],
            lines: &[20],
            ..Spec::default()
        },
    );
    let (main, main_code) = iseq(&mut h, &Spec::default());
    let bar_cme = cme(&mut h, foo, id(0));
    let baz_cme = cme(&mut h, meta, id(1));
    let each_cme = cme(&mut h, array, id(2));
    let mut n = Names::new(layout, Some(symbols));

    let frame = |kind, obj, cme, pc| ruby_frame(kind, obj, cme, pc);
    let file = Some("lib/foo.rb".to_string());
    assert_eq!(
        name(&mut n, &h, frame(FRAME_ISEQ, bar, bar_cme, pc(bar_code, 2))),
        ("Foo#bar".into(), file.clone(), Some(10))
    );
    for (pos, line) in [(3, 11), (59, 11), (60, 12), (599, 12), (600, 14), (699, 14)] {
        let words = frame(FRAME_ISEQ, bar, bar_cme, pc(bar_code, pos));
        assert_eq!(name(&mut n, &h, words).2, Some(line), "pos {pos}");
    }
    // At the iseq's start the pc is not stepped back.
    assert_eq!(
        name(&mut n, &h, frame(FRAME_ISEQ, bar, bar_cme, bar_code)).2,
        Some(10)
    );
    assert_eq!(
        name(
            &mut n,
            &h,
            frame(FRAME_ISEQ, block, bar_cme, pc(block_code, 7))
        ),
        ("block in Foo#bar".into(), file.clone(), Some(13))
    );
    assert_eq!(
        name(&mut n, &h, frame(FRAME_ISEQ, baz, baz_cme, pc(baz_code, 0))),
        ("Foo.baz".into(), file, Some(20))
    );
    assert_eq!(
        name(&mut n, &h, frame(FRAME_ISEQ, main, 0, pc(main_code, 0))),
        ("<main>".into(), Some("t.rb".into()), Some(1))
    );
    assert_eq!(
        name(&mut n, &h, frame(FRAME_CFUNC, each_cme, each_cme, 0)),
        ("Array#each".into(), None, None)
    );
}

/// 3.1 keeps class paths in an ivar whose ID is found through the symbol table: with it,
/// `Foo#bar`; without it (a build where it is not found), Ruby's plain labels and a
/// placeholder for C methods.
#[test]
fn a_3_1_process_qualifies_with_the_symbol_table_only() {
    let layout = for_version(Version::new(3, 1, 2)).unwrap();
    let mut h = Heap::new(layout);
    let symbols = h.symbols(40, &["each", "__classpath__"]);
    let foo = class(&mut h, Some("Foo"), T_CLASS, 0, (41 << 4) | 1);
    let (bar, bar_code) = iseq(
        &mut h,
        &Spec {
            kind: ISEQ_TYPE_METHOD,
            label: "bar",
            base_label: "bar",
            path: "foo.rb",
            path_pair: true,
            first_lineno: 7,
            size: 80,
            starts: &[0, 9, 54, 70],
            lines: &[7, 8, 9, 30],
            ..Spec::default()
        },
    );
    let (block, block_code) = iseq(
        &mut h,
        &Spec {
            kind: ISEQ_TYPE_BLOCK,
            label: "block (2 levels) in bar",
            base_label: "bar",
            path: "foo.rb",
            local: bar,
            ..Spec::default()
        },
    );
    let bar_cme = cme(&mut h, foo, (50 << 4) | 1);
    let each_cme = cme(&mut h, foo, (40 << 4) | 1);
    let mut n = Names::new(layout, Some(symbols));
    let file = Some("foo.rb".to_string());
    for (pos, line) in [(0, 7), (8, 7), (9, 8), (53, 8), (54, 9), (70, 30), (79, 30)] {
        let words = ruby_frame(FRAME_ISEQ, bar, bar_cme, pc(bar_code, pos));
        assert_eq!(
            name(&mut n, &h, words),
            ("Foo#bar".into(), file.clone(), Some(line)),
            "pos {pos}"
        );
    }
    let block = ruby_frame(FRAME_ISEQ, block, bar_cme, pc(block_code, 0));
    assert_eq!(name(&mut n, &h, block).0, "block (2 levels) in Foo#bar");
    let cfunc = ruby_frame(FRAME_CFUNC, each_cme, each_cme, 0);
    assert_eq!(name(&mut n, &h, cfunc).0, "Foo#each");

    let mut without = Names::new(layout, None);
    let words = ruby_frame(FRAME_ISEQ, bar, bar_cme, pc(bar_code, 0));
    assert_eq!(name(&mut without, &h, words).0, "bar");
    assert_eq!(name(&mut without, &h, block).0, "block (2 levels) in bar");
    assert_eq!(name(&mut without, &h, cfunc).0, UNKNOWN_C_METHOD);
}

#[test]
fn a_2_7_process_reads_8_byte_line_entries() {
    let layout = for_version(Version::new(2, 7, 8)).unwrap();
    let mut h = Heap::new(layout);
    let (top, code) = iseq(
        &mut h,
        &Spec {
            label: "<top (required)>",
            base_label: "<top (required)>",
            path: "/app/lib/a.rb",
            first_lineno: 1,
            size: 1200,
            starts: &[0, 1, 2, 100, 566, 567, 1100],
            lines: &[1, 2, 3, 4, 5, 6, 7],
            ..Spec::default()
        },
    );
    let mut n = Names::new(layout, None);
    for (pos, line) in [
        (0, 1),
        (1, 2),
        (99, 3),
        (100, 4),
        (566, 5),
        (600, 6),
        (1150, 7),
    ] {
        let words = ruby_frame(FRAME_ISEQ, top, 0, pc(code, pos));
        assert_eq!(
            name(&mut n, &h, words),
            (
                "<top (required)>".into(),
                Some("/app/lib/a.rb".into()),
                Some(line)
            ),
            "pos {pos}"
        );
    }
}

/// A pc outside the iseq now at the address (compaction moved it, another took its place)
/// is not named as that other iseq; a cached iseq is read again before saying so.
#[test]
fn a_pc_outside_the_iseq_is_stale() {
    let layout = for_version(Version::new(3, 3, 0)).unwrap();
    let mut h = Heap::new(layout);
    let (a, a_code) = iseq(&mut h, &Spec::default());
    let (b, b_code) = iseq(
        &mut h,
        &Spec {
            label: "other",
            base_label: "other",
            ..Spec::default()
        },
    );
    let mut n = Names::new(layout, None);
    assert_eq!(
        name(&mut n, &h, ruby_frame(FRAME_ISEQ, a, 0, pc(a_code, 1))).0,
        "<main>"
    );
    let err = n
        .frame(&h.mem, &ruby_frame(FRAME_ISEQ, a, 0, pc(b_code, 1)))
        .unwrap_err();
    assert!(matches!(err, NameError::Stale { .. }), "{err}");
    // Iseq `b` moves to `a`'s address: `a`'s cached reading no longer holds the pc, so it
    // is read again and the frame is `b`'s.
    let mut moved = [0u8; 32];
    h.mem.read(b, &mut moved).unwrap();
    h.mem.put(a, &moved);
    assert_eq!(
        name(&mut n, &h, ruby_frame(FRAME_ISEQ, a, 0, pc(b_code, 2))).0,
        "other"
    );
    assert!(matches!(n.frame(&h.mem, &[1, 2]), Err(NameError::Words)));
}

#[test]
fn full_labels_as_ruby_composes_them() {
    assert_eq!(&*full_label("bar", "bar", Some("Foo#bar")), "Foo#bar");
    assert_eq!(
        &*full_label("block in bar", "bar", Some("Foo#bar")),
        "block in Foo#bar"
    );
    assert_eq!(
        &*full_label("rescue in block in bar", "bar", Some("A::B.bar")),
        "rescue in block in A::B.bar"
    );
    assert_eq!(
        &*full_label("block in bar", "bar", Some("bar")),
        "block in bar"
    );
    assert_eq!(&*full_label("<main>", "<main>", None), "<main>");
    assert_eq!(
        &*full_label("<class:Foo>", "<class:Foo>", None),
        "<class:Foo>"
    );
}
