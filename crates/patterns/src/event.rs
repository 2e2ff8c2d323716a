//! Events: their fields, their compact form, and parsing from exact JSON
//! text.
//!
//! `{"id": "e1", "key": "acct-7", "kind": "login", "time": 1000,
//! "fields": {"ok": false, "amount": 12}}`: `id` non-empty, `key` possibly
//! empty, `kind` non-empty, each at most 256 bytes of UTF-8; `time` a JSON
//! integer in `0..=MAX_EVENT_TIME`; `fields` optional (not `null`), at most
//! 64 entries with unique non-empty names, each an Integer, Double,
//! `{"decimal": "..."}`, String or Bool. Every error names the field.
//!
//! An event is one heap allocation: its strings and fields packed in one
//! shared byte string (a clone costs a reference count; the buffer, the
//! captures and the output share it). Parsing reads each event's text in
//! one pass with no other allocation; any text it does not take on that
//! path (escapes, errors, anything unusual) is read again by the general
//! reader, which decides (so the errors are exactly its errors).

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::value::RawValue;

use crate::value::{DecNum, Decimal, Value, ValueRef};
use crate::MAX_EVENT_TIME;
use streamforge_canonical::strict::{number, Num};
use streamforge_canonical::UniqueMap;

/// Longest `id`, `key` or `kind`, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 256;
/// Most fields of one event.
pub const MAX_FIELDS: usize = 64;

/// One pattern event: its `time` and, in one shared allocation, its `id`,
/// `key`, `kind` and fields (read them with [`Event::id`], [`Event::key`],
/// [`Event::kind`], [`Event::fields`]).
#[derive(Clone, PartialEq, Eq)]
pub struct Event {
    /// `0..=MAX_EVENT_TIME`.
    pub time: i64,
    /// `[id_len, key_len, kind_len, fields]` (u32 LE each), id, key, kind,
    /// then each field: `name_len` (u32), name, a tag and its payload.
    data: Arc<[u8]>,
}

const HEADER: usize = 16;
const TAG_INTEGER: u8 = 0;
const TAG_DOUBLE: u8 = 1;
const TAG_FALSE: u8 = 2;
const TAG_TRUE: u8 = 3;
const TAG_STRING: u8 = 4;
const TAG_DECIMAL: u8 = 5;

impl Default for Event {
    fn default() -> Event {
        Event::new::<&str>("", "", "", 0, &[])
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fields: Vec<(Cow<'_, str>, Value)> = self
            .fields_ref()
            .map(|(n, v)| (String::from_utf8_lossy(n), v.to_value()))
            .collect();
        f.debug_struct("Event")
            .field("id", &self.id())
            .field("key", &self.key())
            .field("kind", &self.kind())
            .field("time", &self.time)
            .field("fields", &fields)
            .finish()
    }
}

/// Reads the packed form (never panics: a short read is the end).
#[derive(Clone)]
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }
    #[inline]
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        // `bytes(N)` gives exactly N bytes: the conversion cannot fail.
        self.bytes(N)?.try_into().ok()
    }
    #[inline]
    fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }
    #[inline]
    fn len(&mut self) -> Option<usize> {
        Some(u32::from_le_bytes(self.array()?) as usize)
    }
    /// One field: its name and value.
    #[inline]
    fn field(&mut self) -> Option<(&'a [u8], ValueRef<'a>)> {
        let n = self.len()?;
        let name = self.bytes(n)?;
        let v = match self.u8()? {
            TAG_INTEGER => ValueRef::Integer(i64::from_le_bytes(self.array()?)),
            TAG_DOUBLE => ValueRef::Double(f64::from_bits(u64::from_le_bytes(self.array()?))),
            TAG_FALSE => ValueRef::Bool(false),
            TAG_TRUE => ValueRef::Bool(true),
            TAG_STRING => {
                let n = self.len()?;
                ValueRef::String(self.bytes(n)?)
            }
            TAG_DECIMAL => {
                let negative = self.u8()? != 0;
                let scale = self.u8()?;
                let mantissa = u128::from_le_bytes(self.array()?);
                let n = self.len()?;
                let text = self.bytes(n)?;
                ValueRef::Decimal(
                    DecNum {
                        negative,
                        mantissa,
                        scale,
                    },
                    text,
                )
            }
            _ => return None,
        };
        Some((name, v))
    }
}

