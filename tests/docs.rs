//! Documentation and packaging drift tests: the man pages, the README, the default page
//! (`www/index.html`), the shell completions, the systemd units, the logrotate file and the
//! Debian package are checked against the code, so that none of them can silently fall behind
//! it.
//!
//! # Sources of truth
//!
//! - **Configuration keys**: `config/ferrohttpd.toml`, which lists every key at its default
//!   (`tests/config.rs` checks that the server accepts it). A line is recognised as
//!   - a *table* when, after an optional `# ` (a commented example table), it is exactly
//!     `[name]` or `[[name]]`;
//!   - a *key* when, after an optional `# ` (a commented example key, not set by default), it
//!     is `key = value` with `key` made of ASCII letters, digits, `_` and `-`, and exactly one
//!     space on each side of the `=`. The value of an uncommented key is its default.
//!
//!   So a prose comment must not itself look like `# word = text`.
//! - **Flags and subcommands**: the output of `ferrohttpd --help` and of the same binary run
//!   as `thttpd --help`. A flag is a whitespace-separated word of that text starting with `-`
//!   followed by a letter (or `--` and a letter), once `[ ] | , ( ) ' "` and anything from a
//!   `=` on are trimmed. A subcommand is the word after `ferrohttpd` on a usage line
//!   (`usage: ferrohttpd compress DIR ...`) that is neither a flag nor an option group.
//!
//! # What is checked against them
//!
//! - `packaging/man/ferrohttpd.toml.5`: each table is a `.SS [name]` (or `[[name]]`), each key
//!   a `.TP` tag `\fBkey\fR = default`; the default must be the file's value, unless it is an
//!   italic placeholder (`\fIseconds\fR`), which only keys commented out in the file (and the
//!   ones in [`PLACEHOLDER_DEFAULTS`]) may have. A table documented by a single italic
//!   placeholder key (`\fISTATUS\fR = \fIpath\fR`) is a *map* whose keys the user chooses
//!   (`[errors]`, `[mime]`): the file's keys there are examples and are not compared.
//! - `packaging/man/ferrohttpd.8`: every flag is a `.TP` tag in a section whose title contains
//!   `OPTIONS` or `COMMANDS`; the first word of a tag under `COMMANDS` is a subcommand.
//! - `docs/configuration.md` (the README's reference for configuring): the table under the
//!   header `| section | keys |` (keys are the code spans that are bare names; map tables list
//!   none), the table under `| flag | meaning |`, and its configuration-error example.
//! - the bash and zsh completions: every flag and subcommand appears as a word.
//! - `www/index.html`, what `cargo run --release` serves: its key table
//!   (`<table class="keys">`) has a section row for every table of the file, and each key
//!   it shows is in that table with the default the file gives (or, in words, is one the file
//!   leaves unset); `[table] key` in any `<code>` is a real key; its TOML examples pass
//!   `--check-config`; every flag in its flag tables and in its `ferrohttpd ...` command
//!   lines is in `--help`; it names every man page of `packaging/man/` and no other; its links
//!   resolve to files of `www/` or ids of the page; it loads nothing from outside `www/`; it
//!   is well formed (see [`parse_page`]); and it contains none of [`UNTRUE_PHRASES`]. A new
//!   feature is one `<li>` of its list and a new key one `<tr>` of its table, checked as soon
//!   as it is written.
//! - both ways, for tables, keys, flags and subcommands: a name in the code but not in the
//!   docs fails, and so does a name in the docs but not in the code (the default page shows
//!   only the most useful keys and flags, so for those it is one way: what it shows exists).
//!
//! The tests that need an outside tool (`groff`, `man`, `systemd-analyze`, `logrotate`,
//! `dpkg-deb`, `bash`, `zsh`) print a note and pass when it is not installed; `.ci/run` is
//! expected to install them. They use the debug binary (`CARGO_BIN_EXE_ferrohttpd`), so CI
//! need not build a release.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ferrohttpd");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Keys set in `config/ferrohttpd.toml` whose man page entry shows a placeholder instead of
/// the file's value: `root = "../www"` is the source tree's `www/` seen from `config/`, while
/// the built-in default is `www` in the working directory; the man page says both in words.
const PLACEHOLDER_DEFAULTS: &[&str] = &["server.root"];

fn path(rel: &str) -> PathBuf {
    Path::new(ROOT).join(rel)
}

fn read(rel: &str) -> String {
    fs::read_to_string(path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Where an outside tool is: on `PATH`, or in an `sbin` directory (`logrotate` lives in
/// `/usr/sbin`, which a user's `PATH` may lack).
fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// The outside tool to run; None, with a note saying what is left unchecked, when it is not
/// installed.
fn tool(tool: &str, why: &str) -> Option<PathBuf> {
    let found = find_tool(tool);
    if found.is_none() {
        eprintln!("note: {tool} is not installed: {why} not checked (apt-get install {})", apt_package(tool));
    }
    found
}

fn apt_package(tool: &str) -> &'static str {
    match tool {
        "groff" => "groff-base",
        "man" => "man-db",
        "systemd-analyze" => "systemd",
        "logrotate" => "logrotate",
        "dpkg-deb" => "dpkg",
        "zsh" => "zsh",
        _ => "bash",
    }
}

/// Runs a command to completion with a time limit, killing it past the limit.
fn run(cmd: &mut Command, limit: Duration) -> Output {
    let what = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap_or_else(|e| panic!("{what}: {e}")),
        Err(_) => {
            // The child is not reaped yet (the waiting thread still holds it): its pid is ours.
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
            panic!("{what} did not finish within {limit:?}");
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn fail_if_any(what: &str, problems: &[String]) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

/// Both ways: names in `code` missing from `doc`, and names in `doc` missing from `code`.
fn compare(problems: &mut Vec<String>, what: &str, doc: &str, code: &BTreeSet<String>, docs: &BTreeSet<String>) {
    for n in code.difference(docs) {
        problems.push(format!("{what} {n} is in the code but not in {doc}"));
    }
    for n in docs.difference(code) {
        problems.push(format!("{what} {n} is in {doc} but not in the code"));
    }
}

// -------------------------------------------------------------------------------------------
// Roff

/// The text of a roff line with the escapes these pages use resolved and fonts dropped.
fn unroff(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('f') => {
                // \fB, \fI, \fR, \fP, or a two-letter font: \f(CW
                let font = it.next();
                if font == Some('(') {
                    it.next();
                    it.next();
                }
            }
            Some('(') => {
                let name: String = [it.next(), it.next()].iter().flatten().collect();
                out.push_str(match name.as_str() {
                    "dq" => "\"",
                    "lq" | "rq" => "\"",
                    "bu" => "*",
                    "em" => "--",
                    _ => "?",
                });
            }
            Some('-') => out.push('-'),
            Some('e') | Some('\\') => out.push('\\'),
            Some(' ') | Some('~') => out.push(' '),
            Some('&') | Some('c') | Some('/') | Some(',') => {}
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => {}
        }
    }
    out
}

/// A page as (section title, tag line) pairs: every line that follows a `.TP`.
fn roff_tags(page: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if let Some(t) = line.strip_prefix(".SH ") {
            section = t.trim().trim_matches('"').to_string();
        } else if line.trim_end() == ".TP" {
            if let Some(tag) = lines.next() {
                out.push((section.clone(), tag.to_string()));
            }
        }
    }
    out
}

/// `.TH NAME SECTION DATE SOURCE MANUAL`: the SOURCE field.
fn th_source(page: &str) -> String {
    let th = page.lines().find(|l| l.starts_with(".TH ")).expect("a .TH line");
    let fields: Vec<&str> = th.split('"').collect();
    fields.get(1).expect(".TH has a quoted source field").to_string()
}

// -------------------------------------------------------------------------------------------
// Configuration keys

/// A key of `config/ferrohttpd.toml`.
#[derive(Debug)]
struct TomlKey {
    /// The default as written, for an uncommented key; None for a commented example.
    value: Option<String>,
}

type Tables = BTreeMap<String, BTreeMap<String, TomlKey>>;

fn table_header(s: &str) -> Option<String> {
    let inner =
        s.strip_prefix("[[").and_then(|r| r.strip_suffix("]]")).or_else(|| s.strip_prefix('[')?.strip_suffix(']'))?;
    let ok = !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    ok.then(|| inner.to_string())
}

fn key_line(s: &str) -> Option<(String, String)> {
    let (k, v) = s.split_once(" = ")?;
    let ok = !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    (ok && !v.trim().is_empty() && !v.starts_with(' ')).then(|| (k.to_string(), v.trim().to_string()))
}

fn config_keys() -> Tables {
    let mut tables = Tables::new();
    let mut current: Option<String> = None;
    for line in read("config/ferrohttpd.toml").lines() {
        let line = line.trim_end();
        let (commented, body) = match line.strip_prefix('#') {
            Some(rest) => (true, rest.strip_prefix(' ').unwrap_or(rest)),
            None => (false, line.trim_start()),
        };
        if let Some(t) = table_header(body) {
            tables.entry(t.clone()).or_default();
            current = Some(t);
        } else if let Some((k, v)) = key_line(body) {
            let t = current.clone().unwrap_or_else(|| panic!("config/ferrohttpd.toml: key {k} before any table"));
            tables.entry(t).or_default().insert(k, TomlKey { value: (!commented).then_some(v) });
        }
    }
    tables
}

/// A key tag of `ferrohttpd.toml.5`.
#[derive(Debug)]
struct ManKey {
    /// The default shown, or None for an italic placeholder.
    value: Option<String>,
    /// The key itself is an italic placeholder: the table is a map.
    placeholder_key: bool,
}

fn man5_keys() -> BTreeMap<String, BTreeMap<String, ManKey>> {
    let page = read("packaging/man/ferrohttpd.toml.5");
    let mut tables: BTreeMap<String, BTreeMap<String, ManKey>> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if line.starts_with(".SH") {
            current = None;
        } else if let Some(t) = line.strip_prefix(".SS ") {
            current = table_header(t.trim().trim_matches('"'));
            if let Some(t) = &current {
                tables.entry(t.clone()).or_default();
            }
        } else if line.trim_end() == ".TP" {
            let (Some(t), Some(tag)) = (&current, lines.next()) else { continue };
            let (raw_key, raw_value) = tag
                .split_once(" = ")
                .unwrap_or_else(|| panic!("ferrohttpd.toml.5: tag {tag:?} in [{t}] is not `key = default`"));
            let placeholder_key = raw_key.starts_with("\\fI");
            let value = (!raw_value.trim_start().starts_with("\\fI")).then(|| unroff(raw_value).trim().to_string());
            tables
                .entry(t.clone())
                .or_default()
                .insert(unroff(raw_key).trim().to_string(), ManKey { value, placeholder_key });
        }
    }
    tables
}

