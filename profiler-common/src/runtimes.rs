//! How a runtime's frame is written among a walk's user words, whichever runtime wrote it.
//!
//! A runtime frame is 1 to 4 words; the first says that it is one, whose it is and how long:
//!
//! ```text
//! bit 63      RT_FRAME (native user addresses never have it: they are below 2^48)
//! bits 56-62  the runtime's slot (1..127, `slots`)
//! bits 54-55  the frame's length in words, minus one
//! bits 48-53  six bits of the runtime's own (HotSpot: compiled, top)
//! bits 0-47   payload: an address in the process (code object, JSFunction, Method*, ...)
//! ```
//!
//! The other words are the runtime's own. User space reads the slot and length without
//! knowing the runtime, and asks the slot's runtime to name the words: a new runtime takes a
//! slot, never a share of bits other runtimes use.

/// The first word of a runtime's frame has this bit.
pub const RT_FRAME: u64 = 1 << 63;

/// Each runtime's slot: which runtime a frame is of (and, later, its programs' index).
pub mod slots {
    pub const PYTHON: u8 = 1;
    pub const JAVA: u8 = 2;
    pub const JS: u8 = 3;
    pub const RUBY: u8 = 4;
}

/// Most words one runtime frame takes.
pub const RT_MAX_LEN: usize = 4;

const SLOT_SHIFT: u32 = 56;
const LEN_SHIFT: u32 = 54;
const FLAGS_SHIFT: u32 = 48;
/// The payload bits: an x86-64 or arm64 user address (LA57's 57-bit addresses do not fit;
/// the runtimes' heaps are not mapped there by default).
pub const RT_PAYLOAD: u64 = (1 << FLAGS_SHIFT) - 1;

/// The first word of a frame of runtime `slot`, `len` words long (1..=4), with the
/// runtime's own `flags` (6 bits) and `payload` (48 bits; higher bits are dropped).
pub const fn rt_word(slot: u8, len: u8, flags: u8, payload: u64) -> u64 {
    RT_FRAME
        | (((slot & 0x7f) as u64) << SLOT_SHIFT)
        | ((((len.wrapping_sub(1)) & 3) as u64) << LEN_SHIFT)
        | (((flags & 0x3f) as u64) << FLAGS_SHIFT)
        | (payload & RT_PAYLOAD)
}

/// The runtime slot of a frame's first word; 0 for a native address.
pub const fn rt_slot(word: u64) -> u8 {
    if word & RT_FRAME == 0 {
        0
    } else {
        ((word >> SLOT_SHIFT) & 0x7f) as u8
    }
}

/// How many words the frame starting with `word` takes (1 for a native address).
pub const fn rt_len(word: u64) -> usize {
    if word & RT_FRAME == 0 {
        1
    } else {
        ((word >> LEN_SHIFT) & 3) as usize + 1
    }
}

/// The runtime's own six bits of a frame's first word.
pub const fn rt_flags(word: u64) -> u8 {
    ((word >> FLAGS_SHIFT) & 0x3f) as u8
}

/// The payload (an address) of a frame's first word.
pub const fn rt_payload(word: u64) -> u64 {
    word & RT_PAYLOAD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_word_keeps_each_field_apart() {
        let w = rt_word(slots::JAVA, 2, 0b11, 0x7f12_3456_7000);
        assert_eq!(rt_slot(w), slots::JAVA);
        assert_eq!(rt_len(w), 2);
        assert_eq!(rt_flags(w), 0b11);
        assert_eq!(rt_payload(w), 0x7f12_3456_7000);
        let w = rt_word(127, 4, 0x3f, u64::MAX);
        assert_eq!((rt_slot(w), rt_len(w), rt_flags(w)), (127, 4, 0x3f));
        assert_eq!(rt_payload(w), RT_PAYLOAD);
        let w = rt_word(slots::RUBY, 1, 0, 0);
        assert_eq!((rt_slot(w), rt_len(w)), (slots::RUBY, 1));
    }

    #[test]
    fn native_addresses_are_not_runtime_frames() {
        for a in [0, 0x40_1000, 0x7fff_ffff_f000u64, 0xffff_ffff_ffffu64] {
            assert_eq!((rt_slot(a), rt_len(a)), (0, 1));
        }
    }

    #[test]
    fn slots_are_distinct_and_nonzero() {
        let all = [slots::PYTHON, slots::JAVA, slots::JS, slots::RUBY];
        for (i, a) in all.iter().enumerate() {
            assert!(*a != 0 && *a < 128);
            assert!(!all[i + 1..].contains(a));
        }
    }
}
