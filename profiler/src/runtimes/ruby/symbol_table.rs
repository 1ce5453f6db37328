//! Finding the VM's symbol table (`ruby_global_symbols`, which names a C method's ID) in a
//! build that does not export it (Debian's libruby has `.dynsym` only): its address is read
//! off the code of `rb_id2str`, an exported function that looks IDs up in it.
//!
//! x86-64 gcc builds (3.1.2 on Debian) compile `rb_id2str` to the serial computation
//! (`cmp $tLAST_OP_ID,%rdi`, where the other half of the answer is) and a tail jump to
//! `lookup_id_str`, which compares the serial with `last_id` (`cmp %edi,last_id(%rip)`) and
//! loads `ids` (`mov ids(%rip),%rdi`), 16 bytes further. Both RIP-relative operands are
//! looked for and must be 16 bytes apart, or nothing is taken.

/// Bytes of each function read.
const WINDOW: u64 = 96;

/// What the code says: the symbol table's address (file virtual address) and, when the
/// compare is there, `tLAST_OP_ID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FromCode {
    pub symbols: u64,
    pub last_op_id: Option<u64>,
}

/// Reads `rb_id2str` at `id2str` (and the function it jumps to) through `read(vaddr, len)`.
pub fn from_id2str(read: impl Fn(u64, u64) -> Option<Vec<u8>>, id2str: u64) -> Option<FromCode> {
    let code = read(id2str, 32)?;
    // cmp $imm32,%rdi
    let last_op_id = (0..code.len()).find_map(|i| {
        let c = &code[i..];
        (c.len() >= 7 && c[..3] == [0x48, 0x81, 0xff]).then(|| u64::from(le32(&c[3..])))
    });
    // jmp rel32: the tail call to lookup_id_str.
    let jmp = (0..code.len()).find(|&i| code[i] == 0xe9 && i + 5 <= code.len())?;
    let target = rip_target(id2str + jmp as u64, &code[jmp..], 1, 5);
    let body = read(target, WINDOW)?;
    // cmp %r32,disp32(%rip): 39 /r with mod 00, r/m 101.
    let cmp = (0..body.len()).find(|&i| {
        let c = &body[i..];
        c.len() >= 6 && c[0] == 0x39 && c[1] & 0xc7 == 0x05
    })?;
    let last_id = rip_target(target + cmp as u64, &body[cmp..], 2, 6);
    // mov disp32(%rip),%r64: REX.W (48 or 4c) 8b /r, after the compare.
    let mov = (cmp + 6..body.len()).find(|&i| {
        let c = &body[i..];
        c.len() >= 7 && (c[0] == 0x48 || c[0] == 0x4c) && c[1] == 0x8b && c[2] & 0xc7 == 0x05
    })?;
    let ids = rip_target(target + mov as u64, &body[mov..], 3, 7);
    (ids == last_id + 16).then_some(FromCode {
        symbols: last_id,
        last_op_id,
    })
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// The target of a RIP-relative operand: the instruction at `insn`, `len` bytes long, with
/// its disp32 at byte `disp` of `c` (the instruction's bytes).
fn rip_target(insn: u64, c: &[u8], disp: usize, len: usize) -> u64 {
    (insn + len as u64).wrapping_add_signed(i64::from(le32(&c[disp..]) as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's libruby-3.1.so.3.1.2, as objdump shows it: rb_id2str at 0x208e80 jumps to
    /// 0x206c10, which compares `last_id` at 0x3af1c0 and loads `ids` from 0x3af1d0.
    fn debian_3_1_2(addr: u64, len: u64) -> Option<Vec<u8>> {
        let id2str: &[u8] = &[
            0x48, 0x89, 0xf8, 0x48, 0xc1, 0xe8, 0x04, 0x48, 0x81, 0xff, 0xa9, 0x00, 0x00, 0x00,
            0x0f, 0x47, 0xf8, 0x31, 0xf6, 0xe9, 0x78, 0xdd, 0xff, 0xff,
        ];
        let mut lookup = vec![0x90u8; 0x39];
        // 206c1f: mov 0x1a79ca(%rip),%rbp (a GOT load: not the table).
        lookup[0x0f..0x16].copy_from_slice(&[0x48, 0x8b, 0x2d, 0xca, 0x79, 0x1a, 0x00]);
        lookup.extend_from_slice(&[0x39, 0x3d, 0x71, 0x85, 0x1a, 0x00, 0x72, 0x5f]);
        lookup.extend_from_slice(&[0x48, 0x8b, 0x3d, 0x78, 0x85, 0x1a, 0x00]);
        let bytes = match addr {
            0x208e80 => id2str,
            0x206c10 => &lookup[..],
            _ => return None,
        };
        let mut out = bytes.to_vec();
        out.resize(len as usize, 0xcc);
        Some(out)
    }

    #[test]
    fn debian_3_1_2_symbol_table_from_rb_id2str() {
        assert_eq!(
            from_id2str(debian_3_1_2, 0x208e80),
            Some(FromCode {
                symbols: 0x3af1c0,
                last_op_id: Some(0xa9),
            })
        );
    }

    #[test]
    fn other_code_gives_nothing() {
        assert_eq!(
            from_id2str(|_, len| Some(vec![0x90; len as usize]), 0x1000),
            None
        );
        // The loads not 16 bytes apart: not taken.
        let shifted = |addr: u64, len: u64| {
            let mut b = debian_3_1_2(addr, len)?;
            if addr == 0x206c10 {
                b[0x39 + 2] = 0x79;
            }
            Some(b)
        };
        assert_eq!(from_id2str(shifted, 0x208e80), None);
    }
}
