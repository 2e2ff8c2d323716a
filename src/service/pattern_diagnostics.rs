//! The pattern engine's type mismatch counters (see
//! `patterns::Engine::type_mismatches`): in `/metrics` as
//! `streamforge_pattern_type_mismatches_total{pattern,condition}` and in
//! `GET /patterns?diagnostics=true` as `type_mismatches`. Read under the
//! engines lock when asked; counted since the process started (a restore
//! or a rebuild of the engine keeps them), never stored.

use std::fmt::Write as _;

use crate::patterns::TypeMismatch;

use super::order::Held;
use super::Service;

/// The metric's name.
pub const METRIC: &str = "streamforge_pattern_type_mismatches_total";

impl Service {
    /// The pattern engine's type mismatches now: by pattern name, then
    /// condition in document order; nonzero counts only.
    pub fn pattern_type_mismatches(&self) -> Vec<TypeMismatch> {
        let at = &mut Held::entry();
        let g = self.lock(at);
        g.engines.patterns.type_mismatches()
    }

    /// `GET /patterns?diagnostics=true`: the `GET /patterns` body with a
    /// last member `"type_mismatches": {"<pattern>": {"<condition>": n}}`.
    pub fn pattern_document_diagnostics(&self) -> Result<Vec<u8>, super::ServiceError> {
        // the document and its counters of one moment (a PUT /patterns
        // changes both)
        let (mut body, counts) =
            self.with_patterns(|e| (e.document().to_json(), e.type_mismatches()))?;
        // the document is one JSON object: add the member before its `}`
        body.pop();
        body.extend_from_slice(b",\"type_mismatches\":");
        body.extend_from_slice(type_mismatches_json(&counts).as_bytes());
        body.push(b'}');
        Ok(body)
    }
}

/// `{"<pattern>": {"<condition>": n, ...}, ...}` in the order given (only
/// patterns with a count appear).
pub fn type_mismatches_json(counts: &[TypeMismatch]) -> String {
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    let mut out = String::from("{");
    let mut pattern: Option<&str> = None;
    for m in counts {
        if pattern != Some(m.pattern.as_str()) {
            if pattern.is_some() {
                out.push_str("},");
            }
            out.push_str(&quote(&m.pattern));
            out.push_str(":{");
            pattern = Some(&m.pattern);
        } else {
            out.push(',');
        }
        let _ = write!(out, "{}:{}", quote(&m.condition), m.count);
    }
    if pattern.is_some() {
        out.push('}');
    }
    out.push('}');
    out
}

/// The metric's exposition: its help and type, and one sample per
/// condition that counted a mismatch.
pub fn render_type_mismatches(out: &mut String, counts: &[TypeMismatch]) {
    let _ = write!(
        out,
        "# HELP {METRIC} Pattern field comparisons that were false because the two values' types \
         differ (an Integer against a Double, a String against a number, ...), per pattern and \
         condition path; conditions that counted none have no sample. Diagnostics: reset by a \
         restart.\n# TYPE {METRIC} counter\n"
    );
    for m in counts {
        let _ = writeln!(
            out,
            "{METRIC}{{pattern=\"{}\",condition=\"{}\"}} {}",
            super::metrics::escape_label(&m.pattern),
            super::metrics::escape_label(&m.condition),
            m.count
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, condition: &str, count: u64) -> TypeMismatch {
        TypeMismatch {
            pattern: pattern.into(),
            condition: condition.into(),
            count,
        }
    }

    #[test]
    fn json_groups_by_pattern_in_order() {
        assert_eq!(type_mismatches_json(&[]), "{}");
        assert_eq!(
            type_mismatches_json(&[
                m("a", "stages[0].where", 2),
                m("a", "absence.not", 1),
                m("b\"", "stages[1].forbidden.any[0]", 7)
            ]),
            r#"{"a":{"stages[0].where":2,"absence.not":1},"b\"":{"stages[1].forbidden.any[0]":7}}"#
        );
    }

    #[test]
    fn metrics_have_one_sample_per_counted_condition() {
        let mut out = String::new();
        render_type_mismatches(&mut out, &[m("big", "stages[0].where.all[1]", 3)]);
        assert!(out.starts_with(&format!("# HELP {METRIC} ")), "{out}");
        assert!(out.ends_with(&format!(
            "# TYPE {METRIC} counter\n{METRIC}{{pattern=\"big\",condition=\"stages[0].where.all[1]\"}} 3\n"
        )), "{out}");
    }
}
