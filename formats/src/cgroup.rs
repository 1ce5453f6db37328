//! cgroup v2 on this host: where the hierarchy is mounted, ids (directory inodes, what
//! `bpf_get_current_cgroup_id` returns) and back to paths, and container ids in paths.

use std::{
    collections::{BTreeMap, BTreeSet},
    io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
};

/// Where cgroup v2 is mounted: /sys/fs/cgroup on unified hosts, /sys/fs/cgroup/unified on
/// hybrid ones. The first cgroup2 mount in /proc/self/mounts.
pub fn root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    root_from_mounts(&mounts)
}

fn root_from_mounts(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_ascii_whitespace();
        let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(unescape_mount(dir)))
    })
}

/// /proc/self/mounts escapes spaces and a few others as octal (`\040`).
fn unescape_mount(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let oct: String = chars.clone().take(3).collect();
            if oct.len() == 3
                && let Ok(v) = u8::from_str_radix(&oct, 8)
            {
                out.push(v as char);
                chars.nth(2);
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// The cgroup id of a cgroup v2 directory.
pub fn id(path: &Path) -> io::Result<u64> {
    Ok(std::fs::metadata(path)?.ino())
}

/// Paths (relative to the root, `/` for the root itself) of the given cgroup ids, found by
/// walking the hierarchy once. Ids of cgroups that are gone are left out.
pub fn paths(ids: &BTreeSet<u64>) -> BTreeMap<u64, Arc<str>> {
    let mut out = BTreeMap::new();
    let Some(root) = root() else {
        return out;
    };
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        if out.len() == ids.len() {
            break;
        }
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue;
        };
        if ids.contains(&meta.ino()) {
            out.insert(meta.ino(), relative(&root, &dir));
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
    out
}

/// Every cgroup directory under `root` (itself included), with its id, sorted by path
/// components: each directory's descendants follow it, before any sibling.
pub fn walk(root: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue;
        };
        out.push((dir.clone(), meta.ino()));
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
    out.sort();
    out
}

/// `dir` relative to the hierarchy's root, as `/a/b` (`/` for the root).
pub fn relative(root: &Path, dir: &Path) -> Arc<str> {
    let rel = dir.strip_prefix(root).unwrap_or(dir);
    Arc::from(format!("/{}", rel.display()).as_str())
}

/// The container id a cgroup path names, if any: docker (`docker-<id>.scope`,
/// `/docker/<id>`), containerd/cri (`cri-containerd-<id>.scope`), cri-o (`crio-<id>.scope`),
/// podman (`libpod-<id>.scope`). Ids are 64 hex digits; the short 12-digit form is returned
/// as docker ps shows it. systemd slices and services that are not containers give None.
pub fn container_id(path: &str) -> Option<String> {
    for part in path.rsplit('/') {
        let name = part.strip_suffix(".scope").unwrap_or(part);
        let id = [
            "docker-",
            "cri-containerd-",
            "crio-",
            "libpod-",
            "containerd-",
        ]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
        if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some(id[..12].to_string());
        }
    }
    None
}

/// The systemd unit a cgroup path ends in (`nginx.service`, `session-3.scope`,
/// `machine.slice`), for cgroups that are not containers.
pub fn systemd_unit(path: &str) -> Option<&str> {
    let last = path.rsplit('/').next()?;
    [".service", ".scope", ".slice"]
        .iter()
        .any(|s| last.len() > s.len() && last.ends_with(s))
        .then_some(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cgroup2_on_unified_and_hybrid_hosts() {
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs ro 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            root_from_mounts(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let unified = "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n";
        assert_eq!(
            root_from_mounts(unified),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(root_from_mounts("proc /proc proc rw 0 0\n"), None);
        assert_eq!(unescape_mount("/mnt/my\\040cg"), "/mnt/my cg");
    }

    #[test]
    fn container_ids_from_runtime_paths() {
        let id = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899";
        for path in [
            format!("/system.slice/docker-{id}.scope"),
            format!("/docker/{id}"),
            format!("/kubepods.slice/kubepods-pod1.slice/cri-containerd-{id}.scope"),
            format!("/kubepods/burstable/pod1/crio-{id}.scope"),
            format!("/machine.slice/libpod-{id}.scope"),
            format!("/machine.slice/libpod-{id}.scope/container"),
        ] {
            assert_eq!(
                container_id(&path).as_deref(),
                Some("3f4e5d6c7b8a"),
                "{path}"
            );
        }
        assert_eq!(container_id("/system.slice/cron.service"), None);
        assert_eq!(container_id("/user.slice/user-0.slice"), None);
        assert_eq!(container_id("/docker/abc"), None);
        assert_eq!(
            systemd_unit("/system.slice/cron.service"),
            Some("cron.service")
        );
        assert_eq!(systemd_unit("/user.slice"), Some("user.slice"));
        assert_eq!(systemd_unit("/my-test"), None);
        assert_eq!(systemd_unit("/"), None);
    }

    #[test]
    fn descendants_follow_their_directory_in_path_order() {
        let mut dirs: Vec<PathBuf> = ["/r/a-c", "/r/a/b", "/r/a", "/r/a.x", "/r/a/b/c"]
            .iter()
            .map(PathBuf::from)
            .collect();
        dirs.sort();
        let names: Vec<&str> = dirs.iter().map(|d| d.to_str().unwrap()).collect();
        assert_eq!(names, ["/r/a", "/r/a/b", "/r/a/b/c", "/r/a-c", "/r/a.x"]);
    }

    #[test]
    fn relative_paths() {
        let root = Path::new("/sys/fs/cgroup/unified");
        assert_eq!(relative(root, root).as_ref(), "/");
        assert_eq!(relative(root, &root.join("a/b")).as_ref(), "/a/b");
    }

    #[test]
    fn this_process_cgroup_is_found_by_id() {
        let Some(root) = root() else { return };
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let Some(rel) = own.lines().find_map(|l| l.strip_prefix("0::")) else {
            return;
        };
        let dir = root.join(rel.trim_start_matches('/'));
        let id = id(&dir).unwrap();
        let found = paths(&BTreeSet::from([id]));
        assert_eq!(found.get(&id).map(|p| p.as_ref()), Some(rel));
    }
}
