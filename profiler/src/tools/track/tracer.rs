//! The tracer's state machine: tracked processes and their threads, and what each ptrace
//! stop means for them (libcpc-spec §2.2's rows). Every handler leaves the tracee it was
//! given running again (or detached) before it returns, so no path can leave one stopped.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use libc::{
    PTRACE_EVENT_CLONE, PTRACE_EVENT_EXEC, PTRACE_EVENT_EXIT, PTRACE_EVENT_FORK, PTRACE_EVENT_STOP,
    PTRACE_EVENT_VFORK,
};

use crate::cpc::Cpc;

use super::{TrackOptions, emit::Emitter, ptrace, ptrace::Report};
use crate::tools::{
    counting::{Counting, Scope},
    sample::Sample,
};

pub(super) struct Thread {
    pid: i32,
    counting: Option<Counting>,
    /// Its totals are in (exit stop seen, or exec replaced it); it may not be dead yet.
    finished: bool,
    /// Being let go: detached at its next stop, uncounted meanwhile.
    releasing: bool,
}

pub(super) struct Process {
    /// Threads we trace, living or not yet reported dead.
    threads: BTreeSet<i32>,
    /// Per set: totals of its finished threads.
    accum: Vec<Sample>,
    ticks_left: Option<u64>,
    releasing: bool,
    /// The thread that called exit_group, for the exit row.
    exit_lwp: Option<i32>,
}

pub(super) struct Tracer<'a> {
    pub cpc: &'a Cpc,
    pub opts: &'a TrackOptions,
    pub out: Emitter,
    pub threads: HashMap<i32, Thread>,
    pub procs: BTreeMap<i32, Process>,
    /// A thread or process could not be counted: the run exits with status 1.
    pub errors: bool,
}

impl<'a> Tracer<'a> {
    pub fn new(cpc: &'a Cpc, opts: &'a TrackOptions, out: Emitter) -> Self {
        Tracer {
            cpc,
            opts,
            out,
            threads: HashMap::new(),
            procs: BTreeMap::new(),
            errors: false,
        }
    }

    pub fn is_done(&self) -> bool {
        self.threads.is_empty() && self.procs.is_empty()
    }

    fn new_process(&mut self, pid: i32) {
        let accum = self
            .opts
            .sets
            .iter()
            .map(|s| Sample::zero(s.requests.len()))
            .collect();
        self.procs.insert(
            pid,
            Process {
                threads: BTreeSet::new(),
                accum,
                ticks_left: self.opts.samples,
                releasing: false,
                exit_lwp: None,
            },
        );
    }

    /// Starts tracking a process (the command after its exec, a `-p` target, a followed
    /// child) with the threads given.
    pub fn track_process(&mut self, pid: i32, tids: &[i32]) {
        self.new_process(pid);
        for &tid in tids {
            self.add_thread(pid, tid, false);
        }
    }

    /// Records a traced thread and binds its counters: `init_lwp` (with -v), and
    /// `lwp_create` for a thread the process just created.
    fn add_thread(&mut self, pid: i32, tid: i32, created: bool) {
        let counting = match Counting::bind(self.cpc, &self.opts.sets, Scope::Thread { pid, tid }) {
            Ok((c, first)) => {
                if self.opts.verbose {
                    self.out
                        .counts((pid, tid), "init_lwp", &first, &self.opts.sets[0]);
                }
                Some(c)
            }
            // It died before it could be bound: its report will remove it.
            Err(e) if e.errno == libc::ESRCH => None,
            Err(e) => {
                eprintln!(
                    "{pid:6}: init_lwp: can't bind perf counters to lwp{tid} - {}",
                    self.describe(&e)
                );
                self.errors = true;
                None
            }
        };
        if created {
            let set = &self.opts.sets[0];
            self.out.counts(
                (pid, tid),
                "lwp_create",
                &Sample::zero(set.requests.len()),
                set,
            );
        }
        self.threads.insert(
            tid,
            Thread {
                pid,
                counting,
                finished: false,
                releasing: false,
            },
        );
        if let Some(p) = self.procs.get_mut(&pid) {
            p.threads.insert(tid);
        }
    }

    fn describe(&self, e: &crate::cpc::CpcError) -> String {
        if self.opts.debug {
            e.to_string()
        } else {
            e.message.clone()
        }
    }

