//! Goroutine labels on samples: what the kernel needs to find the running goroutine's
//! `runtime/pprof` labels in a Go process, and the words it adds to a record.
//!
//! As Go's own SIGPROF handler does (`runtime/proc.go`, `sigprof`), a sample is attributed
//! to `getg().m.curg.labels`: on the scheduler's or the signal handler's stack the
//! interrupted user goroutine's labels count, and with no user goroutine there are none.
//! The kernel reads `g` from the thread's TLS (`fs_base + tls_offset` on x86-64), then
//! `g.m`, `m.curg` and `curg.labels`, and writes two words after the record's frames and
//! group words ([`crate::record_flags::GO_LABELS`]):
//!
//! ```text
//! word 0  curg.labels: the *labelMap (never 0 when the flag is set)
//! word 1  its first word: the map's *hmap (Go 1.16-1.23) or the sorted slice's array (1.24+)
//! ```
//!
//! A label set is never written again once a goroutine holds it (`pprof.WithLabels` builds
//! a new one), so user space reads the keys and values from the process's memory once per
//! pair of words and keeps them: the second word tells a set freed and another allocated at
//! the same address apart.

/// Words a record carries for its goroutine's labels.
pub const GO_LABEL_WORDS: usize = 2;

/// What the kernel reads for one Go process (by tgid in `GO_PROCS`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoProc {
    /// `g`'s offset from the thread pointer (`runtime.tlsg`; -8 for an internally linked
    /// amd64 executable).
    pub tls_offset: i64,
    /// `task_struct.thread.fsbase`, where the task's thread pointer is (from BTF).
    pub task_fsbase: u32,
    /// `runtime.g.m`, `runtime.m.curg` and `runtime.g.labels`.
    pub g_m: u16,
    pub m_curg: u16,
    pub g_labels: u16,
    pub _pad0: [u16; 3],
}

const _: () = assert!(core::mem::size_of::<GoProc>() == 24);

// SAFETY: repr(C), integers only, no implicit padding (size asserted above).
#[cfg(feature = "user")]
unsafe impl aya::Pod for GoProc {}
