//! The overflow engine on real software events: notification counts, presets and restart,
//! libcpc's freeze, in-kernel filtering, loss accounting and the signal mode.

use std::{
    ffi::OsString,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    thread,
    time::Duration,
};

use profiler::{
    bpf::{OverflowConfig, OverflowProgram, RecordStream},
    cpc::{
        Cpc, Lwp, Overflow, OverflowPolicy,
        consts::{VER_CURRENT, request},
    },
    perf::{EventAttr, PerfEvent, SamplePolicy, Scope, SoftwareEvent},
    record::Workload,
    symbolize::Normalizer,
};
use profiler_common::{RequestConfig, SamplerConfig, filter};
use profiler_tests::*;

const USER: u32 = request::COUNT_USER;
const NOTIFY: u32 = request::OVF_NOTIFY_EMT | request::COUNT_USER;

fn handle(policy: OverflowPolicy) -> Cpc {
    let cpc = Cpc::open(VER_CURRENT).unwrap();
    cpc.set_error_handler(Some(Arc::new(|_, _, _| {})));
    cpc.set_overflow_policy(policy);
    cpc
}

fn collector(
    cpc: &Cpc,
    set: &profiler::cpc::Set,
) -> (Arc<Mutex<Vec<Overflow>>>, profiler::cpc::OverflowHandler) {
    let seen: Arc<Mutex<Vec<Overflow>>> = Arc::default();
    let s = seen.clone();
    let h = cpc
        .on_overflow(set, move |o| s.lock().unwrap().push(o))
        .unwrap();
    (seen, h)
}

/// Waits until at least `n` overflows were handled (the handler runs on its own thread).
fn wait_seen(seen: &Arc<Mutex<Vec<Overflow>>>, n: usize) {
    wait_for(&format!("{n} overflow notifications"), 10, || {
        (seen.lock().unwrap().len() >= n).then_some(())
    });
}

#[test]
fn every_thousandth_fault_of_touch_is_notified_inside_its_loop() {
    if !privileged() {
        return;
    }
    let _g = serial();
    let cpc = handle(OverflowPolicy::Continue);
    let argv: Vec<OsString> = vec![fixture("touch").into(), "10000".into(), "1".into()];
    let mut w = Workload::prepare(&argv).unwrap();
    let pid = w.pid();
    let mut set = cpc.set_create();
    cpc.set_add_request(&mut set, "page-faults", u64::MAX - 999, NOTIFY, &[])
        .unwrap();
    cpc.set_add_request(&mut set, "page-faults", 0, USER, &[])
        .unwrap();
    cpc.bind_pctx(pid as i32, Lwp::All, &mut set, 0).unwrap();
    let (seen, handler) = collector(&cpc, &set);
    w.start().unwrap();
    let mut normalizer = Normalizer::new();
    normalizer.observe(pid, None); // after exec: the maps of touch itself
    while w.try_reap().is_none() {
        thread::sleep(Duration::from_millis(20));
    }
    let mut buf = cpc.buf_create(&set).unwrap();
    cpc.set_sample(&set, &mut buf).unwrap();
    let faults = buf.values()[1];
    wait_seen(&seen, (faults / 1000) as usize);
    drop(handler);
    let seen = seen.lock().unwrap();
    eprintln!("{faults} faults, {} notifications", seen.len());
    assert!(faults >= 10_000);
    assert_eq!(
        seen.len() as u64,
        faults / 1000,
        "one notification per 1000 faults"
    );
    let stats = cpc.overflow_stats(&set).unwrap();
    assert_eq!((stats.lost, stats.submitted), (0, seen.len() as u64));
    for o in seen.iter() {
        assert_eq!((o.pid, o.request), (pid, 0));
        let frames = normalizer.user_now(pid, None, o.pc, false);
        let f = frames.last().unwrap();
        assert_eq!(
            f.function.as_ref(),
            "run",
            "overflow PC {:#x} is not in touch.c's loop: {frames:?}",
            o.pc
        );
        assert_eq!(f.line, Some(15), "touch.c:15 is the touching loop: {f:?}");
        assert!(
            o.value < 1000,
            "the value wrapped past 0 at the overflow: {}",
            o.value
        );
    }
}

