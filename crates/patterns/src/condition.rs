//! Conditions: boolean trees over one event and, through captures, the last
//! event an earlier stage captured.
//!
//! Forms: `{"all": [C, ...]}` (empty: true), `{"any": [C, ...]}` (empty:
//! false), `{"not": C}`, `{"kind": "login"}`,
//! `{"field": F, "op": OP, "value": Scalar}` and
//! `{"field": F, "op": OP, "capture": STAGE, "capture_field": G}`.
//! A tree is at most [`MAX_DEPTH`] nodes deep (a lone leaf has depth 1) and a
//! pattern holds at most [`MAX_NODES`] nodes over all its conditions.
//! Evaluation recursion is bounded by the validated depth.

use crate::error::DocumentError;
use crate::event::Event;
pub use crate::value::Op;
use crate::value::{self, compare_ref, Syntax, Value};
use streamforge_canonical::strict::{kind_name, Json, Path};

/// Deepest condition: nodes on the longest path from the root.
pub const MAX_DEPTH: usize = 32;
/// Most condition nodes in one pattern (all its conditions together).
pub const MAX_NODES: usize = 1024;

/// The right-hand side of a field comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A constant.
    Value(Value),
    /// A field of the last event captured by an earlier stage.
    Capture {
        /// The stage's name.
        stage: String,
        /// The stage's index in its pattern.
        index: usize,
        /// The field of the captured event.
        field: String,
    },
}

/// A validated condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// True when every member holds (empty: true).
    All(Vec<Condition>),
    /// True when some member holds (empty: false).
    Any(Vec<Condition>),
    /// Negation.
    Not(Box<Condition>),
    /// The event's kind equals the string.
    Kind(String),
    /// The event's field compared with a constant or a captured field.
    Field {
        /// The event's field.
        field: String,
        /// The operator.
        op: Op,
        /// The right-hand side.
        operand: Operand,
    },
}

impl Condition {
    /// Evaluates the condition for `event`; `last` gives the last event
    /// captured by a stage (by index), `None` for an empty stage.
    pub fn eval<'c, F>(&self, event: &Event, last: &F) -> bool
    where
        F: Fn(usize) -> Option<&'c Event>,
    {
        match self {
            Condition::All(items) => items.iter().all(|c| c.eval(event, last)),
            Condition::Any(items) => items.iter().any(|c| c.eval(event, last)),
            Condition::Not(c) => !c.eval(event, last),
            Condition::Kind(k) => event.kind_bytes() == k.as_bytes(),
            Condition::Field {
                field: name,
                op,
                operand,
            } => {
                let Some(left) = event.field_ref(name.as_bytes()) else {
                    return false;
                };
                match operand {
                    Operand::Value(v) => compare_ref(left, *op, v.as_ref()),
                    Operand::Capture {
                        index, field: f, ..
                    } => match last(*index).and_then(|c| c.field_ref(f.as_bytes())) {
                        Some(right) => compare_ref(left, *op, right),
                        None => false,
                    },
                }
            }
        }
    }

    /// Whether the condition reads any capture.
    pub fn uses_captures(&self) -> bool {
        let mut stack = vec![self];
        while let Some(c) = stack.pop() {
            match c {
                Condition::All(items) | Condition::Any(items) => stack.extend(items.iter()),
                Condition::Not(c) => stack.push(c),
                Condition::Kind(_) => {}
                Condition::Field { operand, .. } => {
                    if matches!(operand, Operand::Capture { .. }) {
                        return true;
                    }
                }
            }
        }
        false
    }
}

/// What a condition may reference while it is validated.
pub(crate) struct Scope<'s> {
    /// The pattern's stage names, in order.
    pub stages: &'s [String],
    /// Captures must name a stage with an index below this (the stage
    /// holding the condition; the stage count for `absence`).
    pub before: usize,
    /// How scalars are spelled.
    pub syntax: Syntax,
}

/// Validation state shared by all conditions of one pattern.
pub(crate) struct Budget {
    /// Nodes seen so far in the pattern.
    pub nodes: usize,
}

fn err(path: &Path<'_>, message: impl Into<String>) -> DocumentError {
    DocumentError {
        path: path.render(),
        message: message.into(),
    }
}

