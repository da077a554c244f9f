//! The container image (`deploy/Dockerfile`), checked without a container
//! engine: its build context is rebuilt the way the engine would send it
//! (`.dockerignore` applied), the build stage's files are laid out where its
//! `COPY` instructions put them, and the crate is compiled there with
//! `--locked`, so a path the build needs but the Dockerfile does not copy
//! fails here. The image's own configuration is loaded and held against
//! what the image exposes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(file: &str) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// One instruction of a Dockerfile: its keyword (upper case) and the rest.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    args: String,
}

/// The instructions of a Dockerfile: comments dropped, `\` continuations
/// joined.
fn instructions(text: &str) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && pending.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                let (keyword, args) = pending
                    .split_once(char::is_whitespace)
                    .unwrap_or((&pending, ""));
                out.push(Instruction {
                    keyword: keyword.to_ascii_uppercase(),
                    args: args.trim().to_owned(),
                });
                pending.clear();
            }
        }
    }
    assert!(
        pending.is_empty(),
        "the Dockerfile ends inside a continuation"
    );
    out
}

/// The words of an instruction: the JSON form (`["a", "b"]`) or
/// whitespace-separated.
fn words(args: &str) -> Vec<String> {
    if args.starts_with('[') {
        serde_json::from_str(args).unwrap_or_else(|e| panic!("{args}: {e}"))
    } else {
        args.split_whitespace().map(str::to_owned).collect()
    }
}

/// A `COPY`: its `--from` stage if any, its sources and its destination.
#[derive(Debug)]
struct Copy {
    from: Option<String>,
    sources: Vec<String>,
    dest: String,
}

fn copy(args: &str) -> Copy {
    let mut from = None;
    let mut rest = Vec::new();
    for word in words(args) {
        if let Some(stage) = word.strip_prefix("--from=") {
            from = Some(stage.to_owned());
        } else if word.starts_with("--") && rest.is_empty() {
            // --chown, --chmod, --link: no bearing on which files are copied.
        } else {
            rest.push(word);
        }
    }
    let dest = rest.pop().expect("COPY needs a destination");
    assert!(!rest.is_empty(), "COPY {args}: no source");
    for source in &rest {
        assert!(
            !source.contains(['*', '?', '[']),
            "COPY {source}: wildcards are not modelled here; name the paths"
        );
    }
    Copy {
        from,
        sources: rest,
        dest,
    }
}

/// A stage: its name and instructions, in order.
struct Stage {
    name: Option<String>,
    steps: Vec<Instruction>,
}

fn stages(text: &str) -> Vec<Stage> {
    let mut out: Vec<Stage> = Vec::new();
    for step in instructions(text) {
        if step.keyword == "FROM" {
            let w = words(&step.args);
            let name = match w.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.clone()),
                _ => None,
            };
            out.push(Stage {
                name,
                steps: Vec::new(),
            });
        } else {
            out.last_mut()
                .expect("an instruction before FROM")
                .steps
                .push(step);
        }
    }
    out
}

/// A `.dockerignore` pattern: path segments of globs, excluding or (with a
/// leading `!`) letting back in.
struct Pattern {
    segments: Vec<String>,
    keep: bool,
}

fn dockerignore(text: &str) -> Vec<Pattern> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (keep, l) = match l.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, l),
            };
            let segments = l
                .split('/')
                .filter(|s| !s.is_empty() && *s != ".")
                .map(str::to_owned)
                .collect();
            Pattern { segments, keep }
        })
        .collect()
}

/// One path segment against one glob segment (`*`, `?`, literal bytes).
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob(&pattern[1..], name) || (!name.is_empty() && glob(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => glob(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// Path segments against pattern segments, `**` standing for any number.
fn matches(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=path.len()).any(|skip| matches(rest, &path[skip..]))
        }
        Some((first, rest)) => match path.split_first() {
            Some((name, tail)) => glob(first.as_bytes(), name.as_bytes()) && matches(rest, tail),
            None => false,
        },
    }
}

