//! FreeBSD's perfmon(4) for programs written against it: `libperfmon.so`, loaded with
//! LD_PRELOAD, answers open(2) of "/dev/perfmon" with a descriptor whose ioctl(2) requests
//! (PMIOSETUP, PMIOGET, PMIOSTART, PMIOSTOP, PMIORESET, PMIOREAD, PMIOTSTAMP; structures and
//! codes in include/perfmon.h) are served from profiler_core's perf events.
//!
//! Layers, one way: `interpose` (the C edge: hooks, descriptor table, argument pointers) →
//! `device` (the driver's state and rules, errnos) → `event` (a `struct pmc` as perf
//! attributes; `names`: what a bare event number means, PERFMON_EVENTS and the P6 table) and
//! `scope` (where counters count) → `profiler_core::perf`. `abi` holds the
//! C layouts; `prefault` keeps the shim's own page faults out of the counts.

mod abi;
mod device;
mod event;
mod interpose;
mod names;
mod prefault;
mod scope;
