//! The running kernel's symbols from `/proc/kallsyms`, in a compact table: addresses in one
//! array, names in one unlinked scratch file (read back with one pread per name asked). A
//! recording holds the table from its first kernel address to its end, so its size is part
//! of the profiler's steady memory: 122k symbols take 1.7 MiB here (and 2.8 MiB of names
//! on disk), against 7 MiB as one allocation per name (blazesym's table). A name is read
//! once per distinct kernel address a run sees (thousands on a busy host), each a pread of a
//! file the page cache holds.

use std::{
    fs::File,
    io::{self, BufRead, BufReader, BufWriter, Write},
    os::unix::fs::FileExt,
};

use super::inflated::scratch_dir;

pub struct KernelSymbols {
    /// Sorted; equal addresses keep the file's order.
    addrs: Box<[u64]>,
    /// Where each address's name starts in `names`, and its length.
    starts: Box<[u32]>,
    lens: Box<[u16]>,
    names: Names,
}

/// The names, one after another: on disk, or in memory where no scratch file can be made.
enum Names {
    Disk(File),
    Memory(Vec<u8>),
}

impl Names {
    fn new() -> Self {
        match tempfile::tempfile_in(scratch_dir()) {
            Ok(f) => Self::Disk(f),
            Err(_) => Self::Memory(Vec::new()),
        }
    }
}

impl KernelSymbols {
    pub fn load() -> io::Result<Self> {
        Self::load_from(
            || Ok(BufReader::new(File::open("/proc/kallsyms")?)),
            Names::new,
        )
    }

    /// The table of the lines `open` gives, its names kept in `names`; if they cannot be
    /// written there (a full or read-only scratch disk), read again with names in memory.
    fn load_from<R: BufRead>(
        open: impl Fn() -> io::Result<R>,
        names: impl FnOnce() -> Names,
    ) -> io::Result<Self> {
        Self::parse_into(open()?, names())
            .or_else(|_| Self::parse_into(open()?, Names::Memory(Vec::new())))
    }

    #[cfg(test)]
    fn parse(lines: impl BufRead) -> io::Result<Self> {
        Self::parse_into(lines, Names::new())
    }

    /// Lines of `ADDRESS TYPE NAME [MODULE]`; a zero address (kallsyms hides them from those
    /// who may not see them) or an unreadable line is skipped.
    fn parse_into(mut lines: impl BufRead, names: Names) -> io::Result<Self> {
        let mut addrs = Vec::new();
        let mut starts = Vec::new();
        let mut lens = Vec::new();
        let (mut disk, mut memory) = match names {
            Names::Disk(f) => (Some(BufWriter::new(f)), Vec::new()),
            Names::Memory(m) => (None, m),
        };
        let mut written = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if lines.read_line(&mut line)? == 0 {
                break;
            }
            let mut fields = line.split_ascii_whitespace();
            let (Some(addr), Some(_), Some(name)) = (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            let (Ok(start), Ok(len)) = (u32::try_from(written), u16::try_from(name.len())) else {
                continue;
            };
            if addr == 0 {
                continue;
            }
            addrs.push(addr);
            starts.push(start);
            lens.push(len);
            match &mut disk {
                Some(w) => w.write_all(name.as_bytes())?,
                None => memory.extend_from_slice(name.as_bytes()),
            }
            written += name.len();
        }
        let names = match disk {
            Some(w) => Names::Disk(w.into_inner().map_err(io::IntoInnerError::into_error)?),
            None => Names::Memory(memory),
        };
        // The core kernel's symbols come sorted, each module's after them: usually no sort.
        if !addrs.is_sorted() {
            let mut order: Vec<u32> = (0..addrs.len() as u32).collect();
            order.sort_by_key(|&i| addrs[i as usize]);
            addrs = order.iter().map(|&i| addrs[i as usize]).collect();
            starts = order.iter().map(|&i| starts[i as usize]).collect();
            lens = order.iter().map(|&i| lens[i as usize]).collect();
        }
        Ok(Self {
            addrs: addrs.into_boxed_slice(),
            starts: starts.into_boxed_slice(),
            lens: lens.into_boxed_slice(),
            names,
        })
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.addrs.len()
    }

