//! The in-memory profile: symbolized stacks with sample counts, plus what the run measured.
//! Writers (folded stacks, the top table) read it and never touch the kernel.

mod folded;
mod top;

use std::sync::Arc;

pub use folded::{parse_folded, write_folded};
pub use top::{TopEntry, TopTable};

use crate::symbolize::Frame;

/// One distinct stack and how many samples landed on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackCount {
    /// The event whose overflow took the sample.
    pub event: Arc<str>,
    pub pid: u32,
    pub comm: Arc<str>,
    /// Outermost frame first; user frames, then the kernel frames above them.
    pub frames: Vec<Frame>,
    pub count: u64,
}

/// What a recording measured, besides the stacks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunInfo {
    pub event: String,
    pub frequency_hz: u64,
    /// Sampling every N events (then `frequency_hz` does not apply).
    pub period: Option<u64>,
    pub duration_ms: u64,
    /// Samples delivered to user space.
    pub samples: u64,
    /// Samples the kernel could not deliver (ring buffer full).
    pub lost: u64,
    /// Overflows outside the target, dropped by the in-kernel filter.
    pub filtered: u64,
    /// Stack walks the kernel could not complete.
    pub stack_errors: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Profile {
    pub stacks: Vec<StackCount>,
    pub info: RunInfo,
}

impl Profile {
    pub fn total(&self) -> u64 {
        self.stacks.iter().map(|s| s.count).sum()
    }

    /// The events the samples came from, in first-seen order.
    pub fn events(&self) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = Vec::new();
        for s in &self.stacks {
            if !out.contains(&s.event) {
                out.push(s.event.clone());
            }
        }
        out
    }

    /// The samples of one event.
    pub fn for_event(&self, event: &str) -> Profile {
        let stacks = self
            .stacks
            .iter()
            .filter(|s| s.event.as_ref() == event)
            .cloned()
            .collect();
        Profile {
            stacks,
            info: self.info.clone(),
        }
    }

    /// The stack with the most samples (ties broken by order), for the report's summary line.
    pub fn hottest(&self) -> Option<&StackCount> {
        self.stacks.iter().max_by_key(|s| s.count)
    }
}
