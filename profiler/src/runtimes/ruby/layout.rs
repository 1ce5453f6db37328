//! CRuby's struct layouts by minor release (x86-64), for the kernel walker
//! ([`profiler_common::ruby::RubyProc`]) and for naming frames in user space.
//!
//! Where the numbers come from (no release publishes its own, and a distribution's build
//! has no debug information):
//! - 3.1: compiled `offsetof()` against Debian's `rb_mjit_min_header-3.1.2.h` (ruby3.1-dev:
//!   the VM's internal structs as this very build configured them); the test
//!   `debian_3_1_2_offsets_as_compiled` holds the numbers that program printed.
//! - every release: `offset_of!` over rbspy 0.51.0's bindgen of each release's own headers
//!   (`ruby-structs/src/ruby_X_Y_Z.rs`), for 2.6.0/2.6.10, 2.7.0/2.7.8, 3.0.0/3.0.7,
//!   3.1.0/3.1.2, 3.2.0/3.2.9, 3.3.0/3.3.9, 3.4.0/3.4.7 (first and a late patch agree on
//!   every field here), in a scratch program not kept; `tLAST_OP_ID` and `RUBY_FL_SINGLETON`
//!   from the same bindings' constants.
//! - structs those bindings leave opaque: `succ_index_table` (iseq.c, unchanged since 2.6,
//!   read in `lines.rs`), `rb_symbols_t.ids` at 16 (symbol.c: a 4-byte serial padded, a
//!   pointer, then `ids`; 3.4.6's rewrite kept it at 16), the `RString`/`RArray` flag bits
//!   (3.1 from the MJIT header; 3.2+ `include/ruby/internal/core/r{string,array}.h`: the
//!   embedded array length grew to 7 bits with variable-width allocation).

use std::fmt;

use profiler_common::ruby::NONE;

/// A Ruby release: `ruby_version`'s `"3.1.2"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u8,
    pub minor: u8,
    pub patch: u8,
}

impl Version {
    pub const fn new(major: u8, minor: u8, patch: u8) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// `"3.1.2"`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Version> {
        let mut parts = s.trim().split('.');
        let mut next = || parts.next()?.parse::<u8>().ok();
        let v = Version::new(next()?, next()?, next()?);
        parts.next().is_none().then_some(v)
    }

    /// As `RubyProc::version` holds it.
    pub fn hex(self) -> u32 {
        profiler_common::ruby::ruby_version(self.major, self.minor, self.patch)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    #[error("Ruby {0} is not one we have struct offsets for (2.6 to 3.4)")]
    Unknown(Version),
}

/// How a `String`'s length and characters are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StringLayout {
    /// Up to 3.1: an embedded string's length is in `flags` bits 14-18 and its characters
    /// at 16; a heap string has `len` at 16 and `ptr` at 24.
    FlagsLen,
    /// 3.2+: `len` at 16 always; characters at 24 when embedded, else `ptr` at 24.
    FieldLen,
}

/// Where a class's path (`"Foo::Bar"`) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassPath {
    /// 3.2 keeps it in the hidden instance variable `__classpath__` under object shapes:
    /// not read yet, so frames carry their method name alone.
    NotRead,
    /// Up to 3.1: the hidden instance variable `__classpath__` (a dynamic ID, found by
    /// name) in the `st_table` at `RClass.ptr` (the classext) `->iv_tbl`; a singleton
    /// class's object is its `__attached__` ivar (a static ID, `attached_id`).
    IvTable {
        classext_ptr: u16,
        iv_tbl: u16,
        attached_id: u64,
    },
    /// 3.3+: `rb_classext_t` follows the `RClass` (at `classext`), with `classpath` and, for
    /// a singleton class, `as.singleton_class.attached_object`.
    Classext {
        classext: u16,
        classpath: u16,
        attached_object: u16,
    },
}

