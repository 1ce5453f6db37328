//! perfmon.h's structures, flags and request codes, as C lays them out. The unit tests pin
//! them to the values `cc` computes from include/perfmon.h.

use std::ffi::c_int;

/// Counters per CPU, as the seed's driver has them.
pub const NPMC: usize = 2;

pub const PMCF_USR: u8 = 0x01;
pub const PMCF_OS: u8 = 0x02;
pub const PMCF_E: u8 = 0x04;
/// Pin control on P6: passed through to the PMU with the other hardware bits.
pub const PMCF_PC: u8 = 0x08;
pub const PMCF_INT: u8 = 0x10;
/// Extension: `pmc_event` is a Linux software event (a PERF_TYPE_SOFTWARE config).
pub const PMCF_SW: u8 = 0x20;
pub const PMCF_EN: u8 = 0x40;
pub const PMCF_INV: u8 = 0x80;
/// Flags only the driver sets; PMIOSETUP clears them.
pub const PMCF_SYS_FLAGS: u8 = PMCF_INT | PMCF_EN;

/// `struct pmc`: a counter number and the event-select register's low 32 bits (event, unit
/// mask, flags, counter mask; `pmc_val` in C).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pmc {
    pub num: c_int,
    pub event: u8,
    pub unit: u8,
    pub flags: u8,
    pub mask: u8,
}

/// `struct pmc_data`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmcData {
    pub num: c_int,
    pub _pad: u32,
    pub value: i64,
}

/// `struct pmc_tstamp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmcTstamp {
    pub rate: c_int,
    pub _pad: u32,
    pub value: i64,
}

const _: () = assert!(std::mem::size_of::<Pmc>() == 8);
const _: () = assert!(std::mem::size_of::<PmcData>() == 16);
const _: () = assert!(std::mem::size_of::<PmcTstamp>() == 16);

/// Linux's ioctl request encoding (asm-generic/ioctl.h): direction, size, type, number.
const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((b'5' as u32) << 8) | nr
}
const WRITE: u32 = 1;
const READ: u32 = 2;

/// The requests, by the low 32 bits of ioctl's `unsigned long` (the kernel's width too: a
/// program passing the code through an `int` sign-extends it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    Setup,
    Start,
    Stop,
    Read,
    Reset,
    Tstamp,
    Get,
}

pub const PMIOSETUP: u32 = ioc(WRITE, 1, std::mem::size_of::<Pmc>());
pub const PMIOSTART: u32 = ioc(WRITE, 2, std::mem::size_of::<c_int>());
pub const PMIOSTOP: u32 = ioc(WRITE, 3, std::mem::size_of::<c_int>());
pub const PMIOREAD: u32 = ioc(READ | WRITE, 4, std::mem::size_of::<PmcData>());
pub const PMIORESET: u32 = ioc(WRITE, 5, std::mem::size_of::<c_int>());
pub const PMIOTSTAMP: u32 = ioc(READ, 6, std::mem::size_of::<PmcTstamp>());
pub const PMIOGET: u32 = ioc(READ | WRITE, 7, std::mem::size_of::<Pmc>());

impl Request {
    pub fn decode(request: u64) -> Option<Self> {
        Some(match request as u32 {
            PMIOSETUP => Request::Setup,
            PMIOSTART => Request::Start,
            PMIOSTOP => Request::Stop,
            PMIOREAD => Request::Read,
            PMIORESET => Request::Reset,
            PMIOTSTAMP => Request::Tstamp,
            PMIOGET => Request::Get,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Request::Setup => "PMIOSETUP",
            Request::Start => "PMIOSTART",
            Request::Stop => "PMIOSTOP",
            Request::Read => "PMIOREAD",
            Request::Reset => "PMIORESET",
            Request::Tstamp => "PMIOTSTAMP",
            Request::Get => "PMIOGET",
        }
    }

    /// The requests the driver refuses (EPERM) on a descriptor opened without write access.
    pub fn needs_write(self) -> bool {
        matches!(
            self,
            Request::Setup | Request::Start | Request::Stop | Request::Reset
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_codes_are_what_cc_computes_from_the_header() {
        // `cc` on include/perfmon.h printed these (x86_64 and aarch64 share the encoding).
        assert_eq!(PMIOSETUP, 0x4008_3501);
        assert_eq!(PMIOSTART, 0x4004_3502);
        assert_eq!(PMIOSTOP, 0x4004_3503);
        assert_eq!(PMIOREAD, 0xc010_3504);
        assert_eq!(PMIORESET, 0x4004_3505);
        assert_eq!(PMIOTSTAMP, 0x8010_3506);
        assert_eq!(PMIOGET, 0xc008_3507);
    }

    #[test]
    fn requests_decode_from_the_low_32_bits() {
        assert_eq!(Request::decode(0xc010_3504), Some(Request::Read));
        // An int-typed code with bit 31 set, sign-extended to unsigned long.
        assert_eq!(Request::decode(0xffff_ffff_c010_3504), Some(Request::Read));
        assert_eq!(Request::decode(0x5401), None, "TCGETS is not ours");
        let writes: Vec<_> = [
            Request::Setup,
            Request::Start,
            Request::Stop,
            Request::Read,
            Request::Reset,
            Request::Tstamp,
            Request::Get,
        ]
        .into_iter()
        .filter(|r| r.needs_write())
        .map(Request::name)
        .collect();
        assert_eq!(writes, ["PMIOSETUP", "PMIOSTART", "PMIOSTOP", "PMIORESET"]);
    }

    #[test]
    fn pmc_fields_sit_where_the_c_union_puts_them() {
        let p = Pmc {
            num: 1,
            event: 0x43,
            unit: 0x0f,
            flags: PMCF_USR | PMCF_OS,
            mask: 2,
        };
        // SAFETY: Pmc is repr(C), 8 bytes of plain integers.
        let bytes: [u8; 8] = unsafe { std::mem::transmute(p) };
        assert_eq!(bytes, [1, 0, 0, 0, 0x43, 0x0f, 0x03, 2]);
        // Offsets of the 64-bit values, as in C.
        assert_eq!(std::mem::offset_of!(PmcData, value), 8);
        assert_eq!(std::mem::offset_of!(PmcTstamp, value), 8);
    }
}
