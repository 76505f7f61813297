//! Every Markdown page with Rust in it is compiled by `cargo test --doc`: the guide's pages
//! through `src/guide/mod.rs`, each README through its crate's root. A page that nobody
//! includes, or a Rust block marked `ignore`, is a page whose examples can drift unseen.

use std::fs;
use std::path::{Path, PathBuf};

/// The repository's root (this binary runs from the root package's directory).
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The info strings of the fenced code blocks of `text` that rustdoc compiles: `rust...` or
/// none at all (rustdoc takes an unmarked block as Rust), with their line numbers.
fn rust_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open = false;
    for (i, line) in text.lines().enumerate() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        if open {
            open = false;
            continue;
        }
        open = true;
        let info = info.trim();
        if info.is_empty() || info.split(',').any(|word| word.trim() == "rust") {
            blocks.push((i + 1, info.to_owned()));
        }
    }
    blocks
}

/// The Markdown files under `dir` (recursively), leaving out build output and VCS data.
fn markdown_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !matches!(name.as_ref(), "target" | ".git" | "node_modules") {
                markdown_files(&path, found);
            }
        } else if name.ends_with(".md") {
            found.push(path);
        }
    }
}

/// Every `include_str!("...")` of the crate roots and the guide's module, as absolute paths.
fn included_pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = Vec::new();
    for source in [
        "src/lib.rs",
        "src/guide/mod.rs",
        "distlock-tower/src/lib.rs",
        "distlock-macros/src/lib.rs",
    ] {
        let path = root.join(source);
        let text = read(&path);
        let dir = path.parent().expect("a source file has a directory");
        for piece in text.split("include_str!(\"").skip(1) {
            let Some((included, _)) = piece.split_once('"') else {
                continue;
            };
            if included.ends_with(".md") {
                let page = dir.join(included);
                pages.push(page.canonicalize().unwrap_or(page));
            }
        }
    }
    pages
}

#[test]
fn every_page_with_rust_is_a_doctest() {
    let root = root();
    let included = included_pages();
    let mut pages = Vec::new();
    markdown_files(&root, &mut pages);
    // The test's own sanity: the two READMEs and the guide are among what it looks at.
    for must in [
        "README.md",
        "distlock-tower/README.md",
        "src/guide/guarantees.md",
    ] {
        assert!(
            pages.iter().any(|page| page.ends_with(must)),
            "{must} not found under {}",
            root.display()
        );
    }
    let mut problems = Vec::new();
    for page in &pages {
        let blocks = rust_blocks(&read(page));
        let shown = page
            .strip_prefix(&root)
            .unwrap_or(page)
            .display()
            .to_string();
        if blocks.is_empty() {
            continue;
        }
        let canonical = page.canonicalize().unwrap_or_else(|_| page.clone());
        if !included.contains(&canonical) {
            problems.push(format!(
                "{shown} has Rust examples but no crate includes it as documentation \
                 (#[cfg(doctest)] #[doc = include_str!(..)]), so they are never compiled"
            ));
        }
        for (line, info) in blocks {
            if info.split(',').any(|word| word.trim() == "ignore") {
                problems.push(format!(
                    "{shown}:{line}: a Rust block marked `ignore` is never compiled; use \
                     `no_run` (hidden `#` lines can gate it on a feature)"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_guide_index_lists_every_page() {
    let root = root();
    let index = read(&root.join("src/guide/mod.rs"));
    let mut pages = Vec::new();
    markdown_files(&root.join("src/guide"), &mut pages);
    assert!(!pages.is_empty());
    for page in pages {
        let stem = page
            .file_stem()
            .expect("a page has a name")
            .to_string_lossy()
            .into_owned();
        assert!(
            index.contains(&format!("include_str!(\"{stem}.md\")")),
            "src/guide/{stem}.md is not a module of the guide"
        );
        assert!(
            index.contains(&format!("| [`{stem}`] |")),
            "src/guide/{stem}.md has no row in the guide's index table"
        );
    }
}
