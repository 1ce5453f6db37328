//! Evaluating a module's call frame information (`.eh_frame`, else `.debug_frame`) into the
//! compact rows the sampler walks with (`profiler_common::unwind`), for x86-64 and aarch64
//! files alike: one pass over the FDEs, the register rules read per architecture.

use gimli::{
    AArch64, BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, LittleEndian, Register,
    RegisterRule, UnwindContext, UnwindSection, Vendor, X86_64,
};
use profiler_common::unwind::{MAX_MODULE_ROWS, UnwindRow, cfa, ra};

/// The instruction set a file's CFI describes (its ELF machine).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arch {
    #[default]
    X86_64,
    Aarch64,
}

impl Arch {
    /// The stack pointer, frame pointer and return address columns.
    fn registers(self) -> (Register, Register, Register) {
        match self {
            Arch::X86_64 => (X86_64::RSP, X86_64::RBP, X86_64::RA),
            Arch::Aarch64 => (AArch64::SP, AArch64::X29, AArch64::X30),
        }
    }
}

/// A section's bytes and the virtual address it is loaded at.
#[derive(Clone, Debug, Default)]
pub struct Section {
    pub addr: u64,
    pub data: Vec<u8>,
}

/// The CFI sections of one ELF file, and the bases their pointer encodings are relative to.
#[derive(Clone, Debug, Default)]
pub struct CfiSections {
    pub eh_frame: Option<Section>,
    pub eh_frame_hdr: Option<Section>,
    pub debug_frame: Option<Section>,
    pub text_addr: u64,
    pub got_addr: u64,
    pub arch: Arch,
    /// `.plt`'s address range: aarch64 linkers give its stubs no FDE (they touch neither
    /// sp nor x30), so their rows are made here.
    pub plt: Option<(u64, u64)>,
    /// aarch64's signal trampoline (the vDSO's `__kernel_rt_sigreturn` and the `nop` before
    /// it, where a handler's return address minus one falls): Debian's arm64 vDSOs have no
    /// CFI at all, so its signal-frame row is made here.
    pub signal_trampoline: Option<(u64, u64)>,
    /// A Go binary (it has Go's function table): CFI it lacks (`-s -w`) or that cannot be
    /// read (its zlib-compressed `.debug_frame`)
    /// gets its rows from its function table instead (x86-64), else is left to the
    /// frame-pointer walk, without a warning.
    pub go: bool,
    /// A Go binary's function table (`.gopclntab`), whose frame sizes give its rows.
    pub gopclntab: Option<Section>,
}

#[derive(Debug, thiserror::Error)]
pub enum CfiError {
    #[error("malformed call frame information: {0}")]
    Parse(#[from] gimli::Error),
    #[error("the file has neither .eh_frame nor .debug_frame")]
    Missing,
    #[error("code spans more than 4 GiB; no unwind table")]
    TooWide,
    #[error("more than {MAX_MODULE_ROWS} unwind rows; no unwind table")]
    TooManyRows,
}

/// How one address range unwinds, before it is placed relative to a table base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rule {
    cfa: u8,
    cfa_offset: u16,
    rbp: i8,
}

const NONE: Rule = Rule {
    cfa: cfa::NONE,
    cfa_offset: 0,
    rbp: 0,
};

/// `.plt`'s CFA expression: rsp + 8 + ((rip & 15) >= 11) << 3.
const PLT_EXPRESSION: [u8; 11] = [
    0x77, 0x08, // DW_OP_breg7 (rsp) 8
    0x80, 0x00, // DW_OP_breg16 (rip) 0
    0x3f, 0x1a, // DW_OP_lit15, DW_OP_and
    0x3b, 0x2a, // DW_OP_lit11, DW_OP_ge
    0x33, 0x24, 0x22, // DW_OP_lit3, DW_OP_shl, DW_OP_plus
];

