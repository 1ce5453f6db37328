//! Debian kernel images, fetched with apt through a configuration of our own (the host's
//! mirror, the suites `kernels.txt` names; one per architecture) and cached under
//! `~/.cache/profiler/kernels`; for arm64 guests also Debian's arm64 static busybox.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, anyhow, bail};

use super::Kernel;
use crate::{
    arch::Arch,
    util::{output, run},
};

const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// The cache: `ROOT/apt` (lists, archives; `ROOT/apt-arm64` for arm64),
/// `ROOT/LABEL/{vmlinuz,package}`, `ROOT/busybox-arm64/{busybox,package}`.
pub fn cache_root() -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").ok_or_else(|| anyhow!("HOME is not set"))?;
    Ok(PathBuf::from(home).join(".cache/profiler/kernels"))
}

/// A kernel image ready to boot.
pub struct Image {
    pub vmlinuz: PathBuf,
    /// The Debian package it came from (`linux-image-6.1.0-56-amd64`).
    pub package: String,
}

/// The cached image for `kernel`, fetching it first when missing (or with `refresh`).
pub fn image(kernel: &Kernel, suites: &[&str], refresh: bool) -> anyhow::Result<Image> {
    let (suite, pattern) = match (&kernel.suite, &kernel.package) {
        (Some(s), Some(p)) => (s, p),
        _ => bail!("kernel {} has no Debian package", kernel.label),
    };
    let root = cache_root()?;
    let dir = root.join(&kernel.label);
    let (vmlinuz, pkg_file) = (dir.join("vmlinuz"), dir.join("package"));
    if !refresh
        && let (true, Ok(package)) = (vmlinuz.exists(), fs::read_to_string(&pkg_file))
        && matches(pattern, package.trim())
    {
        return Ok(Image {
            vmlinuz,
            package: package.trim().to_string(),
        });
    }
    let apt = Apt::new(&root, suites, kernel.arch)?;
    let package = apt.newest(pattern).with_context(|| {
        format!("no package matching {pattern} in {suite} (see xtask/kernels.txt)")
    })?;
    eprintln!("kernels: fetching {package} for {}", kernel.label);
    let debs = root.join("debs");
    fs::create_dir_all(&debs)?;
    apt.download(&package, &debs)?;
    let deb = downloaded(&debs, &package)?;
    let unpacked = root.join(format!("unpack-{}", kernel.label));
    let _ = fs::remove_dir_all(&unpacked);
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
    let found = find_vmlinuz(&unpacked).ok_or_else(|| {
        anyhow!("{package} holds no vmlinuz (looked under boot/ and usr/lib/modules/)")
    })?;
    fs::create_dir_all(&dir)?;
    fs::copy(&found, &vmlinuz).with_context(|| format!("copying {}", found.display()))?;
    fs::write(&pkg_file, format!("{package}\n"))?;
    fs::remove_dir_all(&unpacked)?;
    fs::remove_file(&deb)?;
    Ok(Image { vmlinuz, package })
}

/// The `PACKAGE_*.deb` apt-get download left in `debs` (the version's epoch is escaped in
/// the name: `busybox-static_1%3a1.35.0-4_arm64.deb`).
fn downloaded(debs: &Path, package: &str) -> anyhow::Result<PathBuf> {
    fs::read_dir(debs)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
        })
        .ok_or_else(|| {
            anyhow!(
                "apt-get download left no {package}_*.deb in {}",
                debs.display()
            )
        })
}

/// The suite an arm64 guest's busybox comes from: this machine's own Debian release (its
/// busybox is the one the amd64 guests run), bookworm when its sources do not say.
pub fn busybox_suite() -> String {
    host_sources().main_suite
}

/// Debian's static busybox for `arch` (`busybox-static`, from [`busybox_suite`] among
/// `suites`), fetched with the kernels' apt configuration and cached.
pub fn busybox(arch: Arch, suites: &[&str], refresh: bool) -> anyhow::Result<PathBuf> {
    const PACKAGE: &str = "busybox-static";
    let root = cache_root()?;
    let dir = root.join(format!("busybox-{}", arch.debian()));
    let binary = dir.join("busybox");
    if !refresh && binary.exists() {
        return Ok(binary);
    }
    let apt = Apt::new(&root, suites, arch)?;
    eprintln!("kernels: fetching {PACKAGE} for {}", arch.debian());
    let debs = root.join("debs");
    fs::create_dir_all(&debs)?;
    apt.download(PACKAGE, &debs)?;
    let deb = downloaded(&debs, PACKAGE)?;
    let unpacked = root.join(format!("unpack-busybox-{}", arch.debian()));
    let _ = fs::remove_dir_all(&unpacked);
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
    fs::create_dir_all(&dir)?;
    fs::copy(unpacked.join("bin/busybox"), &binary)
        .with_context(|| format!("{PACKAGE} for {} holds no bin/busybox", arch.debian()))?;
    let name = deb.file_name().unwrap_or_default().to_string_lossy();
    fs::write(dir.join("package"), format!("{name}\n"))?;
    fs::remove_dir_all(&unpacked)?;
    fs::remove_file(&deb)?;
    Ok(binary)
}

