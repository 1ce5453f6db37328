//! Every offset the HotSpot walk and the naming use, typed, from one JVM's VMStructs. A field
//! missing from the tables is one clear error naming it: nothing is walked with a guess. The
//! few facts VMStructs does not export (interpreter frame slots on x86_64, the line table's
//! flag bit on 25) are constants of this file, listed in [`Layout::derived`].

use super::version::JvmVersion;
use super::vmstructs::{Field, VmStructs};
use crate::runtimes::shared::memory::{Memory, ReadError};

/// Why a HotSpot build is not walked: one line for the user.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error("HotSpot {version}: {what} is missing from VMStructs")]
    Missing { version: String, what: String },
    #[error("HotSpot {version}: {what}")]
    Layout { version: String, what: String },
}

/// A scalar field: where, how wide, and whether signed (from VMStructs' type string).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scalar {
    pub offset: u16,
    pub size: u8,
    pub signed: bool,
}

impl Scalar {
    /// The field in the object at `base`, widened to i64.
    pub fn read<M: Memory + ?Sized>(&self, mem: &M, base: u64) -> Result<i64, ReadError> {
        let mut b = [0u8; 8];
        let n = usize::from(self.size);
        mem.read(base + u64::from(self.offset), &mut b[..n])?;
        let v = u64::from_le_bytes(b);
        let shift = 64 - 8 * u32::from(self.size);
        Ok(if self.signed {
            ((v << shift) as i64) >> shift
        } else {
            v as i64
        })
    }
}

/// `CodeCache` and its heaps (JDK 9+: one to three `CodeHeap`s, each with a segment map).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeCacheLayout {
    /// Addresses of the statics `CodeCache::_heaps` (a `GrowableArray<CodeHeap*>*`),
    /// `_low_bound` and `_high_bound`.
    pub heaps: u64,
    pub low_bound: u64,
    pub high_bound: u64,
    pub array_len: Scalar,
    pub array_data: u16,
    pub heap_memory: u16,
    pub heap_segmap: u16,
    pub heap_log2_segment_size: Scalar,
    pub space_low_boundary: u16,
    pub space_high_boundary: u16,
    pub space_high: u16,
    /// `sizeof(HeapBlock)`: the block header before each CodeBlob.
    pub heap_block_size: u16,
    pub block_used: Scalar,
}

/// Where a blob's instructions start: a pointer (≤ 22) or an offset from the blob (23+).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeStart {
    Pointer { begin: u16 },
    Offset { code: Scalar },
}

/// `CodeBlob`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobLayout {
    pub name: u16,
    pub size: Scalar,
    /// Offset from the code start where the frame is built (`int` ≤ 22, `int16_t` 23+).
    pub frame_complete_offset: Scalar,
    /// In words.
    pub frame_size: Scalar,
    pub code: CodeStart,
}

/// Where the deoptimisation handler is: a pointer (≤ 22) or an offset from the blob (23+).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeoptHandler {
    Pointer(u16),
    Offset(Scalar),
}

/// Where the verified entry point is (after the inline cache check): a pointer (≤ 22) or an
/// offset from the code start (23+).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifiedEntry {
    Pointer(u16),
    Offset(Scalar),
}

/// Where an nmethod keeps its PcDescs, scopes data and metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugData {
    /// JDK ≤ 22: all inside the blob: metadata at `metadata`, scopes data from the pointer
    /// `scopes_data_begin` to `scopes_pcs`, PcDescs from there to `dependencies` (offsets
    /// from the nmethod).
    InBlob {
        scopes_data_begin: u16,
        metadata: Scalar,
        scopes_pcs: Scalar,
        dependencies: Scalar,
    },
    /// JDK 23+: PcDescs and scopes data in a separate immutable block (offsets from
    /// `_immutable_data`), metadata after the relocations in the mutable block.
    Split {
        immutable_data: u16,
        immutable_size: Scalar,
        scopes_pcs: Scalar,
        scopes_data: Scalar,
        mutable_data: u16,
        mutable_size: Scalar,
        relocation_size: Scalar,
    },
}