/// Where the key table, the flag table and the error example are: the reference page the
/// README links for configuring.
const CONFIG_DOC: &str = "docs/configuration.md";

/// The `| section | keys |` table of [`CONFIG_DOC`].
fn doc_keys() -> BTreeMap<String, BTreeSet<String>> {
    let readme = read(CONFIG_DOC);
    let mut out = BTreeMap::new();
    let mut lines = readme.lines().skip_while(|l| !l.replace(' ', "").starts_with("|section|keys|")).skip(2);
    for row in lines.by_ref().take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').collect();
        let section = table_header(cells[1].trim().trim_matches('`'))
            .unwrap_or_else(|| panic!("{CONFIG_DOC} key table row {row:?}"));
        let keys = code_spans(cells[2])
            .into_iter()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'))
            .collect();
        out.insert(section, keys);
    }
    assert!(!out.is_empty(), "{CONFIG_DOC} has no `| section | keys |` table");
    out
}

fn code_spans(s: &str) -> Vec<String> {
    s.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

fn normalize_value(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn config_keys_match_the_man_page_and_the_readme() {
    let toml = config_keys();
    let man = man5_keys();
    let readme = doc_keys();
    assert!(toml.len() >= 10 && toml.values().map(BTreeMap::len).sum::<usize>() >= 50, "parsed too little: {toml:?}");
    let mut problems = Vec::new();

    let code_tables: BTreeSet<String> = toml.keys().cloned().collect();
    compare(&mut problems, "table", "ferrohttpd.toml(5)", &code_tables, &man.keys().cloned().collect());
    compare(
        &mut problems,
        "table",
        "docs/configuration.md's key table",
        &code_tables,
        &readme.keys().cloned().collect(),
    );

    for (table, keys) in &toml {
        let Some(man_keys) = man.get(table) else { continue };
        let is_map = man_keys.values().any(|k| k.placeholder_key);
        if is_map {
            if man_keys.len() != 1 {
                problems
                    .push(format!("ferrohttpd.toml(5): map table [{table}] must have exactly one (placeholder) key"));
            }
            if readme.get(table).is_some_and(|k| !k.is_empty()) {
                problems
                    .push(format!("docs/configuration.md: map table [{table}] lists key names {:?}", readme[table]));
            }
            continue;
        }
        let code: BTreeSet<String> = keys.keys().map(|k| format!("{table}.{k}")).collect();
        let docs: BTreeSet<String> = man_keys.keys().map(|k| format!("{table}.{k}")).collect();
        compare(&mut problems, "key", "ferrohttpd.toml(5)", &code, &docs);
        if let Some(r) = readme.get(table) {
            compare(
                &mut problems,
                "key",
                "docs/configuration.md's key table",
                &code,
                &r.iter().map(|k| format!("{table}.{k}")).collect(),
            );
        }
        for (key, k) in keys {
            let Some(m) = man_keys.get(key) else { continue };
            let name = format!("{table}.{key}");
            match (&k.value, &m.value) {
                (Some(file), Some(doc)) if normalize_value(file) != normalize_value(doc) => problems
                    .push(format!("{name}: default {file} in config/ferrohttpd.toml but {doc} in ferrohttpd.toml(5)")),
                (None, Some(doc)) => problems.push(format!(
                    "{name}: ferrohttpd.toml(5) gives the default {doc}, but config/ferrohttpd.toml leaves it unset"
                )),
                (Some(file), None) if !PLACEHOLDER_DEFAULTS.contains(&name.as_str()) => problems
                    .push(format!("{name}: ferrohttpd.toml(5) shows a placeholder instead of its default {file}")),
                _ => {}
            }
        }
    }
    fail_if_any("configuration keys out of step", &problems);
}

/// The TOML examples of ferrohttpd.toml(5) are valid configurations.
#[test]
fn man_page_config_examples_are_valid() {
    let page = read("packaging/man/ferrohttpd.toml.5");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut checked = 0;
    let mut block: Option<Vec<String>> = None;
    for line in page.lines() {
        match (line.trim_end(), &mut block) {
            (".EX", _) => block = Some(Vec::new()),
            (".EE", Some(b)) => {
                let toml = b.join("\n");
                block = None;
                if !toml.starts_with('[') {
                    continue;
                }
                let mut toml = toml;
                for (from, to) in [
                    ("/var/www/ferrohttpd", "www"),
                    ("/srv/example.org", "org"),
                    ("/srv/example.net", "net"),
                    ("/var/log/ferrohttpd", "log"),
                    ("/srv/site", "site"),
                    ("/srv/app", "app"),
                ] {
                    fs::create_dir_all(d.join(to)).unwrap();
                    // The error page the examples name (--check-config wants it there).
                    fs::write(d.join(to).join("404.html"), "not found\n").unwrap();
                    toml = toml.replace(from, d.join(to).to_str().unwrap());
                }
                let file = d.join(format!("example{checked}.toml"));
                fs::write(&file, &toml).unwrap();
                let out =
                    run(Command::new(BIN).arg("--config").arg(&file).arg("--check-config"), Duration::from_secs(10));
                assert!(out.status.success(), "example of ferrohttpd.toml(5) rejected:\n{toml}\n{}", text(&out.stderr));
                checked += 1;
            }
            (l, Some(b)) => b.push(unroff(l)),
            _ => {}
        }
    }
    assert!(checked >= 2, "expected TOML examples in ferrohttpd.toml(5), found {checked}");
}

// -------------------------------------------------------------------------------------------
// Flags

struct Cli {
    flags: BTreeSet<String>,
    subcommands: BTreeSet<String>,
}

fn flag_word(w: &str) -> Option<String> {
    let w = w.trim_matches(|c| "[]|,()'\"".contains(c));
    let w = w.split('=').next().unwrap_or(w);
    let name = w.strip_prefix("--").or_else(|| w.strip_prefix('-'))?;
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then(|| w.to_string())
}

fn help_text(program: &Path) -> String {
    let out = run(Command::new(program).arg("--help"), Duration::from_secs(10));
    assert!(out.status.success(), "{} --help: {out:?}", program.display());
    text(&out.stdout)
}

/// The flags and subcommands of `ferrohttpd --help` and `thttpd --help`.
fn cli_from_help() -> Cli {
    let dir = tempfile::tempdir().unwrap();
    let thttpd = dir.path().join("thttpd");
    std::os::unix::fs::symlink(BIN, &thttpd).unwrap();
    let mut flags = BTreeSet::new();
    let mut subcommands = BTreeSet::new();
    for help in [help_text(Path::new(BIN)), help_text(&thttpd)] {
        for line in help.lines() {
            flags.extend(line.split_whitespace().filter_map(flag_word));
            let mut words = line.split_whitespace().skip_while(|w| *w == "usage:");
            if words.next() == Some("ferrohttpd") {
                if let Some(w) = words.next().filter(|w| w.bytes().all(|b| b.is_ascii_lowercase())) {
                    subcommands.insert(w.to_string());
                }
            }
        }
    }
    for must in ["--config", "--check-config", "--help", "--version", "-V", "-p", "-d", "-D"] {
        assert!(flags.contains(must), "parsed {flags:?} from --help: {must} missing");
    }
    assert!(subcommands.contains("compress"), "parsed subcommands {subcommands:?} from --help");
    Cli { flags, subcommands }
}

fn man8_cli() -> Cli {
    let page = read("packaging/man/ferrohttpd.8");
    let mut flags = BTreeSet::new();
    let mut subcommands = BTreeSet::new();
    for (section, tag) in roff_tags(&page) {
        if !(section.contains("OPTIONS") || section.contains("COMMANDS")) {
            continue;
        }
        let tag = unroff(&tag);
        let mut words = tag.split_whitespace().peekable();
        if section.contains("COMMANDS") {
            if let Some(w) = words.next_if(|w| !w.starts_with('-')) {
                subcommands.insert(w.to_string());
            }
        }
        flags.extend(words.filter(|w| w.trim_start_matches('[').starts_with('-')).filter_map(flag_word));
    }
    Cli { flags, subcommands }
}

/// The `| flag | meaning |` table of [`CONFIG_DOC`].
fn doc_cli() -> Cli {
    let readme = read(CONFIG_DOC);
    let mut flags = BTreeSet::new();
    let mut subcommands = BTreeSet::new();
    let rows = readme.lines().skip_while(|l| !l.replace(' ', "").starts_with("|flag|meaning|")).skip(2);
    for row in rows.take_while(|l| l.starts_with('|')) {
        let first = row.split('|').nth(1).unwrap_or_default();
        for span in code_spans(first) {
            let mut words = span.split_whitespace().peekable();
            if let Some(w) = words.next_if(|w| w.bytes().all(|b| b.is_ascii_lowercase())) {
                subcommands.insert(w.to_string());
            }
            flags.extend(words.filter(|w| w.trim_start_matches('[').starts_with('-')).filter_map(flag_word));
        }
    }
    assert!(!flags.is_empty(), "{CONFIG_DOC} has no `| flag | meaning |` table");
    Cli { flags, subcommands }
}

#[test]
fn flags_match_the_man_page_the_readme_and_the_completions() {
    let code = cli_from_help();
    let mut problems = Vec::new();
    for (doc, cli) in [("ferrohttpd(8)", man8_cli()), ("docs/configuration.md's flag table", doc_cli())] {
        compare(&mut problems, "flag", doc, &code.flags, &cli.flags);
        compare(&mut problems, "subcommand", doc, &code.subcommands, &cli.subcommands);
    }
    for file in ["packaging/completions/ferrohttpd.bash", "packaging/completions/_ferrohttpd"] {
        let src = read(file);
        let words: BTreeSet<&str> = src
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        for name in code.flags.iter().chain(&code.subcommands) {
            if !words.contains(name.as_str()) {
                problems.push(format!("{name} is in --help but not offered by {file}"));
            }
        }
    }
    fail_if_any("command line out of step", &problems);
}

#[test]
fn man_pages_carry_the_crate_version() {
    for page in ["packaging/man/ferrohttpd.8", "packaging/man/ferrohttpd.toml.5"] {
        assert_eq!(th_source(&read(page)), format!("ferrohttpd {VERSION}"), "{page}: .TH source field");
    }
}

// -------------------------------------------------------------------------------------------
// Rendering

#[test]
fn man_pages_render_without_warnings() {
    let pages = ["packaging/man/ferrohttpd.8", "packaging/man/ferrohttpd.toml.5"];
    if let Some(groff) = tool("groff", "rendering with groff -ww") {
        for page in pages {
            let out = run(
                Command::new(&groff).args(["-man", "-Tutf8", "-ww", "-z"]).arg(path(page)),
                Duration::from_secs(20),
            );
            assert!(out.status.success() && out.stderr.is_empty(), "groff -ww {page}:\n{}", text(&out.stderr));
        }
    }
    if let Some(man) = tool("man", "rendering with man -l") {
        for page in pages {
            let out = run(
                Command::new(&man)
                    .args(["--warnings=w", "-l"])
                    .arg(path(page))
                    .env("MANWIDTH", "80")
                    .env("MAN_DISABLE_SECCOMP", "1")
                    .env("PAGER", "cat")
                    .env("MANPAGER", "cat"),
                Duration::from_secs(20),
            );
            let rendered = text(&out.stdout);
            assert!(out.status.success() && out.stderr.is_empty(), "man -l {page}:\n{}", text(&out.stderr));
            assert!(
                rendered.contains("NAME") && rendered.contains("ferrohttpd") && rendered.lines().count() > 50,
                "man -l {page}:\n{rendered}"
            );
            assert!(
                !rendered.contains("\\f") && !rendered.contains("\\-"),
                "unresolved escapes in {page}:\n{rendered}"
            );
        }
    }
}

// -------------------------------------------------------------------------------------------
// Completions

#[test]
fn bash_completion_completes() {
    let Some(bash) = tool("bash", "the bash completion") else { return };
    let script = format!(
        r#"source '{}' || exit 1
t() {{ COMP_WORDS=("$@"); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _ferrohttpd; echo "${{COMPREPLY[*]}}"; }}
t ferrohttpd --conf
t ferrohttpd comp
t ferrohttpd -no
t ferrohttpd compress site --enc
t ferrohttpd compress site --encodings gz
t /usr/lib/ferrohttpd/thttpd comp
"#,
        path("packaging/completions/ferrohttpd.bash").display()
    );
    let out = run(Command::new(bash).arg("--norc").arg("-c").arg(script), Duration::from_secs(10));
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
    let got: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    let want = ["--config", "compress", "-nor -nos -nov -nog", "--encodings", "gzip", ""];
    assert_eq!(got, want, "bash completions");
}

#[test]
fn zsh_completion_parses() {
    let Some(zsh) = tool("zsh", "the zsh completion's syntax") else { return };
    let out = run(Command::new(zsh).arg("-n").arg(path("packaging/completions/_ferrohttpd")), Duration::from_secs(10));
    assert!(out.status.success() && out.stderr.is_empty(), "zsh -n: {}", text(&out.stderr));
    assert!(read("packaging/completions/_ferrohttpd").starts_with("#compdef ferrohttpd thttpd\n"));
}

// -------------------------------------------------------------------------------------------
// systemd

fn unit(name: &str) -> String {
    read(&format!("packaging/systemd/{name}"))
}

fn directives(unit: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in unit.lines().map(str::trim).filter(|l| !l.starts_with('#') && !l.starts_with('[')) {
        if let Some((k, v)) = line.split_once('=') {
            out.entry(k.to_string()).or_default().push(v.to_string());
        }
    }
    out
}

#[test]
fn systemd_units_are_hardened_and_consistent() {
    for name in ["ferrohttpd.service", "ferrohttpd@.service"] {
        let d = directives(&unit(name));
        let one = |k: &str| d.get(k).and_then(|v| v.last()).cloned().unwrap_or_default();
        let config = if name.contains('@') { "/etc/ferrohttpd/%i.toml" } else { "/etc/ferrohttpd/ferrohttpd.toml" };
        assert_eq!(one("ExecStart"), format!("/usr/sbin/ferrohttpd --config {config}"), "{name}");
        assert_eq!(one("Type"), "simple", "{name}: the server does not implement sd_notify");
        assert!(one("ExecReload").contains("-HUP $MAINPID"), "{name}: reload sends HUP");
        // An upgrade (USR2) changes the main pid: the new process reports it with MAINPID=.
        assert_eq!(one("NotifyAccess"), "all", "{name}");
        for (k, v) in [
            ("ProtectSystem", "strict"),
            ("NoNewPrivileges", "yes"),
            ("CapabilityBoundingSet", "CAP_NET_BIND_SERVICE"),
            ("AmbientCapabilities", "CAP_NET_BIND_SERVICE"),
            ("PrivateTmp", "yes"),
            ("ProtectHome", "yes"),
            ("User", "ferrohttpd"),
            ("LogsDirectory", "ferrohttpd"),
            ("Restart", "on-failure"),
        ] {
            assert_eq!(one(k), v, "{name}: {k}");
        }
    }
    assert_eq!(directives(&unit("ferrohttpd.service"))["ReadOnlyPaths"], ["-/var/www/ferrohttpd"]);
    let socket = directives(&unit("ferrohttpd.socket"));
    assert_eq!(socket["ListenStream"], ["80"]);
    // The server takes its sockets from LISTEN_FDS: the socket must not spawn per connection.
    assert!(!socket.contains_key("Accept") || socket["Accept"] == ["no"]);
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let Some(analyze) = tool("systemd-analyze", "systemd-analyze verify of the units") else { return };
    // verify checks that ExecStart's program exists: point the units at the binary under test.
    let dir = tempfile::tempdir().unwrap();
    let units = dir.path().join("units");
    fs::create_dir(&units).unwrap();
    for name in ["ferrohttpd.service", "ferrohttpd.socket", "ferrohttpd@.service"] {
        fs::write(units.join(name), unit(name).replace("/usr/sbin/ferrohttpd", BIN)).unwrap();
    }
    fs::copy(units.join("ferrohttpd@.service"), units.join("ferrohttpd@example.service")).unwrap();
    // Documentation=man:... is checked against the pages in the tree when man is installed.
    let man_ok = find_tool("man").is_some();
    let manpath = dir.path().join("man");
    for (sect, page) in [("man8", "ferrohttpd.8"), ("man5", "ferrohttpd.toml.5")] {
        fs::create_dir_all(manpath.join(sect)).unwrap();
        fs::copy(path(&format!("packaging/man/{page}")), manpath.join(sect).join(page)).unwrap();
    }
    let mut cmd = Command::new(analyze);
    cmd.arg("verify").arg(format!("--man={}", if man_ok { "yes" } else { "no" })).env("MANPATH", &manpath);
    for name in ["ferrohttpd.service", "ferrohttpd.socket", "ferrohttpd@.service", "ferrohttpd@example.service"] {
        cmd.arg(units.join(name));
    }
    let out = run(&mut cmd, Duration::from_secs(30));
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

// -------------------------------------------------------------------------------------------
// logrotate: rotation, then USR1, and the server writes to the new file.

/// A server on 127.0.0.1:0, killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(config: &Path) -> Server {
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("listening on http://127.0.0.1:") {
                    let _ = tx.send(rest.trim_end_matches(|c: char| !c.is_ascii_digit()).parse::<u16>().ok());
                }
            }
        });
        let port = rx.recv_timeout(Duration::from_secs(10)).ok().flatten();
        let mut server = Server { child, port: 0 };
        server.port = port.expect("the server printed no `listening on` line");
        server
    }

    fn get(&self, path: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).unwrap();
        text(&resp)
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill").arg(format!("-{sig}")).arg(self.child.id().to_string()).status().unwrap();
        assert!(ok.success());
    }

    /// TERM, and the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "the server did not stop on TERM");
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(5), "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

