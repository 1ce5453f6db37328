//! The eBPF overflow engine of one binding: the overflow program linked to the notifying
//! requests' events, and its per-request configuration (presets, freeze,
//! signal, where each context's values sit).

use std::os::fd::AsFd;

use profiler_common::{MAX_SIBLINGS, RequestConfig, SamplerConfig, request_flags};

use super::{error::CpcError, group::Group};
use crate::{
    bpf::{OverflowConfig, OverflowProgram},
    kernel::Kernel,
};

/// What happens to a set when one of its notifying requests overflows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OverflowPolicy {
    /// libcpc: the set stops counting until `set_restart` (exact for the group leader, which
    /// is the first notifying request; with `LWP_INHERIT` the kernel cannot freeze, and the
    /// set continues as under `Continue`).
    #[default]
    Freeze,
    /// Linux: the period reloads and counting goes on; every overflow is reported.
    Continue,
}

/// Ring buffer of one notifying binding (256 KiB: about 110 records).
const ENGINE_RING_BYTES: u32 = 256 << 10;

/// The eBPF program and its links for one binding's notifying requests.
pub(crate) struct Engine {
    pub program: OverflowProgram,
    pub freeze: bool,
    /// Contexts (groups) and requests per context.
    slots: usize,
    nreq: usize,
    /// Records carry every request's value (cookies then name the context too).
    siblings: bool,
    notify: Vec<usize>,
}

/// The per-request program configuration for the engine.
pub(crate) fn request_config(
    preset: u64,
    index: usize,
    freeze: bool,
    signal: Option<i32>,
) -> RequestConfig {
    let mut flags = 0;
    if freeze {
        flags |= request_flags::FREEZE;
    }
    if signal.is_some() {
        flags |= request_flags::SIGNAL;
    }
    RequestConfig {
        preset,
        index: index as u32,
        flags,
        signal: signal.unwrap_or(0) as u32,
        ..Default::default()
    }
}

impl Engine {
    /// Loads the program and links it to every context's events of the `notify` requests.
    #[allow(clippy::too_many_arguments)]
    pub fn attach(
        kernel: &'static dyn Kernel,
        func: &'static str,
        groups: &[Group],
        nreq: usize,
        notify: &[usize],
        presets: &[u64],
        freeze: bool,
        signal: Option<i32>,
        siblings: bool,
    ) -> Result<Engine, CpcError> {
        // Notifications are latency-sensitive: wake the reader on every record.
        let config = SamplerConfig::default();
        if siblings {
            let cpus = crate::host::online_cpus().map(|c| c.len()).unwrap_or(1);
            if groups.len() > cpus || nreq > MAX_SIBLINGS {
                return Err(CpcError::new(
                    func,
                    libc::ENOTSUP,
                    format!(
                        "overflow values need at most {MAX_SIBLINGS} requests and {cpus} contexts \
                         (one per CPU); this set has {nreq} requests in {} contexts",
                        groups.len()
                    ),
                ));
            }
        }
        let program = OverflowProgram::load(OverflowConfig {
            sampler: config,
            ring_bytes: ENGINE_RING_BYTES,
            kernel,
        })
        .map_err(bpf_error(func))?;
        let mut engine = Engine {
            program,
            freeze,
            slots: groups.len(),
            nreq,
            siblings,
            notify: notify.to_vec(),
        };
        engine.configure(func, presets, signal)?;
        for (s, g) in groups.iter().enumerate() {
            if siblings {
                for k in 0..nreq {
                    engine
                        .program
                        .set_sibling(k, s as u32, g.event(k).as_fd())
                        .map_err(bpf_error(func))?;
                }
            }
            for &i in notify {
                engine
                    .program
                    .link(g.event(i).as_fd(), engine.cookie(s, i))
                    .map_err(bpf_error(func))?;
            }
        }
        Ok(engine)
    }

    /// The attach cookie of request `index` in context `slot`.
    fn cookie(&self, slot: usize, index: usize) -> u64 {
        if self.siblings {
            ((slot as u64) << 16) | index as u64
        } else {
            index as u64
        }
    }

    /// (Re)writes the program's per-request configuration: presets, freeze, signal, and
    /// where each context's requests sit in the sibling array.
    pub fn configure(
        &mut self,
        func: &'static str,
        presets: &[u64],
        signal: Option<i32>,
    ) -> Result<(), CpcError> {
        for s in 0..if self.siblings { self.slots } else { 1 } {
            for (k, &preset) in presets.iter().enumerate() {
                let notifies = self.notify.contains(&k);
                // Without siblings only notifying requests need an entry.
                if !notifies && !self.siblings {
                    continue;
                }
                let mut config = request_config(
                    preset,
                    k,
                    self.freeze && notifies,
                    signal.filter(|_| notifies),
                );
                if self.siblings {
                    config.sibling_base = s as u32;
                    config.siblings = self.nreq as u32;
                }
                self.program
                    .set_request(self.cookie(s, k), config)
                    .map_err(bpf_error(func))?;
            }
        }
        Ok(())
    }
}

fn bpf_error(func: &'static str) -> impl Fn(crate::bpf::BpfError) -> CpcError {
    move |e| CpcError::new(func, libc::ENOTSUP, format!("overflow engine: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_configs() {
        let c = request_config(5, 2, true, Some(40));
        assert_eq!((c.preset, c.index, c.signal), (5, 2, 40));
        assert_eq!(c.flags, request_flags::FREEZE | request_flags::SIGNAL);
        assert_eq!(request_config(0, 0, false, None).flags, 0);
    }
}