/// `nmethod` (and 17's `CompiledMethod` above it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NmethodLayout {
    pub method: u16,
    pub compile_id: Scalar,
    /// `CompLevel`: an `int` enum on 17, one byte on 25; levels fit the low byte.
    pub comp_level: u16,
    pub entry_bci: Scalar,
    pub orig_pc_offset: Scalar,
    pub deopt_handler: DeoptHandler,
    /// `None` when the build exports neither (then a frame stopped in its prologue is not
    /// walked).
    pub verified_entry: Option<VerifiedEntry>,
    pub debug: DebugData,
    pub pc_desc_size: u16,
    pub pc_desc_pc_offset: u16,
    pub pc_desc_scope_decode_offset: u16,
}

/// Method, ConstMethod, ConstantPool, Klass and Symbol: metaspace, never moved by GC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodLayout {
    pub const_method: u16,
    pub cm_constants: u16,
    pub cm_flags: Scalar,
    /// The flag bit saying a compressed line table follows the bytecodes.
    pub has_linenumber_table: u32,
    pub cm_code_size: Scalar,
    pub cm_name_index: Scalar,
    pub cm_signature_index: Scalar,
    /// `sizeof(ConstMethod)`: the bytecodes follow it.
    pub cm_size: u16,
    pub cp_pool_holder: u16,
    pub cp_source_file_name_index: Scalar,
    /// `sizeof(ConstantPool)`: its 8-byte entries follow it.
    pub cp_size: u16,
    pub klass_name: u16,
    pub symbol_length: Scalar,
    pub symbol_body: u16,
}

/// The template interpreter: its code, and its frames' slots (bytes from the frame pointer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterpreterLayout {
    /// Address of the static `AbstractInterpreter::_code` (a `StubQueue*`).
    pub code: u64,
    pub stub_buffer: u16,
    pub buffer_limit: Scalar,
    pub sender_sp: i8,
    pub last_sp: i8,
    pub method: i8,
    pub bcp: i8,
}

/// Everything the walk and the naming need from one HotSpot build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: JvmVersion,
    pub code_cache: CodeCacheLayout,
    pub blob: BlobLayout,
    pub nmethod: NmethodLayout,
    pub method: MethodLayout,
    pub interpreter: InterpreterLayout,
    /// Address of the static `StubRoutines::_call_stub_return_address`: where Java code
    /// returns into the call stub (native code called Java there).
    pub call_stub_return: u64,
    /// Compressed streams exclude the byte 0 (UNSIGNED5's `X`): 1 from 20.0.0+15, else 0.
    pub unsigned5_x: u8,
    /// Facts taken from HotSpot's sources rather than VMStructs.
    pub derived: Vec<&'static str>,
}

/// x86_64 interpreter frame slots, in words from fp (`frame_x86.hpp`, JDK 9+; not exported).
const INTERPRETER_METHOD_SLOT: i8 = -3;
const INTERPRETER_BCP_SLOT: i8 = -8;

/// Reading a layout: the tables plus the version for messages.
struct Reader<'a> {
    t: &'a VmStructs,
    version: String,
}

