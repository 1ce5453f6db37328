//! Periodic samples (`tick` rows, `-N`) and letting processes go (after `-N`, on a
//! terminating signal, when the output is closed).

use std::io::Write as _;

use super::{ptrace, tracer::Tracer};

impl Tracer<'_> {
    /// Lets a process go: its threads are uncounted now and detached at their next stop.
    pub fn release(&mut self, pid: i32) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        p.releasing = true;
        let tids: Vec<i32> = p.threads.iter().copied().collect();
        if tids.is_empty() {
            self.procs.remove(&pid);
        }
        for tid in tids {
            if let Some(t) = self.threads.get_mut(&tid) {
                t.counting = None;
                if !t.releasing {
                    t.releasing = true;
                    // ESRCH: it is dead, and its report will remove it.
                    let _ = ptrace::interrupt(tid);
                }
            }
        }
    }

    /// Lets everything go (interrupted, or output closed).
    pub fn release_all(&mut self) {
        let pids: Vec<i32> = self.procs.keys().copied().collect();
        for pid in pids {
            self.release(pid);
        }
        // Threads of processes already gone from the table (adopted ones being let go).
        for (&tid, t) in &mut self.threads {
            if !t.releasing {
                t.releasing = true;
                let _ = ptrace::interrupt(tid);
            }
        }
    }

    /// One periodic sample of every thread of every tracked process; a process that has
    /// had its `-N` samples is let go.
    pub fn tick(&mut self) {
        let pids: Vec<i32> = self
            .procs
            .iter()
            .filter(|(_, p)| !p.releasing)
            .map(|(pid, _)| *pid)
            .collect();
        for pid in pids {
            let tids: Vec<i32> = self.procs[&pid].threads.iter().copied().collect();
            for tid in tids {
                self.tick_thread(pid, tid);
            }
            let Some(left) = self.procs.get_mut(&pid).and_then(|p| p.ticks_left.as_mut()) else {
                continue;
            };
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.release(pid);
            }
        }
    }

    fn tick_thread(&mut self, pid: i32, tid: i32) {
        let Some(counting) = self.threads.get_mut(&tid).and_then(|t| t.counting.as_mut()) else {
            return;
        };
        match counting.tick(self.cpc, &self.opts.sets) {
            Ok((set, delta)) => {
                self.out
                    .counts((pid, tid), "tick", &delta, &self.opts.sets[set]);
            }
            Err(e) => {
                let why = self.describe(&e);
                let _ = writeln!(
                    self.diag,
                    "{pid:6}: tick: lwp{tid}: can't access perf counter - {why}"
                );
                self.errors = true;
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.counting = None;
                }
            }
        }
    }
}
