//! The table reader on synthetic tables of each layout, built as Go's linker lays them out
//! (`cmd/link/internal/ld/pcln.go`): two functions, one with a call inlined into it.

use super::*;

const TEXT: u64 = 0x40_1000;
const TABLE_VADDR: u64 = 0x4d_0000;
const GOFUNC: u64 = 0x4b_0000;

/// A pc-value table: (value, end PC offset from the entry) runs, Go's encoding.
fn pcvalue_table(runs: &[(i32, u64)], quantum: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut val, mut pc) = (-1i32, 0u64);
    for &(v, end) in runs {
        let d = v - val;
        let uv = if d < 0 {
            ((!d as u32) << 1) | 1
        } else {
            (d as u32) << 1
        };
        put_uvarint(&mut out, u64::from(uv));
        put_uvarint(&mut out, (end - pc) / quantum);
        (val, pc) = (v, end);
    }
    out.push(0);
    out
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Fake {
    tree: Vec<u8>,
    tree_at: u64,
    gofunc: Option<u64>,
}

impl Image for Fake {
    fn read(&self, vaddr: u64, len: usize) -> Option<Vec<u8>> {
        let at = usize::try_from(vaddr.checked_sub(self.tree_at)?).ok()?;
        self.tree.get(at..at + len).map(<[u8]>::to_vec)
    }
    fn gofunc(&self) -> Option<u64> {
        self.gofunc
    }
}