impl Reader<'_> {
    fn missing(&self, what: String) -> Unsupported {
        Unsupported::Missing {
            version: self.version.clone(),
            what,
        }
    }

    fn bad(&self, what: String) -> Unsupported {
        Unsupported::Layout {
            version: self.version.clone(),
            what,
        }
    }

    /// The first of `names` (type, field) present.
    fn any(&self, names: &[(&str, &str)]) -> Result<&Field, Unsupported> {
        names
            .iter()
            .find_map(|(ty, f)| self.t.field(ty, f))
            .ok_or_else(|| {
                let all: Vec<String> = names.iter().map(|(t, f)| format!("{t}::{f}")).collect();
                self.missing(all.join(" (or ") + &")".repeat(names.len() - 1))
            })
    }

    fn member(&self, ty: &str, f: &str) -> Result<u16, Unsupported> {
        self.member_of(&[(ty, f)])
    }

    fn member_of(&self, names: &[(&str, &str)]) -> Result<u16, Unsupported> {
        let field = self.any(names)?;
        let (ty, f) = names[0];
        if field.is_static {
            return Err(self.bad(format!("{ty}::{f} is static, not a member")));
        }
        u16::try_from(field.offset_or_address)
            .map_err(|_| self.bad(format!("{ty}::{f} at offset {}", field.offset_or_address)))
    }

    fn scalar(&self, ty: &str, f: &str) -> Result<Scalar, Unsupported> {
        self.scalar_of(&[(ty, f)])
    }

    fn scalar_of(&self, names: &[(&str, &str)]) -> Result<Scalar, Unsupported> {
        let offset = self.member_of(names)?;
        let field = self.any(names)?;
        let (size, signed) = scalar_type(&field.type_string).ok_or_else(|| {
            let (ty, f) = names[0];
            self.bad(format!("{ty}::{f} has type {}", field.type_string))
        })?;
        Ok(Scalar {
            offset,
            size,
            signed,
        })
    }

    fn static_(&self, ty: &str, f: &str) -> Result<u64, Unsupported> {
        let field = self.any(&[(ty, f)])?;
        if !field.is_static {
            return Err(self.bad(format!("{ty}::{f} is a member, not static")));
        }
        Ok(field.offset_or_address)
    }

    fn size(&self, ty: &str) -> Result<u16, Unsupported> {
        let size = *self
            .t
            .types
            .get(ty)
            .ok_or_else(|| self.missing(format!("sizeof({ty})")))?;
        u16::try_from(size).map_err(|_| self.bad(format!("sizeof({ty}) is {size}")))
    }

    fn int(&self, name: &str) -> Result<i32, Unsupported> {
        self.t
            .ints
            .get(name)
            .copied()
            .ok_or_else(|| self.missing(name.to_string()))
    }
}

/// (bytes, signed) of a scalar VMStructs type string.
fn scalar_type(ty: &str) -> Option<(u8, bool)> {
    let ty = ty
        .trim_start_matches("volatile ")
        .trim_start_matches("const ");
    Some(match ty {
        "int" | "jint" | "int32_t" => (4, true),
        "u4" | "uint32_t" | "unsigned int" | "juint" => (4, false),
        "int16_t" | "short" | "jshort" => (2, true),
        "u2" | "uint16_t" | "unsigned short" | "jushort" => (2, false),
        "signed char" | "int8_t" | "jbyte" => (1, true),
        "u1" | "uint8_t" | "bool" | "char" | "unsigned char" | "jboolean" => (1, false),
        "size_t" | "uint64_t" | "u8" | "uintptr_t" | "address" | "julong" => (8, false),
        "intptr_t" | "int64_t" | "jlong" => (8, true),
        _ if ty.ends_with('*') => (8, false),
        _ => return None,
    })
}

