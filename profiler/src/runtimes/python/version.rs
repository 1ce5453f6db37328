//! Which CPython a build is, and whether we can walk it.

use std::fmt;

/// A CPython release, as `major.minor.micro`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u8,
    pub minor: u8,
    pub micro: u8,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)
    }
}

/// Oldest and newest minor versions with an offsets table.
pub const OLDEST: (u8, u8) = (3, 6);
pub const NEWEST: (u8, u8) = (3, 13);

impl Version {
    pub const fn new(major: u8, minor: u8, micro: u8) -> Version {
        Version {
            major,
            minor,
            micro,
        }
    }

    /// From `Py_Version` / `PY_VERSION_HEX` (`0x030b07f0`: major, minor, micro, level, serial).
    pub fn from_hex(hex: u32) -> Version {
        Version::new((hex >> 24) as u8, (hex >> 16) as u8, (hex >> 8) as u8)
    }

    /// `PY_VERSION_HEX >> 8`, as the kernel table stores it.
    pub fn packed(self) -> u32 {
        (u32::from(self.major) << 16) | (u32::from(self.minor) << 8) | u32::from(self.micro)
    }

    /// From a `PY_VERSION` string: `3.11.2`, `3.13.0rc1`, `3.12.1+`. Only the numbers are kept.
    pub fn parse(text: &str) -> Option<Version> {
        let mut parts = text.splitn(3, '.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let rest = parts.next()?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let micro = rest[..digits].parse().ok()?;
        let suffix = &rest[digits..];
        // Release levels and a local '+' only: anything else is not a version string.
        let suffix_ok = suffix.is_empty()
            || suffix == "+"
            || ["a", "b", "rc"].iter().any(|level| {
                suffix.strip_prefix(level).is_some_and(|n| {
                    let n = n.strip_suffix('+').unwrap_or(n);
                    !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
                })
            });
        suffix_ok.then_some(Version::new(major, minor, micro))
    }

    /// Major and minor from a file name: `libpython3.11.so.1.0`, `libpython3.6m.so`,
    /// `python3.11`, `libpython3.13t.so` (free-threaded: `t` kept in the second value).
    pub fn from_file_name(name: &str) -> Option<((u8, u8), bool)> {
        let rest = name
            .strip_prefix("libpython")
            .or_else(|| name.strip_prefix("python"))?;
        let (major, rest) = rest.split_once('.')?;
        let major = major.parse().ok()?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let minor = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        // ABI flags of the old days (`m`, `d`, `u`) and `t` for free-threaded builds.
        let flags = tail.split('.').next().unwrap_or("");
        if !flags
            .bytes()
            .all(|b| matches!(b, b'm' | b'd' | b'u' | b't'))
        {
            return None;
        }
        if !(tail.is_empty()
            || tail[flags.len()..].is_empty()
            || tail[flags.len()..].starts_with(".so"))
        {
            return None;
        }
        Some(((major, minor), flags.contains('t')))
    }
}

/// Why an interpreter is not walked: one line for the user.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error("Python {0}: only Python 3.6 to 3.13 are supported")]
    Version(String),
    #[error("Python {0} is a free-threaded build (no GIL), whose frames are not supported")]
    FreeThreaded(String),
    #[error("{0}: the Python version could not be read (no Py_Version, no PY_VERSION string)")]
    NoVersion(String),
    #[error("{path}: symbol {symbol} not found")]
    MissingSymbol { path: String, symbol: &'static str },
    /// The executable of a shared build (it only calls `Py_BytesMain`), seen before the
    /// loader mapped its libpython: not said, since the next look finds the library.
    #[error("{0}: the executable of a shared build, its libpython not mapped yet")]
    Launcher(String),
}

/// Whether `version` has an offsets table.
pub fn check(version: Version, free_threaded: bool) -> Result<(), Unsupported> {
    if free_threaded {
        return Err(Unsupported::FreeThreaded(version.to_string()));
    }
    let mm = (version.major, version.minor);
    if mm < OLDEST || mm > NEWEST {
        return Err(Unsupported::Version(version.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_version_strings() {
        assert_eq!(Version::parse("3.11.2"), Some(Version::new(3, 11, 2)));
        assert_eq!(Version::parse("3.13.0rc1"), Some(Version::new(3, 13, 0)));
        assert_eq!(Version::parse("3.12.1+"), Some(Version::new(3, 12, 1)));
        assert_eq!(Version::parse("3.6.15"), Some(Version::new(3, 6, 15)));
        assert_eq!(Version::parse("3.11.2x"), None);
        assert_eq!(Version::parse("3.11"), None);
        assert_eq!(Version::from_hex(0x030b07f0), Version::new(3, 11, 7));
        assert_eq!(Version::new(3, 11, 7).packed(), 0x030b07);
    }

    #[test]
    fn parses_file_names() {
        assert_eq!(
            Version::from_file_name("libpython3.11.so.1.0"),
            Some(((3, 11), false))
        );
        assert_eq!(
            Version::from_file_name("libpython3.6m.so.1.0"),
            Some(((3, 6), false))
        );
        assert_eq!(
            Version::from_file_name("libpython3.13t.so"),
            Some(((3, 13), true))
        );
        assert_eq!(
            Version::from_file_name("python3.11"),
            Some(((3, 11), false))
        );
        assert_eq!(
            Version::from_file_name("libpython2.7.so"),
            Some(((2, 7), false))
        );
        assert_eq!(Version::from_file_name("python3"), None);
        assert_eq!(Version::from_file_name("libpython3.so"), None);
        assert_eq!(Version::from_file_name("python3.11-config"), None);
    }

    #[test]
    fn unsupported_builds_say_why() {
        assert!(check(Version::new(3, 11, 2), false).is_ok());
        assert!(check(Version::new(3, 6, 0), false).is_ok());
        assert_eq!(
            check(Version::new(2, 7, 18), false)
                .unwrap_err()
                .to_string(),
            "Python 2.7.18: only Python 3.6 to 3.13 are supported"
        );
        assert!(matches!(
            check(Version::new(3, 13, 0), true),
            Err(Unsupported::FreeThreaded(_))
        ));
        assert!(matches!(
            check(Version::new(3, 14, 0), false),
            Err(Unsupported::Version(_))
        ));
    }
}
