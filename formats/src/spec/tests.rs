//! Golden cases: the spec's examples (§2.1) with Linux event names, and every error.

use super::*;

const USER: u32 = request::COUNT_USER;
const SYS: u32 = request::COUNT_SYSTEM;

const EVENTS: &[&str] = &[
    "cycles",
    "instructions",
    "page-faults",
    "task-clock",
    "cpu-clock",
    "context-switches",
    "PAPI_tot_cyc",
    "branch-instructions",
];

fn ctx(npic: u32, attrs: &[&str]) -> SpecContext<'static> {
    SpecContext {
        npic,
        attributes: attrs.iter().map(|a| a.to_string()).collect(),
        check: Box::new(|name: &str| {
            if EVENTS.contains(&name) {
                Ok(())
            } else {
                Err(Uncountable::Event(EventError::Unknown {
                    name: name.to_string(),
                    suggestions: Vec::new(),
                }))
            }
        }),
    }
}

fn x86() -> SpecContext<'static> {
    ctx(4, &["edge", "pc", "inv", "umask", "cmask"])
}

fn req(pic: u32, event: &str, flags: u32, attrs: &[(&str, u64)]) -> RequestSpec {
    let mut attrs: Vec<Attr> = attrs.iter().map(|(n, v)| Attr::new(*n, *v)).collect();
    attrs.push(Attr::new("picnum", u64::from(pic)));
    RequestSpec {
        pic,
        event: event.into(),
        flags,
        attrs,
    }
}

fn ok(spec: &str, c: &SpecContext<'_>) -> Vec<RequestSpec> {
    let set = parse(spec, c).unwrap_or_else(|e| panic!("{spec}: {e}"));
    assert_eq!(set.text, spec);
    set.requests
}

fn err(spec: &str, c: &SpecContext<'_>) -> String {
    parse(spec, c)
        .map(|s| panic!("{spec} should fail, got {s:?}"))
        .unwrap_err()
        .to_string()
}

#[test]
fn explicit_counters() {
    // -c pic0=Cycle_cnt,pic1=Instr_cnt
    assert_eq!(
        ok("pic0=cycles,pic1=instructions", &x86()),
        [
            req(0, "cycles", USER, &[]),
            req(1, "instructions", USER, &[])
        ]
    );
}

#[test]
fn bare_events_take_counters_in_order() {
    // -c EC_ref,EC_hit
    assert_eq!(
        ok("page-faults,task-clock", &x86()),
        [
            req(0, "page-faults", USER, &[]),
            req(1, "task-clock", USER, &[])
        ]
    );
}

#[test]
fn numbered_flags_split_user_and_system() {
    // -c inst_retired,inst_retired,nouser1,sys1: pic0 counts user mode, pic1 kernel mode.
    assert_eq!(
        ok("instructions,instructions,nouser1,sys1", &x86()),
        [
            req(0, "instructions", USER, &[]),
            req(1, "instructions", SYS, &[])
        ]
    );
}

#[test]
fn pentium4_style_numbered_attributes() {
    // -c pic12=branch_retired,emask12=0x4,pic14=branch_retired,emask14=0xf,sys
    let p4 = ctx(18, &["emask"]);
    let set = parse(
        "pic12=branch-instructions,emask12=0x4,pic14=branch-instructions,emask14=0xf,sys",
        &p4,
    )
    .unwrap();
    assert_eq!(
        set.requests,
        [
            req(12, "branch-instructions", USER | SYS, &[("emask", 4)]),
            req(14, "branch-instructions", USER | SYS, &[("emask", 0xf)]),
        ]
    );
    assert_eq!(set.pics(), [12, 14]);
}

#[test]
fn bare_event_goes_above_the_highest_assigned() {
    assert_eq!(
        ok("pic2=cycles,page-faults", &x86()),
        [
            req(2, "cycles", USER, &[]),
            req(3, "page-faults", USER, &[])
        ]
    );
    // Requests come out in counter order, not spec order.
    assert_eq!(
        ok("pic1=cycles,pic0=page-faults", &x86()),
        [
            req(0, "page-faults", USER, &[]),
            req(1, "cycles", USER, &[])
        ]
    );
    assert_eq!(
        err("pic3=cycles,page-faults", &x86()),
        "no counter is free for 'page-faults': pic3 is assigned"
    );
    assert_eq!(
        err("page-faults,pic0=cycles", &x86()),
        "repeated 'pic0' token"
    );
}

