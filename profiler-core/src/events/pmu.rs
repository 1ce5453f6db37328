//! Dynamic PMUs from sysfs (`/sys/bus/event_source/devices/<pmu>/{type,format/*,events/*}`)
//! and perf's `pmu/event/` and `pmu/term=value,.../` syntax over them.

use std::{collections::BTreeMap, fs, path::Path, sync::Arc};

use super::{
    Event, EventError, EventKind,
    format::Field,
    grammar::{GrammarError, SharedIo},
    suggest::suggest,
};

/// A term's value: a number, or `?` in an event file, which the user must supply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    Num(u64),
    Required,
}

/// `name=value`, or a bare `name` (an event alias, or a format term set to 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Term {
    pub(crate) name: String,
    pub(crate) value: Option<Value>,
}

/// One PMU as sysfs describes it. Files that do not parse are kept with the reason, so that
/// using them gives that reason rather than "unknown".
#[derive(Debug)]
pub(crate) struct Pmu {
    pub(crate) name: String,
    pub(crate) type_: u32,
    pub(crate) formats: BTreeMap<String, Result<Field, GrammarError>>,
    pub(crate) events: BTreeMap<String, Result<Vec<Term>, GrammarError>>,
}

impl Pmu {
    /// Reads `dir`; `None` if it has no readable numeric `type` (then it is no PMU to us).
    pub(crate) fn load(dir: &Path) -> Option<Pmu> {
        let name = dir.file_name()?.to_str()?.to_owned();
        let type_ = fs::read_to_string(dir.join("type"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let formats = read_dir_files(&dir.join("format"))
            .map(|(term, text)| (term, text.and_then(|t| Field::parse(&t))))
            .collect();
        let events = read_dir_files(&dir.join("events"))
            // `<event>.scale`, `.unit`, `.per-pkg`, `.snapshot` describe an event; not events.
            .filter(|(event, _)| !event.contains('.'))
            .map(|(event, text)| (event, text.and_then(|t| parse_terms(&t))))
            .collect();
        Some(Pmu {
            name,
            type_,
            formats,
            events,
        })
    }

    /// `pmu/event/` for every event file, for listings and suggestions.
    pub(crate) fn event_names(&self) -> impl Iterator<Item = String> + '_ {
        self.events.keys().map(|e| format!("{}/{e}/", self.name))
    }

    /// The format field `term`, if this PMU defines one that parses.
    pub(crate) fn field(&self, term: &str) -> Option<Result<Field, GrammarError>> {
        self.formats.get(term).cloned()
    }

    /// Encodes `terms` (the text between the slashes) into `event`, left to right, so a
    /// later term overrides what an event alias set (`cpu/foo,umask=2/`), as in perf.
    fn encode(&self, event: &mut Event, terms: &[Term]) -> Result<(), EventError> {
        let mut required: Vec<&str> = Vec::new();
        for term in terms {
            let value = match term.value {
                Some(Value::Num(v)) => v,
                Some(Value::Required) => {
                    return Err(EventError::Malformed {
                        name: event.name.clone(),
                        reason: format!("'{}=?' needs a number", term.name),
                    });
                }
                None => match self.events.get(&term.name) {
                    Some(alias) => {
                        let alias = alias.as_ref().map_err(|reason| EventError::Malformed {
                            name: event.name.clone(),
                            reason: format!("sysfs event '{}': {reason}", term.name),
                        })?;
                        for t in alias {
                            match t.value {
                                Some(Value::Num(v)) => self.set(event, &t.name, v)?,
                                None => self.set(event, &t.name, 1)?,
                                Some(Value::Required) => required.push(&t.name),
                            }
                        }
                        continue;
                    }
                    // A bare format term means "set it to 1" (e.g. `edge`), as in perf.
                    None => 1,
                },
            };
            required.retain(|r| *r != term.name);
            self.set(event, &term.name, value)?;
        }
        match required.first() {
            None => Ok(()),
            Some(missing) => Err(EventError::Malformed {
                name: event.name.clone(),
                reason: format!("the event needs a value for '{missing}' ({missing}=N)"),
            }),
        }
    }

    /// Sets one term: perf's built-in whole config words, else a format field.
    fn set(&self, event: &mut Event, term: &str, value: u64) -> Result<(), EventError> {
        let whole_word = match term {
            "config" => Some(&mut event.config),
            "config1" => Some(&mut event.config1),
            "config2" => Some(&mut event.config2),
            _ => None,
        };
        if let Some(slot) = whole_word {
            *slot = value;
            return Ok(());
        }
        match self.formats.get(term) {
            Some(Ok(field)) => field.store(event, term, value),
            Some(Err(reason)) => Err(EventError::Malformed {
                name: event.name.clone(),
                reason: format!("format '{term}' of PMU {}: {reason}", self.name),
            }),
            None => Err(EventError::UnknownAttribute {
                name: term.to_owned(),
                suggestions: suggest(
                    term,
                    self.formats
                        .keys()
                        .chain(self.events.keys())
                        .map(String::as_str),
                ),
            }),
        }
    }
}

/// Resolves `pmu/terms/`. `None` when `name` has no `/` at all.
pub(crate) fn resolve(
    pmus: &BTreeMap<String, Pmu>,
    name: &str,
) -> Option<Result<Event, EventError>> {
    let (pmu_name, rest) = name.split_once('/')?;
    Some(resolve_split(pmus, name, pmu_name, rest))
}

fn resolve_split(
    pmus: &BTreeMap<String, Pmu>,
    name: &str,
    pmu_name: &str,
    rest: &str,
) -> Result<Event, EventError> {
    let malformed = |reason: String| EventError::Malformed {
        name: name.to_owned(),
        reason,
    };
    let inner = rest
        .strip_suffix('/')
        .filter(|inner| !pmu_name.is_empty() && !inner.contains('/'))
        .ok_or_else(|| malformed("expected pmu/event/ or pmu/term=value,.../".to_owned()))?;
    let terms = parse_terms(inner).map_err(|e| malformed(e.to_string()))?;
    let unknown = || {
        let known: Vec<String> = pmus.values().flat_map(Pmu::event_names).collect();
        EventError::Unknown {
            name: name.to_owned(),
            suggestions: suggest(name, known.iter().map(String::as_str)),
        }
    };
    let pmu = pmus.get(pmu_name).ok_or_else(unknown)?;
    // A lone bare word that is neither an event nor a format term is a mistyped event name.
    let lone_word = match terms.as_slice() {
        [Term { name, value: None }] => Some(name),
        _ => None,
    };
    if lone_word.is_some_and(|w| !pmu.events.contains_key(w) && !pmu.formats.contains_key(w)) {
        return Err(unknown());
    }
    let mut event = Event {
        name: name.to_owned(),
        kind: EventKind::Pmu,
        pmu: Some(pmu.name.clone()),
        type_: pmu.type_,
        config: 0,
        config1: 0,
        config2: 0,
        generic: None,
    };
    pmu.encode(&mut event, &terms)?;
    Ok(event)
}

/// Parses `event=0x3c,umask=0x01,edge` (sysfs event files and the user's text alike).
pub(crate) fn parse_terms(text: &str) -> Result<Vec<Term>, GrammarError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(GrammarError::NoTerms);
    }
    text.split(',')
        .map(|term| {
            let term = term.trim();
            let (name, value) = match term.split_once('=') {
                Some((name, value)) => (name.trim(), Some(parse_value(value.trim())?)),
                None => (term, None),
            };
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
            if !valid {
                return Err(GrammarError::NotATerm(term.to_owned()));
            }
            Ok(Term {
                name: name.to_owned(),
                value,
            })
        })
        .collect()
}

fn parse_value(text: &str) -> Result<Value, GrammarError> {
    if text == "?" {
        return Ok(Value::Required);
    }
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed
        .map(Value::Num)
        .map_err(|_| GrammarError::NotANumber(text.to_owned()))
}

/// `(file name, contents)` of each regular file in `dir`, sorted; nothing if `dir` is absent.
fn read_dir_files(dir: &Path) -> impl Iterator<Item = (String, Result<String, GrammarError>)> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let text = fs::read_to_string(entry.path())
                .map_err(|e| GrammarError::Unreadable(SharedIo(Arc::new(e))));
            Some((name, text))
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_terms() {
        let terms = parse_terms("event=0x3c, umask=2,edge,ldlat=?\n").unwrap();
        let expect = |name: &str, value| Term {
            name: name.into(),
            value,
        };
        assert_eq!(
            terms,
            [
                expect("event", Some(Value::Num(0x3c))),
                expect("umask", Some(Value::Num(2))),
                expect("edge", None),
                expect("ldlat", Some(Value::Required)),
            ]
        );
        for bad in ["", "event=", "event=0xzz", "=1", "a b=1", "ev/x"] {
            assert!(parse_terms(bad).is_err(), "{bad:?}");
        }
    }
}
