//! The LD_PRELOAD edge: open/openat (and their 64-bit and fortified forms) of
//! "/dev/perfmon", ioctl(2) on the descriptors they return, and close(2). Everything else
//! goes to the next definition (libc's), found with dlsym(RTLD_NEXT).
//!
//! A device descriptor is a real one (on /dev/null, with O_CLOEXEC if asked), so the
//! program can keep, poll or close it like any other; the table of which descriptors are the
//! device, and whether each was opened for writing, is a mutex-guarded map. The table lock is
//! never held while the device's lock is: the device's own perf calls come back through
//! these hooks (for their event fds) and take the table lock only briefly.

use std::{
    collections::BTreeMap,
    ffi::{CStr, c_char, c_int, c_ulong, c_void},
    sync::{
        Mutex, MutexGuard, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
};

use profiler_core::kernel::Linux;

use crate::{
    abi::{Pmc, PmcData, Request},
    device::{Device, PerfmonError},
    names::Names,
    scope::ScopeMode,
};

const DEVICE_PATH: &CStr = c"/dev/perfmon";

static SEAM: Linux = Linux;
static DEVICE: Mutex<Device> = Mutex::new(Device::new(&SEAM));
/// Device descriptors: fd -> opened for writing.
static FILES: Mutex<BTreeMap<c_int, bool>> = Mutex::new(BTreeMap::new());
/// How many device descriptors are open: 0 lets ioctl and close skip the table.
static OPEN: AtomicUsize = AtomicUsize::new(0);

fn device() -> MutexGuard<'static, Device> {
    DEVICE.lock().unwrap_or_else(|p| p.into_inner())
}

fn files() -> MutexGuard<'static, BTreeMap<c_int, bool>> {
    FILES.lock().unwrap_or_else(|p| p.into_inner())
}

fn set_errno(e: c_int) {
    // SAFETY: writes this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// `LIBPERFMON_DEBUG` set: each refused request is explained on stderr.
///
/// An interposer has no caller to hand a warning to (the program sees only the ioctl's -1
/// and errno), so stderr is its one voice: perfmon(4) and docs/perfmon.md document these
/// lines. The only prints in library crates besides libcpc's default error handler.
fn refused(what: &str, e: &PerfmonError) -> c_int {
    static DEBUG: OnceLock<bool> = OnceLock::new();
    if *DEBUG.get_or_init(|| std::env::var_os("LIBPERFMON_DEBUG").is_some()) {
        eprintln!("libperfmon: {what}: {e}");
    }
    set_errno(e.errno());
    -1
}

/// The next definition of a libc function, looked up once.
struct Next {
    name: &'static CStr,
    addr: OnceLock<usize>,
}

impl Next {
    const fn new(name: &'static CStr) -> Self {
        Self {
            name,
            addr: OnceLock::new(),
        }
    }

    fn addr(&self) -> Option<usize> {
        let a = *self.addr.get_or_init(|| {
            // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no other
            // preconditions; it returns the next object's definition or NULL.
            unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) as usize }
        });
        (a != 0).then_some(a)
    }
}

static NEXT_OPEN: Next = Next::new(c"open");
static NEXT_OPEN64: Next = Next::new(c"open64");
static NEXT_OPENAT: Next = Next::new(c"openat");
static NEXT_OPENAT64: Next = Next::new(c"openat64");
static NEXT_OPEN_2: Next = Next::new(c"__open_2");
static NEXT_OPEN64_2: Next = Next::new(c"__open64_2");
static NEXT_OPENAT_2: Next = Next::new(c"__openat_2");
static NEXT_OPENAT64_2: Next = Next::new(c"__openat64_2");
static NEXT_IOCTL: Next = Next::new(c"ioctl");
static NEXT_CLOSE: Next = Next::new(c"close");

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
type Open2Fn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type Openat2Fn = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;
type IoctlFn = unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int;
type CloseFn = unsafe extern "C" fn(c_int) -> c_int;

