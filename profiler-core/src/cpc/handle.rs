//! The handle (`cpc_open`, `cpc_close`, `cpc_npic`, `cpc_caps`, `cpc_cciname`, `cpc_cpuref`,
//! the walkers and the error handler). It owns the event catalogue and keeps a weak list of
//! every binding it made, so dropping it unbinds them all, as `cpc_close` does.

use std::{
    collections::HashMap,
    sync::{
        Mutex, RwLock, Weak,
        atomic::{AtomicU64, Ordering},
    },
};

use super::{
    bind::Binding,
    consts::{VER_CURRENT, caps},
    error::{CpcError, ErrorHandler, default_handler},
};
use crate::{
    events::Catalog,
    kernel::{self, Kernel},
    perf::{EventAttr, SoftwareEvent},
};

static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

/// Counters reported on hosts without a hardware PMU. Software events have no hardware limit;
/// this keeps libcpc's "no more requests than counters" rule meaningful and generous.
pub const SOFTWARE_NPIC: u32 = 8;

/// A libcpc handle.
pub struct Cpc {
    pub(crate) id: u64,
    /// Where the bindings' syscalls go (the running kernel but in unit tests).
    pub(crate) kernel: &'static dyn Kernel,
    pub(crate) catalog: Catalog,
    npic: u32,
    caps: u32,
    cciname: String,
    cpuref: String,
    bpf: Result<(), NoBpf>,
    handler: RwLock<ErrorHandler>,
    /// Thread bindings by tid: the "calling LWP's context" of enable/disable/restart.
    pub(crate) lwp: Mutex<HashMap<i32, Weak<Binding>>>,
    /// Every binding made through this handle.
    pub(crate) all: Mutex<Vec<Weak<Binding>>>,
    /// cycles per nanosecond of task time, for the tick on hosts without a PMU.
    pub(crate) tick_scale: Option<f64>,
    pub(crate) overflow_policy: Mutex<super::engine::OverflowPolicy>,
    /// Signal sent at overflows (0: none); atomic so the handler path needs no lock.
    pub(crate) overflow_signal: std::sync::atomic::AtomicI32,
    pub(crate) overflow_siblings: std::sync::atomic::AtomicBool,
}

impl Cpc {
    /// `cpc_open`: fails with EINVAL unless `ver` is [`VER_CURRENT`], ENOSYS when the kernel
    /// has no perf events, EACCES when perf use is forbidden to this process.
    pub fn open(ver: u32) -> Result<Cpc, CpcError> {
        Self::open_with(ver, Catalog::load)
    }

    /// `open` with a catalogue of the caller's (for tests with a fake sysfs tree, and tools
    /// that already loaded one).
    pub fn open_with(ver: u32, catalog: impl FnOnce() -> Catalog) -> Result<Cpc, CpcError> {
        Self::open_in(kernel::linux(), ver, catalog)
    }

    /// `open_with` through the given syscall seam.
    pub fn open_in(
        kernel: &'static dyn Kernel,
        ver: u32,
        catalog: impl FnOnce() -> Catalog,
    ) -> Result<Cpc, CpcError> {
        const F: &str = "cpc_open";
        if ver != VER_CURRENT {
            return Err(CpcError::new(
                F,
                libc::EINVAL,
                format!("version {ver} is not {VER_CURRENT}"),
            ));
        }
        probe_perf(kernel)?;
        // The first clock_gettime faults in the vDSO data page; take that fault here, not
        // inside the first sample, where it would count in a page-faults delta.
        crate::host::hrtime();
        let catalog = catalog();
        let pmu = catalog.cpu_pmu_name();
        let npic = pmu.as_ref().map_or(SOFTWARE_NPIC, |_| hardware_counters());
        let mut caps = caps::OVERFLOW_INTERRUPT | caps::OVERFLOW_PRECISE;
        if pmu.is_some() && precise_ip_supported() {
            caps |= caps::SMPL | caps::OVERFLOW_SMPL;
        }
        let model = cpu_model();
        let (cciname, cpuref) = match &pmu {
            Some(name) => (
                name.clone(),
                format!(
                    "See the processor vendor's manual for {model}; events as perf list shows them."
                ),
            ),
            None => (
                "Linux software events (no hardware PMU)".to_string(),
                format!(
                    "No hardware performance counters on this host ({model}); see \
                     perf_event_open(2), PERF_TYPE_SOFTWARE, for the software events."
                ),
            ),
        };
        Ok(Cpc {
            id: NEXT_HANDLE.fetch_add(1, Ordering::Relaxed),
            kernel,
            catalog,
            npic,
            caps,
            cciname,
            cpuref,
            bpf: probe_bpf(kernel),
            handler: RwLock::new(default_handler()),
            lwp: Mutex::new(HashMap::new()),
            all: Mutex::new(Vec::new()),
            tick_scale: if pmu.is_some() {
                None
            } else {
                cpu_mhz().map(|mhz| mhz / 1000.0)
            },
            overflow_policy: Mutex::default(),
            overflow_signal: Default::default(),
            overflow_siblings: Default::default(),
        })
    }

