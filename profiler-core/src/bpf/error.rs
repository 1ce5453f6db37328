//! The errors of loading, configuring and attaching the eBPF object's programs.

use aya::{EbpfError, maps::MapError, programs::ProgramError};

use crate::perf::PerfError;

#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error(
        "this binary was built without its eBPF object (AYA_BUILD_SKIP=1); rebuild after \
         `cargo xtask setup`"
    )]
    Stub,
    #[error("loading the eBPF object: {0}")]
    Load(#[from] EbpfError),
    #[error("eBPF program: {0}")]
    Program(#[from] ProgramError),
    #[error("eBPF map `{name}`: {source}")]
    Map {
        name: &'static str,
        source: MapError,
    },
    #[error("eBPF object has no {0}")]
    Missing(&'static str),
    #[error("attaching the eBPF program: {0}")]
    Attach(#[from] PerfError),
    #[error("the eBPF ring buffer: {0}")]
    Ring(std::io::Error),
    #[error("bpf(BPF_LINK_CREATE) for a perf event: {0}")]
    Link(std::io::Error),
    #[error("bpf(BPF_MAP_UPDATE_ELEM) of a perf event array: {0}")]
    Sibling(std::io::Error),
    #[error("ioctl(PERF_EVENT_IOC_SET_BPF): {0}")]
    SetBpf(std::io::Error),
    #[error(
        "{what} needs BPF attach cookies (bpf_get_attach_cookie, Linux 5.15 or newer); \
         this kernel ({release}) has none"
    )]
    NoAttachCookies { what: &'static str, release: String },
}
