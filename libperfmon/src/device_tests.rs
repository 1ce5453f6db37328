//! The driver's rules on a fake kernel: counters that advance only when the test says, so
//! every value read is known.

use std::{
    collections::HashMap,
    io,
    os::fd::{AsRawFd, BorrowedFd, OwnedFd},
    sync::Mutex,
};

use perf_event_open_sys::bindings::perf_event_attr;
use profiler_core::kernel::{Ioctl, Kernel};

use super::*;
use crate::abi::{PMCF_E, PMCF_INT, PMCF_OS, PMCF_SW, PMCF_USR};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Opened {
    type_: u32,
    config: u64,
    pid: i32,
    cpu: i32,
    inherit: bool,
    exclude_user: bool,
    exclude_kernel: bool,
}

#[derive(Debug, Default)]
struct State {
    opened: Vec<Opened>,
    /// fd -> (enabled, count)
    events: HashMap<i32, (bool, u64)>,
    fail_open: Option<i32>,
}

#[derive(Debug, Default)]
struct FakeKernel(Mutex<State>);

impl FakeKernel {
    fn leak() -> &'static FakeKernel {
        Box::leak(Box::default())
    }
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }
    /// `n` events happen: every enabled event counts them.
    fn advance(&self, n: u64) {
        for (on, v) in self.state().events.values_mut() {
            if *on {
                *v += n;
            }
        }
    }
    /// The fake's event fds still open: each is a memfd named after this fake, so fds
    /// other tests open (in parallel, maybe at a number this fake used) do not count.
    fn live(&self) -> usize {
        let me = self.name();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.to_string_lossy().starts_with(&format!("/memfd:{me} ")))
            .count()
    }
    fn name(&self) -> String {
        format!("fake-perf-{:p}", self as *const Self)
    }
}

