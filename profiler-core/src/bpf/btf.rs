//! Field offsets in the kernel's own structs, read from its BTF (`/sys/kernel/btf/vmlinux`),
//! for programs that read a kernel struct without CO-RE (the Python walker reads the
//! task's `thread.fsbase`). Only what that needs: the type section walked once, structs
//! found by name, members followed by name through typedefs and qualifiers.
//!
//! Written here rather than taken from a crate: `aya-obj` keeps its member accessors
//! private, and `btf-rs` is LGPL, which this MIT/Apache project does not link.

/// `BTF_KIND_*` values this reader looks at.
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_TYPE_TAG: u32 = 18;

const MAGIC: u16 = 0xeb9f;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("BTF: {0}")]
    Malformed(&'static str),
    #[error("BTF: no struct {0}")]
    NoStruct(String),
    #[error("BTF: struct {parent} has no member {member}")]
    NoMember { parent: String, member: String },
    #[error("BTF: {0} is a bit field")]
    BitField(String),
}

/// One type's fixed part and where its trailing data starts.
#[derive(Clone, Copy)]
struct Type {
    name_off: u32,
    info: u32,
    size_or_type: u32,
    data: usize,
}

impl Type {
    fn kind(&self) -> u32 {
        (self.info >> 24) & 0x1f
    }

    fn vlen(&self) -> usize {
        (self.info & 0xffff) as usize
    }

    fn kind_flag(&self) -> bool {
        self.info >> 31 != 0
    }
}

/// A BTF blob's types, indexed by id.
pub struct Btf<'a> {
    blob: &'a [u8],
    strings: &'a [u8],
    /// `types[id - 1]`.
    types: Vec<Type>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl<'a> Btf<'a> {
    pub fn parse(blob: &'a [u8]) -> Result<Self, BtfError> {
        let bad = BtfError::Malformed;
        let magic = u16::from_le_bytes(
            blob.get(0..2)
                .ok_or(bad("short header"))?
                .try_into()
                .unwrap(),
        );
        if magic != MAGIC {
            return Err(bad("not little-endian BTF"));
        }
        let field = |at| {
            u32_at(blob, at)
                .map(|v| v as usize)
                .ok_or(bad("short header"))
        };
        let hdr_len = field(4)?;
        let (type_off, type_len) = (field(8)?, field(12)?);
        let (str_off, str_len) = (field(16)?, field(20)?);
        let types_at = hdr_len + type_off;
        let strings = blob
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .ok_or(bad("strings out of the blob"))?;
        let end = types_at + type_len;
        if end > blob.len() {
            return Err(bad("types out of the blob"));
        }
        let mut types = Vec::new();
        let mut at = types_at;
        while at < end {
            let word = |i: usize| u32_at(blob, at + 4 * i).ok_or(bad("truncated type"));
            let t = Type {
                name_off: word(0)?,
                info: word(1)?,
                size_or_type: word(2)?,
                data: at + 12,
            };
            // Bytes after the fixed part, per kind (the kernel's btf.rst).
            let extra = match t.kind() {
                1 | 14 | 17 => 4,                 // INT, VAR, DECL_TAG
                3 => 12,                          // ARRAY
                4 | 5 | 15 | 19 => 12 * t.vlen(), // STRUCT, UNION, DATASEC, ENUM64
                6 | 13 => 8 * t.vlen(),           // ENUM, FUNC_PROTO
                2 | 7..=12 | 16 | 18 => 0,
                _ => return Err(bad("unknown kind")),
            };
            types.push(t);
            at = t.data + extra;
        }
        Ok(Self {
            blob,
            strings,
            types,
        })
    }

    fn name(&self, off: u32) -> &[u8] {
        let s = self.strings.get(off as usize..).unwrap_or(&[]);
        &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
    }

    fn get(&self, id: u32) -> Option<&Type> {
        self.types.get((id as usize).checked_sub(1)?)
    }

    /// Follows typedefs and qualifiers to the type they name.
    fn resolve(&self, mut id: u32) -> Option<&Type> {
        for _ in 0..32 {
            let t = self.get(id)?;
            match t.kind() {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type;
                }
                _ => return Some(t),
            }
        }
        None
    }

    /// Byte offset of `path` (member names, each in the struct the one before names) from
    /// the start of struct `name`.
    pub fn member_offset(&self, name: &str, path: &[&str]) -> Result<u32, BtfError> {
        let mut t = *self
            .types
            .iter()
            .find(|t| {
                t.kind() == KIND_STRUCT && t.vlen() > 0 && self.name(t.name_off) == name.as_bytes()
            })
            .ok_or_else(|| BtfError::NoStruct(name.to_string()))?;
        let mut offset = 0u32;
        let mut parent = name.to_string();
        for member in path {
            let (bits, ty) = self.member(&t, member).ok_or_else(|| BtfError::NoMember {
                parent: parent.clone(),
                member: member.to_string(),
            })?;
            if bits % 8 != 0 {
                return Err(BtfError::BitField(member.to_string()));
            }
            offset += bits / 8;
            parent = member.to_string();
            t = match self.resolve(ty) {
                Some(next) => *next,
                None => return Err(BtfError::Malformed("member of no type")),
            };
        }
        Ok(offset)
    }

    /// A struct or union member by name: its bit offset and type id.
    fn member(&self, t: &Type, name: &str) -> Option<(u32, u32)> {
        if t.kind() != KIND_STRUCT && t.kind() != KIND_UNION {
            return None;
        }
        (0..t.vlen()).find_map(|i| {
            let at = t.data + 12 * i;
            let name_off = u32_at(self.blob, at)?;
            let ty = u32_at(self.blob, at + 4)?;
            let raw = u32_at(self.blob, at + 8)?;
            let bits = if t.kind_flag() { raw & 0xff_ffff } else { raw };
            (self.name(name_off) == name.as_bytes()).then_some((bits, ty))
        })
    }
}

