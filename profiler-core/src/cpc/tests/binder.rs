//! The binder against [`Fake`]: what it opens, in which group, with which flags; how it
//! enables, reads and closes; and how it reports a failed open.

use std::sync::Mutex;

use crate::{
    cpc::{
        Cpc, CpcError,
        consts::{VER_CURRENT, request},
    },
    events::{Catalog, testutil::FakeTree},
    kernel::{
        FLAG_FD_CLOEXEC, FLAG_PID_CGROUP, Ioctl,
        fake::{Call, Fake},
    },
};

/// Thread bindings fail (EAGAIN) while a CPU binding exists anywhere in the process, and
/// other unit tests may bind: these tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

/// A handle on the fake kernel with a software-only catalogue (an empty sysfs tree), so the
/// tick is task-clock whatever the host has.
fn handle() -> (Cpc, &'static Fake) {
    let fake = Fake::leak();
    let tree = FakeTree::new("binder");
    let cpc = Cpc::open_in(fake, VER_CURRENT, || Catalog::from_roots(tree.path(), None))
        .expect("open on the fake kernel");
    (cpc, fake)
}

/// One perf_event_open: (fd, type, config, pid, cpu, group, flags, disabled).
type Open = (i32, u32, u64, i32, i32, Option<i32>, u64, bool);

/// The opens among `calls`.
fn opens(calls: &[Call]) -> Vec<Open> {
    calls
        .iter()
        .filter_map(|c| match *c {
            Call::Open {
                fd,
                type_,
                config,
                pid,
                cpu,
                group,
                flags,
                disabled,
                read_format,
            } => {
                assert_eq!(read_format, 0b1111, "group, times and ids");
                Some((fd, type_, config, pid, cpu, group, flags, disabled))
            }
            _ => None,
        })
        .collect()
}

const SOFTWARE: u32 = 1;
const TASK_CLOCK: u64 = 1;
const PAGE_FAULTS: u64 = 2;
const CONTEXT_SWITCHES: u64 = 3;

#[test]
fn curlwp_opens_one_group_enables_it_reads_it_and_closes_it() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (cpc, fake) = handle();
    let mut set = cpc.set_create();
    cpc.set_add_request(&mut set, "page-faults", 5, request::COUNT_USER, &[])
        .unwrap();
    cpc.set_add_request(&mut set, "context-switches", 0, request::COUNT_USER, &[])
        .unwrap();
    let mut buf = cpc.buf_create(&set).unwrap();
    let before = fake.calls().len();
    cpc.bind_curlwp(&mut set, 0).unwrap();
    let calls = fake.calls()[before..].to_vec();
    let o = opens(&calls);
    assert_eq!(o.len(), 3, "two requests and the tick: {calls:?}");
    let leader = o[0].0;
    // The first request leads, disabled; members follow it; the tick is last. All on the
    // calling thread (pid 0, any CPU), close-on-exec.
    assert_eq!(
        o[0],
        (
            leader,
            SOFTWARE,
            PAGE_FAULTS,
            0,
            -1,
            None,
            FLAG_FD_CLOEXEC,
            true
        )
    );
    assert_eq!(
        o[1],
        (
            o[1].0,
            SOFTWARE,
            CONTEXT_SWITCHES,
            0,
            -1,
            Some(leader),
            FLAG_FD_CLOEXEC,
            false
        )
    );
    assert_eq!(
        (o[2].1, o[2].2, o[2].5),
        (SOFTWARE, TASK_CLOCK, Some(leader))
    );
    assert_eq!(
        calls.last(),
        Some(&Call::Ioctl {
            fd: leader,
            op: Ioctl::Enable { group: true }
        }),
        "the whole group is enabled once everything is open"
    );

    // Each read of the fake adds 10 × (member + 1); values are preset + count.
    cpc.set_sample(&set, &mut buf).unwrap();
    assert_eq!(buf.values(), &[5 + Fake::count(0, 1), Fake::count(1, 1)]);
    cpc.set_sample(&set, &mut buf).unwrap();
    assert_eq!(buf.values(), &[5 + Fake::count(0, 2), Fake::count(1, 2)]);
    assert_eq!(buf.times(), (2000, 2000));
    let reads: Vec<_> = fake.calls()[before..]
        .iter()
        .filter(|c| matches!(c, Call::Read { .. }))
        .cloned()
        .collect();
    assert_eq!(
        reads,
        vec![Call::Read { fd: leader }; 2],
        "one read(2) of the leader per sample"
    );

    cpc.unbind(&mut set).unwrap();
    assert_eq!(
        fake.calls().last(),
        Some(&Call::Ioctl {
            fd: leader,
            op: Ioctl::Disable { group: true }
        })
    );
    let err = cpc.set_sample(&set, &mut buf).unwrap_err();
    assert_eq!(err.errno, libc::EINVAL, "{err}");
}

