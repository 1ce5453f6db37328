//! pidfd_open(2) and openat2(2), for [`super::Linux`].

use std::{
    ffi::CStr,
    io,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
};

/// pidfd_open(2) with no flags.
pub(super) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// openat2(2) of `path` relative to `dir` with `open_how { flags, resolve }` (mode 0).
pub(super) fn openat2(
    dir: BorrowedFd<'_>,
    path: &CStr,
    flags: u64,
    resolve: u64,
) -> io::Result<OwnedFd> {
    // SAFETY: open_how is plain integers; all zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags;
    how.resolve = resolve;
    // SAFETY: openat2 with a directory fd borrowed from its owner, a NUL-terminated path and
    // an open_how of the size we pass, which the kernel only reads.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use std::{
        ffi::CString,
        fs::File,
        io::Read,
        os::fd::{AsFd, AsRawFd},
    };

    use crate::kernel::linux;

    #[test]
    fn pidfd_open_names_a_live_process_and_refuses_a_missing_one() {
        let me = linux().pidfd_open(std::process::id() as i32).unwrap();
        let mut poll = libc::pollfd {
            fd: me.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd we own, a zero timeout.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        assert_eq!(ready, 0, "we have not exited");
        // Above any pid_max (at most 2^22).
        let err = linux().pidfd_open(i32::MAX).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ESRCH));
    }

    #[test]
    fn openat2_keeps_an_absolute_symlink_inside_the_root() {
        let root =
            std::env::temp_dir().join(format!("profiler-core-openat2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/hostname"), "inside\n").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("link")).unwrap();
        let dir = File::open(&root).unwrap();
        let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
        let resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
        let path = CString::new("link").unwrap();
        let opened = linux().openat2(dir.as_fd(), &path, flags, resolve);
        let mut text = String::new();
        let read = opened.map(|fd| File::from(fd).read_to_string(&mut text));
        let missing = CString::new("nothing").unwrap();
        let err = linux()
            .openat2(dir.as_fd(), &missing, flags, resolve)
            .unwrap_err();
        std::fs::remove_dir_all(&root).unwrap();
        // ENOSYS before Linux 5.6: nothing to check there.
        if let Err(e) = &read
            && e.raw_os_error() == Some(libc::ENOSYS)
        {
            return;
        }
        read.unwrap().unwrap();
        assert_eq!(text, "inside\n", "/etc/hostname resolved under the root");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }
}
