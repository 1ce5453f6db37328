//! The JVM's version, from `Abstract_VM_Version`'s statics in the live process.

use super::vmstructs::VmStructs;
use crate::runtimes::shared::memory::{Memory, ReadError, read_cstr};

/// The JVM's version, from `Abstract_VM_Version`'s statics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JvmVersion {
    pub major: u32,
    pub minor: u32,
    pub security: u32,
    pub build: u32,
    /// `_s_vm_release`, e.g. `17.0.15+6-Debian-1deb12u1`.
    pub release: String,
}

impl std::fmt::Display for JvmVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.release.is_empty() {
            write!(
                f,
                "{}.{}.{}+{}",
                self.major, self.minor, self.security, self.build
            )
        } else {
            f.write_str(&self.release)
        }
    }
}

/// The version statics of the JVM whose tables are `t` (read from the process:
/// `_s_vm_release` points into libjvm's strings). `None` without a major version; the other
/// parts are 0 when missing.
pub fn read_version<M: Memory + ?Sized>(
    mem: &M,
    t: &VmStructs,
) -> Result<Option<JvmVersion>, ReadError> {
    let at = |f: &str| {
        t.field("Abstract_VM_Version", f)
            .filter(|f| f.is_static)
            .map(|f| f.offset_or_address)
    };
    let int = |f: &str| -> Result<Option<u32>, ReadError> {
        let Some(addr) = at(f) else { return Ok(None) };
        let mut b = [0u8; 4];
        mem.read(addr, &mut b)?;
        Ok(Some(u32::from_le_bytes(b)))
    };
    let Some(major) = int("_vm_major_version")? else {
        return Ok(None);
    };
    let release = match at("_s_vm_release") {
        Some(addr) => match mem.read_u64(addr)? {
            0 => String::new(),
            p => read_cstr(mem, p, 128)?,
        },
        None => String::new(),
    };
    Ok(Some(JvmVersion {
        major,
        minor: int("_vm_minor_version")?.unwrap_or(0),
        security: int("_vm_security_version")?.unwrap_or(0),
        build: int("_vm_build_number")?.unwrap_or(0),
        release,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::{hotspot::vmstructs::Field, shared::memory::FakeMemory};

    #[test]
    fn version_from_statics() {
        let mut t = VmStructs::default();
        let mut put = |name: &str, ty: &str, addr: u64| {
            t.fields.insert(
                ("Abstract_VM_Version".into(), name.into()),
                Field {
                    type_string: ty.into(),
                    is_static: true,
                    offset_or_address: addr,
                },
            );
        };
        put("_vm_major_version", "int", 0x1000);
        put("_vm_minor_version", "int", 0x1004);
        put("_vm_security_version", "int", 0x1008);
        put("_vm_build_number", "int", 0x100c);
        put("_s_vm_release", "const char*", 0x1010);
        let mut m = FakeMemory::default();
        let mut b = Vec::new();
        for v in [17u32, 0, 15, 6] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&0x2000u64.to_le_bytes());
        m.put(0x1000, &b);
        let mut s = b"17.0.15+6-Debian-1deb12u1\0".to_vec();
        s.resize(128, 0);
        m.put(0x2000, &s);
        let v = read_version(&m, &t).unwrap().expect("a version");
        assert_eq!((v.major, v.minor, v.security, v.build), (17, 0, 15, 6));
        assert_eq!(v.to_string(), "17.0.15+6-Debian-1deb12u1");
        t.fields.clear();
        assert_eq!(read_version(&m, &t).unwrap(), None);
    }
}
