//! The line of an instruction, as `rb_iseq_line_no` finds it (iseq.c): the instruction's
//! position indexes the iseq's `insns_info` entries through a sorted `positions` array
//! (while compiling) or, once compiled (2.6+), the succinct bit-vector
//! `succ_index_table` that replaced it; the entry holds the line.

use super::layout::Layout;
use crate::runtimes::shared::memory::{Memory, ReadError};

/// Most `insns_info` entries read for a binary search (a method of ~100k instructions).
const MAX_POSITIONS: u64 = 1 << 17;

/// `IMMEDIATE_TABLE_SIZE`: positions below it are ranked by the immediate part (six words
/// of nine 7-bit ranks), the others by 512-bit blocks after it.
const IMMEDIATE_TABLE_SIZE: u64 = 54;
/// `sizeof(imm_part)`: the blocks start after it whatever the table's size.
const IMMEDIATE_BYTES: u64 = IMMEDIATE_TABLE_SIZE / 9 * 8;
/// `struct succ_dict_block`: `rank` (4 bytes, padded to 8), `small_block_ranks` (seven 9-bit
/// ranks), `bits[8]`.
const BLOCK_BYTES: u64 = 80;

/// `insns_info` of one iseq body, as read from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsnsInfo {
    /// The `iseq_insn_info_entry` array.
    pub body: u64,
    /// The positions array, or 0 (freed once the succinct table is built).
    pub positions: u64,
    pub size: u32,
    pub succ_index_table: u64,
}

/// The line of the instruction at position `pos` (in VALUEs from `iseq_encoded`); `None`
/// when the iseq has no line entries.
pub fn line_at(
    mem: &dyn Memory,
    layout: &Layout,
    info: &InsnsInfo,
    pos: u64,
) -> Result<Option<i32>, ReadError> {
    let size = u64::from(info.size);
    let index = match size {
        0 => return Ok(None),
        1 => 0,
        _ if info.positions != 0 => binary_search(mem, info, pos)?,
        _ if info.succ_index_table != 0 => {
            let rank = succ_index_lookup(mem, info.succ_index_table, pos)?;
            rank.checked_sub(1).ok_or_else(|| {
                ReadError::invalid("succ_index_table", info.succ_index_table, "rank 0")
            })?
        }
        _ => {
            return Err(ReadError::invalid(
                "insns_info",
                info.body,
                "neither positions nor succ_index_table",
            ));
        }
    };
    if index >= size {
        return Err(ReadError::invalid(
            "insns_info",
            info.body,
            format!("entry {index} of {size}"),
        ));
    }
    let at =
        info.body + index * u64::from(layout.insn_info_size) + u64::from(layout.insn_info_line_no);
    let mut line = [0u8; 4];
    mem.read(at, &mut line)?;
    Ok(Some(i32::from_le_bytes(line)))
}

/// `get_insn_info_binary_search`: the last entry whose position is at most `pos` (entry 0
/// when none is).
fn binary_search(mem: &dyn Memory, info: &InsnsInfo, pos: u64) -> Result<u64, ReadError> {
    let size = u64::from(info.size);
    if size > MAX_POSITIONS {
        return Err(ReadError::invalid(
            "insns_info.positions",
            info.positions,
            format!("{size} entries"),
        ));
    }
    let mut bytes = vec![0u8; size as usize * 4];
    mem.read(info.positions, &mut bytes)?;
    let positions: Vec<u64> = bytes
        .chunks_exact(4)
        .map(|c| u64::from(u32::from_le_bytes(c.try_into().unwrap_or_default())))
        .collect();
    // Entries 1.. are searched; entry 0 is the answer below the first of them.
    let after = positions[1..].partition_point(|&p| p <= pos);
    Ok(after as u64)
}

/// `succ_index_lookup`: how many entries start at or before `pos` (the rank of `pos` in the
/// bit-vector of entry starts).
pub fn succ_index_lookup(mem: &dyn Memory, table: u64, pos: u64) -> Result<u64, ReadError> {
    if pos < IMMEDIATE_TABLE_SIZE {
        let word = mem.read_u64(table + pos / 9 * 8)?;
        return Ok((word >> (7 * (pos % 9))) & 0x7f);
    }
    let x = pos - IMMEDIATE_TABLE_SIZE;
    let block = table + IMMEDIATE_BYTES + (x / 512) * BLOCK_BYTES;
    let mut b = [0u8; BLOCK_BYTES as usize];
    mem.read(block, &mut b)?;
    let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
    let rank = u64::from(u32::from_le_bytes(b[..4].try_into().unwrap_or_default()));
    let bit = x % 512;
    let small = (bit / 64) as usize;
    let small_rank = if small == 0 {
        0
    } else {
        (word(1) >> (9 * (small - 1))) & 0x1ff
    };
    let bits = word(2 + small);
    let popcount = u64::from((bits << (63 - bit % 64)).count_ones());
    Ok(rank + small_rank + popcount)
}

#[cfg(test)]
pub(crate) mod fake {
    //! `succ_index_table_create` (iseq.c) in Rust, to build tables for tests.

