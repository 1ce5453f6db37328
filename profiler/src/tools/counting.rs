//! One context's counters as cputrack and cpustat keep them (a thread, or a CPU): the set
//! bound now, the totals of the other sets from earlier periods (when several sets take
//! turns), and the previous snapshot the next tick is measured from.

use crate::cpc::{Buf, Cpc, CpcError, Lwp, Set};

use super::{sample::Sample, spec::SetSpec};

/// Where a context counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Thread `tid` of process `pid` (`cpc_bind_pctx`).
    Thread { pid: i32, tid: i32 },
    /// Everything on one CPU (`cpc_bind_cpu`).
    Cpu(u32),
}

pub struct Counting {
    scope: Scope,
    /// The bound set and its buffer (`None` only while sets are switched).
    bound: Option<(Set, Buf)>,
    /// The set bound now (an index into the `-c` sets).
    cur: usize,
    /// Per set: counts of the periods that set was bound before the current one.
    base: Vec<Sample>,
    /// What the current binding's counts are measured from: zero (its bind), or the
    /// snapshot of a [`Counting::rebase`].
    origin: Sample,
    /// The previous snapshot of the current binding (single set: what a tick subtracts).
    last: Sample,
}

fn bind_set(cpc: &Cpc, spec: &SetSpec, scope: Scope) -> Result<(Set, Buf), CpcError> {
    let mut set = spec.build(cpc)?;
    match scope {
        Scope::Thread { pid, tid } => cpc.bind_pctx(pid, Lwp::Thread(tid), &mut set, 0)?,
        Scope::Cpu(cpu) => cpc.bind_cpu(cpu, &mut set, 0)?,
    }
    let buf = cpc.buf_create(&set)?;
    Ok((set, buf))
}

impl Counting {
    /// Binds the first set and takes the first sample (cputrack's `init_lwp` values).
    pub fn bind(cpc: &Cpc, sets: &[SetSpec], scope: Scope) -> Result<(Counting, Sample), CpcError> {
        let set0 = sets
            .first()
            .ok_or_else(|| CpcError::new("cpc_set_create", libc::EINVAL, "no set to bind"))?;
        let bound = bind_set(cpc, set0, scope)?;
        let mut c = Counting {
            scope,
            bound: Some(bound),
            cur: 0,
            base: sets
                .iter()
                .map(|s| Sample::zero(s.requests.len()))
                .collect(),
            origin: Sample::zero(set0.requests.len()),
            last: Sample::default(),
        };
        let first = c.read(cpc)?;
        c.last = first.clone();
        Ok((c, first))
    }

    /// Counts from now on: what was counted since the bind is left out of ticks and
    /// totals (cpustat starts its clock after binding every CPU).
    pub fn rebase(&mut self, cpc: &Cpc) -> Result<(), CpcError> {
        let now = self.read(cpc)?;
        self.origin = now.clone();
        self.last = now;
        Ok(())
    }

    fn read(&mut self, cpc: &Cpc) -> Result<Sample, CpcError> {
        let (set, buf) = self
            .bound
            .as_mut()
            .ok_or_else(|| CpcError::new("cpc_set_sample", libc::EINVAL, "set is not bound"))?;
        cpc.set_sample(set, buf)?;
        Ok(Sample::from_buf(buf))
    }

    /// A periodic sample: the set it was taken from and what to print. One set: the
    /// change since the previous tick. Several: the counts since this set was bound; the
    /// next set is then bound in its place (its counters start at 0).
    pub fn tick(&mut self, cpc: &Cpc, sets: &[SetSpec]) -> Result<(usize, Sample), CpcError> {
        let now = self.read(cpc)?;
        let sampled = self.cur;
        if sets.len() == 1 {
            let delta = now.since(&self.last);
            self.last = now;
            return Ok((sampled, delta));
        }
        let since_bind = now.since(&self.origin);
        self.base[sampled] = self.base[sampled].plus(&since_bind);
        let next = (sampled + 1) % sets.len();
        match self.scope {
            // A thread keeps a binding throughout: the new one is made first.
            Scope::Thread { .. } => {
                let bound = bind_set(cpc, &sets[next], self.scope)?;
                self.bound = Some(bound);
            }
            // A CPU takes one set at a time (libcpc's exclusivity): unbind first.
            Scope::Cpu(_) => {
                self.bound = None;
                self.bound = Some(bind_set(cpc, &sets[next], self.scope)?);
            }
        }
        self.cur = next;
        self.origin = Sample::zero(sets[next].requests.len());
        self.last = self.origin.clone();
        Ok((sampled, since_bind))
    }

    /// Binds the current set afresh (its counters start at 0 again): cpustat `-p` does
    /// not count while it rests between cycles.
    pub fn restart(&mut self, cpc: &Cpc, sets: &[SetSpec]) -> Result<(), CpcError> {
        self.bound = None;
        self.bound = Some(bind_set(cpc, &sets[self.cur], self.scope)?);
        self.origin = Sample::zero(sets[self.cur].requests.len());
        self.last = self.origin.clone();
        Ok(())
    }

    /// The context's totals per set, after a last read; unbinds. Also returns the set
    /// bound at the end (the one `fini_lwp` prints).
    pub fn finish(mut self, cpc: &Cpc) -> Result<(usize, Vec<Sample>), CpcError> {
        let now = self.read(cpc)?.since(&self.origin);
        self.base[self.cur] = self.base[self.cur].plus(&now);
        Ok((self.cur, std::mem::take(&mut self.base)))
    }
}
