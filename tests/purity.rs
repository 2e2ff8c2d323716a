//! The pure modules (the window engine, the pattern engine, the shared
//! canonical helpers and the Nexmark generator, which uses std alone) import nothing but std, serde, serde_json, sha2 and
//! each other as allowed below, and touch no clock, file, network, thread or
//! randomness.
//!
//! `crate::` paths inside a pure module may only name that module itself or
//! `crate::canonical`: the two engines share nothing but the canonical
//! helpers, and nothing pure depends on the service, the store, the API or
//! the CLI.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

const FORBIDDEN: &[&str] = &[
    "tokio",
    "axum",
    "tower",
    "rusqlite",
    "reqwest",
    "tracing",
    "std::time",
    "std::fs",
    "std::net",
    "std::thread",
    "std::process",
    "std::env",
    "SystemTime",
    "Instant",
    "rand",
    "RandomState",
    "HashMap::new",
    "HashSet::new",
    "println!",
    "eprintln!",
];

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every occurrence of `word` in `code` as a whole word.
fn has_word(code: &str, word: &str) -> bool {
    code.match_indices(word).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + word.len()..].chars().next();
        !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
    })
}

/// Checks one pure module (`src/<name>`), which may name `crate::<x>` for
/// `x` in `crate_allowed`. Returns how many files were checked.
fn check_module(name: &str, crate_allowed: &[&str]) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(name);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut allowed: Vec<String> = [
        "std",
        "core",
        "alloc",
        "serde",
        "serde_json",
        "sha2",
        "super",
        "crate",
        "self",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // the module's own submodules (re-exports in mod.rs): files, and folders
    // (`checkpoint/mod.rs` is the module `checkpoint`)
    allowed.extend(files.iter().map(|f| {
        let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
        if stem == "mod" {
            let dir = f.parent().unwrap().file_name().unwrap();
            dir.to_string_lossy().into_owned()
        } else {
            stem
        }
    }));
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for word in FORBIDDEN {
                assert!(
                    !has_word(code, word),
                    "{}:{}: the pure module {name} must not use `{word}`: {line}",
                    file.display(),
                    n + 1
                );
            }
            let trimmed = code.trim_start();
            if let Some(rest) = trimmed
                .strip_prefix("use ")
                .or_else(|| trimmed.strip_prefix("pub use "))
                .or_else(|| trimmed.strip_prefix("pub(crate) use "))
            {
                let first = rest
                    .split("::")
                    .next()
                    .unwrap()
                    .trim_start_matches('{')
                    .trim();
                assert!(
                    allowed.iter().any(|a| a == first),
                    "{}:{}: import from `{first}` is not allowed in the pure module {name}",
                    file.display(),
                    n + 1
                );
            }
            for (i, _) in code.match_indices("crate::") {
                if code[..i].chars().next_back().is_some_and(is_word_char) {
                    continue;
                }
                let target: String = code[i + "crate::".len()..]
                    .chars()
                    .take_while(|&c| is_word_char(c))
                    .collect();
                assert!(
                    crate_allowed.contains(&target.as_str()),
                    "{}:{}: the pure module {name} may use crate::{{{}}}, not crate::{target}: {line}",
                    file.display(),
                    n + 1,
                    crate_allowed.join(", ")
                );
            }
        }
    }
    files.len()
}

#[test]
fn engine_imports_only_std_serde_serde_json_sha2_and_canonical() {
    let n = check_module("engine", &["engine", "canonical"]);
    assert!(n >= 10, "expected the engine's files, found {n}");
}

#[test]
fn patterns_import_only_std_serde_serde_json_sha2_and_canonical() {
    let n = check_module("patterns", &["patterns", "canonical"]);
    assert!(n >= 10, "expected the pattern engine's files, found {n}");
}

#[test]
fn nexmark_imports_only_std() {
    let n = check_module("nexmark", &["nexmark"]);
    assert!(n >= 1, "expected the generator's files, found {n}");
    // std only: not even serde
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/nexmark/mod.rs"))
            .unwrap();
    for word in ["serde", "serde_json", "sha2"] {
        assert!(!has_word(&text, word), "src/nexmark uses {word}");
    }
}

#[test]
fn canonical_imports_only_std_serde_serde_json_and_sha2() {
    let n = check_module("canonical", &["canonical"]);
    assert!(n >= 3, "expected the canonical helpers' files, found {n}");
}

#[test]
fn the_check_sees_what_it_forbids() {
    assert!(has_word("let t = std::time::Instant::now();", "Instant"));
    assert!(has_word("use tokio::sync;", "tokio"));
    assert!(!has_word("let operand = 1;", "rand"));
    assert!(!has_word("fn brand_new()", "rand"));
    assert!(has_word("HashMap::new()", "HashMap::new"));
}