/// Whether the engine leaves `path` (relative to the context root) out: the
/// last pattern matching it or one of its parent folders decides.
fn ignored(patterns: &[Pattern], path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').collect();
    let mut out = false;
    for pattern in patterns {
        if (1..=segments.len()).any(|n| matches(&pattern.segments, &segments[..n])) {
            out = !pattern.keep;
        }
    }
    out
}

/// Every file at or under `rel` (relative to the checkout), as relative paths.
fn files_under(rel: &str) -> Vec<String> {
    let path = root().join(rel);
    if path.is_file() {
        return vec![rel.to_owned()];
    }
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&path)
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    entries.sort();
    for name in entries {
        out.extend(files_under(&format!("{rel}/{name}")));
    }
    out
}

/// A container path (absolute, or relative to `workdir`), normalised.
fn container_path(workdir: &str, path: &str) -> String {
    let joined = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{workdir}/{path}")
    };
    let mut segments: Vec<&str> = Vec::new();
    for s in joined.split('/') {
        match s {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    format!("/{}", segments.join("/"))
}

/// What a stage's `COPY`s from the build context put where: container path
/// → context path, for the steps before `until` (all when `None`). Panics
/// naming a source that is not in the context (missing, or kept out by
/// `.dockerignore`).
fn copied(stage: &Stage, until: Option<usize>, patterns: &[Pattern]) -> Vec<(String, String)> {
    let mut workdir = "/".to_owned();
    let mut out = Vec::new();
    for step in stage.steps.iter().take(until.unwrap_or(usize::MAX)) {
        match step.keyword.as_str() {
            "WORKDIR" => workdir = container_path(&workdir, &step.args),
            "COPY" | "ADD" => {
                let c = copy(&step.args);
                if c.from.is_some() {
                    continue;
                }
                let into_dir = c.dest.ends_with('/') || c.sources.len() > 1;
                let dest = container_path(&workdir, &c.dest);
                for source in &c.sources {
                    let source = source.trim_start_matches("./").trim_end_matches('/');
                    assert!(
                        root().join(source).exists(),
                        "COPY {source}: not in the checkout"
                    );
                    assert!(
                        !ignored(patterns, source),
                        "COPY {source}: .dockerignore keeps it out of the build context"
                    );
                    let is_dir = root().join(source).is_dir();
                    let sent: Vec<String> = files_under(source)
                        .into_iter()
                        .filter(|f| !ignored(patterns, f))
                        .collect();
                    assert!(!sent.is_empty(), "COPY {source}: nothing of it is sent");
                    for file in sent {
                        let target = if is_dir {
                            format!("{dest}/{}", &file[source.len() + 1..])
                        } else if into_dir {
                            format!("{dest}/{}", file.rsplit('/').next().unwrap())
                        } else {
                            dest.clone()
                        };
                        out.push((container_path("/", &target), file));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The stage that compiles the gateway (its last `RUN … cargo build`), the
/// index of that step and the working directory it runs in.
fn compile_step(stages: &[Stage]) -> (&Stage, usize, String) {
    let mut found = None;
    for stage in stages {
        let mut workdir = "/".to_owned();
        for (i, step) in stage.steps.iter().enumerate() {
            if step.keyword == "WORKDIR" {
                workdir = container_path(&workdir, &step.args);
            }
            if step.keyword == "RUN" && step.args.contains("cargo build") {
                found = Some((stage, i, workdir.clone()));
            }
        }
    }
    found.expect("a RUN step with `cargo build`")
}

fn dockerfile() -> Vec<Stage> {
    stages(&read("deploy/Dockerfile"))
}

#[test]
fn dockerignore_patterns_match_as_the_engine_does() {
    let patterns = dockerignore("*\n!src\n!deploy/image.toml\n**/*.redb\n/tmp/x\n");
    for (path, out) in [
        ("target/debug/v1compat", true),
        (".git/HEAD", true),
        ("Cargo.toml", true),
        ("src/main.rs", false),
        ("src/callbacks/store.rs", false),
        ("src/a.redb", true),
        ("deploy/image.toml", false),
        ("deploy/Dockerfile", true),
        ("tmp/x", true),
        ("tmp/y", true),
    ] {
        assert_eq!(ignored(&patterns, path), out, "{path}");
    }
    let patterns = dockerignore("target\nsrc/*.rs\n!src/keep.rs\n");
    assert!(ignored(&patterns, "target/release/v1compat"));
    assert!(ignored(&patterns, "src/main.rs"));
    assert!(!ignored(&patterns, "src/keep.rs"));
    assert!(!ignored(&patterns, "src/sub/deep.rs"));
    assert!(!ignored(&patterns, "targets"));
}

#[test]
fn dockerfile_copies_are_modelled_as_the_engine_lays_them_out() {
    let stages = stages(
        "FROM base AS build\nWORKDIR /src\nCOPY Cargo.toml Cargo.lock ./\nCOPY openapi ./openapi\n\
         COPY deploy/image.toml /etc/v1compat/v1compat.toml\nRUN cargo build \\\n  --locked\n\
         FROM base\nCOPY --from=build /src/x /y\n",
    );
    assert_eq!(stages.len(), 2);
    assert_eq!(stages[0].name.as_deref(), Some("build"));
    let (stage, at, workdir) = compile_step(&stages);
    assert_eq!((at, workdir.as_str()), (4, "/src"));
    assert!(stage.steps[at].args.contains("--locked"));
    let placed = copied(stage, Some(at), &[]);
    for (container, context) in [
        ("/src/Cargo.toml", "Cargo.toml"),
        ("/src/Cargo.lock", "Cargo.lock"),
        ("/src/openapi/v1.json", "openapi/v1.json"),
        ("/etc/v1compat/v1compat.toml", "deploy/image.toml"),
    ] {
        assert!(
            placed.contains(&(container.to_owned(), context.to_owned())),
            "{container} ← {context} in {placed:?}"
        );
    }
    assert!(
        copied(&stages[1], None, &[]).is_empty(),
        "--from is not the context"
    );
}

/// The .dockerignore keeps the bulk of the checkout out of the context.
#[test]
fn dockerignore_keeps_build_output_and_history_out() {
    let patterns = dockerignore(&read(".dockerignore"));
    for path in [
        "target/debug/v1compat",
        "target-fuzz/x",
        ".git/HEAD",
        "fuzz/target/x",
        "deploy/bench/RESULTS.md",
        "tests/it/main.rs",
    ] {
        assert!(ignored(&patterns, path), "{path} is sent to the engine");
    }
}

/// The files the sources pull in at compile time are in the build stage.
#[test]
fn files_the_sources_include_are_copied_into_the_build_stage() {
    let stages = dockerfile();
    let patterns = dockerignore(&read(".dockerignore"));
    let (stage, at, workdir) = compile_step(&stages);
    let placed: BTreeSet<String> = copied(stage, Some(at), &patterns)
        .into_iter()
        .map(|(container, _)| container)
        .collect();
    let mut included = 0;
    for file in files_under("src")
        .into_iter()
        .filter(|f| f.ends_with(".rs"))
    {
        let text = read(&file);
        for macro_ in ["include_str!(\"", "include_bytes!(\""] {
            for (at, _) in text.match_indices(macro_) {
                let rest = &text[at + macro_.len()..];
                let rel = &rest[..rest.find('"').unwrap()];
                let dir = file.rsplit_once('/').map_or("", |(d, _)| d);
                let wanted = container_path(&format!("{workdir}/{dir}"), rel);
                assert!(
                    placed.contains(&wanted),
                    "{file} includes {rel}: {wanted} is not copied into the build stage"
                );
                included += 1;
            }
        }
    }
    assert!(included >= 1, "the OpenAPI document at least");
}

/// The build stage, laid out in an empty directory from exactly what its
/// `COPY`s take from the context, compiles with the Dockerfile's
/// `--locked`. `cargo check` (offline, with a target directory of its own
/// kept under the system's temporary directory between runs) fails on a
/// missing source, manifest entry or included file just as the image's
/// `cargo build` would, at a fraction of the cost.
#[test]
fn image_build_context_compiles() {
    let stages = dockerfile();
    let patterns = dockerignore(&read(".dockerignore"));
    let (stage, at, workdir) = compile_step(&stages);
    let run = &stage.steps[at].args;
    assert!(
        run.contains("--locked"),
        "the image build must use Cargo.lock: {run}"
    );
    let build = tempfile::tempdir().unwrap();
    let rootfs = build.path();
    for (container, context) in copied(stage, Some(at), &patterns) {
        let target = rootfs.join(container.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(root().join(&context), &target)
            .unwrap_or_else(|e| panic!("{context} → {}: {e}", target.display()));
    }
    let crate_dir: PathBuf = rootfs.join(workdir.trim_start_matches('/'));
    let target_dir = std::env::temp_dir().join("v1compat-image-context");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut check = Command::new(cargo);
    check
        .args(["check", "--locked", "--offline", "--bin", "v1compat"])
        .current_dir(&crate_dir);
    // Without the variables cargo sets for this test (CARGO_PKG_NAME …):
    // build scripts that watch them would otherwise see a change and build
    // again whenever the check runs from elsewhere.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_") && name != "CARGO_HOME" {
            check.env_remove(&*name);
        }
    }
    let out = check.env("CARGO_TARGET_DIR", &target_dir).output().unwrap();
    assert!(
        out.status.success(),
        "the image's build context does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The image's configuration: the file `CMD` names, as the Dockerfile puts
/// it there, listening where the image says (`EXPOSE`), with no
/// `V1COMPAT_*` variable in the image to override a mounted file.
#[test]
fn image_configuration_is_the_one_place_listen_addresses_come_from() {
    let stages = dockerfile();
    let patterns = dockerignore(&read(".dockerignore"));
    let last = stages.last().unwrap();
    for step in stages.iter().flat_map(|s| &s.steps) {
        if step.keyword == "ENV" || step.keyword == "ARG" {
            assert!(
                !step.args.contains("V1COMPAT_"),
                "{} {}: the image must not override the configuration file",
                step.keyword,
                step.args
            );
        }
    }
    let cmd = last
        .steps
        .iter()
        .rfind(|s| s.keyword == "CMD")
        .expect("a CMD");
    let cmd = words(&cmd.args);
    let config = &cmd[cmd.iter().position(|w| w == "--config").expect("--config") + 1];
    let placed = copied(last, None, &patterns);
    let (_, source) = placed
        .iter()
        .find(|(container, _)| container == config)
        .unwrap_or_else(|| panic!("{config} is not copied into the image"));
    let config = v1compat::config::load(&read(source), Vec::new())
        .unwrap_or_else(|e| panic!("{source}: {e}"));
    let exposed: Vec<u16> = last
        .steps
        .iter()
        .filter(|s| s.keyword == "EXPOSE")
        .flat_map(|s| words(&s.args))
        .map(|p| p.trim_end_matches("/tcp").parse().unwrap())
        .collect();
    for (name, addr) in [("public", config.public_addr), ("admin", config.admin_addr)] {
        assert!(
            addr.ip().is_unspecified(),
            "{name} {addr}: unreachable from outside the container"
        );
        assert!(
            exposed.contains(&addr.port()),
            "{name} {addr} is not EXPOSEd ({exposed:?})"
        );
    }
    // `v1compat probe` (the compose healthcheck) asks 127.0.0.1:9090 unless told otherwise.
    assert_eq!(config.admin_addr.port(), 9090);
}
