//! The device: what /dev/perfmon's driver keeps (NPMC counters, one writer) and the rules it
//! applies to each request, over perf events opened through profiler_core's kernel seam.
//!
//! The driver's rules, kept here: a counter number outside 0..NPMC is EINVAL; a counter not
//! set up is EBUSY for every request but PMIOSETUP (the driver's "reversed sense"); only one
//! descriptor may be open for writing (EBUSY); setup, start, stop and reset need it (EPERM).
//! PMIOSETUP of a running counter reconfigures it, stopped and zeroed; PMIOSTART of a
//! running counter restarts it from the value it had when last stopped or reset; closing
//! the writer releases every counter.

use std::{ffi::c_int, io};

use profiler_core::{
    kernel::Kernel,
    perf::{PerfError, PerfEvent, Scope},
};

use crate::{
    abi::{NPMC, PMCF_EN, PMCF_SYS_FLAGS, Pmc, PmcTstamp},
    event::{Event, EventError},
    names::{MappingError, Names},
    scope::{BadScope, Pinned, ScopeMode, scopes},
};

/// A request refused, with the errno the driver gives for it.
#[derive(Debug, thiserror::Error)]
pub enum PerfmonError {
    #[error("counter {0} does not exist (counters are 0 and 1)")]
    BadCounter(c_int),
    #[error("counter {0} is not set up (PMIOSETUP first)")]
    NotSetUp(usize),
    #[error("{0} needs /dev/perfmon open for writing")]
    ReadOnly(&'static str),
    #[error("/dev/perfmon is already open for writing in this process")]
    WriterBusy,
    #[error(transparent)]
    Event(#[from] EventError),
    #[error("{event}: this host has no hardware PMU for it ({source})")]
    NoPmu { event: Event, source: PerfError },
    #[error(transparent)]
    Perf(#[from] PerfError),
    #[error("binding the counter to a CPU: {0}")]
    Place(io::Error),
    #[error("request {0:#x} is not a perfmon request")]
    UnknownRequest(u64),
    #[error("{0}: NULL argument")]
    Fault(&'static str),
    #[error(transparent)]
    Scope(#[from] BadScope),
    #[error(transparent)]
    Mapping(#[from] MappingError),
}

impl PerfmonError {
    pub fn errno(&self) -> c_int {
        match self {
            PerfmonError::Event(EventError::NoMeaning(_)) => libc::ENXIO,
            PerfmonError::BadCounter(_)
            | PerfmonError::Event(_)
            | PerfmonError::Scope(_)
            | PerfmonError::Mapping(_) => libc::EINVAL,
            PerfmonError::NotSetUp(_) | PerfmonError::WriterBusy => libc::EBUSY,
            PerfmonError::ReadOnly(_) => libc::EPERM,
            PerfmonError::NoPmu { .. } => libc::ENXIO,
            PerfmonError::Perf(e) => e.errno().unwrap_or(libc::EIO),
            PerfmonError::Place(e) => e.raw_os_error().unwrap_or(libc::EIO),
            PerfmonError::UnknownRequest(_) => libc::ENOTTY,
            PerfmonError::Fault(_) => libc::EFAULT,
        }
    }
}

/// A counter set up by PMIOSETUP.
#[derive(Debug)]
struct Counter {
    /// The configuration as set up (driver-only flags cleared).
    pmc: Pmc,
    /// One event per counted CPU (one in `process` scope).
    events: Vec<PerfEvent>,
    running: bool,
    /// The value when last stopped, reset or set up (the driver's shadow value).
    base: i64,
    /// What the events read when the counter last started or was reset. Counts are taken
    /// as differences from it, not by resetting the events: an inherited event's read
    /// includes what its exited children counted, which PERF_EVENT_IOC_RESET leaves
    /// (a program that runs commands under its counter would see them pile up).
    origin: i64,
}

impl Counter {
    /// The events' sum as read(2) gives it: own counts, live and exited children's.
    fn raw(&self) -> Result<i64, PerfmonError> {
        let mut sum = 0i64;
        for e in &self.events {
            let mut v = [0u64; 1];
            e.read_into(&mut v)?;
            sum = sum.wrapping_add(v[0] as i64);
        }
        Ok(sum)
    }

    fn value(&self) -> Result<i64, PerfmonError> {
        if self.running {
            Ok(self
                .base
                .wrapping_add(self.raw()?.wrapping_sub(self.origin)))
        } else {
            Ok(self.base)
        }
    }
}

/// The process's /dev/perfmon.
#[derive(Debug)]
pub struct Device {
    kernel: &'static dyn Kernel,
    mode: ScopeMode,
    /// What bare event numbers mean, read when the writer opens.
    names: Names,
    writer: bool,
    /// `cpu` scope: the caller, pinned to the counted CPU at the first PMIOSETUP.
    pinned: Option<Pinned>,
    counters: [Option<Counter>; NPMC],
}

fn index(num: c_int) -> Result<usize, PerfmonError> {
    usize::try_from(num)
        .ok()
        .filter(|&n| n < NPMC)
        .ok_or(PerfmonError::BadCounter(num))
}

impl Device {
    pub const fn new(kernel: &'static dyn Kernel) -> Self {
        Self {
            kernel,
            mode: ScopeMode::Cpu,
            names: Names::RAW_ONLY,
            writer: false,
            pinned: None,
            counters: [None, None],
        }
    }

    /// open(2) of the device; `write` for O_WRONLY and O_RDWR. The scope is the one in
    /// force when the writer opens. Every bare event number is a raw code.
    #[cfg(test)]
    pub fn open(&mut self, write: bool, mode: ScopeMode) -> Result<(), PerfmonError> {
        self.open_named(write, mode, Names::RAW_ONLY)
    }

    /// open(2) with what event numbers mean for this writer (PERFMON_EVENTS, the P6 table).
    pub fn open_named(
        &mut self,
        write: bool,
        mode: ScopeMode,
        names: Names,
    ) -> Result<(), PerfmonError> {
        if write {
            if self.writer {
                return Err(PerfmonError::WriterBusy);
            }
            self.writer = true;
            self.mode = mode;
            self.names = names;
        }
        Ok(())
    }

    /// close(2): the writer's close releases every counter and unpins the caller.
    pub fn close(&mut self, write: bool) {
        if write {
            self.counters = [None, None];
            self.pinned = None;
            self.writer = false;
        }
    }

    fn counter(&mut self, num: c_int) -> Result<&mut Counter, PerfmonError> {
        let n = index(num)?;
        self.counters[n].as_mut().ok_or(PerfmonError::NotSetUp(n))
    }

    pub fn setup(&mut self, pmc: Pmc) -> Result<(), PerfmonError> {
        let n = index(pmc.num)?;
        let pmc = Pmc {
            flags: pmc.flags & !PMCF_SYS_FLAGS,
            ..pmc
        };
        let event = Event::of(&pmc, &self.names)?;
        if self.mode == ScopeMode::Cpu && self.pinned.is_none() {
            self.pinned = Some(Pinned::here().map_err(PerfmonError::Place)?);
        }
        let attr = event.attr(pmc.flags, self.mode.inherit());
        let mut events = Vec::new();
        for scope in scopes(self.mode, self.pinned.as_ref()).map_err(PerfmonError::Place)? {
            events.push(self.open_event(&event, &attr, scope)?);
        }
        // Closing the old events (if any) stops the old configuration.
        self.counters[n] = Some(Counter {
            pmc,
            events,
            running: false,
            base: 0,
            origin: 0,
        });
        Ok(())
    }

    fn open_event(
        &self,
        event: &Event,
        attr: &profiler_core::perf::EventAttr,
        scope: Scope,
    ) -> Result<PerfEvent, PerfmonError> {
        PerfEvent::open_in(self.kernel, attr, scope, None, || event.to_string()).map_err(
            |e| match e.errno() {
                Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV) if event.needs_pmu() => {
                    PerfmonError::NoPmu {
                        event: event.clone(),
                        source: e,
                    }
                }
                _ => PerfmonError::Perf(e),
            },
        )
    }

    /// PMIOGET: the configuration, with PMCF_EN while the counter runs.
    pub fn get(&mut self, num: c_int) -> Result<Pmc, PerfmonError> {
        let c = self.counter(num)?;
        let mut pmc = c.pmc;
        if c.running {
            pmc.flags |= PMCF_EN;
        }
        Ok(pmc)
    }

    pub fn start(&mut self, num: c_int) -> Result<(), PerfmonError> {
        let c = self.counter(num)?;
        c.origin = c.raw()?;
        if !c.running {
            for e in &c.events {
                e.enable(false)?;
            }
            c.running = true;
        }
        Ok(())
    }

    pub fn stop(&mut self, num: c_int) -> Result<(), PerfmonError> {
        let c = self.counter(num)?;
        if c.running {
            for e in &c.events {
                e.disable(false)?;
            }
            c.base = c.value()?;
            c.running = false;
        }
        Ok(())
    }

    pub fn reset(&mut self, num: c_int) -> Result<(), PerfmonError> {
        let c = self.counter(num)?;
        c.origin = c.raw()?;
        c.base = 0;
        Ok(())
    }

    pub fn read(&mut self, num: c_int) -> Result<i64, PerfmonError> {
        self.counter(num)?.value()
    }

    /// PMIOTSTAMP: CLOCK_MONOTONIC in nanoseconds, a counter at 1000 MHz.
    pub fn tstamp() -> PmcTstamp {
        PmcTstamp {
            rate: 1000,
            _pad: 0,
            value: profiler_core::host::hrtime() as i64,
        }
    }
}

#[cfg(test)]
#[path = "device_tests.rs"]
mod tests;
