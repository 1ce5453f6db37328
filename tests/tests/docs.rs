//! The man pages and completions `cargo xtask install` installs, as `profiler __docs` writes
//! them: every page renders with man-db's `man -l` without a warning; every exported C
//! symbol of libcpc.so is found by `man` and named in the NAME line of the page it finds;
//! every subcommand `profiler --help` lists has its page; perfmon(4) documents every request
//! and flag of perfmon.h and the P6 table `profiler list` prints; the completions load.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use profiler_tests::*;

/// The pages and completions, written by the built profiler into a scratch share dir.
fn share(test: &str) -> PathBuf {
    let dir = scratch(test).join("share");
    let out = profiler(&["__docs", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "profiler __docs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// `man` with the pages under `man_dir` only, at 80 columns; (stdout, stderr).
fn man(man_dir: &Path, args: &[&str]) -> (String, String) {
    let o = Command::new("man")
        .current_dir(man_dir)
        .env("MANWIDTH", "80")
        .env_remove("MAN_KEEP_FORMATTING")
        .env_remove("MANPATH")
        .env("LC_ALL", "C.UTF-8")
        .args(["-M"])
        .arg(man_dir)
        .args(args)
        .output()
        .expect("running man: `cargo xtask test` installs man-db");
    assert!(
        o.status.success(),
        "man {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The names on a rendered page's NAME line, before " - ".
fn rendered_names(text: &str) -> BTreeSet<String> {
    let mut lines = text.lines().skip_while(|l| l.trim() != "NAME").skip(1);
    let mut name = String::new();
    for l in lines.by_ref() {
        name.push_str(l.trim());
        name.push(' ');
        if l.contains(" - ") {
            break;
        }
    }
    // A name broken across lines by hyphenation (groff's U+2010) is one name.
    let name = name.replace("\u{2010} ", "");
    name.split(" - ")
        .next()
        .unwrap_or_default()
        .split(',')
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect()
}

#[test]
fn every_page_renders_and_every_libcpc_symbol_has_one() {
    let share = share("docs-pages");
    let man_dir = share.join("man");
    let pages = files_under(&man_dir);
    assert!(pages.len() >= 50, "{pages:?}");
    for page in &pages {
        let rel = page.strip_prefix(&man_dir).unwrap().to_str().unwrap();
        let (text, warnings) = man(&man_dir, &["-l", rel]);
        assert_eq!(warnings, "", "{rel} renders with warnings");
        assert!(
            text.contains("NAME") && text.lines().count() > 8,
            "{rel}:\n{text}"
        );
    }

    // Every function libcpc.so exports: `man NAME` finds a 3cpc page that names it.
    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(built("libcpc.so", "libcpc"))
        .output()
        .expect("nm (binutils)");
    let symbols: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [_, "T", name] => Some(name.to_owned()),
            _ => None,
        })
        .collect();
    assert!(symbols.len() >= 38, "{symbols:?}");
    for sym in &symbols {
        let (path, _) = man(&man_dir, &["-w", sym]);
        assert!(path.trim().ends_with(".3cpc"), "{sym}: {path}");
        let (text, warnings) = man(&man_dir, &[sym]);
        assert_eq!(warnings, "", "{sym}");
        assert!(
            rendered_names(&text).contains(sym),
            "{sym} is not on the NAME line of the page man finds: {:?}",
            rendered_names(&text)
        );
    }
    let (overview, _) = man(&man_dir, &["3lib", "libcpc"]);
    for sym in &symbols {
        assert!(
            overview.contains(sym.as_str()),
            "libcpc(3LIB) does not list {sym}"
        );
    }

    // profiler(1) and a page per subcommand --help lists; the Solaris-named tools.
    let help = run_ok(&["--help"]);
    let subcommands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert_eq!(
        subcommands,
        [
            "record",
            "report",
            "flamegraph",
            "track",
            "stat",
            "list",
            "symbolize"
        ]
    );
    for sub in &subcommands {
        let (text, _) = man(&man_dir, &["1", &format!("profiler-{sub}")]);
        let usage = run_ok(&[sub, "--help"]);
        // The page's options are the parser's: every long option of --help is on it.
        for long in usage.split_whitespace().filter(|w| w.starts_with("--")) {
            let long = long
                .trim_end_matches([',', ']', '>', ':', '.', ')', ';', '`'])
                .split(['=', '<'])
                .next()
                .unwrap();
            assert!(text.contains(long), "profiler-{sub}(1) lacks {long}");
        }
    }
    for (section, page) in [
        ("1", "profiler"),
        ("1", "cputrack"),
        ("8", "cpustat"),
        ("4", "perfmon"),
    ] {
        let (path, _) = man(&man_dir, &["-w", section, page]);
        assert!(
            path.contains(&format!("man{section}/{page}.{section}")),
            "{path}"
        );
    }
}

#[test]
fn perfmon_4_documents_the_header_and_the_p6_table() {
    let share = share("docs-perfmon");
    let man_dir = share.join("man");
    let (text, _) = man(&man_dir, &["4", "perfmon"]);
    let header = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../libperfmon/include/perfmon.h"),
    )
    .unwrap();
    let defined: Vec<&str> = header
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("PMIO") || n.starts_with("PMCF_") && *n != "PMCF_SYS_FLAGS")
        .collect();
    assert!(defined.len() >= 13, "{defined:?}");
    for name in defined {
        assert!(text.contains(name), "perfmon(4) does not mention {name}");
    }
    for env in ["PERFMON_EVENTS", "PERFMON_SCOPE", "LIBPERFMON_DEBUG"] {
        assert!(text.contains(env), "perfmon(4) does not document {env}");
    }
    // The table as `profiler list` prints it from the code, line by line in the page.
    let list = run_ok(&["list", "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&list).unwrap();
    let table = doc["perfmon_events"].as_array().expect("perfmon_events");
    assert!(table.len() >= 15, "{table:?}");
    for e in table {
        let line = format!(
            "{:#04x} {:<21} {}",
            e["code"].as_u64().unwrap(),
            e["p6_name"].as_str().unwrap(),
            e["maps_to"].as_str().unwrap()
        );
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(&line)),
            "perfmon(4) lacks the table line {line:?}"
        );
    }
}

#[test]
fn completions_for_bash_zsh_and_fish_know_the_subcommands() {
    let share = share("docs-completions");
    let bash = share.join("bash-completion/completions/profiler");
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!("source {}; complete -p profiler", bash.display()))
        .output()
        .expect("bash");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("profiler"));
    for file in [
        "bash-completion/completions/profiler",
        "zsh/site-functions/_profiler",
        "fish/vendor_completions.d/profiler.fish",
    ] {
        let text = fs::read_to_string(share.join(file)).unwrap();
        for sub in [
            "record",
            "flamegraph",
            "track",
            "stat",
            "symbolize",
            "--off-cpu",
        ] {
            assert!(text.contains(sub), "{file} lacks {sub}");
        }
        assert!(
            !text.contains("__docs"),
            "{file} offers the hidden subcommand"
        );
    }
}
