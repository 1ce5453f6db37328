//! From an instruction's byte offset to its line, in each of CPython's three line-table
//! formats, computed exactly as the interpreter's own `PyCode_Addr2Line` does (so a frame
//! reads the line a traceback of it would).

use profiler_common::python::{LINETABLE_310, LNOTAB, LOCATIONS_311};

/// The line of the instruction at byte offset `offset` of a code object whose line table
/// (`co_lnotab` / `co_linetable`, as `format` says) is `table`; `None` where the
/// interpreter has no line either (3.10+ artificial instructions, offsets past the table).
pub fn line_of(format: u8, table: &[u8], firstlineno: i32, offset: u32) -> Option<i32> {
    match format {
        LNOTAB => Some(lnotab(table, firstlineno, offset)),
        LINETABLE_310 => linetable_310(table, firstlineno, offset),
        LOCATIONS_311 => locations_311(table, firstlineno, offset),
        _ => None,
    }
}

/// ≤3.9: (bytecode delta, line delta) byte pairs; the line delta is signed since 3.6. The
/// line of an offset is the first line plus the deltas of every pair whose cumulated
/// address is at most the offset.
fn lnotab(table: &[u8], firstlineno: i32, offset: u32) -> i32 {
    let mut line = firstlineno;
    let mut addr = 0u32;
    for pair in table.chunks_exact(2) {
        addr += u32::from(pair[0]);
        if addr > offset {
            break;
        }
        line += i32::from(pair[1] as i8);
    }
    line
}

/// 3.10: (bytecode delta, line delta) pairs, each the end of a range; a line delta of -128
/// marks a range with no line (but does not move the running line).
fn linetable_310(table: &[u8], firstlineno: i32, offset: u32) -> Option<i32> {
    let mut line = firstlineno;
    let mut start = 0u32;
    for pair in table.chunks_exact(2) {
        let end = start + u32::from(pair[0]);
        let delta = pair[1] as i8;
        let this = if delta == -128 {
            None
        } else {
            line += i32::from(delta);
            Some(line)
        };
        if start <= offset && offset < end {
            return this;
        }
        start = end;
    }
    None
}

/// 3.11+: entries of `1 code:4 length-1:3` then the code's varints; lengths in 2-byte code
/// units. Codes: 15 no location; 14 long form (signed line delta, then end line, columns);
/// 13 no columns (signed line delta); 10–12 one line form (delta code-10, two column bytes);
/// 0–9 short form (same line, one column byte).
fn locations_311(table: &[u8], firstlineno: i32, offset: u32) -> Option<i32> {
    let mut line = firstlineno;
    let mut start = 0u32;
    let mut at = 0usize;
    while at < table.len() {
        let head = table[at];
        if head & 0x80 == 0 {
            // Not an entry start: the table is malformed (or we lost sync); give up.
            return None;
        }
        let code = (head >> 3) & 15;
        let end = start + 2 * (u32::from(head & 7) + 1);
        let (delta, this_has_line) = match code {
            15 => (0, false),
            13 | 14 => (signed_varint(table, at + 1)?, true),
            10..=12 => (i32::from(code) - 10, true),
            _ => (0, true),
        };
        line += delta;
        if start <= offset && offset < end {
            return this_has_line.then_some(line);
        }
        start = end;
        at += 1;
        while at < table.len() && table[at] & 0x80 == 0 {
            at += 1;
        }
    }
    None
}

/// A varint of 6-bit groups, low first, bit 6 meaning "more".
fn varint(table: &[u8], mut at: usize) -> Option<u32> {
    let mut value = 0u32;
    let mut shift = 0u32;
    loop {
        let byte = *table.get(at)?;
        at += 1;
        value |= u32::from(byte & 63).checked_shl(shift)?;
        if byte & 64 == 0 {
            return Some(value);
        }
        shift += 6;
        if shift > 30 {
            return None;
        }
    }
}

/// A varint whose low bit is the sign.
fn signed_varint(table: &[u8], at: usize) -> Option<i32> {
    let v = varint(table, at)?;
    let magnitude = (v >> 1) as i32;
    Some(if v & 1 != 0 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests;
