//! The output filters of `GET /patterns/output` and its stream:
//! `pattern=NAME` and `key=K`, each repeatable (several values: any of
//! them; both parameters: both must hold). A filter only drops records: the
//! paging stays by sequence (`next` moves past the records scanned, matching
//! or not), and an event stream keeps its ids.
//!
//! A record's `pattern` and `key` are read from its stored compact JSON,
//! whose field order is fixed (`seq`, `type`, `id`, `pattern`, `key`, ...;
//! see `crates/patterns/src/output.rs`): the head of the record is scanned
//! up to the key, the captures are never parsed. A record not in that shape
//! (none is) is parsed whole instead.

use std::borrow::Cow;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::Deserialize;

use super::error::ApiError;
use super::extract::QueryParams;
use super::AppState;
use crate::service::Service;
use crate::store::Page;

/// The `pattern` and `key` values asked for (empty: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputFilter {
    patterns: Vec<String>,
    keys: Vec<String>,
}

impl FromRequestParts<AppState> for OutputFilter {
    type Rejection = ApiError;

    /// Every `pattern` and `key` value of the query string.
    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, ApiError> {
        let q = QueryParams::from_request_parts(parts, st).await?;
        Ok(OutputFilter::parse(&q))
    }
}

impl OutputFilter {
    /// The filter of a query string.
    pub fn parse(q: &QueryParams) -> OutputFilter {
        OutputFilter {
            patterns: q.all("pattern"),
            keys: q.all("key"),
        }
    }

    /// No `pattern` and no `key`: every record passes.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty() && self.keys.is_empty()
    }

    /// `422 invalid_request` when a `pattern` value names no pattern of the
    /// document in force (read from the service now: the document can
    /// change while the service runs), naming the known ones.
    pub fn check(&self, svc: &Service) -> Result<(), ApiError> {
        if self.patterns.is_empty() {
            return Ok(());
        }
        let known = svc.pattern_names()?;
        match self.patterns.iter().find(|p| !known.contains(p)) {
            None => Ok(()),
            Some(unknown) => Err(ApiError::invalid_request(format!(
                "query parameter pattern names an unknown pattern {}; {}",
                quoted(unknown),
                if known.is_empty() {
                    "the document in force has no patterns".to_string()
                } else {
                    format!(
                        "the patterns are {}",
                        known
                            .iter()
                            .map(|n| quoted(n))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ))),
        }
    }

    /// Whether a stored record passes.
    pub fn keeps(&self, record: &str) -> bool {
        let Some((pattern, key)) = pattern_and_key(record) else {
            return false;
        };
        let any =
            |wanted: &[String], got: &str| wanted.is_empty() || wanted.iter().any(|w| w == got);
        any(&self.patterns, &pattern) && any(&self.keys, &key)
    }

    /// Drops the page's records that do not pass; returns the page's `next`
    /// as it was before: the last sequence scanned (or the page's start when
    /// it scanned nothing), so paging goes on after every record scanned.
    pub fn retain(&self, page: &mut Page) -> u64 {
        let next = page.rows.last().map_or(page.after, |(s, _)| *s);
        page.rows.retain(|(_, r)| self.keeps(r));
        next
    }
}

/// A name as JSON writes it (quoted, escaped), for error details.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// The `pattern` and `key` of a stored output record.
fn pattern_and_key(record: &str) -> Option<(Cow<'_, str>, Cow<'_, str>)> {
    head(record).or_else(|| {
        #[derive(Deserialize)]
        struct Keys<'a> {
            #[serde(borrow)]
            pattern: Cow<'a, str>,
            #[serde(borrow)]
            key: Cow<'a, str>,
        }
        let k: Keys<'_> = serde_json::from_str(record).ok()?;
        Some((k.pattern, k.key))
    })
}

/// `pattern` and `key` from the head of a record in the order the engine
/// writes it: `{"seq":N,"type":"..","id":"..","pattern":"..","key":"..",`.
fn head(record: &str) -> Option<(Cow<'_, str>, Cow<'_, str>)> {
    let r = record.strip_prefix("{\"seq\":")?;
    let r = r.trim_start_matches(|c: char| c.is_ascii_digit());
    let r = r.strip_prefix(",\"type\":")?;
    let (_, r) = string(r)?;
    let r = r.strip_prefix(",\"id\":")?;
    let (_, r) = string(r)?;
    let r = r.strip_prefix(",\"pattern\":")?;
    let (pattern, r) = string(r)?;
    let r = r.strip_prefix(",\"key\":")?;
    let (key, r) = string(r)?;
    r.starts_with(',').then_some((pattern, key))
}

