//! The patterns document: patterns, stages and limits; validation with the
//! JSON path of every error; the `GET /patterns` form; pattern equality.

use crate::condition::{self, Budget, Condition, Scope};
pub use crate::error::DocumentError;
use crate::value::Syntax;
pub use crate::warnings::Warning;
use crate::MAX_WINDOW;
use streamforge_canonical::strict::{self as json, kind_name, number, Json, Num, Path};
use streamforge_canonical::writer::{int, string};

/// Most stages of a pattern.
pub const MAX_STAGES: usize = 32;
/// Largest `max` of a stage.
pub const MAX_STAGE_MAX: u32 = 32;
/// Largest sum of `max` over a pattern's stages.
pub const MAX_CAPTURES: u32 = 128;
/// Largest value of either limit.
pub const MAX_LIMIT: u64 = 1_000_000;

/// The service's limits (policy, not state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most matches one advance may emit.
    pub max_results_per_advance: u64,
    /// Most branches plus waits of one pattern and key after an observation.
    pub active_states: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_results_per_advance: 10_000,
            active_states: 10_000,
        }
    }
}

/// What a selected match removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Nothing.
    NoSkip,
    /// Everything sharing the match's first ordinal.
    SkipToNextStart,
    /// Everything whose first capture is at or before the match's last.
    SkipPastLast,
}

/// What a branch waiting for a stage does with an event that fails `where`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contiguity {
    /// Dies.
    Strict,
    /// Keeps waiting; a matching event replaces the branch.
    SkipNext,
    /// Keeps waiting; a matching event also forks successors.
    SkipAny,
}

/// One stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// Unique within the pattern.
    pub name: String,
    /// Fewest captures.
    pub min: u32,
    /// Most captures (>= 1).
    pub max: u32,
    /// See [`Contiguity`].
    pub contiguity: Contiguity,
    /// What an event must satisfy to be captured.
    pub where_: Condition,
    /// What cancels a branch waiting for this stage.
    pub forbidden: Option<Condition>,
}

/// One pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// Unique name.
    pub name: String,
    /// Deadline of a branch: its start plus `within`.
    pub within: i64,
    /// The skip policy.
    pub skip: Skip,
    /// 1..=32 stages.
    pub stages: Vec<Stage>,
    /// The absence condition, if any.
    pub absence: Option<Condition>,
}

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

impl Skip {
    /// The policy's name in documents.
    pub fn name(self) -> &'static str {
        match self {
            Skip::NoSkip => "no_skip",
            Skip::SkipToNextStart => "skip_to_next_start",
            Skip::SkipPastLast => "skip_past_last",
        }
    }
}

impl Contiguity {
    /// The contiguity's name in documents.
    pub fn name(self) -> &'static str {
        match self {
            Contiguity::Strict => "strict",
            Contiguity::SkipNext => "skip_next",
            Contiguity::SkipAny => "skip_any",
        }
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
    let skip = match lookup(entries, "skip") {
        None => Skip::NoSkip,
        Some(s) => {
            let p = path.key("skip");
            match text(s, &p)?.as_str() {
                "no_skip" => Skip::NoSkip,
                "skip_to_next_start" => Skip::SkipToNextStart,
                "skip_past_last" => Skip::SkipPastLast,
                other => {
                    return Err(err(
                        &p,
                        format!(
                            "unknown skip policy {other:?} (no_skip, skip_to_next_start or skip_past_last)"
                        ),
                    ))
                }
            }
        }
    };
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
        let p = spath.index(i);
        let entries = object(item, &p, "a stage")?;
        known_keys(
            entries,
            &p,
            &["name", "min", "max", "contiguity", "where", "forbidden"],
        )?;
        let sname = match lookup(entries, "name") {
            Some(n) => name(n, &p.key("name"))?,
            None => return Err(err(&p, "missing key \"name\"")),
        };
        if stages.iter().any(|s| s.0 == sname) {
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
            return Err(err(&p, format!("min {min} is greater than max {max}")));
        }
        if i == 0 && min == 0 {
            return Err(err(&p.key("min"), "the first stage needs min >= 1"));
        }
        let contiguity = match lookup(entries, "contiguity") {
            None => Contiguity::SkipNext,
            Some(c) => {
                let cp = p.key("contiguity");
                match text(c, &cp)?.as_str() {
                    "strict" => Contiguity::Strict,
                    "skip_next" => Contiguity::SkipNext,
                    "skip_any" => Contiguity::SkipAny,
                    other => {
                        return Err(err(
                            &cp,
                            format!("unknown contiguity {other:?} (strict, skip_next or skip_any)"),
                        ))
                    }
                }
            }
        };
        if lookup(entries, "where").is_none() {
            return Err(err(&p, "missing key \"where\""));
        }
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
mod tests {
    use super::*;

