//! HotSpot's compressed streams: UNSIGNED5 numbers (Pack200's encoding: a byte below 192
//! ends a number, up to 5 bytes of 6 more bits each; from 20.0.0+15 every byte is shifted by
//! one so that 0 never occurs), the line number table a ConstMethod keeps after its
//! bytecodes, and the scope records an nmethod's PcDescs point into.

/// Reads numbers from a compressed stream.
pub struct Stream<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Bytes excluded from the encoding (0 or 1).
    x: u8,
}

/// Raw bytes below this end a number.
const LOW: u32 = 192;
const MAX_BYTES: usize = 5;

impl<'a> Stream<'a> {
    pub fn new(bytes: &'a [u8], pos: usize, x: u8) -> Stream<'a> {
        Stream { bytes, pos, x }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// One UNSIGNED5 number; `None` past the end or on an excluded byte.
    pub fn uint(&mut self) -> Option<u32> {
        let mut sum = 0u32;
        for i in 0..MAX_BYTES {
            let raw = self.byte()?;
            let b = u32::from(raw.checked_sub(self.x)?);
            sum = sum.wrapping_add(b << (6 * i));
            // The end test is on the raw byte: `X + L` is 192 whatever `X` is.
            if u32::from(raw) < LOW {
                return Some(sum);
            }
        }
        Some(sum)
    }

    /// A signed number (zigzag: 0, -1, 1, -2, ... as 0, 1, 2, 3, ...).
    pub fn int(&mut self) -> Option<i32> {
        let v = self.uint()?;
        Some(((v >> 1) as i32) ^ -((v & 1) as i32))
    }
}

/// (bci, line) pairs of a compressed LineNumberTable, in the order HotSpot wrote them (the
/// class file's order: not always sorted by bci). Stops at the 0 terminator or after
/// `max` pairs.
pub fn line_table(bytes: &[u8], x: u8, max: usize) -> Option<Vec<(u32, u32)>> {
    let mut s = Stream::new(bytes, 0, x);
    let (mut bci, mut line) = (0i64, 0i64);
    let mut out = Vec::new();
    while out.len() < max {
        match s.byte()? {
            0 => return Some(out),
            0xff => {
                bci += i64::from(s.int()?);
                line += i64::from(s.int()?);
            }
            b => {
                bci += i64::from(b >> 3);
                line += i64::from(b & 7);
            }
        }
        out.push((u32::try_from(bci).ok()?, u32::try_from(line).ok()?));
    }
    None
}

/// The line of `bci`: the entry starting at the greatest bci not above it (javac's tables
/// are ranges from each start_pc to the next).
pub fn line_at(table: &[(u32, u32)], bci: u32) -> Option<u32> {
    table
        .iter()
        .filter(|(start, _)| *start <= bci)
        .max_by_key(|(start, _)| *start)
        .map(|(_, line)| *line)
}

/// One scope of a PcDesc: the method (an index into the nmethod's metadata, 1-based; 0 for
/// none) and the bci, and where the caller's scope is (0: none, the outermost method).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope {
    pub sender: u32,
    pub method_index: u32,
    /// `InvocationEntryBci` (-1) for "at the method's entry".
    pub bci: i32,
}

/// The scope record at `at` in an nmethod's scopes data: sender offset, method index, and
/// the bci stored plus one (so that -1 encodes as 0).
pub fn scope_at(data: &[u8], at: u32, x: u8) -> Option<Scope> {
    let mut s = Stream::new(data, at as usize, x);
    let sender = s.uint()?;
    let method_index = s.uint()?;
    let bci = s.uint()? as i32 - 1;
    Some(Scope {
        sender,
        method_index,
        bci,
    })
}

/// The scope chain starting at `at`, innermost first (at most `max`: a loop in garbage stops).
pub fn scope_chain(data: &[u8], at: u32, x: u8, max: usize) -> Option<Vec<Scope>> {
    let mut out = Vec::new();
    let mut at = at;
    while at != 0 {
        if out.len() == max {
            return None;
        }
        let s = scope_at(data, at, x)?;
        out.push(s);
        at = s.sender;
    }
    Some(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// HotSpot's writer, for building streams in tests.
    pub fn put_uint(out: &mut Vec<u8>, x: u8, v: u32) {
        let low = LOW - u32::from(x);
        let mut sum = v;
        for _ in 0..MAX_BYTES - 1 {
            if sum < low {
                break;
            }
            out.push((low + (sum - low) % 64 + u32::from(x)) as u8);
            sum = (sum - low) >> 6;
        }
        out.push((sum + u32::from(x)) as u8);
    }

    pub fn put_int(out: &mut Vec<u8>, x: u8, v: i32) {
        put_uint(out, x, ((v << 1) ^ (v >> 31)) as u32);
    }

    #[test]
    fn unsigned5_round_trips() {
        for x in [0, 1] {
            for v in [0, 1, 190, 191, 192, 1000, 12_345, 1 << 20, u32::MAX >> 1] {
                let mut b = Vec::new();
                put_uint(&mut b, x, v);
                if x == 1 {
                    assert!(!b.contains(&0), "{v}: {b:?}");
                }
                let mut s = Stream::new(&b, 0, x);
                assert_eq!(s.uint(), Some(v), "x {x}, {b:?}");
                assert_eq!(s.pos(), b.len());
            }
        }
        // By hand: 1000 = 232 + 12·64 (X = 0); X = 1 shifts both bytes up by one.
        let mut b = Vec::new();
        put_uint(&mut b, 0, 1000);
        assert_eq!(b, [232, 12]);
        b.clear();
        put_uint(&mut b, 1, 1000);
        assert_eq!(b, [233, 13]);
        assert_eq!(Stream::new(&[0, 5], 0, 1).uint(), None);
        for v in [0, -1, 1, -1000, 70_000] {
            let mut b = Vec::new();
            put_int(&mut b, 1, v);
            assert_eq!(Stream::new(&b, 0, 1).int(), Some(v));
        }
    }

    #[test]
    fn line_tables_short_and_escaped() {
        // (0, 5) short; (2, 6) short; (40, 3): escape with deltas +38, -3; then the end.
        for x in [0, 1] {
            let mut b = vec![0x05, (2 << 3) | 1, 0xff];
            put_int(&mut b, x, 38);
            put_int(&mut b, x, -3);
            b.push(0);
            let t = line_table(&b, x, 100).expect("terminated");
            assert_eq!(t, [(0, 5), (2, 6), (40, 3)]);
            assert_eq!(line_at(&t, 0), Some(5));
            assert_eq!(line_at(&t, 39), Some(6));
            assert_eq!(line_at(&t, 41), Some(3));
            // No terminator within the bound: refused.
            assert_eq!(line_table(&b[..b.len() - 1], x, 100), None);
            assert_eq!(line_table(&b, x, 2), None);
        }
        // Unsorted tables (a loop's condition after its body) pick the greatest start ≤ bci.
        assert_eq!(line_at(&[(0, 10), (20, 12), (8, 11)], 9), Some(11));
        assert_eq!(line_at(&[(4, 10)], 3), None);
    }

    #[test]
    fn scope_chains_end_at_sender_zero() {
        for x in [0, 1] {
            // Offset 0 is the null scope; outer at 1: method 2 at bci 14; inner: method 1 at
            // entry (-1), its sender the outer.
            let mut d = vec![0u8];
            let outer = d.len() as u32;
            for v in [0, 2, 15] {
                put_uint(&mut d, x, v);
            }
            let inner = d.len() as u32;
            for v in [outer, 1, 0] {
                put_uint(&mut d, x, v);
            }
            let chain = scope_chain(&d, inner, x, 8).expect("chain");
            assert_eq!(
                chain,
                [
                    Scope {
                        sender: outer,
                        method_index: 1,
                        bci: -1
                    },
                    Scope {
                        sender: 0,
                        method_index: 2,
                        bci: 14
                    },
                ]
            );
            assert_eq!(scope_chain(&d, inner, x, 1), None);
        }
    }
}
