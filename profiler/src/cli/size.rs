//! `SIZE` arguments of `record` (`--spool-max`, `--unwind-memory`): a number with an
//! optional K, M or G suffix.

/// Why a `SIZE` argument (`--spool-max`, `--unwind-memory`) was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("`{0}`: the suffix must be K, M or G")]
    Suffix(String),
    #[error("`{text}` is not a size (e.g. {example})")]
    NotASize { text: String, example: &'static str },
    #[error("`{0}`: must be from 1 byte to 16 EiB")]
    Bytes(String),
    #[error("`{0}` is too large")]
    TooLarge(String),
    #[error("`{0}`: unwind memory must be from 64K to 4G")]
    UnwindMemory(String),
}

/// `--spool-max SIZE`: bytes, with an optional K, M or G suffix.
pub fn byte_size(text: &str) -> Result<u64, SizeError> {
    let (digits, shift) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (
            &text[..i],
            match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                _ => return Err(SizeError::Suffix(text.to_string())),
            },
        ),
        _ => (text, 0),
    };
    let n: u64 = digits.parse().map_err(|_| SizeError::NotASize {
        text: text.to_string(),
        example: "256M",
    })?;
    n.checked_shl(shift)
        .filter(|b| b >> shift == n && *b > 0)
        .ok_or_else(|| SizeError::Bytes(text.to_string()))
}

/// `--unwind-memory SIZE` as a number of 8-byte rows.
pub fn unwind_rows(text: &str) -> Result<u32, SizeError> {
    let (digits, unit) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&text[..i], c.to_ascii_uppercase()),
        _ => (text, 'M'),
    };
    let shift = match unit {
        'K' => 10,
        'M' => 20,
        'G' => 30,
        _ => return Err(SizeError::Suffix(text.to_string())),
    };
    let n: u64 = digits.parse().map_err(|_| SizeError::NotASize {
        text: text.to_string(),
        example: "64M or 512K",
    })?;
    let too_large = || SizeError::TooLarge(text.to_string());
    let bytes = n
        .checked_shl(shift)
        .filter(|b| b >> shift == n)
        .ok_or_else(too_large)?;
    if !((64 << 10)..=(4 << 30)).contains(&bytes) {
        return Err(SizeError::UnwindMemory(text.to_string()));
    }
    u32::try_from(bytes / 8).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::unwind_rows;

    #[test]
    fn sizes_become_rows() {
        assert_eq!(unwind_rows("32"), Ok(32 << 17));
        assert_eq!(unwind_rows("32M"), Ok(32 << 17));
        assert_eq!(unwind_rows("512k"), Ok(512 << 7));
        assert_eq!(unwind_rows("4G"), Ok(1 << 29));
        assert!(unwind_rows("63K").is_err());
        assert!(unwind_rows("5G").is_err());
        assert!(unwind_rows("12X").is_err());
        assert!(unwind_rows("M").is_err());
        assert!(unwind_rows("99999999999999999G").is_err());
    }
}