/// `main.outer` at [TEXT, +0x40) and `main.leaf` at [+0x40, +0x80), into which `main.mix`
/// (mix.go:3) is inlined at [+0x50, +0x60), called from leaf's line 10 (+0x48).
fn build(layout: Layout) -> (Vec<u8>, Fake) {
    let q = 1;
    let names = b"\0main.outer\0main.leaf\0main.mix\0".to_vec();
    let (outer_name, leaf_name, mix_name) = (1u32, 12u32, 22u32);
    let files = b"main.go\0mix.go\0".to_vec();
    let cutab: Vec<u8> = [0u32, 8].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut pctab = vec![0u8]; // offset 0 means "no table"
    let mut add = |t: Vec<u8>| {
        let at = pctab.len() as u32;
        pctab.extend(t);
        at
    };
    let outer_file = add(pcvalue_table(&[(0, 0x40)], q));
    let outer_line = add(pcvalue_table(&[(20, 0x10), (21, 0x40)], q));
    let leaf_file = add(pcvalue_table(&[(0, 0x10), (1, 0x20), (0, 0x40)], q));
    let leaf_line = add(pcvalue_table(&[(10, 0x10), (3, 0x20), (12, 0x40)], q));
    let leaf_inl = add(pcvalue_table(&[(-1, 0x10), (0, 0x20), (-1, 0x40)], q));
    // outer: a 0x18-byte frame after its first 4 bytes, gone for its last byte (the ret).
    let outer_sp = add(pcvalue_table(&[(0, 0x4), (0x18, 0x3f), (0, 0x40)], q));
    // leaf: no frame at all.
    let leaf_sp = add(pcvalue_table(&[(0, 0x40)], q));

    // The inline tree: one call, whose caller's instruction is at leaf + 8 (line 10).
    let mut tree = Vec::new();
    match layout {
        Layout::Go120 => {
            tree.extend([0u8; 4]);
            tree.extend(mix_name.to_le_bytes());
            tree.extend(8u32.to_le_bytes());
            tree.extend(3u32.to_le_bytes());
        }
        _ => {
            tree.extend((-1i16).to_le_bytes());
            tree.extend([0u8; 2]);
            tree.extend(1u32.to_le_bytes()); // file (unused by the reader)
            tree.extend(10u32.to_le_bytes()); // line (unused)
            tree.extend(mix_name.to_le_bytes());
            tree.extend(8u32.to_le_bytes());
        }
    }
    let tree_off = 0x40u32;
    let tree_at = GOFUNC + u64::from(tree_off);

    // Header, then names, cutab, files, pctab, then the function table and the funcs.
    let header_len = if layout == Layout::Go116 { 64 } else { 72 };
    let funcname = header_len;
    let cu = funcname + names.len();
    let filetab = cu + cutab.len();
    let pctab_off = filetab + files.len();
    let mut pcln = pctab_off + pctab.len();
    pcln = pcln.next_multiple_of(8);
    let stride = if layout == Layout::Go116 { 16 } else { 8 };
    let funcs_at = pcln + 3 * stride;

    let func =
        |entry: u64, name: u32, sp: u32, file: u32, line: u32, inl: Option<u32>| -> Vec<u8> {
            let mut f = Vec::new();
            match layout {
                Layout::Go116 => f.extend(entry.to_le_bytes()),
                _ => f.extend(((entry - TEXT) as u32).to_le_bytes()),
            }
            f.extend(name.to_le_bytes());
            f.extend([0u8; 8]); // args, deferreturn
            f.extend(sp.to_le_bytes());
            f.extend(file.to_le_bytes());
            f.extend(line.to_le_bytes());
            let npcdata = if inl.is_some() { 3u32 } else { 0 };
            f.extend(npcdata.to_le_bytes());
            f.extend(0u32.to_le_bytes()); // cuOffset
            let nfuncdata = if inl.is_some() { 4u8 } else { 0 };
            match layout {
                Layout::Go116 | Layout::Go118 => f.extend([0, 0, 0, nfuncdata]),
                Layout::Go120 => f.extend([0, 0, 0, 0, 0, 0, 0, nfuncdata]),
            }
            if let Some(inl) = inl {
                f.extend([0u32, 0, inl].iter().flat_map(|v| v.to_le_bytes()));
                match layout {
                    Layout::Go116 => {
                        // 8-aligned words of addresses (the table's vaddr is 8-aligned).
                        while f.len() % 8 != 0 {
                            f.push(0);
                        }
                        for a in [0u64, 0, 0, tree_at] {
                            f.extend(a.to_le_bytes());
                        }
                    }
                    _ => {
                        for o in [u32::MAX, u32::MAX, u32::MAX, tree_off] {
                            f.extend(o.to_le_bytes());
                        }
                    }
                }
            }
            while f.len() % 8 != 0 {
                f.push(0);
            }
            f
        };
    let outer = func(TEXT, outer_name, outer_sp, outer_file, outer_line, None);
    let leaf = func(
        TEXT + 0x40,
        leaf_name,
        leaf_sp,
        leaf_file,
        leaf_line,
        Some(leaf_inl),
    );
    let (outer_off, leaf_off) = (3 * stride, 3 * stride + outer.len());

    let mut t = Vec::new();
    let magic: u32 = match layout {
        Layout::Go116 => 0xffff_fffa,
        Layout::Go118 => 0xffff_fff0,
        Layout::Go120 => 0xffff_fff1,
    };
    t.extend(magic.to_le_bytes());
    t.extend([0, 0, q as u8, 8]);
    t.extend(2u64.to_le_bytes()); // nfunc
    t.extend(2u64.to_le_bytes()); // nfiles
    if layout != Layout::Go116 {
        t.extend(TEXT.to_le_bytes());
    }
    for o in [funcname, cu, filetab, pctab_off, pcln] {
        t.extend((o as u64).to_le_bytes());
    }
    assert_eq!(t.len(), header_len);
    t.extend(&names);
    t.extend(&cutab);
    t.extend(&files);
    t.extend(&pctab);
    t.resize(pcln, 0);
    for (entry, off) in [(TEXT, outer_off), (TEXT + 0x40, leaf_off), (TEXT + 0x80, 0)] {
        match layout {
            Layout::Go116 => {
                t.extend(entry.to_le_bytes());
                t.extend((off as u64).to_le_bytes());
            }
            _ => {
                t.extend(((entry - TEXT) as u32).to_le_bytes());
                t.extend((off as u32).to_le_bytes());
            }
        }
    }
    assert_eq!(t.len(), funcs_at);
    t.extend(&outer);
    t.extend(&leaf);
    let gofunc = (layout != Layout::Go116).then_some(GOFUNC);
    (
        t,
        Fake {
            tree,
            tree_at,
            gofunc,
        },
    )
}

fn frame(function: &str, file: &str, line: u32) -> GoFrame {
    GoFrame {
        function: function.into(),
        file: Some(file.into()),
        line: Some(line),
    }
}

#[test]
fn every_layout_names_functions_lines_and_inlined_calls() {
    for layout in [Layout::Go116, Layout::Go118, Layout::Go120] {
        let (bytes, image) = build(layout);
        let t = Pclntab::parse(bytes, TABLE_VADDR, None).unwrap();
        assert_eq!(t.layout(), layout);
        assert_eq!(t.range(), Some((TEXT, TEXT + 0x80)));
        let at = |pc| t.frames(pc, &image);
        assert_eq!(
            at(TEXT),
            Some(vec![frame("main.outer", "main.go", 20)]),
            "{layout:?}"
        );
        assert_eq!(
            at(TEXT + 0x3f),
            Some(vec![frame("main.outer", "main.go", 21)])
        );
        assert_eq!(
            at(TEXT + 0x41),
            Some(vec![frame("main.leaf", "main.go", 10)])
        );
        // The inlined call: mix at its own line, then leaf at the call's line.
        assert_eq!(
            at(TEXT + 0x55),
            Some(vec![
                frame("main.mix", "mix.go", 3),
                frame("main.leaf", "main.go", 10)
            ]),
            "{layout:?}"
        );
        assert_eq!(
            at(TEXT + 0x65),
            Some(vec![frame("main.leaf", "main.go", 12)])
        );
        assert_eq!(at(TEXT - 1), None);
        assert_eq!(at(TEXT + 0x80), None);
    }
}

