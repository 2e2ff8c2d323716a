//! The canonical text of history segments (see [`super::history`]): items
//! exactly as the checkpoint envelope writes them, separated by commas.
//! Sources items are `[id,key,timestamp,value]`, late items
//! `[[id,key,timestamp,value],watermark]`.

use std::borrow::Cow;

use super::event::Event;

/// Where a walk over a list of items stopped.
enum Walk {
    /// At the wanted depth-0 comma, this byte offset.
    Comma(usize),
    /// At the end of the text, with every bracket closed and no string open
    /// (`true`) or not.
    End(bool),
    /// At a `]` that closes nothing.
    Broken,
}

/// Walks a list of items (JSON arrays separated by commas at depth 0) to
/// its `n`-th depth-0 comma (1-based).
fn walk(text: &[u8], n: u64) -> Walk {
    let mut depth = 0u32;
    let mut in_string = false;
    let mut escaped = false;
    let mut seen = 0u64;
    for (i, &b) in text.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' => depth += 1,
            b']' => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return Walk::Broken,
            },
            b',' if depth == 0 => {
                seen += 1;
                if seen == n {
                    return Walk::Comma(i);
                }
            }
            _ => {}
        }
    }
    Walk::End(depth == 0 && !in_string)
}

/// The byte range of item `index` in a segment's text (items are JSON
/// arrays separated by commas at depth 0), or `None` past the end or in
/// text that is not such a list.
pub fn item(text: &[u8], index: u64) -> Option<&[u8]> {
    let start = match index {
        0 => 0,
        _ => comma(text, index)? + 1,
    };
    let rest = &text[start..];
    match walk(rest, 1) {
        Walk::Comma(at) => Some(&rest[..at]),
        Walk::End(true) if !rest.is_empty() => Some(rest),
        _ => None,
    }
}

/// The byte offset of the `n`-th comma (1-based) at depth 0 of a list of
/// items: where item `n - 1` ends. `None` when there are fewer.
pub fn comma(text: &[u8], n: u64) -> Option<usize> {
    match walk(text, n) {
        Walk::Comma(at) if n > 0 => Some(at),
        _ => None,
    }
}

/// The byte ranges of every item of a list of items, in one pass, or
/// `None` when the text is not such a list (a bracket closed that was not
/// open, or the text ends inside an item or a string).
pub fn item_ranges(text: &[u8]) -> Option<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        match walk(&text[start..], 1) {
            Walk::Comma(at) => {
                out.push((start, start + at));
                start += at + 1;
            }
            Walk::End(true) => {
                if start < text.len() {
                    out.push((start, text.len()));
                }
                return Some(out);
            }
            _ => return None,
        }
    }
}

/// The items of a list of items, in order.
pub fn items(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(text).filter(|t| !t.is_empty());
    std::iter::from_fn(move || {
        let t = rest?;
        match comma(t, 1) {
            Some(at) => {
                rest = Some(&t[at + 1..]);
                Some(&t[..at])
            }
            None => {
                rest = None;
                Some(t)
            }
        }
    })
}

/// An event as an item holds it: `[id, key, timestamp, value]`.
pub(crate) type EventDoc<'a> = (Cow<'a, str>, Cow<'a, str>, i64, i64);

/// The event an item (or a checkpoint's event list) holds.
pub(crate) fn to_event((id, key, timestamp, value): EventDoc<'_>) -> Event {
    Event {
        id: id.into_owned(),
        key: key.into_owned(),
        timestamp,
        value,
    }
}

/// Parses a sources item.
pub fn parse_event(item: &[u8]) -> Result<Event, String> {
    serde_json::from_slice::<EventDoc<'_>>(item)
        .map(to_event)
        .map_err(|e| format!("unreadable history item: {e}"))
}

/// The bytes of a sources item's id when the item starts with a string that
/// has no escapes (what [`write_event_bytes`] writes for any id without `"`,
/// `\\` or control characters), so an id can be hashed without parsing the
/// whole item; `None` otherwise (the caller then parses the item).
pub fn item_id(item: &[u8]) -> Option<&[u8]> {
    let rest = item.strip_prefix(b"[\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    (rest[end] == b'"').then(|| &rest[..end])
}

/// Parses a late item.
pub fn parse_late(item: &[u8]) -> Result<(Event, i64), String> {
    serde_json::from_slice::<(EventDoc<'_>, i64)>(item)
        .map(|(e, w)| (to_event(e), w))
        .map_err(|e| format!("unreadable late item: {e}"))
}

/// Appends a sources item.
pub fn write_event(buf: &mut Vec<u8>, id: &str, key: &str, timestamp: i64, value: i64) {
    write_event_bytes(buf, id.as_bytes(), key, timestamp, value)
}

/// [`write_event`] with the id as the bytes of a `str`.
pub fn write_event_bytes(buf: &mut Vec<u8>, id: &[u8], key: &str, timestamp: i64, value: i64) {
    use streamforge_canonical::writer::{int, string, string_bytes};
    buf.push(b'[');
    string_bytes(buf, id);
    buf.push(b',');
    string(buf, key);
    buf.push(b',');
    int(buf, timestamp);
    buf.push(b',');
    int(buf, value);
    buf.push(b']');
}

/// Appends a late item.
pub fn write_late(
    buf: &mut Vec<u8>,
    id: &str,
    key: &str,
    timestamp: i64,
    value: i64,
    watermark: i64,
) {
    buf.push(b'[');
    write_event(buf, id, key, timestamp, value);
    buf.push(b',');
    streamforge_canonical::writer::int(buf, watermark);
    buf.push(b']');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_found_across_strings_with_brackets_and_commas() {
        let mut text = Vec::new();
        let ids = ["a", "b,]\"[", "\\", "é,[x"];
        for (i, id) in ids.iter().enumerate() {
            if i > 0 {
                text.push(b',');
            }
            write_event(&mut text, id, "k,]", i as i64 - 1, i64::MIN);
        }
        for (i, id) in ids.iter().enumerate() {
            let e = parse_event(item(&text, i as u64).unwrap()).unwrap();
            assert_eq!(e.id, *id);
            assert_eq!(e.key, "k,]");
            assert_eq!(e.timestamp, i as i64 - 1);
        }
        assert_eq!(item(&text, ids.len() as u64), None);
        assert_eq!(item(b"", 0), None);
        let mut late = Vec::new();
        write_late(&mut late, "x", "", 1, 2, -3);
        late.push(b',');
        write_late(&mut late, "y", "", 4, 5, 6);
        assert_eq!(parse_late(item(&late, 1).unwrap()).unwrap().1, 6);
        assert!(item(b"]]", 0).is_none());
    }

    #[test]
    fn an_items_id_read_alone_hashes_as_the_parsed_one() {
        for id in ["a", "b,]\"[", "\\", "é,[x", "", "tab\there", "\u{7f}"] {
            let mut text = Vec::new();
            write_event(&mut text, id, "k", 1, 2);
            let parsed = parse_event(&text).unwrap().id;
            match item_id(&text) {
                Some(fast) => assert_eq!(fast, parsed.as_bytes(), "{id:?}"),
                None => assert!(
                    text.contains(&b'\\'),
                    "{id:?} has no escape yet was not read"
                ),
            }
        }
        assert_eq!(item_id(b"[\"abc\",\"k\",1,2]"), Some(&b"abc"[..]));
        assert_eq!(item_id(b"[\"a\\\"b\",\"k\",1,2]"), None);
        assert_eq!(item_id(b"[\"unterminated"), None);
        assert_eq!(item_id(b"{}"), None);
    }
}
