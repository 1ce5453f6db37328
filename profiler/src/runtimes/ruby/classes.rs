//! A method's class as `rb_profile_frame_classpath` gives it: the path (`Foo::Bar`) of the
//! method entry's `defined_class` (an iclass's module; a singleton class's object when that
//! is a class or module, the method then being `Foo.bar`).
//!
//! Where the path is, by release ([`ClassPath`]): 3.3+ in the classext after the `RClass`;
//! up to 3.1 the hidden instance variable `__classpath__` in the class's `st_table` of
//! ivars, whose ID is dynamic: found once per process by reading the names of a class's
//! ivar IDs (a handful) through the VM's symbol table. 3.2 (object shapes) is not read.

use super::{
    layout::{ClassPath, Layout},
    objects::{T_CLASS, T_ICLASS, T_MASK, T_MODULE, id_name, is_object, read_string},
};
use crate::runtimes::shared::memory::{Memory, ReadError};

/// `RBasic.klass`: an iclass's module.
const BASIC_KLASS: u64 = 8;
/// `st_table.entries_start`, `.entries_bound`, `.entries` (2.4+ open addressing), and a
/// `st_table_entry`'s size (`hash`, `key`, `record`; st.c).
const ST_ENTRIES_START: usize = 32;
const ST_ENTRIES_BOUND: usize = 40;
const ST_ENTRIES: usize = 48;
const ST_ENTRY_BYTES: u64 = 24;
/// Most ivar entries read from one class.
const MAX_IVARS: u64 = 64;
/// The ivar a class's path is kept in, up to 3.1.
const CLASSPATH_IVAR: &str = "__classpath__";

/// Class paths of one process: what it learns once (the `__classpath__` ID).
pub struct ClassPaths {
    /// The VM's symbol table, to find `__classpath__`'s ID up to 3.1.
    symbols: Option<u64>,
    classpath_id: Option<u64>,
}

impl ClassPaths {
    pub fn new(symbols: Option<u64>) -> ClassPaths {
        ClassPaths {
            symbols,
            classpath_id: None,
        }
    }

    /// The path of `class` and whether it is a singleton's; `None` where it is not read in
    /// this release or the class has none (anonymous).
    pub fn path(
        &mut self,
        mem: &dyn Memory,
        layout: &Layout,
        class: u64,
    ) -> Result<Option<(String, bool)>, ReadError> {
        if !is_object(class) || layout.class_path == ClassPath::NotRead {
            return Ok(None);
        }
        let mut klass = class;
        let mut flags = mem.read_u64(klass)?;
        if flags & T_MASK == T_ICLASS {
            klass = mem.read_u64(klass + BASIC_KLASS)?;
            flags = mem.read_u64(klass)?;
        }
        let t = flags & T_MASK;
        if t != T_CLASS && t != T_MODULE {
            return Err(ReadError::invalid("class", klass, format!("type {t:#x}")));
        }
        let singleton = t == T_CLASS && flags & layout.fl_singleton != 0;
        if singleton {
            // `#<Class:...>` for another object's singleton: not shown, as Ruby's own
            // label would need the object's class name.
            let Some(attached) = self.attached(mem, layout, klass)? else {
                return Ok(None);
            };
            let t = if is_object(attached) {
                mem.read_u64(attached)? & T_MASK
            } else {
                0
            };
            if t != T_CLASS && t != T_MODULE {
                return Ok(None);
            }
            klass = attached;
        }
        let Some(path) = self.classpath(mem, layout, klass)? else {
            return Ok(None);
        };
        if !is_object(path) {
            return Ok(None);
        }
        Ok(Some((read_string(mem, layout, path)?, singleton)))
    }

