//! The shape of the source tree, as ARCHITECTURE.md's module map draws it: no circle between
//! top-level modules, no layer reaching up (the semantics know no connection, the context no
//! loop), and a map that names exactly the files `src/` has.
//!
//! The module graph is read as `../shared/tools/modgraph.py` reads it: every `crate::` path
//! (in `use` lines and inline) of a file outside its `#[cfg(test)]` part, comments dropped,
//! folded to the top-level module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, as paths relative to the crate root (`src/conn/h1.rs`).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn relative(p: &Path) -> String {
    p.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap().to_str().unwrap().to_string()
}

/// The top-level module a file belongs to (`src/conn/h1.rs` -> `conn`), None for the crate
/// roots and the extra binaries.
fn top_module(rel: &str) -> Option<String> {
    let first = rel.strip_prefix("src/")?.split('/').next()?;
    if matches!(first, "main.rs" | "lib.rs" | "bin") {
        return None;
    }
    Some(first.strip_suffix(".rs").unwrap_or(first).to_string())
}

/// The text of a file that counts for its dependencies: before `#[cfg(test)]`, with `//`
/// comments removed.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines().map(|l| l.find("//").map_or(l, |i| &l[..i])).collect::<Vec<_>>().join("\n")
}

/// The names right after each `crate::` in `code`: `crate::a::b` gives `a`, `crate::{a, b::c}`
/// gives `a` and `b`.
fn crate_paths(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `mycrate::`, not `crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Up to the brace that closes the group (groups nest).
            let mut open = 1;
            let close = group
                .char_indices()
                .find(|&(_, c)| {
                    open += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    open == 0
                })
                .map_or(group.len(), |(j, _)| j);
            let inner = &group[..close];
            // Top-level names of the group: at the start or after a comma, at depth 0.
            let mut depth = 0;
            let mut start = true;
            for (j, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && depth == 0 && !c.is_whitespace() => {
                        out.push(ident(&inner[j..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident(rest));
        }
    }
    out
}

/// Top-level module -> the top-level modules it names, with the files that name each.
fn module_graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let tops: BTreeSet<String> = files.iter().filter_map(|p| top_module(&relative(p))).collect();
    let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for p in &files {
        let rel = relative(p);
        let Some(from) = top_module(&rel) else { continue };
        for to in crate_paths(&code_of(&fs::read_to_string(p).unwrap())) {
            if to != from && tops.contains(&to) {
                edges.entry(from.clone()).or_default().entry(to).or_default().insert(rel.clone());
            }
        }
    }
    edges
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(edges: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            let edges = self.edges;
            for w in edges.get(v).into_iter().flat_map(|m| m.keys()) {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let lw = self.low[w.as_str()];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.stack.contains(&w.as_str()) {
                    let iw = self.index[w.as_str()];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut c = Vec::new();
                while let Some(w) = self.stack.pop() {
                    c.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if c.len() > 1 {
                    c.sort();
                    self.out.push(c);
                }
            }
        }
    }
    let mut t = Tarjan { edges, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), out: Vec::new() };
    let nodes: BTreeSet<&str> =
        edges.iter().flat_map(|(a, m)| std::iter::once(a.as_str()).chain(m.keys().map(|b| b.as_str()))).collect();
    for v in nodes {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn no_circle_between_top_level_modules() {
    let edges = module_graph();
    let found = circles(&edges);
    let mut report = String::new();
    for c in &found {
        report.push_str(&format!("circle: {}\n", c.join(" ")));
        for a in c {
            for (b, files) in edges.get(a).into_iter().flatten() {
                if c.contains(b) {
                    report
                        .push_str(&format!("  {a} -> {b}: {}\n", files.iter().cloned().collect::<Vec<_>>().join(", ")));
                }
            }
        }
    }
    assert!(found.is_empty(), "module circles:\n{report}");
}

#[test]
fn the_circle_finder_finds_circles() {
    // The check above is only as good as this: a graph with a circle must be reported.
    let mut g: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        g.entry(a.into()).or_default().entry(b.into()).or_default().insert("x".into());
    }
    assert_eq!(circles(&g), vec![vec!["a".to_string(), "b".into(), "c".into()]]);
    assert_eq!(
        crate_paths("use crate::a::b; x = crate::c::d(); use crate::{e, f::{g, h}, i}; notcrate::j"),
        ["a", "c", "e", "f", "i"]
    );
}

#[test]
fn layers_only_reach_down() {
    let edges = module_graph();
    // Each module, and what it must never name.
    let rules: &[(&str, &[&str])] = &[
        // The semantics: no socket, no connection, no loop.
        ("serve", &["conn", "server", "workers"]),
        // The context every request uses: no connection, no semantics, no loop.
        ("ctx", &["conn", "serve", "server", "workers"]),
        // A connection: the semantics and the context, never the loop.
        ("conn", &["server", "workers"]),
    ];
    let leaves =
        ["http", "h2", "h3", "fs", "access", "route", "tls", "thttpd", "log", "status", "glob", "proxy", "sys"];
    let upper = ["conn", "serve", "ctx", "server", "workers"];
    let mut bad = Vec::new();
    for (from, banned) in rules.iter().copied().chain(leaves.iter().map(|l| (*l, &upper[..]))) {
        for (to, files) in edges.get(from).into_iter().flatten() {
            if banned.contains(&to.as_str()) {
                bad.push(format!("{from} -> {to}: {files:?}"));
            }
        }
    }
    assert!(bad.is_empty(), "a layer reaches up:\n{}", bad.join("\n"));
}

/// The files ARCHITECTURE.md's module map names: in its first code block, a line `src/x.rs`
/// names that file; a line `src/d/` opens a folder whose files follow, indented by two
/// spaces (`  f.rs`, `  sub/f.rs`); deeper-indented lines are descriptions.
fn mapped_files() -> BTreeSet<String> {
    let arch = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md")).unwrap();
    let map = arch.split("## Module map").nth(1).expect("ARCHITECTURE.md has a `## Module map` section");
    let block = map.split("```").nth(1).expect("the module map is a code block");
    let mut out = BTreeSet::new();
    let mut folder: Option<String> = None;
    for line in block.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if line.starts_with("src/") {
            if first.ends_with('/') {
                folder = Some(first.to_string());
            } else {
                folder = None;
                out.insert(first.to_string());
            }
        } else if line.starts_with("  ") && !line.starts_with("   ") && first.ends_with(".rs") {
            let f = folder.as_ref().unwrap_or_else(|| panic!("{first:?} is indented but under no src/ folder line"));
            out.insert(format!("{f}{first}"));
        }
    }
    out
}

#[test]
fn the_module_map_names_every_file_and_only_real_ones() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let real: BTreeSet<String> = files.iter().map(|p| relative(p)).collect();
    let mapped = mapped_files();
    let missing: Vec<_> = real.difference(&mapped).collect();
    let stale: Vec<_> = mapped.difference(&real).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "ARCHITECTURE.md's module map and src/ differ:\n  not in the map: {missing:?}\n  in the map, not in src/: {stale:?}"
    );
}
