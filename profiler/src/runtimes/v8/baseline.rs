//! Sparkplug (baseline) frames: the bytecode a PC in baseline code runs, so that the frame
//! gets the line of the statement it is in, as an interpreted frame does.
//!
//! Baseline code keeps no bytecode offset in its frame (that slot holds the feedback vector).
//! V8 maps a PC back through the code's bytecode offset table: one unsigned VLQ per
//! bytecode, the length of its machine code, after one for the prologue. Which bytecode the
//! n-th entry is needs the bytecodes' sizes, which V8 exports in its own binary
//! (`Bytecodes::kBytecodeSizes`): read from there, they are this build's, whatever bytecodes
//! it has.

/// The symbol of V8's `Bytecodes::kBytecodeSizes`: `uint8_t[3][kBytecodeCount]`, the size
/// of each bytecode with its operands at each operand scale (single, double, quadruple).
pub const SIZES_SYMBOL: &str = "_ZN2v88internal11interpreter9Bytecodes14kBytecodeSizesE";

/// Bytecodes this many or more are not a V8's (198 in 10.2 and 11.3).
const MAX_BYTECODES: usize = 512;

/// One build's bytecode sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BytecodeSizes {
    table: Vec<u8>,
    count: usize,
}

impl BytecodeSizes {
    /// From the bytes of `kBytecodeSizes`; `None` unless they are three equal rows.
    pub fn new(table: Vec<u8>) -> Option<BytecodeSizes> {
        let count = table.len() / 3;
        (count > 4 && count < MAX_BYTECODES && table.len() == 3 * count)
            .then_some(BytecodeSizes { table, count })
    }

    /// The size of the bytecode at `at` in `code`, with its scaling prefix (V8's first four
    /// bytecodes: Wide and ExtraWide, and their DebugBreak twins, scale the next one's
    /// operands by 2 and 4).
    pub fn size_at(&self, code: &[u8], at: usize) -> Option<usize> {
        let first = usize::from(*code.get(at)?);
        let (scale, prefix) = match first {
            0 | 2 => (1, 1),
            1 | 3 => (2, 1),
            _ => (0, 0),
        };
        let bytecode = if prefix == 0 {
            first
        } else {
            usize::from(*code.get(at + 1)?)
        };
        if bytecode >= self.count {
            return None;
        }
        match self.table[scale * self.count + bytecode] {
            0 => None,
            n => Some(prefix + usize::from(n)),
        }
    }
}

/// The bytecode offset that `pc_offset` (from the code's start) runs in baseline code whose
/// bytecode offset table is `table`, over `bytecodes`: `-1` in the prologue (V8's function
/// entry offset), `None` when the table or the bytecodes run out first. As V8's
/// `BytecodeOffsetIterator::AdvanceToPCOffset` counts, a bytecode's code is the range
/// (start, end]: a return address at the end of a call's code is still that call's.
pub fn bytecode_offset(
    table: &[u8],
    bytecodes: &[u8],
    sizes: &BytecodeSizes,
    pc_offset: u64,
) -> Option<i64> {
    let mut at = 0;
    let mut end = u64::from(vlq_unsigned(table, &mut at)?);
    let (mut offset, mut next) = (-1i64, 0usize);
    while end < pc_offset {
        end += u64::from(vlq_unsigned(table, &mut at)?);
        if next >= bytecodes.len() {
            return None;
        }
        offset = next as i64;
        next += sizes.size_at(bytecodes, next)?;
    }
    Some(offset)
}

/// An unsigned VLQ (V8's `VLQDecodeUnsigned`: 7 bits a byte, low group first, high bit
/// "more").
fn vlq_unsigned(bytes: &[u8], at: &mut usize) -> Option<u32> {
    let mut v: u64 = 0;
    let mut shift = 0;
    loop {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return u32::try_from(v).ok();
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vlq(mut v: u32, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    /// Five bytecodes: sizes at scale 1, 2, 4 (bytecode 0..3 are the prefixes).
    fn sizes() -> BytecodeSizes {
        let single = [1, 1, 1, 1, 1, 2, 3, 5];
        let double = [1, 1, 1, 1, 1, 3, 5, 9];
        let quadruple = [1, 1, 1, 1, 1, 5, 9, 17];
        BytecodeSizes::new([single, double, quadruple].concat()).unwrap()
    }

    #[test]
    fn sizes_with_and_without_prefixes() {
        let s = sizes();
        let code = [5, 0, 6, 1, 7, 4];
        assert_eq!(s.size_at(&code, 0), Some(2));
        assert_eq!(s.size_at(&code, 1), Some(1 + 5)); // Wide 6
        assert_eq!(s.size_at(&code, 3), Some(1 + 17)); // ExtraWide 7
        assert_eq!(s.size_at(&code, 5), Some(1));
        assert_eq!(s.size_at(&code, 6), None);
        assert_eq!(s.size_at(&[9], 0), None, "no such bytecode");
        assert_eq!(s.size_at(&[0], 0), None, "a prefix with nothing after it");
        assert!(BytecodeSizes::new(vec![1; 10]).is_none(), "not three rows");
    }

    #[test]
    fn a_pc_maps_to_the_bytecode_whose_code_holds_it() {
        let s = sizes();
        // Bytecodes at offsets 0 (size 2), 2 (Wide 6: 6 bytes), 8 (size 3), 11 (size 5).
        let bytecodes = [5, 9, 0, 6, 1, 2, 3, 4, 6, 1, 2, 7, 0, 0, 0, 0];
        // Prologue 10 bytes of machine code, then 4, 20, 7 and 3.
        let mut table = Vec::new();
        for n in [10, 4, 20, 7, 3] {
            vlq(n, &mut table);
        }
        let at = |pc| bytecode_offset(&table, &bytecodes, &s, pc);
        assert_eq!(at(0), Some(-1));
        assert_eq!(at(10), Some(-1), "the prologue's end is the prologue's");
        assert_eq!(at(11), Some(0));
        assert_eq!(at(14), Some(0));
        assert_eq!(at(15), Some(2));
        assert_eq!(at(34), Some(2), "a return address at a call's end");
        assert_eq!(at(35), Some(8));
        assert_eq!(at(41), Some(8));
        assert_eq!(at(44), Some(11));
        assert_eq!(at(45), None, "past the table");
        // A long machine-code run takes two VLQ bytes.
        let mut long = Vec::new();
        for n in [3, 300] {
            vlq(n, &mut long);
        }
        assert_eq!(long.len(), 3);
        assert_eq!(bytecode_offset(&long, &bytecodes, &s, 303), Some(0));
        assert_eq!(bytecode_offset(&long, &bytecodes, &s, 304), None);
    }
}