/// `boot/vmlinuz-*` (linux-image packages) or `usr/lib/modules/*/vmlinuz` (linux-binary).
fn find_vmlinuz(unpacked: &Path) -> Option<PathBuf> {
    let in_boot = fs::read_dir(unpacked.join("boot")).ok().and_then(|d| {
        d.filter_map(Result::ok).map(|e| e.path()).find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
    });
    in_boot.or_else(|| {
        fs::read_dir(unpacked.join("usr/lib/modules"))
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path().join("vmlinuz"))
            .find(|p| p.exists())
    })
}

/// Does `name` match `pattern`, where each `*` is a run of digits and dots?
pub fn matches(pattern: &str, name: &str) -> bool {
    star_values(pattern, name).is_some()
}

/// What each `*` of `pattern` matched in `name` (greedy, digits and dots only).
fn star_values<'a>(pattern: &str, name: &'a str) -> Option<Vec<&'a str>> {
    let mut parts = pattern.split('*');
    let first = parts.next()?;
    let mut rest = name.strip_prefix(first)?;
    let mut values = Vec::new();
    for literal in parts {
        let len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        // The run may overlap the literal (a literal starting with a digit or a dot): take
        // the longest prefix of the run after which the literal follows.
        let end = (1..=len).rev().find(|&e| rest[e..].starts_with(literal))?;
        values.push(&rest[..end]);
        rest = &rest[end + literal.len()..];
    }
    rest.is_empty().then_some(values)
}

/// The version digits of `name` under `pattern`, for choosing the newest.
fn version_key(pattern: &str, name: &str) -> Vec<u64> {
    star_values(pattern, name)
        .unwrap_or_default()
        .iter()
        .flat_map(|v| v.split('.'))
        .map(|n| n.parse().unwrap_or(0))
        .collect()
}

/// The newest of `names` matching `pattern`.
pub fn newest<'a>(pattern: &str, names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    names
        .into_iter()
        .filter(|n| matches(pattern, n))
        .max_by_key(|n| version_key(pattern, n))
}

/// apt with a private sources list, lists and archive cache, for one architecture.
struct Apt {
    dir: PathBuf,
    arch: Arch,
}

/// The directory of `arch`'s apt configuration under the cache `root`: `apt` for amd64, as
/// it always was, `apt-ARCH` for another (its own lists: apt knows one architecture here).
fn apt_dir(root: &Path, arch: Arch) -> PathBuf {
    match arch {
        Arch::Amd64 => root.join("apt"),
        other => root.join(format!("apt-{}", other.debian())),
    }
}

impl Apt {
    /// Writes the sources for `suites` (the host's Debian mirrors) and runs `apt-get update`.
    fn new(root: &Path, suites: &[&str], arch: Arch) -> anyhow::Result<Self> {
        let dir = apt_dir(root, arch);
        for d in ["lists/partial", "cache/archives/partial"] {
            fs::create_dir_all(dir.join(d))?;
        }
        let HostSources { main, security, .. } = host_sources();
        let mut sources = String::new();
        for suite in suites {
            let uri = if suite.ends_with("-security") {
                &security
            } else {
                &main
            };
            sources.push_str(&format!("deb [signed-by={KEYRING}] {uri} {suite} main\n"));
        }
        fs::write(dir.join("sources.list"), sources)?;
        let apt = Apt { dir, arch };
        run(apt.command("apt-get").args(["update", "-q"]))
            .with_context(|| format!("apt-get update for the {} kernel suites", arch.debian()))?;
        Ok(apt)
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.args(apt_options(&self.dir, self.arch));
        c
    }

    /// The newest package matching `pattern` (by the digits its `*`s stand for).
    fn newest(&self, pattern: &str) -> anyhow::Result<String> {
        let prefix = pattern.split('*').next().unwrap_or(pattern);
        let out = output(self.command("apt-cache").args(["pkgnames", prefix]))?;
        let text = String::from_utf8_lossy(&out.stdout);
        newest(pattern, text.lines().map(str::trim))
            .map(str::to_string)
            .ok_or_else(|| anyhow!("apt-cache pkgnames {prefix} lists nothing matching"))
    }

    fn download(&self, package: &str, into: &Path) -> anyhow::Result<()> {
        run(self
            .command("apt-get")
            .args(["download", "-q", package])
            .current_dir(into))
    }
}

/// apt's options for the configuration in `dir`, fetching `arch`'s packages. Setting
/// `APT::Architectures` too keeps out the host's foreign architectures (dpkg's), whose lists
/// would otherwise be fetched as well.
fn apt_options(dir: &Path, arch: Arch) -> Vec<String> {
    let d = dir.display();
    [
        format!("Dir::Etc::SourceList={d}/sources.list"),
        "Dir::Etc::SourceParts=/nonexistent".into(),
        format!("Dir::State::Lists={d}/lists"),
        format!("Dir::Cache={d}/cache"),
        format!("APT::Architecture={}", arch.debian()),
        format!("APT::Architectures={}", arch.debian()),
    ]
    .into_iter()
    .flat_map(|o| ["-o".to_string(), o])
    .collect()
}