    fn attached(
        &mut self,
        mem: &dyn Memory,
        layout: &Layout,
        klass: u64,
    ) -> Result<Option<u64>, ReadError> {
        match layout.class_path {
            ClassPath::NotRead => Ok(None),
            ClassPath::Classext {
                classext,
                attached_object,
                ..
            } => mem
                .read_u64(klass + u64::from(classext + attached_object))
                .map(Some),
            ClassPath::IvTable { attached_id, .. } => Ok(ivars(mem, layout, klass)?
                .into_iter()
                .find(|&(key, _)| key == attached_id)
                .map(|(_, v)| v)),
        }
    }

    fn classpath(
        &mut self,
        mem: &dyn Memory,
        layout: &Layout,
        klass: u64,
    ) -> Result<Option<u64>, ReadError> {
        match layout.class_path {
            ClassPath::NotRead => Ok(None),
            ClassPath::Classext {
                classext,
                classpath,
                ..
            } => mem
                .read_u64(klass + u64::from(classext + classpath))
                .map(Some),
            ClassPath::IvTable { .. } => {
                let ivars = ivars(mem, layout, klass)?;
                if let Some(id) = self.classpath_id {
                    return Ok(ivars.iter().find(|&&(k, _)| k == id).map(|&(_, v)| v));
                }
                let Some(symbols) = self.symbols else {
                    return Ok(None);
                };
                for (key, value) in ivars {
                    // Deleted entries and IDs not in the table are not it.
                    if id_name(mem, layout, symbols, key).is_ok_and(|n| n == CLASSPATH_IVAR) {
                        self.classpath_id = Some(key);
                        return Ok(Some(value));
                    }
                }
                Ok(None)
            }
        }
    }
}

/// The (ID, value) entries of a class's ivar `st_table` (up to 3.1), at most
/// [`MAX_IVARS`].
fn ivars(mem: &dyn Memory, layout: &Layout, klass: u64) -> Result<Vec<(u64, u64)>, ReadError> {
    let ClassPath::IvTable {
        classext_ptr,
        iv_tbl,
        ..
    } = layout.class_path
    else {
        return Ok(Vec::new());
    };
    let ext = mem.read_u64(klass + u64::from(classext_ptr))?;
    if ext == 0 {
        return Ok(Vec::new());
    }
    let table = mem.read_u64(ext + u64::from(iv_tbl))?;
    if table == 0 {
        return Ok(Vec::new());
    }
    let mut head = [0u8; ST_ENTRIES + 8];
    mem.read(table, &mut head)?;
    let word = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap_or_default());
    let (start, bound, entries) = (
        word(ST_ENTRIES_START),
        word(ST_ENTRIES_BOUND),
        word(ST_ENTRIES),
    );
    let n = bound.saturating_sub(start).min(MAX_IVARS);
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut bytes = vec![0u8; (n * ST_ENTRY_BYTES) as usize];
    mem.read(entries + start * ST_ENTRY_BYTES, &mut bytes)?;
    Ok(bytes
        .chunks_exact(ST_ENTRY_BYTES as usize)
        .map(|e| {
            let w = |at: usize| u64::from_le_bytes(e[at..at + 8].try_into().unwrap_or_default());
            (w(8), w(16))
        })
        .collect())
}

#[cfg(test)]
pub(crate) mod fake {
    //! Classes laid out as each release keeps their paths.

    use super::*;
    use crate::runtimes::ruby::objects::fake::Heap;

