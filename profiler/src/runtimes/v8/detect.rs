//! Finding V8 in a process: the ELF holding it (the `node` executable, or a `libnode.so`), and
//! its layout read from that file through the project's table of opened files.

use super::layout::{Layout, Unsupported};
use crate::{
    modules::Mapping,
    runtimes::shared::{
        elf::{process_mappings, with_elf},
        error::DetectError,
    },
};

/// What [`detect`] found in a process.
#[derive(Debug)]
pub enum Detection {
    /// A V8 whose frames can be named.
    Found { path: String, layout: Box<Layout> },
    /// A V8 we do not name, and why (one line).
    Unsupported { path: String, reason: Unsupported },
    /// No V8 in this process.
    NotV8,
}

/// Looks for V8 in the process `pid`.
pub fn detect(pid: u32) -> Result<Detection, DetectError> {
    detect_in(pid, &process_mappings(pid)?)
}

/// Looks for V8 in the process `pid` with these executable mappings.
pub fn detect_in(pid: u32, maps: &[Mapping]) -> Result<Detection, DetectError> {
    let Some(mapping) = v8_mapping(maps) else {
        return Ok(Detection::NotV8);
    };
    let path = mapping.name.to_string();
    // A closure, not the path: `with_elf` takes a callback for every file lifetime, which the
    // generic function's own lifetime parameter cannot name.
    #[allow(clippy::redundant_closure)]
    let read = with_elf(pid, &mapping, |obj, data| Layout::from_elf(obj, data))?;
    Ok(match read {
        Ok(layout) => Detection::Found {
            path,
            layout: Box::new(layout),
        },
        Err(reason) => Detection::Unsupported { path, reason },
    })
}

/// The mapping of the file that holds V8: a `libnode.so[.N]` when one is mapped (the
/// executable is then a thin launcher), else an executable named like Node (`node`,
/// `nodejs`, `node20`, N|Solid's `nsolid`). Names only: [`detect_in`] then checks the file
/// has V8's metadata.
pub fn v8_mapping(maps: &[Mapping]) -> Option<Mapping> {
    let file_name = |m: &Mapping| m.name.rsplit('/').next().unwrap_or("").to_string();
    let is_lib = |n: &str| {
        n.strip_prefix("libnode.so")
            .is_some_and(|v| v.is_empty() || v.starts_with('.'))
    };
    let is_exe = |n: &str| {
        ["nodejs", "node", "nsolid"].iter().any(|p| {
            n.strip_prefix(p)
                .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit()))
        })
    };
    maps.iter()
        .find(|m| is_lib(&file_name(m)))
        .or_else(|| maps.iter().find(|m| is_exe(&file_name(m))))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::parse_maps;

    #[test]
    fn picks_the_file_holding_v8() {
        let maps = parse_maps(
            "00400000-00b72000 r-xp 00000000 08:01 11 /usr/bin/node\n\
             7f0000000000-7f0000100000 r-xp 00000000 08:01 12 /usr/lib/libnode.so.108\n\
             7f0000200000-7f0000300000 r-xp 00000000 08:01 13 /usr/lib/libc.so.6\n",
        );
        assert_eq!(&*v8_mapping(&maps).unwrap().name, "/usr/lib/libnode.so.108");
        let maps = parse_maps(
            "00400000-00b72000 r-xp 00000000 08:01 11 /opt/n/bin/node20\n\
             7f0000200000-7f0000300000 r-xp 00000000 08:01 13 /usr/lib/libc.so.6\n",
        );
        assert_eq!(&*v8_mapping(&maps).unwrap().name, "/opt/n/bin/node20");
        let maps = parse_maps(
            "00400000-00b72000 r-xp 00000000 08:01 11 /usr/bin/nodemon-helper\n\
             7f0000200000-7f0000300000 r-xp 00000000 08:01 13 /usr/bin/python3.11\n",
        );
        assert!(v8_mapping(&maps).is_none());
    }
}