#[test]
fn attributes_apply_everywhere_or_to_one_counter() {
    assert_eq!(
        ok("cycles,instructions,umask=0x3,edge1,cmask0=2", &x86()),
        [
            req(0, "cycles", USER, &[("umask", 3), ("cmask", 2)]),
            req(1, "instructions", USER, &[("umask", 3), ("edge", 1)]),
        ]
    );
}

#[test]
fn attribute_values_are_strtoll_base_0() {
    let one = |spec: &str| ok(spec, &x86())[0].attrs[0].value;
    assert_eq!(one("cycles,umask=010"), 8, "octal");
    assert_eq!(one("cycles,umask=0x10"), 16, "hex");
    assert_eq!(one("cycles,umask=12junk"), 12, "partial numbers are taken");
    assert_eq!(one("cycles,umask=-1"), u64::MAX, "negative wraps as in C");
    assert_eq!(one("cycles,inv"), 1, "default 1");
    assert_eq!(
        err("cycles,umask=", &x86()),
        "invalid value '' for attribute 'umask'"
    );
    assert_eq!(
        err("cycles,umask=x", &x86()),
        "invalid value 'x' for attribute 'umask'"
    );
}

#[test]
fn flags_ignore_values_and_may_precede_events() {
    assert_eq!(
        ok("nouser1=7,sys=0,pic1=cycles", &x86()),
        [req(1, "cycles", SYS, &[])]
    );
    let set = parse("cycles,nouser,sys", &x86()).unwrap();
    assert!(set.is_system_only());
    assert!(!parse("cycles", &x86()).unwrap().is_system_only());
}

#[test]
fn pic_errors() {
    assert_eq!(
        err("pic0=cycles,pic0=cycles", &x86()),
        "repeated 'pic0' token"
    );
    assert_eq!(err("pic0", &x86()), "missing 'pic0' value");
    assert_eq!(err("pic1=", &x86()), "missing 'pic1' value");
    assert_eq!(
        err("pic0=cyles", &x86()),
        "pic0 cannot measure event 'cyles' on this cpu: unknown event 'cyles'"
    );
}

#[test]
fn unknown_tokens() {
    assert_eq!(err("cycles,foo=1", &x86()), "bad token 'foo=1'");
    assert_eq!(
        err("pic4=cycles", &x86()),
        "bad token 'pic4=cycles'",
        "no pic4 on 4 counters"
    );
    assert_eq!(err("pic01=cycles", &x86()), "bad token 'pic01=cycles'");
    assert_eq!(
        err("cycles,picnum=1", &x86()),
        "bad token 'picnum=1'",
        "users cannot set picnum"
    );
    assert_eq!(err(",cycles", &x86()), "bad token ''");
    assert_eq!(err("cycles,,task-clock", &x86()), "bad token ''");
    assert_eq!(err("cyles", &x86()), "unknown event 'cyles'");
    assert_eq!(err("cycles,umask", &ctx(4, &[])), "unknown event 'umask'");
}

#[test]
fn empty_sets_are_refused_and_trailing_commas_are_not() {
    assert_eq!(err("", &x86()), "no event in specification ''");
    assert_eq!(
        err("sys,nouser", &x86()),
        "no event in specification 'sys,nouser'"
    );
    assert_eq!(ok("cycles,", &x86()), [req(0, "cycles", USER, &[])]);
}

#[test]
fn check_sees_the_event_names() {
    let seen = std::cell::RefCell::new(Vec::new());
    let c = SpecContext {
        npic: 2,
        attributes: vec![],
        check: Box::new(|n: &str| {
            seen.borrow_mut().push(n.to_string());
            Ok(())
        }),
    };
    parse("pic1=a,b", &c).unwrap_err();
    assert_eq!(*seen.borrow(), ["a"], "b has no counter left above pic1");
    parse("x/y/,PAPI_tot_cyc", &c).unwrap();
    assert_eq!(seen.borrow()[1..], ["x/y/", "PAPI_tot_cyc"]);
}

#[test]
fn pmu_terms_keep_their_commas() {
    let c = ctx(4, &["umask"]);
    let any = SpecContext {
        check: Box::new(|_: &str| Ok(())),
        ..c
    };
    assert_eq!(
        ok("pic1=cpu/event=0x3c,umask=0x1/,msr/tsc/,umask=2", &any),
        [
            req(1, "cpu/event=0x3c,umask=0x1/", USER, &[("umask", 2)]),
            req(2, "msr/tsc/", USER, &[("umask", 2)]),
        ]
    );
    assert_eq!(err("x=cpu/event=1/", &any), "bad token 'x=cpu/event=1/'");
}
