//! Binding sets and sampling them (`cpc_bind_curlwp`, `cpc_bind_pctx`, `cpc_bind_cpu`, the
//! cgroup extension, `cpc_unbind`, `cpc_set_sample`, `cpc_enable`, `cpc_disable`).

use std::{
    collections::HashMap,
    os::fd::AsRawFd,
    path::Path,
    sync::{Arc, MutexGuard, Weak},
};

use super::{
    bind::{BindKind, Binding, CpuClaim, Live, Lwp, cpu_bindings_exist, perf_error},
    buf::Buf,
    consts::{MAX_REQUESTS, bind, caps, request},
    engine::{Engine, OverflowPolicy},
    error::{CpcError, Subcode},
    group::Group,
    handle::Cpc,
    sampling::{hw_sampling_attr, max_precise, period_for},
    set::Set,
    sigsafe::Blocked,
};
use crate::{
    events::EventKind,
    perf::{EventAttr, SamplePolicy, Scope, SoftwareEvent},
};

/// A set ready to open: each request's attributes, and which requests notify.
pub(crate) struct Prepared {
    attrs: Vec<(EventAttr, String)>,
    notify: Vec<usize>,
}

/// perf software configs counted on the scheduler's behalf (kernel-attributed): with
/// exclude_kernel they read 0, so user/system flags select "count" or "not" as a whole.
const SCHED_SW_CONFIGS: [u64; 3] = [
    SoftwareEvent::ContextSwitches as u64,
    SoftwareEvent::CpuMigrations as u64,
    SoftwareEvent::CgroupSwitches as u64,
];

fn gettid() -> i32 {
    crate::host::gettid()
}

impl Cpc {
    /// Each request's perf attributes (and event name) as a binding would open them, for
    /// counting engines outside this module (per-cgroup counting).
    pub fn request_attrs(&self, set: &Set) -> Result<Vec<(EventAttr, String)>, CpcError> {
        Ok(self.prepare("cpc_bind_cgroup", set, false)?.attrs)
    }

