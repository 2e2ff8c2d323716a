//! The fast path of [`super::parse`]: the deliveries clients send almost
//! always (`{"partition":"p0","offset":7,"event":{"id":"e7","key":"k",
//! "timestamp":1700000000000,"value":3}}`, keys in any order, any JSON
//! whitespace), read by a scanner that builds nothing it discards.
//!
//! It answers only when it is sure: `Some` exactly when the serde path
//! would accept the text with the same delivery (a test compares them on
//! mutated inputs), `None` for everything else (escapes in strings,
//! numbers that are not plain integers of up to 18 digits, a missing,
//! repeated or unknown key, anything malformed), which the serde path then
//! reads, with its error messages. So the fast path changes no answer.
//! `streamforge send` checks the delivery lines of a file with it too.

use std::borrow::Cow;

use crate::engine::{DeliveryRef, EventRef};

/// One delivery object and nothing else (but whitespace).
pub(crate) fn one(text: &[u8]) -> Option<DeliveryRef<'_>> {
    let mut c = Cursor::new(text)?;
    let d = c.delivery()?;
    c.end()?;
    Some(d)
}

/// A JSON array of at least one delivery object, and nothing else.
pub(super) fn array(text: &[u8]) -> Option<Vec<DeliveryRef<'_>>> {
    let mut c = Cursor::new(text)?;
    c.eat(b'[')?;
    let mut items = Vec::with_capacity(text.len() / 96 + 1);
    loop {
        items.push(c.delivery()?);
        match c.next()? {
            b',' => {}
            b']' => break,
            _ => return None,
        }
    }
    c.end()?;
    Some(items)
}

