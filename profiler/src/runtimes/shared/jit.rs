//! When a JIT runtime's frames (V8, HotSpot) are left to native stacks.

/// Why a JIT runtime's walker (V8, HotSpot) leaves process `pid`, whose runtime is the file
/// `mapping`, to native stacks, if it does: their frame layouts (slots, registers) are read
/// for x86-64 only; and a perf map (`node --perf-basic-prof`, `jcmd PID Compiler.perfmap`,
/// an agent) names the JIT code already, as the user asked: it wins.
pub(crate) fn jit_walk_refused(pid: u32, mapping: &str, runtime: &str) -> Option<String> {
    if cfg!(not(target_arch = "x86_64")) {
        return Some(format!(
            "{mapping}: {runtime} frames are walked on x86-64 only"
        ));
    }
    crate::symbolize::PerfMap::locate(pid)
        .map(|map| format!("{mapping}: it has a perf map ({map}), whose names are used"))
}
