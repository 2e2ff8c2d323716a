//! The patterns document: patterns, stages and limits (their types are in
//! `pattern.rs`) read and validated with the JSON path of every error; the
//! `GET /patterns` form; pattern equality.

use crate::condition::{self, Budget, Scope};
pub use crate::error::DocumentError;
pub use crate::pattern::{
    Contiguity, Limits, Pattern, Skip, Stage, MAX_CAPTURES, MAX_LIMIT, MAX_STAGES, MAX_STAGE_MAX,
};
use crate::value::Syntax;
pub use crate::warnings::Warning;
use crate::MAX_WINDOW;
use streamforge_canonical::strict::{self as json, kind_name, number, Json, Num, Path};
use streamforge_canonical::writer::{int, string};

/// A validated patterns document; patterns are kept sorted by name.
#[derive(Debug, Clone)]
pub struct Document {
    pub(crate) patterns: Vec<Pattern>,
    pub(crate) limits: Limits,
    /// `source[i]`: the index `patterns[i]` had in the text it was read
    /// from (for the paths of [`Document::warnings`]).
    pub(crate) source: Vec<usize>,
}

/// Equal patterns and limits (where the patterns stood in their texts does
/// not matter).
impl PartialEq for Document {
    fn eq(&self, other: &Document) -> bool {
        self.patterns == other.patterns && self.limits == other.limits
    }
}

impl Eq for Document {}

impl Document {
    /// Parses and validates a document.
    pub fn from_json(bytes: &[u8]) -> Result<Document, DocumentError> {
        let root = Path::root();
        let j = json::parse(bytes).map_err(|m| err(&root, m))?;
        let entries = object(&j, &root, "the document")?;
        known_keys(entries, &root, &["patterns", "limits"])?;
        let (patterns, source) = match lookup(entries, "patterns") {
            Some(p) => parse_patterns_indexed(p, &root.key("patterns"), Syntax::Document)?,
            None => return Err(err(&root, "missing key \"patterns\"")),
        };
        let limits = match lookup(entries, "limits") {
            Some(l) => parse_limits(l, &root.key("limits"))?,
            None => Limits::default(),
        };
        Ok(Document {
            patterns,
            limits,
            source,
        })
    }

    /// Conditions that can never be true, found from the document alone
    /// (the document is valid all the same): an order operator against a
    /// Bool, a field required in one `all` to hold two types, ... (see
    /// docs/patterns.md, "Conditions that can never be true"). In document
    /// order, each with the JSON path of its node, the pattern's index
    /// being the one it had in the text the document was read from.
    pub fn warnings(&self) -> Vec<Warning> {
        let mut order: Vec<(usize, &Pattern)> = self
            .patterns
            .iter()
            .enumerate()
            .map(|(i, p)| (self.source.get(i).copied().unwrap_or(i), p))
            .collect();
        order.sort_by_key(|&(i, _)| i);
        order
            .into_iter()
            .flat_map(|(i, p)| crate::warnings::of_pattern(p, i))
            .collect()
    }

    /// The `GET /patterns` body: every default written out, patterns sorted
    /// by name, the limits in force; an absent `forbidden` or `absence` is
    /// omitted.
    pub fn to_json(&self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(256 * self.patterns.len() + 64);
        buf.extend_from_slice(b"{\"patterns\":");
        write_patterns(&mut buf, &self.patterns, Syntax::Document);
        buf.extend_from_slice(b",\"limits\":{\"max_results_per_advance\":");
        int(&mut buf, self.limits.max_results_per_advance);
        buf.extend_from_slice(b",\"active_states\":");
        int(&mut buf, self.limits.active_states);
        buf.extend_from_slice(b"}}");
        buf
    }

    /// Same patterns (by name, in full, defaults normalized); limits ignored.
    pub fn same_patterns(&self, other: &Document) -> bool {
        self.patterns == other.patterns
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The same patterns with other limits.
    pub fn with_limits(&self, limits: Limits) -> Document {
        Document {
            patterns: self.patterns.clone(),
            limits,
            source: self.source.clone(),
        }
    }

    /// Pattern names, sorted.
    pub fn pattern_names(&self) -> Vec<String> {
        self.patterns.iter().map(|p| p.name.clone()).collect()
    }

    /// The patterns, sorted by name.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }
}

fn err(path: &Path<'_>, message: impl Into<String>) -> DocumentError {
    DocumentError {
        path: path.render(),
        message: message.into(),
    }
}

fn object<'j, 'a>(
    j: &'j Json<'a>,
    path: &Path<'_>,
    what: &str,
) -> Result<&'j [(String, Json<'a>)], DocumentError> {
    match j {
        Json::Object(entries) => Ok(entries),
        other => Err(err(
            path,
            format!("{what} must be an object, not {}", kind_name(other)),
        )),
    }
}