    fn bad(doc: &str) -> String {
        match Document::from_json(doc.as_bytes()) {
            Ok(_) => panic!("accepted: {doc}"),
            Err(e) => e.to_string(),
        }
    }

    fn ok(doc: &str) -> Document {
        Document::from_json(doc.as_bytes()).unwrap_or_else(|e| panic!("{e}: {doc}"))
    }

    /// A one-pattern document with these stages.
    fn stages(s: &str) -> String {
        format!(r#"{{"patterns":[{{"name":"p","within":10,"stages":[{s}]}}]}}"#)
    }

    #[test]
    fn errors_name_the_path_and_the_rule() {
        let doc = r#"{"patterns":[{"name":"fraud","within":10,"stages":[
            {"name":"login","where":{"kind":"login"}},
            {"name":"spend","where":{"kind":"pay"}},
            {"name":"check","where":{"all":[{"kind":"x"},
                {"field":"a","op":"eq","capture":"pay","capture_field":"a"}]}}]}]}"#;
        assert_eq!(
            bad(doc),
            r#"patterns[0].stages[2].where.all[1]: capture "pay" is not a stage of this pattern"#
        );
        let doc = doc.replace(r#""name":"spend""#, r#""name":"pay""#);
        assert_eq!(
            bad(&doc.replace(r#""capture":"pay""#, r#""capture":"check""#)),
            r#"patterns[0].stages[2].where.all[1]: capture "check" is not an earlier stage"#
        );
        ok(&doc);
        // the first stage cannot reference a capture, not even itself
        assert!(bad(&stages(
            r#"{"name":"a","where":{"field":"x","op":"eq","capture":"a","capture_field":"x"}}"#
        ))
        .contains("patterns[0].stages[0].where: capture \"a\" is not an earlier stage"));
        // absence may reference any stage
        ok(
            r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}],
              "absence":{"field":"x","op":"eq","capture":"a","capture_field":"x"}}]}"#,
        );
    }

    #[test]
    fn every_branch_is_validated() {
        // short-circuited branches are still validated
        let e = bad(&stages(
            r#"{"name":"a","where":{"any":[{"all":[]},{"not":{"kind":""}}]}}"#,
        ));
        assert_eq!(
            e,
            "patterns[0].stages[0].where.any[1].not.kind: must be a non-empty string"
        );
        let e = bad(&stages(
            r#"{"name":"a","where":{"kind":"x"},"forbidden":{"field":"f","op":"like","value":1}}"#,
        ));
        assert!(
            e.starts_with("patterns[0].stages[0].forbidden.op: unknown operator"),
            "{e}"
        );
        for (cond, path) in [
            (r#"{"field":"","op":"eq","value":1}"#, "where.field"),
            (r#"{"field":"f","op":"eq","value":null}"#, "where.value"),
            (r#"{"field":"f","op":"eq","value":[1]}"#, "where.value"),
            (
                r#"{"field":"f","op":"eq","value":{"decimal":"1.5","x":1}}"#,
                "where.value",
            ),
            (
                r#"{"field":"f","op":"eq","value":{"decimal":"1e5"}}"#,
                "where.value",
            ),
            (
                r#"{"field":"f","op":"eq","value":99999999999999999999}"#,
                "where.value",
            ),
            (r#"{"field":"f","op":"eq"}"#, "where"),
            (
                r#"{"field":"f","op":"eq","value":1,"capture":"a","capture_field":"f"}"#,
                "where",
            ),
            (r#"{"kind":"x","field":"f"}"#, "where"),
            (r#"{"all":{}}"#, "where.all"),
            (r#"{}"#, "where"),
            (r#"[]"#, "where"),
            (r#"{"nope":1}"#, "where"),
        ] {
            let e = bad(&stages(&format!(r#"{{"name":"a","where":{cond}}}"#)));
            assert!(
                e.starts_with(&format!("patterns[0].stages[0].{path}: ")),
                "{cond}: {e}"
            );
        }
    }

    fn nested_not(depth: usize) -> String {
        let mut c = r#"{"kind":"x"}"#.to_string();
        for _ in 1..depth {
            c = format!(r#"{{"not":{c}}}"#);
        }
        c
    }

    fn nested_all(depth: usize) -> String {
        let mut c = r#"{"kind":"x"}"#.to_string();
        for _ in 1..depth {
            c = format!(r#"{{"all":[{c}]}}"#);
        }
        c
    }

    #[test]
    fn depth_32_and_1024_nodes_are_the_limits() {
        for nest in [nested_not, nested_all] {
            ok(&stages(&format!(r#"{{"name":"a","where":{}}}"#, nest(32))));
            let e = bad(&stages(&format!(r#"{{"name":"a","where":{}}}"#, nest(33))));
            assert!(e.contains("condition nested deeper than 32 levels"), "{e}");
            // far deeper than the JSON reader goes: the same rule, no overflow
            let e = bad(&stages(&format!(
                r#"{{"name":"a","where":{}}}"#,
                nest(5000)
            )));
            assert!(e.contains("condition nested deeper than 32 levels"), "{e}");
        }
        // nodes are counted over every condition of the pattern
        let leaves = |n: usize| vec![r#"{"kind":"x"}"#; n].join(",");
        ok(&stages(&format!(
            r#"{{"name":"a","where":{{"any":[{}]}},"forbidden":{{"all":[{}]}}}}"#,
            leaves(511),
            leaves(511)
        )));
        let e = bad(&stages(&format!(
            r#"{{"name":"a","where":{{"any":[{}]}},"forbidden":{{"all":[{}]}}}}"#,
            leaves(511),
            leaves(512)
        )));
        assert!(
            e.starts_with(
                "patterns[0].stages[0].forbidden.all[511]: more than 1024 condition nodes"
            ),
            "{e}"
        );
    }

    #[test]
    fn stage_and_pattern_rules() {
        let w = r#""where":{"kind":"x"}"#;
        let cases = [
            (stages(&format!(r#"{{"name":"a","min":2,{w}}}"#)), "patterns[0].stages[0]: min 2 is greater than max 1"),
            (stages(&format!(r#"{{"name":"a","min":0,{w}}}"#)), "patterns[0].stages[0].min: the first stage needs min >= 1"),
            (stages(&format!(r#"{{"name":"a","max":0,{w}}}"#)), "patterns[0].stages[0].max: 0 is outside 1..=32"),
            (stages(&format!(r#"{{"name":"a","max":33,{w}}}"#)), "patterns[0].stages[0].max: 33 is outside 1..=32"),
            (stages(&format!(r#"{{"name":"a","max":1.0,{w}}}"#)), "patterns[0].stages[0].max: 1.0 is not an integer"),
            (stages(&format!(r#"{{"name":"a","contiguity":"loose",{w}}}"#)), "patterns[0].stages[0].contiguity: unknown contiguity"),
            (stages(&format!(r#"{{"name":"a b",{w}}}"#)), "patterns[0].stages[0].name: name \"a b\" must match"),
            (stages(&format!(r#"{{"name":"a",{w}}},{{"name":"a",{w}}}"#)), "patterns[0].stages[1].name: duplicate stage name"),
            (stages(r#"{"name":"a"}"#), "patterns[0].stages[0]: missing key \"where\""),
            (stages(&format!(r#"{{"name":"a","forbidden":null,{w}}}"#)), "patterns[0].stages[0].forbidden: a condition must be an object"),
            (stages(&format!(r#"{{"name":"a","extra":1,{w}}}"#)), "patterns[0].stages[0]: unknown key \"extra\""),
            (stages(""), "patterns[0].stages: 0 stages, 1..=32 are allowed"),
            (r#"{"patterns":[]}"#.to_string(), "patterns: at least one pattern is required"),
            (r#"{"patterns":[{"name":"p","within":0,"stages":[{"name":"a","where":{"kind":"x"}}]}]}"#.to_string(), "patterns[0].within: 0 is outside 1..=31536000000"),
            (r#"{"patterns":[{"name":"p","within":10,"skip":"all","stages":[{"name":"a","where":{"kind":"x"}}]}]}"#.to_string(), "patterns[0].skip: unknown skip policy"),
            (r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]},{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}]}"#.to_string(), "patterns[1].name: duplicate pattern name"),
            (r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}],"limits":{"active_states":0}}"#.to_string(), "limits.active_states: 0 is outside 1..=1000000"),
            (r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}],"limits":{"max_results_per_advance":1000001}}"#.to_string(), "limits.max_results_per_advance: 1000001 is outside 1..=1000000"),
            (r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}],"x":1}"#.to_string(), "unknown key \"x\""),
            (r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}],"patterns":[]}"#.to_string(), "duplicate key"),
        ];
        for (doc, want) in cases {
            let e = bad(&doc);
            assert!(
                e.starts_with(want) || e.contains(want),
                "{doc}\n  got {e}\n  want {want}"
            );
        }
        // 32 stages of max 4 = 128 captures: allowed; one more is not
        let many = |n: usize, last_max: u32| {
            (0..n)
                .map(|i| {
                    let max = if i + 1 == n { last_max } else { 4 };
                    format!(r#"{{"name":"s{i}","max":{max},{w}}}"#)
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        ok(&stages(&many(32, 4)));
        assert!(bad(&stages(&many(32, 5))).contains("the sum of max over the stages is 129"));
        assert!(bad(&stages(&many(33, 1))).contains("33 stages"));
    }

    #[test]
    fn the_document_is_written_with_defaults_sorted_by_name() {
        let d = ok(r#"{"patterns":[
            {"name":"zeta","within":5,"stages":[{"name":"a","where":{"field":"v","op":"ge","value":1E2}}],
             "absence":{"any":[]}},
            {"name":"alpha","within":7,"skip":"skip_past_last","stages":[
              {"name":"a","min":1,"where":{"kind":"k"},"forbidden":{"not":{"kind":"j"}}},
              {"name":"b","max":3,"where":{"field":"v","op":"lt","capture":"a","capture_field":"w"}},
              {"name":"c","min":0,"where":{"field":"d","op":"ne","value":{"decimal":"1.50"}}}]}],
            "limits":{"active_states":5}}"#);
        assert_eq!(d.pattern_names(), ["alpha", "zeta"]);
        assert_eq!(
            String::from_utf8(d.to_json()).unwrap(),
            concat!(
                r#"{"patterns":[{"name":"alpha","within":7,"skip":"skip_past_last","stages":["#,
                r#"{"name":"a","min":1,"max":1,"contiguity":"skip_next","where":{"kind":"k"},"forbidden":{"not":{"kind":"j"}}},"#,
                r#"{"name":"b","min":1,"max":3,"contiguity":"skip_next","where":{"field":"v","op":"lt","capture":"a","capture_field":"w"}},"#,
                r#"{"name":"c","min":0,"max":1,"contiguity":"skip_next","where":{"field":"d","op":"ne","value":{"decimal":"1.50"}}}]},"#,
                r#"{"name":"zeta","within":5,"skip":"no_skip","stages":[{"name":"a","min":1,"max":1,"contiguity":"skip_next","where":{"field":"v","op":"ge","value":100.0}}],"absence":{"any":[]}}],"#,
                r#""limits":{"max_results_per_advance":10000,"active_states":5}}"#
            )
        );
        // the written document reads back as the same document
        let back = ok(std::str::from_utf8(&d.to_json()).unwrap());
        assert_eq!(back, d);
    }

    #[test]
    fn same_patterns_ignores_order_defaults_and_limits_only() {
        let a = ok(
            r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]},
                                    {"name":"q","within":10,"stages":[{"name":"a","where":{"kind":"y"}}]}]}"#,
        );
        let b = ok(r#"{"limits":{"active_states":3},"patterns":[
            {"stages":[{"where":{"kind":"y"},"name":"a","min":1,"max":1,"contiguity":"skip_next"}],"name":"q","within":10,"skip":"no_skip"},
            {"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}]}"#);
        assert!(a.same_patterns(&b));
        assert!(b.same_patterns(&a));
        let c = ok(
            r#"{"patterns":[{"name":"p","within":11,"stages":[{"name":"a","where":{"kind":"x"}}]},
                                    {"name":"q","within":10,"stages":[{"name":"a","where":{"kind":"y"}}]}]}"#,
        );
        assert!(!a.same_patterns(&c));
        let d = ok(
            r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}]}"#,
        );
        assert!(!a.same_patterns(&d));
        assert_eq!(a.with_limits(b.limits()).limits().active_states, 3);
    }
}
