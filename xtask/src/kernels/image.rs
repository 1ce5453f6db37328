//! The initramfs every kernel boots: static busybox, the release profiler and libcpc.so
//! (installed under /opt/profiler as `cargo xtask install` lays them out), the fixtures and
//! libcpc's C examples compiled against it, a CPython with the start-up part of its library
//! (the `python` check), this xtask binary (the guest suite), their shared libraries, and an
//! /init that mounts what the profiler needs and runs the suite.

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, anyhow, bail, ensure};

// The fixtures (their flags in each file's first line) and libcpc's C examples the scenarios run.
use profiler_scenarios::{C_FIXTURES, LIBCPC_EXAMPLES};

use super::guest;
use crate::util::{output, run, show, workspace_root};

/// Where the profiler is installed inside the guest.
pub const PREFIX: &str = "/opt/profiler";

/// PID 1: mounts, the suite, power off. The suite's output goes to the console (ttyS0).
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t bpf bpf /sys/fs/bpf
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up 2>/dev/null
# Debian's kernels back big anonymous mappings with huge pages ("always"): the fixtures'
# known counts are of 4 KiB pages, as on the development machine ("madvise").
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
echo "KUP kernel=$(uname -r) uptime=$(cut -d' ' -f1 /proc/uptime)"
/opt/profiler/bin/xtask kernels-guest --root /opt/profiler --scratch /tmp/suite
echo "KEND uptime=$(cut -d' ' -f1 /proc/uptime)"
sync
poweroff -f
"#;

/// The built tree: `dir/root` (the files) and `dir/initramfs.cpio`.
pub struct Initramfs {
    pub cpio: PathBuf,
    /// `root/opt/profiler`, for running the suite natively (the host's kernel).
    pub prefix: PathBuf,
}

/// Builds the image from the release build in `built` into `dir`.
pub fn build(built: &Path, dir: &Path) -> anyhow::Result<Initramfs> {
    let root = dir.join("root");
    let _ = fs::remove_dir_all(&root);
    let prefix = root.join(PREFIX.trim_start_matches('/'));
    let ws = workspace_root();
    crate::install::install_files(built, &ws, &prefix)?;
    let fixtures = prefix.join("fixtures");
    fs::create_dir_all(&fixtures)?;
    for name in C_FIXTURES {
        let src = ws.join(format!("tests/fixtures/{name}.c"));
        let text =
            fs::read_to_string(&src).with_context(|| format!("reading {}", src.display()))?;
        let flags = header_flags(&text)
            .ok_or_else(|| anyhow!("{} has no `/* cc FLAGS -o NAME` first line", src.display()))?;
        run(Command::new("cc")
            .args(&flags)
            .arg("-o")
            .arg(fixtures.join(name))
            .arg(&src))?;
    }
    let lib = prefix.join("lib");
    for name in LIBCPC_EXAMPLES {
        run(Command::new("cc")
            .args(["-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread", "-I"])
            .arg(ws.join("libcpc/include"))
            .arg("-o")
            .arg(fixtures.join(name))
            .arg(ws.join(format!("libcpc/examples/{name}.c")))
            .arg("-L")
            .arg(&lib)
            .arg(format!("-Wl,-rpath,{PREFIX}/lib"))
            .arg("-lcpc"))?;
    }
    let python = add_python(&prefix)?;
    let xtask = std::env::current_exe().context("locating the xtask binary")?;
    fs::copy(&xtask, prefix.join("bin/xtask")).context("copying the xtask binary")?;
    let busybox = busybox()?;
    for d in [
        "bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "tmp", "run", "etc", "root",
    ] {
        fs::create_dir_all(root.join(d))?;
    }
    fs::copy(&busybox, root.join("bin/busybox"))?;
    // Shared libraries of every ELF file in the tree, at their host paths.
    let mut elves = vec![
        prefix.join("bin/profiler"),
        prefix.join("bin/xtask"),
        lib.join(crate::install::SONAME),
    ];
    elves.extend(python);
    elves.extend(
        C_FIXTURES
            .iter()
            .chain(LIBCPC_EXAMPLES)
            .map(|n| fixtures.join(n)),
    );
    for elf in &elves {
        for dep in shared_libraries(elf)? {
            let to = root.join(dep.strip_prefix("/").unwrap_or(&dep));
            if !to.exists() {
                fs::create_dir_all(to.parent().unwrap_or(&root))?;
                fs::copy(&dep, &to).with_context(|| format!("copying {}", dep.display()))?;
            }
        }
    }
    write_executable(&root.join("init"), INIT)?;
    fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    fs::write(root.join("etc/group"), "root:x:0:\n")?;
    let cpio = dir.join("initramfs.cpio");
    write_cpio(&root, &cpio)?;
    Ok(Initramfs { cpio, prefix })
}

/// What the `python` check's interpreter is asked: its version, its standard library's
/// directory, and the module files its start-up and the script's imports load (with `-S
/// -E`, as the check runs it: a few `encodings` modules; `os.py` is also the landmark by
/// which CPython finds its library next to it, as `os.pyc` too).
const PYTHON_QUERY: &str = "import os, sys, _thread, time
print('%d.%d' % sys.version_info[:2])
print(os.path.dirname(os.__file__))
for m in list(sys.modules.values()):
    f = getattr(m, '__file__', None)
    if f:
        print(f)
