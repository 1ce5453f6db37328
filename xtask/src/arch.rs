//! The architectures the profiler is built for: this machine's (x86_64), natively, and arm64,
//! cross-built with Debian's aarch64 toolchain (`release.rs`), whose kernels `cargo xtask
//! kernels` boots under qemu's TCG. Names and places only: nothing here runs a tool.

use std::path::{Path, PathBuf};

use crate::util::workspace_root;

/// An architecture, by Rust's name on the command line (`--target aarch64`; Debian's
/// `arm64` and `amd64` are accepted too, as kernels.txt spells them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Arch {
    #[value(name = "x86_64", alias = "amd64")]
    Amd64,
    #[value(name = "aarch64", alias = "arm64")]
    Arm64,
}

impl Arch {
    /// The machine xtask runs on (the development machines and CI are x86_64).
    pub const HOST: Arch = if cfg!(target_arch = "aarch64") {
        Arch::Arm64
    } else {
        Arch::Amd64
    };

    /// Debian's name (package suffixes, `APT::Architecture`, kernels.txt).
    pub fn debian(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    pub fn from_debian(name: &str) -> Option<Arch> {
        [Arch::Amd64, Arch::Arm64]
            .into_iter()
            .find(|a| a.debian() == name)
    }

    /// Rust's target triple.
    pub fn triple(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64-unknown-linux-gnu",
            Arch::Arm64 => "aarch64-unknown-linux-gnu",
        }
    }

    pub fn is_host(self) -> bool {
        self == Arch::HOST
    }

    /// The C compiler for this architecture's programs (the fixtures, libcpc's examples).
    pub fn cc(self) -> &'static str {
        if self.is_host() {
            "cc"
        } else {
            match self {
                Arch::Amd64 => "x86_64-linux-gnu-gcc",
                Arch::Arm64 => "aarch64-linux-gnu-gcc",
            }
        }
    }

    /// Where Debian's cross packages (`libc6-ARCH-cross`) keep this architecture's shared
    /// libraries; none for the host's (ldd finds them).
    pub fn cross_libs(self) -> Option<&'static Path> {
        if self.is_host() {
            return None;
        }
        Some(Path::new(match self {
            Arch::Amd64 => "/usr/x86_64-linux-gnu/lib",
            Arch::Arm64 => "/usr/aarch64-linux-gnu/lib",
        }))
    }

    /// Where a release build for this architecture lands: target/release natively,
    /// target/TRIPLE/release when cross-built.
    pub fn release_dir(self) -> PathBuf {
        let target = workspace_root().join("target");
        if self.is_host() {
            target.join("release")
        } else {
            target.join(self.triple()).join("release")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_each_architecture() {
        assert_eq!(Arch::from_debian("arm64"), Some(Arch::Arm64));
        assert_eq!(Arch::from_debian("aarch64"), None);
        assert_eq!(Arch::Arm64.triple(), "aarch64-unknown-linux-gnu");
        assert_eq!(Arch::Arm64.cc(), "aarch64-linux-gnu-gcc");
        assert!(
            Arch::Arm64
                .release_dir()
                .ends_with("target/aarch64-unknown-linux-gnu/release")
        );
        assert!(Arch::Amd64.release_dir().ends_with("target/release"));
        use clap::ValueEnum as _;
        assert_eq!(Arch::from_str("aarch64", false), Ok(Arch::Arm64));
        assert_eq!(Arch::from_str("arm64", false), Ok(Arch::Arm64));
        assert_eq!(Arch::from_str("x86_64", false), Ok(Arch::Amd64));
    }
}