/// The fields of an event, in push order.
pub(crate) struct Fields<'a> {
    r: Reader<'a>,
    left: usize,
}

impl<'a> Iterator for Fields<'a> {
    type Item = (&'a [u8], ValueRef<'a>);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let f = self.r.field();
        if f.is_none() {
            self.left = 0;
        }
        f
    }
}

fn put_len(buf: &mut Vec<u8>, n: usize) {
    // Lengths are bounded by the request body limit, far below 2^32.
    buf.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
}

/// Writes the header and the three names (the field count is set by
/// [`set_count`]).
fn put_names(buf: &mut Vec<u8>, id: &[u8], key: &[u8], kind: &[u8]) {
    buf.clear();
    put_len(buf, id.len());
    put_len(buf, key.len());
    put_len(buf, kind.len());
    put_len(buf, 0);
    buf.extend_from_slice(id);
    buf.extend_from_slice(key);
    buf.extend_from_slice(kind);
}

/// Set in the header's field count when every rule but the time's was
/// checked (the time is a public field: a push checks it always).
const CHECKED: u32 = 1 << 31;

fn set_count(buf: &mut [u8], n: usize, checked: bool) {
    // Field counts are bounded by the document's limits, far below 2^31.
    let n = u32::try_from(n).unwrap_or(u32::MAX) & !CHECKED;
    let word = if checked { n | CHECKED } else { n };
    if let Some(c) = buf.get_mut(12..16) {
        c.copy_from_slice(&word.to_le_bytes());
    }
}

fn put_field(buf: &mut Vec<u8>, name: &[u8], v: ValueRef<'_>) {
    put_len(buf, name.len());
    buf.extend_from_slice(name);
    match v {
        ValueRef::Integer(i) => {
            buf.push(TAG_INTEGER);
            buf.extend_from_slice(&i.to_le_bytes());
        }
        ValueRef::Double(d) => {
            buf.push(TAG_DOUBLE);
            buf.extend_from_slice(&d.to_bits().to_le_bytes());
        }
        ValueRef::Bool(false) => buf.push(TAG_FALSE),
        ValueRef::Bool(true) => buf.push(TAG_TRUE),
        ValueRef::String(s) => {
            buf.push(TAG_STRING);
            put_len(buf, s.len());
            buf.extend_from_slice(s);
        }
        ValueRef::Decimal(n, text) => {
            buf.push(TAG_DECIMAL);
            buf.push(u8::from(n.negative));
            buf.push(n.scale);
            buf.extend_from_slice(&n.mantissa.to_le_bytes());
            put_len(buf, text.len());
            buf.extend_from_slice(text);
        }
    }
}

/// Text held by an event (always valid UTF-8: it was a `&str`).
#[inline]
fn text(b: &[u8]) -> &str {
    // Cut at the boundaries it was written with: cannot fail.
    std::str::from_utf8(b).unwrap_or_default()
}

impl Event {
    /// An event built in code (a push checks its rules: see
    /// [`Event::validate`]).
    pub fn new<N: AsRef<str>>(
        id: &str,
        key: &str,
        kind: &str,
        time: i64,
        fields: &[(N, Value)],
    ) -> Event {
        let mut buf = Vec::with_capacity(HEADER + id.len() + key.len() + kind.len() + 24);
        put_names(&mut buf, id.as_bytes(), key.as_bytes(), kind.as_bytes());
        for (name, v) in fields {
            put_field(&mut buf, name.as_ref().as_bytes(), v.as_ref());
        }
        set_count(&mut buf, fields.len(), false);
        let mut e = Event {
            time,
            data: Arc::from(&buf[..]),
        };
        // checked here, while it is at hand, so that a push need not
        if e.check_parts().is_ok() {
            set_count(&mut buf, fields.len(), true);
            e.data = Arc::from(buf);
        }
        e
    }

