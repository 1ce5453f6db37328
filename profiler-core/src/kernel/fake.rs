//! A [`Kernel`] for unit tests: records every call, hands out real (but inert) fds on
//! /dev/null, answers group reads with counts that grow by a known step per read, and fails
//! the calls a test asks it to fail.

use std::{
    collections::HashMap,
    ffi::CStr,
    fs::File,
    io,
    os::fd::{AsRawFd, BorrowedFd, OwnedFd},
    sync::Mutex,
};

use perf_event_open_sys::bindings::perf_event_attr;

use super::{Ioctl, Kernel};

/// One call the code under test made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    Open {
        fd: i32,
        type_: u32,
        config: u64,
        pid: i32,
        cpu: i32,
        group: Option<i32>,
        flags: u64,
        disabled: bool,
        read_format: u64,
    },
    Ioctl {
        fd: i32,
        op: Ioctl,
    },
    Read {
        fd: i32,
    },
    Link {
        prog: i32,
        event: i32,
        cookie: u64,
    },
    ArraySet {
        map: i32,
        index: u32,
        event: i32,
    },
    Probe,
    PidfdOpen {
        pid: i32,
    },
    Openat2 {
        dir: i32,
        path: String,
        flags: u64,
        resolve: u64,
    },
}

#[derive(Debug, Default)]
struct State {
    calls: Vec<Call>,
    /// Members of each group, by leader fd, in open order (the leader first).
    groups: HashMap<i32, Vec<i32>>,
    /// Reads so far, by leader fd.
    reads: HashMap<i32, u64>,
    /// perf_event_open calls left before one fails with the errno.
    fail_open: Option<(usize, i32)>,
    fail_link: Option<i32>,
}

#[derive(Debug, Default)]
pub(crate) struct Fake {
    state: Mutex<State>,
}

impl Fake {
    /// A fake that lives as long as the test process (the seam is `&'static`).
    pub fn leak() -> &'static Fake {
        Box::leak(Box::default())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// The perf_event_open after `skip` more succeed fails with `errno`.
    pub fn fail_open(&self, skip: usize, errno: i32) {
        self.state().fail_open = Some((skip, errno));
    }

    /// Every BPF_LINK_CREATE fails with `errno`.
    pub fn fail_link(&self, errno: i32) {
        self.state().fail_link = Some(errno);
    }

    /// What the `n`-th read of a group yields for its member `k`: 10 × (k + 1) × n, and
    /// 1000 × n nanoseconds enabled and running.
    pub fn count(k: usize, n: u64) -> u64 {
        10 * (k as u64 + 1) * n
    }
}

fn inert_fd() -> io::Result<OwnedFd> {
    Ok(File::open("/dev/null")?.into())
}

impl Kernel for Fake {
    fn perf_event_open(
        &self,
        attr: &perf_event_attr,
        pid: i32,
        cpu: i32,
        group: Option<BorrowedFd<'_>>,
        flags: u64,
    ) -> io::Result<OwnedFd> {
        let mut s = self.state();
        if let Some((skip, errno)) = s.fail_open {
            if skip == 0 {
                s.fail_open = None;
                return Err(io::Error::from_raw_os_error(errno));
            }
            s.fail_open = Some((skip - 1, errno));
        }
        let fd = inert_fd()?;
        let raw = fd.as_raw_fd();
        let group = group.map(|g| g.as_raw_fd());
        match group {
            Some(leader) => s.groups.entry(leader).or_default().push(raw),
            // Fd numbers are reused once closed: a new leader starts afresh.
            None => {
                s.groups.insert(raw, vec![raw]);
                s.reads.remove(&raw);
            }
        }
        s.calls.push(Call::Open {
            fd: raw,
            type_: attr.type_,
            config: attr.config,
            pid,
            cpu,
            group,
            flags,
            disabled: attr.disabled() != 0,
            read_format: attr.read_format,
        });
        Ok(fd)
    }

    fn perf_ioctl(&self, fd: BorrowedFd<'_>, op: Ioctl) -> io::Result<()> {
        self.state().calls.push(Call::Ioctl {
            fd: fd.as_raw_fd(),
            op,
        });
        Ok(())
    }

    fn perf_read(&self, fd: BorrowedFd<'_>, buf: &mut [u64]) -> io::Result<usize> {
        let mut s = self.state();
        let fd = fd.as_raw_fd();
        s.calls.push(Call::Read { fd });
        let n = {
            let r = s.reads.entry(fd).or_default();
            *r += 1;
            *r
        };
        let members = s.groups.get(&fd).map_or(1, Vec::len);
        // PERF_FORMAT_GROUP | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING | ID.
        let mut words = vec![members as u64, 1000 * n, 1000 * n];
        for k in 0..members {
            words.extend([Fake::count(k, n), k as u64]);
        }
        if buf.len() < words.len() {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        buf[..words.len()].copy_from_slice(&words);
        Ok(8 * words.len())
    }

    fn bpf_link_perf_event(
        &self,
        prog: BorrowedFd<'_>,
        event: BorrowedFd<'_>,
        cookie: u64,
    ) -> io::Result<OwnedFd> {
        let mut s = self.state();
        s.calls.push(Call::Link {
            prog: prog.as_raw_fd(),
            event: event.as_raw_fd(),
            cookie,
        });
        if let Some(errno) = s.fail_link {
            return Err(io::Error::from_raw_os_error(errno));
        }
        inert_fd()
    }

    fn bpf_perf_event_array_set(
        &self,
        map: BorrowedFd<'_>,
        index: u32,
        event: BorrowedFd<'_>,
    ) -> io::Result<()> {
        self.state().calls.push(Call::ArraySet {
            map: map.as_raw_fd(),
            index,
            event: event.as_raw_fd(),
        });
        Ok(())
    }

    fn bpf_probe(&self) -> io::Result<()> {
        self.state().calls.push(Call::Probe);
        Ok(())
    }

    fn pidfd_open(&self, pid: i32) -> io::Result<OwnedFd> {
        self.state().calls.push(Call::PidfdOpen { pid });
        inert_fd()
    }

    fn openat2(
        &self,
        dir: BorrowedFd<'_>,
        path: &CStr,
        flags: u64,
        resolve: u64,
    ) -> io::Result<OwnedFd> {
        self.state().calls.push(Call::Openat2 {
            dir: dir.as_raw_fd(),
            path: path.to_string_lossy().into_owned(),
            flags,
            resolve,
        });
        inert_fd()
    }
}
