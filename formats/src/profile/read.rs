//! Reading a profile file whatever its format: pprof (gzip or raw protobuf) or folded text.

use super::{Profile, pprof};

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Pprof {
        path: String,
        source: pprof::PprofError,
    },
    #[error("{path}: not a pprof profile or folded stacks ({reason})")]
    Unknown { path: String, reason: String },
}

/// Reads `path` (`-`: standard input): gzip data must be pprof; text must be folded stacks;
/// anything else is tried as uncompressed pprof.
pub fn read_profile(path: &std::path::Path) -> Result<Profile, ReadError> {
    if path.as_os_str() == "-" {
        let name = "standard input".to_string();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes).map_err(|source| {
            ReadError::Io {
                path: name.clone(),
                source,
            }
        })?;
        return parse(&name, &bytes);
    }
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: name.clone(),
        source,
    })?;
    parse(&name, &bytes)
}

pub(super) fn parse(name: &str, bytes: &[u8]) -> Result<Profile, ReadError> {
    let pprof_err = |source| ReadError::Pprof {
        path: name.to_string(),
        source,
    };
    // Even a profile of nothing has a header; an empty file is a truncated one.
    if bytes.is_empty() {
        return Err(ReadError::Unknown {
            path: name.to_string(),
            reason: "the file is empty".into(),
        });
    }
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return pprof::read_pprof(bytes).map_err(pprof_err);
    }
    let folded = match std::str::from_utf8(bytes) {
        Ok(text) => match super::profile_from_folded(text) {
            Ok(p) => return Ok(p),
            Err(e) => e.to_string(),
        },
        Err(_) => "not text".to_string(),
    };
    pprof::read_pprof(bytes).map_err(|e| ReadError::Unknown {
        path: name.to_string(),
        reason: format!("as folded: {folded}; as pprof: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_each_format_and_names_the_file_on_error() {
        let p = parse("f", b"a;b 2\n").unwrap();
        assert_eq!(p.total(), 2);
        let mut gz = Vec::new();
        super::super::write_pprof(&p, &mut gz).unwrap();
        assert_eq!(parse("g", &gz).unwrap().total(), 2);
        let err = parse("x.bin", &[0xff, 0x00, 0x13]).unwrap_err().to_string();
        assert!(
            err.starts_with("x.bin: not a pprof profile or folded"),
            "{err}"
        );
        let err = parse("t.txt", b"hello world\n").unwrap_err().to_string();
        assert!(err.contains("line 1: bad sample count"), "{err}");
        let err = parse("e", b"").unwrap_err().to_string();
        assert_eq!(
            err,
            "e: not a pprof profile or folded stacks (the file is empty)"
        );
        let err = parse("o", b"a 18446744073709551615\nb 1\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sample counts add up to more than 2^64"),
            "{err}"
        );
        let err = parse("z.gz", &gz[..gz.len() / 2]).unwrap_err().to_string();
        assert!(
            err.starts_with("z.gz: not a gzip-compressed pprof"),
            "{err}"
        );
    }
}