    /// The header: the lengths of id, key and kind, the field count and
    /// whether the rules were checked.
    #[inline]
    fn raw_header(&self) -> ([usize; 4], bool) {
        let mut r = Reader {
            b: &self.data,
            at: 0,
        };
        let mut h = [0usize; 4];
        for x in &mut h {
            *x = r.len().unwrap_or(0);
        }
        let checked = h[3] & CHECKED as usize != 0;
        h[3] &= !(CHECKED as usize);
        (h, checked)
    }

    #[inline]
    fn header(&self) -> [usize; 4] {
        self.raw_header().0
    }

    #[inline]
    fn part(&self, from: usize, len: usize) -> &[u8] {
        from.checked_add(len)
            .and_then(|to| self.data.get(from..to))
            .unwrap_or_default()
    }

    /// The id.
    pub fn id(&self) -> &str {
        text(self.id_bytes())
    }

    /// The key.
    pub fn key(&self) -> &str {
        text(self.key_bytes())
    }

    /// The kind.
    pub fn kind(&self) -> &str {
        text(self.kind_bytes())
    }

    #[inline]
    pub(crate) fn id_bytes(&self) -> &[u8] {
        let [id, ..] = self.header();
        self.part(HEADER, id)
    }

    #[inline]
    pub(crate) fn key_bytes(&self) -> &[u8] {
        let [id, key, ..] = self.header();
        self.part(HEADER + id, key)
    }

    #[inline]
    pub(crate) fn kind_bytes(&self) -> &[u8] {
        let [id, key, kind, _] = self.header();
        self.part(HEADER + id + key, kind)
    }

    /// How many fields.
    pub fn field_count(&self) -> usize {
        self.header()[3]
    }

    /// The fields, in push order (names and values copied out).
    pub fn fields(&self) -> impl Iterator<Item = (String, Value)> + '_ {
        self.fields_ref()
            .map(|(n, v)| (text(n).to_string(), v.to_value()))
    }

    /// A field's value, copied out.
    pub fn field(&self, name: &str) -> Option<Value> {
        self.field_ref(name.as_bytes()).map(ValueRef::to_value)
    }

    /// The fields, borrowed.
    #[inline]
    pub(crate) fn fields_ref(&self) -> Fields<'_> {
        let [id, key, kind, n] = self.header();
        Fields {
            r: Reader {
                b: &self.data,
                at: HEADER + id + key + kind,
            },
            left: n,
        }
    }

    /// A field by name, borrowed.
    #[inline]
    pub(crate) fn field_ref(&self, name: &[u8]) -> Option<ValueRef<'_>> {
        self.fields_ref().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Bytes of the shared allocation (for heap estimates).
    pub(crate) fn heap_bytes(&self) -> usize {
        16 + self.data.len()
    }

    /// The shared allocation's address (to count it once).
    pub(crate) fn ptr(&self) -> usize {
        self.data.as_ptr() as usize
    }

    /// Checks every rule of an event built in code (parsing checks them as
    /// it reads). The error names the field.
    #[inline]
    pub fn validate(&self) -> Result<(), String> {
        if self.raw_header().1 {
            return check_time(self.time);
        }
        self.check_all()
    }

    #[cold]
    fn check_all(&self) -> Result<(), String> {
        check_name("id", self.id_bytes(), false)?;
        check_name("key", self.key_bytes(), true)?;
        check_name("kind", self.kind_bytes(), false)?;
        check_time(self.time)?;
        self.check_fields()
    }

    /// Every rule but the time's.
    fn check_parts(&self) -> Result<(), String> {
        check_name("id", self.id_bytes(), false)?;
        check_name("key", self.key_bytes(), true)?;
        check_name("kind", self.kind_bytes(), false)?;
        self.check_fields()
    }

    fn check_fields(&self) -> Result<(), String> {
        let n = self.field_count();
        if n > MAX_FIELDS {
            return Err(format!(
                "fields: {n} fields, at most {MAX_FIELDS} are allowed"
            ));
        }
        for (i, (name, _)) in self.fields_ref().enumerate() {
            if name.is_empty() {
                return Err("fields: a field name is empty".into());
            }
            if self.fields_ref().take(i).any(|(n, _)| n == name) {
                return Err(format!("fields.{}: duplicate field name", text(name)));
            }
        }
        Ok(())
    }
}

