//! The initramfs every kernel boots: static busybox, the release profiler and libcpc.so
//! (installed under /opt/profiler as `cargo xtask install` lays them out), the fixtures and
//! libcpc's C examples compiled against it, a CPython with the start-up part of its library
//! (the `python` check), this xtask binary (the guest suite), their shared libraries, and an
//! /init that mounts what the profiler needs and runs the suite. An arm64 image holds the
//! same parts cross-built (the guest suite too), Debian's arm64 busybox, and the libraries of
//! Debian's arm64 cross glibc, found by their `NEEDED` entries (ldd cannot run aarch64
//! programs); no CPython (its `python` check is skipped, saying so).

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, anyhow, bail, ensure};

// The fixtures (their flags in each file's first line) and libcpc's C examples the scenarios run.
use profiler_scenarios::{C_FIXTURES, LIBCPC_EXAMPLES, RUST_FIXTURES};

use super::guest;
use crate::{
    arch::Arch,
    util::{output, run, show, workspace_root},
};

/// Where the profiler is installed inside the guest.
pub const PREFIX: &str = "/opt/profiler";

/// PID 1: mounts, the suite, power off. The suite's output goes to the console (ttyS0, or
/// ttyAMA0 on arm64's virt board).
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

/// What goes into an image for one architecture.
pub struct Parts {
    pub arch: Arch,
    /// The release build (profiler, libcpc.so, libperfmon.so).
    pub built: PathBuf,
    /// The guest suite: an xtask binary for `arch`.
    pub suite: PathBuf,
    /// A statically linked busybox for `arch`.
    pub busybox: PathBuf,
}

/// Why an image without CPython skips the `python` check (another architecture's).
fn no_python(arch: Arch) -> String {
    format!(
        "no CPython in the {} image (only this machine's own is copied in)",
        arch.debian()
    )
}

