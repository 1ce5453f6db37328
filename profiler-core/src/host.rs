//! Facts about this host the whole crate reads the same way: online CPUs, a process's
//! threads, and the monotonic clock (libcpc's `gethrtime`).

use std::io;

/// The online CPUs, ascending.
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let mut cpus = aya::util::online_cpus().map_err(|(_, e)| e)?;
    cpus.sort_unstable();
    Ok(cpus)
}

/// The threads of a process (from /proc/PID/task), ascending.
pub fn threads(pid: i32) -> io::Result<Vec<i32>> {
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// CLOCK_MONOTONIC in nanoseconds (libcpc's `gethrtime`, the clock of `Buf::hrtime`).
pub fn hrtime() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_and_its_cpus() {
        let me = std::process::id() as i32;
        assert!(threads(me).unwrap().contains(&me));
        let cpus = online_cpus().unwrap();
        assert!(!cpus.is_empty() && cpus.windows(2).all(|w| w[0] < w[1]));
        let (a, b) = (hrtime(), hrtime());
        assert!(a > 0 && b >= a);
    }
}
