//! Conditions as the engine evaluates them: the document's trees with each
//! field comparison (a **leaf**) numbered densely per pattern, in document
//! order (each stage's `where`, then its `forbidden`, then `absence`), and
//! the leaf's path within its pattern (`stages[2].where.all[1]`).
//!
//! Evaluation is [`Condition::eval`]'s, plus one thing: a comparison that is
//! false because its two values have different types adds one to its leaf's
//! counter (`counts[leaf]`). Nothing else reads the counters: they are
//! diagnostics, never state (not in checkpoints, not in output).

use crate::condition::{Condition, Operand};
use crate::event::Event;
use crate::pattern::Pattern;
use crate::value::{compare_typed, Op, Value};

/// A condition with its leaves numbered.
#[derive(Debug, Clone)]
pub(crate) enum Cond {
    All(Box<[Cond]>),
    Any(Box<[Cond]>),
    Not(Box<Cond>),
    Kind(Box<str>),
    /// A field against a constant.
    Value {
        field: Box<str>,
        op: Op,
        value: Value,
        leaf: u32,
    },
    /// A field against a field of the last event an earlier stage captured.
    Capture {
        field: Box<str>,
        op: Op,
        index: usize,
        capture_field: Box<str>,
        leaf: u32,
    },
}

/// One stage's conditions.
#[derive(Debug, Clone)]
pub(crate) struct StageConds {
    pub where_: Cond,
    pub forbidden: Option<Cond>,
}

/// One pattern's conditions and the path of each leaf.
#[derive(Debug, Clone)]
pub(crate) struct Conds {
    pub stages: Vec<StageConds>,
    pub absence: Option<Cond>,
    /// `paths[leaf]`: the leaf's path within the pattern.
    pub paths: Vec<Box<str>>,
}

impl Conds {
    /// Numbers the leaves of `p`'s conditions in document order.
    pub fn of(p: &Pattern) -> Conds {
        let mut paths = Vec::new();
        let stages = p
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let at = format!("stages[{i}]");
                StageConds {
                    where_: compile(&s.where_, format!("{at}.where"), &mut paths),
                    forbidden: s
                        .forbidden
                        .as_ref()
                        .map(|f| compile(f, format!("{at}.forbidden"), &mut paths)),
                }
            })
            .collect();
        let absence = p
            .absence
            .as_ref()
            .map(|a| compile(a, "absence".to_string(), &mut paths));
        Conds {
            stages,
            absence,
            paths,
        }
    }

    /// Leaves in all.
    pub fn leaves(&self) -> usize {
        self.paths.len()
    }
}

fn compile(c: &Condition, path: String, paths: &mut Vec<Box<str>>) -> Cond {
    let list = |items: &[Condition], key: &str, paths: &mut Vec<Box<str>>| -> Box<[Cond]> {
        items
            .iter()
            .enumerate()
            .map(|(i, c)| compile(c, format!("{path}.{key}[{i}]"), paths))
            .collect()
    };
    match c {
        Condition::All(items) => Cond::All(list(items, "all", paths)),
        Condition::Any(items) => Cond::Any(list(items, "any", paths)),
        Condition::Not(inner) => Cond::Not(Box::new(compile(inner, format!("{path}.not"), paths))),
        Condition::Kind(k) => Cond::Kind(k.as_str().into()),
        Condition::Field { field, op, operand } => {
            // at most 1024 nodes per pattern: the id fits
            let leaf = paths.len() as u32;
            paths.push(path.into());
            match operand {
                Operand::Value(v) => Cond::Value {
                    field: field.as_str().into(),
                    op: *op,
                    value: v.clone(),
                    leaf,
                },
                Operand::Capture {
                    index, field: cf, ..
                } => Cond::Capture {
                    field: field.as_str().into(),
                    op: *op,
                    index: *index,
                    capture_field: cf.as_str().into(),
                    leaf,
                },
            }
        }
    }
}