/// Builds the image from `parts` into `dir`.
pub fn build(parts: &Parts, dir: &Path) -> anyhow::Result<Initramfs> {
    let arch = parts.arch;
    let root = dir.join("root");
    let _ = fs::remove_dir_all(&root);
    let prefix = root.join(PREFIX.trim_start_matches('/'));
    let ws = workspace_root();
    crate::install::install_files(&parts.built, &ws, &prefix)?;
    let fixtures = prefix.join("fixtures");
    fs::create_dir_all(&fixtures)?;
    for name in C_FIXTURES {
        let src = ws.join(format!("tests/fixtures/{name}.c"));
        let text =
            fs::read_to_string(&src).with_context(|| format!("reading {}", src.display()))?;
        let flags = header_flags(&text)
            .ok_or_else(|| anyhow!("{} has no `/* cc FLAGS -o NAME` first line", src.display()))?;
        run(Command::new(arch.cc())
            .args(&flags)
            .arg("-o")
            .arg(fixtures.join(name))
            .arg(&src))?;
    }
    for name in RUST_FIXTURES {
        let src = ws.join(format!("tests/fixtures/{name}.rs"));
        let text =
            fs::read_to_string(&src).with_context(|| format!("reading {}", src.display()))?;
        let flags = rust_header_flags(&text).ok_or_else(|| {
            anyhow!(
                "{} has no `// rustc FLAGS -o NAME` first line",
                src.display()
            )
        })?;
        let mut rustc = Command::new("rustc");
        rustc.args(&flags).arg("--target").arg(arch.triple());
        if !arch.is_host() {
            rustc.arg("-C").arg(format!("linker={}", arch.cc()));
        }
        run(rustc.arg("-o").arg(fixtures.join(name)).arg(&src))?;
    }
    let lib = prefix.join("lib");
    for name in LIBCPC_EXAMPLES {
        run(Command::new(arch.cc())
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
    let (python, ruby) = if arch.is_host() {
        (add_python(&prefix)?, add_ruby(&root)?)
    } else {
        // The guest reads the checks to skip from this file (guest::read_skips).
        let skip = format!(
            "python {}\nruby no Ruby in the {} image (the Ruby walker reads x86-64 \
             layouts)\n",
            no_python(arch),
            arch.debian()
        );
        fs::write(prefix.join(guest::SKIP_FILE), skip)?;
        (None, Vec::new())
    };
    fs::copy(&parts.suite, prefix.join("bin/xtask"))
        .with_context(|| format!("copying the guest suite {}", parts.suite.display()))?;
    for d in [
        "bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "tmp", "run", "etc", "root",
    ] {
        fs::create_dir_all(root.join(d))?;
    }
    fs::copy(&parts.busybox, root.join("bin/busybox"))
        .with_context(|| format!("copying {}", parts.busybox.display()))?;
    // Shared libraries of every ELF file in the tree, at their host paths.
    let mut elves = vec![
        prefix.join("bin/profiler"),
        prefix.join("bin/xtask"),
        lib.join(crate::install::SONAME),
    ];
    elves.extend(python);
    elves.extend(ruby);
    elves.extend(
        C_FIXTURES
            .iter()
            .chain(RUST_FIXTURES)
            .chain(LIBCPC_EXAMPLES)
            .map(|n| fixtures.join(n)),
    );
    let libraries = match arch.cross_libs() {
        None => host_libraries(&elves)?,
        Some(dir) => cross_libraries(&elves, dir, &lib)?,
    };
    for (from, to) in libraries {
        let to = root.join(to.strip_prefix("/").unwrap_or(&to));
        if !to.exists() {
            fs::create_dir_all(to.parent().unwrap_or(&root))?;
            fs::copy(&from, &to).with_context(|| format!("copying {}", from.display()))?;
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

/// Debian's ruby's files (relative to `/`) that `ruby --disable-gems` opens besides its
/// shared libraries: the encoding tables it loads at start-up.
const RUBY_FILES: &[&str] = &[
    "usr/lib/x86_64-linux-gnu/ruby/3.1.0/enc/encdb.so",
    "usr/lib/x86_64-linux-gnu/ruby/3.1.0/enc/trans/transdb.so",
];

/// Copies Debian's ruby ([`profiler_scenarios::RUBY`]) and the files its start-up loads
/// into `root` at their own paths (Ruby looks for them where it was built to); returns the
/// ELF files copied (their shared libraries are copied with everyone's). None, said on
/// stderr, when it is not installed: the guests' `ruby` check then fails, saying so.
fn add_ruby(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let Some(ruby) = profiler_scenarios::host_ruby() else {
        eprintln!(
            "no {} on this machine: every kernel's `ruby` check will fail",
            profiler_scenarios::RUBY
        );
        return Ok(Vec::new());
    };
    let mut copied = Vec::new();
    let files = std::iter::once(ruby).chain(RUBY_FILES.iter().map(|f| Path::new("/").join(f)));
    for from in files {
        let to = root.join(from.strip_prefix("/").unwrap_or(&from));
        fs::create_dir_all(to.parent().unwrap_or(root))?;
        fs::copy(&from, &to).with_context(|| format!("copying {}", from.display()))?;
        copied.push(to);
    }
    Ok(copied)
}

/// The compiler flags of a fixture's first line, `/* cc FLAGS -o NAME NAME.c`.
pub fn header_flags(source: &str) -> Option<Vec<String>> {
    let first = source.lines().next()?.strip_prefix("/* cc ")?;
    let (flags, _) = first.split_once(" -o ")?;
    Some(flags.split_whitespace().map(str::to_string).collect())
}

/// A Rust fixture's rustc flags, from its first line: `// rustc FLAGS -o NAME NAME.rs`.
pub fn rust_header_flags(source: &str) -> Option<Vec<String>> {
    let first = source.lines().next()?.strip_prefix("// rustc ")?;
    let (flags, _) = first.split_once(" -o ")?;
    Some(flags.split_whitespace().map(str::to_string).collect())
}

/// This machine's statically linked busybox (Debian's busybox-static).
pub fn host_busybox() -> anyhow::Result<PathBuf> {
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        let p = PathBuf::from(p);
        if p.exists() && shared_libraries(&p)?.is_empty() {
            return Ok(p);
        }
    }
    bail!("no static busybox (/bin/busybox from busybox-static)")
}

/// The shared libraries of `elves` on this machine, each at its own path in the guest.
fn host_libraries(elves: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    let mut out = Vec::new();
    for elf in elves {
        for dep in shared_libraries(elf)? {
            out.push((dep.clone(), dep));
        }
    }
    Ok(out)
}

/// What the dynamic section and program headers of an ELF file ask for.
#[derive(Debug, Default, PartialEq)]
struct Dynamic {
    /// `PT_INTERP`: the dynamic loader's path (`/lib/ld-linux-aarch64.so.1`).
    interpreter: Option<String>,
    /// `DT_NEEDED`: library names (`libc.so.6`).
    needed: Vec<String>,
}

/// Reads `readelf -W -l -d` (binutils' readelf reads every architecture's ELF).
fn dynamic(elf: &Path) -> anyhow::Result<Dynamic> {
    let out = output(Command::new("readelf").args(["-W", "-l", "-d"]).arg(elf))?;
    ensure!(
        out.status.success(),
        "readelf {}: {}",
        elf.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(parse_readelf(&String::from_utf8_lossy(&out.stdout)))
}

fn parse_readelf(text: &str) -> Dynamic {
    let bracketed = |l: &str, after: &str| {
        let rest = &l[l.find(after)? + after.len()..];
        Some(rest[..rest.find(']')?].trim().to_string())
    };
    let mut d = Dynamic::default();
    for l in text.lines() {
        if let Some(interp) = bracketed(l, "[Requesting program interpreter:") {
            d.interpreter = Some(interp);
        } else if l.contains("(NEEDED)")
            && let Some(name) = bracketed(l, "Shared library: [")
        {
            d.needed.push(name);
        }
    }
    d
}

/// Every library `elves` need, transitively (`read` gives a file's [`Dynamic`]), found by
/// name in `libdir`: (where it is here, where the guest's loader finds it). The loader goes
/// where `PT_INTERP` says, the others in `/lib/<multiarch>/` (the first directory glibc's
/// loader searches, `aarch64-linux-gnu` for Debian's arm64). Names found in `own` (the
/// image's lib/, reached by the fixtures' rpath) are skipped; a name found nowhere is an
/// error.
fn needed_closure(
    elves: &[PathBuf],
    libdir: &Path,
    own: &Path,
    read: impl Fn(&Path) -> anyhow::Result<Dynamic>,
) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    let multiarch = libdir
        .parent()
        .and_then(Path::file_name)
        .ok_or_else(|| anyhow!("{}: expected /usr/<multiarch>/lib", libdir.display()))?;
    let guest_libdir = Path::new("/lib").join(multiarch);
    let mut out: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let mut todo: Vec<(PathBuf, String)> = elves
        .iter()
        .map(|e| (e.clone(), e.display().to_string()))
        .collect();
    while let Some((file, who)) = todo.pop() {
        let d = read(&file).with_context(|| format!("reading {}", file.display()))?;
        if let Some(interp) = d.interpreter {
            let name = Path::new(&interp)
                .file_name()
                .ok_or_else(|| anyhow!("{who}: interpreter {interp}"))?;
            if !out.iter().any(|(_, to)| to == Path::new(&interp)) {
                out.push((libdir.join(name), PathBuf::from(&interp)));
            }
        }
        for name in d.needed {
            if seen.contains(&name) || own.join(&name).exists() {
                continue;
            }
            let here = libdir.join(&name);
            ensure!(
                here.exists(),
                "{who} needs {name}, which is not in {}",
                libdir.display()
            );
            seen.push(name.clone());
            out.push((here.clone(), guest_libdir.join(&name)));
            todo.push((here, name));
        }
    }
    Ok(out)
}

/// The shared libraries of `elves` (built for another architecture) from `libdir`, Debian's
/// cross glibc; the libraries in `own` (libcpc.so) are the image's already.
fn cross_libraries(
    elves: &[PathBuf],
    libdir: &Path,
    own: &Path,
) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    needed_closure(elves, libdir, own, dynamic)
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
        assert_eq!(
            rust_header_flags("// rustc -O -o chain_rs chain_rs.rs (release)\nfn main() {}"),
            Some(vec!["-O".to_string()])
        );
        assert_eq!(rust_header_flags("fn main() {}"), None);
    }

    #[test]
    fn readelf_gives_the_interpreter_and_needed_names() {
        let text = "Program Headers:\n  INTERP 0x000238 0x0000000000000238\n      \
                    [Requesting program interpreter: /lib/ld-linux-aarch64.so.1]\n\n\
                    Dynamic section at offset 0x1d8 contains 30 entries:\n\
                    \x20 Tag        Type       Name/Value\n\
                    \x20 0x0000000000000001 (NEEDED)  Shared library: [libgcc_s.so.1]\n\
                    \x20 0x0000000000000001 (NEEDED)  Shared library: [libc.so.6]\n\
                    \x20 0x000000000000000e (SONAME)  Library soname: [libcpc.so.1]\n";
        assert_eq!(
            parse_readelf(text),
            Dynamic {
                interpreter: Some("/lib/ld-linux-aarch64.so.1".into()),
                needed: vec!["libgcc_s.so.1".into(), "libc.so.6".into()],
            }
        );
        assert_eq!(
            parse_readelf("There is no dynamic section in this file.\n"),
            Dynamic::default()
        );
    }

    /// A scratch directory of empty files standing for the cross glibc's libraries.
    fn fake_libdir(tag: &str, names: &[&str]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "xtask-needed-{tag}-{}/usr/aarch64-linux-gnu/lib",
            std::process::id()
        ));
        fs::create_dir_all(&dir).unwrap();
        for n in names {
            fs::write(dir.join(n), b"").unwrap();
        }
        dir
    }

    #[test]
    fn the_needed_walk_takes_each_library_once_and_the_loader_where_asked() {
        let libdir = fake_libdir(
            "walk",
            &[
                "ld-linux-aarch64.so.1",
                "libc.so.6",
                "libgcc_s.so.1",
                "libm.so.6",
            ],
        );
        let own = libdir.join("../../../own");
        fs::create_dir_all(&own).unwrap();
        fs::write(own.join("libcpc.so.1"), b"").unwrap();
        let read = |p: &Path| -> anyhow::Result<Dynamic> {
            let name = p.file_name().unwrap().to_str().unwrap();
            let interp = Some("/lib/ld-linux-aarch64.so.1".to_string());
            let needed = |n: &[&str]| n.iter().map(|s| s.to_string()).collect();
            Ok(match name {
                "profiler" => Dynamic {
                    interpreter: interp,
                    needed: needed(&["libgcc_s.so.1", "libm.so.6", "libc.so.6"]),
                },
                "example1" => Dynamic {
                    interpreter: interp,
                    needed: needed(&["libcpc.so.1", "libc.so.6"]),
                },
                "libgcc_s.so.1" | "libm.so.6" => Dynamic {
                    interpreter: None,
                    needed: needed(&["libc.so.6"]),
                },
                "libc.so.6" => Dynamic {
                    interpreter: None,
                    needed: needed(&["ld-linux-aarch64.so.1"]),
                },
                _ => Dynamic::default(),
            })
        };
        let elves = [PathBuf::from("/b/profiler"), PathBuf::from("/b/example1")];
        let mut got: Vec<(String, String)> = needed_closure(&elves, &libdir, &own, read)
            .unwrap()
            .into_iter()
            .map(|(from, to)| {
                let from = from.file_name().unwrap().to_string_lossy().into_owned();
                (from, to.display().to_string())
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                (
                    "ld-linux-aarch64.so.1",
                    "/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"
                ),
                ("ld-linux-aarch64.so.1", "/lib/ld-linux-aarch64.so.1"),
                ("libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"),
                ("libgcc_s.so.1", "/lib/aarch64-linux-gnu/libgcc_s.so.1"),
                ("libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6"),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        // A library the sysroot lacks is named with who needs it.
        let missing = |_: &Path| -> anyhow::Result<Dynamic> {
            Ok(Dynamic {
                interpreter: None,
                needed: vec!["libpython3.11.so.1.0".into()],
            })
        };
        let err = needed_closure(&elves[..1], &libdir, &own, missing).unwrap_err();
        assert!(
            err.to_string()
                .contains("/b/profiler needs libpython3.11.so.1.0"),
            "{err}"
        );
        fs::remove_dir_all(libdir.join("../../..")).unwrap();
    }

    /// The walk on a real aarch64 program, where the cross compiler is installed.
    #[test]
    fn a_cross_compiled_program_needs_libc_and_the_loader() {
        let Some(libdir) = Arch::Arm64.cross_libs().filter(|d| d.exists()) else {
            return;
        };
        let tmp = std::env::temp_dir().join(format!("xtask-cross-{}", std::process::id()));
        fs::create_dir_all(&tmp).unwrap();
        let src = tmp.join("hello.c");
        fs::write(
            &src,
            "#include <math.h>\nint main(int c, char **v) { return (int)sqrt(c); }\n",
        )
        .unwrap();
        let bin = tmp.join("hello");
        let ok = Command::new(Arch::Arm64.cc())
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .arg("-lm")
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return;
        }
        let mut got: Vec<String> = cross_libraries(&[bin], libdir, &tmp)
            .unwrap()
            .into_iter()
            .map(|(_, to)| to.display().to_string())
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                "/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
                "/lib/aarch64-linux-gnu/libc.so.6",
                "/lib/aarch64-linux-gnu/libm.so.6",
                "/lib/ld-linux-aarch64.so.1",
            ]
        );
        fs::remove_dir_all(&tmp).unwrap();
    }
}
