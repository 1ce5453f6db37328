//! Keeps the shim out of the counts: its own pages are faulted in before a counter starts.
//!
//! A page-fault counter started by PMIOSTART would otherwise count the first execution of
//! the shim's PMIOSTOP path (a text page not yet mapped, a data page not yet written).
//! MADV_POPULATE_READ/WRITE (Linux 5.14) maps every page of libperfmon.so's own mappings
//! now; on older kernels the call fails and the first PMIOSTOP may add a fault or two.
//! Only the shim's mappings are touched: the program's own first-touch faults stay its own.

use std::{ffi::CStr, sync::Once};

/// The path of the object this function is in (libperfmon.so).
fn own_path() -> Option<String> {
    // SAFETY: Dl_info is plain data; all-zero is a valid value for dladdr to overwrite.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads its address argument (a function of this object) and
    // writes `info`.
    let found = unsafe { libc::dladdr(own_path as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path owned by the dynamic loader, valid
    // while the object stays loaded (it is this object).
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    std::fs::canonicalize(name.to_str().ok()?)
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// `start-end perms offset dev inode path` lines of /proc/self/maps for `path`:
/// (start, length, writable). The anonymous mapping right after the object's last writable
/// one is its .bss beyond the file's last page, and is included.
fn mappings(maps: &str, path: &str) -> Vec<(usize, usize, bool)> {
    let mut out = Vec::new();
    let mut bss_at = None;
    for l in maps.lines() {
        let mut f = l.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let name = f.nth(3);
        let Some((a, b)) = range.split_once('-').and_then(|(a, b)| {
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        }) else {
            continue;
        };
        let writable = perms.as_bytes().get(1) == Some(&b'w');
        let ours = name == Some(path) || (name.is_none() && bss_at == Some(a));
        bss_at = (name == Some(path) && writable).then_some(b);
        if ours && perms.starts_with('r') && b > a {
            out.push((a, b - a, writable));
        }
    }
    out
}

/// Faults in the shim's pages, once per process.
pub fn own_pages() {
    static DONE: Once = Once::new();
    DONE.call_once(|| {
        let (Some(path), Ok(maps)) = (own_path(), std::fs::read_to_string("/proc/self/maps"))
        else {
            return;
        };
        for (start, len, writable) in mappings(&maps, &path) {
            let advice = if writable {
                libc::MADV_POPULATE_WRITE
            } else {
                libc::MADV_POPULATE_READ
            };
            // SAFETY: [start, start+len) is a mapping of this object listed by the kernel;
            // populating it changes no contents, only which pages are mapped.
            unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_readable_mappings_of_one_object() {
        let maps = "\
5555000-5556000 r--p 00000000 fe:01 12 /usr/bin/prog
7f00000-7f01000 r--p 00000000 fe:01 34 /opt/lib/libperfmon.so
7f01000-7f05000 r-xp 00001000 fe:01 34 /opt/lib/libperfmon.so
7f05000-7f06000 ---p 00005000 fe:01 34 /opt/lib/libperfmon.so
7f06000-7f08000 rw-p 00006000 fe:01 34 /opt/lib/libperfmon.so
7f08000-7f09000 rw-p 00000000 00:00 0
";
        assert_eq!(
            mappings(maps, "/opt/lib/libperfmon.so"),
            [
                (0x7f00000, 0x1000, false),
                (0x7f01000, 0x4000, false),
                (0x7f06000, 0x2000, true),
                (0x7f08000, 0x1000, true)
            ]
        );
    }
}