/// A module's rows: addresses relative to `base` (the lowest address any FDE covers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rows {
    pub base: u64,
    pub rows: Vec<UnwindRow>,
}

/// Every FDE's rows, in address order: each row holds up to the next; a gap between FDEs
/// gets a [`cfa::NONE`] row, and consecutive equal rows are merged.
///
/// FDEs are listed (address and offset, 16 bytes each) and sorted first, then evaluated one
/// by one in address order straight into the table: memory is the table itself (8 bytes a
/// row) plus the list, not every row's span (librustc_driver's 1.1 million rows took 45 MiB
/// at the peak that way).
pub fn rows(sections: &CfiSections) -> Result<Rows, CfiError> {
    match cfi_rows(sections) {
        Err(CfiError::Missing | CfiError::Parse(_)) if sections.go => {
            Ok(go_rows(sections).unwrap_or_default())
        }
        other => other,
    }
}

/// The rows of a Go binary from its function table's frame sizes (pcsp): on x86-64 the
/// return address is at rsp + size, and a function with a frame keeps its caller's rbp at
/// CFA - 16. Go's frame pointers miss the caller of a function without a frame (a small
/// leaf), which these rows do not. Functions that end a walk (`runtime.goexit`,
/// `runtime.mstart`) end it; those that move the stack pointer arbitrarily (`morestack`,
/// `systemstack`) are left to the frame pointer. `None`: no rows (frame pointers).
fn go_rows(sections: &CfiSections) -> Option<Rows> {
    const TOPFRAME: u8 = 1;
    const SPWRITE: u8 = 2;
    if sections.arch != Arch::X86_64 {
        return None;
    }
    let sec = sections.gopclntab.as_ref()?;
    let text = (sections.text_addr != 0).then_some(sections.text_addr);
    let table = crate::symbolize::go::Pclntab::parse(sec.data.clone(), sec.addr, text).ok()?;
    let mut rows = Table::default();
    let mut failed = false;
    table.frame_runs(|start, end, size, flag| {
        let rule = if flag & TOPFRAME != 0 {
            Rule {
                cfa: cfa::END,
                cfa_offset: 0,
                rbp: 0,
            }
        } else if flag & SPWRITE != 0 {
            NONE
        } else {
            match u16::try_from(i64::from(size) + 8) {
                Ok(cfa_offset) if size >= 0 => Rule {
                    cfa: cfa::RSP,
                    cfa_offset,
                    rbp: if size >= 16 { -2 } else { 0 },
                },
                _ => NONE,
            }
        };
        failed |= rows.push(start, end, rule).is_err();
    });
    if failed {
        return None;
    }
    rows.finish().ok()
}

fn cfi_rows(sections: &CfiSections) -> Result<Rows, CfiError> {
    let mut bases = BaseAddresses::default()
        .set_text(sections.text_addr)
        .set_got(sections.got_addr);
    // DW_CFA_AARCH64_negate_ra_state (pointer authentication's) shares its opcode with a
    // SPARC instruction: gimli reads it so only when told the vendor.
    let vendor = match sections.arch {
        Arch::Aarch64 => Vendor::AArch64,
        Arch::X86_64 => Vendor::Default,
    };
    let extra = synthetic_spans(sections);
    match (&sections.eh_frame, &sections.debug_frame) {
        (Some(eh), _) if !eh.data.is_empty() => {
            bases = bases.set_eh_frame(eh.addr);
            if let Some(hdr) = &sections.eh_frame_hdr {
                bases = bases.set_eh_frame_hdr(hdr.addr);
            }
            let mut section = EhFrame::new(&eh.data, LittleEndian);
            section.set_vendor(vendor);
            evaluate_all(&section, &bases, sections.arch, &extra)
        }
        (_, Some(debug)) => {
            let mut section = DebugFrame::new(&debug.data, LittleEndian);
            section.set_vendor(vendor);
            evaluate_all(&section, &bases, sections.arch, &extra)
        }
        // No CFI, but rows of our own (the arm64 vDSO's signal trampoline).
        _ if !extra.is_empty() => {
            let mut table = Table::default();
            for &(from, to, rule) in &extra {
                table.push(from, to, rule)?;
            }
            table.finish()
        }
        _ => Err(CfiError::Missing),
    }
}