fn lines_in(p: &Path) -> usize {
    fs::read_to_string(p).map(|s| s.lines().count()).unwrap_or(0)
}

/// The log directory belongs to the service user, so logrotate (run as root) must rotate as
/// that user (`su`): as root it would follow links the user planted there. The `su` and
/// `create` users are the unit's `User=`/`Group=`.
#[test]
fn logrotate_rotates_as_the_service_user() {
    let conf = read("packaging/logrotate/ferrohttpd");
    let unit = read("packaging/systemd/ferrohttpd.service");
    let key = |k: &str| unit.lines().find_map(|l| l.strip_prefix(k)).unwrap_or_else(|| panic!("no {k} in the unit"));
    let (user, group) = (key("User="), key("Group="));
    let directive = |d: &str| -> Vec<String> {
        conf.lines()
            .map(str::trim)
            .filter(|l| l.split_whitespace().next() == Some(d))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
            .collect()
    };
    assert_eq!(directive("su"), vec![format!("{user} {group}")], "one `su {user} {group}` line:\n{conf}");
    assert_eq!(directive("create"), vec![format!("0640 {user} {group}")], "{conf}");
}

#[test]
fn logrotate_rotates_and_the_server_reopens_its_log() {
    let Some(logrotate) = tool("logrotate", "the logrotate file") else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (www, logs) = (d.join("www"), d.join("logs"));
    fs::create_dir_all(&www).unwrap();
    fs::create_dir_all(&logs).unwrap();
    fs::write(www.join("index.html"), "hello\n").unwrap();
    let pid_file = d.join("ferrohttpd.pid");
    let config = d.join("ferrohttpd.toml");
    fs::write(
        &config,
        format!(
            r#"[server]
listen = ["127.0.0.1:0"]
root = "www"
pid_file = "{}"
[log]
access = "logs/access.log"
error = "logs/error.log"
"#,
            pid_file.display()
        ),
    )
    .unwrap();
    let server = Server::start(&config);
    let access = logs.join("access.log");
    assert!(server.get("/").starts_with("HTTP/1.1 200"));
    wait_for("the first access-log line", || lines_in(&access) == 1);

    // The packaged file, pointed at this directory and at this user; the systemd branch is
    // made to fail so that the pid-file branch runs on any machine.
    let id = |flag: &str| text(&run(Command::new("id").arg(flag), Duration::from_secs(5)).stdout).trim().to_string();
    let conf = read("packaging/logrotate/ferrohttpd")
        .replace("/var/log/ferrohttpd", logs.to_str().unwrap())
        .replace("/run/ferrohttpd.pid", pid_file.to_str().unwrap())
        .replace("/run/systemd/system", d.join("no-systemd").to_str().unwrap())
        .replace("su ferrohttpd ferrohttpd", &format!("su {} {}", id("-un"), id("-gn")))
        .replace("create 0640 ferrohttpd ferrohttpd", &format!("create 0640 {} {}", id("-un"), id("-gn")));
    assert!(conf.contains(logs.to_str().unwrap()) && conf.contains(pid_file.to_str().unwrap()), "{conf}");
    let conf_file = d.join("logrotate.conf");
    fs::write(&conf_file, conf).unwrap();
    let out =
        run(Command::new(logrotate).arg("-f").arg("-s").arg(d.join("state")).arg(&conf_file), Duration::from_secs(20));
    assert!(out.status.success(), "logrotate: {}", text(&out.stderr));

    let rotated: Vec<PathBuf> = fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("access.log-"))
        .collect();
    assert_eq!(
        rotated.len(),
        1,
        "one rotated access log expected in {:?}",
        fs::read_dir(&logs).unwrap().collect::<Vec<_>>()
    );
    assert_eq!(lines_in(&rotated[0]), 1);
    assert!(server.get("/").starts_with("HTTP/1.1 200"));
    wait_for("the access-log line in the new file (USR1 reopened it)", || lines_in(&access) == 1);
    assert_eq!(lines_in(&rotated[0]), 1, "the rotated file got the new line: USR1 did not reopen the log");
    assert!(server.stop().success());
}

