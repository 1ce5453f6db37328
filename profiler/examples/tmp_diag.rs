//! Benchmark for `cargo xtask bench`: the cost of one `set_sample` of a 4-event set bound to
//! this thread, against a bare `read(2)` of the same perf group fd (the floor: what any
//! counting library must pay). Alternates blocks of each (A B A B) and prints one JSON object
//! with the nanoseconds per call of every block. Run as root: `cargo run --release --example
//! bench_sample -- [BLOCKS [CALLS_PER_BLOCK]]`.
use std::{
    fs,
    os::fd::{BorrowedFd, RawFd},
    time::Instant,
};

use profiler::cpc::{
    Cpc,
    consts::{VER_CURRENT, request},
};

const EVENTS: [&str; 4] = [
    "task-clock",
    "page-faults",
    "context-switches",
    "cpu-migrations",
];

/// This process's open perf event fds.
fn perf_fds() -> Vec<RawFd> {
    let mut fds: Vec<RawFd> = fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy() == "anon_inode:[perf_event]")
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    fds
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let blocks: usize = args.next().map_or(Ok(20), |a| a.parse())?;
    let calls: usize = args.next().map_or(Ok(20_000), |a| a.parse())?;

    let cpc = Cpc::open(VER_CURRENT)?;
    let mut set = cpc.set_create();
    for event in EVENTS {
        cpc.set_add_request(&mut set, event, 0, request::COUNT_USER, &[])?;
    }
    let mut buf = cpc.buf_create(&set)?;
    let before = perf_fds();
    cpc.bind_curlwp(&mut set, 0)?;
    // The group's members are the fds the binding opened; the leader was opened first. A read
    // of a group member with PERF_FORMAT_GROUP returns the whole group.
    let leader = perf_fds()
        .into_iter()
        .find(|fd| !before.contains(fd))
        .ok_or("bind_curlwp opened no perf event")?;
    // SAFETY: the fd belongs to the bound set, which stays bound (and the fd open) until the
    // end of main; it is only read.
    let group = unsafe { BorrowedFd::borrow_raw(leader) };
    // nr, time_enabled, time_running, then {value, id} for the 4 requests and the tick member.
    let mut raw = [0u8; 8 * (3 + 2 * 5)];

    let (mut sample_ns, mut read_ns) = (Vec::new(), Vec::new());
    let mut clk_ns = Vec::new();
    let mtx = std::sync::Mutex::new(0u64);
    for _ in 0..blocks {
        let t = Instant::now();
        for _ in 0..calls {
            cpc.set_sample(&set, &mut buf)?;
        }
        sample_ns.push(t.elapsed().as_nanos() as f64 / calls as f64);
        std::hint::black_box(&buf);

        let t = Instant::now();
        for _ in 0..calls {
            let n = nix::unistd::read(group, &mut raw)?;
            if n < 8 * (3 + 2 * EVENTS.len()) {
                return Err(format!("short group read: {n} bytes").into());
            }
        }
        read_ns.push(t.elapsed().as_nanos() as f64 / calls as f64);
        std::hint::black_box(&raw);
        let t = Instant::now();
        for _ in 0..calls {
            let g = mtx.lock().unwrap();
            let n = nix::unistd::read(group, &mut raw)?;
            std::hint::black_box(profiler::host::hrtime());
            drop(g);
            if n < 8 {
                return Err("x".into());
            }
        }
        clk_ns.push(t.elapsed().as_nanos() as f64 / calls as f64);
    }
    let members = u64::from_ne_bytes(raw[..8].try_into()?);
    println!(
        "{}",
        serde_json::json!({
            "events": EVENTS,
            "group_members": members,
            "calls_per_block": calls,
            "set_sample_ns": sample_ns,
            "read_ns": read_ns, "clk_ns": clk_ns,
        })
    );
    Ok(())
}
