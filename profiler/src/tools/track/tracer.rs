//! The tracer's state machine: tracked processes and their threads, and what each ptrace
//! stop means for them (libcpc-spec §2.2's rows). Every handler leaves the tracee it was
//! given running again (or detached) before it returns, so no path can leave one stopped.
//! Exits and exec are in `exits.rs`, ticks and letting go in `ticks.rs`.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    io::Write as _,
};

use libc::{
    PTRACE_EVENT_CLONE, PTRACE_EVENT_EXEC, PTRACE_EVENT_EXIT, PTRACE_EVENT_FORK, PTRACE_EVENT_STOP,
    PTRACE_EVENT_VFORK,
};

use crate::cpc::{Cpc, CpcError};

use super::{TrackOptions, emit::Emitter, ptrace, ptrace::Report};
use crate::tools::{
    counting::{Counting, Scope},
    sample::Sample,
};

pub(super) struct Thread {
    pub pid: i32,
    pub counting: Option<Counting>,
    /// Its totals are in (exit stop seen, or exec replaced it); it may not be dead yet.
    pub finished: bool,
    /// Being let go: detached at its next stop, uncounted meanwhile.
    pub releasing: bool,
}

pub(super) struct Process {
    /// Threads we trace, living or not yet reported dead.
    pub threads: BTreeSet<i32>,
    /// Per set: totals of its finished threads.
    pub accum: Vec<Sample>,
    pub ticks_left: Option<u64>,
    pub releasing: bool,
    /// The thread that called exit_group, for the exit row.
    pub exit_lwp: Option<i32>,
}

pub(super) struct Tracer<'a> {
    pub cpc: &'a Cpc,
    pub opts: &'a TrackOptions,
    pub out: Emitter,
    /// Where threads that cannot be counted are reported (the CLI's stderr).
    pub diag: Box<dyn std::io::Write>,
    pub threads: HashMap<i32, Thread>,
    pub procs: BTreeMap<i32, Process>,
    /// A thread or process could not be counted: the run exits with status 1.
    pub errors: bool,
    /// The command we started (its pid), and how it ended once it has.
    pub command: Option<i32>,
    pub command_end: Option<Report>,
}

impl<'a> Tracer<'a> {
    pub fn new(
        cpc: &'a Cpc,
        opts: &'a TrackOptions,
        out: Emitter,
        diag: Box<dyn std::io::Write>,
    ) -> Self {
        Tracer {
            cpc,
            opts,
            out,
            diag,
            threads: HashMap::new(),
            procs: BTreeMap::new(),
            errors: false,
            command: None,
            command_end: None,
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
    /// child) with the threads given. The first thread that cannot be bound ends it (the
    /// threads are recorded all the same, so that they can be let go).
    pub fn track_process(&mut self, pid: i32, tids: &[i32]) -> Result<(), CpcError> {
        self.new_process(pid);
        let mut first_error = None;
        for &tid in tids {
            if let Err(e) = self.add_thread(pid, tid, false) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A thread that could not be bound, during the run: reported (as cputrack does), and
    /// the run will exit with status 1.
    pub(super) fn warn_unbound(&mut self, pid: i32, tid: i32, e: &CpcError) {
        let why = self.describe(e);
        let _ = writeln!(
            self.diag,
            "{pid:6}: init_lwp: can't bind perf counters to lwp{tid} - {why}"
        );
        self.errors = true;
    }

    /// Records a traced thread and binds its counters: `init_lwp` (with -v), and
    /// `lwp_create` for a thread the process just created. A thread that cannot be bound
    /// is recorded uncounted.
    pub(super) fn add_thread(&mut self, pid: i32, tid: i32, created: bool) -> Result<(), CpcError> {
        let mut error = None;
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
                error = Some(e);
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
        error.map_or(Ok(()), Err)
    }

    pub(super) fn describe(&self, e: &CpcError) -> String {
        if self.opts.debug {
            e.to_string()
        } else {
            e.message.to_string()
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
        let bound = if followed && pid == tid {
            Some(self.track_process(pid, &[tid]))
        } else if followed {
            Some(self.add_thread(pid, tid, true))
        } else {
            None
        };
        if let Some(Err(e)) = bound {
            self.warn_unbound(pid, tid, &e);
        }
        if !followed {
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
        if matches!(report, Report::Exited { .. } | Report::Killed { .. })
            && Some(report.tid()) == self.command
        {
            self.command_end = Some(report);
        }
        let (tid, signal, event) = match report {
            Report::Exited { tid, .. } | Report::Killed { tid, .. } => return self.gone(tid),
            Report::Signal { tid, signal } => (tid, signal, None),
            Report::Event { tid, event, signal } => (tid, signal, Some(event)),
        };
        if !self.threads.contains_key(&tid) {
            self.adopt(tid);
        }
        if self.threads[&tid].releasing {
            // A signal about to be delivered goes with the detach. A task it spawned
            // meanwhile is traced too (stopped at birth): it is let go when it reports, as
            // an unknown task of a released process.
            let _ = ptrace::detach(tid, if event.is_none() { signal } else { 0 });
            return self.forget(tid);
        }
        let _ = match event {
            // Signal-delivery-stop: deliver it.
            None => ptrace::resume(tid, signal),
            Some(PTRACE_EVENT_STOP) if ptrace::is_group_stop(signal) => ptrace::listen(tid),
            Some(e @ (PTRACE_EVENT_CLONE | PTRACE_EVENT_FORK | PTRACE_EVENT_VFORK)) => {
                self.spawned(tid, e);
                ptrace::resume(tid, 0)
            }
            // Resumes (or lets go of) the process itself.
            Some(PTRACE_EVENT_EXEC) => {
                self.exec(tid);
                Ok(())
            }
            Some(PTRACE_EVENT_EXIT) => {
                self.exit_stop(tid);
                ptrace::resume(tid, 0)
            }
            // The stop at birth, or one we asked for (PTRACE_INTERRUPT).
            Some(_) => ptrace::resume(tid, 0),
        };
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
}
