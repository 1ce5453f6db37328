//! Raw PMU codes (PERF_TYPE_RAW): perf's `rNNNN` and libcpc's bare numbers.

use super::grammar::GrammarError;

/// Parses a raw code. `None` when `name` is not shaped like one (so other grammars, and
/// in the end "unknown event", get their turn); `Some(Err(reason))` when it clearly tries
/// to be one and fails.
///
/// - perf: `r` then 1 to 16 hex digits (`r01c2`). `r` then letters and digits that are not
///   all hex (`r01g2`, `r0x1c2`) is malformed; `r` then a word without digits (`rubbish`)
///   is left alone, to be reported as an unknown name with suggestions.
/// - libcpc: what `strtol(name, &end, 0)` consumes entirely (`0x3c`, `60`, `074`): an
///   optional sign, then hex after `0x`, octal after `0`, else decimal. Leading blanks,
///   which strtol would skip, are refused: event names never have them. Negative codes and
///   codes beyond a C `long` are malformed (strtol would wrap or saturate them).
pub(crate) fn parse(name: &str) -> Option<Result<u64, GrammarError>> {
    if let Some(hex) = name.strip_prefix('r') {
        return parse_perf(hex);
    }
    let unsigned = name.strip_prefix(['+', '-']).unwrap_or(name);
    if unsigned.starts_with(|c: char| c.is_ascii_digit()) {
        return Some(parse_strtol(name));
    }
    None
}

fn parse_perf(hex: &str) -> Option<Result<u64, GrammarError>> {
    if !hex.is_empty() && hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Some(
            u64::from_str_radix(hex, 16).map_err(|_| GrammarError::RawTooLong(hex.to_owned())),
        );
    }
    let looks_raw =
        hex.bytes().all(|c| c.is_ascii_alphanumeric()) && hex.bytes().any(|c| c.is_ascii_digit());
    if !looks_raw {
        return None;
    }
    Some(Err(if hex.starts_with("0x") || hex.starts_with("0X") {
        GrammarError::RawHexPrefix {
            hex: hex.to_owned(),
            digits: hex[2..].to_owned(),
        }
    } else {
        GrammarError::RawNotHex
    }))
}

fn parse_strtol(text: &str) -> Result<u64, GrammarError> {
    let (negative, body) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let hex_body = body
        .strip_prefix("0x")
        .or_else(|| body.strip_prefix("0X"))
        .filter(|rest| rest.starts_with(|c: char| c.is_ascii_hexdigit()));
    let (radix, digits) = match hex_body {
        Some(rest) => (16, rest),
        // strtol reads a leading 0 as the octal prefix, and that 0 is itself a digit.
        None if body.starts_with('0') => (8, body),
        None => (10, body),
    };
    if let Some(bad) = digits.chars().find(|c| !c.is_digit(radix)) {
        return Err(GrammarError::NotStrtol {
            text: text.to_owned(),
            bad,
            radix,
        });
    }
    if negative {
        return Err(GrammarError::Negative);
    }
    match u64::from_str_radix(digits, radix) {
        Ok(value) if value <= i64::MAX as u64 => Ok(value),
        _ => Err(GrammarError::NotALong(text.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_syntax() {
        assert_eq!(parse("r01c2"), Some(Ok(0x1c2)));
        assert_eq!(parse("rC0"), Some(Ok(0xc0)));
        assert_eq!(
            parse("rab"),
            Some(Ok(0xab)),
            "all-hex words are raw, as in perf"
        );
        assert_eq!(parse("rffffffffffffffff"), Some(Ok(u64::MAX)));
        assert!(
            matches!(parse("r1ffffffffffffffff"), Some(Err(_))),
            "17 digits"
        );
        assert!(matches!(parse("r01g2"), Some(Err(_))));
        let Some(Err(reason)) = parse("r0x1c2") else {
            panic!("r0x1c2 must be malformed")
        };
        assert_eq!(
            reason.to_string(),
            "perf raw codes are bare hex: write r1c2 or 0x1c2"
        );
        assert_eq!(parse("rubbish"), None, "left for suggestions");
        assert_eq!(parse("ref-cyles"), None);
        assert_eq!(parse("r"), None);
    }

    #[test]
    fn libcpc_strtol_syntax() {
        assert_eq!(parse("0x3c"), Some(Ok(0x3c)));
        assert_eq!(parse("0X3C"), Some(Ok(0x3c)));
        assert_eq!(parse("60"), Some(Ok(60)));
        assert_eq!(parse("074"), Some(Ok(0o74)));
        assert_eq!(parse("0"), Some(Ok(0)));
        assert_eq!(parse("+12"), Some(Ok(12)));
        assert_eq!(parse("9223372036854775807"), Some(Ok(i64::MAX as u64)));
        for bad in [
            "0x",
            "0x3g",
            "089",
            "12abc",
            "-1",
            "9223372036854775808",
            "1 ",
        ] {
            assert!(matches!(parse(bad), Some(Err(_))), "{bad}");
        }
        assert_eq!(parse("cycles"), None);
        assert_eq!(parse("-x"), None);
    }
}