    /// Validates a set for binding and builds each request's perf attributes.
    fn prepare(&self, func: &'static str, set: &Set, inherit: bool) -> Result<Prepared, CpcError> {
        if set.binding.as_ref().is_some_and(|b| b.is_live()) {
            return Err(CpcError::new(func, libc::EINVAL, "set is already bound"));
        }
        let n = set.requests.len();
        if n == 0 {
            return Err(CpcError::new(func, libc::EINVAL, "set has no requests"));
        }
        if n > self.npic() as usize || n > MAX_REQUESTS {
            return Err(self.report(CpcError::with_subcode(
                func,
                libc::EINVAL,
                Subcode::ResourceUnavail,
                format!("{n} requests but {} counters", self.npic()),
            )));
        }
        let mut pics = Vec::new();
        let mut out = Vec::with_capacity(n);
        let mut notify = Vec::new();
        for (index, r) in set.requests.iter().enumerate() {
            if r.flags & !request::ALL != 0 {
                return Err(self.report(CpcError::with_subcode(
                    func,
                    libc::EINVAL,
                    Subcode::ReqInvalidFlags,
                    format!("{:#x} on '{}'", r.flags & !request::ALL, r.event),
                )));
            }
            if r.flags & request::OVF_NOTIFY_EMT != 0 && self.caps() & caps::OVERFLOW_INTERRUPT == 0
            {
                return Err(CpcError::new(
                    func,
                    libc::ENOTSUP,
                    "counters cannot interrupt on overflow here",
                ));
            }
            if r.flags & request::HW_SMPL != 0 && self.caps() & caps::SMPL == 0 {
                return Err(CpcError::new(
                    func,
                    libc::ENOTSUP,
                    format!(
                        "'{}': hardware sampling needs a PMU with precise sampling",
                        r.event
                    ),
                ));
            }
            if r.resolved.needs_cpu_pmu() && self.catalog.cpu_pmu_name().is_none() {
                return Err(CpcError::new(
                    func,
                    libc::ENOTSUP,
                    format!(
                        "event '{}' needs a hardware PMU, and this host has none \
                         (no /sys/bus/event_source/devices/cpu)",
                        r.event
                    ),
                ));
            }
            let mut event = r.resolved.clone();
            for a in &r.attrs {
                if a.name == "picnum" {
                    if pics.contains(&a.value) {
                        return Err(self.report(CpcError::with_subcode(
                            func,
                            libc::EINVAL,
                            Subcode::ResourceUnavail,
                            format!("counter {} requested twice", a.value),
                        )));
                    }
                    pics.push(a.value);
                    continue;
                }
                self.catalog
                    .apply_attribute(&mut event, &a.name, a.value)
                    .map_err(|e| {
                        self.report(CpcError::with_subcode(
                            func,
                            libc::EINVAL,
                            Subcode::AttributeOutOfRange,
                            e,
                        ))
                    })?;
            }
            let mut attr = event.attr();
            let user = r.flags & request::COUNT_USER != 0;
            let sys = r.flags & request::COUNT_SYSTEM != 0;
            let hv = r.flags & request::COUNT_HV != 0;
            if event.kind == EventKind::Software && SCHED_SW_CONFIGS.contains(&event.config) {
                attr.set_exclude_user(!(user || sys))
                    .set_exclude_kernel(!(user || sys));
            } else {
                attr.set_exclude_user(!user).set_exclude_kernel(!sys);
            }
            attr.set_exclude_hv(!hv);
            attr.set_inherit(inherit).set_inherit_thread(inherit);
            // Notification: overflow after 2^64 - preset events. A preset of 0 never
            // overflows, so such a request only counts, as in libcpc.
            let period = period_for(r.preset);
            let smpl = r.flags & request::HW_SMPL != 0;
            if smpl {
                hw_sampling_attr(&mut attr, max_precise());
            }
            if (r.flags & request::OVF_NOTIFY_EMT != 0 || smpl) && period != 0 {
                if period >= 1 << 63 {
                    return Err(CpcError::new(
                        func,
                        libc::EINVAL,
                        format!(
                            "'{}': preset {:#x} means {period} events to the overflow; the kernel                              takes at most 2^63 - 1 (libcpc's portable range is 1 to 2^31)",
                            r.event, r.preset
                        ),
                    ));
                }
                attr.set_sample_policy(SamplePolicy::Period(period));
                notify.push(index);
            }
            out.push((attr, r.event.clone()));
        }
        Ok(Prepared { attrs: out, notify })
    }

    /// The hidden tick member: cycles with a PMU; task or CPU time without one.
    fn tick_attr(&self, per_thread: bool, inherit: bool) -> EventAttr {
        let mut attr = if self.catalog.cpu_pmu_name().is_some() {
            EventAttr::new(perf_event_open_sys::bindings::PERF_TYPE_HARDWARE, 0)
        } else if per_thread {
            EventAttr::software(SoftwareEvent::TaskClock)
        } else {
            EventAttr::software(SoftwareEvent::CpuClock)
        };
        attr.set_inherit(inherit).set_inherit_thread(inherit);
        attr
    }

    /// Opens one group per scope (disabled) and attaches the overflow engine to notifying
    /// requests. Counting starts in `start`, once the binding is published.
    #[allow(clippy::too_many_arguments)]
    fn open_groups(
        &self,
        func: &'static str,
        set: &Set,
        prepared: Prepared,
        scopes: &[Scope],
        tick: &EventAttr,
        inherit: bool,
        claim: Option<CpuClaim>,
    ) -> Result<Live, CpcError> {
        let Prepared { attrs, notify } = prepared;
        let policy = *self
            .overflow_policy
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let signal = super::sigsafe::signal_of(
            self.overflow_signal
                .load(std::sync::atomic::Ordering::SeqCst),
        );
        // The first notifying request leads the group: when perf disables it at its
        // overflow, the whole set stops, which is libcpc's freeze.
        let leader = notify.first().copied().unwrap_or(0);
        let mut groups = Vec::with_capacity(scopes.len());
        for &scope in scopes {
            let g = Group::open(self.kernel, &attrs, tick, scope, leader).map_err(|f| {
                self.report(perf_error(func, f.error, Some(attrs[f.request].1.as_str())))
            })?;
            groups.push(g);
        }
        let presets: Vec<u64> = set.requests.iter().map(|r| r.preset).collect();
        // The kernel cannot arm an inherited event for one overflow (IOC_REFRESH: EINVAL).
        let freeze = policy == OverflowPolicy::Freeze && !inherit;
        let engine = if notify.is_empty() {
            None
        } else {
            let siblings = self
                .overflow_siblings
                .load(std::sync::atomic::Ordering::SeqCst);
            Some(Engine::attach(
                self.kernel,
                func,
                &groups,
                attrs.len(),
                &notify,
                &presets,
                freeze,
                signal,
                siblings,
            )?)
        };
        let live = Live {
            engine,
            groups,
            pending: presets.clone(),
            presets,
            notify,
            signal,
            frozen: false,
            tick_scale: self.tick_scale,
            _claim: claim,
        };
        Ok(live)
    }

