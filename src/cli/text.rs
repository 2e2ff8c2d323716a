//! The readable one-line forms the client prints.
//!
//! - change: `SEQ OP WINDOW KEY [START,END) count=C sum=S min=m max=M`, with
//!   `OP` `+` (upsert) or `-` (retract), e.g.
//!   `12 + views_per_minute alice [0,60000) count=2 sum=20 min=8 max=12`;
//! - result row: the same without `SEQ OP`;
//! - late record: `SEQ ID KEY timestamp=T value=V watermark=W`;
//! - address: `WINDOW KEY [START,END)`;
//! - pattern output record: `SEQ TYPE PATTERN KEY [START..END] STAGE=CAPTURES ...`
//!   with `TYPE` `match` or `timeout`, `START` the first capture's time, `END`
//!   the completing event's time (the deadline for an absence match or a
//!   timeout), then every stage in pattern order with the ordinals it
//!   captured (`#2,#3`), `-` for none, e.g.
//!   `1 match rising_payments alice [1000..4000] login=#1 pay=#2,#3 bigger_pay=#5`.
//!
//! Names (window, key, event id) are printed bare when they are non-empty and
//! hold no whitespace, control character, `"` or `\`; otherwise as JSON
//! strings (`""`, `"a b"`), so every line splits on spaces unambiguously.

use super::wire::{Address, Change, Late, Op, PatternRecord, Row};

/// A name, bare or JSON-quoted (see the module docs).
pub fn name(s: &str) -> String {
    let bare = !s.is_empty()
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\');
    if bare {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
    }
}

/// `WINDOW KEY [START,END)`.
pub fn address(a: &Address) -> String {
    format!(
        "{} {} [{},{})",
        name(&a.window),
        name(&a.key),
        a.start,
        a.end
    )
}

/// `WINDOW KEY [START,END) count=C sum=S min=m max=M`.
pub fn row(r: &Row) -> String {
    let mut s = format!(
        "{} {} [{},{})",
        name(&r.window),
        name(&r.key),
        r.start,
        r.end
    );
    s.push_str(&format!(
        " count={} sum={} min={} max={}",
        r.count, r.sum, r.min, r.max
    ));
    s
}

/// `SEQ +|- ROW`.
pub fn change(c: &Change) -> String {
    let op = match c.op {
        Op::Upsert => '+',
        Op::Retract => '-',
    };
    format!("{} {op} {}", c.seq, row(&c.result))
}

/// `SEQ ID KEY timestamp=T value=V watermark=W`.
pub fn late(l: &Late) -> String {
    format!(
        "{} {} {} timestamp={} value={} watermark={}",
        l.seq,
        name(&l.event.id),
        name(&l.event.key),
        l.event.timestamp,
        l.event.value,
        l.watermark
    )
}

/// `SEQ TYPE PATTERN KEY [START..END] STAGE=#o,#o STAGE=- ...`.
pub fn pattern_record(r: &PatternRecord) -> String {
    let mut s = format!(
        "{} {} {} {} [{}..{}]",
        r.seq,
        name(&r.kind),
        name(&r.pattern),
        name(&r.key),
        r.start_time,
        r.end_time
    );
    for (stage, events) in &r.captures.0 {
        s.push_str(&format!(" {}=", name(stage)));
        if events.is_empty() {
            s.push('-');
        }
        for (i, e) in events.iter().enumerate() {
            s.push_str(&format!("{}#{}", if i == 0 { "" } else { "," }, e.ordinal));
        }
    }
    s
}

/// `W` or `none`.
pub fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "none".to_string(), |w| w.to_string())
}

/// `1 record`, `2 records` (`batch`, `match` and `finish` take `es`).
pub fn plural(n: u64, what: &str) -> String {
    match (n, what.ends_with("ch") || what.ends_with("sh")) {
        (1, _) => format!("1 {what}"),
        (_, true) => format!("{n} {what}es"),
        (_, false) => format!("{n} {what}s"),
    }
}

/// Left-aligned columns separated by two spaces (last column unpadded).
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bare_or_quoted() {
        assert_eq!(name("alice"), "alice");
        assert_eq!(name(""), "\"\"");
        assert_eq!(name("a b"), "\"a b\"");
        assert_eq!(name("é"), "é");
        assert_eq!(name("a\"b"), "\"a\\\"b\"");
    }

    #[test]
    fn change_line() {
        let c = Change {
            seq: 12,
            op: Op::Retract,
            result: Row {
                window: "w".into(),
                key: "k".into(),
                start: -10,
                end: i128::from(i64::MAX) + 5,
                count: 3,
                sum: 12,
                min: 1,
                max: 7,
            },
        };
        assert_eq!(
            change(&c),
            "12 - w k [-10,9223372036854775812) count=3 sum=12 min=1 max=7"
        );
    }

    #[test]
    fn pattern_record_line() {
        let r: PatternRecord = serde_json::from_str(
            r#"{"seq":7,"type":"timeout","id":"p:3/","pattern":"p","key":"a b",
                "start_time":10,"end_time":110,"last_event_time":10,"deadline":110,
                "captures":{"z":[{"ordinal":3,"id":"e","key":"a b","kind":"a","time":10,"fields":{}}],
                            "a":[]}}"#,
        )
        .expect("a record");
        assert_eq!(pattern_record(&r), "7 timeout p \"a b\" [10..110] z=#3 a=-");
    }

    #[test]
    fn table_aligns() {
        let t = table(&[
            vec!["a".into(), "bb".into(), "c".into()],
            vec!["aaa".into(), "b".into(), "".into()],
        ]);
        assert_eq!(t, "a    bb  c\naaa  b\n");
    }
}