    /// A task we do not know yet stopped: a new thread of a tracked process, or a new
    /// process. Followed ones are counted; the others are let go at this stop.
    fn adopt(&mut self, tid: i32) {
        let ids = ptrace::task_ids(tid).ok();
        let (pid, followed) = match ids {
            Some(ids) if ids.tgid != tid => {
                let live = self.procs.get(&ids.tgid).is_some_and(|p| !p.releasing);
                (ids.tgid, live)
            }
            Some(ids) => {
                let parent_live = self.procs.get(&ids.ppid).is_some_and(|p| !p.releasing);
                (tid, self.opts.follow_fork && parent_live)
            }
            None => (tid, false),
        };
        if followed && pid == tid {
            self.track_process(pid, &[tid]);
        } else if followed {
            self.add_thread(pid, tid, true);
        } else {
            self.threads.insert(
                tid,
                Thread {
                    pid,
                    counting: None,
                    finished: false,
                    releasing: true,
                },
            );
        }
    }

    /// Handles one waitpid report.
    pub fn handle(&mut self, report: Report) {
        let tid = report.tid();
        if matches!(report, Report::Exited { .. } | Report::Killed { .. }) {
            return self.gone(tid);
        }
        if !self.threads.contains_key(&tid) {
            self.adopt(tid);
        }
        if self.threads[&tid].releasing {
            let signal = match report {
                Report::Signal { signal, .. } => signal,
                _ => 0,
            };
            // A task it spawned meanwhile is traced too (stopped at birth): it is let go
            // when it reports, as an unknown task of a released process.
            let _ = ptrace::detach(tid, signal);
            return self.forget(tid);
        }
        match report {
            Report::Signal { signal, .. } => {
                let _ = ptrace::resume(tid, signal);
            }
            Report::Event { event, signal, .. } => match event {
                PTRACE_EVENT_STOP if ptrace::is_group_stop(signal) => {
                    let _ = ptrace::listen(tid);
                }
                PTRACE_EVENT_CLONE | PTRACE_EVENT_FORK | PTRACE_EVENT_VFORK => {
                    self.spawned(tid, event);
                    let _ = ptrace::resume(tid, 0);
                }
                PTRACE_EVENT_EXEC => self.exec(tid),
                PTRACE_EVENT_EXIT => {
                    self.exit_stop(tid);
                    let _ = ptrace::resume(tid, 0);
                }
                _ => {
                    let _ = ptrace::resume(tid, 0);
                }
            },
            Report::Exited { .. } | Report::Killed { .. } => unreachable!("handled above"),
        }
    }

    /// A thread created a task: a `fork` row when it is a new process.
    fn spawned(&mut self, tid: i32, event: i32) {
        let Ok(child) = ptrace::event_message(tid) else {
            return;
        };
        let child = child as i32;
        let new_process = event != PTRACE_EVENT_CLONE
            || ptrace::task_ids(child).is_ok_and(|ids| ids.tgid == child);
        if new_process {
            let pid = self.threads[&tid].pid;
            self.out.fork(pid, tid, child);
        }
    }

    /// Takes a thread's totals (and unbinds it): `fini_lwp` with -v, `lwp_exit` when it
    /// leaves alone; its totals go into its process's.
    fn fini(&mut self, tid: i32, lwp_exit: bool) {
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
                eprintln!(
                    "{pid:6}: fini_lwp: lwp{tid}: can't access perf counters - {}",
                    self.describe(&e)
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

    fn exit_stop(&mut self, tid: i32) {
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
    fn totals_rows(&mut self, pid: i32, lwp: i32, event: &str) -> u64 {
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

    /// The process image was replaced (`pid` is the exec'ing thread, now the leader).
    fn exec(&mut self, pid: i32) {
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
            self.add_thread(pid, pid, false);
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
    fn gone(&mut self, tid: i32) {
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
    fn forget(&mut self, tid: i32) {
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
            let p = self.procs.get_mut(&pid).expect("tracked");
            if let Some(left) = p.ticks_left.as_mut() {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    self.release(pid);
                }
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
                eprintln!(
                    "{pid:6}: tick: lwp{tid}: can't access perf counter - {}",
                    self.describe(&e)
                );
                self.errors = true;
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.counting = None;
                }
            }
        }
    }
}
