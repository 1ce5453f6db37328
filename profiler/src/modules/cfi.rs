//! Evaluating a module's call frame information (`.eh_frame`, else `.debug_frame`) into the
//! compact rows the sampler walks with (`profiler_common::unwind`).

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, LittleEndian, RegisterRule,
    UnwindContext, UnwindSection, X86_64,
};
use profiler_common::unwind::{MAX_MODULE_ROWS, UnwindRow, cfa};

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
    let mut bases = BaseAddresses::default()
        .set_text(sections.text_addr)
        .set_got(sections.got_addr);
    match (&sections.eh_frame, &sections.debug_frame) {
        (Some(eh), _) if !eh.data.is_empty() => {
            bases = bases.set_eh_frame(eh.addr);
            if let Some(hdr) = &sections.eh_frame_hdr {
                bases = bases.set_eh_frame_hdr(hdr.addr);
            }
            evaluate_all(&EhFrame::new(&eh.data, LittleEndian), &bases)
        }
        (_, Some(debug)) => evaluate_all(&DebugFrame::new(&debug.data, LittleEndian), &bases),
        _ => Err(CfiError::Missing),
    }
}

fn evaluate_all<'a, S>(section: &S, bases: &BaseAddresses) -> Result<Rows, CfiError>
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
    for &(_, offset) in &fdes {
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
            let rule = evaluate(section, row);
            table.push(row.start_address(), row.end_address(), rule)?;
        }
    }
    table.finish()
}

fn evaluate<'a, S>(section: &S, row: &gimli::UnwindTableRow<usize, gimli::StoreOnHeap>) -> Rule
where
    S: UnwindSection<gimli::EndianSlice<'a, LittleEndian>>,
{
    if let Some(RegisterRule::Undefined) = row.register(X86_64::RA) {
        return Rule {
            cfa: cfa::END,
            ..NONE
        };
    }
    let rbp = match row.register(X86_64::RBP) {
        None | Some(RegisterRule::SameValue) | Some(RegisterRule::Undefined) => 0,
        Some(RegisterRule::Offset(n)) if n % 8 == 0 && n != 0 => match i8::try_from(n / 8) {
            Ok(k) => k,
            Err(_) => return NONE,
        },
        Some(_) => return NONE,
    };
    let (kind, offset) = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RSP => {
            (cfa::RSP, *offset)
        }
        CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RBP => {
            (cfa::RBP, *offset)
        }
        CfaRule::Expression(e) => match e.get(section) {
            Ok(expr) if expr.0.slice() == PLT_EXPRESSION => (cfa::PLT, 8),
            _ => return NONE,
        },
        _ => return NONE,
    };
    match u16::try_from(offset) {
        Ok(cfa_offset) => Rule {
            cfa: kind,
            cfa_offset,
            rbp,
        },
        Err(_) => NONE,
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
}
