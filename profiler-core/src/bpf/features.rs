//! What this kernel's BPF offers the programs, read from its BTF: the `bpf_func_id` enum
//! names every helper the kernel has, so a helper's name in BTF's strings means the verifier
//! knows it. The loader passes the answer to the programs (`profiler_common::kernel_features`)
//! and `profiler list` prints it.

use std::sync::OnceLock;

use profiler_common::kernel_features;

/// One kernel feature the programs use: its name, the helper that tells, the first Linux
/// version with it, and what needs it.
pub struct Feature {
    pub name: &'static str,
    helper: &'static str,
    pub since: &'static str,
    pub needed_for: &'static str,
}

/// The features, in the order `profiler list` prints them.
pub const FEATURES: [Feature; 4] = [
    Feature {
        name: "ring buffer",
        helper: "BPF_FUNC_ringbuf_output",
        since: "5.8",
        needed_for: "every eBPF program",
    },
    Feature {
        name: "attach cookies",
        helper: "BPF_FUNC_get_attach_cookie",
        since: "5.15",
        needed_for: "record with several events, overflow notification of a request other than the first",
    },
    Feature {
        name: "task pt_regs",
        helper: "BPF_FUNC_task_pt_regs",
        since: "5.15",
        needed_for: "the caller of a frameless function in kernel-mode samples",
    },
    Feature {
        name: "bpf_loop",
        helper: "BPF_FUNC_loop",
        since: "5.17",
        needed_for: "unwind tables (else frame pointers)",
    },
];

/// Which of [`FEATURES`] this kernel has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelFeatures {
    has: [bool; FEATURES.len()],
}

impl KernelFeatures {
    /// This kernel's, read once from `/sys/kernel/btf/vmlinux`. Without BTF every feature is
    /// assumed (the load then fails with the verifier's own message, as before).
    pub fn get() -> Self {
        static FEATURES_HERE: OnceLock<KernelFeatures> = OnceLock::new();
        *FEATURES_HERE.get_or_init(|| {
            std::fs::File::open("/sys/kernel/btf/vmlinux")
                .and_then(Self::from_btf_reader)
                .unwrap_or(Self {
                    has: [true; FEATURES.len()],
                })
        })
    }

    /// The features whose helper is named in the BTF blob `btf` (its strings are NUL
    /// separated, so a name is matched whole).
    pub fn from_btf(btf: &[u8]) -> Self {
        let mut has = [false; FEATURES.len()];
        Self::find_in(btf, &mut has);
        Self { has }
    }

    /// [`Self::from_btf`] over a blob read in pieces (vmlinux's is 5 MB; the recorder's
    /// memory peaks early if it is read whole).
    pub fn from_btf_reader(mut btf: impl std::io::Read) -> std::io::Result<Self> {
        let mut has = [false; FEATURES.len()];
        let keep = FEATURES
            .iter()
            .map(|f| f.helper.len() + 1)
            .max()
            .unwrap_or(0);
        let mut buf = vec![0u8; 1 << 16];
        let mut filled = 0;
        loop {
            let n = btf.read(&mut buf[filled..])?;
            if n == 0 {
                break;
            }
            filled += n;
            Self::find_in(&buf[..filled], &mut has);
            // A name cut at the end is found whole with the next piece.
            let tail = filled.saturating_sub(keep);
            buf.copy_within(tail..filled, 0);
            filled -= tail;
        }
        Ok(Self { has })
    }

    fn find_in(btf: &[u8], has: &mut [bool; FEATURES.len()]) {
        for (h, f) in has.iter_mut().zip(&FEATURES) {
            let needle = [b"\0", f.helper.as_bytes(), b"\0"].concat();
            *h |= memchr::memmem::find(btf, &needle).is_some();
        }
    }

    fn has(&self, name: &str) -> bool {
        FEATURES
            .iter()
            .zip(self.has)
            .any(|(f, h)| h && f.name == name)
    }

    pub fn attach_cookies(&self) -> bool {
        self.has("attach cookies")
    }

    /// `bpf_loop` (5.17): the unwind-table program can load.
    pub fn bpf_loop(&self) -> bool {
        self.has("bpf_loop")
    }

    /// The `KERNEL_FEATURES` constant of the eBPF object.
    pub fn ebpf_bits(&self) -> u32 {
        let mut bits = 0;
        if self.attach_cookies() {
            bits |= kernel_features::ATTACH_COOKIE;
        }
        if self.has("task pt_regs") {
            bits |= kernel_features::TASK_PT_REGS;
        }
        bits
    }

    /// Each feature and whether this kernel has it.
    pub fn iter(&self) -> impl Iterator<Item = (&'static Feature, bool)> + '_ {
        FEATURES.iter().zip(self.has)
    }
}

/// `uname -r`, for messages.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_are_matched_whole_in_the_strings() {
        let btf = b"\0\0BPF_FUNC_ringbuf_output\0BPF_FUNC_loop_x\0BPF_FUNC_task_pt_regs\0";
        let f = KernelFeatures::from_btf(btf);
        let has: Vec<bool> = f.iter().map(|(_, h)| h).collect();
        assert_eq!(has, [true, false, true, false]);
        assert!(!f.attach_cookies());
        assert_eq!(f.ebpf_bits(), kernel_features::TASK_PT_REGS);
    }

    #[test]
    fn names_cut_between_reads_are_found() {
        /// Hands out three bytes a read.
        struct Trickle<'a>(&'a [u8]);
        impl std::io::Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(3).min(self.0.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let btf = b"\0\0BPF_FUNC_ringbuf_output\0BPF_FUNC_loop_x\0BPF_FUNC_task_pt_regs\0";
        let read = KernelFeatures::from_btf_reader(Trickle(btf)).unwrap();
        assert_eq!(read, KernelFeatures::from_btf(btf));
        if let Ok(vmlinux) = std::fs::read("/sys/kernel/btf/vmlinux") {
            let read = KernelFeatures::from_btf_reader(vmlinux.as_slice()).unwrap();
            assert_eq!(read, KernelFeatures::from_btf(&vmlinux));
        }
    }

    #[test]
    fn this_kernel_has_a_ring_buffer_where_it_has_btf() {
        if std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
            assert!(KernelFeatures::get().iter().next().unwrap().1);
        }
    }
}