// -------------------------------------------------------------------------------------------
// The Debian package

#[cfg(feature = "compression")]
fn build_deb(out: &Path) -> PathBuf {
    let o = run(
        Command::new("bash")
            .arg(path("packaging/deb/build"))
            .arg(BIN)
            .arg(out)
            .env("DEB_COMPRESSION", "none")
            .env("SOURCE_DATE_EPOCH", "1700000000"),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "packaging/deb/build: {}", text(&o.stderr));
    let deb = PathBuf::from(text(&o.stdout).trim());
    assert!(deb.is_file(), "packaging/deb/build printed {deb:?}");
    deb
}

#[cfg(feature = "compression")]
fn dpkg_deb(args: &[&str], deb: &Path) -> String {
    let o = run(Command::new("dpkg-deb").args(args).arg(deb), Duration::from_secs(30));
    assert!(o.status.success(), "dpkg-deb {args:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

#[cfg(feature = "compression")]
fn gunzip(p: &Path) -> String {
    let mut s = String::new();
    flate2::read::GzDecoder::new(fs::File::open(p).unwrap()).read_to_string(&mut s).unwrap();
    s
}

#[test]
// The package is built from the default features (the precompressor among them).
#[cfg(feature = "compression")]
fn debian_package_builds_reproducibly_with_the_expected_files() {
    if tool("dpkg-deb", "the Debian package").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let deb = build_deb(&d.join("out1"));
    let arch = text(&run(Command::new("dpkg").arg("--print-architecture"), Duration::from_secs(5)).stdout);
    assert_eq!(deb.file_name().unwrap().to_str().unwrap(), format!("ferrohttpd_{VERSION}_{}.deb", arch.trim()));
    let again = build_deb(&d.join("out2"));
    assert!(fs::read(&deb).unwrap() == fs::read(&again).unwrap(), "two builds of the same inputs differ");

    // The file list.
    let listing = dpkg_deb(&["-c"], &deb);
    let mut files = BTreeMap::new();
    for line in listing.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert!(f.len() >= 6, "dpkg-deb -c line {line:?}");
        assert_eq!(f[1], "root/root", "{line}");
        let name = f[5].trim_start_matches('.').to_string();
        if !f[0].starts_with('d') {
            files.insert(name, (f[0].to_string(), f[6..].join(" ")));
        }
    }
    let mut expected: BTreeSet<String> = [
        "/usr/sbin/ferrohttpd",
        "/usr/lib/ferrohttpd/thttpd",
        "/usr/share/man/man8/ferrohttpd.8.gz",
        "/usr/share/man/man5/ferrohttpd.toml.5.gz",
        "/etc/ferrohttpd/ferrohttpd.toml",
        "/lib/systemd/system/ferrohttpd.service",
        "/lib/systemd/system/ferrohttpd.socket",
        "/lib/systemd/system/ferrohttpd@.service",
        "/etc/logrotate.d/ferrohttpd",
        "/usr/share/bash-completion/completions/ferrohttpd",
        "/usr/share/zsh/vendor-completions/_ferrohttpd",
        "/usr/share/doc/ferrohttpd/README.md",
        "/usr/share/doc/ferrohttpd/copyright",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    // Every page of docs/ (the README links them all).
    for e in fs::read_dir(path("docs")).unwrap() {
        expected.insert(format!("/usr/share/doc/ferrohttpd/docs/{}", e.unwrap().file_name().to_str().unwrap()));
    }
    for e in fs::read_dir(path("www")).unwrap() {
        expected.insert(format!("/var/www/ferrohttpd/{}", e.unwrap().file_name().to_str().unwrap()));
    }
    let got: BTreeSet<String> = files.keys().cloned().collect();
    assert_eq!(got, expected, "dpkg-deb -c:\n{listing}");
    assert_eq!(files["/usr/sbin/ferrohttpd"].0, "-rwxr-xr-x");
    assert_eq!(files["/usr/lib/ferrohttpd/thttpd"], ("lrwxrwxrwx".to_string(), "-> ../../sbin/ferrohttpd".to_string()));

    // Control fields and maintainer scripts.
    let field = |name: &str| {
        dpkg_deb(&["-f"], &deb).lines().find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_string))
    };
    assert_eq!(field("Package").as_deref(), Some("ferrohttpd"));
    assert_eq!(field("Version").as_deref(), Some(VERSION));
    assert!(field("Depends").is_some_and(|d| d.starts_with("libc6")), "{:?}", field("Depends"));
    // The description is written through an unquoted here-document: no command substitution
    // may eat a word of it (a backquoted `ferrohttpd compress DIR` once ran as a command).
    let info = dpkg_deb(&["-I"], &deb);
    assert!(info.contains("\"ferrohttpd compress DIR\" writes the precompressed files"), "{info}");
    let control = d.join("control");
    run(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&control), Duration::from_secs(10));
    assert_eq!(
        fs::read_to_string(control.join("conffiles")).unwrap(),
        "/etc/ferrohttpd/ferrohttpd.toml\n/etc/logrotate.d/ferrohttpd\n"
    );
    let postinst = fs::read_to_string(control.join("postinst")).unwrap();
    assert!(
        postinst.contains("adduser --system")
            && postinst.contains("useradd --system")
            && postinst.contains("/var/log/ferrohttpd")
    );
    for script in ["postinst", "prerm", "postrm"] {
        let o = run(Command::new("sh").arg("-n").arg(control.join(script)), Duration::from_secs(5));
        assert!(o.status.success(), "sh -n {script}: {}", text(&o.stderr));
    }

    // The contents.
    let x = d.join("x");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&x), Duration::from_secs(30));
    assert_eq!(gunzip(&x.join("usr/share/man/man8/ferrohttpd.8.gz")), read("packaging/man/ferrohttpd.8"));
    assert_eq!(gunzip(&x.join("usr/share/man/man5/ferrohttpd.toml.5.gz")), read("packaging/man/ferrohttpd.toml.5"));
    for name in ["ferrohttpd.service", "ferrohttpd.socket", "ferrohttpd@.service"] {
        assert_eq!(fs::read_to_string(x.join("lib/systemd/system").join(name)).unwrap(), unit(name));
    }
    for e in fs::read_dir(path("www")).unwrap() {
        let e = e.unwrap();
        assert!(fs::read(e.path()).unwrap() == fs::read(x.join("var/www/ferrohttpd").join(e.file_name())).unwrap());
    }
    let v = run(Command::new(x.join("usr/lib/ferrohttpd/thttpd")).arg("-V"), Duration::from_secs(10));
    assert!(text(&v.stdout).starts_with("thttpd/2.29 (ferrohttpd "), "the thttpd link runs thttpd mode: {v:?}");
    // `ferrohttpd compress` is in the packaged binary itself (nothing else in PATH).
    let site = d.join("site");
    fs::create_dir(&site).unwrap();
    fs::write(site.join("a.html"), "<p>compress me</p>\n".repeat(100)).unwrap();
    let c = run(
        Command::new(x.join("usr/sbin/ferrohttpd")).arg("compress").arg(&site).env("PATH", "/nonexistent"),
        Duration::from_secs(60),
    );
    assert!(c.status.success(), "the packaged `ferrohttpd compress`: {c:?}");
    assert!(site.join("a.html.gz").is_file() && site.join("a.html.br").is_file(), "{c:?}");

    // The conffile: the shipped configuration with exactly the packaged paths changed...
    let conf = fs::read_to_string(x.join("etc/ferrohttpd/ferrohttpd.toml")).unwrap();
    let body: String = conf.lines().skip_while(|l| l.starts_with('#')).map(|l| format!("{l}\n")).collect();
    let shipped: String =
        read("config/ferrohttpd.toml").lines().skip_while(|l| l.starts_with('#')).map(|l| format!("{l}\n")).collect();
    let packaged = [
        ("listen = [\"0.0.0.0:8080\"]", "listen = [\"0.0.0.0:80\", \"[::]:80\"]"),
        ("root = \"../www\"", "root = \"/var/www/ferrohttpd\""),
        ("access = \"-\"", "access = \"/var/log/ferrohttpd/access.log\""),
        ("error = \"-\"", "error = \"/var/log/ferrohttpd/error.log\""),
    ];
    let mut undone = body.clone();
    for (orig, new) in packaged {
        assert_eq!(body.matches(&format!("\n{new}\n")).count(), 1, "{new} in the conffile");
        undone = undone.replace(&format!("\n{new}\n"), &format!("\n{orig}\n"));
    }
    assert_eq!(undone, shipped, "the conffile differs from config/ferrohttpd.toml beyond the packaged paths");
    // `packaging/deb/build --conffile` (for cargo-deb users) prints the same file.
    let printed = run(Command::new("bash").arg(path("packaging/deb/build")).arg("--conffile"), Duration::from_secs(10));
    assert!(printed.status.success() && text(&printed.stdout) == conf, "--conffile: {}", text(&printed.stderr));
    // ... which the server accepts, once its paths point into the extracted tree.
    let logs = d.join("log");
    fs::create_dir(&logs).unwrap();
    let local = conf
        .replace("/var/www/ferrohttpd", x.join("var/www/ferrohttpd").to_str().unwrap())
        .replace("/var/log/ferrohttpd", logs.to_str().unwrap());
    fs::write(d.join("local.toml"), local).unwrap();
    let o = run(
        Command::new(x.join("usr/sbin/ferrohttpd")).arg("--config").arg(d.join("local.toml")).arg("--check-config"),
        Duration::from_secs(10),
    );
    assert!(o.status.success(), "the packaged configuration: {}", text(&o.stderr));
    assert!(text(&o.stdout).contains("listen 0.0.0.0:80 [::]:80"), "{}", text(&o.stdout));
}

