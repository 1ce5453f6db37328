//! eBPF programs of the profiler. Keep them small and verifier-friendly: filtering, counting
//! and capture happen here, everything else (formatting, symbols, aggregation) in user space.
#![no_std]
#![no_main]
// The BPF target has atomic add but no compare-and-swap, so core's Atomic* types are not
// available; the intrinsic emits the BPF atomic add instruction directly.
#![feature(core_intrinsics)]
#![allow(internal_features)]

use profiler_common::names;

/// Whether two names are the same (`str`'s `==` is not `const`).
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// User space finds maps and programs by the constants of `profiler_common::names`; aya's
/// attributes take literals only, so here a map's name is its static's identifier and a
/// program's its function's. These checks fail the build when a constant does not spell the
/// identifier it stands for (and profiler-core's `bpf::object` test checks the built object
/// against the whole list). Written after each `#[map]` static: `shared_name!(map NAME);`.
macro_rules! shared_name {
    (map $name:ident) => {
        const _: () = assert!(
            $crate::same(profiler_common::names::maps::$name, stringify!($name)),
            concat!(
                "profiler_common::names::maps::",
                stringify!($name),
                " is not the map's name"
            )
        );
    };
}

/// Each program: the function (after its attribute's expansion, as the kernel calls it) and
/// the constant that must spell its name.
macro_rules! program_names {
    ($($module:ident :: $function:ident = $constant:ident,)*) => {
        $(
            const _: (fn(*mut core::ffi::c_void) -> u32, ()) = (
                $module::$function,
                assert!(
                    $crate::same($crate::names::programs::$constant, stringify!($function)),
                    concat!("profiler_common::names::programs::", stringify!($constant),
                        " is not the name of ", stringify!($function))
                ),
            );
        )*
    };
}

mod cgcount;
mod follow;
mod golabels;
mod group;
mod hotspot;
mod offcpu;
mod python;
mod record;
mod regs;
mod rt;
mod ruby;
mod sampler;
mod unwind;
mod v8;

program_names! {
    sampler::sample = SAMPLE,
    record::record_sample = RECORD_SAMPLE,
    record::record_fp = RECORD_FP,
    follow::on_fork = ON_FORK,
    follow::on_exit = ON_EXIT,
    unwind::unwind_exec = UNWIND_EXEC,
    unwind::unwind_exit = UNWIND_EXIT,
    group::group_switch = GROUP_SWITCH,
    group::group_fork = GROUP_FORK,
    group::group_exit = GROUP_EXIT,
    offcpu::offcpu_switch = OFFCPU_SWITCH,
    offcpu::offcpu_switch_fp = OFFCPU_SWITCH_FP,
    cgcount::cg_switch = CG_SWITCH,
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
