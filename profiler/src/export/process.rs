//! What an exported profile says about a process, read from /proc when an interval is handed
//! to the exporter (once per process and interval, never per sample). The exporter keeps what
//! it read from one interval to the next, so a process that exits keeps the names it had;
//! one that was never read alive is named from its samples' labels (`comm`, `cgroup`).

use std::{io::Read as _, path::Path};

/// The most of a process's environment read for its service name.
const MAX_ENVIRON: u64 = 1 << 20;

/// A process's facts for its OTLP resource and its Pyroscope application.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    pub executable_name: Option<String>,
    pub executable_path: Option<String>,
    /// The service the process names itself in its environment: `OTEL_SERVICE_NAME`, else
    /// `service.name` in `OTEL_RESOURCE_ATTRIBUTES` (the OpenTelemetry SDKs' order).
    pub service_name: Option<String>,
    /// The container's id, from the cgroup path (docker, containerd, CRI-O, podman).
    pub container_id: Option<String>,
    /// The cgroup v2 path of the process.
    pub cgroup: Option<String>,
}

impl ProcessInfo {
    /// Reads `/proc/PID` (under `proc_root`); `None` when the process is gone.
    pub fn read(proc_root: &Path, pid: i64) -> Option<Self> {
        let dir = proc_root.join(pid.to_string());
        if pid <= 0 || !dir.is_dir() {
            return None;
        }
        // A kernel thread has no executable, a zombie no environment: their labels tell.
        let executable_path = std::fs::read_link(dir.join("exe")).ok().map(|p| {
            p.to_string_lossy()
                .trim_end_matches(" (deleted)")
                .to_string()
        });
        let executable_name = executable_path
            .as_deref()
            .and_then(|p| p.rsplit('/').next())
            .filter(|n| !n.is_empty())
            .map(str::to_string);
        let mut environ = Vec::new();
        let service_name = std::fs::File::open(dir.join("environ"))
            .and_then(|f| f.take(MAX_ENVIRON).read_to_end(&mut environ))
            .ok()
            .and_then(|_| service_name(&environ));
        let cgroup = std::fs::read_to_string(dir.join("cgroup"))
            .ok()
            .and_then(|c| {
                c.lines()
                    .find_map(|l| l.strip_prefix("0::").map(str::to_string))
            });
        Some(Self {
            executable_name,
            executable_path,
            service_name,
            container_id: cgroup.as_deref().and_then(container_id),
            cgroup,
        })
    }

    /// Completed by a sample's labels: its `comm` names a process whose executable could
    /// not be read (gone, or a kernel thread), and its `cgroup` is where it was sampled.
    pub fn with_labels(mut self, comm: Option<&str>, cgroup: Option<&str>) -> Self {
        if self.executable_name.is_none() {
            self.executable_name = comm.filter(|c| !c.is_empty()).map(str::to_string);
        }
        if let Some(cg) = cgroup {
            self.cgroup = Some(cg.to_string());
            self.container_id = container_id(cg);
        }
        self
    }

    /// OTLP's `service.name`: the process's own, else OpenTelemetry's default for an
    /// unnamed service, `unknown_service:` and the executable's name (`unknown_service`
    /// without one).
    pub fn otel_service_name(&self) -> String {
        match (&self.service_name, &self.executable_name) {
            (Some(own), _) => own.clone(),
            (None, Some(exe)) => format!("unknown_service:{exe}"),
            (None, None) => "unknown_service".into(),
        }
    }

    /// Pyroscope's application name (its `service_name` label): the process's own service
    /// name, else the executable's name (`unknown` without one).
    pub fn application_name(&self) -> String {
        self.service_name
            .clone()
            .or_else(|| self.executable_name.clone())
            .unwrap_or_else(|| "unknown".into())
    }
}