";

/// Compiles each (source, destination) pair of its arguments.
const PYTHON_COMPILE: &str = "import py_compile, sys
args = sys.argv[1:]
for src, dst in zip(args[::2], args[1::2]):
    py_compile.compile(src, cfile=dst, doraise=True)
";

/// Copies this machine's CPython ([`profiler_scenarios::host_python`]) into
/// `prefix/python` with the part of its standard library start-up needs; returns the
/// interpreter (its shared libraries are copied with everyone's). None, said on stderr,
/// when there is none: the guests' `python` check then fails, saying so.
fn add_python(prefix: &Path) -> anyhow::Result<Option<PathBuf>> {
    let Some(python) = profiler_scenarios::host_python() else {
        eprintln!(
            "no CPython on this machine (Debian's /usr/bin/python3 or pyenv's): every \
             kernel's `python` check will fail"
        );
        return Ok(None);
    };
    let out = output(Command::new(&python).args(["-S", "-E", "-B", "-c", PYTHON_QUERY]))?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{} could not say what it loads: {}",
        python.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let mut lines = text.lines();
    let (Some(version), Some(stdlib)) = (lines.next(), lines.next()) else {
        bail!("{} said {text:?}", python.display());
    };
    let home = prefix.join(guest::PYTHON_HOME);
    let lib = home.join(format!("lib/python{version}"));
    // exec_prefix's landmark (no extension module is needed).
    fs::create_dir_all(lib.join("lib-dynload"))?;
    // Compiled here, sourceless (`os.pyc` beside `encodings/`): TCG's slow CPUs would
    // otherwise spend a second of every run compiling them.
    let mut compile = Command::new(&python);
    compile.args(["-S", "-E", "-c", PYTHON_COMPILE]);
    for file in lines.map(Path::new) {
        let Ok(rel) = file.strip_prefix(stdlib) else {
            continue;
        };
        let to = lib.join(rel).with_extension("pyc");
        fs::create_dir_all(to.parent().unwrap_or(&lib))?;
        compile.arg(file).arg(to);
    }
    run(&mut compile)?;
    let bin = prefix.join(guest::PYTHON);
    fs::create_dir_all(bin.parent().unwrap_or(&home))?;
    fs::copy(&python, &bin).with_context(|| format!("copying {}", python.display()))?;
    Ok(Some(bin))
}

/// The compiler flags of a fixture's first line, `/* cc FLAGS -o NAME NAME.c`.
pub fn header_flags(source: &str) -> Option<Vec<String>> {
    let first = source.lines().next()?.strip_prefix("/* cc ")?;
    let (flags, _) = first.split_once(" -o ")?;
    Some(flags.split_whitespace().map(str::to_string).collect())
}

/// A statically linked busybox (Debian's busybox-static).
fn busybox() -> anyhow::Result<PathBuf> {
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        let p = PathBuf::from(p);
        if p.exists() && shared_libraries(&p)?.is_empty() {
            return Ok(p);
        }
    }
    bail!("no static busybox (/bin/busybox from busybox-static)")
}

/// The absolute paths `ldd` resolves for `elf` (none for a static binary).
fn shared_libraries(elf: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = output(Command::new("ldd").arg(elf))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // "not a dynamic executable"
        return Ok(Vec::new());
    }
    Ok(text
        .lines()
        .filter(|l| !l.contains("not found") && !l.contains("libcpc.so"))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')))
        .map(PathBuf::from)
        .collect())
}

fn write_executable(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::write(path, text)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// `cpio -o -H newc` of everything under `root` (paths relative to it).
fn write_cpio(root: &Path, out: &Path) -> anyhow::Result<()> {
    let mut names = Vec::new();
    collect(root, Path::new("."), &mut names)?;
    let file = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut cmd = Command::new("cpio");
    cmd.args(["-o", "-H", "newc", "--quiet"])
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(file);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", show(&cmd)))?;
    {
        let mut stdin = child.stdin.take().context("cpio stdin")?;
        for n in &names {
            writeln!(stdin, "{}", n.display())?;
        }
    }
    let status = child.wait()?;
    ensure!(status.success(), "`{}` failed ({status})", show(&cmd));
    Ok(())
}

fn collect(root: &Path, rel: &Path, names: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    names.push(rel.to_path_buf());
    let path = root.join(rel);
    if fs::symlink_metadata(&path)?.is_dir() {
        let mut entries: Vec<_> = fs::read_dir(&path)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            collect(root, &rel.join(e.file_name()), names)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_flags_come_from_their_first_line() {
        for (name, expected) in [
            ("chain", &["-O1", "-g", "-fno-omit-frame-pointer"][..]),
            ("touch", &["-O1", "-g", "-pthread"]),
        ] {
            let text =
                fs::read_to_string(workspace_root().join(format!("tests/fixtures/{name}.c")))
                    .unwrap();
            assert_eq!(header_flags(&text).unwrap(), expected, "{name}");
        }
        assert_eq!(header_flags("int main;"), None);
    }
}
