//! What an exported profile says about a process, read from /proc while the interval is
//! handed over (the process may be gone by then: the sample's own labels are the fallback).

use std::path::Path;

/// A process's facts for its OTLP resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    pub executable_name: Option<String>,
    pub executable_path: Option<String>,
    /// `OTEL_SERVICE_NAME` from the process's environment, when readable.
    pub service_name: Option<String>,
    /// The container's id, from the cgroup path (docker, containerd, CRI-O, podman).
    pub container_id: Option<String>,
    /// The cgroup v2 path of the process.
    pub cgroup: Option<String>,
}

impl ProcessInfo {
    /// Reads `/proc/PID` (under `proc_root`); `comm` and `cgroup` are the sample's labels,
    /// used when the process has exited.
    pub fn read(proc_root: &Path, pid: i64, comm: Option<&str>, cgroup: Option<&str>) -> Self {
        let dir = proc_root.join(pid.to_string());
        let live = pid > 0 && dir.is_dir();
        let executable_path = live
            .then(|| std::fs::read_link(dir.join("exe")).ok())
            .flatten()
            .map(|p| {
                p.to_string_lossy()
                    .trim_end_matches(" (deleted)")
                    .to_string()
            });
        let executable_name = executable_path
            .as_deref()
            .and_then(|p| p.rsplit('/').next())
            .map(str::to_string)
            .or_else(|| comm.map(str::to_string));
        let service_name = live
            .then(|| std::fs::read(dir.join("environ")).ok())
            .flatten()
            .and_then(|env| service_name(&env));
        let cgroup = cgroup.map(str::to_string).or_else(|| {
            live.then(|| std::fs::read_to_string(dir.join("cgroup")).ok())
                .flatten()
                .and_then(|c| {
                    c.lines()
                        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
                })
        });
        let container_id = cgroup.as_deref().and_then(container_id);
        Self {
            executable_name,
            executable_path,
            service_name,
            container_id,
            cgroup,
        }
    }
}

/// `OTEL_SERVICE_NAME` in a NUL-separated environment block.
fn service_name(environ: &[u8]) -> Option<String> {
    environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(b"OTEL_SERVICE_NAME="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .filter(|v| !v.is_empty())
}

/// A container id in a cgroup path: the last 64-hex-digit name, bare or inside a runtime's
/// scope name (`docker-<id>.scope`, `cri-containerd-<id>.scope`, `libpod-<id>.scope`).
pub fn container_id(cgroup: &str) -> Option<String> {
    cgroup.rsplit('/').find_map(|part| {
        let part = part.strip_suffix(".scope").unwrap_or(part);
        let id = part.rsplit('-').next()?;
        (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_from_cgroup_paths() {
        let id = "3f1c9c2d5e6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e";
        for path in [
            format!("/system.slice/docker-{id}.scope"),
            format!("/kubepods/besteffort/pod1/{id}"),
            format!("/kubepods.slice/x/cri-containerd-{id}.scope"),
            format!("/machine.slice/libpod-{id}.scope/container"),
        ] {
            assert_eq!(container_id(&path).as_deref(), Some(id), "{path}");
        }
        assert_eq!(
            container_id("/user.slice/user-0.slice/session-1.scope"),
            None
        );
    }

    #[test]
    fn service_name_from_the_environment() {
        assert_eq!(
            service_name(b"A=1\0OTEL_SERVICE_NAME=checkout\0B=2\0").as_deref(),
            Some("checkout")
        );
        assert_eq!(service_name(b"A=1\0OTEL_SERVICE_NAME=\0"), None);
        assert_eq!(service_name(b"XOTEL_SERVICE_NAME=a\0"), None);
    }

    #[test]
    fn this_process_is_read_and_a_gone_one_falls_back_to_its_labels() {
        let me = ProcessInfo::read(Path::new("/proc"), std::process::id() as i64, None, None);
        assert!(me.executable_path.is_some(), "{me:?}");
        let gone = ProcessInfo::read(Path::new("/nonexistent"), 7, Some("w"), Some("/a"));
        assert_eq!(gone.executable_name.as_deref(), Some("w"));
        assert_eq!(gone.cgroup.as_deref(), Some("/a"));
        assert_eq!(gone.service_name, None);
    }
}