struct Cursor<'a> {
    /// The text, checked as UTF-8 once, whole: a string's bytes between
    /// two quotes are then a `str` without a check of their own (a line
    /// has ten strings, names included, and the check's set-up cost more
    /// than the scan: 3.5% of the server's samples during `send`).
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    /// `None` when the text is not UTF-8 (the serde path says where).
    fn new(text: &'a [u8]) -> Option<Cursor<'a>> {
        let s = std::str::from_utf8(text).ok()?;
        Some(Cursor {
            s,
            b: s.as_bytes(),
            i: 0,
        })
    }

    /// Skips JSON whitespace.
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte after whitespace, consumed.
    fn next(&mut self) -> Option<u8> {
        self.ws();
        let c = *self.b.get(self.i)?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// Only whitespace is left.
    fn end(&mut self) -> Option<()> {
        self.ws();
        (self.i == self.b.len()).then_some(())
    }

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        self.string_rest()
    }

    /// A plain integer (no fraction, no exponent, no leading zero) of at
    /// most 18 digits, so it fits an `i64`; not `-0` (the serde path
    /// decides what that is).
    fn int(&mut self) -> Option<i64> {
        self.ws();
        let neg = self.b.get(self.i) == Some(&b'-');
        if neg {
            self.i += 1;
        }
        let start = self.i;
        let mut v: i64 = 0;
        while let Some(&d) = self.b.get(self.i) {
            if !d.is_ascii_digit() {
                break;
            }
            if self.i - start == 18 {
                return None;
            }
            v = v * 10 + i64::from(d - b'0');
            self.i += 1;
        }
        let digits = self.i - start;
        if digits == 0
            || (digits > 1 && self.b[start] == b'0')
            || (neg && v == 0)
            || matches!(self.b.get(self.i), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        Some(if neg { -v } else { v })
    }

    /// `,` (more members follow: `true`) or `}` (the object ends).
    fn more(&mut self) -> Option<bool> {
        match self.next()? {
            b',' => Some(true),
            b'}' => Some(false),
            _ => None,
        }
    }

    /// `lit` next (no whitespace skipped), consumed.
    #[inline]
    fn lit(&mut self, lit: &[u8]) -> Option<()> {
        let end = self.i + lit.len();
        if self.b.get(self.i..end)? != lit {
            return None;
        }
        self.i = end;
        Some(())
    }

    /// The rest of a string whose opening quote was consumed (no escapes
    /// or control characters).
    /// Delivery strings are short: a byte loop beats a vectorized search
    /// (whose set-up costs more than the scan).
    #[inline]
    fn string_rest(&mut self) -> Option<&'a str> {
        let rest = &self.b[self.i..];
        let len = rest
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        let s = self.s.get(self.i..self.i + len)?;
        self.i += len + 1;
        Some(s)
    }

    /// The exact text `streamforge send`, most libraries and the docs
    /// write: `{"partition":P,"offset":O,"event":{"id":I,"key":K,
    /// "timestamp":T,"value":V}}` with no whitespace, in this key order
    /// (`"offset"` optional). One special case of [`Cursor::delivery`]'s
    /// grammar, read by comparing its literal parts instead of reading
    /// and matching each name (a third of the scanner's time); `None`
    /// sends the text to the general reader from where this one started.
    fn template(&mut self) -> Option<DeliveryRef<'a>> {
        self.lit(b"{\"partition\":\"")?;
        let partition = self.string_rest()?;
        let offset = if self.lit(b",\"offset\":").is_some() {
            Some(self.int()?)
        } else {
            None
        };
        self.lit(b",\"event\":{\"id\":\"")?;
        let id = self.string_rest().filter(|s| !s.is_empty())?;
        self.lit(b",\"key\":\"")?;
        let key = self.string_rest()?;
        self.lit(b",\"timestamp\":")?;
        let timestamp = self.int()?;
        self.lit(b",\"value\":")?;
        let value = self.int()?;
        self.lit(b"}}")?;
        Some(DeliveryRef {
            partition: Cow::Borrowed(partition),
            offset,
            event: EventRef {
                id: Cow::Borrowed(id),
                key: Cow::Borrowed(key),
                timestamp,
                value,
            },
        })
    }

    fn delivery(&mut self) -> Option<DeliveryRef<'a>> {
        self.ws();
        let at = self.i;
        if let Some(d) = self.template() {
            return Some(d);
        }
        self.i = at;
        self.eat(b'{')?;
        let (mut partition, mut offset, mut event) = (None, None, None);
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            match key {
                "partition" if partition.is_none() => partition = Some(self.string()?),
                "offset" if offset.is_none() => offset = Some(self.int()?),
                "event" if event.is_none() => event = Some(self.event()?),
                _ => return None,
            }
            if !self.more()? {
                break;
            }
        }
        Some(DeliveryRef {
            partition: Cow::Borrowed(partition?),
            offset,
            event: event?,
        })
    }

    fn event(&mut self) -> Option<EventRef<'a>> {
        self.eat(b'{')?;
        let (mut id, mut key, mut timestamp, mut value) = (None, None, None, None);
        loop {
            let name = self.string()?;
            self.eat(b':')?;
            match name {
                "id" if id.is_none() => id = Some(self.string().filter(|s| !s.is_empty())?),
                "key" if key.is_none() => key = Some(self.string()?),
                "timestamp" if timestamp.is_none() => timestamp = Some(self.int()?),
                "value" if value.is_none() => value = Some(self.int()?),
                _ => return None,
            }
            if !self.more()? {
                break;
            }
        }
        Some(EventRef {
            id: Cow::Borrowed(id?),
            key: Cow::Borrowed(key?),
            timestamp: timestamp?,
            value: value?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse::{serde_array, serde_one};
    use super::*;

    const VALID: &[&str] = &[
        r#"{"partition":"p0","offset":7,"event":{"id":"e7","key":"k","timestamp":1700000000000,"value":3}}"#,
        r#"{"event":{"value":-3,"timestamp":-1,"key":"","id":"x"},"partition":"p1"}"#,
        " {\r\n\t\"partition\" : \"p\u{e9}\" ,\"event\":{ \"id\":\"\u{1F600}\",\"key\":\"k k\",\"timestamp\":0,\"value\":999999999999999999}}\n",
        r#"{"partition":"p0","offset":0,"event":{"id":"a","key":"b","timestamp":10,"value":0}}"#,
        r#"{"partition":"p2","event":{"id":"e","key":"","timestamp":-5,"value":-7}}"#,
    ];

    /// Bytes that make or break JSON where they land.
    const NOISE: &[&str] = &[
        " ",
        "\\",
        "\"",
        ",",
        ":",
        "{",
        "}",
        "[",
        "]",
        "0",
        "-",
        "-0",
        ".5",
        "e3",
        "1",
        "9",
        "\\u0041",
        "\\n",
        "\u{1}",
        "\u{7f}",
        "\u{e9}",
        "null",
        "true",
        "\"offset\":1,",
        "\"id\":\"z\",",
        "\"extra\":1,",
        "\u{feff}",
    ];

    /// Whether the fast path agrees with the serde path on `text`: when it
    /// answers, serde accepts the same delivery.
    fn agrees(text: &[u8]) {
        if let Some(fast) = one(text) {
            let slow = serde_one(text).unwrap_or_else(|e| {
                panic!(
                    "fast path accepted {:?}, serde refused: {e}",
                    String::from_utf8_lossy(text)
                )
            });
            assert_eq!(fast, slow, "{:?}", String::from_utf8_lossy(text));
        }
        let mut arr = b"[".to_vec();
        arr.extend_from_slice(text);
        arr.extend_from_slice(b",");
        arr.extend_from_slice(VALID[0].as_bytes());
        arr.extend_from_slice(b"]");
        if let Some(fast) = array(&arr) {
            let slow = serde_array(&arr).unwrap_or_else(|e| {
                panic!(
                    "fast path accepted {:?}, serde refused: {e}",
                    String::from_utf8_lossy(&arr)
                )
            });
            assert_eq!(fast, slow);
        }
    }

    #[test]
    fn the_common_shapes_take_the_fast_path() {
        for v in VALID {
            assert!(one(v.as_bytes()).is_some(), "{v}");
            agrees(v.as_bytes());
        }
        let all = format!("[{}]", VALID.join(" ,\n"));
        assert_eq!(array(all.as_bytes()).map(|a| a.len()), Some(VALID.len()));
    }

    /// The literal template reads the texts written in its exact shape
    /// (with and without an offset), and leaves others to the general
    /// reader, which reads them the same.
    #[test]
    fn the_template_reads_its_shape_and_nothing_else() {
        for (text, template) in [
            (VALID[0], true),
            (VALID[3], true),
            (VALID[4], true),
            (VALID[1], false),
            (VALID[2], false),
        ] {
            let mut c = Cursor::new(text.as_bytes()).unwrap();
            let t = c.template();
            assert_eq!(t.is_some(), template, "{text}");
            if let Some(t) = t {
                c.end().unwrap();
                assert_eq!(Some(t), serde_one(text.as_bytes()).ok(), "{text}");
            }
        }
        // Whitespace inside, or a key out of order: the general reader.
        for text in [
            r#"{"partition":"p0", "event":{"id":"a","key":"b","timestamp":10,"value":0}}"#,
            r#"{"partition":"p0","event":{"key":"b","id":"a","timestamp":10,"value":0}}"#,
            r#"{"partition":"p0","event":{"id":"a","key":"b","timestamp":10,"value":0} }"#,
        ] {
            assert!(
                Cursor::new(text.as_bytes()).unwrap().template().is_none(),
                "{text}"
            );
            assert_eq!(
                one(text.as_bytes()),
                serde_one(text.as_bytes()).ok(),
                "{text}"
            );
        }
    }

    #[test]
    fn what_it_cannot_be_sure_of_goes_to_serde() {
        for text in [
            r#"{"partition":"p\u0030","event":{"id":"e","key":"k","timestamp":1,"value":1}}"#,
            r#"{"partition":"p","event":{"id":"","key":"k","timestamp":1,"value":1}}"#,
            r#"{"partition":"p","event":{"id":"e","key":"k","timestamp":1.0,"value":1}}"#,
            r#"{"partition":"p","event":{"id":"e","key":"k","timestamp":01,"value":1}}"#,
            r#"{"partition":"p","event":{"id":"e","key":"k","timestamp":-0,"value":1}}"#,
            r#"{"partition":"p","event":{"id":"e","key":"k","timestamp":1234567890123456789,"value":1}}"#,
            r#"{"partition":"p","partition":"p","event":{"id":"e","key":"k","timestamp":1,"value":1}}"#,
            r#"{"partition":"p","event":{"id":"e","key":"k","timestamp":1}}"#,
            r#"{"partition":"p","offset":null,"event":{"id":"e","key":"k","timestamp":1,"value":1}}"#,
            r#"{"partition":"p","event":{"id":"e","key":"k","timestamp":1,"value":1}} x"#,
            r#"{"partition":"p","event":{"id":"e","key":"k","timestamp":1,"value":1},}"#,
            "",
            "[]",
        ] {
            assert!(one(text.as_bytes()).is_none(), "{text}");
            assert!(array(text.as_bytes()).is_none(), "{text}");
        }
        // Text that is not UTF-8, in a string or around it.
        for bad in [
            &b"{\"partition\":\"p\xff\",\"event\":{\"id\":\"e\",\"key\":\"k\",\"timestamp\":1,\"value\":1}}"[..],
            &b"{\"partition\":\"p\",\"event\":{\"id\":\"\xc3\",\"key\":\"k\",\"timestamp\":1,\"value\":1}}"[..],
            &b"{\"partition\":\"p\",\"event\":{\"id\":\"e\",\"key\":\"k\",\"timestamp\":1,\"value\":1}}\xff"[..],
        ] {
            assert!(one(bad).is_none());
            assert!(serde_one(bad).is_err());
            assert!(array(&[&b"["[..], bad, &b"]"[..]].concat()).is_none());
        }
    }

    /// Mutations of valid deliveries (a byte or a token inserted, removed
    /// or replaced, thousands of times): whenever the fast path answers,
    /// serde gives the same delivery.
    #[test]
    fn the_fast_path_never_disagrees_with_serde() {
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rand = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut fast = 0;
        for _ in 0..40_000 {
            let mut t = VALID[rand(VALID.len())].as_bytes().to_vec();
            for _ in 0..1 + rand(3) {
                let at = rand(t.len() + 1);
                match rand(3) {
                    0 => {
                        let noise = NOISE[rand(NOISE.len())].as_bytes();
                        t.splice(at..at, noise.iter().copied());
                    }
                    1 if at < t.len() => {
                        t.remove(at);
                    }
                    _ if at < t.len() => t[at] = NOISE[rand(NOISE.len())].as_bytes()[0],
                    _ => {}
                }
            }
            fast += usize::from(one(&t).is_some());
            agrees(&t);
        }
        // the mutations keep some texts valid: the comparison did happen
        assert!(fast > 1_000, "{fast} mutated texts took the fast path");
    }
}
