//! eBPF programs of the profiler. Keep them small and verifier-friendly: filtering, counting
//! and capture happen here, everything else (formatting, symbols, aggregation) in user space.
#![no_std]
#![no_main]
// The BPF target has atomic add but no compare-and-swap, so core's Atomic* types are not
// available; the intrinsic emits the BPF atomic add instruction directly.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod cgcount;
mod follow;
mod group;
mod offcpu;
mod record;
mod sampler;
mod unwind;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