#[test]
fn the_frame_size_says_where_the_return_address_is() {
    for layout in [Layout::Go116, Layout::Go118, Layout::Go120] {
        let (bytes, _) = build(layout);
        let t = Pclntab::parse(bytes, TABLE_VADDR, None).unwrap();
        let at = |o| t.frame_size(TEXT + o);
        assert_eq!(
            [at(0), at(3), at(4), at(0x3e), at(0x3f)],
            [Some(0), Some(0), Some(0x18), Some(0x18), Some(0)],
            "{layout:?}"
        );
        assert_eq!([at(0x40), at(0x7f), at(0x80)], [Some(0), Some(0), None]);
        let mut runs = Vec::new();
        t.frame_runs(|start, end, size, flag| runs.push((start - TEXT, end - TEXT, size, flag)));
        assert_eq!(
            runs,
            [
                (0, 4, 0, 0),
                (4, 0x3f, 0x18, 0),
                (0x3f, 0x40, 0, 0),
                (0x40, 0x80, 0, 0)
            ],
            "{layout:?}"
        );
    }
}

#[test]
fn an_inline_tree_out_of_reach_leaves_the_function_named() {
    let (bytes, mut image) = build(Layout::Go120);
    image.gofunc = None; // the module data was not found
    let t = Pclntab::parse(bytes, TABLE_VADDR, None).unwrap();
    assert_eq!(
        t.frames(TEXT + 0x55, &image),
        Some(vec![frame("main.leaf", "mix.go", 3)])
    );
}

#[test]
fn bad_tables_are_refused_and_bad_entries_name_nothing() {
    let (good, image) = build(Layout::Go120);
    let mut old = good.clone();
    old[..4].copy_from_slice(&0xffff_fffbu32.to_le_bytes());
    assert_eq!(
        Pclntab::parse(old, TABLE_VADDR, None).unwrap_err(),
        PclntabError::Magic(0xffff_fffb)
    );
    let mut order = good.clone();
    order[32..40].copy_from_slice(&u64::MAX.to_le_bytes()); // funcname past the end
    assert!(matches!(
        Pclntab::parse(order, TABLE_VADDR, None),
        Err(PclntabError::Corrupt(_))
    ));
    let mut nfunc = good.clone();
    nfunc[8..16].copy_from_slice(&1000u64.to_le_bytes());
    assert!(Pclntab::parse(nfunc, TABLE_VADDR, None).is_err());
    assert!(Pclntab::parse(good[..40].to_vec(), TABLE_VADDR, None).is_err());

    // A function whose name offset points past the names: no name rather than a wrong one.
    let pcln = u64::from_le_bytes(good[64..72].try_into().unwrap()) as usize;
    let outer_func =
        pcln + u32::from_le_bytes(good[pcln + 4..pcln + 8].try_into().unwrap()) as usize;
    let mut name = good.clone();
    name[outer_func + 4..outer_func + 8].copy_from_slice(&0x10_0000u32.to_le_bytes());
    let t = Pclntab::parse(name, TABLE_VADDR, None).unwrap();
    assert_eq!(t.frames(TEXT, &image), None);
    assert!(t.frames(TEXT + 0x41, &image).is_some());
    // A function table entry that disagrees with its function's own entry.
    let mut entry = good;
    entry[outer_func..outer_func + 4].copy_from_slice(&4u32.to_le_bytes());
    let t = Pclntab::parse(entry, TABLE_VADDR, None).unwrap();
    assert_eq!(t.frames(TEXT + 8, &image), None);
}

#[test]
fn a_zero_text_start_takes_the_text_sections_address() {
    let (mut bytes, image) = build(Layout::Go120);
    bytes[24..32].copy_from_slice(&0u64.to_le_bytes());
    let t = Pclntab::parse(bytes, TABLE_VADDR, Some(TEXT)).unwrap();
    assert_eq!(t.frames(TEXT, &image).unwrap()[0].function, "main.outer");
}
