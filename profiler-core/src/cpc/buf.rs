//! Sample buffers and their arithmetic (`cpc_buf_*`), pure user space.

/// One sample of a set: a 64-bit virtual value per request (preset + count, wrapping), the
/// hrtime of the read, and the virtual tick. Sized for its set when created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buf {
    pub(crate) handle: u64,
    pub(crate) values: Vec<u64>,
    pub(crate) hrtime: u64,
    pub(crate) tick: u64,
    /// Scaled values (preset + count × enabled / running) when the set was multiplexed.
    pub(crate) scaled: Vec<u64>,
    pub(crate) time_enabled: u64,
    pub(crate) time_running: u64,
}

impl Buf {
    pub(crate) fn new(handle: u64, n: usize) -> Self {
        Self {
            handle,
            values: vec![0; n],
            hrtime: 0,
            tick: 0,
            scaled: vec![0; n],
            time_enabled: 0,
            time_running: 0,
        }
    }

    /// Number of value slots.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn values(&self) -> &[u64] {
        &self.values
    }

    /// `cpc_buf_hrtime`: CLOCK_MONOTONIC nanoseconds of the read.
    pub fn hrtime(&self) -> u64 {
        self.hrtime
    }

    /// `cpc_buf_tick`: virtual cycles while the context ran (see `Cpc::tick_source`).
    pub fn tick(&self) -> u64 {
        self.tick
    }

    /// True when the kernel time-shared the counters with other users during the sample, so
    /// the raw values undercount: use [`Buf::scaled`], as perf stat does.
    pub fn multiplexed(&self) -> bool {
        self.time_running < self.time_enabled
    }

    /// Value of `index` scaled by enabled/running time (equal to the value when not
    /// multiplexed).
    pub fn scaled(&self, index: usize) -> Option<u64> {
        self.scaled.get(index).copied()
    }

    /// Nanoseconds the set was enabled, and actually counting, summed over its contexts.
    pub fn times(&self) -> (u64, u64) {
        (self.time_enabled, self.time_running)
    }

    pub(crate) fn get(&self, index: usize) -> Option<u64> {
        self.values.get(index).copied()
    }

    pub(crate) fn set(&mut self, index: usize, value: u64) -> bool {
        match self.values.get_mut(index) {
            Some(v) => {
                *v = value;
                if let Some(s) = self.scaled.get_mut(index) {
                    *s = value;
                }
                true
            }
            None => false,
        }
    }

    fn same_shape(&self, other: &Buf) -> bool {
        self.values.len() == other.values.len()
    }

    /// `ds = a - b` (wrapping), tick likewise, hrtime the later of the two. Does nothing if
    /// the sizes differ, as libcpc.
    pub(crate) fn sub(ds: &mut Buf, a: &Buf, b: &Buf) {
        Self::combine(ds, a, b, u64::wrapping_sub);
    }

    /// `ds = a + b` (wrapping), with the same rules as `sub`.
    pub(crate) fn add(ds: &mut Buf, a: &Buf, b: &Buf) {
        Self::combine(ds, a, b, u64::wrapping_add);
    }

    fn combine(ds: &mut Buf, a: &Buf, b: &Buf, op: fn(u64, u64) -> u64) {
        if !(ds.same_shape(a) && a.same_shape(b)) {
            return;
        }
        for i in 0..ds.values.len() {
            ds.values[i] = op(a.values[i], b.values[i]);
            ds.scaled[i] = op(a.scaled[i], b.scaled[i]);
        }
        ds.tick = op(a.tick, b.tick);
        ds.hrtime = a.hrtime.max(b.hrtime);
        ds.time_enabled = op(a.time_enabled, b.time_enabled);
        ds.time_running = op(a.time_running, b.time_running);
    }

    /// `ds = src`; does nothing if the sizes differ.
    pub(crate) fn copy(ds: &mut Buf, src: &Buf) {
        if ds.same_shape(src) {
            let handle = ds.handle;
            *ds = src.clone();
            ds.handle = handle;
        }
    }

    pub(crate) fn zero(&mut self) {
        self.values.iter_mut().for_each(|v| *v = 0);
        self.scaled.iter_mut().for_each(|v| *v = 0);
        self.hrtime = 0;
        self.tick = 0;
        self.time_enabled = 0;
        self.time_running = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(values: &[u64], hrtime: u64, tick: u64) -> Buf {
        let mut b = Buf::new(1, values.len());
        for (i, &v) in values.iter().enumerate() {
            b.set(i, v);
        }
        b.hrtime = hrtime;
        b.tick = tick;
        b
    }

    #[test]
    fn sub_add_copy_zero_follow_libcpc() {
        let a = buf(&[10, 5], 200, 50);
        let b = buf(&[3, 7], 100, 20);
        let mut d = Buf::new(1, 2);
        Buf::sub(&mut d, &a, &b);
        assert_eq!(d.values(), &[7, 5u64.wrapping_sub(7)], "wraps below zero");
        assert_eq!(
            (d.tick(), d.hrtime()),
            (30, 200),
            "tick subtracts, hrtime is the later"
        );
        Buf::add(&mut d, &a, &b);
        assert_eq!(d.values(), &[13, 12]);
        assert_eq!((d.tick(), d.hrtime()), (70, 200));
        let mut c = Buf::new(1, 2);
        Buf::copy(&mut c, &a);
        assert_eq!(c, a);
        c.zero();
        assert_eq!(c, Buf::new(1, 2));
    }

    #[test]
    fn wrap_around_at_64_bits() {
        let a = buf(&[u64::MAX], 0, 0);
        let b = buf(&[2], 0, 0);
        let mut d = Buf::new(1, 1);
        Buf::add(&mut d, &a, &b);
        assert_eq!(d.values(), &[1]);
        // A preset near the top: P + count wraps, and the difference is still the count.
        let before = buf(&[u64::MAX - 4], 0, 0);
        let after = buf(&[(u64::MAX - 4).wrapping_add(10)], 0, 0);
        Buf::sub(&mut d, &after, &before);
        assert_eq!(d.values(), &[10]);
    }

    #[test]
    fn different_sizes_do_nothing() {
        let a = buf(&[1, 2, 3], 9, 9);
        let b = buf(&[1, 2], 9, 9);
        let mut d = buf(&[42, 43], 1, 1);
        let before = d.clone();
        Buf::sub(&mut d, &a, &b);
        Buf::add(&mut d, &a, &b);
        Buf::copy(&mut d, &a);
        assert_eq!(d, before);
    }

    #[test]
    fn get_set_are_bounds_checked() {
        let mut b = Buf::new(1, 2);
        assert!(b.set(1, 77));
        assert_eq!(b.get(1), Some(77));
        assert!(!b.set(2, 1));
        assert_eq!(b.get(2), None);
    }
}
