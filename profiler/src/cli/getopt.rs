//! POSIX getopt(3), for the `cputrack` and `cpustat` personas, which must accept exactly the
//! Solaris command lines: grouped flags (`-fev`), option arguments attached or separate
//! (`-T0.5`, `-T 0.5`), and options ending at the first operand or at `--`.

use std::ffi::{OsStr, OsString};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opt {
    Flag(char),
    Arg(char, OsString),
}

/// getopt's complaints, worded as Solaris getopt prints them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GetoptError {
    #[error("illegal option -- {0}")]
    Illegal(char),
    #[error("option requires an argument -- {0}")]
    MissingArgument(char),
}

/// Walks `args` (without argv\[0\]) against an option string such as `"T:N:Defhntvo:r:c:p:"`.
pub struct Getopt<'a> {
    args: &'a [OsString],
    spec: &'a str,
    /// The argument being read.
    index: usize,
    /// The next flag's byte offset within a grouped argument (0: start a new argument).
    offset: usize,
}

impl<'a> Getopt<'a> {
    pub fn new(args: &'a [OsString], spec: &'a str) -> Self {
        Getopt {
            args,
            spec,
            index: 0,
            offset: 0,
        }
    }

    /// The operands: everything after the options (and after `--`).
    pub fn operands(&self) -> &'a [OsString] {
        &self.args[self.index.min(self.args.len())..]
    }

    /// Whether `c` takes an argument: `Some(true)`, `Some(false)`, or `None` if unknown.
    fn takes_argument(&self, c: char) -> Option<bool> {
        if c == ':' {
            return None;
        }
        let at = self.spec.find(c)?;
        Some(self.spec[at + c.len_utf8()..].starts_with(':'))
    }
}

impl Iterator for Getopt<'_> {
    type Item = Result<Opt, GetoptError>;

    fn next(&mut self) -> Option<Self::Item> {
        let arg = self.args.get(self.index)?.as_encoded_bytes();
        if self.offset == 0 {
            if arg == b"--" {
                self.index += 1;
                return None;
            }
            if arg.len() < 2 || arg[0] != b'-' {
                return None; // an operand ("-" alone is one too)
            }
            self.offset = 1;
        }
        // Flags are ASCII letters; anything else is reported as the byte it is.
        let c = arg[self.offset] as char;
        self.offset += 1;
        let at_end = self.offset >= arg.len();
        let advance = |g: &mut Self| {
            g.index += 1;
            g.offset = 0;
        };
        match self.takes_argument(c) {
            None => {
                if at_end {
                    advance(self);
                }
                Some(Err(GetoptError::Illegal(c)))
            }
            Some(false) => {
                if at_end {
                    advance(self);
                }
                Some(Ok(Opt::Flag(c)))
            }
            Some(true) if !at_end => {
                let value = os_tail(&arg[self.offset..]);
                advance(self);
                Some(Ok(Opt::Arg(c, value)))
            }
            Some(true) => {
                advance(self);
                match self.args.get(self.index) {
                    Some(v) => {
                        let v = v.clone();
                        advance(self);
                        Some(Ok(Opt::Arg(c, v)))
                    }
                    None => Some(Err(GetoptError::MissingArgument(c))),
                }
            }
        }
    }
}

/// The rest of an argument after its flag, as an `OsString` (bytes on Unix).
fn os_tail(bytes: &[u8]) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    OsStr::from_bytes(bytes).to_os_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn all(args: &[&str], spec: &str) -> (Vec<Result<Opt, GetoptError>>, Vec<String>) {
        let a = os(args);
        let mut g = Getopt::new(&a, spec);
        let opts: Vec<_> = g.by_ref().collect();
        let rest = g
            .operands()
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        (opts, rest)
    }

    const CPUTRACK: &str = "T:N:Defhntvo:r:c:p:";

    #[test]
    fn solaris_command_lines() {
        let (opts, rest) = all(&["-c", "page-faults", "-T", "0.5", "ls", "-l"], CPUTRACK);
        assert_eq!(
            opts,
            [
                Ok(Opt::Arg('c', "page-faults".into())),
                Ok(Opt::Arg('T', "0.5".into()))
            ]
        );
        assert_eq!(rest, ["ls", "-l"], "options end at the command");
        let (opts, rest) = all(&["-fev", "-cpic0=x", "-T0", "--", "-cmd"], CPUTRACK);
        assert_eq!(
            opts,
            [
                Ok(Opt::Flag('f')),
                Ok(Opt::Flag('e')),
                Ok(Opt::Flag('v')),
                Ok(Opt::Arg('c', "pic0=x".into())),
                Ok(Opt::Arg('T', "0".into())),
            ]
        );
        assert_eq!(rest, ["-cmd"], "-- ends the options");
        let (opts, rest) = all(&["-tN", "5", "prog"], CPUTRACK);
        assert_eq!(
            opts,
            [Ok(Opt::Flag('t')), Ok(Opt::Arg('N', "5".into()))],
            "an argument option may end a group"
        );
        assert_eq!(rest, ["prog"]);
    }

    #[test]
    fn operands_and_errors() {
        let (opts, rest) = all(&["-c", "x", "1", "3"], "Dc:hntT:sp:");
        assert_eq!(opts.len(), 1);
        assert_eq!(rest, ["1", "3"]);
        let (opts, _) = all(&["-x"], CPUTRACK);
        assert_eq!(opts, [Err(GetoptError::Illegal('x'))]);
        assert_eq!(GetoptError::Illegal('x').to_string(), "illegal option -- x");
        let (opts, _) = all(&["-T"], CPUTRACK);
        assert_eq!(opts, [Err(GetoptError::MissingArgument('T'))]);
        assert_eq!(
            GetoptError::MissingArgument('T').to_string(),
            "option requires an argument -- T"
        );
        let (opts, _) = all(&["-:"], CPUTRACK);
        assert_eq!(opts, [Err(GetoptError::Illegal(':'))]);
        let (opts, rest) = all(&["-", "x"], CPUTRACK);
        assert!(opts.is_empty());
        assert_eq!(rest, ["-", "x"], "a lone '-' is an operand");
    }
}