#[test]
fn freeze_until_restart_then_new_preset_every_5000() {
    if !privileged() {
        return;
    }
    let _g = serial();
    let cpc = handle(OverflowPolicy::Freeze);
    let mut set = cpc.set_create();
    cpc.set_add_request(&mut set, "page-faults", 0, USER, &[])
        .unwrap();
    cpc.set_add_request(&mut set, "page-faults", u64::MAX - 999, NOTIFY, &[])
        .unwrap();
    let mut buf = cpc.buf_create(&set).unwrap();
    cpc.bind_curlwp(&mut set, 0).unwrap();
    let (seen, handler) = collector(&cpc, &set);
    touch_pages(5000);
    cpc.set_sample(&set, &mut buf).unwrap();
    // Frozen at the 1000th fault: the whole set stopped there (the notifying request leads
    // the group), so the plain count is exactly 1000 and the notifying value wrapped to 0.
    assert_eq!(buf.values(), &[1000, 0]);
    touch_pages(1000);
    cpc.set_sample(&set, &mut buf).unwrap();
    assert_eq!(buf.values(), &[1000, 0], "still frozen");
    // New preset, then restart: values restart at the presets, the next overflow is 5000 on.
    cpc.request_preset(1, u64::MAX - 4999).unwrap();
    cpc.set_restart(&set).unwrap();
    cpc.set_sample(&set, &mut buf).unwrap();
    assert_eq!(buf.values(), &[0, u64::MAX - 4999]);
    touch_pages(20000);
    cpc.set_sample(&set, &mut buf).unwrap();
    assert_eq!(buf.values(), &[5000, 0], "frozen again after exactly 5000");
    wait_seen(&seen, 2);
    drop(handler);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "one notification per freeze: {seen:?}");
    assert!(seen.iter().all(|o| o.request == 1 && o.value == 0));
    // The set's own copy keeps the original preset (libcpc): walk_requests shows it.
    let mut presets = Vec::new();
    cpc.walk_requests(&set, |_, _, p, _, _| presets.push(p));
    assert_eq!(presets, vec![u64::MAX - 999, 0]);
}

#[test]
fn continue_policy_notifies_every_period_after_restart() {
    if !privileged() {
        return;
    }
    let _g = serial();
    let cpc = handle(OverflowPolicy::Continue);
    let mut set = cpc.set_create();
    cpc.set_add_request(&mut set, "page-faults", u64::MAX - 999, NOTIFY, &[])
        .unwrap();
    cpc.bind_curlwp(&mut set, 0).unwrap();
    let (seen, handler) = collector(&cpc, &set);
    touch_pages(3000);
    wait_seen(&seen, 3);
    let before = seen.lock().unwrap().len();
    assert_eq!(before, 3);
    cpc.request_preset(0, u64::MAX - 4999).unwrap();
    cpc.set_restart(&set).unwrap();
    touch_pages(20000);
    wait_seen(&seen, before + 4);
    drop(handler);
    let seen = seen.lock().unwrap();
    let after: Vec<u64> = seen[before..].iter().map(|o| o.value).collect();
    assert_eq!(
        after,
        vec![0, 5000, 10000, 15000],
        "every 5000 faults, values wrapping past 0"
    );
}

