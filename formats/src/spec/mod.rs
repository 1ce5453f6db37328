//! The `-c` event specification of cputrack and cpustat (libcpc-spec §2.1), parsed with
//! getsubopt(3C) semantics into one libcpc set:
//!
//! ```text
//! eventspec := token { "," token }
//! token     := [ "pic" N "=" ] event | attr [ N ] [ "=" value ] | "nouser" [ N ] | "sys" [ N ]
//! ```
//!
//! Every request starts with `COUNT_USER` and preset 0, and gets the attribute `picnum=N`
//! of its counter. A bare event goes to the first counter above the highest one assigned so
//! far, so columns follow the spec; requests are ordered by counter number. Attributes and
//! flags without a number apply to every counter, with one only to that counter. Values
//! are read with `strtoll(.., 0)` (default 1); values given to `nouser` and `sys` are
//! ignored. Parsing is pure: the event check and the attribute names come from a
//! [`SpecContext`], which [`SpecContext::for_cpc`] fills from the libcpc handle.

use profiler_core::cpc::{Attr, Cpc, CpcError, Set, consts::request, events::EventError};

use crate::cnum::strtoll;

#[cfg(test)]
mod tests;

/// Whether an event can be counted here; the error is the catalogue's explanation.
pub type EventCheck<'a> = Box<dyn Fn(&str) -> Result<(), Uncountable> + 'a>;

/// Why an event cannot be counted here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Uncountable {
    /// The name does not resolve (the catalogue's text, with its suggestions).
    #[error(transparent)]
    Event(#[from] EventError),
    /// It resolves, but this host cannot count it.
    #[error("event '{name}' cannot be counted here: {reason}")]
    Unavailable { name: String, reason: String },
}

/// What the parser needs to know about the counters.
pub struct SpecContext<'a> {
    /// `cpc_npic`: counters are `pic0` to `pic{npic-1}`.
    pub npic: u32,
    /// Attribute names a user may write (`cpc_walk_attrs` without `picnum` and the
    /// Pentium 4 `count_sibling_*` ones).
    pub attributes: Vec<String>,
    /// Whether an event can be counted here.
    pub check: EventCheck<'a>,
}

/// Attributes the tools set themselves and users may not write.
const HIDDEN_ATTRS: [&str; 3] = ["picnum", "count_sibling_usr", "count_sibling_sys"];

impl SpecContext<'_> {
    /// The handle's counters and attributes, with the catalogue as the event check: a name
    /// must resolve, and this host must be able to count it.
    pub fn for_cpc(cpc: &Cpc) -> SpecContext<'_> {
        let attributes = cpc
            .catalog()
            .attributes()
            .into_iter()
            .filter(|a| !HIDDEN_ATTRS.contains(&a.as_str()))
            .collect();
        SpecContext {
            npic: cpc.npic(),
            attributes,
            check: Box::new(move |name: &str| check_event(cpc, name)),
        }
    }
}

/// The catalogue's verdict on `name` for this host.
pub fn check_event(cpc: &Cpc, name: &str) -> Result<(), Uncountable> {
    let catalog = cpc.catalog();
    let event = catalog.resolve(name)?;
    match catalog.unavailable_reason(&event) {
        None => Ok(()),
        Some(reason) => Err(Uncountable::Unavailable {
            name: name.to_owned(),
            reason,
        }),
    }
}

/// Why a specification was refused. The texts are cputrack's where it has one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("repeated 'pic{0}' token")]
    RepeatedPic(u32),
    #[error("missing 'pic{0}' value")]
    MissingPicValue(u32),
    #[error("pic{pic} cannot measure event '{event}' on this cpu: {reason}")]
    PicCannotMeasure {
        pic: u32,
        event: String,
        reason: Uncountable,
    },
    #[error("bad token '{0}'")]
    BadToken(String),
    /// A bare name that is no token and no event here: the catalogue's text (with its
    /// "did you mean" suggestions).
    #[error("{0}")]
    UnknownEvent(Uncountable),
    #[error("no counter is free for '{event}': pic{last} is assigned")]
    NoFreeCounter { event: String, last: u32 },
    #[error("invalid value '{value}' for attribute '{attr}'")]
    InvalidValue { attr: String, value: String },
    #[error("no event in specification '{0}'")]
    NoEvents(String),
}

