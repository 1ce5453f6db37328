//! Debian kernel images, fetched with apt through a configuration of our own (the host's
//! mirror, the suites `kernels.txt` names) and cached under `~/.cache/profiler/kernels`.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, anyhow, bail};

use super::Kernel;
use crate::util::{output, run};

const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// The cache: `ROOT/apt` (lists, archives), `ROOT/LABEL/{vmlinuz,package}`.
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
    let apt = Apt::new(&root.join("apt"), suites)?;
    let package = apt.newest(pattern).with_context(|| {
        format!("no package matching {pattern} in {suite} (see xtask/kernels.txt)")
    })?;
    eprintln!("kernels: fetching {package} for {}", kernel.label);
    let debs = root.join("debs");
    fs::create_dir_all(&debs)?;
    apt.download(&package, &debs)?;
    let deb = fs::read_dir(&debs)?
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
        })?;
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

/// apt with a private sources list, lists and archive cache.
struct Apt {
    dir: PathBuf,
}

impl Apt {
    /// Writes the sources for `suites` (the host's Debian mirrors) and runs `apt-get update`.
    fn new(dir: &Path, suites: &[&str]) -> anyhow::Result<Self> {
        for d in ["lists/partial", "cache/archives/partial"] {
            fs::create_dir_all(dir.join(d))?;
        }
        let (main, security) = host_mirrors();
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
        let apt = Apt {
            dir: dir.to_path_buf(),
        };
        run(apt.command("apt-get").args(["update", "-q"]))
            .context("apt-get update for the kernel suites")?;
        Ok(apt)
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        let d = self.dir.display();
        c.args([
            "-o".into(),
            format!("Dir::Etc::SourceList={d}/sources.list"),
            "-o".into(),
            "Dir::Etc::SourceParts=/nonexistent".into(),
            "-o".into(),
            format!("Dir::State::Lists={d}/lists"),
            "-o".into(),
            format!("Dir::Cache={d}/cache"),
            "-o".into(),
            "APT::Architecture=amd64".into(),
        ]);
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

/// The host's Debian and Debian security mirrors (from its deb822 sources), or
/// deb.debian.org.
fn host_mirrors() -> (String, String) {
    let mut main = None;
    let mut security = None;
    let text = fs::read_to_string("/etc/apt/sources.list.d/debian.sources").unwrap_or_default();
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
        }
    }
    (
        main.unwrap_or_else(|| "http://deb.debian.org/debian".into()),
        security.unwrap_or_else(|| "http://deb.debian.org/debian-security".into()),
    )
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