/// The configuration page's error example is what the server prints.
#[test]
fn config_error_example_is_accurate() {
    let readme = read(CONFIG_DOC);
    let example = readme
        .lines()
        .skip_while(|l| *l != "$ ferrohttpd --config bad.toml")
        .nth(1)
        .expect("docs/configuration.md: the `$ ferrohttpd --config bad.toml` example")
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("bad.toml"), "[server]\n[http]\nkeepalive_requests = 0\n").unwrap();
    let o = run(Command::new(BIN).args(["--config", "bad.toml"]).current_dir(dir.path()), Duration::from_secs(10));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(text(&o.stderr).trim_end(), example);
}

#[test]
fn packaging_scripts_are_valid_shell() {
    for (shell, file) in [
        ("bash", "packaging/deb/build"),
        ("sh", "packaging/deb/postinst"),
        ("sh", "packaging/deb/prerm"),
        ("sh", "packaging/deb/postrm"),
        ("bash", "packaging/completions/ferrohttpd.bash"),
        ("bash", ".ci/readme-check"),
    ] {
        let o = run(Command::new(shell).arg("-n").arg(path(file)), Duration::from_secs(5));
        assert!(o.status.success(), "{shell} -n {file}: {}", text(&o.stderr));
    }
}

// -------------------------------------------------------------------------------------------
// The default page: what `cargo run --release` serves

