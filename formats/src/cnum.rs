//! The C library's number parsing where the Solaris tools' behaviour depends on it:
//! `strtoll(s, &end, 0)` for attribute values in event specifications.

/// `strtoll(s, &end, 0)`: leading white space, an optional sign, then `0x`/`0X` hex, a
/// leading `0` octal, or decimal; stops at the first character that is not a digit of the
/// base; clamps to `i64::MIN`/`i64::MAX` on overflow (ERANGE). Returns the value and how many
/// bytes were consumed; 0 consumed means no number was found (C's `end == s`).
pub fn strtoll(s: &str) -> (i64, usize) {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r') {
        i += 1;
    }
    let mut negative = false;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        negative = b[i] == b'-';
        i += 1;
    }
    let mut base = 10u32;
    if i < b.len() && b[i] == b'0' {
        let hex = b.get(i + 1).is_some_and(|c| *c == b'x' || *c == b'X')
            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        if hex {
            base = 16;
            i += 2;
        } else {
            base = 8;
        }
    }
    let start = i;
    // Accumulate the magnitude in u128 so that i64::MIN's magnitude fits.
    let mut magnitude: u128 = 0;
    let limit: u128 = if negative {
        i64::MAX as u128 + 1
    } else {
        i64::MAX as u128
    };
    while i < b.len() {
        let Some(d) = (b[i] as char).to_digit(base) else {
            break;
        };
        magnitude = magnitude * u128::from(base) + u128::from(d);
        magnitude = magnitude.min(limit);
        i += 1;
    }
    if i == start {
        // "0" alone was taken as the octal prefix: it is itself the number.
        return if base == 8 { (0, start) } else { (0, 0) };
    }
    let value = if negative {
        (magnitude as i128).wrapping_neg() as i64
    } else {
        magnitude as i64
    };
    (value, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_signs_and_prefixes() {
        assert_eq!(strtoll("42"), (42, 2));
        assert_eq!(strtoll("0x1f"), (31, 4));
        assert_eq!(strtoll("0X1F"), (31, 4));
        assert_eq!(strtoll("017"), (15, 3), "leading 0 is octal");
        assert_eq!(strtoll("0"), (0, 1));
        assert_eq!(strtoll("-3"), (-3, 2));
        assert_eq!(strtoll("+3"), (3, 2));
        assert_eq!(strtoll("  7"), (7, 3), "leading white space is skipped");
    }

    #[test]
    fn partial_and_empty() {
        assert_eq!(strtoll("12abc"), (12, 2), "stops at the first non-digit");
        assert_eq!(strtoll("08"), (0, 1), "8 is not an octal digit");
        assert_eq!(
            strtoll("0x"),
            (0, 1),
            "0x without hex digits is the number 0"
        );
        assert_eq!(strtoll("0xg"), (0, 1));
        assert_eq!(strtoll(""), (0, 0));
        assert_eq!(strtoll("abc"), (0, 0));
        assert_eq!(strtoll("-"), (0, 0));
        assert_eq!(strtoll(" "), (0, 0));
    }

    #[test]
    fn clamps_on_overflow() {
        assert_eq!(strtoll("99999999999999999999"), (i64::MAX, 20));
        assert_eq!(strtoll("-99999999999999999999"), (i64::MIN, 21));
        assert_eq!(strtoll("-9223372036854775808"), (i64::MIN, 20));
        assert_eq!(strtoll("0xffffffffffffffff"), (i64::MAX, 18));
    }
}