    /// `cpc_npic`: how many requests a set may hold.
    pub fn npic(&self) -> u32 {
        self.npic
    }

    /// `cpc_caps`: `caps::*` bits.
    pub fn caps(&self) -> u32 {
        self.caps
    }

    /// `cpc_cciname`: the counter interface's name.
    pub fn cciname(&self) -> &str {
        &self.cciname
    }

    /// `cpc_cpuref`: where the events are documented.
    pub fn cpuref(&self) -> &str {
        &self.cpuref
    }

    /// Whether the eBPF overflow engine can run here, and why not.
    pub fn bpf_support(&self) -> Result<(), &NoBpf> {
        self.bpf.as_ref().map(|_| ())
    }

    /// The event catalogue (the one parser for event names).
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// What the tick counts here: cycles with a PMU, else task (or CPU) time in nanoseconds
    /// converted to cycles at the nominal clock rate from /proc/cpuinfo.
    pub fn tick_source(&self) -> &'static str {
        match (self.catalog.cpu_pmu_name(), self.tick_scale) {
            (Some(_), _) => "cycles",
            (None, Some(_)) => "task time × nominal MHz",
            (None, None) => "task time (ns)",
        }
    }

    /// `cpc_seterrhndlr`: `None` restores the default handler, which prints
    /// `libcpc: <fn>: <text>` to stderr.
    pub fn set_error_handler(&self, handler: Option<ErrorHandler>) {
        *self.handler.write().unwrap_or_else(|p| p.into_inner()) =
            handler.unwrap_or_else(default_handler);
    }

    /// Passes an error with a subcode to the handler (as libcpc does) and returns it.
    pub(crate) fn report(&self, err: CpcError) -> CpcError {
        if let Some(sub) = err.subcode {
            let handler = self
                .handler
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let errno = std::io::Error::last_os_error().raw_os_error();
            handler(err.func, sub as i32, &err.message);
            // errno is preserved across handler calls, as libcpc promises.
            if let Some(e) = errno {
                // SAFETY: writing the thread's errno slot.
                unsafe { *libc::__errno_location() = e };
            }
        }
        err
    }

    /// `cpc_walk_events_all`: every event usable on this host, once each.
    pub fn walk_events_all(&self, mut f: impl FnMut(&str)) {
        for e in self
            .catalog
            .platform_events()
            .into_iter()
            .filter(|e| e.available)
        {
            f(&e.name);
        }
    }

    /// `cpc_walk_events_pic`: events counter `picno` can count (any: the kernel assigns
    /// counters). EINVAL, with no calls, if `picno >= npic`.
    pub fn walk_events_pic(
        &self,
        picno: u32,
        mut f: impl FnMut(u32, &str),
    ) -> Result<(), CpcError> {
        self.check_pic("cpc_walk_events_pic", picno)?;
        self.walk_events_all(|e| f(picno, e));
        Ok(())
    }

    /// `cpc_walk_generic_events_all`: the PAPI names usable on this host.
    pub fn walk_generic_events_all(&self, mut f: impl FnMut(&str)) {
        for g in self
            .catalog
            .generic_events()
            .into_iter()
            .filter(|g| g.available)
        {
            f(g.name);
        }
    }

    /// `cpc_walk_generic_events_pic`.
    pub fn walk_generic_events_pic(
        &self,
        picno: u32,
        mut f: impl FnMut(u32, &str),
    ) -> Result<(), CpcError> {
        self.check_pic("cpc_walk_generic_events_pic", picno)?;
        self.walk_generic_events_all(|e| f(picno, e));
        Ok(())
    }

    /// `cpc_walk_attrs`: attribute names (always ending with `picnum`).
    pub fn walk_attrs(&self, mut f: impl FnMut(&str)) {
        for a in self.catalog.attributes() {
            f(&a);
        }
    }

    fn check_pic(&self, func: &'static str, picno: u32) -> Result<(), CpcError> {
        if picno >= self.npic {
            return Err(CpcError::new(
                func,
                libc::EINVAL,
                format!("counter {picno} >= npic {}", self.npic),
            ));
        }
        Ok(())
    }

    /// `cpc_close`: unbinds every set this handle bound. Dropping the handle does the same.
    pub fn close(self) {}
}

