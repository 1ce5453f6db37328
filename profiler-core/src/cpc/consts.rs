//! libcpc's constants, with libcpc's values where they are public.

/// `CPC_VER_CURRENT`: the only version `Cpc::open` accepts.
pub const VER_CURRENT: u32 = 2;

/// Request flags (`cpc_set_add_request`).
pub mod request {
    /// `CPC_OVF_NOTIFY_EMT`: notify the bound thread when the counter overflows.
    pub const OVF_NOTIFY_EMT: u32 = 0x1;
    /// `CPC_COUNT_USER`: count in user mode.
    pub const COUNT_USER: u32 = 0x2;
    /// `CPC_COUNT_SYSTEM`: count in kernel mode.
    pub const COUNT_SYSTEM: u32 = 0x4;
    /// `CPC_COUNT_HV`: count in hypervisor mode.
    pub const COUNT_HV: u32 = 0x8;
    /// `CPC_HW_SMPL` (Solaris 11; its value is not public, this one is ours).
    pub const HW_SMPL: u32 = 0x10;
    /// Every flag this library knows.
    pub const ALL: u32 = OVF_NOTIFY_EMT | COUNT_USER | COUNT_SYSTEM | COUNT_HV | HW_SMPL;
}

/// Bind flags.
pub mod bind {
    /// `CPC_BIND_LWP_INHERIT`: threads created later inherit the binding.
    pub const LWP_INHERIT: u32 = 0x1;
}

/// `cpc_caps` bits.
pub mod caps {
    /// `CPC_CAP_OVERFLOW_INTERRUPT`: counters can interrupt on overflow.
    pub const OVERFLOW_INTERRUPT: u32 = 0x1;
    /// `CPC_CAP_OVERFLOW_PRECISE`: the overflowing counter is known.
    pub const OVERFLOW_PRECISE: u32 = 0x2;
    /// `CPC_CAP_SMPL` (Solaris 11; value ours): hardware sampling (PEBS-like) exists.
    pub const SMPL: u32 = 0x4;
    /// `CPC_CAP_OVERFLOW_SMPL` (Solaris 11; value ours).
    pub const OVERFLOW_SMPL: u32 = 0x8;
}

/// `CPC_MAX_EVENT_LEN`.
pub const MAX_EVENT_LEN: usize = 512;
/// Longest attribute name.
pub const MAX_ATTR_LEN: usize = 32;
/// Most attributes per request.
pub const MAX_ATTRS: usize = 50;
/// Most requests per set (and never more than `npic`).
pub const MAX_REQUESTS: usize = 100;
