//! perf's sysfs format strings (`/sys/bus/event_source/devices/<pmu>/format/<term>`): which
//! bits of which `perf_event_attr` config word a PMU term occupies, and how a value is packed
//! into them.

use super::{Event, EventError, grammar::GrammarError};

/// The `perf_event_attr` words a format can name. (`config3`, added in Linux 6.3 for a few
/// Arm PMUs, is not carried by [`Event`], so formats naming it are rejected when parsed.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConfigWord {
    Config,
    Config1,
    Config2,
}

impl ConfigWord {
    fn parse(word: &str) -> Result<Self, GrammarError> {
        match word {
            "config" => Ok(Self::Config),
            "config1" => Ok(Self::Config1),
            "config2" => Ok(Self::Config2),
            other => Err(GrammarError::ConfigWord(other.to_owned())),
        }
    }

    pub(crate) fn slot(self, event: &mut Event) -> &mut u64 {
        match self {
            Self::Config => &mut event.config,
            Self::Config1 => &mut event.config1,
            Self::Config2 => &mut event.config2,
        }
    }
}

/// One term's bits. Like perf, the bits form a set: a value's low bits go to the lowest
/// field bits, so `config:0-7,32-35` holds a 12-bit value split across two ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) word: ConfigWord,
    pub(crate) mask: u64,
}

impl Field {
    /// Bits `lo..=hi` of `word` (`lo <= hi <= 63`; used for built-in tables).
    pub(crate) const fn bits(word: ConfigWord, lo: u32, hi: u32) -> Self {
        let width = hi - lo + 1;
        let ones = if width == 64 {
            u64::MAX
        } else {
            (1u64 << width) - 1
        };
        Self {
            word,
            mask: ones << lo,
        }
    }

    /// Parses a format file's text, e.g. `config:0-7`, `config1:0-15`, `config:0-7,32-35`
    /// or `config:21`.
    pub(crate) fn parse(text: &str) -> Result<Self, GrammarError> {
        let text = text.trim();
        let (word, ranges) = text
            .split_once(':')
            .ok_or_else(|| GrammarError::NoColon(text.to_owned()))?;
        let word = ConfigWord::parse(word.trim())?;
        let mut mask = 0u64;
        for range in ranges.split(',') {
            let range = range.trim();
            let (lo, hi) = match range.split_once('-') {
                Some((lo, hi)) => (parse_bit(lo)?, parse_bit(hi)?),
                None => {
                    let bit = parse_bit(range)?;
                    (bit, bit)
                }
            };
            if lo > hi {
                return Err(GrammarError::ReversedRange(range.to_owned()));
            }
            mask |= Self::bits(word, lo, hi).mask;
        }
        Ok(Self { word, mask })
    }

    /// The largest value the field holds.
    pub(crate) fn max(self) -> u64 {
        match self.mask.count_ones() {
            64 => u64::MAX,
            width => (1u64 << width) - 1,
        }
    }

    /// Replaces the field's bits in `event` with `value`; `term` names it in the error.
    pub(crate) fn store(self, event: &mut Event, term: &str, value: u64) -> Result<(), EventError> {
        if value > self.max() {
            return Err(EventError::AttributeOutOfRange {
                name: term.to_owned(),
                value,
                max: self.max(),
            });
        }
        let slot = self.word.slot(event);
        *slot = (*slot & !self.mask) | deposit(value, self.mask);
        Ok(())
    }
}

fn parse_bit(text: &str) -> Result<u32, GrammarError> {
    match text.trim().parse::<u32>() {
        Ok(bit) if bit < 64 => Ok(bit),
        _ => Err(GrammarError::NotABit(text.trim().to_owned())),
    }
}

/// Scatters the low bits of `value` into the set bits of `mask`, lowest first (x86 PDEP).
fn deposit(mut value: u64, mask: u64) -> u64 {
    let mut out = 0;
    let mut rest = mask;
    while rest != 0 && value != 0 {
        let lowest = rest & rest.wrapping_neg();
        if value & 1 != 0 {
            out |= lowest;
        }
        value >>= 1;
        rest &= rest - 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventKind;

    fn blank() -> Event {
        Event {
            name: "test".into(),
            kind: EventKind::Raw,
            pmu: None,
            type_: 4,
            config: 0,
            config1: 0,
            config2: 0,
            generic: None,
        }
    }

    #[test]
    fn parses_ranges_single_bits_and_words() {
        let f = Field::parse("config:0-7\n").unwrap();
        assert_eq!((f.word, f.mask, f.max()), (ConfigWord::Config, 0xff, 0xff));
        let f = Field::parse("config1:0-15").unwrap();
        assert_eq!((f.word, f.mask), (ConfigWord::Config1, 0xffff));
        let f = Field::parse("config:21").unwrap();
        assert_eq!((f.mask, f.max()), (1 << 21, 1));
        let f = Field::parse("config:0-7,32-35").unwrap();
        assert_eq!((f.mask, f.max()), (0xf_0000_00ff, 0xfff));
        let f = Field::parse("config2:0-63").unwrap();
        assert_eq!(
            (f.word, f.mask, f.max()),
            (ConfigWord::Config2, u64::MAX, u64::MAX)
        );
    }

    #[test]
    fn rejects_bad_formats() {
        for bad in [
            "config",
            "config3:0-7",
            "config:7-0",
            "config:0-64",
            "config:x",
            "cfg:0",
            "config:",
        ] {
            assert!(Field::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn stores_split_fields_low_bits_first() {
        let f = Field::parse("config:0-7,32-35").unwrap();
        let mut e = blank();
        f.store(&mut e, "ev", 0xabc).unwrap();
        assert_eq!(e.config, 0x0000_000a_0000_00bc);
        // A second store replaces, not ORs, the field's bits and leaves the others alone.
        e.config |= 0x100;
        f.store(&mut e, "ev", 0x001).unwrap();
        assert_eq!(e.config, 0x101);
    }

    #[test]
    fn out_of_range_values_fail() {
        let f = Field::parse("config:24-31").unwrap();
        let mut e = blank();
        let err = f.store(&mut e, "cmask", 256).unwrap_err();
        assert_eq!(
            err,
            EventError::AttributeOutOfRange {
                name: "cmask".into(),
                value: 256,
                max: 255
            }
        );
        assert_eq!(e.config, 0, "a failed store changes nothing");
    }

    #[test]
    fn deposit_matches_manual_packing() {
        assert_eq!(deposit(0b101, 0b1_0110), 0b1_0010);
        assert_eq!(deposit(u64::MAX, 0xf0), 0xf0);
        assert_eq!(deposit(0, u64::MAX), 0);
    }
}