fn check_name(field: &str, s: &[u8], may_be_empty: bool) -> Result<(), String> {
    if s.is_empty() && !may_be_empty {
        return Err(format!("{field}: must not be empty"));
    }
    if s.len() > MAX_NAME_BYTES {
        return Err(format!(
            "{field}: {} bytes, at most {MAX_NAME_BYTES} are allowed",
            s.len()
        ));
    }
    Ok(())
}

fn check_time(time: i64) -> Result<(), String> {
    if !(0..=MAX_EVENT_TIME).contains(&time) {
        return Err(format!("time: {time} is outside 0..={MAX_EVENT_TIME}"));
    }
    Ok(())
}

fn string_of(field: &str, raw: &RawValue) -> Result<String, String> {
    if !raw.get().starts_with('"') {
        return Err(format!("{field}: must be a string"));
    }
    serde_json::from_str(raw.get()).map_err(|e| format!("{field}: {e}"))
}

/// Parses one field value. `what` names it in errors (`fields.amount`).
pub fn parse_value(what: &str, raw: &RawValue) -> Result<Value, String> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => string_of(what, raw).map(Value::String),
        Some(b't') => Ok(Value::Bool(true)),
        Some(b'f') => Ok(Value::Bool(false)),
        Some(b'n') => Err(format!("{what}: null is not a field value")),
        Some(b'[') => Err(format!("{what}: an array is not a field value")),
        Some(b'{') => {
            let map: UniqueMap<&RawValue> =
                serde_json::from_str(text).map_err(|e| format!("{what}: {e}"))?;
            match map.0.as_slice() {
                [(k, v)] if k == "decimal" => {
                    let s = string_of(&format!("{what}.decimal"), v)?;
                    Decimal::parse(&s)
                        .map(Value::Decimal)
                        .map_err(|e| format!("{what}.decimal: {e}"))
                }
                _ => Err(format!(
                    "{what}: an object value must be exactly {{\"decimal\": \"...\"}}"
                )),
            }
        }
        Some(_) => match number(text) {
            Ok(Num::Integer(i)) => Ok(Value::Integer(i)),
            Ok(Num::Double(d)) => Ok(Value::Double(d)),
            Err(e) => Err(format!("{what}: {e}")),
        },
        None => Err(format!("{what}: missing value")),
    }
}

/// Parses one event object from its exact JSON text.
pub fn parse_event(json: &[u8]) -> Result<Event, String> {
    EventParser::default().parse(json)
}

/// Parses events one after another, reusing its buffers: each event costs
/// one allocation (its own).
#[derive(Debug, Default)]
pub struct EventParser {
    buf: Vec<u8>,
    fields: Vec<(usize, usize, Scalar)>,
}

/// A field value found by the one-pass reader (strings as spans of the text).
#[derive(Debug, Clone, Copy)]
enum Scalar {
    Integer(i64),
    Double(f64),
    Bool(bool),
    String(usize, usize),
    Decimal(DecNum, usize, usize),
}

impl EventParser {
    /// Parses one event object from its exact JSON text.
    pub fn parse(&mut self, json: &[u8]) -> Result<Event, String> {
        if let Some(e) = self.fast(json) {
            return Ok(e);
        }
        parse_general(json)
    }