/// The service a NUL-separated environment block names: `OTEL_SERVICE_NAME`, else
/// `service.name` in `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k=v`, values percent-encoded); the
/// first of each, as getenv(3) finds it. Empty values name nothing.
fn service_name(environ: &[u8]) -> Option<String> {
    let var = |name: &[u8]| {
        environ.split(|&b| b == 0).find_map(|v| {
            v.strip_prefix(name)
                .and_then(|v| v.strip_prefix(b"="))
                .map(|v| String::from_utf8_lossy(v).into_owned())
        })
    };
    let nonempty = |v: String| Some(v.trim().to_string()).filter(|v| !v.is_empty());
    var(b"OTEL_SERVICE_NAME").and_then(nonempty).or_else(|| {
        let attributes = var(b"OTEL_RESOURCE_ATTRIBUTES")?;
        attributes.split(',').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k.trim() == "service.name")
                .then(|| percent_decoded(v.trim()))
                .and_then(nonempty)
        })
    })
}

/// `%XX` escapes decoded (a malformed one is kept as it is).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
        assert_eq!(service_name(b"OTEL_SERVICE_NAMES=a\0"), None);
        // OTEL_RESOURCE_ATTRIBUTES' service.name, percent-decoded, when there is no
        // OTEL_SERVICE_NAME (which wins, as in the SDKs).
        let attrs = b"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=prod, service.name = bill%20ing ,x=y\0";
        assert_eq!(service_name(attrs).as_deref(), Some("bill ing"));
        let both = [&b"OTEL_SERVICE_NAME=own\0"[..], attrs].concat();
        assert_eq!(service_name(&both).as_deref(), Some("own"));
        let empty = [&b"OTEL_SERVICE_NAME=\0"[..], attrs].concat();
        assert_eq!(service_name(&empty).as_deref(), Some("bill ing"));
        assert_eq!(
            service_name(b"OTEL_RESOURCE_ATTRIBUTES=service.namespace=a,service.name=\0"),
            None
        );
        // The first definition, as getenv finds it.
        assert_eq!(
            service_name(b"OTEL_SERVICE_NAME=a\0OTEL_SERVICE_NAME=b\0").as_deref(),
            Some("a")
        );
        assert_eq!(percent_decoded("a%2Cb%zz%4"), "a,b%zz%4");
    }

    #[test]
    fn names_for_the_stores() {
        let named = ProcessInfo {
            executable_name: Some("java".into()),
            service_name: Some("checkout".into()),
            ..Default::default()
        };
        assert_eq!(named.otel_service_name(), "checkout");
        assert_eq!(named.application_name(), "checkout");
        let unnamed = ProcessInfo {
            service_name: None,
            ..named
        };
        assert_eq!(unnamed.otel_service_name(), "unknown_service:java");
        assert_eq!(unnamed.application_name(), "java");
        let nothing = ProcessInfo::default();
        assert_eq!(nothing.otel_service_name(), "unknown_service");
        assert_eq!(nothing.application_name(), "unknown");
    }

    #[test]
    fn this_process_is_read_and_a_gone_one_is_named_by_its_labels() {
        let me =
            ProcessInfo::read(Path::new("/proc"), std::process::id() as i64).expect("this process");
        assert!(me.executable_path.is_some(), "{me:?}");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(
            me.executable_name.as_deref(),
            exe.file_name().and_then(|n| n.to_str())
        );
        assert_eq!(ProcessInfo::read(Path::new("/nonexistent"), 7), None);
        assert_eq!(ProcessInfo::read(Path::new("/proc"), 0), None);
        let gone = ProcessInfo::default().with_labels(Some("w"), Some("/a"));
        assert_eq!(gone.executable_name.as_deref(), Some("w"));
        assert_eq!(gone.cgroup.as_deref(), Some("/a"));
        assert_eq!(gone.otel_service_name(), "unknown_service:w");
        // A live process's executable wins over a thread's name.
        let named = me.clone().with_labels(Some("worker-3"), None);
        assert_eq!(named.executable_name, me.executable_name);
        assert_eq!(named.cgroup, me.cgroup);
    }
}