impl std::fmt::Debug for Cpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cpc")
            .field("id", &self.id)
            .field("npic", &self.npic)
            .field("caps", &self.caps)
            .field("cciname", &self.cciname)
            .finish_non_exhaustive()
    }
}

impl Drop for Cpc {
    fn drop(&mut self) {
        let all = std::mem::take(&mut *self.all.lock().unwrap_or_else(|p| p.into_inner()));
        for b in all.iter().filter_map(Weak::upgrade) {
            b.release();
        }
    }
}

/// Opens a user-only task-clock counter on this thread: works wherever perf events exist,
/// even unprivileged under perf_event_paranoid 2.
fn probe_perf(kernel: &'static dyn Kernel) -> Result<(), CpcError> {
    const F: &str = "cpc_open";
    let mut attr = EventAttr::software(SoftwareEvent::TaskClock);
    attr.set_exclude_kernel(true).set_exclude_hv(true);
    match crate::perf::PerfEvent::open_in(
        kernel,
        &attr,
        crate::perf::Scope::Thread(0),
        None,
        || "task-clock".into(),
    ) {
        Ok(_) => Ok(()),
        Err(e) => match e.errno() {
            Some(libc::ENOSYS) | Some(libc::ENOENT) => Err(CpcError::new(
                F,
                libc::ENOSYS,
                "Operation not applicable: the kernel has no perf events",
            )),
            Some(libc::EACCES) | Some(libc::EPERM) => Err(CpcError::new(
                F,
                libc::EACCES,
                "perf events are not allowed for this process (kernel.perf_event_paranoid is 3 or more)",
            )),
            Some(errno) => Err(CpcError::new(F, errno, e.to_string())),
            None => Err(CpcError::new(F, libc::EIO, e.to_string())),
        },
    }
}

/// Why the eBPF overflow engine cannot run on this host.
#[derive(Debug, thiserror::Error)]
pub enum NoBpf {
    #[error("the kernel has no BTF (/sys/kernel/btf/vmlinux)")]
    NoBtf,
    #[error("bpf(2) needs root or CAP_BPF")]
    NotPermitted,
    #[error("the kernel has no bpf(2)")]
    NoSyscall,
    #[error("bpf(2) probe failed (errno {:?})", .0.raw_os_error())]
    Probe(#[source] std::io::Error),
}

/// The bpf(2) syscall exists (EPERM counts: it exists, we may not use it) and BTF is there.
fn probe_bpf(kernel: &dyn Kernel) -> Result<(), NoBpf> {
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err(NoBpf::NoBtf);
    }
    match kernel.bpf_probe() {
        Ok(()) => Ok(()),
        Err(e) => match e.raw_os_error() {
            Some(libc::EPERM) => Err(NoBpf::NotPermitted),
            Some(libc::ENOSYS) => Err(NoBpf::NoSyscall),
            _ => Err(NoBpf::Probe(e)),
        },
    }
}

/// General-purpose plus fixed counters of this CPU (CPUID leaf 0xA on Intel); AMD cores
/// since family 15h have six.
fn hardware_counters() -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        let vendor = __cpuid(0);
        let intel = vendor.ebx == u32::from_le_bytes(*b"Genu");
        if intel && vendor.eax >= 0xa {
            let leaf = __cpuid(0xa);
            let gp = (leaf.eax >> 8) & 0xff;
            let fixed = leaf.edx & 0x1f;
            if gp > 0 {
                return gp + fixed;
            }
        }
        6
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        6
    }
}

fn precise_ip_supported() -> bool {
    std::fs::read_to_string("/sys/bus/event_source/devices/cpu/caps/max_precise")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .is_some_and(|p| p > 0)
}

fn cpuinfo_field(name: &str) -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim().to_string())
    })
}

fn cpu_model() -> String {
    super::cpumodel::from_cpuinfo(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default())
}

fn cpu_mhz() -> Option<f64> {
    cpuinfo_field("cpu MHz")?.parse().ok()
}