/// Parses and validates one condition at `path`, `depth` being its node
/// depth (the root is 1). Recursion stops at depth `MAX_DEPTH + 1`.
// Over 120 lines: one arm per condition operator.
pub(crate) fn parse(
    j: &Json<'_>,
    path: &Path<'_>,
    scope: &Scope<'_>,
    depth: usize,
    budget: &mut Budget,
) -> Result<Condition, DocumentError> {
    if depth > MAX_DEPTH {
        return Err(err(
            path,
            format!("condition nested deeper than {MAX_DEPTH} levels"),
        ));
    }
    budget.nodes += 1;
    if budget.nodes > MAX_NODES {
        return Err(err(
            path,
            format!("more than {MAX_NODES} condition nodes in one pattern"),
        ));
    }
    let Json::Object(entries) = j else {
        return Err(err(
            path,
            format!("a condition must be an object, not {}", kind_name(j)),
        ));
    };
    let has = |k: &str| entries.iter().any(|(n, _)| n == k);
    let only = |form: &str, allowed: &[&str]| -> Result<(), DocumentError> {
        for (n, _) in entries {
            if !allowed.contains(&n.as_str()) {
                return Err(err(
                    path,
                    format!("unknown key {n:?} in a {form:?} condition"),
                ));
            }
        }
        Ok(())
    };
    let get = |k: &str| entries.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    for form in ["all", "any"] {
        if has(form) {
            only(form, &[form])?;
            let p = path.key(form);
            let Some(Json::Array(items)) = get(form) else {
                return Err(err(&p, "must be an array of conditions"));
            };
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(parse(item, &p.index(i), scope, depth + 1, budget)?);
            }
            return Ok(if form == "all" {
                Condition::All(out)
            } else {
                Condition::Any(out)
            });
        }
    }
    if has("not") {
        only("not", &["not"])?;
        let p = path.key("not");
        let inner = get("not").unwrap_or(&Json::Null);
        return Ok(Condition::Not(Box::new(parse(
            inner,
            &p,
            scope,
            depth + 1,
            budget,
        )?)));
    }
    if has("kind") {
        only("kind", &["kind"])?;
        return match get("kind") {
            Some(Json::String(s)) if !s.is_empty() => Ok(Condition::Kind(s.clone())),
            _ => Err(err(&path.key("kind"), "must be a non-empty string")),
        };
    }
    if has("field") {
        only(
            "field",
            &["field", "op", "value", "capture", "capture_field"],
        )?;
        let field = match get("field") {
            Some(Json::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(err(&path.key("field"), "must be a non-empty string")),
        };
        let op = match get("op") {
            Some(Json::String(s)) => Op::from_name(s).ok_or_else(|| {
                err(
                    &path.key("op"),
                    format!("unknown operator {s:?} (eq, ne, lt, le, gt or ge)"),
                )
            })?,
            Some(_) => return Err(err(&path.key("op"), "must be a string")),
            None => return Err(err(path, "missing key \"op\"")),
        };
        let operand = match (get("value"), get("capture"), get("capture_field")) {
            (Some(v), None, None) => Operand::Value(
                value::from_json(v, scope.syntax).map_err(|m| err(&path.key("value"), m))?,
            ),
            (None, Some(c), Some(cf)) => {
                let stage = match c {
                    Json::String(s) if !s.is_empty() => s.clone(),
                    _ => return Err(err(&path.key("capture"), "must be a non-empty string")),
                };
                let field = match cf {
                    Json::String(s) if !s.is_empty() => s.clone(),
                    _ => {
                        return Err(err(
                            &path.key("capture_field"),
                            "must be a non-empty string",
                        ))
                    }
                };
                let Some(index) = scope.stages.iter().position(|s| *s == stage) else {
                    return Err(err(
                        path,
                        format!("capture {stage:?} is not a stage of this pattern"),
                    ));
                };
                if index >= scope.before {
                    return Err(err(
                        path,
                        format!("capture {stage:?} is not an earlier stage"),
                    ));
                }
                Operand::Capture {
                    stage,
                    index,
                    field,
                }
            }
            (Some(_), _, _) => {
                return Err(err(
                    path,
                    "a field condition has either \"value\" or \"capture\" and \"capture_field\", not both",
                ))
            }
            (None, None, None) => {
                return Err(err(
                    path,
                    "missing key \"value\" (or \"capture\" and \"capture_field\")",
                ))
            }
            (None, _, _) => {
                return Err(err(
                    path,
                    "\"capture\" and \"capture_field\" go together",
                ))
            }
        };
        return Ok(Condition::Field { field, op, operand });
    }
    match entries.first() {
        Some((n, _)) => Err(err(
            path,
            format!("unknown condition key {n:?} (expected all, any, not, kind or field)"),
        )),
        None => Err(err(
            path,
            "empty condition (expected all, any, not, kind or field)",
        )),
    }
}

/// Writes a condition: canonically (sorted keys, Doubles as hex bits) for
/// checkpoint states, or in the document's natural key order.
pub(crate) fn write(buf: &mut Vec<u8>, c: &Condition, syntax: Syntax) {
    use streamforge_canonical::writer::string;
    match c {
        Condition::All(items) | Condition::Any(items) => {
            buf.extend_from_slice(if matches!(c, Condition::All(_)) {
                b"{\"all\":["
            } else {
                b"{\"any\":["
            });
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                write(buf, item, syntax);
            }
            buf.extend_from_slice(b"]}");
        }
        Condition::Not(inner) => {
            buf.extend_from_slice(b"{\"not\":");
            write(buf, inner, syntax);
            buf.push(b'}');
        }
        Condition::Kind(k) => {
            buf.extend_from_slice(b"{\"kind\":");
            string(buf, k);
            buf.push(b'}');
        }
        Condition::Field {
            field,
            op,
            operand: Operand::Value(v),
        } => {
            buf.extend_from_slice(b"{\"field\":");
            string(buf, field);
            buf.extend_from_slice(b",\"op\":");
            string(buf, op.name());
            buf.extend_from_slice(b",\"value\":");
            value::write(buf, v, syntax);
            buf.push(b'}');
        }
        Condition::Field {
            field,
            op,
            operand: Operand::Capture {
                stage, field: cf, ..
            },
        } => {
            if syntax == Syntax::State {
                buf.extend_from_slice(b"{\"capture\":");
                string(buf, stage);
                buf.extend_from_slice(b",\"capture_field\":");
                string(buf, cf);
                buf.extend_from_slice(b",\"field\":");
                string(buf, field);
                buf.extend_from_slice(b",\"op\":");
                string(buf, op.name());
            } else {
                buf.extend_from_slice(b"{\"field\":");
                string(buf, field);
                buf.extend_from_slice(b",\"op\":");
                string(buf, op.name());
                buf.extend_from_slice(b",\"capture\":");
                string(buf, stage);
                buf.extend_from_slice(b",\"capture_field\":");
                string(buf, cf);
            }
            buf.push(b'}');
        }
    }
}
