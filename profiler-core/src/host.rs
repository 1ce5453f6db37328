//! Facts about this host the whole crate reads the same way: online CPUs, a process's
//! threads, status fields and start time, perf's sample-rate limit, the calling thread's id,
//! and the monotonic clock (libcpc's `gethrtime`).

use std::{cell::Cell, io, sync::Once};

/// The online CPUs, ascending.
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let mut cpus = aya::util::online_cpus().map_err(|(_, e)| e)?;
    cpus.sort_unstable();
    Ok(cpus)
}

/// A task's `/proc/<task>/status` (`self`, a pid or a tid), read once for its fields.
pub struct TaskStatus {
    text: String,
}

impl TaskStatus {
    pub fn read(task: impl std::fmt::Display) -> io::Result<Self> {
        std::fs::read_to_string(format!("/proc/{task}/status")).map(Self::from_text)
    }

    pub fn from_text(text: String) -> Self {
        Self { text }
    }

    /// The value of field `name` (`"Uid"`, `"NSpid"`, ...), trimmed.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.text.lines().find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key == name).then(|| value.trim())
        })
    }
}

/// The threads of a process (from /proc/PID/task), ascending.
pub fn threads(pid: i32) -> io::Result<Vec<i32>> {
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// When process `pid` started, on the wall clock: `starttime` of /proc/PID/stat (clock ticks
/// since boot, CLOCK_BOOTTIME) after the boot's wall time (now less CLOCK_BOOTTIME). Good to
/// a tick and to any step of the wall clock since boot; `None` once the process is gone.
pub fn process_started(pid: u32) -> Option<std::time::SystemTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    started_from_stat(&stat)
}

fn started_from_stat(stat: &str) -> Option<std::time::SystemTime> {
    use nix::{time::ClockId, unistd::SysconfVar};
    // The command name may hold spaces and parentheses: fields count from its last ')'.
    // After it come field 3 (state) onwards; starttime is field 22.
    let ticks: u64 = stat
        .get(stat.rfind(')')? + 1..)?
        .split_ascii_whitespace()
        .nth(22 - 3)?
        .parse()
        .ok()?;
    let hz = nix::unistd::sysconf(SysconfVar::CLK_TCK).ok()??;
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0)?;
    let since_boot = std::time::Duration::from(ClockId::CLOCK_BOOTTIME.now().ok()?);
    let boot = std::time::SystemTime::now().checked_sub(since_boot)?;
    boot.checked_add(std::time::Duration::from_nanos(
        ticks.checked_mul(1_000_000_000 / hz)?,
    ))
}

/// `kernel.perf_event_max_sample_rate`: the highest sampling frequency perf accepts (it
/// lowers it under load); `None` when unreadable.
pub fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

thread_local! {
    /// This thread's id once asked (0: not yet). gettid(2) costs a syscall, and
    /// `set_sample` asks on every call.
    static TID: Cell<i32> = const { Cell::new(0) };
}

/// The child of a fork is a new thread with the forking thread's thread-locals.
extern "C" fn forget_tid() {
    // `try_with`: nothing to forget if this thread never asked.
    let _ = TID.try_with(|t| t.set(0));
}

/// The calling thread's id (gettid(2)), remembered per thread and forgotten across fork.
pub fn gettid() -> i32 {
    TID.with(|t| {
        let cached = t.get();
        if cached != 0 {
            return cached;
        }
        static AT_FORK: Once = Once::new();
        AT_FORK.call_once(|| {
            // SAFETY: registers a handler that only writes a thread-local Cell; it stays
            // valid for the life of the process (a plain function).
            unsafe { libc::pthread_atfork(None, None, Some(forget_tid)) };
        });
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        t.set(tid);
        tid
    })
}

/// CLOCK_MONOTONIC in nanoseconds (libcpc's `gethrtime`, the clock of `Buf::hrtime`).
/// Called on every `set_sample`: straight to the vDSO, without a wrapper's error mapping.
#[inline]
pub fn hrtime() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec we pass; CLOCK_MONOTONIC always exists.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_status_fields_of_this_process() {
        let status = super::TaskStatus::read("self").unwrap();
        assert_eq!(
            status.field("Tgid").and_then(|v| v.parse::<u32>().ok()),
            Some(std::process::id())
        );
        assert_eq!(status.field("Tgi"), None);
        assert!(status.field("CapEff").is_some_and(|v| v.len() == 16));
    }

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

    #[test]
    fn this_process_started_before_now_and_after_boot() {
        let started = process_started(std::process::id()).expect("our own start");
        let now = std::time::SystemTime::now();
        // The test binary has been running a little while, and not for days.
        let age = now.duration_since(started).expect("started before now");
        assert!(age < std::time::Duration::from_secs(24 * 3600), "{age:?}");
        assert_eq!(process_started(u32::MAX - 7), None);
        // A command name with spaces and parentheses does not shift the fields.
        let stat = "42 (a) b (c) R 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 0 1000 50";
        let boot = started_from_stat(stat).unwrap();
        let one_tick_later = started_from_stat(&stat.replace(" 0 1000 50", " 1 1000 50"));
        assert!(one_tick_later.unwrap() > boot);
    }

    #[test]
    fn thread_ids_are_per_thread_and_renewed_in_a_forked_child() {
        // SAFETY: gettid has no preconditions.
        let real = || unsafe { libc::gettid() };
        assert_eq!(gettid(), real());
        assert_eq!(gettid(), real(), "the remembered id");
        let other = std::thread::spawn(move || (gettid(), real()))
            .join()
            .unwrap();
        assert_eq!(other.0, other.1);
        assert_ne!(other.0, gettid());
        // SAFETY: the child only reads a thread-local, calls getpid and gettid (through the
        // atfork-cleared cache), and leaves with _exit: all async-signal-safe.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above; the child's only thread is its process's main thread.
            unsafe { libc::_exit(if gettid() == libc::getpid() { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child's id is its own"
        );
    }
}