/// One minor release's layout. Offsets in bytes; [`NONE`] where the release has no such
/// field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    // What the kernel walker reads (RubyProc).
    pub ec_vm_stack: u16,
    pub ec_vm_stack_size: u16,
    pub ec_cfp: u16,
    pub ec_thread_ptr: u16,
    pub cfp_size: u16,
    pub cfp_pc: u16,
    pub cfp_iseq: u16,
    pub cfp_ep: u16,
    /// `rb_thread_t.nt` (3.2+).
    pub thread_nt: u16,
    /// The `pthread_t`: `rb_thread_t.thread_id` before 3.2, `rb_native_thread.thread_id`.
    pub thread_pthread: u16,
    /// `rb_native_thread.tid` (3.2+).
    pub native_tid: u16,
    /// `rb_ractor_t.threads.running_ec` (3.0+).
    pub ractor_running_ec: u16,

    // What naming reads.
    /// `rb_iseq_t.body`.
    pub iseq_body: u16,
    /// `rb_iseq_constant_body`: `type`, `iseq_size`, `iseq_encoded`.
    pub body_type: u16,
    pub body_iseq_size: u16,
    pub body_iseq_encoded: u16,
    /// `location.{pathobj, base_label, label, first_lineno}`.
    pub body_pathobj: u16,
    pub body_base_label: u16,
    pub body_label: u16,
    pub body_first_lineno: u16,
    /// `first_lineno` is a Fixnum VALUE (up to 3.1), not an `int`.
    pub first_lineno_value: bool,
    /// `insns_info.{body, positions, size, succ_index_table}`.
    pub insns_body: u16,
    pub insns_positions: u16,
    pub insns_size: u16,
    pub insns_succ: u16,
    /// `local_iseq`: the method-level iseq of a block.
    pub body_local_iseq: u16,
    /// `sizeof(struct iseq_insn_info_entry)` (3.1 added `node_id`) and its `line_no`.
    pub insn_info_size: u16,
    pub insn_info_line_no: u16,
    /// `rb_callable_method_entry_t`: `defined_class`, `def`, `owner`; `def->original_id`.
    pub cme_defined_class: u16,
    pub cme_def: u16,
    pub cme_owner: u16,
    pub def_original_id: u16,
    pub string: StringLayout,
    /// `RARRAY_EMBED_LEN_MASK >> RARRAY_EMBED_LEN_SHIFT`.
    pub array_embed_len_mask: u64,
    pub class_path: ClassPath,
    /// `RUBY_FL_SINGLETON` (`FL_USER0` up to 3.3, `FL_USER1` since 3.4).
    pub fl_singleton: u64,
    /// `tLAST_OP_ID`: IDs above it are `serial << 4 | scope`.
    pub last_op_id: u64,
    /// The symbol table's name: `global_symbols` (2.6, static) or `ruby_global_symbols`.
    pub global_symbols: &'static str,
}

/// `ISEQ_TYPE_METHOD`: a method body's iseq (its `base_label` is the method's name).
pub const ISEQ_TYPE_METHOD: u32 = 1;

/// `rb_symbols_t.ids` (2.6 to 3.4).
pub const SYMBOLS_IDS: u64 = 16;
/// `rb_symbols_t.last_id` (a 4-byte serial, 2.6 to 3.4).
pub const SYMBOLS_LAST_ID: u64 = 0;

/// Every name the VM's symbol table (`rb_symbols_t`) has had: `ruby_global_symbols` (2.7+),
/// `global_symbols` (2.6). A layout's `global_symbols` is one of them.
pub const GLOBAL_SYMBOLS_NAMES: [&str; 2] = ["ruby_global_symbols", "global_symbols"];

/// The layout of release `v`, or why there is none.
pub fn for_version(v: Version) -> Result<Layout, LayoutError> {
    let base = LAYOUT_3_1;
    let layout = match (v.major, v.minor) {
        (2, 6) => Layout {
            last_op_id: 164,
            global_symbols: GLOBAL_SYMBOLS_NAMES[1],
            class_path: iv_table(3009),
            ..LAYOUT_2_X
        },
        (2, 7) => LAYOUT_2_X,
        (3, 0) => Layout {
            ec_thread_ptr: 56,
            cfp_size: 56,
            insn_info_size: 8,
            thread_pthread: 80,
            ractor_running_ec: 520,
            last_op_id: 168,
            class_path: iv_table(3073),
            ..base
        },
        (3, 1) => base,
        (3, 2) => LAYOUT_3_2,
        (3, 3) => Layout {
            cfp_size: 56,
            thread_pthread: 16,
            native_tid: 24,
            ractor_running_ec: 384,
            class_path: CLASSEXT,
            ..LAYOUT_3_2
        },
        (3, 4) => Layout {
            cfp_size: 56,
            thread_pthread: 16,
            native_tid: 24,
            ractor_running_ec: 384,
            class_path: CLASSEXT,
            fl_singleton: 1 << 13,
            last_op_id: 170,
            ..LAYOUT_3_2
        },
        _ => return Err(LayoutError::Unknown(v)),
    };
    Ok(layout)
}

