//! Debug files whose DWARF sections are compressed (`SHF_COMPRESSED`, zlib: Debian's
//! `-dbgsym` and `libc6-dbg` packages, Fedora's `-debuginfo`). blazesym inflates each such
//! section whole into the heap on every call: 9 MiB of anonymous memory for libc's, a
//! spike above everything else the recorder holds. Instead each file is inflated once into
//! an unlinked copy on disk (the same bytes at the same offsets, each compressed section's
//! data appended inflated, a new section header table pointing at it), which blazesym maps:
//! only the pages it reads count in RSS, and the page cache can drop them.

use std::{
    collections::HashMap,
    fs::File,
    io::{self, Read, Write},
    os::unix::fs::{FileExt, MetadataExt},
    path::{Path, PathBuf},
};

use object::{
    Endianness, ReadCache,
    elf::{ELFCOMPRESS_ZLIB, FileHeader64, SHF_COMPRESSED, SectionHeader64},
    read::elf::{CompressionHeader, FileHeader, SectionHeader},
};

use crate::modules::ReadAt;

/// Inflated copies kept for the run (a file named ahead is named again at the end): at
/// most this many bytes of them on disk, and this many files (each holds a descriptor);
/// past either they are dropped and made again when needed.
const MAX_KEPT_BYTES: u64 = 1 << 30;
const MAX_KEPT_FILES: usize = 64;
/// A file whose sections claim to inflate to more than this many times their compressed
/// size, or whose copy would take more than `MAX_COPY_BYTES`, is not inflated (blazesym
/// then reads it as it is): a zlib stream can claim any size, and the file may be another
/// user's.
const MAX_RATIO: u64 = 64;
const MAX_COPY_BYTES: u64 = 1 << 30;

/// Inflated copies by (device, inode, size, modification time) of the file they were made
/// from.
#[derive(Default)]
pub struct Inflated {
    copies: HashMap<(u64, u64, u64, i64), Option<File>>,
    kept_bytes: u64,
}

impl Inflated {
    /// The path to hand blazesym for the ELF file at `path`: an inflated copy if it has
    /// compressed sections and one could be made, else `path` itself.
    pub fn path_for(&mut self, path: &Path) -> PathBuf {
        match File::open(path) {
            Ok(file) => self.path_of(&file, path.to_path_buf()),
            Err(_) => path.to_path_buf(),
        }
    }

    /// [`Inflated::path_for`] a file already open (`path` names it, for blazesym).
    pub fn path_of(&mut self, file: &File, path: PathBuf) -> PathBuf {
        let Ok(meta) = file.metadata() else {
            return path;
        };
        let key = (
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
        );
        if !self.copies.contains_key(&key) {
            let kept_files = self.copies.values().filter(|c| c.is_some()).count();
            if self.kept_bytes > MAX_KEPT_BYTES || kept_files >= MAX_KEPT_FILES {
                self.copies.clear();
                self.kept_bytes = 0;
            }
        }
        let copy = self.copies.entry(key).or_insert_with(|| {
            let copy = inflate(file).ok().flatten();
            if let Some(c) = &copy {
                self.kept_bytes += c.metadata().map_or(0, |m| m.blocks() * 512);
            }
            copy
        });
        match copy {
            Some(c) => PathBuf::from(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(c)
            )),
            None => path,
        }
    }
}

