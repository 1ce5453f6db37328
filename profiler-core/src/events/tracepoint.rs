//! Tracepoints (PERF_TYPE_TRACEPOINT) by `subsystem:event`, with ids read from tracefs.

use std::{
    ffi::CString,
    fs, io,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    sync::Mutex,
};

use perf_event_open_sys::bindings;

use super::{Event, EventError, EventKind, grammar::NoTracing, suggest::suggest};

/// Where tracefs is mounted today, and where the kernel docs say to mount it.
const TRACEFS: &str = "/sys/kernel/tracing";
/// Where it appears when only debugfs is mounted (older systems).
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// The tracing root, or why there is none.
#[derive(Debug)]
pub(crate) struct Tracing {
    root: Result<PathBuf, NoTracing>,
}

impl Tracing {
    /// `root` itself (tests, or a caller that knows better); usable if it has `events/`.
    pub(crate) fn at(root: &Path) -> Tracing {
        let root = if root.join("events").is_dir() {
            Ok(root.to_owned())
        } else {
            Err(NoTracing::NoEventsDir(root.to_owned()))
        };
        Tracing { root }
    }

    /// No tracepoints at all, for `reason`.
    pub(crate) fn none(reason: NoTracing) -> Tracing {
        Tracing { root: Err(reason) }
    }

    /// This host's tracing root. When tracefs is mounted nowhere and we are root, mounts it
    /// at /sys/kernel/tracing (as systemd normally does) and says so in `notes`.
    pub(crate) fn discover(notes: &mut Vec<String>) -> Tracing {
        // Two threads each seeing "not mounted" would stack two mounts; one at a time.
        static DISCOVERY: Mutex<()> = Mutex::new(());
        let _one_at_a_time = DISCOVERY
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for candidate in [TRACEFS, DEBUGFS_TRACING] {
            let tracing = Tracing::at(Path::new(candidate));
            if tracing.root.is_ok() {
                return tracing;
            }
        }
        if !nix::unistd::geteuid().is_root() {
            return Tracing::none(NoTracing::NotMounted {
                tracefs: TRACEFS,
                debugfs: DEBUGFS_TRACING,
            });
        }
        match mount_tracefs(Path::new(TRACEFS)) {
            Ok(()) => {
                notes.push(format!("mounted tracefs at {TRACEFS} (it was not mounted)"));
                Tracing::at(Path::new(TRACEFS))
            }
            Err(source) => Tracing::none(NoTracing::MountFailed {
                at: TRACEFS,
                source,
            }),
        }
    }

    pub(crate) fn root(&self) -> Option<&Path> {
        self.root.as_deref().ok()
    }

    /// Resolves `subsystem:event`. `None` when `name` has no `:`.
    pub(crate) fn resolve(&self, name: &str) -> Option<Result<Event, EventError>> {
        let (system, event) = name.split_once(':')?;
        Some(self.resolve_split(name, system, event))
    }

    fn resolve_split(&self, name: &str, system: &str, event: &str) -> Result<Event, EventError> {
        // The parts become path components: refuse anything that could leave events/.
        if !is_component(system) || !is_component(event) {
            return Err(EventError::Malformed {
                name: name.to_owned(),
                reason: "tracepoints are subsystem:event, each [A-Za-z0-9_.-]+".to_owned(),
            });
        }
        let root = self
            .root
            .as_ref()
            .map_err(|reason| EventError::Unavailable {
                name: name.to_owned(),
                reason: format!("no tracepoints: {reason}"),
            })?;
        let path = root.join("events").join(system).join(event).join("id");
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let known = self.names();
                return Err(EventError::Unknown {
                    name: name.to_owned(),
                    suggestions: suggest(name, known.iter().map(String::as_str)),
                });
            }
            Err(e) => {
                return Err(EventError::Unavailable {
                    name: name.to_owned(),
                    reason: format!("cannot read {}: {e}", path.display()),
                });
            }
        };
        let id = text.trim().parse().map_err(|_| EventError::Malformed {
            name: name.to_owned(),
            reason: format!("{} holds '{}', not an id", path.display(), text.trim()),
        })?;
        Ok(Event {
            name: name.to_owned(),
            kind: EventKind::Tracepoint,
            pmu: None,
            type_: bindings::PERF_TYPE_TRACEPOINT,
            config: id,
            config1: 0,
            config2: 0,
            generic: None,
        })
    }

    /// Every `subsystem:event` (thousands on a real kernel: only read to suggest names).
    pub(crate) fn names(&self) -> Vec<String> {
        let Some(root) = self.root() else {
            return Vec::new();
        };
        let mut names = Vec::new();
        for system in subdirs(&root.join("events")) {
            for event in subdirs(&root.join("events").join(&system)) {
                names.push(format!("{system}:{event}"));
            }
        }
        names
    }
}

fn is_component(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

fn subdirs(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect()
}

/// `mount -t tracefs nodev <target>`.
fn mount_tracefs(target: &Path) -> io::Result<()> {
    let target = CString::new(target.as_os_str().as_bytes())?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call; data may be
    // NULL for tracefs (no mount options).
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::testutil::FakeTree;

    fn fake() -> FakeTree {
        let tree = FakeTree::new("tracing");
        tree.write("events/sched/sched_switch/id", "372\n");
        tree.write("events/sched/sched_wakeup/id", "373\n");
        tree.write("events/sched/enable", "0\n");
        tree.write("events/irq/irq_handler_entry/id", "40\n");
        tree.write("events/bad/bad_id/id", "many\n");
        tree
    }

    #[test]
    fn ids_become_configs() {
        let tree = fake();
        let event = Tracing::at(tree.path())
            .resolve("sched:sched_switch")
            .unwrap()
            .unwrap();
        assert_eq!((event.type_, event.config), (2, 372));
        assert_eq!(
            (event.kind, event.name.as_str()),
            (EventKind::Tracepoint, "sched:sched_switch")
        );
    }

    #[test]
    fn misspelt_tracepoints_get_suggestions() {
        let tree = fake();
        let err = Tracing::at(tree.path())
            .resolve("sched:sched_swich")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            err,
            EventError::Unknown {
                name: "sched:sched_swich".into(),
                suggestions: vec!["sched:sched_switch".into()],
            }
        );
    }

    #[test]
    fn bad_names_ids_and_roots() {
        let tree = fake();
        let tracing = Tracing::at(tree.path());
        for name in ["sched:../../x", ":x", "sched:", "a/b:c"] {
            let got = tracing.resolve(name).unwrap();
            assert!(
                matches!(got, Err(EventError::Malformed { .. })),
                "{name}: {got:?}"
            );
        }
        assert!(matches!(
            tracing.resolve("bad:bad_id").unwrap(),
            Err(EventError::Malformed { .. })
        ));
        assert_eq!(tracing.resolve("cycles"), None);

        let empty = FakeTree::new("no-events");
        let err = Tracing::at(empty.path())
            .resolve("sched:sched_switch")
            .unwrap()
            .unwrap_err();
        let EventError::Unavailable { reason, .. } = err else {
            panic!("expected Unavailable, got {err:?}")
        };
        assert!(reason.contains("no events/ directory"), "{reason}");
    }

    #[test]
    fn names_lists_directories_only() {
        let tree = fake();
        let mut names = Tracing::at(tree.path()).names();
        names.sort();
        assert_eq!(
            names,
            [
                "bad:bad_id",
                "irq:irq_handler_entry",
                "sched:sched_switch",
                "sched:sched_wakeup"
            ]
        );
    }
}
