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

use crate::patterns::event::Event;
use crate::patterns::value::{compare, Value};

/// Deepest condition: nodes on the longest path from the root.
pub const MAX_DEPTH: usize = 32;
/// Most condition nodes in one pattern (all its conditions together).
pub const MAX_NODES: usize = 1024;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `eq`
    Eq,
    /// `ne`
    Ne,
    /// `lt`
    Lt,
    /// `le`
    Le,
    /// `gt`
    Gt,
    /// `ge`
    Ge,
}

impl Op {
    /// The operator's name in documents.
    pub fn name(self) -> &'static str {
        match self {
            Op::Eq => "eq",
            Op::Ne => "ne",
            Op::Lt => "lt",
            Op::Le => "le",
            Op::Gt => "gt",
            Op::Ge => "ge",
        }
    }

    /// The operator of a name.
    pub fn from_name(name: &str) -> Option<Op> {
        Some(match name {
            "eq" => Op::Eq,
            "ne" => Op::Ne,
            "lt" => Op::Lt,
            "le" => Op::Le,
            "gt" => Op::Gt,
            "ge" => Op::Ge,
            _ => return None,
        })
    }
}

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

/// Looks a field up by name.
#[inline]
pub fn field<'e>(event: &'e Event, name: &str) -> Option<&'e Value> {
    event.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
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
            Condition::Kind(k) => event.kind == *k,
            Condition::Field {
                field: name,
                op,
                operand,
            } => {
                let Some(left) = field(event, name) else {
                    return false;
                };
                match operand {
                    Operand::Value(v) => compare(left, *op, v),
                    Operand::Capture {
                        index, field: f, ..
                    } => match last(*index).and_then(|c| field(c, f)) {
                        Some(right) => compare(left, *op, right),
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
