//! Why the counting commands' arguments (`stat`, `track`, and the cputrack and cpustat
//! personas) were refused. The texts are what the user sees after `NAME: `.

use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("invalid {what} \"{text}\": expected seconds (>= 0)")]
    Seconds { what: &'static str, text: String },
    #[error("invalid {what} \"{text}\": expected a whole number (>= 0)")]
    Count { what: &'static str, text: String },
    #[error("invalid pid \"{0}\"")]
    Pid(String),
    #[error("invalid CPU list \"{0}\": expected e.g. 0-3,6")]
    CpuList(String),
    #[error("invalid -T \"{0}\": expected u or d")]
    Stamp(String),
    #[error("too many operands: {}", .0.join(" "))]
    TooManyOperands(Vec<String>),
    #[error("the interval must be more than 0")]
    ZeroInterval,
    #[error("the count must be more than 0")]
    ZeroCount,
    #[error("option -{0} is not supported")]
    Unsupported(char),
    #[error("illegal option -- {0}")]
    Illegal(char),
}

/// A float of seconds, >= 0 (`-T`, cpustat's interval and `-p`).
pub fn seconds(what: &'static str, text: &str) -> Result<Duration, UsageError> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| UsageError::Seconds {
            what,
            text: text.to_string(),
        })
}

/// A whole number >= 0 (`-N`, cpustat's count).
pub fn count(what: &'static str, text: &str) -> Result<u64, UsageError> {
    text.trim().parse::<u64>().map_err(|_| UsageError::Count {
        what,
        text: text.to_string(),
    })
}

/// A pid > 0 (`-p`).
pub fn pid(text: &str) -> Result<i32, UsageError> {
    text.trim()
        .parse::<i32>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| UsageError::Pid(text.to_string()))
}

/// A CPU list such as `0-3,6` (`-C`).
pub fn cpu_list(text: &str) -> Result<Vec<u32>, UsageError> {
    let bad = || UsageError::CpuList(text.to_string());
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let lo: u32 = lo.trim().parse().map_err(|_| bad())?;
        let hi: u32 = hi.trim().parse().map_err(|_| bad())?;
        if lo > hi || hi - lo > 65535 {
            return Err(bad());
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// cpustat's operands: `[interval [count]]`, interval 5 s by default, count unlimited;
/// 0 for either is a usage error.
pub fn stat_operands(operands: &[String]) -> Result<(Duration, Option<u64>), UsageError> {
    if operands.len() > 2 {
        return Err(UsageError::TooManyOperands(operands.to_vec()));
    }
    let interval = match operands.first() {
        Some(t) => seconds("interval", t)?,
        None => Duration::from_secs(5),
    };
    if interval.is_zero() {
        return Err(UsageError::ZeroInterval);
    }
    let count = operands.get(1).map(|t| count("count", t)).transpose()?;
    if count == Some(0) {
        return Err(UsageError::ZeroCount);
    }
    Ok((interval, count))
}
