//! cpustat `-s`: one spinning "soaker" thread per measured CPU, at the lowest priority
//! (SCHED_IDLE here, Solaris uses FX priority 0), run only while a system-only set is bound,
//! so that the idle loop does not pollute kernel-mode counts.

use std::{
    io,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::Duration,
};

use nix::{
    sched::{CpuSet, sched_setaffinity},
    unistd::Pid,
};

/// A soaker that runs, but not as asked (the CLI prints it; counting goes on).
#[derive(Debug, thiserror::Error)]
pub enum SoakWarning {
    #[error("soaker: couldn't bind soaker thread to cpu{cpu}: {source}")]
    Bind { cpu: u32, source: nix::Error },
    #[error("soaker: couldn't make soaker thread SCHED_IDLE: {source}")]
    Idle { cpu: u32, source: io::Error },
}

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
    /// Starts one paused soaker bound to each CPU in `cpus`, once each has set itself up;
    /// with what did not go as asked.
    pub fn start(cpus: &[u32]) -> io::Result<(Soakers, Vec<SoakWarning>)> {
        let run = Arc::new(AtomicBool::new(false));
        let quit = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let (tx, rx) = mpsc::channel();
        for &cpu in cpus {
            let (run, quit, tx) = (run.clone(), quit.clone(), tx.clone());
            let mut set = CpuSet::new();
            set.set(cpu as usize).map_err(io::Error::from)?;
            let t = std::thread::Builder::new()
                .name(format!("soak{cpu}"))
                .spawn(move || {
                    let mut warnings = Vec::new();
                    if let Err(source) = sched_setaffinity(Pid::from_raw(0), &set) {
                        warnings.push(SoakWarning::Bind { cpu, source });
                    }
                    if let Err(source) = idle_priority() {
                        warnings.push(SoakWarning::Idle { cpu, source });
                    }
                    let _ = tx.send(warnings);
                    drop(tx);
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
        drop(tx);
        // Each thread sends once, set up; a thread that died first closes its sender.
        let warnings = rx.iter().flatten().collect();
        Ok((Soakers { run, quit, threads }, warnings))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_soaker_that_cannot_be_placed_is_a_warning_not_a_print() {
        // CPU 1000 is in a CpuSet but on no machine this runs on: the bind fails (EINVAL).
        let (soakers, warnings) = Soakers::start(&[0, 1000]).unwrap();
        drop(soakers);
        let binds: Vec<String> = warnings
            .iter()
            .filter(|w| matches!(w, SoakWarning::Bind { .. }))
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            binds,
            ["soaker: couldn't bind soaker thread to cpu1000: EINVAL: Invalid argument"]
        );
    }
}