/// What the host's deb822 sources say: its Debian and Debian security mirrors and its main
/// suite (deb.debian.org and bookworm when they do not say).
struct HostSources {
    main: String,
    security: String,
    main_suite: String,
}

fn host_sources() -> HostSources {
    parse_sources(&fs::read_to_string("/etc/apt/sources.list.d/debian.sources").unwrap_or_default())
}

fn parse_sources(text: &str) -> HostSources {
    let mut main = None;
    let mut security = None;
    let mut main_suite = None;
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
        };
        let (Some(uris), Some(suites)) = (field("URIs:"), field("Suites:")) else {
            continue;
        };
        let uri = uris
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        if suites.contains("-security") {
            security.get_or_insert(uri);
        } else {
            main.get_or_insert(uri);
            main_suite = main_suite.or_else(|| suites.split_whitespace().next().map(String::from));
        }
    }
    HostSources {
        main: main.unwrap_or_else(|| "http://deb.debian.org/debian".into()),
        security: security.unwrap_or_else(|| "http://deb.debian.org/debian-security".into()),
        main_suite: main_suite.unwrap_or_else(|| "bookworm".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_version_digits_only() {
        let p = "linux-image-5.10.0-*-amd64";
        assert!(matches(p, "linux-image-5.10.0-46-amd64"));
        assert!(!matches(p, "linux-image-5.10.0-46-cloud-amd64"));
        assert!(!matches(p, "linux-image-5.10.0-46-rt-amd64"));
        assert!(!matches(p, "linux-image-5.10.0-46-amd64-dbg"));
        let p = "linux-binary-7.*+deb13-amd64";
        assert!(matches(p, "linux-binary-7.3.4+deb13-amd64"));
        assert!(!matches(p, "linux-binary-7.3.4+deb13-cloud-amd64"));
        assert!(matches(
            "linux-image-6.12.*+deb12-amd64",
            "linux-image-6.12.117+deb12-amd64"
        ));
    }

    #[test]
    fn arm64_patterns_skip_the_16k_cloud_and_rt_flavours() {
        let names = [
            "linux-binary-7.3.4+deb13-arm64",
            "linux-binary-7.3.4+deb13-arm64-16k",
            "linux-binary-7.3.4+deb13-cloud-arm64",
            "linux-binary-7.2.9+deb13-arm64",
        ];
        assert_eq!(
            newest("linux-binary-7.*+deb13-arm64", names),
            Some("linux-binary-7.3.4+deb13-arm64")
        );
    }

    #[test]
    fn each_architecture_has_its_own_apt_lists() {
        let root = Path::new("/c");
        assert_eq!(apt_dir(root, Arch::Amd64), Path::new("/c/apt"));
        assert_eq!(apt_dir(root, Arch::Arm64), Path::new("/c/apt-arm64"));
        let o = apt_options(&apt_dir(root, Arch::Arm64), Arch::Arm64);
        assert!(o.contains(&"Dir::State::Lists=/c/apt-arm64/lists".to_string()));
        assert!(o.contains(&"APT::Architecture=arm64".to_string()));
        assert!(o.contains(&"APT::Architectures=arm64".to_string()));
        assert_eq!(o.iter().filter(|a| *a == "-o").count(), o.len() / 2);
    }

    #[test]
    fn the_host_sources_give_mirrors_and_suite() {
        let text = "Types: deb\nURIs: http://m/debian\nSuites: bookworm bookworm-updates\n\n\
                    Types: deb\nURIs: http://m/debian-security\nSuites: bookworm-security\n";
        let s = parse_sources(text);
        assert_eq!(
            (s.main.as_str(), s.security.as_str(), s.main_suite.as_str()),
            ("http://m/debian", "http://m/debian-security", "bookworm")
        );
        assert_eq!(parse_sources("").main_suite, "bookworm");
    }

    #[test]
    fn newest_compares_numbers_not_strings() {
        let names = [
            "linux-image-5.10.0-9-amd64",
            "linux-image-5.10.0-46-amd64",
            "linux-image-5.10.0-46-cloud-amd64",
            "linux-image-5.10.0-100-rt-amd64",
        ];
        assert_eq!(
            newest("linux-image-5.10.0-*-amd64", names),
            Some("linux-image-5.10.0-46-amd64")
        );
        let names = [
            "linux-binary-7.3.4+deb13-amd64",
            "linux-binary-7.10.1+deb13-amd64",
        ];
        assert_eq!(
            newest("linux-binary-7.*+deb13-amd64", names),
            Some("linux-binary-7.10.1+deb13-amd64")
        );
    }
}
