//! V8's source position tables (code offset -> script offset) and a script's line ends.

/// One entry of a source position table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourcePosition {
    pub code_offset: u32,
    /// Characters (UTF-16 units) from the script's start.
    pub script_offset: u32,
    pub inlining_id: u32,
    pub statement: bool,
}

/// V8's source position table: pairs of zigzag VLQ deltas (code offset, negative for an
/// expression position; packed source position: bit 0 external, bits 1..31 script offset
/// + 1, bits 31..47 inlining id).
pub fn decode_source_positions(bytes: &[u8]) -> Vec<SourcePosition> {
    let mut out = Vec::new();
    let mut at = 0usize;
    // Deltas start from the function entry's offset (V8's kFunctionEntryBytecodeOffset,
    // -1), whose entry comes first: checked against `node --print-bytecode`'s listing.
    let (mut code, mut packed) = (-1i64, 0i64);
    while at < bytes.len() {
        let Some(dc) = vlq(bytes, &mut at) else { break };
        let Some(dp) = vlq(bytes, &mut at) else { break };
        let statement = dc >= 0;
        code += if statement { dc } else { -dc - 1 };
        packed += dp;
        let p = packed as u64;
        let script = ((p >> 1) & ((1 << 30) - 1)) as i64 - 1;
        if p & 1 != 0 || script < 0 || code < 0 {
            // External (wasm) positions and "no position" carry no script offset.
            continue;
        }
        out.push(SourcePosition {
            code_offset: code as u32,
            script_offset: script as u32,
            inlining_id: ((p >> 31) & 0xffff) as u32,
            statement,
        });
    }
    out
}

/// A zigzag VLQ (7 bits a byte, high bit "more").
fn vlq(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let mut v: u64 = 0;
    let mut shift = 0;
    loop {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
        if shift > 63 {
            return None;
        }
    }
    Some(((v >> 1) as i64) ^ -((v & 1) as i64))
}

/// The script offset of the last statement at or before `offset` (as V8's
/// `AbstractCode::SourceStatementPosition` picks it).
pub fn position_at(entries: &[SourcePosition], offset: u32) -> Option<u32> {
    entries
        .iter()
        .take_while(|e| e.code_offset <= offset)
        .filter(|e| e.statement)
        .last()
        .map(|e| e.script_offset)
}

/// Line ends as V8 counts them: the offset of each `\n` or `\r` (not a `\r\n`'s `\n`), in
/// UTF-16 units, plus the end of the text.
pub fn count_line_ends(text: &str) -> Vec<u32> {
    let units: Vec<u16> = text.encode_utf16().collect();
    let mut ends = Vec::new();
    for (i, &c) in units.iter().enumerate() {
        let cr_lf = c == u16::from(b'\n') && i > 0 && units[i - 1] == u16::from(b'\r');
        if (c == u16::from(b'\n') && !cr_lf) || c == u16::from(b'\r') {
            ends.push(i as u32);
        }
    }
    ends.push(units.len() as u32);
    ends
}

/// The 1-based line holding script offset `pos`.
pub fn line_of(ends: &[u32], pos: u32) -> u32 {
    ends.partition_point(|&e| e < pos) as u32 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zigzag(v: i64, out: &mut Vec<u8>) {
        let mut u = ((v << 1) ^ (v >> 63)) as u64;
        loop {
            let b = (u & 0x7f) as u8;
            u >>= 7;
            if u == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
    }

    #[test]
    fn source_positions_and_lines() {
        // (code offset, statement, script offset): as V8's builder encodes them.
        let entries = [
            (0, true, 10),
            (5, false, 14),
            (9, true, 300),
            (40, true, 20),
        ];
        let mut bytes = Vec::new();
        let (mut code, mut packed) = (-1i64, 0i64);
        for (c, stmt, s) in entries {
            let dc = c - code;
            code = c;
            zigzag(if stmt { dc } else { -dc - 1 }, &mut bytes);
            let p = (s + 1) << 1;
            zigzag(p - packed, &mut bytes);
            packed = p;
        }
        let got = decode_source_positions(&bytes);
        let want: Vec<(u32, bool, u32)> = got
            .iter()
            .map(|e| (e.code_offset, e.statement, e.script_offset))
            .collect();
        assert_eq!(
            want,
            [
                (0, true, 10),
                (5, false, 14),
                (9, true, 300),
                (40, true, 20)
            ]
        );
        assert_eq!(position_at(&got, 7), Some(10));
        assert_eq!(position_at(&got, 9), Some(300));
        assert_eq!(position_at(&got, 100), Some(20));

        let ends = count_line_ends("a\nbc\r\nd\re");
        assert_eq!(ends, [1, 4, 7, 9]);
        assert_eq!(line_of(&ends, 0), 1);
        assert_eq!(line_of(&ends, 1), 1);
        assert_eq!(line_of(&ends, 2), 2);
        assert_eq!(line_of(&ends, 6), 3);
        assert_eq!(line_of(&ends, 8), 4);
    }
}
