//! What the process may do: BPF and system-wide perf need root or CAP_BPF + CAP_PERFMON.

use std::fs;

use crate::host::TaskStatus;

const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The capabilities that matter to a profiler, read from /proc/self/status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Privilege {
    pub bpf: bool,
    pub perfmon: bool,
}

/// Reads the effective capabilities; an unreadable status file counts as unprivileged.
pub fn check_privileges() -> Privilege {
    let effective = TaskStatus::read("self")
        .ok()
        .and_then(|s| cap_eff(&s))
        .unwrap_or(0);
    Privilege {
        bpf: effective & (1 << CAP_BPF) != 0,
        perfmon: effective & (1 << CAP_PERFMON) != 0,
    }
}

fn cap_eff(status: &TaskStatus) -> Option<u64> {
    u64::from_str_radix(status.field("CapEff")?, 16).ok()
}

impl Privilege {
    /// `Err` naming the missing capabilities and the sysctl involved.
    pub fn require_bpf_and_perfmon(self) -> Result<(), PrivilegeError> {
        let missing: Vec<&'static str> = [(!self.bpf, "CAP_BPF"), (!self.perfmon, "CAP_PERFMON")]
            .into_iter()
            .filter_map(|(m, name)| m.then_some(name))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let paranoid = fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into());
        Err(PrivilegeError { missing, paranoid })
    }
}

/// BPF and perf_event_open for every task on every CPU need both capabilities.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "needs root or CAP_BPF + CAP_PERFMON (missing: {}); kernel.perf_event_paranoid is \
     {paranoid}, which does not allow unprivileged system-wide profiling",
    missing.join(", ")
)]
pub struct PrivilegeError {
    /// The capabilities this process lacks.
    pub missing: Vec<&'static str>,
    /// `kernel.perf_event_paranoid` as read (`?` when unreadable).
    pub paranoid: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_effective_capabilities() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        let parse = |text: &str| cap_eff(&TaskStatus::from_text(text.to_string()));
        let caps = parse(status).unwrap();
        assert_ne!(caps & (1 << CAP_BPF), 0);
        assert_ne!(caps & (1 << CAP_PERFMON), 0);
        assert_eq!(parse("CapEff:\t0000000000000000\n"), Some(0));
        assert_eq!(parse("nothing"), None);
    }

    #[test]
    fn message_names_the_missing_capability_and_sysctl() {
        let p = Privilege {
            bpf: true,
            perfmon: false,
        };
        let msg = p.require_bpf_and_perfmon().unwrap_err().to_string();
        assert!(msg.contains("missing: CAP_PERFMON"), "{msg}");
        assert!(msg.contains("kernel.perf_event_paranoid"), "{msg}");
        assert!(
            Privilege {
                bpf: true,
                perfmon: true
            }
            .require_bpf_and_perfmon()
            .is_ok()
        );
    }
}