/// 2.6 to 3.1: `RClass.ptr` at 24, `rb_classext_t.iv_tbl` at 8 (3.1's MJIT header; 2.6 and
/// 2.7's bindings for the classext, their `internal.h` for `RClass`; 3.0 taken as the two
/// around it, its `internal/class.h` not checked); `id__attached__` from each release's
/// `ruby_method_ids` (3.1: 3089, as the header compiles it).
const fn iv_table(attached_id: u64) -> ClassPath {
    ClassPath::IvTable {
        classext_ptr: 24,
        iv_tbl: 8,
        attached_id,
    }
}

/// 3.3 and 3.4: `sizeof(struct RClass)` 32, `classpath` 120, `attached_object` 96.
const CLASSEXT: ClassPath = ClassPath::Classext {
    classext: 32,
    classpath: 120,
    attached_object: 96,
};

/// 3.1.2, as compiled against Debian's MJIT header (and rbspy's 3.1.0/3.1.2 bindings).
const LAYOUT_3_1: Layout = Layout {
    ec_vm_stack: 0,
    ec_vm_stack_size: 8,
    ec_cfp: 16,
    ec_thread_ptr: 48,
    cfp_size: 64,
    cfp_pc: 0,
    cfp_iseq: 16,
    cfp_ep: 32,
    thread_nt: NONE,
    thread_pthread: 80,
    native_tid: NONE,
    ractor_running_ec: 520,
    iseq_body: 16,
    body_type: 0,
    body_iseq_size: 4,
    body_iseq_encoded: 8,
    body_pathobj: 64,
    body_base_label: 72,
    body_label: 80,
    body_first_lineno: 88,
    first_lineno_value: true,
    insns_body: 120,
    insns_positions: 128,
    insns_size: 136,
    insns_succ: 144,
    body_local_iseq: 176,
    insn_info_size: 12,
    insn_info_line_no: 0,
    cme_defined_class: 8,
    cme_def: 16,
    cme_owner: 32,
    def_original_id: 32,
    string: StringLayout::FlagsLen,
    array_embed_len_mask: 0x3,
    class_path: iv_table(3089),
    fl_singleton: 1 << 12,
    last_op_id: 169,
    global_symbols: GLOBAL_SYMBOLS_NAMES[0],
};

/// 2.7 (2.6 differs only in `tLAST_OP_ID` and the symbol table's name): no ractors, the
/// `pthread_t` at 72, a 56-byte control frame, 8-byte line entries.
const LAYOUT_2_X: Layout = Layout {
    ec_thread_ptr: 56,
    cfp_size: 56,
    thread_pthread: 72,
    ractor_running_ec: NONE,
    insn_info_size: 8,
    last_op_id: 168,
    class_path: iv_table(3073),
    ..LAYOUT_3_1
};

