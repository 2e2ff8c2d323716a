//! The layering docs/architecture.md promises, checked on the source: no
//! two source files import each other (a `use` of one names the other and
//! back). Re-exports (`pub use`) are a module's face, not a dependency, and
//! are not counted.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The module path of `file` inside the crate rooted at `root`
/// (`a/b.rs` and `a/b/mod.rs` are `["a", "b"]`; `lib.rs` and `main.rs` the
/// crate root).
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).expect("under its root");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("readable directory") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The paths a file's private `use` lines name (`crate::a::b`,
/// `super::c`, `self::d`, or `e::f` for a child module `e` it declares),
/// one per item of a `{...}` group; test modules left out.
fn used_paths(text: &str) -> Vec<Vec<String>> {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let children: BTreeSet<&str> = code
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("pub ").or(Some(l))?;
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim())
        })
        .collect();
    let mut out = Vec::new();
    for stmt in code.split(';') {
        let s = stmt.trim_start();
        let Some(rest) = s.strip_prefix("use ") else {
            continue;
        };
        let (base, group) = match rest.split_once("::{") {
            Some((b, g)) => (b, Some(g.trim_end_matches('}'))),
            None => (rest, None),
        };
        let head: Vec<String> = base.split("::").map(|p| p.trim().to_string()).collect();
        let first = head[0].as_str();
        if !matches!(first, "crate" | "super" | "self") && !children.contains(first) {
            continue;
        }
        out.push(head.clone());
        for item in group.into_iter().flat_map(|g| g.split(',')) {
            let item = item.split(" as ").next().unwrap_or("").trim();
            let name = item.split("::").next().unwrap_or("").trim();
            if !name.is_empty() && name != "self" && !name.starts_with('{') {
                let mut p = head.clone();
                p.push(name.to_string());
                out.push(p);
            }
        }
    }
    out
}

/// The file a path resolves to from module `at`: the longest prefix that
/// is a module of the crate.
fn resolve(
    modules: &HashMap<Vec<String>, PathBuf>,
    at: &[String],
    path: &[String],
) -> Option<PathBuf> {
    let (mut base, mut rest): (Vec<String>, &[String]) = match path[0].as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (at.to_vec(), &path[1..]),
        "super" => (at.to_vec(), path),
        _ => (at.to_vec(), path),
    };
    while rest.first().is_some_and(|p| p == "super") {
        base.pop();
        rest = &rest[1..];
    }
    (0..=rest.len()).rev().find_map(|n| {
        let mut k = base.clone();
        k.extend_from_slice(&rest[..n]);
        modules.get(&k).cloned()
    })
}

/// Pairs of files under `root` (a crate's source directory) that import
/// each other.
fn mutual_imports(root: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let modules: HashMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|f| (module_of(root, f), f.clone()))
        .collect();
    let mut edges = BTreeSet::new();
    for f in &files {
        let at = module_of(root, f);
        let text = std::fs::read_to_string(f).expect("readable source");
        for p in used_paths(&text) {
            if let Some(t) = resolve(&modules, &at, &p) {
                if &t != f {
                    edges.insert((f.clone(), t));
                }
            }
        }
    }
    edges
        .iter()
        .filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone())))
        .cloned()
        .collect()
}

fn crate_roots() -> Vec<PathBuf> {
    let mut roots = vec![Path::new(ROOT).join("src")];
    for e in std::fs::read_dir(Path::new(ROOT).join("crates")).expect("crates/") {
        let src = e.expect("entry").path().join("src");
        if src.is_dir() {
            roots.push(src);
        }
    }
    roots
}

#[test]
fn no_two_source_files_import_each_other() {
    let pairs: Vec<String> = crate_roots()
        .iter()
        .flat_map(|r| mutual_imports(r))
        .map(|(a, b)| format!("{} <-> {}", a.display(), b.display()))
        .collect();
    assert!(
        pairs.is_empty(),
        "files that import each other:\n{}",
        pairs.join("\n")
    );
}

#[test]
fn the_check_finds_a_pair_that_imports_each_other() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path();
    std::fs::write(
        src.join("lib.rs"),
        "mod a;\nmod b;\nmod c;\npub use c::C;\n",
    )
    .expect("write");
    std::fs::write(src.join("a.rs"), "use super::b::B;\npub struct A;\n").expect("write");
    std::fs::write(src.join("b.rs"), "use crate::{a::A, c};\npub struct B;\n").expect("write");
    std::fs::write(src.join("c.rs"), "use super::a::A;\npub struct C;\n").expect("write");
    let pairs = mutual_imports(src);
    assert_eq!(pairs, vec![(src.join("a.rs"), src.join("b.rs"))]);
}