/// Spans with no FDE whose rule is known, in address order: aarch64's PLT stubs after the
/// first (lazy binding's resolver entry, which pushes x16 and x30: left to the frame
/// pointer) return through x30 with sp untouched; its signal trampoline.
fn synthetic_spans(sections: &CfiSections) -> Vec<(u64, u64, Rule)> {
    const PLT0_BYTES: u64 = 32;
    let mut spans = Vec::new();
    if sections.arch != Arch::Aarch64 {
        return spans;
    }
    if let Some((start, end)) = sections.plt
        && end > start + PLT0_BYTES
    {
        let rule = Rule {
            cfa: cfa::RSP | ra::LR,
            ..NONE
        };
        spans.push((start + PLT0_BYTES, end, rule));
    }
    if let Some((start, end)) = sections.signal_trampoline {
        let rule = Rule {
            cfa: cfa::SIGNAL,
            ..NONE
        };
        spans.push((start, end, rule));
    }
    spans.sort_by_key(|s| s.0);
    spans
}

fn evaluate_all<'a, S>(
    section: &S,
    bases: &BaseAddresses,
    arch: Arch,
    extra: &[(u64, u64, Rule)],
) -> Result<Rows, CfiError>
where
    S: UnwindSection<gimli::EndianSlice<'a, LittleEndian>>,
{
    // (first address, offset) of every FDE with code.
    let mut fdes: Vec<(u64, usize)> = Vec::new();
    let mut entries = section.entries(bases);
    while let Some(entry) = entries.next()? {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        // One bad FDE loses its function, not the module.
        if let Ok(fde) = partial.parse(S::cie_from_offset)
            && fde.len() != 0
        {
            fdes.push((fde.initial_address(), partial.offset()));
        }
    }
    // Stable: of two FDEs at one address, the first in the section wins (as below).
    fdes.sort_by_key(|&(start, _)| start);
    let mut table = Table::default();
    let mut ctx = UnwindContext::new();
    let mut extra = extra.iter().peekable();
    for &(start, offset) in &fdes {
        // The synthetic spans in address order among the FDEs (an FDE over one wins).
        while let Some(&&(from, to, rule)) = extra.peek()
            && from <= start
        {
            table.push(from, to, rule)?;
            extra.next();
        }
        let Ok(fde) = section.fde_from_offset(bases, offset.into(), S::cie_from_offset) else {
            continue;
        };
        if fde.is_signal_trampoline() {
            let rule = Rule {
                cfa: cfa::SIGNAL,
                ..NONE
            };
            table.push(fde.initial_address(), fde.end_address(), rule)?;
            continue;
        }
        let Ok(mut fde_rows) = fde.rows(section, bases, &mut ctx) else {
            continue;
        };
        while let Ok(Some(row)) = fde_rows.next_row() {
            let rule = evaluate(section, row, arch);
            table.push(row.start_address(), row.end_address(), rule)?;
        }
    }
    for &(from, to, rule) in extra {
        table.push(from, to, rule)?;
    }
    table.finish()
}

/// Where a register was saved: unchanged (`None`), or at CFA + this many bytes (a multiple
/// of 8).
fn saved_at(rule: Option<RegisterRule<usize>>) -> Result<Option<i64>, ()> {
    match rule {
        None | Some(RegisterRule::SameValue) => Ok(None),
        Some(RegisterRule::Offset(n)) if n % 8 == 0 && n != 0 => Ok(Some(n)),
        Some(_) => Err(()),
    }
}