const PAGE: &str = "www/index.html";

/// Claims the page once made that are not true of the server (case-insensitive). Drop a
/// phrase from here only once the code makes it true.
const UNTRUE_PHRASES: &[&str] = &[
    "planned",     // the mmap cache was "planned"; it exists, and nothing else is planned here
    "writev",      // heads and small bodies go out in one sendmsg
    "tcp_cork",    // file bodies follow a head sent with MSG_MORE
    "coming soon", // the page describes what runs, not a roadmap
    "not yet",
    "roadmap",
    "todo",
];

/// The elements the page may use. `script`, `style`, `iframe`, `object`, `embed` and the
/// like are missing on purpose: the page is a document, and loads only its own files.
const PAGE_ELEMENTS: &[&str] = &[
    "html", "head", "meta", "title", "link", "body", "header", "nav", "main", "footer", "div", "img", "h1", "h2", "h3",
    "p", "ul", "ol", "li", "a", "strong", "em", "i", "code", "pre", "table", "thead", "tbody", "tr", "th", "td",
];

/// Elements without a closing tag.
const VOID_ELEMENTS: &[&str] = &["meta", "link", "img"];

/// An element of the page, or the whole document (`name` empty).
#[derive(Debug, Default)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Node>,
}

#[derive(Debug)]
enum Node {
    Element(Element),
    /// Text with its character references resolved.
    Text(String),
}

impl Element {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn has_class(&self, class: &str) -> bool {
        self.attr("class").is_some_and(|c| c.split_whitespace().any(|c| c == class))
    }

    fn elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|n| match n {
            Node::Element(e) => Some(e),
            Node::Text(_) => None,
        })
    }

    /// Every element below this one, in document order.
    fn descendants(&self) -> Vec<&Element> {
        let mut out = Vec::new();
        for e in self.elements() {
            out.push(e);
            out.extend(e.descendants());
        }
        out
    }

    fn find(&self, name: &str) -> Vec<&Element> {
        self.descendants().into_iter().filter(|e| e.name == name).collect()
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for n in &self.children {
            match n {
                Node::Text(t) => out.push_str(t),
                Node::Element(e) => out.push_str(&e.text()),
            }
        }
        out
    }

    /// The text of the single `<code>` that is all of this element (whitespace aside).
    fn only_code(&self) -> Option<String> {
        let mut codes = self.children.iter().filter(|n| !matches!(n, Node::Text(t) if t.trim().is_empty()));
        match (codes.next(), codes.next()) {
            (Some(Node::Element(e)), None)
                if e.name == "code" && e.children.iter().all(|n| matches!(n, Node::Text(_))) =>
            {
                Some(e.text())
            }
            _ => None,
        }
    }
}

/// `&amp;` and the other references the page may use, resolved; anything else is an error.
fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let end = rest[i..].find(';').ok_or_else(|| format!("unterminated character reference in {s:?}"))?;
        let name = &rest[i + 1..i + end];
        let c = match name {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            "nbsp" => '\u{a0}',
            "middot" => '·',
            "mdash" => '—',
            "ndash" => '–',
            _ => name
                .strip_prefix("#x")
                .map(|h| u32::from_str_radix(h, 16))
                .or_else(|| name.strip_prefix('#').map(str::parse))
                .and_then(Result::ok)
                .and_then(char::from_u32)
                .ok_or_else(|| format!("unknown character reference &{name};"))?,
        };
        out.push(c);
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The page as a tree. Fails on what a browser would repair silently: a tag that is not
/// closed or closed out of order, an element outside [`PAGE_ELEMENTS`], an unquoted or
/// repeated attribute, an unknown character reference, a stray `<`.
fn parse_page(src: &str) -> Result<Element, String> {
    let line = |at: usize| src[..at].matches('\n').count() + 1;
    let mut stack = vec![Element::default()];
    let mut i = 0;
    let b = src.as_bytes();
    while i < b.len() {
        let Some(lt) = src[i..].find('<').map(|o| i + o) else {
            stack.last_mut().unwrap().children.push(Node::Text(unescape(&src[i..])?));
            break;
        };
        if lt > i {
            let t = unescape(&src[i..lt]).map_err(|e| format!("line {}: {e}", line(i)))?;
            stack.last_mut().unwrap().children.push(Node::Text(t));
        }
        if src[lt..].starts_with("<!--") {
            i = src[lt..].find("-->").map(|o| lt + o + 3).ok_or(format!("line {}: unterminated comment", line(lt)))?;
            continue;
        }
        if src[lt..].to_ascii_lowercase().starts_with("<!doctype html>") {
            if lt != 0 {
                return Err(format!("line {}: the doctype must come first", line(lt)));
            }
            i = lt + "<!doctype html>".len();
            continue;
        }
        // A tag: <name attr="value" ...> or </name>.
        let mut j = lt + 1;
        let close = b.get(j) == Some(&b'/');
        if close {
            j += 1;
        }
        let start = j;
        while j < b.len() && b[j].is_ascii_alphanumeric() {
            j += 1;
        }
        let name = src[start..j].to_string();
        if name.is_empty() || name != name.to_ascii_lowercase() {
            return Err(format!("line {}: a `<` that does not start a lower-case tag", line(lt)));
        }
        if !PAGE_ELEMENTS.contains(&name.as_str()) {
            return Err(format!("line {}: <{name}> is not one of the elements the page may use", line(lt)));
        }
        let mut attrs: Vec<(String, String)> = Vec::new();
        loop {
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            match b.get(j) {
                Some(b'>') => break,
                None => return Err(format!("line {}: unterminated <{name}>", line(lt))),
                _ if close => return Err(format!("line {}: attributes on </{name}>", line(lt))),
                _ => {}
            }
            let a = j;
            while j < b.len() && (b[j].is_ascii_lowercase() || b[j] == b'-') {
                j += 1;
            }
            let attr = src[a..j].to_string();
            if attr.is_empty() {
                return Err(format!("line {}: bad attribute in <{name}>", line(lt)));
            }
            let value = if b.get(j) == Some(&b'=') {
                if b.get(j + 1) != Some(&b'"') {
                    return Err(format!("line {}: <{name} {attr}=…> is not double-quoted", line(lt)));
                }
                let v = j + 2;
                let end = src[v..].find('"').map(|o| v + o).ok_or(format!("line {}: unterminated value", line(lt)))?;
                j = end + 1;
                unescape(&src[v..end]).map_err(|e| format!("line {}: {e}", line(lt)))?
            } else {
                String::new()
            };
            if attrs.iter().any(|(n, _)| *n == attr) {
                return Err(format!("line {}: <{name}> repeats {attr}", line(lt)));
            }
            attrs.push((attr, value));
        }
        i = j + 1;
        let void = VOID_ELEMENTS.contains(&name.as_str());
        if close {
            let open = stack.last().map(|e| e.name.clone()).unwrap_or_default();
            if void || open != name || stack.len() == 1 {
                return Err(format!("line {}: </{name}> closes <{open}>", line(lt)));
            }
            let done = stack.pop().unwrap();
            stack.last_mut().unwrap().children.push(Node::Element(done));
        } else if void {
            stack.last_mut().unwrap().children.push(Node::Element(Element { name, attrs, children: Vec::new() }));
        } else {
            stack.push(Element { name, attrs, children: Vec::new() });
        }
    }
    if stack.len() != 1 {
        let open: Vec<String> = stack[1..].iter().map(|e| format!("<{}>", e.name)).collect();
        return Err(format!("not closed at the end: {}", open.join(" ")));
    }
    Ok(stack.pop().unwrap())
}

