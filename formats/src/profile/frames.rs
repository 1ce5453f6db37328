//! The profile's table of distinct frames, pprof-style: stacks are sequences of small ids
//! into it, so a frame seen on a million stacks is stored once, and its strings (function,
//! module, path, file) are interned so equal strings share one allocation.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use crate::symbolize::Frame;

/// The index of a frame in its profile's [`FrameTable`].
pub type FrameId = u32;

/// Each distinct [`Frame`] once, addressed by [`FrameId`] (ids are dense, in first-seen
/// order); equal frames always get the same id, so equal stacks have equal id sequences.
#[derive(Clone, Debug, Default)]
pub struct FrameTable {
    frames: Vec<Frame>,
    /// (foldhash: every frame of every stack is looked up here.)
    ids: HashMap<Frame, FrameId, foldhash::fast::RandomState>,
    strings: Strings,
}

/// Interned strings: one `Arc<str>` per distinct text.
#[derive(Clone, Debug, Default)]
pub struct Strings(HashSet<Arc<str>>);

impl Strings {
    /// The shared copy of `s`, made from it the first time.
    pub fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(found) = self.0.get(s) {
            return found.clone();
        }
        let new: Arc<str> = Arc::from(s);
        self.0.insert(new.clone());
        new
    }

    /// [`Strings::get`] for a string already shared: kept when it is the first of its text.
    pub fn share(&mut self, s: &Arc<str>) -> Arc<str> {
        if let Some(found) = self.0.get(s.as_ref()) {
            return found.clone();
        }
        self.0.insert(s.clone());
        s.clone()
    }
}

impl FrameTable {
    /// The id of `frame`, adding it (with its strings interned) the first time.
    pub fn intern(&mut self, frame: &Frame) -> FrameId {
        if let Some(&id) = self.ids.get(frame) {
            return id;
        }
        let s = &mut self.strings;
        let frame = Frame {
            function: s.share(&frame.function),
            module: frame.module.as_ref().map(|m| s.share(m)),
            path: frame.path.as_ref().map(|p| s.share(p)),
            file: frame.file.as_ref().map(|f| s.share(f)),
            ..frame.clone()
        };
        let id = FrameId::try_from(self.frames.len()).expect("fewer than 2^32 distinct frames");
        self.ids.insert(frame.clone(), id);
        self.frames.push(frame);
        id
    }

    /// The ids of `frames`, in order.
    pub fn intern_all<'a>(
        &mut self,
        frames: impl IntoIterator<Item = &'a Frame>,
    ) -> Box<[FrameId]> {
        frames.into_iter().map(|f| self.intern(f)).collect()
    }

    /// The frame of `id`. Ids come from this table; any other is a bug, and panics.
    pub fn get(&self, id: FrameId) -> &Frame {
        &self.frames[id as usize]
    }

    /// The frames of a stack of ids, in its order.
    pub fn resolve<'a>(
        &'a self,
        ids: &'a [FrameId],
    ) -> impl DoubleEndedIterator<Item = &'a Frame> + 'a {
        ids.iter().map(|&id| self.get(id))
    }

    /// How many distinct frames the table holds.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The string interner, for the stacks' own strings (events, commands).
    pub fn strings(&mut self) -> &mut Strings {
        &mut self.strings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        profile::Profile,
        symbolize::{Frame, FrameKind},
    };

    fn frame(function: &str, module: &str, line: u32) -> Frame {
        let mut f = Frame::named(function, FrameKind::User);
        f.module = Some(Arc::from(module));
        f.line = Some(line);
        f
    }

    #[test]
    fn equal_frames_get_one_id_and_equal_strings_one_allocation() {
        let mut t = FrameTable::default();
        let a = t.intern(&frame("leaf", "chain", 3));
        // Equal values from other allocations are the same frame.
        assert_eq!(t.intern(&frame("leaf", "chain", 3)), a);
        let other_line = t.intern(&frame("leaf", "chain", 4));
        let other_fn = t.intern(&frame("main", "chain", 3));
        assert_eq!((a, other_line, other_fn), (0, 1, 2));
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(other_line).line, Some(4));
        // Every frame of module `chain` points at one string.
        let module = |t: &FrameTable, id| t.get(id).module.clone().unwrap();
        assert!(Arc::ptr_eq(&module(&t, a), &module(&t, other_fn)));
        assert!(Arc::ptr_eq(&t.get(a).function, &t.get(other_line).function));
        let kernel = Frame::named("leaf", FrameKind::Kernel);
        assert_ne!(t.intern(&kernel), a, "the kind tells frames apart");
        assert!(Arc::ptr_eq(&t.strings().get("chain"), &module(&t, a)));
    }

    #[test]
    fn filtered_and_merged_profiles_keep_their_stacks_frames() {
        let mut p = Profile::default();
        let (main, spin, read) = (
            frame("main", "w", 1),
            frame("spin", "w", 2),
            frame("read", "libc", 9),
        );
        p.push("cpu-clock", "w", &[main.clone(), spin.clone()], 5)
            .tid = 1;
        p.push("off-cpu", "w", &[main.clone(), read.clone()], 700);
        p.push("cpu-clock", "w", &[main.clone(), spin.clone()], 4)
            .tid = 2;
        p.push("cpu-clock", "w", &[main.clone(), read.clone()], 6);
        assert_eq!(p.frames.len(), 3);
        let names = |p: &Profile, i: usize| -> Vec<String> {
            p.frames_of(&p.stacks[i])
                .map(|f| f.function.to_string())
                .collect()
        };
        let off = p.for_event("off-cpu");
        assert_eq!(off.stacks.len(), 1);
        assert_eq!(names(&off, 0), ["main", "read"]);
        let mut cpu = p.for_event("cpu-clock");
        assert_eq!(names(&cpu, 2), ["main", "read"]);
        // Two threads' equal stacks merge into the hottest: 9 samples on main > spin.
        let hot = cpu.hottest().unwrap();
        assert_eq!(hot.count, 9);
        let hot: Vec<&Frame> = cpu.frames_of(&hot).collect();
        assert_eq!(hot, [&main, &spin]);
        cpu.stacks.retain(|s| s.count == 6);
        assert_eq!(names(&cpu, 0), ["main", "read"]);
    }
}