fn evaluate<'a, S>(
    section: &S,
    row: &gimli::UnwindTableRow<usize, gimli::StoreOnHeap>,
    arch: Arch,
) -> Rule
where
    S: UnwindSection<gimli::EndianSlice<'a, LittleEndian>>,
{
    let (sp_reg, fp_reg, ra_reg) = arch.registers();
    if let Some(RegisterRule::Undefined) = row.register(ra_reg) {
        return Rule {
            cfa: cfa::END,
            ..NONE
        };
    }
    let (kind, offset) = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if *register == sp_reg => {
            (cfa::RSP, *offset)
        }
        CfaRule::RegisterAndOffset { register, offset } if *register == fp_reg => {
            (cfa::RBP, *offset)
        }
        CfaRule::Expression(e) if arch == Arch::X86_64 => match e.get(section) {
            Ok(expr) if expr.0.slice() == PLT_EXPRESSION => (cfa::PLT, 8),
            _ => return NONE,
        },
        _ => return NONE,
    };
    let Ok(cfa_offset) = u16::try_from(offset) else {
        return NONE;
    };
    // x86-64's rbp may be marked undefined (clobbered) where it is not needed.
    let fp = match row.register(fp_reg) {
        Some(RegisterRule::Undefined) => Ok(None),
        other => saved_at(other),
    };
    let Ok(fp) = fp else {
        return NONE;
    };
    let placed = match arch {
        // `call` pushed the return address at CFA - 8: the rows say nothing more.
        Arch::X86_64 => match fp {
            None => Some((0, 0)),
            Some(f) => i8::try_from(f / 8).ok().map(|k| (0, k)),
        },
        Arch::Aarch64 => {
            let Ok(ra_at) = saved_at(row.register(ra_reg)) else {
                return NONE;
            };
            // Slots from the CFA, else (a frame record below a big frame) from the CFA
            // rule's register.
            aarch64_slots(fp, ra_at, 0).or_else(|| {
                aarch64_slots(fp, ra_at, i64::from(cfa_offset))
                    .map(|(bits, k)| (bits | ra::FROM_REGISTER, k))
            })
        }
    };
    match placed {
        Some((bits, rbp)) => Rule {
            cfa: kind | bits,
            cfa_offset,
            rbp,
        },
        None => NONE,
    }
}

/// aarch64's return address and frame pointer (saved at CFA + these bytes, or not) as
/// [`ra`] bits and a slot counted from `bias` bytes below the CFA, if they fit a row.
fn aarch64_slots(fp: Option<i64>, ra_at: Option<i64>, bias: i64) -> Option<(u8, i8)> {
    let slot = |at: i64| i8::try_from((at + bias) / 8).ok();
    match (fp, ra_at) {
        (None, None) if bias == 0 => Some((ra::LR, 0)),
        // (A zero slot would read as "unchanged".)
        (Some(f), None) => slot(f).filter(|&k| k != 0).map(|k| (ra::LR, k)),
        (Some(f), Some(r)) if r == f + 8 => Some((ra::RECORD, slot(f)?)),
        (None, Some(r)) => Some((ra::SLOT, slot(r)?)),
        (Some(f), Some(-8)) if bias == 0 => Some((0, slot(f)?)),
        // Saved apart from the frame pointer.
        _ => None,
    }
}

/// A table built from spans pushed in the order of their start.
#[derive(Default)]
struct Table {
    base: Option<u64>,
    rows: Vec<UnwindRow>,
    last: Option<Rule>,
    covered_to: u64,
}

impl Table {
    fn push(&mut self, start: u64, end: u64, rule: Rule) -> Result<(), CfiError> {
        // Overlapping FDEs (a linker's leftovers): the first one wins.
        if start < self.covered_to || end <= start {
            return Ok(());
        }
        if start > self.covered_to && self.last.is_some_and(|l| l != NONE) {
            self.add(self.covered_to, NONE)?;
        }
        if self.last != Some(rule) {
            self.add(start, rule)?;
        }
        self.covered_to = end;
        Ok(())
    }