#[test]
fn shared_per_cpu_events_deliver_only_the_selected_process() {
    if !privileged() {
        return;
    }
    let _g = serial();
    let mut sampler = OverflowProgram::load(OverflowConfig {
        sampler: SamplerConfig {
            filter: filter::TGID,
            ..Default::default()
        },
        ring_bytes: 1 << 20,
        ..Default::default()
    })
    .unwrap();
    sampler.set_request(0, RequestConfig::default()).unwrap();
    let mut attr = EventAttr::software(SoftwareEvent::PageFaults);
    attr.set_sample_policy(SamplePolicy::Period(100));
    for cpu in aya::util::online_cpus().unwrap() {
        let ev = PerfEvent::open(&attr, Scope::Cpu(cpu), None, || "page-faults".into()).unwrap();
        sampler.attach(ev, 0).unwrap();
    }
    let spawn = |n: &str| {
        let argv: Vec<OsString> = vec![fixture("touch").into(), n.into(), "1".into()];
        Workload::prepare(&argv).unwrap()
    };
    let (mut a, mut b) = (spawn("20000"), spawn("30000"));
    sampler.add_tgid(a.pid()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (pids, stats) = rt.block_on(async {
        let mut records = RecordStream::new(sampler.take_records().unwrap()).unwrap();
        for e in sampler.events() {
            e.enable(false).unwrap();
        }
        a.start().unwrap();
        b.start().unwrap();
        let mut pids = Vec::new();
        // try_reap reports an exit once, so remember each.
        let (mut a_done, mut b_done) = (false, false);
        while !(a_done && b_done) {
            records
                .next_batch(Duration::from_millis(20), |r| pids.push(r.pid))
                .await;
            a_done |= a.try_reap().is_some();
            b_done |= b.try_reap().is_some();
        }
        sampler.detach_all();
        records.drain(|r| pids.push(r.pid));
        (pids, sampler.stats().unwrap())
    });
    eprintln!("{} records, {stats:?}", pids.len());
    assert!(
        pids.iter().all(|&p| p == a.pid()),
        "only the selected process's records arrive"
    );
    // 20000 faults of A at one record per 100 per-CPU faults; B's 30000 are filtered.
    assert!(pids.len() >= 190, "{} records for A", pids.len());
    assert!(
        stats.filtered >= 290,
        "B's overflows are counted as filtered: {stats:?}"
    );
    assert_eq!(stats.submitted, pids.len() as u64);
    assert_eq!(stats.lost, 0);
}

#[test]
fn overload_loss_matches_the_records_that_did_not_arrive() {
    if !privileged() {
        return;
    }
    let _g = serial();
    // Count program runs in the kernel: an account independent of the program's counters.
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).unwrap();
    // 16 KiB holds 7 records; nothing is read until the workload is done.
    let mut sampler = OverflowProgram::load(OverflowConfig {
        sampler: SamplerConfig {
            wakeup_bytes: u64::MAX,
            ..Default::default()
        },
        ring_bytes: 16 << 10,
        ..Default::default()
    })
    .unwrap();
    sampler.set_request(0, RequestConfig::default()).unwrap();
    let mut attr = EventAttr::software(SoftwareEvent::PageFaults);
    attr.set_sample_policy(SamplePolicy::Period(1))
        .set_exclude_kernel(true);
    let ev = PerfEvent::open(&attr, Scope::Thread(0), None, || "page-faults".into()).unwrap();
    sampler.attach(ev, 0).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (received, stats, runs) = rt.block_on(async {
        let mut records = RecordStream::new(sampler.take_records().unwrap()).unwrap();
        sampler.events()[0].enable(false).unwrap();
        touch_pages(20000);
        sampler.events()[0].disable(false).unwrap();
        let received = records.drain(|_| {}) as u64;
        (
            received,
            sampler.stats().unwrap(),
            sampler.run_count().unwrap(),
        )
    });
    eprintln!("program ran {runs} times: received {received}, {stats:?}");
    assert!(stats.lost > 0, "a tiny ring must overflow");
    assert_eq!(received, stats.submitted, "every submitted record arrived");
    assert_eq!(
        received + stats.lost,
        runs,
        "every run is a record or a counted loss"
    );
    assert!(runs >= 1000, "the workload overflowed often ({runs})");
}

