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
    /// Go writes no frames (its code is native): goroutine labels (`crate::golabels`).
    pub const GO: u8 = 5;
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

/// Most code ranges one process's runtimes mark ([`RtProc`]).
pub const MAX_HOOK_RANGES: usize = 4;
/// Most marked native frames one walk keeps (a Ruby process has one per `vm_exec` call
/// on the stack: a method called from C and calling Ruby again nests one).
pub const MAX_MARKS: usize = 32;
/// Most words the runtimes' frames of one walk take (beside the native words).
pub const MAX_GROUP_WORDS: usize = 512;
/// Bytes of one runtime's per-process state ([`RtState`]).
pub const RT_STATE_BYTES: usize = 256;

/// One code range of a process whose native frames a runtime replaces with its own: when
/// the native walk leaves a frame whose PC is in it, the frame is marked for runtime `slot`
/// (CRuby's `rb_vm_exec`: each call of it runs a run of Ruby frames).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtRange {
    pub start: u64,
    pub end: u64,
    pub slot: u8,
    pub _pad: [u8; 7],
}

const _: () = assert!(core::mem::size_of::<RtRange>() == 24);

/// A process's runtime hooks (`RT_PROCS`, by tgid): what the native walk marks. A process
/// without an entry pays one missed lookup.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtProc {
    /// Ranges used in `ranges`.
    pub len: u32,
    /// Bit `1 << slot` for each runtime with ranges here.
    pub slots: u32,
    pub ranges: [RtRange; MAX_HOOK_RANGES],
}

const _: () = assert!(core::mem::size_of::<RtProc>() == 8 + 24 * MAX_HOOK_RANGES);

/// The key of a runtime's state for one process (`RT_STATE`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RtKey {
    pub tgid: u32,
    pub slot: u32,
}

const _: () = assert!(core::mem::size_of::<RtKey>() == 8);

/// A runtime's state for one process, opaque to everything but that runtime's walker,
/// which reads its own `#[repr(C)]` type from it (at most [`RT_STATE_BYTES`], asserted
/// where that type is defined).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtState {
    pub words: [u64; RT_STATE_BYTES / 8],
}

impl Default for RtState {
    fn default() -> Self {
        RtState {
            words: [0; RT_STATE_BYTES / 8],
        }
    }
}

const _: () = assert!(core::mem::size_of::<RtState>() == RT_STATE_BYTES);

/// A native frame the walk marked: the word at `index` of the walk is replaced by the
/// `group_len` words at `group_start` of the runtime's frames (none: it stays native).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtMark {
    pub index: u16,
    pub group_start: u16,
    pub group_len: u16,
    pub slot: u8,
    pub _pad: u8,
}

const _: () = assert!(core::mem::size_of::<RtMark>() == 8);

#[cfg(feature = "user")]
impl RtState {
    /// A runtime's own `#[repr(C)]` state (at most [`RT_STATE_BYTES`]: asserted) as the
    /// kernel's opaque one.
    pub fn of<T: aya::Pod>(value: &T) -> Self {
        const { assert!(core::mem::size_of::<T>() <= RT_STATE_BYTES) };
        let mut state = RtState::default();
        // SAFETY: `T` is Pod (plain bytes, no padding of unknown value) and no larger than
        // the state's words, which any bytes are valid for.
        unsafe {
            core::ptr::copy_nonoverlapping(
                (value as *const T).cast::<u8>(),
                state.words.as_mut_ptr().cast::<u8>(),
                core::mem::size_of::<T>(),
            );
        }
        state
    }
}

// SAFETY: `#[repr(C)]` with fixed-width integer fields and explicit padding (sizes asserted
// above), so every bit pattern is valid.
#[cfg(feature = "user")]
unsafe impl aya::Pod for RtProc {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for RtKey {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for RtState {}

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
