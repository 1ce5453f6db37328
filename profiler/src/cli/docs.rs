//! `profiler __docs SHARE` (run by `cargo xtask install`; not a clap subcommand, so no page
//! or completion offers it): the man pages and shell
//! completions, written under SHARE (PREFIX/share).
//!
//! profiler(1) and profiler-SUBCOMMAND(1) are rendered from this binary's own clap
//! definitions (clap_mangen), and the completions from the same (clap_complete), so neither
//! can say what the parser does not accept. The pages written by hand (cputrack(1),
//! cpustat(8), the libcpc(3CPC) pages, libcpc(3LIB), perfmon(4)) live in `man/` and are built
//! into the binary; every other name a page's NAME line gives gets a `.so` link page, so
//! `man cpc_close` finds cpc_open(3CPC).

use std::{
    fs, io,
    path::{Path, PathBuf},
    process::ExitCode,
};

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

macro_rules! page3 {
    ($name:literal) => {
        (
            concat!("man3/", $name, ".3cpc"),
            include_str!(concat!("../../../man/man3/", $name, ".3cpc")),
        )
    };
}

/// The hand-written pages, by path under `man/`.
pub const PAGES: &[(&str, &str)] = &[
    (
        "man1/cputrack.1",
        include_str!("../../../man/man1/cputrack.1"),
    ),
    (
        "man8/cpustat.8",
        include_str!("../../../man/man8/cpustat.8"),
    ),
    (
        "man4/perfmon.4",
        include_str!("../../../man/man4/perfmon.4"),
    ),
    (
        "man3/libcpc.3lib",
        include_str!("../../../man/man3/libcpc.3lib"),
    ),
    page3!("cpc_open"),
    page3!("cpc_seterrhndlr"),
    page3!("cpc_npic"),
    page3!("cpc_set_create"),
    page3!("cpc_bind_curlwp"),
    page3!("cpc_buf_create"),
    page3!("cpc_enable"),
    page3!("cpc_overflow_pc"),
    page3!("pctx_capture"),
];

/// Where each shell looks for completions, under SHARE.
const COMPLETIONS: &[(Shell, &str)] = &[
    (Shell::Bash, "bash-completion/completions/profiler"),
    (Shell::Zsh, "zsh/site-functions/_profiler"),
    (Shell::Fish, "fish/vendor_completions.d/profiler.fish"),
];

#[derive(Debug, thiserror::Error)]
#[error("writing {}: {source}", path.display())]
pub struct DocsError {
    path: PathBuf,
    source: io::Error,
}

/// Writes everything under `share` (man/, bash-completion/, zsh/, fish/) and prints the
/// paths written.
pub fn run(share: &Path) -> ExitCode {
    match write_all(share) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => super::fail(e),
    }
}

/// Writes every page, link page and completion file; returns their paths.
pub fn write_all(share: &Path) -> Result<Vec<PathBuf>, DocsError> {
    let mut out = Vec::new();
    let man = share.join("man");
    for (path, roff) in generated_pages() {
        out.push(write(&man.join(path), roff.as_bytes())?);
    }
    for (path, roff) in PAGES {
        out.push(write(&man.join(path), roff.as_bytes())?);
        for (link, text) in link_pages(path, roff) {
            out.push(write(&man.join(link), text.as_bytes())?);
        }
    }
    for (shell, path) in COMPLETIONS {
        let mut text = Vec::new();
        clap_complete::generate(*shell, &mut Cli::command(), "profiler", &mut text);
        out.push(write(&share.join(path), &text)?);
    }
    Ok(out)
}

fn write(path: &Path, bytes: &[u8]) -> Result<PathBuf, DocsError> {
    let err = |source| DocsError {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(err)?;
    }
    fs::write(path, bytes).map_err(err)?;
    Ok(path.to_owned())
}