    /// Publishes the binding (on the set and, for the calling thread, in the thread map),
    /// then starts counting. The order matters: with a short period the first overflow
    /// signal arrives as soon as counting starts, and its handler must already find the set
    /// bound to restart it, as on Solaris. Enabling happens under the binding's lock, which
    /// blocks the overflow signal, so the handler runs only once the set is fully started.
    fn start(
        &self,
        func: &'static str,
        set: &mut Set,
        kind: BindKind,
        live: Live,
    ) -> Result<(), CpcError> {
        let binding = self.register(set, kind, live);
        // The handler reads `set.binding` on this thread: the store must not move past the
        // enable below.
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        let started = {
            let guard = binding.lock();
            match guard.as_ref() {
                Some(live) => live.enable(func),
                None => Err(CpcError::new(func, libc::EINVAL, "set is not bound")),
            }
        };
        if let Err(e) = started {
            binding.release();
            set.binding = None;
            return Err(e);
        }
        Ok(())
    }

    fn register(&self, set: &mut Set, kind: BindKind, live: Live) -> Arc<Binding> {
        let binding = Arc::new(Binding::new(kind.clone(), live));
        let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&binding));
        if let BindKind::CurLwp { tid } = kind {
            // Binding again replaces the thread's previous set, as the kernel does in libcpc.
            let mut lwp = self.lwp_map();
            if let Some(old) = lwp
                .insert(tid, Arc::downgrade(&binding))
                .and_then(|w| w.upgrade())
            {
                old.release();
            }
        }
        set.binding = Some(binding.clone());
        binding
    }

    /// `cpc_bind_curlwp`: counts on behalf of the calling thread. `flags` may hold
    /// `bind::LWP_INHERIT` (threads it creates later count into this context). EAGAIN while
    /// any CPU binding exists.
    pub fn bind_curlwp(&self, set: &mut Set, flags: u32) -> Result<(), CpcError> {
        const F: &str = "cpc_bind_curlwp";
        if flags & !bind::LWP_INHERIT != 0 {
            return Err(CpcError::new(
                F,
                libc::EINVAL,
                format!("invalid flags {flags:#x}"),
            ));
        }
        let inherit = flags & bind::LWP_INHERIT != 0;
        let prepared = self.prepare(F, set, inherit)?;
        if cpu_bindings_exist() {
            return Err(CpcError::new(F, libc::EAGAIN, "a CPU binding exists"));
        }
        let tick = self.tick_attr(true, inherit);
        let live = self.open_groups(F, set, prepared, &[Scope::Thread(0)], &tick, inherit, None)?;
        self.start(F, set, BindKind::CurLwp { tid: gettid() }, live)
    }

    /// `cpc_bind_pctx`: binds to thread `lwp` of process `pid`, or to all its threads.
    /// `flags` must be 0. ESRCH if the process or thread does not exist.
    pub fn bind_pctx(&self, pid: i32, lwp: Lwp, set: &mut Set, flags: u32) -> Result<(), CpcError> {
        const F: &str = "cpc_bind_pctx";
        self.check_own(F, set)?;
        if flags != 0 {
            return Err(CpcError::new(
                F,
                libc::EINVAL,
                format!("invalid flags {flags:#x}"),
            ));
        }
        let tids = match lwp {
            Lwp::Thread(tid)
                if Path::new(&format!("/proc/{pid}/task/{tid}")).exists() && pid > 0 =>
            {
                vec![tid]
            }
            Lwp::Thread(tid) => {
                return Err(CpcError::new(
                    F,
                    libc::ESRCH,
                    format!("no thread {tid} in process {pid}"),
                ));
            }
            Lwp::All => crate::host::threads(pid)
                .ok()
                .filter(|t| !t.is_empty() && pid > 0)
                .ok_or_else(|| CpcError::new(F, libc::ESRCH, format!("no process {pid}")))?,
        };
        // All threads: new threads count into their creator's context.
        let inherit = lwp == Lwp::All;
        let prepared = self.prepare(F, set, inherit)?;
        if cpu_bindings_exist() {
            return Err(CpcError::new(F, libc::EAGAIN, "a CPU binding exists"));
        }
        let scopes: Vec<Scope> = tids.into_iter().map(Scope::Thread).collect();
        let tick = self.tick_attr(true, inherit);
        let live = self.open_groups(F, set, prepared, &scopes, &tick, inherit, None)?;
        self.start(F, set, BindKind::Pctx { pid, lwp }, live)
    }

    /// `cpc_bind_cpu`: counts everything on CPU `cpu`. `flags` must be 0. EINVAL for a CPU
    /// that does not exist, ENOSYS for an offline one, EAGAIN if the CPU is already bound.
    pub fn bind_cpu(&self, cpu: u32, set: &mut Set, flags: u32) -> Result<(), CpcError> {
        const F: &str = "cpc_bind_cpu";
        self.check_own(F, set)?;
        if flags != 0 {
            return Err(CpcError::new(
                F,
                libc::EINVAL,
                format!("invalid flags {flags:#x}"),
            ));
        }
        let online = crate::host::online_cpus()
            .map_err(|e| CpcError::new(F, libc::EIO, format!("online cpus: {e}")))?;
        if !online.contains(&cpu) {
            let exists = Path::new(&format!("/sys/devices/system/cpu/cpu{cpu}")).exists();
            return Err(if exists {
                CpcError::new(F, libc::ENOSYS, format!("cpu {cpu} is offline"))
            } else {
                CpcError::new(F, libc::EINVAL, format!("cpu {cpu} does not exist"))
            });
        }
        let prepared = self.prepare(F, set, false)?;
        let claim = CpuClaim::take(cpu)
            .ok_or_else(|| CpcError::new(F, libc::EAGAIN, format!("cpu {cpu} is already bound")))?;
        let tick = self.tick_attr(false, false);
        let live = self.open_groups(
            F,
            set,
            prepared,
            &[Scope::Cpu(cpu)],
            &tick,
            false,
            Some(claim),
        )?;
        self.start(F, set, BindKind::Cpu(cpu), live)
    }

    /// Extension: counts the tasks of a cgroup v2 directory on every online CPU. `flags`
    /// must be 0; ENOENT if the path does not exist.
    pub fn bind_cgroup(&self, path: &Path, set: &mut Set, flags: u32) -> Result<(), CpcError> {
        const F: &str = "cpc_bind_cgroup";
        self.check_own(F, set)?;
        if flags != 0 {
            return Err(CpcError::new(
                F,
                libc::EINVAL,
                format!("invalid flags {flags:#x}"),
            ));
        }
        let dir = std::fs::File::open(path).map_err(|e| {
            CpcError::new(
                F,
                e.raw_os_error().unwrap_or(libc::ENOENT),
                format!("{}: {e}", path.display()),
            )
        })?;
        let prepared = self.prepare(F, set, false)?;
        let cpus = crate::host::online_cpus()
            .map_err(|e| CpcError::new(F, libc::EIO, format!("online cpus: {e}")))?;
        let fd = dir.as_raw_fd();
        let scopes: Vec<Scope> = cpus
            .into_iter()
            .map(|cpu| Scope::CgroupOnCpu { cgroup_fd: fd, cpu })
            .collect();
        let tick = self.tick_attr(false, false);
        let live = self.open_groups(F, set, prepared, &scopes, &tick, false, None)?;
        self.start(F, set, BindKind::Cgroup(path.to_path_buf()), live)
    }

    /// `cpc_unbind`: EINVAL if the set is foreign or not bound. Buffers survive.
    pub fn unbind(&self, set: &mut Set) -> Result<(), CpcError> {
        const F: &str = "cpc_unbind";
        self.check_own(F, set)?;
        match set.binding.take() {
            Some(b) if b.is_live() => {
                b.release();
                Ok(())
            }
            _ => Err(CpcError::new(F, libc::EINVAL, "set is not bound")),
        }
    }

    /// `cpc_set_sample`: reads the set's counters into `buf` (value = preset + count, the
    /// hrtime of the read, the tick). EINVAL if the set is not bound, `buf` was sized for a
    /// different number of requests, or (for `bind_curlwp`) the caller is not the binding
    /// thread; EAGAIN if a CPU binding invalidated this thread binding.
    pub fn set_sample(&self, set: &Set, buf: &mut Buf) -> Result<(), CpcError> {
        const F: &str = "cpc_set_sample";
        if set.handle != self.id || buf.handle != self.id {
            return Err(CpcError::new(
                F,
                libc::EINVAL,
                "set or buffer does not belong to this handle",
            ));
        }
        let binding = set
            .binding
            .as_ref()
            .ok_or_else(|| CpcError::new(F, libc::EINVAL, "set is not bound"))?;
        if buf.len() != set.requests.len() {
            return Err(CpcError::new(
                F,
                libc::EINVAL,
                format!(
                    "buffer holds {} values, set has {} requests",
                    buf.len(),
                    set.requests.len()
                ),
            ));
        }
        if matches!(binding.kind, BindKind::CurLwp { .. }) && binding.binder_tid != gettid() {
            return Err(CpcError::new(
                F,
                libc::EINVAL,
                "only the thread that bound the set may sample it",
            ));
        }
        binding.sample(F, buf)
    }

    /// The thread-binding map, locked with the handle's overflow signal blocked.
    fn lwp_map(&self) -> Blocked<MutexGuard<'_, HashMap<i32, Weak<Binding>>>> {
        let signal = super::sigsafe::signal_of(
            self.overflow_signal
                .load(std::sync::atomic::Ordering::SeqCst),
        );
        Blocked::lock(signal, || {
            self.lwp.lock().unwrap_or_else(|p| p.into_inner())
        })
    }

    pub(crate) fn calling_lwp_binding(&self, func: &'static str) -> Result<Arc<Binding>, CpcError> {
        // Lock-free of anything a handler on this thread could hold: the map's lock is only
        // taken with the overflow signal blocked.
        let lwp = self.lwp_map();
        lwp.get(&gettid())
            .and_then(|w| w.upgrade())
            .filter(|b| b.is_live())
            .ok_or_else(|| {
                CpcError::new(func, libc::EINVAL, "no set is bound to the calling thread")
            })
    }

    /// `cpc_enable`: resumes the calling thread's frozen set, from where it stopped. EINVAL if
    /// no set is bound to this thread or it is not frozen.
    pub fn enable(&self) -> Result<(), CpcError> {
        self.set_frozen("cpc_enable", false)
    }

    /// `cpc_disable`: freezes the calling thread's set; samples then return the frozen
    /// values. EINVAL if no set is bound to this thread or it is already frozen.
    pub fn disable(&self) -> Result<(), CpcError> {
        self.set_frozen("cpc_disable", true)
    }

    fn set_frozen(&self, func: &'static str, freeze: bool) -> Result<(), CpcError> {
        let binding = self.calling_lwp_binding(func)?;
        let mut guard = binding.lock();
        let live = guard
            .as_mut()
            .ok_or_else(|| CpcError::new(func, libc::EINVAL, "set is not bound"))?;
        if live.frozen == freeze {
            let state = if freeze {
                "already frozen"
            } else {
                "not frozen"
            };
            return Err(CpcError::new(
                func,
                libc::EINVAL,
                format!("context is {state}"),
            ));
        }
        for g in &live.groups {
            let r = if freeze { g.disable() } else { g.enable() };
            r.map_err(|e| perf_error(func, e, None))?;
        }
        live.frozen = freeze;
        Ok(())
    }
}