    fn add(&mut self, addr: u64, rule: Rule) -> Result<(), CfiError> {
        let base = *self.base.get_or_insert(addr);
        let pc = u32::try_from(addr - base).map_err(|_| CfiError::TooWide)?;
        if self.rows.len() >= MAX_MODULE_ROWS as usize {
            return Err(CfiError::TooManyRows);
        }
        self.rows.push(UnwindRow {
            pc,
            cfa_offset: rule.cfa_offset,
            cfa: rule.cfa,
            rbp: rule.rbp,
        });
        self.last = Some(rule);
        Ok(())
    }

    fn finish(mut self) -> Result<Rows, CfiError> {
        if self.last.is_some_and(|l| l != NONE) {
            self.add(self.covered_to, NONE)?;
        }
        self.rows.shrink_to_fit();
        Ok(Rows {
            base: self.base.unwrap_or(0),
            rows: self.rows,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rsp(off: u16) -> Rule {
        Rule {
            cfa: cfa::RSP,
            cfa_offset: off,
            rbp: 0,
        }
    }

    /// The table of `spans`, pushed in the order of their start (as FDEs are evaluated).
    fn table(mut spans: Vec<(u64, u64, Rule)>) -> Rows {
        spans.sort_by_key(|&(start, _, _)| start);
        let mut t = Table::default();
        for (start, end, rule) in spans {
            t.push(start, end, rule).unwrap();
        }
        t.finish().unwrap()
    }

    #[test]
    fn gaps_get_none_rows_and_equal_neighbours_merge() {
        let spans = vec![
            (0x200, 0x210, rsp(8)),
            (0x100, 0x104, rsp(8)),
            (0x104, 0x120, rsp(16)),
            (0x120, 0x130, rsp(16)),
            (0x210, 0x220, rsp(8)),
        ];
        let rows: Vec<(u64, u8, u16)> = table(spans)
            .rows
            .into_iter()
            .map(|r| (0x100 + u64::from(r.pc), r.cfa, r.cfa_offset))
            .collect();
        assert_eq!(
            rows,
            vec![
                (0x100, cfa::RSP, 8),
                (0x104, cfa::RSP, 16),
                (0x130, cfa::NONE, 0),
                (0x200, cfa::RSP, 8),
                (0x220, cfa::NONE, 0),
            ]
        );
    }

    #[test]
    fn overlapping_fdes_keep_the_first() {
        let spans = vec![(0x100, 0x200, rsp(8)), (0x150, 0x160, rsp(32))];
        let rows = table(spans).rows;
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[1].pc, rows[1].cfa), (0x100, cfa::NONE));
    }

    /// Debian's arm64 vDSOs have no CFI: the signal trampoline still gets its row (the
    /// `nop` before `__kernel_rt_sigreturn` included), the rest is left to frame pointers.
    #[test]
    fn an_arm64_vdso_without_cfi_has_its_signal_row() {
        let sections = CfiSections {
            arch: Arch::Aarch64,
            signal_trampoline: Some((0x7b8, 0x7c4)),
            ..Default::default()
        };
        let table = rows(&sections).unwrap();
        let got: Vec<(u64, u8)> = table
            .rows
            .iter()
            .map(|r| (table.base + u64::from(r.pc), r.cfa))
            .collect();
        assert_eq!(got, [(0x7b8, cfa::SIGNAL), (0x7c4, cfa::NONE)]);
        let x86 = CfiSections {
            signal_trampoline: Some((0x7b8, 0x7c4)),
            ..Default::default()
        };
        assert!(matches!(rows(&x86), Err(CfiError::Missing)));
    }

    /// A Go binary without CFI, or with CFI that cannot be read, is walked by its frame
    /// pointers without a warning; any other binary is told about.
    #[test]
    fn a_go_binary_without_readable_cfi_has_an_empty_table() {
        let broken = Section {
            addr: 0x1000,
            data: vec![0x78, 0x9c, 1, 2, 3],
        };
        let go = CfiSections {
            go: true,
            ..Default::default()
        };
        assert_eq!(rows(&go).unwrap(), Rows::default());
        let go_zlib = CfiSections {
            debug_frame: Some(broken.clone()),
            go: true,
            ..Default::default()
        };
        assert_eq!(rows(&go_zlib).unwrap(), Rows::default());
        let c = CfiSections {
            debug_frame: Some(broken),
            ..Default::default()
        };
        assert!(matches!(rows(&c), Err(CfiError::Parse(_))));
    }

    #[test]
    fn code_wider_than_4_gib_has_no_table() {
        let mut t = Table::default();
        t.push(0x1000, 0x1010, rsp(8)).unwrap();
        let far = 0x1000 + (1u64 << 32);
        assert!(matches!(
            t.push(far, far + 16, rsp(16)),
            Err(CfiError::TooWide)
        ));
    }

    /// Where a row puts things, relative to the CFA: (CFA register, offset), the return
    /// address's offset (`None`: in the link register), the frame pointer's (`None`:
    /// unchanged).
    type Decoded = (&'static str, u16, Option<i64>, Option<i64>);

    fn decode(row: &UnwindRow, arch: Arch) -> Option<Decoded> {
        let reg = match (row.cfa & cfa::KIND, arch) {
            (cfa::RSP, Arch::X86_64) => "rsp",
            (cfa::RBP, Arch::X86_64) => "rbp",
            (cfa::RSP, Arch::Aarch64) => "sp",
            (cfa::RBP, Arch::Aarch64) => "x29",
            _ => return None,
        };
        let rel = |a: u64| a as i64;
        Some((
            reg,
            row.cfa_offset,
            row.return_address_at(0).map(rel),
            row.saved_bp_at(0).map(rel),
        ))
    }

    /// GNU readelf's reading of the same CFI (`--debug-dump=frames-interp`), an independent
    /// interpreter: every (address, CFA rule, return address, frame pointer) row it prints,
    /// as [`Decoded`]; `None` for a rule we do not expect to represent.
    fn readelf_rows(path: &str, arch: Arch) -> Vec<(u64, Option<Decoded>)> {
        let out = std::process::Command::new("readelf")
            .args(["--wide", "--debug-dump=frames-interp", path])
            .output()
            .expect("readelf (binutils)");
        let text = String::from_utf8_lossy(&out.stdout);
        let (fp, ra) = match arch {
            Arch::X86_64 => ("rbp", "ra"),
            Arch::Aarch64 => ("x29", "ra"),
        };
        let mut rows = Vec::new();
        let mut columns: Vec<String> = Vec::new();
        let mut in_fde = false;
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.first() == Some(&"LOC") {
                columns = f.iter().map(|s| (*s).to_string()).collect();
                continue;
            }
            // A CIE's initial rows are no code's.
            if line.contains(" FDE ") || line.contains(" CIE ") {
                in_fde = line.contains(" FDE ");
                columns.clear();
                continue;
            }
            if !in_fde || f.is_empty() {
                continue;
            }
            let Ok(loc) = u64::from_str_radix(f[0], 16) else {
                continue;
            };
            if columns.is_empty() || f.len() != columns.len() {
                continue;
            }
            let col = |name: &str| columns.iter().position(|c| c == name).map(|i| f[i]);
            let slot = |v: Option<&str>| -> Result<Option<i64>, ()> {
                match v {
                    None | Some("u") | Some("s") => Ok(None),
                    Some(c) => match c.strip_prefix('c') {
                        Some(n) => n.parse().map(Some).map_err(|_| ()),
                        None => Err(()),
                    },
                }
            };
            let cfa = f[1];
            let decoded = (|| {
                let (reg, off) = cfa.split_once('+')?;
                let reg = match reg {
                    "rsp" => "rsp",
                    "rbp" => "rbp",
                    "sp" => "sp",
                    "x29" => "x29",
                    _ => return None,
                };
                let off: u16 = off.parse().ok()?;
                let fp = slot(col(fp)).ok()?;
                // x86-64's return address is at CFA - 8 whatever the column says.
                let ra = match arch {
                    Arch::X86_64 => Some(-8),
                    Arch::Aarch64 => slot(col(ra)).ok()?,
                };
                Some((reg, off, ra, fp))
            })();
            rows.push((loc, decoded));
        }
        rows
    }

    /// Our rows against readelf's on a real libc of each architecture (Debian's arm64 libc
    /// from the cross toolchain's package): every row readelf prints is ours exactly, or
    /// one we leave to the frame pointer (a rule we do not represent), for at most 1 %.
    #[test]
    fn rows_match_readelf_on_libc() {
        for (path, arch) in [
            ("/lib/x86_64-linux-gnu/libc.so.6", Arch::X86_64),
            ("/usr/aarch64-linux-gnu/lib/libc.so.6", Arch::Aarch64),
        ] {
            if !std::path::Path::new(path).exists() {
                assert_ne!(
                    std::env::var("CI").as_deref(),
                    Ok("true"),
                    "{path} missing under CI=true (cargo xtask setup installs it)"
                );
                eprintln!("SKIP: no {path}");
                continue;
            }
            let file = std::fs::File::open(path).unwrap();
            let info = super::super::elf::read(&file, path).unwrap();
            assert_eq!(info.cfi.arch, arch, "{path}");
            let table = rows(&info.cfi).unwrap();
            let ours = |addr: u64| -> Option<UnwindRow> {
                let pc = u32::try_from(addr.checked_sub(table.base)?).ok()?;
                let i = table.rows.partition_point(|r| r.pc <= pc);
                i.checked_sub(1).map(|i| table.rows[i])
            };
            let theirs = readelf_rows(path, arch);
            assert!(
                theirs.len() > 10_000,
                "{path}: {} readelf rows",
                theirs.len()
            );
            let (mut same, mut fp_fallback, mut unrepresented) = (0, 0, 0);
            for (loc, want) in &theirs {
                let row = ours(*loc).unwrap_or_else(|| panic!("{path}: no row at {loc:#x}"));
                match (want, decode(&row, arch)) {
                    (Some(w), Some(got)) => {
                        assert_eq!(*w, got, "{path} at {loc:#x}: {row:?}");
                        same += 1;
                    }
                    (None, _) => unrepresented += 1,
                    // Ours: the end of the stack (an undefined return address, which
                    // readelf shows as "u", as it does a return address in x30).
                    (Some(_), None) if row.cfa & cfa::KIND == cfa::END => same += 1,
                    (Some(_), None) if row.cfa & cfa::KIND == cfa::SIGNAL => same += 1,
                    (Some(w), None) => {
                        fp_fallback += 1;
                        eprintln!("{path} at {loc:#x}: readelf {w:?}, ours {row:?}");
                    }
                }
            }
            eprintln!(
                "{path}: {} readelf rows: {same} the same, {unrepresented} not represented \
                 by readelf's columns, {fp_fallback} left to the frame pointer",
                theirs.len()
            );
            assert!(fp_fallback * 100 <= theirs.len(), "{path}: {fp_fallback}");
            if arch == Arch::Aarch64 {
                // The PLT stubs after the first: CFA = sp, the return address in x30.
                let (start, end) = info.cfi.plt.expect(".plt");
                let stub = ours(start + 32).expect("a .plt row");
                assert_eq!((stub.cfa, stub.cfa_offset), (cfa::RSP | ra::LR, 0));
                assert!(end > start + 32);
            }
        }
    }
}