    /// The name of the symbol `addr` is in: the one at the highest address at or below it
    /// (kallsyms has no sizes), the first of several at that address.
    pub fn find(&self, addr: u64) -> Option<String> {
        let after = self.addrs.partition_point(|&a| a <= addr);
        let at = self.addrs[after.checked_sub(1)?];
        let first = self.addrs.partition_point(|&a| a < at);
        let start = self.starts[first] as usize;
        let len = usize::from(self.lens[first]);
        let bytes = match &self.names {
            Names::Memory(m) => m.get(start..start + len)?.to_vec(),
            Names::Disk(f) => {
                let mut buf = vec![0; len];
                f.read_exact_at(&mut buf, start as u64).ok()?;
                buf
            }
        };
        String::from_utf8(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_symbol_at_or_below_an_address() {
        let text = "\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81000100 t helper
0000000000000000 T hidden
garbage
ffffffffc0001000 t mod_fn\t[some_mod]
ffffffff81000200 T late_in_file
";
        let on_disk = KernelSymbols::parse(text.as_bytes()).unwrap();
        assert!(
            matches!(on_disk.names, Names::Disk(_)),
            "a scratch file here"
        );
        let in_memory =
            KernelSymbols::parse_into(text.as_bytes(), Names::Memory(Vec::new())).unwrap();
        // A scratch file that cannot be written (here: opened read-only) leaves the names
        // in memory.
        let unwritable = KernelSymbols::load_from(
            || Ok(text.as_bytes()),
            || Names::Disk(File::open("/proc/self/exe").unwrap()),
        )
        .unwrap();
        assert!(matches!(unwritable.names, Names::Memory(_)));
        for syms in [on_disk, in_memory, unwritable] {
            assert_eq!(syms.len(), 5);
            assert_eq!(
                syms.find(0xffff_ffff_80ff_ffff).as_deref(),
                None,
                "below the first"
            );
            assert_eq!(
                syms.find(0xffff_ffff_8100_0000).as_deref(),
                Some("_stext"),
                "first of equals"
            );
            assert_eq!(syms.find(0xffff_ffff_8100_0050).as_deref(), Some("_stext"));
            assert_eq!(syms.find(0xffff_ffff_8100_0100).as_deref(), Some("helper"));
            assert_eq!(syms.find(0xffff_ffff_8100_01ff).as_deref(), Some("helper"));
            assert_eq!(
                syms.find(0xffff_ffff_8100_0210).as_deref(),
                Some("late_in_file"),
                "sorted"
            );
            assert_eq!(syms.find(0xffff_ffff_c000_1234).as_deref(), Some("mod_fn"));
            assert_eq!(syms.find(u64::MAX).as_deref(), Some("mod_fn"));
        }
    }

    #[test]
    fn the_running_kernel_names_as_blazesym_does() {
        use blazesym::symbolize::{Input, Symbolized, Symbolizer, source};
        let Ok(ours) = KernelSymbols::load() else {
            eprintln!("skipped: /proc/kallsyms cannot be read");
            return;
        };
        if ours.len() == 0 {
            eprintln!("skipped: kallsyms shows no addresses to this user");
            return;
        }
        // Every 97th symbol, and addresses just past and just before it. (Not the first:
        // past the kernel's first address, which several symbols share, blazesym names the
        // last of them, everywhere else the first.)
        let addrs: Vec<u64> = ours
            .addrs
            .iter()
            .skip(97)
            .step_by(97)
            .flat_map(|&a| [a, a + 3, a.saturating_sub(1)])
            .collect();
        let src = source::Source::Kernel(source::Kernel {
            vmlinux: blazesym::MaybeDefault::None,
            debug_syms: false,
            ..Default::default()
        });
        let symbolizer = Symbolizer::builder().enable_code_info(false).build();
        let theirs = symbolizer.symbolize(&src, Input::AbsAddr(&addrs)).unwrap();
        for (addr, sym) in addrs.iter().zip(theirs) {
            let theirs = match &sym {
                Symbolized::Sym(s) => Some(s.name.as_ref()),
                Symbolized::Unknown(_) => None,
            };
            assert_eq!(ours.find(*addr).as_deref(), theirs, "{addr:#x}");
        }
    }
}
