//! The end of a thread's or a process's counting: a thread's exit stop (`fini_lwp`,
//! `lwp_exit`), a process's exec (its old image's totals, then maybe a fresh start) and
//! its exit (the totals of all its threads).

use std::io::Write as _;

use super::{ptrace, tracer::Tracer};
use crate::tools::sample::Sample;

impl Tracer<'_> {
    /// Takes a thread's totals (and unbinds it): `fini_lwp` with -v, `lwp_exit` when it
    /// leaves alone; its totals go into its process's.
    pub(super) fn fini(&mut self, tid: i32, lwp_exit: bool) {
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        t.finished = true;
        let pid = t.pid;
        let Some(counting) = t.counting.take() else {
            return;
        };
        let (cur, totals) = match counting.finish(self.cpc) {
            Ok(r) => r,
            Err(e) => {
                let why = self.describe(&e);
                let _ = writeln!(
                    self.diag,
                    "{pid:6}: fini_lwp: lwp{tid}: can't access perf counters - {why}"
                );
                self.errors = true;
                return;
            }
        };
        let sets = &self.opts.sets;
        if self.opts.verbose {
            self.out
                .counts((pid, tid), "fini_lwp", &totals[cur], &sets[cur]);
        }
        if lwp_exit {
            for (total, set) in totals.iter().zip(sets).filter(|(t, _)| t.taken()) {
                self.out.counts((pid, tid), "lwp_exit", total, set);
            }
        }
        if let Some(p) = self.procs.get_mut(&pid) {
            for (acc, total) in p.accum.iter_mut().zip(&totals) {
                *acc = acc.plus(total);
            }
        }
    }

    pub(super) fn exit_stop(&mut self, tid: i32) {
        let alone = ptrace::exiting_alone(tid);
        if ptrace::exiting_group(tid) {
            let pid = self.threads[&tid].pid;
            if let Some(p) = self.procs.get_mut(&pid) {
                p.exit_lwp.get_or_insert(tid);
            }
        }
        self.fini(tid, alone);
    }

    /// Rows of a process's totals, one per set that has any.
    pub(super) fn totals_rows(&mut self, pid: i32, lwp: i32, event: &str) -> u64 {
        let Some(p) = self.procs.get(&pid) else {
            return 0;
        };
        let mut latest = 0;
        for (acc, set) in p.accum.iter().zip(&self.opts.sets) {
            if acc.taken() {
                self.out.counts((pid, lwp), event, acc, set);
                latest = latest.max(acc.hrtime);
            }
        }
        latest
    }

    /// At a terminating signal: every tracked process's counters read once more, its
    /// totals so far printed as its `exit` rows (it is let go or ended next, uncounted).
    pub(super) fn final_rows(&mut self) {
        let pids: Vec<i32> = self
            .procs
            .iter()
            .filter(|(_, p)| !p.releasing)
            .map(|(pid, _)| *pid)
            .collect();
        for pid in pids {
            let tids: Vec<i32> = self.procs[&pid].threads.iter().copied().collect();
            for tid in tids {
                if !self.threads.get(&tid).is_some_and(|t| t.finished) {
                    self.fini(tid, false);
                }
            }
            self.totals_rows(pid, pid, "exit");
        }
    }

    /// The process image was replaced (`pid` is the exec'ing thread, now the leader).
    pub(super) fn exec(&mut self, pid: i32) {
        let former = ptrace::event_message(pid).map_or(pid, |f| f as i32);
        let others: Vec<i32> = self
            .procs
            .get(&pid)
            .map(|p| p.threads.iter().copied().filter(|&t| t != former).collect())
            .unwrap_or_default();
        for t in others.iter().chain([&former]) {
            if !self.threads.get(t).is_some_and(|t| t.finished) {
                self.fini(*t, false);
            }
        }
        let latest = self.totals_rows(pid, pid, "exec");
        let argv = ptrace::cmdline(pid);
        self.out.exec_args(latest, pid, pid, &argv);
        if former != pid {
            // The old leader is gone without a report; the exec'ing thread took its tid.
            self.threads.remove(&former);
            if let Some(p) = self.procs.get_mut(&pid) {
                p.threads.remove(&former);
            }
        }
        self.threads.remove(&pid);
        if self.opts.follow_exec {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.threads.remove(&pid);
                for a in &mut p.accum {
                    *a = Sample::zero(a.values.len());
                }
            }
            if let Err(e) = self.add_thread(pid, pid, false) {
                self.warn_unbound(pid, pid, &e);
            }
            let _ = ptrace::resume(pid, 0);
        } else {
            let _ = ptrace::detach(pid, 0);
            if let Some(p) = self.procs.get_mut(&pid) {
                p.releasing = true;
                p.threads.remove(&pid);
                if p.threads.is_empty() {
                    self.procs.remove(&pid);
                }
            }
        }
    }

    /// A tracee is dead (or, for a leader, its whole process is).
    pub(super) fn gone(&mut self, tid: i32) {
        let Some(t) = self.threads.get(&tid) else {
            return;
        };
        let pid = t.pid;
        if !t.finished && !t.releasing {
            self.fini(tid, false);
        }
        self.forget(tid);
        if tid == pid && self.procs.get(&pid).is_some_and(|p| !p.releasing) {
            let rest: Vec<i32> = self.procs[&pid].threads.iter().copied().collect();
            for t in &rest {
                self.fini(*t, false);
            }
            let lwp = self.procs[&pid].exit_lwp.unwrap_or(pid);
            self.totals_rows(pid, lwp, "exit");
            for t in rest {
                self.threads.remove(&t);
            }
            self.procs.remove(&pid);
        }
    }

    /// Drops a thread record (dead or detached); a released process ends with its last.
    pub(super) fn forget(&mut self, tid: i32) {
        let Some(t) = self.threads.remove(&tid) else {
            return;
        };
        if let Some(p) = self.procs.get_mut(&t.pid) {
            p.threads.remove(&tid);
            if p.releasing && p.threads.is_empty() {
                self.procs.remove(&t.pid);
            }
        }
    }
}
