//! cpustat `-s`: one spinning "soaker" thread per measured CPU, at the lowest priority
//! (SCHED_IDLE here, Solaris uses FX priority 0), run only while a system-only set is bound,
//! so that the idle loop does not pollute kernel-mode counts.

use std::{
    io,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use nix::{
    sched::{CpuSet, sched_setaffinity},
    unistd::Pid,
};

pub struct Soakers {
    run: Arc<AtomicBool>,
    quit: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// Makes the calling thread SCHED_IDLE.
fn idle_priority() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler(0, ..) acts on the calling thread and reads the param we
    // pass by pointer.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Soakers {
    /// Starts one paused soaker bound to each CPU in `cpus`.
    pub fn start(cpus: &[u32]) -> io::Result<Soakers> {
        let run = Arc::new(AtomicBool::new(false));
        let quit = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for &cpu in cpus {
            let (run, quit) = (run.clone(), quit.clone());
            let mut set = CpuSet::new();
            set.set(cpu as usize).map_err(io::Error::from)?;
            let t = std::thread::Builder::new()
                .name(format!("soak{cpu}"))
                .spawn(move || {
                    if let Err(e) = sched_setaffinity(Pid::from_raw(0), &set) {
                        eprintln!("soaker: couldn't bind soaker thread to cpu{cpu}: {e}");
                    }
                    if let Err(e) = idle_priority() {
                        eprintln!("soaker: couldn't make soaker thread SCHED_IDLE: {e}");
                    }
                    while !quit.load(Ordering::Relaxed) {
                        if run.load(Ordering::Relaxed) {
                            std::hint::spin_loop();
                        } else {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                })?;
            threads.push(t);
        }
        Ok(Soakers { run, quit, threads })
    }

    /// Spins (a system-only set is bound) or pauses.
    pub fn set_running(&self, on: bool) {
        self.run.store(on, Ordering::Relaxed);
    }
}

impl Drop for Soakers {
    fn drop(&mut self) {
        self.quit.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