/// Where unlinked scratch files go (inflated copies, the kernel's symbol names): `/var/tmp`
/// (on disk, where the FHS puts large temporary files), else the temporary directory.
pub(super) fn scratch_dir() -> PathBuf {
    let var_tmp = Path::new("/var/tmp");
    if var_tmp.is_dir() {
        var_tmp.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// An unlinked copy of the 64-bit ELF file `src` with its zlib-compressed sections
/// inflated; `None` if it has none (or other compression, or is not a 64-bit ELF file).
pub fn inflate(src: &File) -> io::Result<Option<File>> {
    let cache = ReadCache::new(ReadAt::new(src));
    let bad = |e: object::Error| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    let Ok(header) = FileHeader64::<Endianness>::parse(&cache) else {
        return Ok(None);
    };
    let endian = header.endian().map_err(bad)?;
    let sections = header.section_headers(endian, &cache).map_err(bad)?;
    let len = src.metadata()?.len();
    let mut compressed = Vec::new();
    let mut total = len;
    for (i, section) in sections.iter().enumerate() {
        let Some((ch, offset, size)) = section.compression(endian, &cache).map_err(bad)? else {
            continue;
        };
        if ch.ch_type(endian) != ELFCOMPRESS_ZLIB {
            return Ok(None);
        }
        let inflated = ch.ch_size(endian);
        total = total.saturating_add(inflated);
        if inflated > size.saturating_mul(MAX_RATIO).max(1 << 20) || total > MAX_COPY_BYTES {
            return Ok(None);
        }
        compressed.push(Packed {
            index: i,
            section: section.file_range(endian).unwrap_or((offset, size)),
            data: (offset, size),
            inflated,
            align: ch.ch_addralign(endian),
        });
    }
    if compressed.is_empty() {
        return Ok(None);
    }
    let out = tempfile::tempfile_in(scratch_dir())?;
    // The file as it is, but for the compressed sections (left as holes).
    let mut holes: Vec<(u64, u64)> = compressed
        .iter()
        .map(|c| (c.section.0, c.section.0 + c.section.1))
        .collect();
    holes.sort_unstable();
    let mut at = 0;
    for (start, end) in holes.into_iter().chain([(len, len)]) {
        if start > at {
            copy_range(src, &out, at, start)?;
        }
        at = at.max(end);
    }
    // Each section inflated after it, then the section headers pointing there.
    let mut end = len;
    let mut headers: Vec<SectionHeader64<Endianness>> = sections.to_vec();
    for &Packed {
        index,
        data: (offset, size),
        inflated,
        align,
        ..
    } in &compressed
    {
        end = end.next_multiple_of(align.clamp(1, 4096));
        let data = ReadAt::positioned(src, offset).take(size);
        let mut writer = WriteAt {
            file: &out,
            pos: end,
        };
        let written = io::copy(&mut flate2::read::ZlibDecoder::new(data), &mut writer)?;
        if written != inflated {
            return Ok(None);
        }
        let h = &mut headers[index];
        h.sh_offset.set(endian, end);
        h.sh_size.set(endian, inflated);
        h.sh_addralign.set(endian, align);
        h.sh_flags
            .set(endian, h.sh_flags.get(endian) & !u64::from(SHF_COMPRESSED));
        end += inflated;
    }
    let table = end.next_multiple_of(8);
    out.write_all_at(object::pod::bytes_of_slice(&headers), table)?;
    let mut elf = *header;
    elf.e_shoff.set(endian, table);
    out.write_all_at(object::pod::bytes_of(&elf), 0)?;
    Ok(Some(out))
}

/// A compressed section: its place in the file, its compressed data's (after the
/// compression header), and what it inflates to.
struct Packed {
    index: usize,
    section: (u64, u64),
    data: (u64, u64),
    inflated: u64,
    align: u64,
}

/// Copies bytes `from..to` of `src` to the same offsets of `dst`.
fn copy_range(src: &File, dst: &File, from: u64, to: u64) -> io::Result<()> {
    let mut part = ReadAt::positioned(src, from).take(to - from);
    let copied = io::copy(
        &mut part,
        &mut WriteAt {
            file: dst,
            pos: from,
        },
    )?;
    if copied < to - from {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Writes at a position of a file without moving its offset.
struct WriteAt<'a> {
    file: &'a File,
    pos: u64,
}

impl Write for WriteAt<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use object::{Object, ObjectSection};

    use super::*;

    /// Every section of `file` by name: its flags and its (uncompressed) data.
    fn sections(file: &File) -> Vec<(String, u64, Vec<u8>)> {
        let cache = ReadCache::new(ReadAt::new(file));
        let elf = object::File::parse(&cache).unwrap();
        elf.sections()
            .map(|s| {
                let object::SectionFlags::Elf { sh_flags } = s.flags() else {
                    unreachable!("an ELF file's sections")
                };
                let packed = s.compressed_data().unwrap();
                let data = match packed.format {
                    object::CompressionFormat::None => packed.data.to_vec(),
                    object::CompressionFormat::Zlib => {
                        let mut out = Vec::new();
                        flate2::read::ZlibDecoder::new(packed.data)
                            .read_to_end(&mut out)
                            .unwrap();
                        assert_eq!(out.len() as u64, packed.uncompressed_size);
                        out
                    }
                    other => panic!("{other:?}"),
                };
                (s.name().unwrap().to_string(), sh_flags, data)
            })
            .collect()
    }

    #[test]
    fn compressed_sections_are_inflated_in_place_of_the_originals() {
        let dir = tempfile::tempdir().unwrap();
        let (src, plain, packed) = (
            dir.path().join("x.c"),
            dir.path().join("plain"),
            dir.path().join("packed"),
        );
        // Enough functions that objcopy finds the DWARF sections worth compressing.
        let mut c: String = (0..300)
            .map(|i| format!("int f{i}(int x) {{ int y = x * {i}; return y + {i}; }}\n"))
            .collect();
        c.push_str("int main(void) { return f1(0); }\n");
        std::fs::write(&src, c).unwrap();
        let run = |cmd: &mut std::process::Command| cmd.status().is_ok_and(|s| s.success());
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let made = run(std::process::Command::new(cc)
            .arg("-g")
            .arg("-o")
            .arg(&plain)
            .arg(&src))
            && run(std::process::Command::new("objcopy")
                .arg("--compress-debug-sections=zlib")
                .arg(&plain)
                .arg(&packed));
        if !made {
            eprintln!("skipped: no C compiler or objcopy (binutils) here");
            return;
        }
        let packed = File::open(&packed).unwrap();
        let before = sections(&packed);
        let compressed = before
            .iter()
            .filter(|(_, flags, _)| flags & u64::from(SHF_COMPRESSED) != 0)
            .count();
        assert!(compressed >= 3, "a binary built with -g has DWARF sections");

        let inflated = inflate(&packed).unwrap().expect("compressed sections");
        let after = sections(&inflated);
        assert_eq!(after.len(), before.len());
        for ((name, flags, data), (name2, flags2, data2)) in before.iter().zip(&after) {
            assert_eq!(name, name2);
            assert_eq!(flags & !u64::from(SHF_COMPRESSED), *flags2, "{name}");
            assert!(data == data2, "{name}: the same bytes once inflated");
        }
        // The copy is a file blazesym reads as it would the original.
        assert!(
            inflate(&inflated).unwrap().is_none(),
            "nothing left to inflate"
        );
        assert!(inflate(&File::open(&plain).unwrap()).unwrap().is_none());
        assert!(
            inflate(&File::open("/proc/self/status").unwrap())
                .unwrap()
                .is_none()
        );

        let mut kept = Inflated::default();
        let path = dir.path().join("packed");
        let first = kept.path_for(&path);
        assert!(first.starts_with("/proc/self/fd"), "{}", first.display());
        assert_eq!(kept.path_for(&path), first, "made once");
        assert_eq!(kept.path_for(&plain), plain);
    }
}