impl Layout {
    /// The layout of a JVM whose tables are `t`, with `version` read from the process.
    pub fn from_tables(t: &VmStructs, version: JvmVersion) -> Result<Layout, Unsupported> {
        let r = Reader {
            t,
            version: version.to_string(),
        };
        let mut derived = Vec::new();

        let code_cache = CodeCacheLayout {
            heaps: r.static_("CodeCache", "_heaps")?,
            low_bound: r.static_("CodeCache", "_low_bound")?,
            high_bound: r.static_("CodeCache", "_high_bound")?,
            array_len: r.scalar("GrowableArrayBase", "_len")?,
            array_data: r.member("GrowableArray<int>", "_data")?,
            heap_memory: r.member("CodeHeap", "_memory")?,
            heap_segmap: r.member("CodeHeap", "_segmap")?,
            heap_log2_segment_size: r.scalar("CodeHeap", "_log2_segment_size")?,
            space_low_boundary: r.member("VirtualSpace", "_low_boundary")?,
            space_high_boundary: r.member("VirtualSpace", "_high_boundary")?,
            space_high: r.member("VirtualSpace", "_high")?,
            heap_block_size: r.size("HeapBlock")?,
            block_used: r.scalar("HeapBlock::Header", "_used")?,
        };

        let code = match r.t.field("CodeBlob", "_code_begin") {
            Some(_) => CodeStart::Pointer {
                begin: r.member("CodeBlob", "_code_begin")?,
            },
            None => CodeStart::Offset {
                code: r.scalar("CodeBlob", "_code_offset")?,
            },
        };
        let blob = BlobLayout {
            name: r.member("CodeBlob", "_name")?,
            size: r.scalar("CodeBlob", "_size")?,
            frame_complete_offset: r.scalar("CodeBlob", "_frame_complete_offset")?,
            frame_size: r.scalar("CodeBlob", "_frame_size")?,
            code,
        };

        let debug = if r.t.field("nmethod", "_immutable_data").is_some() {
            DebugData::Split {
                immutable_data: r.member("nmethod", "_immutable_data")?,
                immutable_size: r.scalar("nmethod", "_immutable_data_size")?,
                scopes_pcs: r.scalar("nmethod", "_scopes_pcs_offset")?,
                scopes_data: r.scalar("nmethod", "_scopes_data_offset")?,
                mutable_data: r.member("CodeBlob", "_mutable_data")?,
                mutable_size: r.scalar("CodeBlob", "_mutable_data_size")?,
                relocation_size: r.scalar("CodeBlob", "_relocation_size")?,
            }
        } else {
            DebugData::InBlob {
                scopes_data_begin: r.member_of(&[
                    ("CompiledMethod", "_scopes_data_begin"),
                    ("nmethod", "_scopes_data_begin"),
                ])?,
                metadata: r.scalar("nmethod", "_metadata_offset")?,
                scopes_pcs: r.scalar("nmethod", "_scopes_pcs_offset")?,
                dependencies: r.scalar("nmethod", "_dependencies_offset")?,
            }
        };
        let deopt_handler = match r.t.field("nmethod", "_deopt_handler_offset") {
            Some(_) => DeoptHandler::Offset(r.scalar("nmethod", "_deopt_handler_offset")?),
            None => DeoptHandler::Pointer(r.member_of(&[
                ("CompiledMethod", "_deopt_handler_begin"),
                ("nmethod", "_deopt_handler_begin"),
            ])?),
        };
        let verified_entry = if r.t.field("nmethod", "_verified_entry_offset").is_some() {
            Some(VerifiedEntry::Offset(
                r.scalar("nmethod", "_verified_entry_offset")?,
            ))
        } else if r.t.field("nmethod", "_verified_entry_point").is_some() {
            Some(VerifiedEntry::Pointer(
                r.member("nmethod", "_verified_entry_point")?,
            ))
        } else {
            None
        };
        let nmethod = NmethodLayout {
            method: r.member_of(&[("nmethod", "_method"), ("CompiledMethod", "_method")])?,
            compile_id: r.scalar("nmethod", "_compile_id")?,
            comp_level: r.member("nmethod", "_comp_level")?,
            entry_bci: r.scalar("nmethod", "_entry_bci")?,
            orig_pc_offset: r.scalar("nmethod", "_orig_pc_offset")?,
            deopt_handler,
            verified_entry,
            debug,
            pc_desc_size: r.size("PcDesc")?,
            pc_desc_pc_offset: r.member("PcDesc", "_pc_offset")?,
            pc_desc_scope_decode_offset: r.member("PcDesc", "_scope_decode_offset")?,
        };

        let cm_flags =
            r.scalar_of(&[("ConstMethod", "_flags"), ("ConstMethod", "_flags._flags")])?;
        let has_linenumber_table = match r
            .int("ConstMethod::_has_linenumber_table")
            .or_else(|_| r.int("ConstMethodFlags::_misc_has_linenumber_table"))
        {
            Ok(bit) => bit as u32,
            Err(_) => {
                derived.push("ConstMethod has_linenumber_table flag (bit 0)");
                1
            }
        };
        let method = MethodLayout {
            const_method: r.member("Method", "_constMethod")?,
            cm_constants: r.member("ConstMethod", "_constants")?,
            cm_flags,
            has_linenumber_table,
            cm_code_size: r.scalar("ConstMethod", "_code_size")?,
            cm_name_index: r.scalar("ConstMethod", "_name_index")?,
            cm_signature_index: r.scalar("ConstMethod", "_signature_index")?,
            cm_size: r.size("ConstMethod")?,
            cp_pool_holder: r.member("ConstantPool", "_pool_holder")?,
            cp_source_file_name_index: r.scalar("ConstantPool", "_source_file_name_index")?,
            cp_size: r.size("ConstantPool")?,
            klass_name: r.member("Klass", "_name")?,
            symbol_length: r.scalar("Symbol", "_length")?,
            symbol_body: r.member_of(&[("Symbol", "_body"), ("Symbol", "_body[0]")])?,
        };

        // The two slots VMStructs exports pin the frame layout the others are taken from.
        let sender_sp = r.int("frame::interpreter_frame_sender_sp_offset")?;
        let last_sp = r.int("frame::interpreter_frame_last_sp_offset")?;
        if (sender_sp, last_sp) != (-1, -2) {
            return Err(r.bad(format!(
                "interpreter frame slots sender_sp {sender_sp}, last_sp {last_sp}: not the \
                 x86_64 layout (-1, -2) whose Method* and bcp slots we know"
            )));
        }
        derived.push("interpreter frame Method* at fp-24, bcp at fp-64 (frame_x86.hpp)");
        let interpreter = InterpreterLayout {
            code: r.static_("AbstractInterpreter", "_code")?,
            stub_buffer: r.member("StubQueue", "_stub_buffer")?,
            buffer_limit: r.scalar("StubQueue", "_buffer_limit")?,
            sender_sp: (sender_sp * 8) as i8,
            last_sp: (last_sp * 8) as i8,
            method: INTERPRETER_METHOD_SLOT * 8,
            bcp: INTERPRETER_BCP_SLOT * 8,
        };

        // UNSIGNED5 with byte 0 excluded: jdk20u commit 8d3399bf, first in 20.0.0+15.
        let v = &version;
        let unsigned5_x = u8::from((v.major, v.minor, v.security, v.build) >= (20, 0, 0, 15));
        Ok(Layout {
            call_stub_return: r.static_("StubRoutines", "_call_stub_return_address")?,
            version,
            code_cache,
            blob,
            nmethod,
            method,
            interpreter,
            unsigned5_x,
            derived,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::hotspot::testdata::{jdk17_tables, jdk25_tables, version};

    #[test]
    fn jdk17_layout() {
        let l = Layout::from_tables(&jdk17_tables(), version(17)).expect("complete");
        assert_eq!(l.blob.name, 96);
        assert_eq!(l.blob.code, CodeStart::Pointer { begin: 32 });
        assert_eq!(
            l.blob.frame_complete_offset,
            Scalar {
                offset: 20,
                size: 4,
                signed: true
            }
        );
        assert_eq!(l.nmethod.method, 112);
        assert_eq!(l.nmethod.deopt_handler, DeoptHandler::Pointer(128));
        assert!(matches!(
            l.nmethod.debug,
            DebugData::InBlob {
                scopes_data_begin: 120,
                ..
            }
        ));
        assert_eq!(l.method.cm_size, 48);
        assert_eq!(
            l.method.cm_flags,
            Scalar {
                offset: 28,
                size: 2,
                signed: false
            }
        );
        assert_eq!(l.method.has_linenumber_table, 1);
        assert_eq!(l.code_cache.heap_block_size, 16);
        assert_eq!(
            (
                l.interpreter.method,
                l.interpreter.bcp,
                l.interpreter.sender_sp
            ),
            (-24, -64, -8)
        );
        assert_eq!(l.unsigned5_x, 0);
    }

    #[test]
    fn jdk25_layout() {
        let l = Layout::from_tables(&jdk25_tables(), version(25)).expect("complete");
        assert_eq!(l.blob.name, 8);
        assert_eq!(
            l.blob.code,
            CodeStart::Offset {
                code: Scalar {
                    offset: 36,
                    size: 4,
                    signed: true
                }
            }
        );
        assert_eq!(
            l.blob.frame_complete_offset,
            Scalar {
                offset: 54,
                size: 2,
                signed: true
            }
        );
        assert_eq!(l.nmethod.method, 80);
        assert!(matches!(
            l.nmethod.deopt_handler,
            DeoptHandler::Offset(Scalar { offset: 176, .. })
        ));
        assert!(matches!(
            l.nmethod.debug,
            DebugData::Split {
                immutable_data: 96,
                ..
            }
        ));
        assert_eq!(l.method.cm_size, 56);
        assert_eq!(
            l.method.cm_flags,
            Scalar {
                offset: 28,
                size: 4,
                signed: false
            }
        );
        assert_eq!(l.code_cache.heap_block_size, 8);
        assert_eq!(l.unsigned5_x, 1);
    }

    #[test]
    fn a_missing_field_is_named() {
        let mut t = jdk17_tables();
        t.fields
            .remove(&("CodeBlob".to_string(), "_frame_size".to_string()));
        let err = Layout::from_tables(&t, version(17)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "HotSpot 17.0.15+6: CodeBlob::_frame_size is missing from VMStructs"
        );
        let mut t = jdk17_tables();
        t.fields
            .remove(&("CompiledMethod".to_string(), "_method".to_string()));
        let err = Layout::from_tables(&t, version(17)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "HotSpot 17.0.15+6: nmethod::_method (or CompiledMethod::_method) is missing from VMStructs"
        );
        let mut t = jdk17_tables();
        t.ints
            .insert("frame::interpreter_frame_sender_sp_offset".into(), -2);
        let err = Layout::from_tables(&t, version(17)).unwrap_err();
        assert!(err.to_string().contains("not the x86_64 layout"), "{err}");
        let mut t = jdk17_tables();
        t.types.remove("PcDesc");
        let err = Layout::from_tables(&t, version(17)).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("sizeof(PcDesc) is missing from VMStructs"),
            "{err}"
        );
    }

    #[test]
    fn unsigned5_exclusion_from_20_0_0_15() {
        let at = |major, build| {
            let mut ver = version(major);
            ver.security = 0;
            ver.build = build;
            Layout::from_tables(&jdk17_tables(), ver)
                .unwrap()
                .unsigned5_x
        };
        assert_eq!(
            (at(19, 36), at(20, 14), at(20, 15), at(21, 1)),
            (0, 0, 1, 1)
        );
    }

    #[test]
    fn scalars_sign_extend() {
        use crate::runtimes::shared::memory::FakeMemory;
        let mut m = FakeMemory::default();
        m.put(0x1000, &[0xfe, 0xff, 0xff, 0xff, 0x05, 0x00]);
        let s = |offset, size, signed| Scalar {
            offset,
            size,
            signed,
        };
        assert_eq!(s(0, 4, true).read(&m, 0x1000).unwrap(), -2);
        assert_eq!(s(0, 2, false).read(&m, 0x1000).unwrap(), 0xfffe);
        assert_eq!(s(4, 2, true).read(&m, 0x1000).unwrap(), 5);
        assert_eq!(scalar_type("volatile signed char"), Some((1, true)));
        assert_eq!(scalar_type("Method*"), Some((8, false)));
        assert_eq!(scalar_type("VirtualSpace"), None);
    }
}
