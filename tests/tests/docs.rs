//! The man pages and completions `cargo xtask install` installs, as `profiler __docs` writes
//! them: every page renders with man-db's `man -l` without a warning; every exported C
//! symbol of libcpc.so, and every function libcpc.h declares, is found by `man` and named in
//! the NAME line of the page it finds (its own, or the one its `.so` link page points at);
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

/// The functions a C header declares: each `extern` declaration with a parameter list, by
/// the name before its `(` (`extern const char *cpc_cciname(cpc_t *cpc);` gives
/// `cpc_cciname`; a declaration may go on over several lines).
fn declared_functions(header: &str) -> Vec<String> {
    header
        .lines()
        .filter_map(|l| l.strip_prefix("extern "))
        .filter_map(|l| l.split_once('(').map(|(before, _)| before))
        .filter_map(|before| before.split_whitespace().last())
        .map(|name| name.trim_start_matches('*').to_owned())
        .collect()
}

/// The workspace file `rel`.
fn workspace_file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What a C programmer reads in the installed headers: every function libcpc.h declares has
/// its 3CPC page, its own or a `.so` link page to the page that documents it (Solaris
/// documents several functions on one page: cpc_set_sample on cpc_buf_create's), and
/// `man FUNCTION` (from any directory) shows that page, with FUNCTION on its NAME line.
/// libperfmon's headers declare no function: perfmon(4) is ioctls on /dev/perfmon.
#[test]
fn every_function_of_the_headers_has_a_page_or_a_link_to_one() {
    let share = share("docs-header");
    let man_dir = share.join("man");
    let functions = declared_functions(&workspace_file("libcpc/include/libcpc.h"));
    for f in [
        "cpc_open",
        "cpc_cciname",
        "cpc_set_sample",
        "cpc_request_preset",
    ] {
        assert!(functions.iter().any(|g| g == f), "{f} in {functions:?}");
    }
    assert_eq!(functions.len(), 38, "{functions:?}");
    for header in [
        "libperfmon/include/perfmon.h",
        "libperfmon/include/machine/perfmon.h",
        "libperfmon/include/machine/cpu.h",
    ] {
        let text = workspace_file(header);
        assert!(
            declared_functions(&text).is_empty() && !text.contains("extern "),
            "{header} declares functions: give them pages, and check them here"
        );
    }
    let mut links = 0;
    for f in &functions {
        let rel = format!("man3/{f}.3cpc");
        let roff = fs::read_to_string(man_dir.join(&rel))
            .unwrap_or_else(|e| panic!("{f}: no page or link page {rel}: {e}"));
        // A link page is one `.so man3/PAGE.3cpc` line, to a page (not another link).
        let page = match roff.strip_prefix(".so ") {
            Some(target) => {
                links += 1;
                let target = target.trim_end();
                assert!(
                    !target.contains('\n') && target.starts_with("man3/"),
                    "{rel}: {roff:?}"
                );
                let text = fs::read_to_string(man_dir.join(target))
                    .unwrap_or_else(|e| panic!("{rel} links to {target}: {e}"));
                assert!(
                    text.starts_with(".TH "),
                    "{rel} links to {target}, not a page"
                );
                man_dir.join(target)
            }
            None => {
                assert!(roff.starts_with(".TH "), "{rel}");
                man_dir.join(&rel)
            }
        };
        // man-db's lookup from elsewhere follows the link to the page.
        let o = Command::new("man")
            .current_dir("/")
            .env("MANWIDTH", "80")
            .env("LC_ALL", "C.UTF-8")
            .env_remove("MANPATH")
            .arg("-M")
            .arg(&man_dir)
            .args(["-w", f])
            .output()
            .expect("man");
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            page.to_str().unwrap(),
            "man -w {f}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        // The link page itself renders as the page, which names the function.
        let (text, warnings) = man(&man_dir, &["-l", &rel]);
        assert_eq!(warnings, "", "{rel}");
        assert!(
            rendered_names(&text).contains(f.as_str()),
            "{rel} renders a page whose NAME line lacks {f}: {:?}",
            rendered_names(&text)
        );
    }
    // Both kinds were checked (29 of the 38 are documented on another function's page).
    assert!(links > 0 && links < functions.len(), "{links} link pages");
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