fn lookup<'j, 'a>(entries: &'j [(String, Json<'a>)], key: &str) -> Option<&'j Json<'a>> {
    entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn known_keys(
    entries: &[(String, Json<'_>)],
    path: &Path<'_>,
    known: &[&str],
) -> Result<(), DocumentError> {
    match entries.iter().find(|(k, _)| !known.contains(&k.as_str())) {
        Some((k, _)) => Err(err(
            path,
            format!("unknown key {k:?} (expected {})", known.join(", ")),
        )),
        None => Ok(()),
    }
}

fn integer(j: &Json<'_>, path: &Path<'_>) -> Result<i64, DocumentError> {
    match j {
        Json::Number(token) => match number(token) {
            Ok(Num::Integer(i)) => Ok(i),
            Ok(Num::Double(_)) => Err(err(path, format!("{token} is not an integer"))),
            Err(m) => Err(err(path, m)),
        },
        other => Err(err(
            path,
            format!("must be an integer, not {}", kind_name(other)),
        )),
    }
}

fn in_range(j: &Json<'_>, path: &Path<'_>, lo: i64, hi: i64) -> Result<i64, DocumentError> {
    let v = integer(j, path)?;
    if !(lo..=hi).contains(&v) {
        return Err(err(path, format!("{v} is outside {lo}..={hi}")));
    }
    Ok(v)
}

fn text(j: &Json<'_>, path: &Path<'_>) -> Result<String, DocumentError> {
    match j {
        Json::String(s) => Ok(s.clone()),
        other => Err(err(
            path,
            format!("must be a string, not {}", kind_name(other)),
        )),
    }
}

/// `[A-Za-z0-9_.-]{1,64}`
fn name(j: &Json<'_>, path: &Path<'_>) -> Result<String, DocumentError> {
    let s = text(j, path)?;
    let ok = (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !ok {
        return Err(err(
            path,
            format!("name {s:?} must match [A-Za-z0-9_.-]{{1,64}}"),
        ));
    }
    Ok(s)
}

fn parse_limits(j: &Json<'_>, path: &Path<'_>) -> Result<Limits, DocumentError> {
    let entries = object(j, path, "limits")?;
    known_keys(entries, path, &["max_results_per_advance", "active_states"])?;
    let mut limits = Limits::default();
    let max = MAX_LIMIT as i64;
    if let Some(v) = lookup(entries, "max_results_per_advance") {
        limits.max_results_per_advance =
            in_range(v, &path.key("max_results_per_advance"), 1, max)? as u64;
    }
    if let Some(v) = lookup(entries, "active_states") {
        limits.active_states = in_range(v, &path.key("active_states"), 1, max)? as u64;
    }
    Ok(limits)
}

/// Parses the `patterns` array (of a document, or of a checkpoint state)
/// and returns the patterns sorted by name.
pub(crate) fn parse_patterns(
    j: &Json<'_>,
    path: &Path<'_>,
    syntax: Syntax,
) -> Result<Vec<Pattern>, DocumentError> {
    parse_patterns_indexed(j, path, syntax).map(|(patterns, _)| patterns)
}

/// [`parse_patterns`], with the index each pattern had in the array.
fn parse_patterns_indexed(
    j: &Json<'_>,
    path: &Path<'_>,
    syntax: Syntax,
) -> Result<(Vec<Pattern>, Vec<usize>), DocumentError> {
    let Json::Array(items) = j else {
        return Err(err(
            path,
            format!("must be an array of patterns, not {}", kind_name(j)),
        ));
    };
    if items.is_empty() {
        return Err(err(path, "at least one pattern is required"));
    }
    let mut patterns: Vec<Pattern> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let pattern = parse_pattern(item, &p, syntax)?;
        if patterns.iter().any(|q| q.name == pattern.name) {
            return Err(err(
                &p.key("name"),
                format!("duplicate pattern name {:?}", pattern.name),
            ));
        }
        patterns.push(pattern);
    }
    let mut indexed: Vec<(usize, Pattern)> = patterns.into_iter().enumerate().collect();
    indexed.sort_by(|a, b| a.1.name.cmp(&b.1.name));
    Ok(indexed.into_iter().map(|(i, p)| (p, i)).unzip())
}

fn parse_pattern(j: &Json<'_>, path: &Path<'_>, syntax: Syntax) -> Result<Pattern, DocumentError> {
    let entries = object(j, path, "a pattern")?;
    known_keys(
        entries,
        path,
        &["name", "within", "skip", "stages", "absence"],
    )?;
    let required =
        |k: &str| lookup(entries, k).ok_or_else(|| err(path, format!("missing key {k:?}")));
    let pname = name(required("name")?, &path.key("name"))?;
    let within = in_range(required("within")?, &path.key("within"), 1, MAX_WINDOW)?;
    let skip = parse_skip(lookup(entries, "skip"), &path.key("skip"))?;
    let spath = path.key("stages");
    let Json::Array(items) = required("stages")? else {
        return Err(err(&spath, "must be an array of stages"));
    };
    if items.is_empty() || items.len() > MAX_STAGES {
        return Err(err(
            &spath,
            format!("{} stages, 1..={MAX_STAGES} are allowed", items.len()),
        ));
    }
    // First the names, bounds and contiguity of every stage (captures may
    // only name earlier stages, but a message should say when the name
    // exists later), then the conditions.
    let mut stages: Vec<(String, u32, u32, Contiguity)> = Vec::with_capacity(items.len());
    let mut total_max: u32 = 0;
    for (i, item) in items.iter().enumerate() {
        let (sname, min, max, contiguity) = stage_head(item, &spath.index(i), i, &stages)?;
        total_max += max;
        stages.push((sname, min, max, contiguity));
    }
    if total_max > MAX_CAPTURES {
        return Err(err(
            &spath,
            format!("the sum of max over the stages is {total_max}, at most {MAX_CAPTURES}"),
        ));
    }
    let names: Vec<String> = stages.iter().map(|s| s.0.clone()).collect();
    let mut budget = Budget { nodes: 0 };
    let mut out = Vec::with_capacity(stages.len());
    for (i, ((sname, min, max, contiguity), item)) in stages.into_iter().zip(items).enumerate() {
        let p = spath.index(i);
        let entries = object(item, &p, "a stage")?;
        let scope = Scope {
            stages: &names,
            before: i,
            syntax,
        };
        let where_ = match lookup(entries, "where") {
            Some(c) => condition::parse(c, &p.key("where"), &scope, 1, &mut budget)?,
            None => return Err(err(&p, "missing key \"where\"")),
        };
        let forbidden = match lookup(entries, "forbidden") {
            Some(c) => Some(condition::parse(
                c,
                &p.key("forbidden"),
                &scope,
                1,
                &mut budget,
            )?),
            None => None,
        };
        out.push(Stage {
            name: sname,
            min,
            max,
            contiguity,
            where_,
            forbidden,
        });
    }
    let absence = match lookup(entries, "absence") {
        Some(c) => {
            let scope = Scope {
                stages: &names,
                before: names.len(),
                syntax,
            };
            Some(condition::parse(
                c,
                &path.key("absence"),
                &scope,
                1,
                &mut budget,
            )?)
        }
        None => None,
    };
    Ok(Pattern {
        name: pname,
        within,
        skip,
        stages: out,
        absence,
    })
}

/// A stage's name, bounds and contiguity (its conditions are parsed once
/// every stage's name is known); `earlier`: the stages before it.
fn stage_head(
    item: &Json<'_>,
    p: &Path<'_>,
    i: usize,
    earlier: &[(String, u32, u32, Contiguity)],
) -> Result<(String, u32, u32, Contiguity), DocumentError> {
    let entries = object(item, p, "a stage")?;
    known_keys(
        entries,
        p,
        &["name", "min", "max", "contiguity", "where", "forbidden"],
    )?;
    let sname = match lookup(entries, "name") {
        Some(n) => name(n, &p.key("name"))?,
        None => return Err(err(p, "missing key \"name\"")),
    };
    if earlier.iter().any(|s| s.0 == sname) {
        return Err(err(
            &p.key("name"),
            format!("duplicate stage name {sname:?}"),
        ));
    }
    let min = match lookup(entries, "min") {
        Some(v) => in_range(v, &p.key("min"), 0, i64::from(MAX_STAGE_MAX))? as u32,
        None => 1,
    };
    let max = match lookup(entries, "max") {
        Some(v) => in_range(v, &p.key("max"), 1, i64::from(MAX_STAGE_MAX))? as u32,
        None => 1,
    };
    if min > max {
        return Err(err(p, format!("min {min} is greater than max {max}")));
    }
    if i == 0 && min == 0 {
        return Err(err(&p.key("min"), "the first stage needs min >= 1"));
    }
    let contiguity = parse_contiguity(lookup(entries, "contiguity"), &p.key("contiguity"))?;
    if lookup(entries, "where").is_none() {
        return Err(err(p, "missing key \"where\""));
    }
    Ok((sname, min, max, contiguity))
}

/// A pattern's `skip` (`no_skip` when absent).
fn parse_skip(s: Option<&Json<'_>>, p: &Path<'_>) -> Result<Skip, DocumentError> {
    let Some(s) = s else {
        return Ok(Skip::NoSkip);
    };
    match text(s, p)?.as_str() {
        "no_skip" => Ok(Skip::NoSkip),
        "skip_to_next_start" => Ok(Skip::SkipToNextStart),
        "skip_past_last" => Ok(Skip::SkipPastLast),
        other => Err(err(
            p,
            format!(
                "unknown skip policy {other:?} (no_skip, skip_to_next_start or skip_past_last)"
            ),
        )),
    }
}

/// A stage's `contiguity` (`skip_next` when absent).
fn parse_contiguity(c: Option<&Json<'_>>, p: &Path<'_>) -> Result<Contiguity, DocumentError> {
    let Some(c) = c else {
        return Ok(Contiguity::SkipNext);
    };
    match text(c, p)?.as_str() {
        "strict" => Ok(Contiguity::Strict),
        "skip_next" => Ok(Contiguity::SkipNext),
        "skip_any" => Ok(Contiguity::SkipAny),
        other => Err(err(
            p,
            format!("unknown contiguity {other:?} (strict, skip_next or skip_any)"),
        )),
    }
}

/// Writes the patterns array: for `GET /patterns` in the natural key order,
/// or canonically (sorted keys, Doubles as hex bits) for checkpoint states.
/// Defaults are always written out; an absent `forbidden` or `absence` is
/// omitted.
pub(crate) fn write_patterns(buf: &mut Vec<u8>, patterns: &[Pattern], syntax: Syntax) {
    buf.push(b'[');
    for (i, p) in patterns.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        match syntax {
            Syntax::Document => {
                buf.extend_from_slice(b"{\"name\":");
                string(buf, &p.name);
                buf.extend_from_slice(b",\"within\":");
                int(buf, p.within);
                buf.extend_from_slice(b",\"skip\":");
                string(buf, p.skip.name());
                buf.extend_from_slice(b",\"stages\":");
                write_stages(buf, &p.stages, syntax);
                if let Some(a) = &p.absence {
                    buf.extend_from_slice(b",\"absence\":");
                    condition::write(buf, a, syntax);
                }
            }
            Syntax::State => {
                buf.push(b'{');
                if let Some(a) = &p.absence {
                    buf.extend_from_slice(b"\"absence\":");
                    condition::write(buf, a, syntax);
                    buf.push(b',');
                }
                buf.extend_from_slice(b"\"name\":");
                string(buf, &p.name);
                buf.extend_from_slice(b",\"skip\":");
                string(buf, p.skip.name());
                buf.extend_from_slice(b",\"stages\":");
                write_stages(buf, &p.stages, syntax);
                buf.extend_from_slice(b",\"within\":");
                int(buf, p.within);
            }
        }
        buf.push(b'}');
    }
    buf.push(b']');
}

fn write_stages(buf: &mut Vec<u8>, stages: &[Stage], syntax: Syntax) {
    buf.push(b'[');
    for (i, s) in stages.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        match syntax {
            Syntax::Document => {
                buf.extend_from_slice(b"{\"name\":");
                string(buf, &s.name);
                buf.extend_from_slice(b",\"min\":");
                int(buf, s.min);
                buf.extend_from_slice(b",\"max\":");
                int(buf, s.max);
                buf.extend_from_slice(b",\"contiguity\":");
                string(buf, s.contiguity.name());
                buf.extend_from_slice(b",\"where\":");
                condition::write(buf, &s.where_, syntax);
                if let Some(f) = &s.forbidden {
                    buf.extend_from_slice(b",\"forbidden\":");
                    condition::write(buf, f, syntax);
                }
            }
            Syntax::State => {
                buf.extend_from_slice(b"{\"contiguity\":");
                string(buf, s.contiguity.name());
                if let Some(f) = &s.forbidden {
                    buf.extend_from_slice(b",\"forbidden\":");
                    condition::write(buf, f, syntax);
                }
                buf.extend_from_slice(b",\"max\":");
                int(buf, s.max);
                buf.extend_from_slice(b",\"min\":");
                int(buf, s.min);
                buf.extend_from_slice(b",\"name\":");
                string(buf, &s.name);
                buf.extend_from_slice(b",\"where\":");
                condition::write(buf, &s.where_, syntax);
            }
        }
        buf.push(b'}');
    }
    buf.push(b']');
}

#[cfg(test)]
mod tests;