#[test]
fn cgroup_binding_opens_a_group_per_online_cpu_on_the_directory_fd() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (cpc, fake) = handle();
    let dir = FakeTree::new("cgroup");
    let mut set = cpc.set_create();
    cpc.set_add_request(&mut set, "page-faults", 0, request::COUNT_USER, &[])
        .unwrap();
    let before = fake.calls().len();
    cpc.bind_cgroup(dir.path(), &mut set, 0).unwrap();
    let o = opens(&fake.calls()[before..]);
    let cpus = crate::host::online_cpus().unwrap();
    assert_eq!(o.len(), 2 * cpus.len(), "request and tick per CPU");
    for (pair, &cpu) in o.chunks(2).zip(&cpus) {
        let (leader, member) = (pair[0], pair[1]);
        assert_eq!(leader.4, cpu as i32);
        assert_eq!(leader.6, FLAG_FD_CLOEXEC | FLAG_PID_CGROUP);
        assert!(leader.3 >= 0, "pid is the cgroup directory's fd");
        assert_eq!(
            (member.3, member.4, member.5),
            (leader.3, leader.4, Some(leader.0))
        );
        assert_eq!(member.2, crate::perf::SoftwareEvent::CpuClock as u64);
    }
    cpc.unbind(&mut set).unwrap();
}

#[test]
fn a_failed_open_reports_the_event_and_errno_and_binds_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (cpc, fake) = handle();
    let mut set = cpc.set_create();
    cpc.set_add_request(&mut set, "page-faults", 0, request::COUNT_USER, &[])
        .unwrap();
    cpc.set_add_request(&mut set, "context-switches", 0, request::COUNT_USER, &[])
        .unwrap();
    let mut buf = cpc.buf_create(&set).unwrap();
    // The leader opens; the second request is refused.
    fake.fail_open(1, libc::EACCES);
    let err: CpcError = cpc.bind_curlwp(&mut set, 0).unwrap_err();
    assert_eq!((err.func, err.errno), ("cpc_bind_curlwp", libc::EACCES));
    assert!(
        err.message.contains("context-switches") && err.message.contains("perf_event_open"),
        "names the call and the event: {err}"
    );
    assert_eq!(
        cpc.set_sample(&set, &mut buf).unwrap_err().errno,
        libc::EINVAL
    );
    // Refused as a whole: nothing was enabled.
    assert!(!fake.calls().iter().any(|c| matches!(
        c,
        Call::Ioctl {
            op: Ioctl::Enable { .. },
            ..
        }
    )));

    // ENOENT (no such event here) is libcpc's ENOTSUP.
    fake.fail_open(0, libc::ENOENT);
    let err = cpc.bind_curlwp(&mut set, 0).unwrap_err();
    assert_eq!(err.errno, libc::ENOTSUP, "{err}");
    // And with the kernel willing again, the same set binds.
    cpc.bind_curlwp(&mut set, 0).unwrap();
    cpc.set_sample(&set, &mut buf).unwrap();
}
