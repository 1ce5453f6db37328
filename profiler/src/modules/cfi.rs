//! Evaluating a module's call frame information (`.eh_frame`, else `.debug_frame`) into the
//! compact rows the sampler walks with (`profiler_common::unwind`).

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, LittleEndian, RegisterRule,
    UnwindContext, UnwindSection, X86_64,
};
use profiler_common::unwind::{UnwindRow, cfa};

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

/// The rows of every FDE, sorted by address, as (address, row without its `pc`): each holds
/// up to the next; a gap between FDEs gets a [`cfa::NONE`] row, and consecutive equal rows
/// are merged.
pub fn rows(sections: &CfiSections) -> Result<Vec<(u64, UnwindRow)>, CfiError> {
    let mut bases = BaseAddresses::default()
        .set_text(sections.text_addr)
        .set_got(sections.got_addr);
    let mut spans = Vec::new();
    match (&sections.eh_frame, &sections.debug_frame) {
        (Some(eh), _) if !eh.data.is_empty() => {
            bases = bases.set_eh_frame(eh.addr);
            if let Some(hdr) = &sections.eh_frame_hdr {
                bases = bases.set_eh_frame_hdr(hdr.addr);
            }
            let section = EhFrame::new(&eh.data, LittleEndian);
            collect(&section, &bases, &mut spans)?;
        }
        (_, Some(debug)) => {
            let section = DebugFrame::new(&debug.data, LittleEndian);
            collect(&section, &bases, &mut spans)?;
        }
        _ => return Err(CfiError::Missing),
    }
    Ok(flatten(spans))
}

/// (start, end, rule) of every row of every FDE of `section`.
fn collect<'a, S>(
    section: &S,
    bases: &BaseAddresses,
    spans: &mut Vec<(u64, u64, Rule)>,
) -> Result<(), CfiError>
where
    S: UnwindSection<gimli::EndianSlice<'a, LittleEndian>>,
{
    let mut ctx = UnwindContext::new();
    let mut entries = section.entries(bases);
    while let Some(entry) = entries.next()? {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        // One bad FDE loses its function, not the module.
        let Ok(fde) = partial.parse(S::cie_from_offset) else {
            continue;
        };
        if fde.len() == 0 {
            continue;
        }
        if fde.is_signal_trampoline() {
            let rule = Rule {
                cfa: cfa::SIGNAL,
                ..NONE
            };
            spans.push((fde.initial_address(), fde.end_address(), rule));
            continue;
        }
        let Ok(mut table) = fde.rows(section, bases, &mut ctx) else {
            continue;
        };
        while let Ok(Some(row)) = table.next_row() {
            let rule = evaluate(section, row);
            spans.push((row.start_address(), row.end_address(), rule));
        }
    }
    Ok(())
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

/// Sorted, gap-marked, merged rows from possibly unsorted FDE spans.
fn flatten(mut spans: Vec<(u64, u64, Rule)>) -> Vec<(u64, UnwindRow)> {
    spans.sort_by_key(|&(start, _, _)| start);
    let mut out: Vec<(u64, Rule)> = Vec::with_capacity(spans.len() + spans.len() / 4);
    let mut covered_to = 0u64;
    for (start, end, rule) in spans {
        // Overlapping FDEs (a linker's leftovers): the first one wins.
        if start < covered_to || end <= start {
            continue;
        }
        if start > covered_to
            && let Some(last) = out.last()
            && last.1 != NONE
        {
            out.push((covered_to, NONE));
        }
        if out.last().is_none_or(|l| l.1 != rule) {
            out.push((start, rule));
        }
        covered_to = end;
    }
    if out.last().is_some_and(|l| l.1 != NONE) {
        out.push((covered_to, NONE));
    }
    out.into_iter()
        .map(|(addr, r)| {
            (
                addr,
                UnwindRow {
                    pc: 0,
                    cfa_offset: r.cfa_offset,
                    cfa: r.cfa,
                    rbp: r.rbp,
                },
            )
        })
        .collect()
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

    #[test]
    fn gaps_get_none_rows_and_equal_neighbours_merge() {
        let spans = vec![
            (0x200, 0x210, rsp(8)),
            (0x100, 0x104, rsp(8)),
            (0x104, 0x120, rsp(16)),
            (0x120, 0x130, rsp(16)),
            (0x210, 0x220, rsp(8)),
        ];
        let rows: Vec<(u64, u8, u16)> = flatten(spans)
            .into_iter()
            .map(|(a, r)| (a, r.cfa, r.cfa_offset))
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
        let rows = flatten(spans);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].1.cfa, cfa::NONE);
    }
}