/// 3.2: `rb_native_thread` (`nt` at 40, `thread_id` 8, `tid` 16), `insns_info` and
/// `local_iseq` 8 bytes earlier, `first_lineno` an `int`, strings with a `len` field.
const LAYOUT_3_2: Layout = Layout {
    thread_nt: 40,
    thread_pthread: 8,
    native_tid: 16,
    first_lineno_value: false,
    insns_body: 112,
    insns_positions: 120,
    insns_size: 128,
    insns_succ: 136,
    body_local_iseq: 168,
    string: StringLayout::FieldLen,
    array_embed_len_mask: 0x7f,
    class_path: ClassPath::NotRead,
    ..LAYOUT_3_1
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_print() {
        assert_eq!(Version::parse("3.1.2"), Some(Version::new(3, 1, 2)));
        assert_eq!(Version::parse(" 2.7.8\n"), Some(Version::new(2, 7, 8)));
        for bad in ["3.1", "3.1.2.1", "x.1.2", "", "3.1.300"] {
            assert_eq!(Version::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Version::new(3, 4, 7).to_string(), "3.4.7");
        assert_eq!(Version::new(3, 4, 7).hex(), 0x030407);
    }

    #[test]
    fn an_unknown_release_is_named() {
        for v in [
            Version::new(2, 5, 9),
            Version::new(3, 5, 0),
            Version::new(4, 0, 1),
        ] {
            let e = for_version(v).unwrap_err();
            assert_eq!(e, LayoutError::Unknown(v));
            assert!(e.to_string().contains(&v.to_string()), "{e}");
        }
    }

    /// The numbers `offsetof()` printed, compiled against Debian's
    /// `/usr/include/x86_64-linux-gnu/ruby-3.1.0/rb_mjit_min_header-3.1.2.h` (the installed
    /// ruby3.1-dev): the build's own configuration.
    #[test]
    fn debian_3_1_2_offsets_as_compiled() {
        let l = for_version(Version::new(3, 1, 2)).unwrap();
        let got = [
            l.ec_vm_stack,
            l.ec_vm_stack_size,
            l.ec_cfp,
            l.ec_thread_ptr,
            l.cfp_size,
            l.cfp_pc,
            l.cfp_iseq,
            l.cfp_ep,
            l.iseq_body,
            l.body_iseq_size,
            l.body_iseq_encoded,
            l.body_pathobj,
            l.body_base_label,
            l.body_label,
            l.body_first_lineno,
            l.insns_body,
            l.insns_positions,
            l.insns_size,
            l.insns_succ,
            l.body_local_iseq,
            l.insn_info_size,
            l.cme_defined_class,
            l.cme_def,
            l.cme_owner,
            l.def_original_id,
            l.thread_pthread,
        ];
        let printed = [
            0, 8, 16, 48, 64, 0, 16, 32, 16, 4, 8, 64, 72, 80, 88, 120, 128, 136, 144, 176, 12, 8,
            16, 32, 32, 80,
        ];
        assert_eq!(got, printed);
        // RSTRING_EMBED_LEN_MASK 0x7c000 (shift 14), RARRAY_EMBED_LEN_MASK 0x18000 (shift
        // 15), tLAST_OP_ID 169, RUBY_FL_SINGLETON 4096; RClass.ptr 24, classext.iv_tbl 8,
        // id__attached__ 3089.
        assert_eq!(l.string, StringLayout::FlagsLen);
        assert_eq!(l.array_embed_len_mask << 15, 0x18000);
        assert_eq!((l.last_op_id, l.fl_singleton), (169, 4096));
        assert_eq!(l.class_path, iv_table(3089));
    }

    /// Where releases differ, as rbspy's bindings of each release's headers say (and the
    /// OTel agent's table agrees: control frame 56/64/56, line entry 8/12, running_ec
    /// 0x208/0x180).
    #[test]
    fn what_changes_between_releases() {
        let at =
            |minor: u8| for_version(Version::new(if minor < 10 { 2 } else { 3 }, minor % 10, 0));
        let rows: Vec<_> = [6, 7, 10, 11, 12, 13, 14]
            .into_iter()
            .map(|m| {
                let l = at(m).unwrap();
                (
                    l.ec_thread_ptr,
                    l.cfp_size,
                    l.insn_info_size,
                    l.insns_body,
                    l.body_local_iseq,
                    l.ractor_running_ec,
                    l.thread_pthread,
                    l.last_op_id,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (56, 56, 8, 120, 176, NONE, 72, 164),
                (56, 56, 8, 120, 176, NONE, 72, 168),
                (56, 56, 8, 120, 176, 520, 80, 168),
                (48, 64, 12, 120, 176, 520, 80, 169),
                (48, 64, 12, 112, 168, 520, 8, 169),
                (48, 56, 12, 112, 168, 384, 16, 169),
                (48, 56, 12, 112, 168, 384, 16, 170),
            ]
        );
        let l34 = at(14).unwrap();
        assert_eq!(l34.fl_singleton, 1 << 13);
        assert_eq!(at(13).unwrap().class_path, CLASSEXT);
        assert_eq!(at(12).unwrap().class_path, ClassPath::NotRead);
        assert_eq!(at(11).unwrap().class_path, iv_table(3089));
        assert_eq!(at(6).unwrap().class_path, iv_table(3009));
        assert_eq!(at(6).unwrap().global_symbols, "global_symbols");
    }
}