/// The JSON string at the start of `s`: its value and what follows it.
/// (In UTF-8 the bytes `"` and `\` only ever stand for themselves.)
fn string(s: &str) -> Option<(Cow<'_, str>, &str)> {
    let b = s.as_bytes();
    if b.first() != Some(&b'"') {
        return None;
    }
    let mut i = 1;
    let mut escaped = false;
    loop {
        match b.get(i)? {
            b'\\' => {
                escaped = true;
                i += 2;
            }
            b'"' => break,
            _ => i += 1,
        }
    }
    let (literal, rest) = s.split_at(i + 1);
    let value = if escaped {
        Cow::Owned(serde_json::from_str::<String>(literal).ok()?)
    } else {
        Cow::Borrowed(&literal[1..i])
    };
    Some((value, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(patterns: &[&str], keys: &[&str]) -> OutputFilter {
        OutputFilter {
            patterns: patterns.iter().map(|s| s.to_string()).collect(),
            keys: keys.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_head_is_read_exactly() {
        let plain = r#"{"seq":12,"type":"match","id":"pair:1/2","pattern":"pair","key":"acct-7","start_time":1,"end_time":2,"last_event_time":2,"deadline":101,"captures":{"a":[{"ordinal":1,"id":"e","key":"other","kind":"a","time":1,"fields":{"pattern":"x"}}]}}"#;
        assert_eq!(
            head(plain),
            Some((Cow::Borrowed("pair"), Cow::Borrowed("acct-7")))
        );
        // Escapes anywhere in the head: quotes, backslashes, \u, non-ASCII.
        let tricky = r#"{"seq":3,"type":"timeout","id":"p\"q:1\\","pattern":"p\"q","key":"a\\\"b\u00e9☃\n","captures":{}}"#;
        assert_eq!(
            head(tricky),
            Some((Cow::Borrowed("p\"q"), Cow::Borrowed("a\\\"bé☃\n")))
        );
        // The same as a whole parse.
        for r in [plain, tricky] {
            let v: serde_json::Value = serde_json::from_str(r).unwrap();
            let (p, k) = head(r).unwrap();
            assert_eq!(
                (v["pattern"].as_str(), v["key"].as_str()),
                (Some(&*p), Some(&*k))
            );
        }
        // Another shape: parsed whole.
        let other = r#"{"pattern":"pair","seq":1,"key":"k","type":"match"}"#;
        assert_eq!(head(other), None);
        assert_eq!(
            pattern_and_key(other),
            Some((Cow::Borrowed("pair"), Cow::Borrowed("k")))
        );
        // Cut short, or not a record: nothing.
        for bad in [
            r#"{"seq":1,"type":"match","id":"x","pattern":"pair","key":"k"#,
            r#"{"seq":1,"type":"match","id":"x\"#,
            "",
            "[]",
        ] {
            assert_eq!(head(bad), None, "{bad}");
            assert_eq!(pattern_and_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn values_of_one_parameter_are_alternatives_and_both_must_hold() {
        let r = |p: &str, k: &str| {
            format!(
                r#"{{"seq":1,"type":"match","id":"{p}:1","pattern":"{p}","key":"{k}","captures":{{}}}}"#
            )
        };
        assert!(filter(&[], &[]).keeps(&r("a", "k")));
        assert!(filter(&["a"], &[]).keeps(&r("a", "k")));
        assert!(!filter(&["b"], &[]).keeps(&r("a", "k")));
        assert!(filter(&["b", "a"], &[]).keeps(&r("a", "k")));
        assert!(filter(&[], &["j", "k"]).keeps(&r("a", "k")));
        assert!(!filter(&[], &["j"]).keeps(&r("a", "k")));
        assert!(filter(&["a"], &["k"]).keeps(&r("a", "k")));
        assert!(!filter(&["a"], &["j"]).keeps(&r("a", "k")));
        assert!(!filter(&["b"], &["k"]).keeps(&r("a", "k")));
        // A key that is a prefix of another is another key.
        assert!(!filter(&[], &["k"]).keeps(&r("a", "kk")));
        assert!(!filter(&["a"], &[]).keeps(&r("ab", "k")));
    }

    #[test]
    fn next_passes_every_record_scanned() {
        let rec = |seq: u64, p: &str| {
            (
                seq,
                format!(
                    r#"{{"seq":{seq},"type":"match","id":"{p}:{seq}","pattern":"{p}","key":"k","captures":{{}}}}"#
                ),
            )
        };
        let page = |rows: Vec<(u64, String)>| Page {
            rows,
            head: 9,
            epoch: 0,
            rewound_to: None,
            after: 4,
        };
        let f = filter(&["a"], &[]);
        let mut p = page(vec![rec(5, "a"), rec(6, "b"), rec(7, "b")]);
        assert_eq!(f.retain(&mut p), 7);
        assert_eq!(p.rows, vec![rec(5, "a")]);
        let mut p = page(vec![rec(5, "b")]);
        assert_eq!(f.retain(&mut p), 5);
        assert!(p.rows.is_empty());
        let mut p = page(vec![]);
        assert_eq!(f.retain(&mut p), 4);
    }
}