/// profiler(1) and one page per visible subcommand, as `man1/NAME.1` and their roff.
pub fn generated_pages() -> Vec<(String, String)> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let subcommands: Vec<clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let names: Vec<String> = subcommands
        .iter()
        .map(|s| format!("profiler-{}", s.get_name()))
        .collect();
    let mut pages = vec![render(cmd, &names)];
    for sub in subcommands {
        let mut see = vec!["profiler".to_owned()];
        see.extend(personas(sub.get_name()));
        pages.push(render(sub, &see));
    }
    pages
}

/// The Solaris pages a subcommand's page points at.
fn personas(sub: &str) -> Vec<String> {
    match sub {
        "track" => vec!["cputrack".into(), "libcpc".into()],
        "stat" => vec!["cpustat".into(), "libcpc".into()],
        "list" => vec!["libcpc".into(), "perfmon".into()],
        _ => Vec::new(),
    }
}

fn render(cmd: clap::Command, see_also: &[String]) -> (String, String) {
    let man = clap_mangen::Man::new(cmd)
        .source(format!("profiler {}", env!("CARGO_PKG_VERSION")))
        .manual("profiler");
    let mut roff = Vec::new();
    man.render(&mut roff).expect("rendering into memory");
    let mut roff = String::from_utf8(roff).expect("clap_mangen writes UTF-8");
    let refs: Vec<String> = see_also
        .iter()
        .map(|name| format!(".BR {} ({})", name.replace('-', "\\-"), section_of(name)))
        .collect();
    roff += ".SH \"SEE ALSO\"\n";
    roff += &(refs.join(" ,\n") + "\n");
    (format!("man1/{}", man.get_filename()), roff)
}

fn section_of(name: &str) -> &'static str {
    match name {
        "cpustat" => "8",
        "libcpc" => "3LIB",
        "perfmon" => "4",
        _ => "1",
    }
}

/// For a page whose NAME line lists several names (`cpc_open, cpc_close \- ...`), a
/// `.so` page for each name but the page's own.
pub fn link_pages(path: &str, roff: &str) -> Vec<(String, String)> {
    let (dir, file) = path.split_once('/').expect("manN/page.sect");
    let (own, section) = file.split_once('.').expect("page.sect");
    names(roff)
        .into_iter()
        .filter(|n| n != own)
        .map(|n| (format!("{dir}/{n}.{section}"), format!(".so {path}\n")))
        .collect()
}

/// The names a page's NAME section gives, before its `\-`.
pub fn names(roff: &str) -> Vec<String> {
    let mut lines = roff.lines().skip_while(|l| !l.starts_with(".SH NAME"));
    let line = lines.nth(1).unwrap_or_default();
    let list = line.split("\\-").next().unwrap_or_default();
    list.split(',')
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_line_gives_link_pages_for_the_other_names() {
        let roff = ".TH X 3CPC\n.SH NAME\ncpc_open, cpc_close \\- open a handle\n.SH SYNOPSIS\n";
        assert_eq!(names(roff), ["cpc_open", "cpc_close"]);
        assert_eq!(
            link_pages("man3/cpc_open.3cpc", roff),
            [(
                "man3/cpc_close.3cpc".to_owned(),
                ".so man3/cpc_open.3cpc\n".to_owned()
            )]
        );
    }

    #[test]
    fn every_subcommand_has_a_page() {
        let files: Vec<String> = generated_pages().into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            files,
            [
                "man1/profiler.1",
                "man1/profiler-record.1",
                "man1/profiler-report.1",
                "man1/profiler-flamegraph.1",
                "man1/profiler-track.1",
                "man1/profiler-stat.1",
                "man1/profiler-list.1",
                "man1/profiler-symbolize.1",
            ]
        );
        let (_, record) = &generated_pages()[1];
        assert!(
            record.contains("\\-\\-off\\-cpu"),
            "the options are the parser's"
        );
        assert!(
            record.ends_with(".SH \"SEE ALSO\"\n.BR profiler (1)\n"),
            "{record}"
        );
    }
}