/// Calls the next definition as `$ty`, or fails with ENOSYS if there is none.
macro_rules! call_next {
    ($next:expr, $ty:ty, $($arg:expr),*) => {
        match $next.addr() {
            // SAFETY: the address is libc's definition of this very function (dlsym by
            // name), whose C prototype `$ty` spells; the arguments are the caller's,
            // passed on unchanged.
            Some(a) => unsafe { std::mem::transmute::<usize, $ty>(a)($($arg),*) },
            None => {
                set_errno(libc::ENOSYS);
                -1
            }
        }
    };
}

/// Whether `path` names the device (absolute: a relative "perfmon" under /dev is not seen).
fn is_device(path: *const c_char) -> bool {
    // SAFETY: open(2)'s path argument is a NUL-terminated string (or NULL, checked).
    !path.is_null() && unsafe { CStr::from_ptr(path) } == DEVICE_PATH
}

/// open(2) of /dev/perfmon.
fn open_device(flags: c_int) -> c_int {
    let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
    let (mode, names) = if write {
        let mode = match ScopeMode::from_env() {
            Ok(m) => m,
            Err(e) => return refused("open", &e.into()),
        };
        // A bad mapping is the user's mistake, not the program's: always one line.
        match Names::from_env() {
            Ok(n) => (mode, n),
            Err(e) => {
                eprintln!("libperfmon: {e}");
                return refused("open", &e.into());
            }
        }
    } else {
        (ScopeMode::Cpu, Names::RAW_ONLY)
    };
    crate::prefault::own_pages();
    let backing = libc::O_RDWR | (flags & libc::O_CLOEXEC);
    let fd = call_next!(NEXT_OPEN, OpenFn, c"/dev/null".as_ptr(), backing);
    if fd < 0 {
        return fd;
    }
    if let Err(e) = device().open_named(write, mode, names) {
        call_next!(NEXT_CLOSE, CloseFn, fd);
        return refused("open", &e);
    }
    files().insert(fd, write);
    OPEN.fetch_add(1, Ordering::SeqCst);
    fd
}

/// The variadic mode argument, read as a fixed one: on x86-64 (System V) and AArch64
/// Linux, variadic integer arguments travel in the same registers as fixed ones, so an
/// `open(path, flags, ...)` call is received intact by a three-argument function. The mode
/// is only read (passed on) when O_CREAT or O_TMPFILE says the caller passed one.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the open(2) hooks read the variadic mode as a fixed argument: x86-64/AArch64 only");

fn wants_mode(flags: c_int) -> bool {
    flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE
}

/// # Safety
/// As open(2): `path` NUL-terminated; `mode` passed when O_CREAT or O_TMPFILE is set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    if is_device(path) {
        return open_device(flags);
    }
    let mode = if wants_mode(flags) { mode } else { 0 };
    call_next!(NEXT_OPEN, OpenFn, path, flags, mode)
}

/// # Safety
/// As open64(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    if is_device(path) {
        return open_device(flags);
    }
    let mode = if wants_mode(flags) { mode } else { 0 };
    call_next!(NEXT_OPEN64, OpenFn, path, flags, mode)
}

/// # Safety
/// As openat(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    if is_device(path) {
        return open_device(flags);
    }
    let mode = if wants_mode(flags) { mode } else { 0 };
    call_next!(NEXT_OPENAT, OpenatFn, dirfd, path, flags, mode)
}

/// # Safety
/// As openat64(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    if is_device(path) {
        return open_device(flags);
    }
    let mode = if wants_mode(flags) { mode } else { 0 };
    call_next!(NEXT_OPENAT64, OpenatFn, dirfd, path, flags, mode)
}

/// The fortified open (`_FORTIFY_SOURCE` with flags not known at compile time).
///
/// # Safety
/// As open(2) without a mode.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    if is_device(path) {
        return open_device(flags);
    }
    call_next!(NEXT_OPEN_2, Open2Fn, path, flags)
}

/// # Safety
/// As open64(2) without a mode.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    if is_device(path) {
        return open_device(flags);
    }
    call_next!(NEXT_OPEN64_2, Open2Fn, path, flags)
}

