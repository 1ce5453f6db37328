//! The module graph of the host crates: which module's `use` lines and `crate::`/`super::`
//! paths name which other module. Its unit test fails on any cycle (two modules that import
//! each other, or a longer loop), so layering stays one way. A module and its own submodules
//! do not count (a parent re-exporting its children is not a cycle), nor do `tests` modules.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
};

/// Module path (`cpc::bind`, `""` for the crate root) → its source with comments and the
/// trailing `#[cfg(test)] mod tests { .. }` block removed.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let text = fs::read_to_string(&path).unwrap_or_default();
            let code: String = text
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            let code = match code.find("#[cfg(test)]\nmod tests {") {
                Some(i) => code[..i].to_string(),
                None => code,
            };
            out.insert(parts.join("::"), code);
        }
    }
    out
}

/// Every path a `use` item names, its braces expanded (`a::{b, c::d}` → `a::b`, `a::c::d`).
fn use_paths(code: &str) -> Vec<String> {
    fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let tree = tree.trim();
        let Some(open) = tree.find('{') else {
            let path = tree.split(" as ").next().unwrap_or("").trim();
            out.push(format!("{prefix}{path}"));
            return;
        };
        let head = tree[..open].trim();
        let close = tree.rfind('}').filter(|&c| c > open).unwrap_or(tree.len());
        let inner = &tree[open + 1..close];
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&format!("{prefix}{head}"), &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        if !inner[start..].trim().is_empty() {
            expand(&format!("{prefix}{head}"), &inner[start..], out);
        }
    }
    let mut out = Vec::new();
    let mut offset = 0;
    for line in code.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let t = line.trim_start();
        // An item at the start of a line: `use`, or `pub use` with any visibility.
        let item = t
            .strip_prefix("use ")
            .or_else(|| t.strip_prefix("pub ").and_then(|r| r.strip_prefix("use ")))
            .or_else(|| {
                let r = t.strip_prefix("pub(")?;
                r[r.find(')')? + 1..].trim_start().strip_prefix("use ")
            });
        let Some(item) = item else { continue };
        let from = start + (line.len() - item.len());
        if let Some(end) = code[from..].find(';') {
            expand("", &code[from..from + end], &mut out);
        }
    }
    out
}

/// `crate::a::b` and `super::x` paths written inline in code.
fn inline_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for start in ["crate::", "super::"] {
        for (i, _) in code.match_indices(start) {
            if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String = code[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(path);
        }
    }
    out
}

/// The module `path` (seen from module `from`) lands in: the longest known prefix.
fn resolve(mods: &BTreeMap<String, String>, from: &str, path: &str) -> Option<String> {
    let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<&str> = if from.is_empty() {
        Vec::new()
    } else {
        from.split("::").collect()
    };
    match segs.first() {
        Some(&"crate") => {
            base.clear();
            segs.remove(0);
        }
        Some(&"super") => {
            while segs.first() == Some(&"super") {
                base.pop();
                segs.remove(0);
            }
        }
        Some(&"self") => {
            segs.remove(0);
        }
        _ => return None,
    }
    (0..=segs.len()).rev().find_map(|n| {
        let m = base
            .iter()
            .chain(&segs[..n])
            .copied()
            .collect::<Vec<_>>()
            .join("::");
        mods.contains_key(&m).then_some(m)
    })
}

fn within(inner: &str, outer: &str) -> bool {
    outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}::"))
}

/// Module → the modules it imports (outside its own subtree and its ancestors).
pub fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(src);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, code) in &mods {
        let targets = edges.entry(m.clone()).or_default();
        for p in use_paths(code).into_iter().chain(inline_paths(code)) {
            if let Some(t) = resolve(&mods, m, &p)
                && !within(&t, m)
                && !within(m, &t)
            {
                targets.insert(t);
            }
        }
    }
    edges
}

/// Groups of modules that reach each other through imports (each group is a cycle).
pub fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for t in edges.get(&m).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    todo.push(t.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|m| (m, reach(m))).collect();
    let mut groups: Vec<BTreeSet<String>> = Vec::new();
    for (m, r) in &reaches {
        if !r.contains(*m) || groups.iter().any(|g| g.contains(*m)) {
            continue;
        }
        let group = r
            .iter()
            .filter(|t| reaches.get(t).is_some_and(|back| back.contains(*m)))
            .cloned()
            .collect();
        groups.push(group);
    }
    groups
}

/// `cargo xtask layers`: every crate's edges, then its cycles (an error if any).
pub fn report() -> anyhow::Result<()> {
    let root = crate::util::workspace_root();
    let mut bad = 0;
    for krate in CRATES {
        let edges = graph(&root.join(krate).join("src"));
        println!("{krate}:");
        for (m, targets) in &edges {
            let name = if m.is_empty() { "(root)" } else { m };
            let list: Vec<&str> = targets.iter().map(String::as_str).collect();
            println!("  {name} -> {}", list.join(", "));
        }
        for c in cycles(&edges) {
            println!("  CYCLE: {c:?}");
            bad += 1;
        }
    }
    anyhow::ensure!(bad == 0, "{bad} import cycle(s)");
    println!("no import cycles");
    Ok(())
}

const CRATES: [&str; 6] = [
    "profiler-core",
    "formats",
    "profiler",
    "libcpc",
    "libperfmon",
    "scenarios",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parser_sees_imports_both_ways() {
        let code = "use super::{bind::{Binding, Live}, error::CpcError};\n\
                    pub(crate) use crate::perf as p;\n\
                    fn f() { crate::host::hrtime(); let s = \"use -F {max} or less\"; }";
        assert_eq!(
            use_paths(code),
            [
                "super::bind::Binding",
                "super::bind::Live",
                "super::error::CpcError",
                "crate::perf"
            ]
        );
        assert!(inline_paths(code).contains(&"crate::host::hrtime".to_string()));
        let mut edges = BTreeMap::new();
        edges.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
        edges.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
        edges.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
        edges.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
        assert_eq!(cycles(&edges).len(), 1, "a → b → c → a, d outside");
    }

    #[test]
    fn no_module_imports_one_that_imports_it_back() {
        let root = crate::util::workspace_root();
        for krate in CRATES {
            let edges = graph(&root.join(krate).join("src"));
            assert!(edges.len() > 5, "{krate}: modules found");
            let found = cycles(&edges);
            assert!(found.is_empty(), "{krate}: import cycles {found:?}");
        }
    }
}