static SIGNALS: AtomicU64 = AtomicU64::new(0);
static SIGNAL_TID: AtomicU64 = AtomicU64::new(0);
static SIGNAL_PC: AtomicU64 = AtomicU64::new(0);
static SIGNAL_CODE: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(_sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler; we
    // only read them and store into atomics (async-signal-safe).
    unsafe {
        let uc = ctx as *const libc::ucontext_t;
        SIGNAL_PC.store(
            (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] as u64,
            Ordering::SeqCst,
        );
        SIGNAL_CODE.store((*info).si_code as u64, Ordering::SeqCst);
        SIGNAL_TID.store(libc::gettid() as u64, Ordering::SeqCst);
    }
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn signal_mode_interrupts_the_overflowing_thread_with_its_pc() {
    if !privileged() {
        return;
    }
    let _g = serial();
    let sig = libc::SIGRTMIN() + 3;
    // SAFETY: installs a handler that only touches atomics.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        assert_eq!(libc::sigaction(sig, &sa, std::ptr::null_mut()), 0);
    }
    let cpc = handle(OverflowPolicy::Continue);
    cpc.set_overflow_signal(Some(sig)).unwrap();
    let worker = thread::spawn(move || {
        let mut set = cpc.set_create();
        cpc.set_add_request(&mut set, "page-faults", u64::MAX - 999, NOTIFY, &[])
            .unwrap();
        cpc.bind_curlwp(&mut set, 0).unwrap();
        let (seen, handler) = collector(&cpc, &set);
        touch_pages(5000);
        wait_seen(&seen, 5);
        drop(handler);
        cpc.unbind(&mut set).unwrap();
        let last = seen
            .lock()
            .unwrap()
            .last()
            .copied()
            .expect("overflows recorded");
        // SAFETY: gettid has no preconditions.
        (unsafe { libc::gettid() as u64 }, last)
    });
    let (tid, last) = worker.join().unwrap();
    assert_eq!(
        SIGNALS.load(Ordering::SeqCst),
        5,
        "one signal per 1000 faults"
    );
    assert_eq!(
        SIGNAL_TID.load(Ordering::SeqCst),
        tid,
        "delivered to the overflowing thread"
    );
    assert_eq!(last.tid as u64, tid);
    assert_eq!(
        SIGNAL_CODE.load(Ordering::SeqCst),
        0x80,
        "si_code SI_KERNEL, as bpf_send_signal_thread sends"
    );
    // The handler's ucontext PC is the overflowing instruction: the faulting store, which
    // resumes once the fault is handled, is where the engine sampled the PC.
    let pc = SIGNAL_PC.load(Ordering::SeqCst);
    assert_eq!(
        pc, last.pc,
        "handler PC {pc:#x} vs overflow PC {:#x}",
        last.pc
    );
    let mut normalizer = Normalizer::new();
    normalizer.observe(std::process::id(), None);
    let frames = normalizer.user_now(std::process::id(), None, pc, false);
    // Debug builds keep ptr::write_volatile out of line; release builds inline it.
    assert!(
        frames
            .iter()
            .any(|f| f.function.contains("touch_pages") || f.function.contains("write_volatile")),
        "the handler's PC {pc:#x} is in the touching loop: {frames:?}"
    );
}

#[test]
fn overflow_records_carry_the_whole_sets_values_when_asked() {
    if !privileged() {
        return;
    }
    let _g = serial();
    let cpc = handle(OverflowPolicy::Continue);
    cpc.set_overflow_values(true);
    let mut set = cpc.set_create();
    cpc.set_add_request(&mut set, "page-faults", u64::MAX - 999, NOTIFY, &[])
        .unwrap();
    cpc.set_add_request(&mut set, "page-faults", 7, USER, &[])
        .unwrap();
    cpc.set_add_request(&mut set, "task-clock", 0, USER, &[])
        .unwrap();
    cpc.bind_curlwp(&mut set, 0).unwrap();
    let (seen, handler) = collector(&cpc, &set);
    touch_pages(3000);
    wait_seen(&seen, 3);
    drop(handler);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    let mut last_clock = 0;
    for (k, o) in seen.iter().enumerate() {
        let v = o.values();
        assert_eq!(v.len(), 3, "all three requests: {v:?}");
        assert_eq!(v[0], o.value, "the overflowing request's own value");
        // Same thread, same faults: the plain counter (preset 7) is at exactly 1000·(k+1).
        assert_eq!(v[1], 7 + 1000 * (k as u64 + 1), "overflow {k}: {v:?}");
        assert!(v[2] > last_clock, "task-clock advances: {v:?}");
        last_clock = v[2];
    }
    // Page-fault events carry the faulting address: 1000 pages between overflows.
    for w in seen.windows(2) {
        assert_eq!(
            w[1].addr - w[0].addr,
            1000 * 4096,
            "{:#x} -> {:#x}",
            w[0].addr,
            w[1].addr
        );
    }
}