fn page() -> Element {
    parse_page(&read(PAGE)).unwrap_or_else(|e| panic!("{PAGE}: {e}"))
}

/// The text of every `<code>` of the page (a `<pre>` block is a `<code>` inside it).
fn page_code(doc: &Element) -> Vec<String> {
    doc.find("code").into_iter().map(Element::text).collect()
}

/// A URL the page refers to: None for one that leaves the site (a scheme, or `//host`).
fn local_target(url: &str) -> Option<&str> {
    let scheme = url.split_once(':').is_some_and(|(s, _)| !s.contains(['/', '?', '#']));
    (!scheme && !url.starts_with("//")).then_some(url)
}

#[test]
fn default_page_is_well_formed() {
    let src = read(PAGE);
    assert!(src.starts_with("<!DOCTYPE html>\n"), "{PAGE}: starts with {:?}", &src[..src.len().min(20)]);
    let doc = page();
    let top: Vec<&Element> = doc.elements().collect();
    assert!(top.len() == 1 && top[0].name == "html" && top[0].attr("lang").is_some(), "{PAGE}: one <html lang>");
    let parts: Vec<&str> = top[0].elements().map(|e| e.name.as_str()).collect();
    assert_eq!(parts, ["head", "body"], "{PAGE}: <html> holds <head> and <body>");
    let head = top[0].elements().next().unwrap();
    assert!(head.find("meta").iter().any(|m| m.attr("charset") == Some("utf-8")), "{PAGE}: <meta charset=\"utf-8\">");
    assert_eq!(head.find("title").len(), 1, "{PAGE}: one <title>");
    let mut ids = BTreeSet::new();
    for e in doc.descendants() {
        if let Some(id) = e.attr("id") {
            assert!(ids.insert(id), "{PAGE}: id {id:?} is used twice");
        }
        if e.name == "img" {
            assert!(e.attr("alt").is_some_and(|a| !a.is_empty()), "{PAGE}: an <img> without alt text");
        }
    }
}

#[test]
fn default_page_loads_nothing_from_outside() {
    let doc = page();
    let mut problems = Vec::new();
    for e in doc.descendants() {
        // What the browser fetches by itself: src of anything, href of <link>. An <a> is a
        // link the reader may follow, and may point anywhere.
        let loads = e.attr("src").into_iter().chain(e.attr("href").filter(|_| e.name == "link"));
        for url in loads {
            if local_target(url).is_none() {
                problems.push(format!("<{}> loads {url}", e.name));
            }
        }
        if e.attr("style").is_some_and(|s| s.contains("url(")) {
            problems.push(format!("<{}> has a style attribute with url()", e.name));
        }
    }
    let css = read("www/style.css");
    if css.contains("@import") {
        problems.push("www/style.css uses @import".to_string());
    }
    for url in css.split("url(").skip(1).map(|r| r.split(')').next().unwrap_or_default().trim_matches(['"', '\''])) {
        if local_target(url).is_none_or(|u| !path("www").join(u).is_file()) {
            problems.push(format!("www/style.css loads {url}, which is not a file of www/"));
        }
    }
    fail_if_any(&format!("{PAGE} loads resources from outside www/"), &problems);
}

#[test]
fn default_page_links_resolve() {
    let doc = page();
    let ids: BTreeSet<&str> = doc.descendants().into_iter().filter_map(|e| e.attr("id")).collect();
    let mut problems = Vec::new();
    let mut files = 0;
    for e in doc.descendants() {
        for url in e.attr("src").into_iter().chain(e.attr("href")) {
            let Some(url) = local_target(url) else { continue };
            let (file, fragment) = url.split_once('#').unwrap_or((url, ""));
            let file = file.split('?').next().unwrap_or_default();
            if file.is_empty() {
                if !ids.contains(fragment) {
                    problems.push(format!("<{} {url}>: no element has the id {fragment:?}", e.name));
                }
                continue;
            }
            files += 1;
            let target = path("www").join(file.trim_start_matches('/'));
            if file.split('/').any(|c| c == "..") || !target.is_file() {
                problems.push(format!("<{}> refers to {url}, which is not a file of www/", e.name));
            }
        }
    }
    assert!(files >= 2, "{PAGE}: found only {files} links to files (the style sheet, the logo)");
    fail_if_any(&format!("{PAGE} has broken links"), &problems);
}

#[test]
fn default_page_says_nothing_untrue() {
    let src = read(PAGE).to_lowercase();
    let found: Vec<String> =
        UNTRUE_PHRASES.iter().filter(|p| src.contains(*p)).map(|p| format!("{p:?} is not true")).collect();
    fail_if_any(&format!("{PAGE} claims what the server does not do"), &found);
}