    /// A class (or module, `flags`) named `path`, a singleton's `attached` object; up to
    /// 3.1 `ids` gives the `__classpath__` ID.
    pub fn class(
        h: &mut Heap,
        path: Option<&str>,
        flags: u64,
        attached: u64,
        classpath_id: u64,
    ) -> u64 {
        let path = path.map_or(0x8, |p| h.string(p));
        match h.layout.class_path {
            ClassPath::NotRead => h.words(&[flags, 0, 0, 0]),
            ClassPath::Classext {
                classext,
                classpath,
                attached_object,
            } => {
                let mut w = vec![0u64; usize::from(classext + classpath) / 8 + 1];
                w[0] = flags;
                w[usize::from(classext + attached_object) / 8] = attached;
                w[usize::from(classext + classpath) / 8] = path;
                h.words(&w)
            }
            ClassPath::IvTable {
                classext_ptr,
                iv_tbl,
                attached_id,
            } => {
                // A deleted entry, an ordinary ivar, then the hidden ones.
                let mut entries = vec![0, 0x34, 0, 0, (77 << 4) | 1, 0x8];
                if path != 0x8 {
                    entries.extend_from_slice(&[0, classpath_id, path]);
                }
                if attached != 0 {
                    entries.extend_from_slice(&[0, attached_id, attached]);
                }
                let n = entries.len() as u64 / 3;
                let entries = h.words(&entries);
                let table = h.words(&[0, 0, n, 0, 0, n, entries]);
                let mut ext = vec![0u64; usize::from(iv_tbl) / 8 + 1];
                ext[usize::from(iv_tbl) / 8] = table;
                let ext = h.words(&ext);
                let mut w = vec![0u64; usize::from(classext_ptr) / 8 + 1];
                w[0] = flags;
                w[usize::from(classext_ptr) / 8] = ext;
                h.words(&w)
            }
        }
    }

    pub fn iclass_of(h: &mut Heap, module: u64) -> u64 {
        h.words(&[T_ICLASS, module, 0, 0])
    }
}

#[cfg(test)]
mod tests {
    use super::{fake::*, *};
    use crate::runtimes::ruby::{
        layout::{Version, for_version},
        objects::fake::Heap,
    };

    /// Plain classes, singletons, iclasses and anonymous classes on a release of each way
    /// (3.1's ivar table, 3.4's classext), and none on 3.2.
    #[test]
    fn class_paths_by_release() {
        for v in [
            Version::new(3, 1, 2),
            Version::new(2, 6, 0),
            Version::new(3, 4, 1),
        ] {
            let layout = for_version(v).unwrap();
            let mut h = Heap::new(layout);
            // Serial 900 is `__classpath__`; the ordinary ivar (serial 77) has no name.
            let ids = h.symbols(900, &[CLASSPATH_IVAR]);
            let cp = (900 << 4) | 1;
            let foo = class(&mut h, Some("Foo::Bar"), T_CLASS, 0, cp);
            let meta = class(&mut h, None, T_CLASS | layout.fl_singleton, foo, cp);
            let module = class(&mut h, Some("Enumerable"), T_MODULE, 0, cp);
            let iclass = iclass_of(&mut h, module);
            let anon = class(&mut h, None, T_CLASS, 0, cp);
            let mut paths = ClassPaths::new(Some(ids));
            let mut path = |c| paths.path(&h.mem, &layout, c).unwrap();
            assert_eq!(path(anon), None, "{v}");
            assert_eq!(path(foo), Some(("Foo::Bar".into(), false)), "{v}");
            assert_eq!(path(meta), Some(("Foo::Bar".into(), true)), "{v}");
            assert_eq!(path(iclass), Some(("Enumerable".into(), false)), "{v}");
        }
        let old = for_version(Version::new(3, 2, 0)).unwrap();
        let mut h = Heap::new(old);
        let foo = class(&mut h, Some("Foo"), T_CLASS, 0, 0);
        let mut paths = ClassPaths::new(None);
        assert_eq!(paths.path(&h.mem, &old, foo).unwrap(), None);
    }

    /// Up to 3.1 the path needs the symbol table (to know `__classpath__`'s ID).
    #[test]
    fn without_the_symbol_table_no_path_before_3_2() {
        let layout = for_version(Version::new(3, 1, 2)).unwrap();
        let mut h = Heap::new(layout);
        let foo = class(&mut h, Some("Foo"), T_CLASS, 0, (900 << 4) | 1);
        let mut paths = ClassPaths::new(None);
        assert_eq!(paths.path(&h.mem, &layout, foo).unwrap(), None);
    }
}
