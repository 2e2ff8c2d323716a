//! Conditions that can never be true, found from the document alone.
//!
//! A valid document stays valid: these are warnings. Only what is certain
//! is reported, from the comparison rules (values of two types compare
//! false for every operator, a Bool supports `eq` and `ne` only):
//!
//! - an order operator (`lt`, `le`, `gt`, `ge`) against a Bool constant;
//! - an order operator past the end of its type: `lt` the smallest Integer
//!   or `gt` the largest, `lt ""`, `gt` the largest finite Double (`lt` its
//!   negative), `gt` the largest Decimal of 38 digits (`lt` its negative);
//! - an `all` whose members (nested `all`s included, not through `not` or
//!   `any`) compare one field with constants of two types: a comparison
//!   with a constant is true only when the field has the constant's type,
//!   `ne` included, and a field has one type in an event;
//! - an `all` whose members require two different kinds.
//!
//! The language has no comparison of two constants and no comparison of a
//! field with itself (a capture reads another event), so neither needs a
//! rule.

use std::fmt;

use crate::condition::{Condition, Operand};
use crate::pattern::Pattern;
use crate::value::{self, Op, Syntax, Value};

/// A condition that can never be true.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The pattern's name.
    pub pattern: String,
    /// The JSON path of the condition, as in validation errors
    /// (`patterns[0].stages[2].where.all[1]`).
    pub path: String,
    /// Why it is never true and how to write it.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The warnings of one pattern, `index` being its index in the document's
/// text; in document order (each stage's `where`, `forbidden`, then
/// `absence`; a node before its members).
pub(crate) fn of_pattern(p: &Pattern, index: usize) -> Vec<Warning> {
    let mut w = Warner {
        pattern: &p.name,
        out: Vec::new(),
    };
    let at = format!("patterns[{index}]");
    for (i, s) in p.stages.iter().enumerate() {
        w.walk(&s.where_, &format!("{at}.stages[{i}].where"));
        if let Some(f) = &s.forbidden {
            w.walk(f, &format!("{at}.stages[{i}].forbidden"));
        }
    }
    if let Some(a) = &p.absence {
        w.walk(a, &format!("{at}.absence"));
    }
    w.out
}

struct Warner<'p> {
    pattern: &'p str,
    out: Vec<Warning>,
}