/// # Safety
/// As openat(2) without a mode.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if is_device(path) {
        return open_device(flags);
    }
    call_next!(NEXT_OPENAT_2, Openat2Fn, dirfd, path, flags)
}

/// # Safety
/// As openat64(2) without a mode.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if is_device(path) {
        return open_device(flags);
    }
    call_next!(NEXT_OPENAT64_2, Openat2Fn, dirfd, path, flags)
}

/// Whether `fd` is a device descriptor, and if so whether it was opened for writing.
fn device_fd(fd: c_int) -> Option<bool> {
    if OPEN.load(Ordering::SeqCst) == 0 {
        return None;
    }
    files().get(&fd).copied()
}

/// ioctl(2). The one argument is read as a pointer: every perfmon request takes one, and
/// other descriptors' requests get it passed on unchanged in the same register.
///
/// # Safety
/// As ioctl(2): `arg` is what `request` takes. For the perfmon requests, a pointer to the
/// structure (or int) perfmon(4) names; NULL is refused with EFAULT, any other bad pointer
/// faults as it would in any libc call given one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let Some(write) = device_fd(fd) else {
        return call_next!(NEXT_IOCTL, IoctlFn, fd, request, arg);
    };
    let req = match Request::decode(request) {
        Some(r) => r,
        None => return refused("ioctl", &PerfmonError::UnknownRequest(request)),
    };
    // SAFETY: forwarded from our caller's contract above.
    match unsafe { serve(req, write, arg) } {
        Ok(()) => 0,
        Err(e) => refused(req.name(), &e),
    }
}

/// One request on a device descriptor.
///
/// # Safety
/// `arg` is NULL or points to the type `req` takes, valid for reads and writes.
unsafe fn serve(req: Request, write: bool, arg: *mut c_void) -> Result<(), PerfmonError> {
    if req.needs_write() && !write {
        return Err(PerfmonError::ReadOnly(req.name()));
    }
    if arg.is_null() {
        return Err(PerfmonError::Fault(req.name()));
    }
    // Each access below: `arg` is non-NULL and points to the request's type, by this
    // function's contract; unaligned accesses because C callers may pack them.
    match req {
        Request::Setup => {
            // SAFETY: `arg` points to a `struct pmc` (above).
            let pmc = unsafe { (arg as *const Pmc).read_unaligned() };
            device().setup(pmc)
        }
        Request::Get => {
            let p = arg as *mut Pmc;
            // SAFETY: `arg` points to a `struct pmc` (above).
            let num = unsafe { p.read_unaligned() }.num;
            let got = device().get(num)?;
            // SAFETY: as above, valid for writes.
            unsafe { p.write_unaligned(got) };
            Ok(())
        }
        Request::Start | Request::Stop | Request::Reset => {
            // SAFETY: `arg` points to an int (above).
            let num = unsafe { (arg as *const c_int).read_unaligned() };
            let mut d = device();
            match req {
                Request::Start => d.start(num),
                Request::Stop => d.stop(num),
                _ => d.reset(num),
            }
        }
        Request::Read => {
            let p = arg as *mut PmcData;
            // SAFETY: `arg` points to a `struct pmc_data` (above).
            let mut data = unsafe { p.read_unaligned() };
            data.value = device().read(data.num)?;
            // SAFETY: as above, valid for writes.
            unsafe { p.write_unaligned(data) };
            Ok(())
        }
        Request::Tstamp => {
            // SAFETY: `arg` points to a `struct pmc_tstamp` (above), valid for writes.
            unsafe { (arg as *mut crate::abi::PmcTstamp).write_unaligned(Device::tstamp()) };
            Ok(())
        }
    }
}

/// close(2): a device descriptor's close releases what the driver's close releases.
///
/// # Safety
/// As close(2).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let ours = (OPEN.load(Ordering::SeqCst) != 0)
        .then(|| files().remove(&fd))
        .flatten();
    if let Some(write) = ours {
        OPEN.fetch_sub(1, Ordering::SeqCst);
        device().close(write);
    }
    call_next!(NEXT_CLOSE, CloseFn, fd)
}