    /// The one-pass reader: an event whose text it fully understands
    /// (plain strings without escapes, numbers, booleans, decimals; no
    /// duplicate or unknown keys; every rule met), or `None` to leave it to
    /// the general reader. It never accepts what the general reader refuses.
    fn fast(&mut self, json: &[u8]) -> Option<Event> {
        // Here and below, `.ok()?` means "leave it to the general reader",
        // which reports every error.
        std::str::from_utf8(json).ok()?;
        let mut s = Scan { b: json, at: 0 };
        let (mut id, mut key, mut kind, mut time) = (None, None, None, None);
        let mut seen_fields = false;
        self.fields.clear();
        s.ws();
        s.eat(b'{')?;
        s.ws();
        if s.peek()? == b'}' {
            return None;
        }
        loop {
            let (a, b) = s.string()?;
            s.ws();
            s.eat(b':')?;
            s.ws();
            match &json[a..b] {
                b"id" if id.is_none() => id = Some(s.string()?),
                b"key" if key.is_none() => key = Some(s.string()?),
                b"kind" if kind.is_none() => kind = Some(s.string()?),
                b"time" if time.is_none() => {
                    let (a, b) = s.number()?;
                    match number(text(&json[a..b])).ok()? {
                        Num::Integer(t) if (0..=MAX_EVENT_TIME).contains(&t) => time = Some(t),
                        _ => return None,
                    }
                }
                b"fields" if !seen_fields => {
                    seen_fields = true;
                    self.fields_object(&mut s)?;
                }
                _ => return None,
            }
            s.ws();
            match s.next()? {
                b',' => s.ws(),
                b'}' => break,
                _ => return None,
            }
        }
        s.ws();
        if s.at != json.len() {
            return None;
        }
        let (id, key, kind, time) = (id?, key?, kind?, time?);
        let span = |(a, b): (usize, usize)| &json[a..b];
        let (id, key, kind) = (span(id), span(key), span(kind));
        if check_name("id", id, false).is_err()
            || check_name("key", key, true).is_err()
            || check_name("kind", kind, false).is_err()
        {
            return None;
        }
        let buf = &mut self.buf;
        put_names(buf, id, key, kind);
        for &(a, b, v) in &self.fields {
            let v = match v {
                Scalar::Integer(i) => ValueRef::Integer(i),
                Scalar::Double(d) => ValueRef::Double(d),
                Scalar::Bool(x) => ValueRef::Bool(x),
                Scalar::String(a, b) => ValueRef::String(&json[a..b]),
                Scalar::Decimal(n, a, b) => ValueRef::Decimal(n, &json[a..b]),
            };
            put_field(buf, &json[a..b], v);
        }
        set_count(buf, self.fields.len(), true);
        Some(Event {
            time,
            data: Arc::from(&buf[..]),
        })
    }

    /// `{"name": value, ...}` of `fields`, into `self.fields`.
    fn fields_object(&mut self, s: &mut Scan<'_>) -> Option<()> {
        s.eat(b'{')?;
        s.ws();
        if s.peek()? == b'}' {
            s.at += 1;
            return Some(());
        }
        loop {
            let (a, b) = s.string()?;
            let name = &s.b[a..b];
            if name.is_empty()
                || self.fields.len() >= MAX_FIELDS
                || self.fields.iter().any(|&(x, y, _)| &s.b[x..y] == name)
            {
                return None;
            }
            s.ws();
            s.eat(b':')?;
            s.ws();
            let v = match s.peek()? {
                b'"' => {
                    let (x, y) = s.string()?;
                    Scalar::String(x, y)
                }
                b't' => {
                    s.literal(b"true")?;
                    Scalar::Bool(true)
                }
                b'f' => {
                    s.literal(b"false")?;
                    Scalar::Bool(false)
                }
                b'{' => {
                    s.at += 1;
                    s.ws();
                    let (x, y) = s.string()?;
                    if &s.b[x..y] != b"decimal" {
                        return None;
                    }
                    s.ws();
                    s.eat(b':')?;
                    s.ws();
                    let (x, y) = s.string()?;
                    s.ws();
                    s.eat(b'}')?;
                    let n = DecNum::parse(text(&s.b[x..y])).ok()?;
                    Scalar::Decimal(n, x, y)
                }
                _ => {
                    let (x, y) = s.number()?;
                    match number(text(&s.b[x..y])).ok()? {
                        Num::Integer(i) => Scalar::Integer(i),
                        Num::Double(d) => Scalar::Double(d),
                    }
                }
            };
            self.fields.push((a, b, v));
            s.ws();
            match s.next()? {
                b',' => s.ws(),
                b'}' => return Some(()),
                _ => return None,
            }
        }
    }
}