impl Warner<'_> {
    fn warn(&mut self, path: &str, message: String) {
        self.out.push(Warning {
            pattern: self.pattern.to_string(),
            path: path.to_string(),
            message,
        });
    }

    fn walk(&mut self, c: &Condition, path: &str) {
        self.node(c, path, false);
    }

    /// `in_all`: `c` is a member of an `all`, which looked at its members
    /// already (nested `all`s flattened).
    fn node(&mut self, c: &Condition, path: &str, in_all: bool) {
        match c {
            Condition::All(items) => {
                if !in_all {
                    self.conjunction(items, path);
                }
                for (i, item) in items.iter().enumerate() {
                    self.node(item, &format!("{path}.all[{i}]"), true);
                }
            }
            Condition::Any(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.walk(item, &format!("{path}.any[{i}]"));
                }
            }
            Condition::Not(inner) => self.walk(inner, &format!("{path}.not")),
            Condition::Kind(_) => {}
            Condition::Field {
                field,
                op,
                operand: Operand::Value(v),
            } => {
                if let Some(m) = never_true(field, *op, v) {
                    self.warn(path, m);
                }
            }
            Condition::Field { .. } => {}
        }
    }

    /// Members of an `all` that require a field to have two types, or the
    /// kind to be two kinds.
    fn conjunction(&mut self, items: &[Condition], path: &str) {
        let mut members = Vec::new();
        conjuncts(items, "", &mut members);
        // per field (in order of first appearance): each type's first member
        let mut fields: Vec<(&str, Vec<(&'static str, String)>)> = Vec::new();
        let mut kinds: Vec<(&str, String)> = Vec::new();
        for (at, c) in members {
            match c {
                Condition::Kind(k) if !kinds.iter().any(|(seen, _)| seen == k) => {
                    kinds.push((k, at));
                }
                Condition::Field {
                    field,
                    op,
                    operand: Operand::Value(v),
                } if never_true(field, *op, v).is_none() => {
                    let t = type_name(v);
                    let i = match fields.iter().position(|(f, _)| f == field) {
                        Some(i) => i,
                        None => {
                            fields.push((field, Vec::new()));
                            fields.len() - 1
                        }
                    };
                    if !fields[i].1.iter().any(|(seen, _)| *seen == t) {
                        fields[i].1.push((t, at));
                    }
                }
                _ => {}
            }
        }
        for (field, types) in fields {
            if types.len() < 2 {
                continue;
            }
            let listed = listing(
                types
                    .iter()
                    .map(|(t, at)| format!("{} {t} ({at})", article(t)))
                    .collect(),
            );
            self.warn(
                path,
                format!(
                    "this \"all\" is never true: it compares field {} with {listed}, but a field \
                     has one type in an event and a comparison with a value of another type is \
                     false (Integer, Double and Decimal are three types, never converted); write \
                     every value compared with this field in the type the events send it as \
                     (Integer 100, Double 100.0, Decimal {{\"decimal\":\"100\"}})",
                    json_string(field)
                ),
            );
        }
        if kinds.len() >= 2 {
            let listed = listing(
                kinds
                    .iter()
                    .map(|(k, at)| format!("{} ({at})", json_string(k)))
                    .collect(),
            );
            let either = kinds
                .iter()
                .map(|(k, _)| format!("{{\"kind\":{}}}", json_string(k)))
                .collect::<Vec<_>>()
                .join(",");
            self.warn(
                path,
                format!(
                    "this \"all\" is never true: an event has one kind, and it requires the kinds \
                     {listed}; to accept any of them write {{\"any\":[{either}]}}"
                ),
            );
        }
    }
}

/// The members of an `all`, nested `all`s flattened, each with its path
/// relative to the outer `all` (`all[1]`, `all[1].all[0]`).
fn conjuncts<'c>(items: &'c [Condition], prefix: &str, out: &mut Vec<(String, &'c Condition)>) {
    for (i, c) in items.iter().enumerate() {
        let at = format!("{prefix}all[{i}]");
        match c {
            Condition::All(inner) => conjuncts(inner, &format!("{at}."), out),
            other => out.push((at, other)),
        }
    }
}

/// Why `field op v` is never true, if it never is.
fn never_true(field: &str, op: Op, v: &Value) -> Option<String> {
    let order = matches!(op, Op::Lt | Op::Le | Op::Gt | Op::Ge);
    let eq = |v: &str| {
        format!(
            "{{\"field\":{},\"op\":\"eq\",\"value\":{v}}}",
            json_string(field)
        )
    };
    let written = json_value(v);
    match v {
        Value::Bool(_) if order => Some(format!(
            "\"{}\" against the Bool {written} is never true: a Bool supports only eq and ne \
             (every other operator compares false); write {} (or \"ne\")",
            op.name(),
            eq(&written)
        )),
        _ => {
            let (beyond, end) = past_the_end(op, v)?;
            Some(format!(
                "\"{}\" {written} is never true: no {} is {beyond} {written}, the {end} {}; to \
                 match that value write {}",
                op.name(),
                type_name(v),
                type_name(v),
                eq(&written)
            ))
        }
    }
}

/// `("greater than", "largest")` when `op v` asks for a value beyond the
/// end of `v`'s type.
fn past_the_end(op: Op, v: &Value) -> Option<(&'static str, &'static str)> {
    const ABOVE: (&str, &str) = ("greater than", "largest");
    const BELOW: (&str, &str) = ("less than", "smallest");
    // the largest Decimal: 38 nines, no fraction (every digit counts)
    const DECIMAL_MAX: u128 = 10u128.pow(value::MAX_DECIMAL_DIGITS as u32) - 1;
    match (op, v) {
        (Op::Gt, Value::Integer(i)) if *i == i64::MAX => Some(ABOVE),
        (Op::Lt, Value::Integer(i)) if *i == i64::MIN => Some(BELOW),
        (Op::Gt, Value::Double(d)) if *d == f64::MAX => Some(ABOVE),
        (Op::Lt, Value::Double(d)) if *d == f64::MIN => Some(BELOW),
        (Op::Lt, Value::String(s)) if s.is_empty() => Some(BELOW),
        (Op::Gt | Op::Lt, Value::Decimal(d)) => {
            let n = d.num();
            let at_max = n.mantissa == DECIMAL_MAX && n.scale == 0;
            match (op, n.negative) {
                (Op::Gt, false) if at_max => Some(ABOVE),
                (Op::Lt, true) if at_max => Some(BELOW),
                _ => None,
            }
        }
        _ => None,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Integer(_) => "Integer",
        Value::Double(_) => "Double",
        Value::Decimal(_) => "Decimal",
        Value::String(_) => "String",
        Value::Bool(_) => "Bool",
    }
}

fn article(type_name: &str) -> &'static str {
    if type_name.starts_with('I') {
        "an"
    } else {
        "a"
    }
}

/// `a`, `a and b`, `a, b and c`.
fn listing(items: Vec<String>) -> String {
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

fn json_string(s: &str) -> String {
    let mut buf = Vec::new();
    streamforge_canonical::writer::string(&mut buf, s);
    String::from_utf8_lossy(&buf).into_owned()
}

fn json_value(v: &Value) -> String {
    let mut buf = Vec::new();
    value::write(&mut buf, v, Syntax::Document);
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests;
