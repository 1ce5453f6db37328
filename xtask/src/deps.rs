//! Unused dependencies: every crate of the workspace must name each crate it declares
//! (`[dependencies]`, `[dev-dependencies]`, `[build-dependencies]`, target-specific tables
//! too) as a path in its sources (`src/`, `build.rs`, `tests/`, `benches/`, `examples/`):
//! `name::…`, `use name`, or `extern crate name`, with `-` written `_`. A dependency used
//! only through a feature or a macro's expansion goes in [`ALLOWED`] with its reason.

use std::{collections::BTreeSet, fs, path::Path};

/// (crate, dependency, why it is declared though its sources never name it).
const ALLOWED: &[(&str, &str, &str)] = &[];

/// Dependency names declared in a `Cargo.toml`, in every dependency table.
pub fn declared(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']').trim();
            // `[dependencies]`, `[target.'cfg(..)'.dev-dependencies]`, and the one-table form
            // `[dependencies.name]`.
            let table = header.rsplit_once('.').map_or(header, |(head, tail)| {
                if head.ends_with("dependencies") {
                    out.insert(tail.trim_matches('"').to_string());
                    ""
                } else {
                    tail
                }
            });
            in_deps = matches!(
                table,
                "dependencies" | "dev-dependencies" | "build-dependencies"
            );
            continue;
        }
        if !in_deps {
            continue;
        }
        // `name = ..` or `name.workspace = true` (not the lines of a multi-line value).
        if !line.contains('=') {
            continue;
        }
        let key = line
            .split(['=', '.'])
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        if !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            out.insert(key.to_string());
        }
    }
    out
}

/// Whether `code` (comments included) names crate `dep` as a path.
pub fn names(code: &str, dep: &str) -> bool {
    let ident = dep.replace('-', "_");
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let ident_char = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(ident.as_str()).any(|(i, _)| {
        let before = &code[..i];
        let after = &code[i + ident.len()..];
        // `::name::` is an absolute path to the crate; `x::name::` is a module called so.
        let starts_path = match before.strip_suffix("::") {
            Some(head) => !head.ends_with(ident_char),
            None => !before.ends_with(ident_char),
        };
        let lead = before.trim_end();
        let item = after.starts_with(|c: char| matches!(c, ';' | ',' | '}') || c.is_whitespace())
            && (lead.ends_with("use") || lead.ends_with("extern crate"));
        starts_path && (after.starts_with("::") || item)
    })
}

/// All Rust sources of the crate in `dir` that may name a dependency.
fn sources(dir: &Path) -> String {
    let mut text = String::new();
    let mut stack: Vec<_> = ["src", "tests", "benches", "examples"]
        .iter()
        .map(|d| dir.join(d))
        .collect();
    if let Ok(build) = fs::read_to_string(dir.join("build.rs")) {
        text.push_str(&build);
    }
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                text.push_str(&fs::read_to_string(&path).unwrap_or_default());
                text.push('\n');
            }
        }
    }
    text
}

/// The workspace's members, from the root manifest's `members = [..]`.
fn members(root_manifest: &str) -> Vec<String> {
    let Some(start) = root_manifest.find("members") else {
        return Vec::new();
    };
    let list = &root_manifest[start..];
    let (Some(open), Some(close)) = (list.find('['), list.find(']')) else {
        return Vec::new();
    };
    list[open + 1..close]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// `member: dependency` for each declared dependency its sources never name.
pub fn unused(root: &Path) -> Vec<String> {
    let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let mut out = Vec::new();
    for member in members(&manifest) {
        let dir = root.join(&member);
        let own = fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        let code = sources(&dir);
        for dep in declared(&own) {
            let allowed = ALLOWED.iter().any(|(m, d, _)| *m == member && *d == dep);
            if !allowed && !names(&code, &dep) {
                out.push(format!("{member}: {dep}"));
            }
        }
    }
    out
}

/// The check `cargo xtask test` runs: an error naming every unused dependency.
pub fn check() -> anyhow::Result<()> {
    let found = unused(&crate::util::workspace_root());
    anyhow::ensure!(
        found.is_empty(),
        "dependencies declared but never named in their crate's sources (remove them, or \
         allow-list them with a reason in xtask/src/deps.rs): {}",
        found.join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_parser_sees_every_table_and_form() {
        let toml = "[package]\nname = \"x\"\nversion.workspace = true\n\n\
                    [dependencies]\n\
                    aya = { workspace = true }\n\
                    perf-event-open-sys.workspace = true # a comment\n\
                    \"quoted\" = \"1\"\n\n\
                    [dev-dependencies]\naya-obj = \"0.3\"\n\n\
                    [target.'cfg(unix)'.build-dependencies]\ncc = \"1\"\n\n\
                    [dependencies.tokio]\nversion = \"1\"\n\n\
                    [features]\nbroken = []\n[lints]\nworkspace = true\n";
        let got: Vec<String> = declared(toml).into_iter().collect();
        assert_eq!(
            got,
            [
                "aya",
                "aya-obj",
                "cc",
                "perf-event-open-sys",
                "quoted",
                "tokio"
            ]
        );
    }

    #[test]
    fn a_crate_counts_as_named_only_as_a_path() {
        assert!(names("use aya::maps::HashMap;", "aya"));
        assert!(names(
            "let x = perf_event_open_sys::bindings::X;",
            "perf-event-open-sys"
        ));
        assert!(names("extern crate libc;", "libc"));
        assert!(names("use serde_json;", "serde-json"));
        assert!(names("let v = ::tokio::spawn(f);", "tokio"));
        assert!(names("    cc::Build::new()", "cc"));
        // A word in prose, a comment, another crate's prefix or a module of that name: no.
        assert!(!names("// aya::Pod is implemented", "aya"));
        assert!(!names("let aya = 1; let s = \"aya\";", "aya"));
        assert!(!names("use aya_obj::Object;", "aya"));
        assert!(!names("use crate::perf::libc::x;", "libc"));
        assert!(!names("fn anyhow_like() {}", "anyhow"));
    }

    #[test]
    fn the_workspace_has_no_unused_dependency() {
        let root = crate::util::workspace_root();
        let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap();
        assert!(members(&manifest).contains(&"profiler-core".to_string()));
        assert_eq!(unused(&root), Vec::<String>::new());
    }
}
