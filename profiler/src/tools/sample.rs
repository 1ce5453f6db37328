//! A sample of one set as the tools keep it: the values of a [`Buf`] plus what the tools
//! print about multiplexing, with the libcpc buffer arithmetic (wrapping, later hrtime).

use crate::cpc::Buf;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Virtual counter values (preset 0 + count).
    pub values: Vec<u64>,
    /// The same, scaled by enabled/running time (perf stat's estimate when multiplexed).
    pub scaled: Vec<u64>,
    /// The virtual tick (`cpc_buf_tick`).
    pub tick: u64,
    /// CLOCK_MONOTONIC ns of the read; 0 for a sample never taken.
    pub hrtime: u64,
    /// ns the set was enabled, and actually on the counters.
    pub enabled: u64,
    pub running: u64,
}

impl Sample {
    /// An empty sample of `n` values (a set never sampled: hrtime 0).
    pub fn zero(n: usize) -> Sample {
        Sample {
            values: vec![0; n],
            scaled: vec![0; n],
            ..Sample::default()
        }
    }

    pub fn from_buf(buf: &Buf) -> Sample {
        let (enabled, running) = buf.times();
        Sample {
            values: buf.values().to_vec(),
            scaled: (0..buf.len())
                .map(|i| buf.scaled(i).unwrap_or_default())
                .collect(),
            tick: buf.tick(),
            hrtime: buf.hrtime(),
            enabled,
            running,
        }
    }

    /// Whether it holds data (libcpc tools test `cpc_buf_hrtime != 0`).
    pub fn taken(&self) -> bool {
        self.hrtime != 0
    }

    /// `self - earlier`, wrapping, with the later hrtime (`cpc_buf_sub`).
    pub fn since(&self, earlier: &Sample) -> Sample {
        self.combine(earlier, u64::wrapping_sub)
    }

    /// `self + other`, wrapping, with the later hrtime (`cpc_buf_add`).
    pub fn plus(&self, other: &Sample) -> Sample {
        self.combine(other, u64::wrapping_add)
    }

    fn combine(&self, other: &Sample, op: fn(u64, u64) -> u64) -> Sample {
        let zip = |a: &[u64], b: &[u64]| -> Vec<u64> {
            (0..a.len().max(b.len()))
                .map(|i| {
                    op(
                        a.get(i).copied().unwrap_or(0),
                        b.get(i).copied().unwrap_or(0),
                    )
                })
                .collect()
        };
        Sample {
            values: zip(&self.values, &other.values),
            scaled: zip(&self.scaled, &other.scaled),
            tick: op(self.tick, other.tick),
            hrtime: self.hrtime.max(other.hrtime),
            enabled: op(self.enabled, other.enabled),
            running: op(self.running, other.running),
        }
    }

    /// The share of the enabled time the counters really ran, in percent, when it is below
    /// 100 (the kernel time-shared them): perf stat's `(xx.xx%)`.
    pub fn multiplexed_pct(&self) -> Option<f64> {
        (self.running < self.enabled && self.enabled > 0)
            .then(|| 100.0 * self.running as f64 / self.enabled as f64)
    }

    /// What to print: the raw values, or the scaled estimates when multiplexed.
    pub fn shown(&self) -> &[u64] {
        if self.multiplexed_pct().is_some() {
            &self.scaled
        } else {
            &self.values
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(values: &[u64], hrtime: u64, enabled: u64, running: u64) -> Sample {
        Sample {
            values: values.to_vec(),
            scaled: values.iter().map(|v| v * 2).collect(),
            tick: values.iter().sum(),
            hrtime,
            enabled,
            running,
        }
    }

    #[test]
    fn arithmetic_follows_libcpc_buffers() {
        let a = s(&[10, 5], 200, 100, 100);
        let b = s(&[3, 7], 300, 40, 40);
        let d = a.since(&b);
        assert_eq!(d.values, [7, 5u64.wrapping_sub(7)]);
        assert_eq!((d.tick, d.hrtime), (5, 300), "later hrtime wins");
        assert_eq!((d.enabled, d.running), (60, 60));
        let t = a.plus(&b);
        assert_eq!(t.values, [13, 12]);
        assert_eq!(t.scaled, [26, 24]);
        assert!(Sample::zero(2).plus(&a).taken());
        assert!(!Sample::zero(2).taken());
    }

    #[test]
    fn multiplexed_samples_show_scaled_values() {
        let full = s(&[10], 1, 100, 100);
        assert_eq!(full.multiplexed_pct(), None);
        assert_eq!(full.shown(), [10]);
        let half = s(&[10], 1, 100, 50);
        assert_eq!(half.multiplexed_pct(), Some(50.0));
        assert_eq!(half.shown(), [20]);
        assert_eq!(Sample::zero(1).multiplexed_pct(), None, "never enabled");
    }
}