/// The page's key table (`<table class="keys">`): section rows `[table]`, then rows of
/// key, default, meaning. A key shown as a `<code>` must be in that table of
/// `config/ferrohttpd.toml`; a default that is one `<code>` must be the file's value, and a
/// default in words (`not set`, `none`) is for keys the file leaves commented out (or in
/// [`PLACEHOLDER_DEFAULTS`]). A key in italics (`<i>extension</i>`) is the placeholder of a
/// map table. Every table of the file has a section row, so a new table shows up here.
#[test]
fn default_page_config_keys_match_the_config_file() {
    let toml = config_keys();
    let file = read("config/ferrohttpd.toml");
    let man = man5_keys();
    let doc = page();
    let tables: Vec<&Element> = doc.find("table").into_iter().filter(|t| t.has_class("keys")).collect();
    assert_eq!(tables.len(), 1, "{PAGE}: one <table class=\"keys\">");
    let mut problems = Vec::new();
    let mut shown_tables = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut rows = 0;
    for tr in tables[0].find("tbody").iter().flat_map(|b| b.find("tr")) {
        if tr.has_class("section") {
            let header = tr.text().trim().to_string();
            current = table_header(&header);
            match &current {
                Some(t) if toml.contains_key(t) => {
                    if !file.lines().any(|l| l.trim_start_matches("# ") == header) {
                        problems.push(format!("section {header}: the file writes the table differently"));
                    }
                    shown_tables.insert(t.clone());
                }
                _ => problems.push(format!("section {header:?} is not a table of config/ferrohttpd.toml")),
            }
            continue;
        }
        let Some(table) = current.as_ref().filter(|t| toml.contains_key(*t)) else { continue };
        let cells: Vec<&Element> = tr.elements().collect();
        if cells.len() != 3 || cells.iter().any(|c| c.name != "td") {
            problems.push(format!("[{table}]: a row without three <td>: {:?}", tr.text()));
            continue;
        }
        rows += 1;
        let Some(key) = cells[0].only_code() else {
            let is_map = man.get(table).is_some_and(|m| m.values().any(|k| k.placeholder_key));
            if !(is_map && cells[0].find("i").len() == 1) {
                problems.push(format!(
                    "[{table}]: {:?} is neither a key in <code> nor a map's <i>placeholder</i>",
                    cells[0].text()
                ));
            }
            continue;
        };
        let name = format!("{table}.{key}");
        let Some(k) = toml[table].get(&key) else {
            problems.push(format!("{name} is not in config/ferrohttpd.toml"));
            continue;
        };
        match (cells[1].only_code(), &k.value) {
            (Some(page), Some(file)) if normalize_value(&page) != normalize_value(file) => {
                problems.push(format!("{name}: default {page} on the page, {file} in config/ferrohttpd.toml"))
            }
            (Some(page), None) => {
                problems.push(format!("{name}: the page gives the default {page}, the file leaves it unset"))
            }
            (None, Some(file)) if !PLACEHOLDER_DEFAULTS.contains(&name.as_str()) => problems.push(format!(
                "{name}: the page says {:?} where config/ferrohttpd.toml has the default {file}",
                cells[1].text()
            )),
            _ => {}
        }
    }
    assert!(rows >= 30, "{PAGE}: parsed only {rows} key rows");
    compare(&mut problems, "table", PAGE, &toml.keys().cloned().collect(), &shown_tables);

    // `[table] key` and `[table] key = value` anywhere on the page name a real key.
    for code in page_code(&doc) {
        let Some((header, rest)) = code.split_once("] ").map(|(h, r)| (format!("{h}]"), r)) else { continue };
        let (Some(table), Some(key)) = (table_header(&header), rest.split(" = ").next()) else { continue };
        if !key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            continue;
        }
        if !toml.get(&table).is_some_and(|t| t.contains_key(key)) {
            problems.push(format!("`{code}` on the page: {table}.{key} is not in config/ferrohttpd.toml"));
        }
    }
    fail_if_any(&format!("{PAGE} and config/ferrohttpd.toml disagree"), &problems);
}

/// The configuration examples of the page (a `<pre>` whose text starts with `[`) are
/// accepted by `--check-config`.
#[test]
fn default_page_config_examples_are_valid() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    fs::create_dir(&site).unwrap();
    let mut checked = 0;
    for pre in page().find("pre") {
        let toml = pre.text();
        if !toml.starts_with('[') {
            continue;
        }
        let file = dir.path().join(format!("example{checked}.toml"));
        fs::write(&file, toml.replace("/srv/site", site.to_str().unwrap())).unwrap();
        let out = run(Command::new(BIN).arg("--config").arg(&file).arg("--check-config"), Duration::from_secs(10));
        assert!(out.status.success(), "{PAGE}: example rejected:\n{toml}\n{}", text(&out.stderr));
        checked += 1;
    }
    assert!(checked >= 1, "{PAGE}: no configuration example found");
}

/// Checks the flags among `words` against `--help`; how many there were.
fn check_flags(cli: &Cli, words: &[&str], what: &str, problems: &mut Vec<String>) -> usize {
    let mut n = 0;
    for w in words.iter().filter_map(|w| flag_word(w)) {
        n += 1;
        if !cli.flags.contains(&w) {
            problems.push(format!("{w} ({what}) is not in ferrohttpd --help"));
        }
    }
    n
}

/// Every flag and subcommand the page shows is in `--help`: in its flag tables
/// (`<table class="flags">`, the first column), and in every command line of a `<code>`
/// that runs `ferrohttpd` or starts with a flag. `cargo build --profile P` names a profile
/// of `Cargo.toml`.
#[test]
fn default_page_flags_are_in_the_help() {
    let cli = cli_from_help();
    let cargo_toml = read("Cargo.toml");
    let doc = page();
    let mut problems = Vec::new();
    let mut flags = 0;
    for table in doc.find("table").into_iter().filter(|t| t.has_class("flags")) {
        for tr in table.find("tbody").iter().flat_map(|b| b.find("tr")) {
            let Some(first) = tr.elements().next() else { continue };
            for code in first.find("code") {
                let text = code.text();
                let words: Vec<&str> = text.split_whitespace().collect();
                if let Some(sub) = words.first().filter(|w| w.bytes().all(|b| b.is_ascii_lowercase())) {
                    flags += 1;
                    if !cli.subcommands.contains(*sub) {
                        problems.push(format!("subcommand {sub} (flag table) is not in ferrohttpd --help"));
                    }
                }
                flags += check_flags(&cli, &words, "flag table", &mut problems);
            }
        }
    }
    assert!(flags >= 10, "{PAGE}: parsed only {flags} flags from the flag tables");
    let mut commands = 0;
    for code in page_code(&doc) {
        for line in code.lines() {
            let words: Vec<&str> = line.trim().trim_start_matches("$ ").split_whitespace().collect();
            let Some(first) = words.first() else { continue };
            if *first == "ferrohttpd" || first.ends_with("/ferrohttpd") {
                commands += 1;
                if let Some(sub) = words.get(1).filter(|w| w.bytes().all(|b| b.is_ascii_lowercase())) {
                    if !cli.subcommands.contains(*sub) {
                        problems.push(format!("subcommand {sub} (`{line}`) is not in ferrohttpd --help"));
                    }
                }
                check_flags(&cli, &words[1..], &format!("`{line}`"), &mut problems);
            } else if flag_word(first).is_some() {
                check_flags(&cli, &words, &format!("`{line}`"), &mut problems);
            } else if words.starts_with(&["cargo", "build", "--profile"]) {
                let profile = words.get(3).copied().unwrap_or_default();
                if !cargo_toml.lines().any(|l| l == format!("[profile.{profile}]")) {
                    problems.push(format!("`{line}`: Cargo.toml has no [profile.{profile}]"));
                }
            }
        }
    }
    assert!(commands >= 3, "{PAGE}: found only {commands} ferrohttpd command lines");
    fail_if_any(&format!("{PAGE} shows flags the server does not have"), &problems);
}

/// `man NAME` and `man -l PATH` on the page name pages of `packaging/man/`, and every page
/// there is named.
#[test]
fn default_page_names_the_man_pages() {
    let mut named = BTreeSet::new();
    let mut problems = Vec::new();
    for code in page_code(&page()) {
        let words: Vec<&str> = code.split_whitespace().collect();
        for (i, _) in words.iter().enumerate().filter(|(_, w)| **w == "man") {
            match (words.get(i + 1), words.get(i + 2)) {
                (Some(&"-l"), Some(p)) => match p.strip_prefix("packaging/man/") {
                    Some(file) if path(p).is_file() => {
                        named.insert(file.to_string());
                    }
                    _ => problems.push(format!("`man -l {p}`: no such page in packaging/man/")),
                },
                (Some(name), _) => {
                    let file = (1..=9).map(|s| format!("{name}.{s}")).find(|f| path("packaging/man").join(f).is_file());
                    match file {
                        Some(f) => {
                            named.insert(f);
                        }
                        None => problems.push(format!("`man {name}`: no such page in packaging/man/")),
                    }
                }
                _ => {}
            }
        }
    }
    let pages: BTreeSet<String> = fs::read_dir(path("packaging/man"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().to_string())
        .collect();
    assert!(pages.len() >= 2, "packaging/man: {pages:?}");
    compare(&mut problems, "man page", PAGE, &pages, &named);
    fail_if_any(&format!("{PAGE} and packaging/man/ disagree"), &problems);
}
