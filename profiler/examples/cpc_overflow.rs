//! libcpc in Rust: count page faults of this thread, and get notified every 1000th one.
//! Run as root: `cargo run --example cpc_overflow`.
use std::time::Duration;

use profiler::cpc::{
    Cpc, OverflowPolicy,
    consts::{VER_CURRENT, request},
};

fn touch(pages: usize) {
    let mut v = vec![0u8; pages * 4096];
    for i in 0..pages {
        v[i * 4096] = 1;
    }
    std::hint::black_box(&v);
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cpc = Cpc::open(VER_CURRENT)?;
    println!("{} ({} counters)", cpc.cciname(), cpc.npic());
    cpc.set_overflow_policy(OverflowPolicy::Continue);
    let mut set = cpc.set_create();
    let faults = cpc.set_add_request(&mut set, "page-faults", 0, request::COUNT_USER, &[])?;
    // Overflow after 1000 events: preset = 2^64 - 1000.
    let notify = request::OVF_NOTIFY_EMT | request::COUNT_USER;
    cpc.set_add_request(&mut set, "page-faults", u64::MAX - 999, notify, &[])?;
    let (mut before, mut after, mut diff) = (
        cpc.buf_create(&set)?,
        cpc.buf_create(&set)?,
        cpc.buf_create(&set)?,
    );
    cpc.bind_curlwp(&mut set, 0)?;
    let _handler = cpc.on_overflow(&set, |o| {
        println!(
            "overflow of request {} at pc {:#x}, thread {}, value {}",
            o.request, o.pc, o.tid, o.value
        )
    })?;
    cpc.set_sample(&set, &mut before)?;
    touch(3000);
    cpc.set_sample(&set, &mut after)?;
    cpc.buf_sub(&mut diff, &after, &before);
    std::thread::sleep(Duration::from_millis(100));
    println!(
        "page faults while touching 3000 pages: {}",
        cpc.buf_get(&diff, faults)?
    );
    Ok(())
}