/// A cursor over JSON text for the one-pass reader.
struct Scan<'a> {
    b: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }
    #[inline]
    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.at += 1;
        Some(c)
    }
    #[inline]
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }
    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at.checked_add(word.len())?;
        (self.b.get(self.at..end)? == word).then_some(())?;
        self.at = end;
        Some(())
    }
    /// A string without escapes or control characters: the span of its
    /// contents.
    #[inline]
    fn string(&mut self) -> Option<(usize, usize)> {
        self.eat(b'"')?;
        let start = self.at;
        loop {
            match self.next()? {
                b'"' => return Some((start, self.at - 1)),
                b'\\' | 0x00..=0x1f => return None,
                _ => {}
            }
        }
    }
    /// A number token exactly as JSON spells it: its span.
    fn number(&mut self) -> Option<(usize, usize)> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.digit()?;
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            self.digit()?;
            self.digits();
        }
        Some((start, self.at))
    }
    fn digit(&mut self) -> Option<()> {
        self.next()?.is_ascii_digit().then_some(())
    }
    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
    }
}

/// The general reader: every event and every error.
fn parse_general(json: &[u8]) -> Result<Event, String> {
    let top: UniqueMap<&RawValue> = serde_json::from_slice(json).map_err(|e| {
        if e.is_data() {
            format!("an event must be a JSON object with unique keys: {e}")
        } else {
            format!("malformed JSON: {e}")
        }
    })?;
    let (mut id, mut key, mut kind, mut time, mut fields) = (None, None, None, None, Vec::new());
    for (name, raw) in top.0 {
        match name.as_str() {
            "id" => id = Some(string_of("id", raw)?),
            "key" => key = Some(string_of("key", raw)?),
            "kind" => kind = Some(string_of("kind", raw)?),
            "time" => {
                let t = match raw.get().as_bytes().first() {
                    Some(b'-' | b'0'..=b'9') => {
                        number(raw.get()).map_err(|e| format!("time: {e}"))?
                    }
                    _ => return Err("time: must be an integer".into()),
                };
                match t {
                    Num::Integer(t) => {
                        check_time(t)?;
                        time = Some(t);
                    }
                    Num::Double(_) => return Err(format!("time: {} is not an integer", raw.get())),
                }
            }
            "fields" => {
                if !raw.get().starts_with('{') {
                    return Err("fields: must be an object".into());
                }
                let map: UniqueMap<&RawValue> =
                    serde_json::from_str(raw.get()).map_err(|e| format!("fields: {e}"))?;
                if map.0.len() > MAX_FIELDS {
                    return Err(format!(
                        "fields: {} fields, at most {MAX_FIELDS} are allowed",
                        map.0.len()
                    ));
                }
                fields = Vec::with_capacity(map.0.len());
                for (fname, fraw) in map.0 {
                    if fname.is_empty() {
                        return Err("fields: a field name is empty".into());
                    }
                    let v = parse_value(&format!("fields.{fname}"), fraw)?;
                    fields.push((fname, v));
                }
            }
            other => return Err(format!("unknown field {other:?}")),
        }
    }
    let missing = |f: &str| format!("{f}: missing");
    let id = id.ok_or_else(|| missing("id"))?;
    let key = key.ok_or_else(|| missing("key"))?;
    let kind = kind.ok_or_else(|| missing("kind"))?;
    let time = time.ok_or_else(|| missing("time"))?;
    check_name("id", id.as_bytes(), false)?;
    check_name("key", key.as_bytes(), true)?;
    check_name("kind", kind.as_bytes(), false)?;
    Ok(Event::new(&id, &key, &kind, time, &fields))
}

#[cfg(test)]
mod tests;