impl SpecError {
    /// The libcpc-side function cputrack's `-D` names for parse errors.
    pub fn func(&self) -> &'static str {
        "cpc_strtoset"
    }
}

/// One request of a parsed set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestSpec {
    /// The counter (`picnum`) it was given.
    pub pic: u32,
    pub event: String,
    /// `consts::request` flags: COUNT_USER unless `nouser`, COUNT_SYSTEM with `sys`.
    pub flags: u32,
    /// The user's attributes in spec order, then `picnum`.
    pub attrs: Vec<Attr>,
}

/// A parsed `-c` argument: one libcpc set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetSpec {
    /// The specification as given (printed after `#` when there are several sets).
    pub text: String,
    /// In counter order.
    pub requests: Vec<RequestSpec>,
}

impl SetSpec {
    /// The counters used, in column order.
    pub fn pics(&self) -> Vec<u32> {
        self.requests.iter().map(|r| r.pic).collect()
    }

    /// True when no request counts user mode (cpustat `-s` soaks CPUs for such sets).
    pub fn is_system_only(&self) -> bool {
        self.requests
            .iter()
            .all(|r| r.flags & request::COUNT_USER == 0)
    }

    /// A fresh, unbound libcpc set with these requests (preset 0).
    pub fn build(&self, cpc: &Cpc) -> Result<Set, CpcError> {
        let mut set = cpc.set_create();
        for r in &self.requests {
            cpc.set_add_request(&mut set, &r.event, 0, r.flags, &r.attrs)?;
        }
        Ok(set)
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Pic,
    NoUser,
    Sys,
    Attr(usize),
}

/// One getsubopt token: its text, what it does, and its counter (`None`: every counter).
struct Token {
    text: String,
    kind: Kind,
    pic: Option<u32>,
}

/// The token table, in libcpc's order: `picN`, `nouserN`, `sysN`, each attribute with and
/// without a number, then `nouser` and `sys`.
fn tokens(ctx: &SpecContext<'_>) -> Vec<Token> {
    let n = ctx.npic;
    let mut t: Vec<Token> = Vec::new();
    let numbered = |prefix: &str, kind: Kind| {
        let prefix = prefix.to_string();
        (0..n).map(move |i| Token {
            text: format!("{prefix}{i}"),
            kind,
            pic: Some(i),
        })
    };
    t.extend(numbered("pic", Kind::Pic));
    t.extend(numbered("nouser", Kind::NoUser));
    t.extend(numbered("sys", Kind::Sys));
    for (a, name) in ctx.attributes.iter().enumerate() {
        t.extend(numbered(name, Kind::Attr(a)));
        t.push(Token {
            text: name.clone(),
            kind: Kind::Attr(a),
            pic: None,
        });
    }
    for (text, kind) in [("nouser", Kind::NoUser), ("sys", Kind::Sys)] {
        t.push(Token {
            text: text.into(),
            kind,
            pic: None,
        });
    }
    t
}

/// Per-counter state while parsing.
#[derive(Clone)]
struct Counter {
    event: Option<String>,
    flags: u32,
    attrs: Vec<Attr>,
}

/// Parses one `-c` argument into a set.
pub fn parse(spec: &str, ctx: &SpecContext<'_>) -> Result<SetSpec, SpecError> {
    let table = tokens(ctx);
    let mut counters = vec![
        Counter {
            event: None,
            flags: request::COUNT_USER,
            attrs: Vec::new(),
        };
        ctx.npic as usize
    ];
    // getsubopt: sub-options end at ',' and run until the string is used up, so a trailing
    // comma ends the list while an empty one in the middle is an (unknown) empty token.
    let mut rest = spec;
    while !rest.is_empty() {
        let (sub, next) = next_suboption(rest);
        rest = next;
        // `name=value`, unless the '=' belongs to a `pmu/term=value/` event name.
        let (name, value) = match sub.split_once('=') {
            Some((n, v)) if !n.contains('/') => (n, Some(v)),
            _ => (sub, None),
        };
        match table.iter().find(|t| t.text == name) {
            Some(token) => apply(token, value, ctx, &mut counters)?,
            None => place_bare(sub, ctx, &mut counters)?,
        }
    }
    let requests: Vec<RequestSpec> = counters
        .into_iter()
        .zip(0u32..)
        .filter_map(|(c, pic)| {
            let event = c.event?;
            let mut attrs = c.attrs;
            attrs.push(Attr::new("picnum", u64::from(pic)));
            Some(RequestSpec {
                pic,
                event,
                flags: c.flags,
                attrs,
            })
        })
        .collect();
    if requests.is_empty() {
        return Err(SpecError::NoEvents(spec.to_string()));
    }
    Ok(SetSpec {
        text: spec.to_string(),
        requests,
    })
}

/// Splits off the first sub-option at a ','. Linux extension: commas inside a
/// `pmu/term=value,term=value/` event name do not split (libcpc names never hold commas).
fn next_suboption(s: &str) -> (&str, &str) {
    let mut inside = false;
    for (i, c) in s.char_indices() {
        match c {
            '/' => inside = !inside,
            ',' if !inside => return (&s[..i], &s[i + 1..]),
            _ => {}
        }
    }
    (s, "")
}

/// The counters a token acts on: its own, or all of them.
fn targets(pic: Option<u32>, n: usize) -> std::ops::Range<usize> {
    match pic {
        Some(p) => p as usize..p as usize + 1,
        None => 0..n,
    }
}

fn apply(
    token: &Token,
    value: Option<&str>,
    ctx: &SpecContext<'_>,
    counters: &mut [Counter],
) -> Result<(), SpecError> {
    let n = counters.len();
    match token.kind {
        Kind::Pic => {
            let pic = token.pic.expect("picN tokens carry a counter");
            let slot = &mut counters[pic as usize];
            if slot.event.is_some() {
                return Err(SpecError::RepeatedPic(pic));
            }
            let event = value
                .filter(|v| !v.is_empty())
                .ok_or(SpecError::MissingPicValue(pic))?;
            (ctx.check)(event).map_err(|reason| SpecError::PicCannotMeasure {
                pic,
                event: event.to_string(),
                reason,
            })?;
            slot.event = Some(event.to_string());
        }
        Kind::NoUser => {
            for c in &mut counters[targets(token.pic, n)] {
                c.flags &= !request::COUNT_USER;
            }
        }
        Kind::Sys => {
            for c in &mut counters[targets(token.pic, n)] {
                c.flags |= request::COUNT_SYSTEM;
            }
        }
        Kind::Attr(a) => {
            let attr = &ctx.attributes[a];
            let value = match value {
                None => 1,
                Some(v) => match strtoll(v) {
                    (_, 0) => {
                        return Err(SpecError::InvalidValue {
                            attr: attr.clone(),
                            value: v.to_string(),
                        });
                    }
                    (x, _) => x as u64,
                },
            };
            for c in &mut counters[targets(token.pic, n)] {
                c.attrs.push(Attr::new(attr.clone(), value));
            }
        }
    }
    Ok(())
}

/// A sub-option matching no token: an event for the first counter above the highest one
/// assigned so far, if it is a name at all.
fn place_bare(sub: &str, ctx: &SpecContext<'_>, counters: &mut [Counter]) -> Result<(), SpecError> {
    let plain = sub.split('/').next().unwrap_or_default();
    if plain.contains('=') || sub.is_empty() {
        return Err(SpecError::BadToken(sub.to_string()));
    }
    let first_free = counters
        .iter()
        .rposition(|c| c.event.is_some())
        .map_or(0, |i| i + 1);
    if first_free >= counters.len() {
        return Err(SpecError::NoFreeCounter {
            event: sub.to_string(),
            last: counters.len() as u32 - 1,
        });
    }
    // Every counter can count every event on Linux (the kernel assigns them), so the first
    // free one is capable if any is.
    (ctx.check)(sub).map_err(SpecError::UnknownEvent)?;
    counters[first_free].event = Some(sub.to_string());
    Ok(())
}
