//! The pending batch of a file replay (`send`, `patterns send`) and the
//! words its errors name the file's lines with.

use super::http::{Api, CallError};

/// The pending batch: NDJSON body and the file line of each item.
#[derive(Default)]
pub(super) struct Batch {
    body: Vec<u8>,
    pub(super) lines: Vec<u64>,
}

impl Batch {
    /// Appends one item (its JSON text, on one line) from file line `line_no`.
    pub(super) fn add(&mut self, line_no: u64, json: &[u8]) {
        if !self.lines.is_empty() {
            self.body.push(b'\n');
        }
        self.body.extend_from_slice(json);
        self.lines.push(line_no);
    }

    /// Appends every item of `other`, after this one's.
    pub(super) fn append(&mut self, other: Batch) {
        if self.lines.is_empty() {
            *self = other;
            return;
        }
        if !other.lines.is_empty() {
            self.body.push(b'\n');
            self.body.extend_from_slice(&other.body);
            self.lines.extend(other.lines);
        }
    }

    /// The NDJSON body held.
    pub(super) fn body(&self) -> &[u8] {
        &self.body
    }

    /// Items held.
    pub(super) fn len(&self) -> usize {
        self.lines.len()
    }

    /// POSTs the batch as NDJSON to `segments` (nothing when empty) and
    /// empties it; the answer's text and the number of items sent. A
    /// rejection names the file line of the failing item (see [`Wording`]).
    pub(super) fn post(
        &mut self,
        api: &Api,
        segments: &[&str],
        wording: &Wording,
    ) -> anyhow::Result<Option<(String, u64)>> {
        self.post_keyed(api, segments, wording, None)
    }

    /// The file lines of the first and the last item held.
    pub(super) fn lines(&self) -> Option<(u64, u64)> {
        Some((*self.lines.first()?, *self.lines.last()?))
    }

    /// [`Batch::post`] with `key(first line, last line)` as the
    /// `Idempotency-Key` (see [`Api::post_keyed`]).
    pub(super) fn post_keyed(
        &mut self,
        api: &Api,
        segments: &[&str],
        wording: &Wording,
        key: Option<&dyn Fn(u64, u64) -> String>,
    ) -> anyhow::Result<Option<(String, u64)>> {
        let Some((first, last)) = self.lines() else {
            return Ok(None);
        };
        let key = key.map(|k| k(first, last));
        let Batch { body, lines } = std::mem::take(self);
        let answer = api
            .post_keyed(segments, "application/x-ndjson", Some(body), key.as_deref())
            .map_err(|e| batch_error(e, &lines, wording))?;
        Ok(Some((answer, lines.len() as u64)))
    }
}

/// How errors name a file's items and what to do after one.
#[derive(Clone, Copy)]
pub(super) struct Wording {
    /// The item: `delivery`, `event`.
    pub item: &'static str,
    /// What "everything before line N" covers: `""` (the file), or
    /// `" of this partition"` when partitions are sent in parallel.
    pub scope: &'static str,
    /// What to do after a rejected batch whose first item is on the line given.
    pub advice: fn(u64) -> String,
}

/// Names the file line of a rejected batch's failing item.
pub(super) fn batch_error(e: CallError, lines: &[u64], wording: &Wording) -> anyhow::Error {
    let (first, last) = (lines[0], lines[lines.len() - 1]);
    let at = match &e {
        CallError::Problem(p) => p
            .index
            .and_then(|i| lines.get(i as usize))
            .map(|l| format!("line {l}: ")),
        _ => None,
    };
    let batch = if first == last {
        format!("the {} of line {first}", wording.item)
    } else {
        format!("the batch of lines {first}-{last}")
    };
    // A rejection applies nothing; a lost answer leaves it unknown.
    let outcome = match &e {
        CallError::Transport(_) => "may or may not have been applied",
        CallError::Connect(_) => "was not sent",
        _ => "was not applied",
    };
    anyhow::anyhow!(
        "{}{e}\n  {batch} {outcome}; everything{} before line {first} was; {}",
        at.unwrap_or_default(),
        wording.scope,
        (wording.advice)(first)
    )
}

#[cfg(test)]
mod tests {
    use super::Batch;

    fn of(items: &[(u64, &str)]) -> Batch {
        let mut b = Batch::default();
        for (line, json) in items {
            b.add(*line, json.as_bytes());
        }
        b
    }

    #[test]
    fn appending_is_adding_the_items_one_by_one() {
        let mut a = of(&[(1, "{\"a\":1}"), (2, "{\"b\":2}")]);
        a.append(of(&[(4, "{\"c\":3}")]));
        let want = of(&[(1, "{\"a\":1}"), (2, "{\"b\":2}"), (4, "{\"c\":3}")]);
        assert_eq!((a.body(), &a.lines), (want.body(), &want.lines));
        let mut empty = Batch::default();
        empty.append(of(&[(9, "{}")]));
        assert_eq!((empty.body(), &empty.lines[..]), (&b"{}"[..], &[9][..]));
        let mut kept = of(&[(3, "{}")]);
        kept.append(Batch::default());
        assert_eq!((kept.body(), &kept.lines[..]), (&b"{}"[..], &[3][..]));
    }
}
