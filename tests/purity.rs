//! The engine is pure: it imports nothing but std, serde, serde_json and sha2,
//! and touches no clock, file, network, thread or randomness.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn engine_imports_only_std_serde_serde_json_and_sha2() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(
        files.len() >= 10,
        "expected the engine's files under {root:?}"
    );
    let forbidden = [
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
        "println!",
        "eprintln!",
    ];
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
    // the engine's own modules (re-exports in mod.rs): files, and folders
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
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for word in forbidden {
                let hit = code.match_indices(word).any(|(i, _)| {
                    let before = code[..i].chars().next_back();
                    let after = code[i + word.len()..].chars().next();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                        && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                assert!(
                    !hit,
                    "{}:{}: the engine must not use `{word}`: {line}",
                    file.display(),
                    n + 1
                );
            }
            let trimmed = code.trim_start();
            if let Some(rest) = trimmed
                .strip_prefix("use ")
                .or_else(|| trimmed.strip_prefix("pub use "))
            {
                let first = rest
                    .split("::")
                    .next()
                    .unwrap()
                    .trim_start_matches('{')
                    .trim();
                assert!(
                    allowed.iter().any(|a| a == first),
                    "{}:{}: import from `{first}` is not allowed in the engine",
                    file.display(),
                    n + 1
                );
            }
        }
    }
}