impl Kernel for FakeKernel {
    fn perf_event_open(
        &self,
        attr: &perf_event_attr,
        pid: i32,
        cpu: i32,
        _group: Option<BorrowedFd<'_>>,
        _flags: u64,
    ) -> io::Result<OwnedFd> {
        let mut s = self.state();
        if let Some(errno) = s.fail_open {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let name = std::ffi::CString::new(self.name()).unwrap();
        // SAFETY: memfd_create reads a NUL-terminated name; the fd returned is ours.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just created, owned by nobody else.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        s.events.insert(fd.as_raw_fd(), (attr.disabled() == 0, 0));
        s.opened.push(Opened {
            type_: attr.type_,
            config: attr.config,
            pid,
            cpu,
            inherit: attr.inherit() != 0,
            exclude_user: attr.exclude_user() != 0,
            exclude_kernel: attr.exclude_kernel() != 0,
        });
        Ok(fd)
    }

    fn perf_ioctl(&self, fd: BorrowedFd<'_>, op: Ioctl) -> io::Result<()> {
        let mut s = self.state();
        let e = s.events.get_mut(&fd.as_raw_fd()).expect("an event fd");
        match op {
            Ioctl::Enable { .. } => e.0 = true,
            Ioctl::Disable { .. } => e.0 = false,
            Ioctl::Reset { .. } => e.1 = 0,
            other => panic!("unexpected {other:?}"),
        }
        Ok(())
    }

    fn perf_read(&self, fd: BorrowedFd<'_>, buf: &mut [u64]) -> io::Result<usize> {
        buf[0] = self.state().events[&fd.as_raw_fd()].1;
        Ok(8)
    }

    fn bpf_link_perf_event(
        &self,
        _: BorrowedFd<'_>,
        _: BorrowedFd<'_>,
        _: u64,
    ) -> io::Result<OwnedFd> {
        unreachable!()
    }

    fn bpf_perf_event_array_set(
        &self,
        _: BorrowedFd<'_>,
        _: u32,
        _: BorrowedFd<'_>,
    ) -> io::Result<()> {
        unreachable!()
    }

    fn bpf_probe(&self) -> io::Result<()> {
        unreachable!()
    }

    fn pidfd_open(&self, _: i32) -> io::Result<OwnedFd> {
        unreachable!()
    }

    fn openat2(
        &self,
        _: BorrowedFd<'_>,
        _: &std::ffi::CStr,
        _: u64,
        _: u64,
    ) -> io::Result<OwnedFd> {
        unreachable!()
    }
}

fn page_faults(num: c_int) -> Pmc {
    Pmc {
        num,
        event: 2,
        unit: 0,
        flags: PMCF_SW | PMCF_USR | PMCF_OS,
        mask: 0,
    }
}

fn writer(mode: ScopeMode) -> (&'static FakeKernel, Device) {
    let k = FakeKernel::leak();
    let mut d = Device::new(k);
    d.open(true, mode).unwrap();
    (k, d)
}

fn errno<T: std::fmt::Debug>(r: Result<T, PerfmonError>) -> c_int {
    r.unwrap_err().errno()
}

#[test]
fn setup_start_stop_read_as_the_seed_example_does() {
    let (k, mut d) = writer(ScopeMode::Process);
    d.setup(page_faults(0)).unwrap();
    assert_eq!(
        k.state().opened,
        [Opened {
            type_: 1,
            config: 2,
            pid: 0,
            cpu: -1,
            inherit: true,
            exclude_user: false,
            exclude_kernel: false
        }]
    );
    k.advance(7); // before start: not counted
    d.start(0).unwrap();
    k.advance(100);
    assert_eq!(d.read(0).unwrap(), 100, "read while running");
    d.stop(0).unwrap();
    k.advance(5); // after stop: not counted
    assert_eq!(d.read(0).unwrap(), 100);
    // A second start continues from the stopped value.
    d.start(0).unwrap();
    k.advance(11);
    d.stop(0).unwrap();
    assert_eq!(d.read(0).unwrap(), 111);
    let t = Device::tstamp();
    assert_eq!(t.rate, 1000);
    assert!(t.value > 0);
}

#[test]
fn the_driver_errnos() {
    let (k, mut d) = writer(ScopeMode::Process);
    // EINVAL: counter numbers outside 0..NPMC, for every request.
    for n in [-1, 2, 1000] {
        assert_eq!(errno(d.setup(page_faults(n))), libc::EINVAL);
        assert_eq!(errno(d.get(n)), libc::EINVAL);
        assert_eq!(errno(d.start(n)), libc::EINVAL);
        assert_eq!(errno(d.stop(n)), libc::EINVAL);
        assert_eq!(errno(d.reset(n)), libc::EINVAL);
        assert_eq!(errno(d.read(n)), libc::EINVAL);
    }
    // EBUSY: a counter not set up.
    assert_eq!(errno(d.get(1)), libc::EBUSY);
    assert_eq!(errno(d.start(1)), libc::EBUSY);
    assert_eq!(errno(d.stop(1)), libc::EBUSY);
    assert_eq!(errno(d.reset(1)), libc::EBUSY);
    assert_eq!(errno(d.read(1)), libc::EBUSY);
    // EBUSY: a second writer; readers may open.
    assert_eq!(errno(d.open(true, ScopeMode::Process)), libc::EBUSY);
    d.open(false, ScopeMode::Process).unwrap();
    // EINVAL: the software extension with qualifiers, or an event it does not have.
    let mut bad = page_faults(0);
    bad.unit = 1;
    assert_eq!(errno(d.setup(bad)), libc::EINVAL);
    bad = page_faults(0);
    bad.event = 10;
    assert_eq!(errno(d.setup(bad)), libc::EINVAL);
    // ENXIO: a raw event where perf has no PMU for it (ENOENT from perf_event_open).
    k.state().fail_open = Some(libc::ENOENT);
    let raw = Pmc {
        num: 0,
        event: 0xc0,
        unit: 0,
        flags: PMCF_USR,
        mask: 0,
    };
    let e = d.setup(raw).unwrap_err();
    assert_eq!(e.errno(), libc::ENXIO);
    assert!(
        e.to_string()
            .starts_with("raw event 0xc0: this host has no hardware PMU")
    );
    // Other perf errors pass through with their errno; the counter stays as it was.
    k.state().fail_open = Some(libc::EMFILE);
    assert_eq!(errno(d.setup(page_faults(0))), libc::EMFILE);
    assert_eq!(errno(d.get(0)), libc::EBUSY);
    assert_eq!(PerfmonError::UnknownRequest(1).errno(), libc::ENOTTY);
    assert_eq!(PerfmonError::ReadOnly("PMIOSTART").errno(), libc::EPERM);
    assert_eq!(PerfmonError::Fault("PMIOREAD").errno(), libc::EFAULT);
}

#[test]
fn get_returns_the_setup_without_driver_flags_and_en_while_running() {
    let (_, mut d) = writer(ScopeMode::Process);
    let mut p = page_faults(1);
    p.flags |= PMCF_INT | PMCF_EN | PMCF_E;
    d.setup(p).unwrap();
    let want = Pmc {
        flags: PMCF_SW | PMCF_USR | PMCF_OS | PMCF_E,
        ..p
    };
    assert_eq!(d.get(1).unwrap(), want, "PMIOSETUP clears INT and EN");
    d.start(1).unwrap();
    assert_eq!(d.get(1).unwrap().flags, want.flags | PMCF_EN);
    d.stop(1).unwrap();
    assert_eq!(d.get(1).unwrap(), want);
}

#[test]
fn reset_restart_and_setup_of_a_running_counter() {
    let (k, mut d) = writer(ScopeMode::Process);
    d.setup(page_faults(0)).unwrap();
    d.start(0).unwrap();
    k.advance(40);
    // PMIORESET of a running counter: it keeps running from 0.
    d.reset(0).unwrap();
    k.advance(3);
    assert_eq!(d.read(0).unwrap(), 3);
    // PMIOSTART of a running counter: back to the value at the last reset/stop.
    d.start(0).unwrap();
    assert_eq!(d.read(0).unwrap(), 0);
    k.advance(9);
    d.stop(0).unwrap();
    d.stop(0).unwrap(); // stopping a stopped counter changes nothing
    assert_eq!(d.read(0).unwrap(), 9);
    d.reset(0).unwrap();
    assert_eq!(d.read(0).unwrap(), 0);
    // PMIOSETUP of a running counter: reconfigured, stopped, zeroed; the old event closed.
    d.start(0).unwrap();
    k.advance(5);
    let mut tc = page_faults(0);
    tc.event = 1; // task-clock
    d.setup(tc).unwrap();
    assert!(d.get(0).unwrap().flags & PMCF_EN == 0);
    assert_eq!(d.read(0).unwrap(), 0);
    k.advance(5);
    assert_eq!(d.read(0).unwrap(), 0, "not started");
    assert_eq!(k.live(), 1);
}

#[test]
fn counters_are_independent_and_the_writer_close_releases_them() {
    let (k, mut d) = writer(ScopeMode::Process);
    d.setup(page_faults(0)).unwrap();
    d.setup(page_faults(1)).unwrap();
    d.start(1).unwrap();
    k.advance(4);
    d.start(0).unwrap();
    k.advance(6);
    assert_eq!((d.read(0).unwrap(), d.read(1).unwrap()), (6, 10));
    d.close(false); // a reader's close changes nothing
    assert_eq!(d.read(1).unwrap(), 10);
    d.close(true);
    assert_eq!(k.live(), 0, "every event closed");
    assert_eq!(errno(d.read(0)), libc::EBUSY);
    d.open(true, ScopeMode::Process).unwrap();
}

#[test]
fn all_scope_sums_one_event_per_cpu_and_cpu_scope_binds_to_the_callers_cpu() {
    let cpus = profiler_core::host::online_cpus().unwrap();
    let (k, mut d) = writer(ScopeMode::All);
    d.setup(page_faults(0)).unwrap();
    let opened: Vec<(i32, i32, bool)> = k
        .state()
        .opened
        .iter()
        .map(|o| (o.pid, o.cpu, o.inherit))
        .collect();
    let want: Vec<_> = cpus.iter().map(|&c| (-1, c as i32, false)).collect();
    assert_eq!(opened, want);
    d.start(0).unwrap();
    k.advance(10);
    assert_eq!(d.read(0).unwrap(), 10 * cpus.len() as i64);

    std::thread::spawn(|| {
        let (k, mut d) = writer(ScopeMode::Cpu);
        d.setup(page_faults(0)).unwrap();
        // SAFETY: no preconditions.
        let here = unsafe { libc::sched_getcpu() };
        let o = k.state().opened[0].clone();
        assert_eq!((o.pid, o.cpu, o.inherit), (-1, here, false));
        // Counter 1 counts on the same CPU.
        d.setup(page_faults(1)).unwrap();
        assert_eq!(k.state().opened[1].cpu, here);
        d.close(true);
    })
    .join()
    .unwrap();
}