    use super::*;

    /// The bytes of the table for entry starts `data` (sorted), `max_pos` the iseq's size.
    pub fn succ_table(max_pos: u64, data: &[u64]) -> Vec<u8> {
        let imm_size = if max_pos < IMMEDIATE_TABLE_SIZE {
            max_pos + 8
        } else {
            IMMEDIATE_TABLE_SIZE
        } / 9;
        let succ_size = if max_pos < IMMEDIATE_TABLE_SIZE {
            0
        } else {
            max_pos - IMMEDIATE_TABLE_SIZE + 511
        } / 512;
        let mut out = vec![0u8; (IMMEDIATE_BYTES + succ_size * BLOCK_BYTES) as usize];
        let mut r = 0usize;
        for j in 0..imm_size {
            let mut word = 0u64;
            for i in 0..9 {
                if r < data.len() && data[r] == j * 9 + i {
                    r += 1;
                }
                word |= (r as u64) << (7 * i);
            }
            out[(j * 8) as usize..(j * 8 + 8) as usize].copy_from_slice(&word.to_le_bytes());
        }
        for k in 0..succ_size {
            let at = (IMMEDIATE_BYTES + k * BLOCK_BYTES) as usize;
            out[at..at + 4].copy_from_slice(&(r as u32).to_le_bytes());
            let mut small_ranks = 0u64;
            let mut small_rank = 0u64;
            for j in 0..8u64 {
                if j > 0 {
                    small_ranks |= small_rank << (9 * (j - 1));
                }
                let mut bits = 0u64;
                for i in 0..64 {
                    if r < data.len() && data[r] == k * 512 + j * 64 + i + IMMEDIATE_TABLE_SIZE {
                        bits |= 1 << i;
                        r += 1;
                    }
                }
                let b = at + 16 + 8 * j as usize;
                out[b..b + 8].copy_from_slice(&bits.to_le_bytes());
                small_rank += u64::from(bits.count_ones());
            }
            out[at + 8..at + 16].copy_from_slice(&small_ranks.to_le_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::{
        ruby::layout::{Version, for_version},
        shared::memory::FakeMemory,
    };

    /// Entry starts spread over the immediate part and three 512-bit blocks, with
    /// neighbours, gaps and block edges.
    const STARTS: &[u64] = &[
        0, 2, 8, 9, 53, 54, 55, 117, 118, 565, 566, 600, 1077, 1078, 1200, 1600,
    ];
    const MAX_POS: u64 = 1700;

    /// The entry of `pos` by definition: the last start at or before it.
    fn expected(pos: u64) -> u64 {
        STARTS.iter().rposition(|&s| s <= pos).unwrap() as u64
    }

    #[test]
    fn the_succinct_table_ranks_every_position() {
        let mut m = FakeMemory::default();
        m.put(0x1000, &fake::succ_table(MAX_POS, STARTS));
        for pos in 0..MAX_POS {
            let rank = succ_index_lookup(&m, 0x1000, pos).unwrap();
            assert_eq!(rank - 1, expected(pos), "pos {pos}");
        }
    }

    /// Lines through each of the three ways, on a 2.x (8-byte entries) and a 3.x (12-byte)
    /// layout.
    #[test]
    fn lines_by_size_positions_and_succinct_table() {
        for v in [Version::new(2, 7, 0), Version::new(3, 3, 0)] {
            let layout = for_version(v).unwrap();
            let mut m = FakeMemory::default();
            let entry = usize::from(layout.insn_info_size);
            let mut entries = vec![0u8; entry * STARTS.len()];
            for i in 0..STARTS.len() {
                let line = 100 + 10 * i as i32;
                entries[i * entry..i * entry + 4].copy_from_slice(&line.to_le_bytes());
            }
            m.put(0x1000, &entries);
            let positions: Vec<u8> = STARTS
                .iter()
                .flat_map(|&s| (s as u32).to_le_bytes())
                .collect();
            m.put(0x4000, &positions);
            m.put(0x8000, &fake::succ_table(MAX_POS, STARTS));
            let size = STARTS.len() as u32;
            let succinct = InsnsInfo {
                body: 0x1000,
                positions: 0,
                size,
                succ_index_table: 0x8000,
            };
            let searched = InsnsInfo {
                positions: 0x4000,
                ..succinct
            };
            for pos in 0..MAX_POS {
                let want = Some(100 + 10 * expected(pos) as i32);
                assert_eq!(line_at(&m, &layout, &succinct, pos).unwrap(), want, "{pos}");
                assert_eq!(line_at(&m, &layout, &searched, pos).unwrap(), want, "{pos}");
            }
            let one = InsnsInfo {
                size: 1,
                ..succinct
            };
            assert_eq!(line_at(&m, &layout, &one, 900).unwrap(), Some(100));
            let none = InsnsInfo {
                size: 0,
                ..succinct
            };
            assert_eq!(line_at(&m, &layout, &none, 900).unwrap(), None);
        }
    }
}