impl Cond {
    /// [`Condition::eval`], counting type mismatches in `counts`.
    pub fn eval<'c, F>(&self, event: &Event, last: &F, counts: &mut [u64]) -> bool
    where
        F: Fn(usize) -> Option<&'c Event>,
    {
        match self {
            Cond::All(items) => items.iter().all(|c| c.eval(event, last, counts)),
            Cond::Any(items) => items.iter().any(|c| c.eval(event, last, counts)),
            Cond::Not(c) => !c.eval(event, last, counts),
            Cond::Kind(k) => event.kind_bytes() == k.as_bytes(),
            Cond::Value {
                field,
                op,
                value,
                leaf,
            } => {
                let Some(left) = event.field_ref(field.as_bytes()) else {
                    return false;
                };
                match compare_typed(left, *op, value.as_ref()) {
                    Some(b) => b,
                    None => mismatch(counts, *leaf),
                }
            }
            Cond::Capture {
                field,
                op,
                index,
                capture_field,
                leaf,
            } => {
                let Some(left) = event.field_ref(field.as_bytes()) else {
                    return false;
                };
                match last(*index).and_then(|c| c.field_ref(capture_field.as_bytes())) {
                    Some(right) => match compare_typed(left, *op, right) {
                        Some(b) => b,
                        None => mismatch(counts, *leaf),
                    },
                    None => false,
                }
            }
        }
    }
}

/// Counts a type mismatch; always false.
#[cold]
#[inline(never)]
fn mismatch(counts: &mut [u64], leaf: u32) -> bool {
    if let Some(c) = counts.get_mut(leaf as usize) {
        *c = c.saturating_add(1);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Document;

    fn conds(doc: &str) -> Conds {
        let d = Document::from_json(doc.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        Conds::of(&d.patterns()[0])
    }

    #[test]
    fn leaves_are_numbered_in_document_order_with_their_paths() {
        let c = conds(
            r#"{"patterns":[{"name":"p","within":10,"stages":[
                {"name":"a","where":{"all":[{"kind":"x"},{"field":"v","op":"gt","value":1}]},
                 "forbidden":{"not":{"field":"w","op":"eq","value":"s"}}},
                {"name":"b","where":{"any":[{"field":"v","op":"ge","capture":"a","capture_field":"v"},
                                            {"all":[{"kind":"y"},{"field":"u","op":"lt","value":2.5}]}]}}],
              "absence":{"field":"z","op":"ne","value":true}}]}"#,
        );
        let paths: Vec<&str> = c.paths.iter().map(|p| &**p).collect();
        assert_eq!(
            paths,
            [
                "stages[0].where.all[1]",
                "stages[0].forbidden.not",
                "stages[1].where.any[0]",
                "stages[1].where.any[1].all[1]",
                "absence"
            ]
        );
        assert_eq!(c.leaves(), 5);
    }

    #[test]
    fn only_a_type_mismatch_counts() {
        let c = conds(
            r#"{"patterns":[{"name":"p","within":10,"stages":[
                {"name":"a","where":{"any":[{"field":"amount","op":"gt","value":101.5},
                                            {"field":"ok","op":"gt","value":true},
                                            {"field":"n","op":"eq","value":1}]}}]}]}"#,
        );
        let w = &c.stages[0].where_;
        let mut counts = vec![0u64; c.leaves()];
        let ev = |fields: &[(&str, Value)]| Event::new("e", "k", "x", 1, fields);
        // an Integer against a Double: false, counted at leaf 0
        assert!(!w.eval(
            &ev(&[("amount", Value::Integer(102))]),
            &|_| None,
            &mut counts
        ));
        assert_eq!(counts, [1, 0, 0]);
        // a Double against a Double: compared, not counted
        assert!(w.eval(
            &ev(&[("amount", Value::Double(102.0))]),
            &|_| None,
            &mut counts
        ));
        assert_eq!(counts, [1, 0, 0]);
        // a missing field is no mismatch; a Bool with gt is false but of one
        // type; a String against an Integer is one
        let e = ev(&[("ok", Value::Bool(true)), ("n", Value::String("1".into()))]);
        assert!(!w.eval(&e, &|_| None, &mut counts));
        assert_eq!(counts, [1, 0, 1]);
    }

    #[test]
    fn capture_mismatches_count_at_their_leaf() {
        let c = conds(
            r#"{"patterns":[{"name":"p","within":10,"stages":[
                {"name":"a","where":{"kind":"a"}},
                {"name":"b","where":{"field":"v","op":"ge","capture":"a","capture_field":"v"}}]}]}"#,
        );
        let mut counts = vec![0u64; c.leaves()];
        let first = Event::new("1", "k", "a", 1, &[("v", Value::Integer(5))]);
        let second = Event::new("2", "k", "b", 2, &[("v", Value::Double(6.0))]);
        let w = &c.stages[1].where_;
        assert!(!w.eval(&second, &|_| Some(&first), &mut counts));
        // an empty capture is no mismatch
        assert!(!w.eval(&second, &|_| None, &mut counts));
        assert_eq!(counts, [1]);
    }
}
