//! The documentation's own links: every relative link in README.md,
//! COMPATIBILITY.md, ARCHITECTURE.md (when present), docs/*.md and
//! deploy/README.md names a file or folder of the repository, and every
//! `#anchor` names a heading of the page it points to, slugged as GitHub
//! slugs them. Off the request path: it reads the Markdown files only.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The Markdown pages whose links are checked, relative to the crate root.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md"), root.join("COMPATIBILITY.md")];
    let architecture = root.join("ARCHITECTURE.md");
    if architecture.exists() {
        pages.push(architecture);
    }
    pages.push(root.join("deploy/README.md"));
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The anchor GitHub gives a heading: lower case, markup and punctuation
/// dropped (letters, digits, `-` and `_` kept), each space a `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    // A link in a heading contributes its text only.
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|i| open + i) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|i| close + i) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    text.trim()
        .chars()
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Lines outside fenced code blocks, with their line numbers (from 1).
fn prose_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter_map(move |(i, line)| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return None;
        }
        (!fenced).then_some((i + 1, line))
    })
}

/// The anchors a page's headings make, a repeated heading numbered `-1`,
/// `-2`… as GitHub numbers them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// Removes inline code spans, so `[a](b)` written as code is not a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// Every inline link target of a page, with its line number.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            // `[text](target "title")`: the target is the first word.
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push((n, target.trim_matches(['<', '>']).to_owned()));
            rest = &after[end + 1..];
        }
    }
    out
}

/// The broken links of one page: a missing file or folder, or an anchor no
/// heading of the target page makes.
fn broken_links(page: &Path, root: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
    let shown = page
        .strip_prefix(root)
        .unwrap_or(page)
        .display()
        .to_string();
    let dir = page.parent().expect("a page is in a folder");
    let mut broken = Vec::new();
    for (line, target) in links(&text) {
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            page.to_path_buf()
        } else {
            dir.join(path)
        };
        if !file.exists() {
            broken.push(format!("{shown}:{line}: {target}: no such file"));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if file.extension().is_none_or(|e| e != "md") {
            broken.push(format!(
                "{shown}:{line}: {target}: an anchor into a page that is not Markdown"
            ));
            continue;
        }
        let target_text = std::fs::read_to_string(&file).unwrap_or_default();
        if !anchors(&target_text).contains(anchor) {
            broken.push(format!(
                "{shown}:{line}: {target}: no heading makes #{anchor}"
            ));
        }
    }
    broken
}

#[test]
fn documentation_links_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pages = pages(root);
    assert!(pages.len() > 4, "the docs/ pages are found: {pages:?}");
    let broken: Vec<String> = pages.iter().flat_map(|p| broken_links(p, root)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn slugs_follow_github() {
    assert_eq!(
        slug(" V1 contract (OpenAPI) and schemathesis"),
        "v1-contract-openapi-and-schemathesis"
    );
    assert_eq!(
        slug(" Slow clients, connection limits and shutdown"),
        "slow-clients-connection-limits-and-shutdown"
    );
    assert_eq!(slug(" `[compat]` settings"), "compat-settings");
    assert_eq!(slug(" What's new — 2.0"), "whats-new--20");
    assert_eq!(
        slug(" See [the relay](callbacks.md) here"),
        "see-the-relay-here"
    );
    assert_eq!(slug(" snake_case and-dash"), "snake_case-and-dash");
}

#[test]
fn repeated_headings_are_numbered_and_code_is_not_a_heading() {
    let page = "# Top\n## Notes\n```sh\n# not a heading\n```\n## Notes\n#nospace\n";
    let got: Vec<String> = anchors(page).into_iter().collect();
    assert_eq!(got, ["notes", "notes-1", "top"]);
}

#[test]
fn a_broken_link_or_anchor_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("other.md"), "# Other page\n## A part\n").unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "# Page\n\
         [fine](other.md#a-part) [self](#page) [web](https://example.com/x#y)\n\
         `[code](missing.md)`\n\
         ```\n[fenced](missing.md)\n```\n\
         [gone](missing.md) [bad anchor](other.md#no-part) [bad self](#nothing)\n",
    )
    .unwrap();
    let broken = broken_links(&page, dir.path());
    assert_eq!(
        broken,
        [
            "page.md:7: missing.md: no such file",
            "page.md:7: other.md#no-part: no heading makes #no-part",
            "page.md:7: #nothing: no heading makes #nothing",
        ]
    );
}