/// The offset of `thread.fsbase` in this kernel's `task_struct`: where the Python walker
/// finds a task's thread pointer.
pub fn task_fsbase_offset() -> Result<u32, BtfError> {
    let [fsbase] = task_member_offsets([&["thread", "fsbase"]])?;
    Ok(fsbase)
}

/// The offsets of `se.sum_exec_runtime` and `se.prev_sum_exec_runtime` in this kernel's
/// `task_struct`: how long a task has run since the scheduler last gave it the CPU.
pub fn task_runtime_offsets() -> Result<(u32, u32), BtfError> {
    let [sum, prev] = task_member_offsets([
        &["se", "sum_exec_runtime"],
        &["se", "prev_sum_exec_runtime"],
    ])?;
    Ok((sum, prev))
}

/// The offsets of `paths` in this kernel's `task_struct`, from one read of its BTF (a few
/// MiB, not kept).
fn task_member_offsets<const N: usize>(paths: [&[&str]; N]) -> Result<[u32; N], BtfError> {
    let blob = std::fs::read("/sys/kernel/btf/vmlinux")
        .map_err(|_| BtfError::Malformed("/sys/kernel/btf/vmlinux cannot be read"))?;
    let btf = Btf::parse(&blob)?;
    let mut out = [0; N];
    for (o, path) in out.iter_mut().zip(paths) {
        *o = btf.member_offset("task_struct", path)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A blob with `struct inner { int a; long b; }` and `struct outer { char c; const
    /// inner_t in; }` (through a typedef and a const).
    fn blob() -> Vec<u8> {
        let strings = b"\0int\0long\0inner\0a\0b\0outer\0c\0in\0inner_t\0";
        let s = |name: &str| {
            let needle = format!("\0{name}\0");
            let hay = std::str::from_utf8(strings).unwrap();
            (hay.find(&needle).unwrap() + 1) as u32
        };
        let mut types: Vec<u32> = Vec::new();
        // 1: int (4 bytes), 2: long (8 bytes)
        types.extend([s("int"), 1 << 24, 4, 32]);
        types.extend([s("long"), 1 << 24, 8, 64]);
        // 3: struct inner { a: int @0, b: long @64 bits }
        types.extend([s("inner"), (4 << 24) | 2, 16, s("a"), 1, 0, s("b"), 2, 64]);
        // 4: typedef inner_t -> 3, 5: const -> 4
        types.extend([s("inner_t"), 8 << 24, 3]);
        types.extend([0, 10 << 24, 4]);
        // 6: struct outer { c: int @0, in: const inner_t @64 bits }
        types.extend([s("outer"), (4 << 24) | 2, 24, s("c"), 1, 0, s("in"), 5, 64]);
        let type_bytes: Vec<u8> = types.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut out = Vec::new();
        out.extend(MAGIC.to_le_bytes());
        out.extend([1u8, 0]);
        for w in [
            24u32,
            0,
            type_bytes.len() as u32,
            type_bytes.len() as u32,
            strings.len() as u32,
        ] {
            out.extend(w.to_le_bytes());
        }
        out.extend(type_bytes);
        out.extend(strings);
        out
    }

    #[test]
    fn member_offsets_follow_typedefs_and_qualifiers() {
        let b = blob();
        let btf = Btf::parse(&b).unwrap();
        assert_eq!(btf.member_offset("inner", &["b"]), Ok(8));
        assert_eq!(btf.member_offset("outer", &["in", "b"]), Ok(16));
        assert_eq!(btf.member_offset("outer", &["c"]), Ok(0));
        assert!(matches!(
            btf.member_offset("outer", &["in", "z"]),
            Err(BtfError::NoMember { .. })
        ));
        assert!(matches!(
            btf.member_offset("nope", &[]),
            Err(BtfError::NoStruct(_))
        ));
        assert!(Btf::parse(&b[..10]).is_err());
    }

    /// This kernel's BTF, or `None` (said) where it has none.
    fn vmlinux() -> Option<Vec<u8>> {
        let blob = std::fs::read("/sys/kernel/btf/vmlinux").ok();
        if blob.is_none() {
            eprintln!("skipped: no /sys/kernel/btf/vmlinux");
        }
        blob
    }

    #[test]
    fn this_kernels_task_fsbase_is_inside_task_struct() {
        let Some(blob) = vmlinux() else {
            return;
        };
        let btf = Btf::parse(&blob).unwrap();
        let thread = btf.member_offset("task_struct", &["thread"]).unwrap();
        let fsbase = task_fsbase_offset().unwrap();
        // thread_struct on x86-64 starts with its TLS descriptors; fsbase follows them.
        assert!(
            fsbase > thread && fsbase < thread + 256,
            "{thread} {fsbase}"
        );
        assert_eq!(fsbase % 8, 0);
    }

    #[test]
    fn this_kernels_task_run_times_are_in_its_sched_entity() {
        let Some(blob) = vmlinux() else {
            return;
        };
        let btf = Btf::parse(&blob).unwrap();
        let se = btf.member_offset("task_struct", &["se"]).unwrap();
        let (sum, prev) = task_runtime_offsets().unwrap();
        // Both u64 fields of struct sched_entity, the previous sum just after the sum.
        assert!(sum > se && prev > se && sum < se + 512, "{se} {sum} {prev}");
        assert_eq!(prev, sum + 8, "{sum} {prev}");
    }
}
