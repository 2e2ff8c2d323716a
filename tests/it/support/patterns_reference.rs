//! A deliberately naive reference model of the pattern-detection contract.
//!
//! It is written from the contract's words alone and shares no code with the
//! engine in `streamforge::patterns`. Nothing is indexed and nothing is
//! incremental:
//!
//! - the patterns stay the JSON values they were given (sorted by name) and
//!   every condition is evaluated by walking that JSON on every call;
//! - every live branch of every pattern and key sits in one `Vec`, every
//!   absence wait in another; start times, deadlines, keys and first/last
//!   captures are recomputed from the capture ordinals whenever needed;
//! - an advance runs on a clone of the whole model, and the clone is dropped
//!   if a limit fails, so a failed advance cannot leave anything behind.
//!
//! The processing order it implements, for an advance to `W`:
//!
//! ```text
//! for each distinct time t of the taken events, ascending:
//!     expire every deadline d < t            (ascending d)
//!     for each event e at t, by ordinal:
//!         for each pattern P, by name:   observe(P, e)
//! expire every deadline d <= W               (ascending d)
//! ```
//!
//! Outputs are returned as the exact JSON text of one output record (fields
//! in the contract's order, captures in stage order, captured fields in the
//! order pushed), because a `serde_json::Value` sorts object keys and treats
//! `-0.0` and `0.0` as equal, and both matter on the wire.

#![allow(dead_code)]

use std::cmp::Ordering;
use std::fmt::Write as _;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

/// Largest event time.
pub const MAX_EVENT_TIME: i64 = 9_007_199_254_740_991;
/// Largest `within`.
pub const MAX_WINDOW: i64 = 31_536_000_000;
/// The watermark of `finish`.
pub const FINAL_WATERMARK: i64 = MAX_EVENT_TIME + MAX_WINDOW;

// ----------------------------------------------------------------------
// Values and events

/// One scalar of an event field or of a condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Int(i64),
    Dbl(f64),
    /// The decimal string exactly as written.
    Dec(String),
    Str(String),
    Bool(bool),
}

/// One pushed event with its ordinal.
#[derive(Debug, Clone, PartialEq)]
pub struct Ev {
    pub ordinal: u64,
    pub id: String,
    pub key: String,
    pub kind: String,
    pub time: i64,
    /// In the order pushed.
    pub fields: Vec<(String, Val)>,
}

impl Ev {
    fn field(&self, name: &str) -> Option<&Val> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

/// An event without its ordinal (what a push carries).
#[derive(Debug, Clone, PartialEq)]
pub struct NewEv {
    pub id: String,
    pub key: String,
    pub kind: String,
    pub time: i64,
    pub fields: Vec<(String, Val)>,
}

fn decimal_ok(s: &str) -> bool {
    let body = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = match body.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (body, None),
    };
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) {
        return false;
    }
    if let Some(f) = frac {
        if !digits(f) {
            return false;
        }
    }
    let n = int.len() + frac.map_or(0, str::len);
    n <= 38
}

/// Reads a scalar from a JSON value (a document's `value`, or an event field
/// given as a `Value`). A `Value` cannot tell `-0` from `-0.0` nor hold an
/// integer beyond `u64`, so the exact-text path is [`parse_event_text`].
pub fn scalar_from_value(v: &Value) -> Result<Val, String> {
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(Val::Int(i))
            } else if n.is_u64() {
                Err(format!("integer {n} is outside the i64 range"))
            } else {
                let f = n.as_f64().unwrap();
                if f.is_finite() {
                    Ok(Val::Dbl(f))
                } else {
                    Err("number is not finite".into())
                }
            }
        }
        Value::String(s) => Ok(Val::Str(s.clone())),
        Value::Bool(b) => Ok(Val::Bool(*b)),
        Value::Object(m) => {
            if m.len() == 1 {
                if let Some(Value::String(s)) = m.get("decimal") {
                    if decimal_ok(s) {
                        return Ok(Val::Dec(s.clone()));
                    }
                    return Err(format!("bad decimal {s:?}"));
                }
            }
            Err("an object value must be {\"decimal\": \"...\"}".into())
        }
        Value::Null => Err("null is not a field value".into()),
        Value::Array(_) => Err("an array is not a field value".into()),
    }
}

fn check_strings(id: &str, key: &str, kind: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("id: empty".into());
    }
    if id.len() > 256 {
        return Err("id: over 256 bytes".into());
    }
    if key.len() > 256 {
        return Err("key: over 256 bytes".into());
    }
    if kind.is_empty() {
        return Err("kind: empty".into());
    }
    if kind.len() > 256 {
        return Err("kind: over 256 bytes".into());
    }
    Ok(())
}

fn check_fields(fields: &[(String, Val)]) -> Result<(), String> {
    if fields.len() > 64 {
        return Err("fields: more than 64".into());
    }
    for (i, (n, _)) in fields.iter().enumerate() {
        if n.is_empty() {
            return Err("fields: empty name".into());
        }
        if fields[..i].iter().any(|(m, _)| m == n) {
            return Err(format!("fields.{n}: repeated"));
        }
    }
    Ok(())
}

/// An event from a `serde_json::Value` (the differential test builds events
/// this way; their text form never holds `-0` or integers beyond i64).
pub fn event_from_value(v: &Value) -> Result<NewEv, String> {
    let m = v.as_object().ok_or("not an object")?;
    for k in m.keys() {
        if !["id", "key", "kind", "time", "fields"].contains(&k.as_str()) {
            return Err(format!("unknown field {k}"));
        }
    }
    let s = |name: &str| -> Result<String, String> {
        m.get(name)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or(format!("{name}: not a string"))
    };
    let (id, key, kind) = (s("id")?, s("key")?, s("kind")?);
    check_strings(&id, &key, &kind)?;
    let time = m
        .get("time")
        .and_then(Value::as_i64)
        .ok_or("time: not an integer")?;
    if !(0..=MAX_EVENT_TIME).contains(&time) {
        return Err("time: out of range".into());
    }
    let mut fields = Vec::new();
    if let Some(f) = m.get("fields") {
        let f = f.as_object().ok_or("fields: not an object")?;
        for (n, v) in f {
            fields.push((n.clone(), scalar_from_value(v)?));
        }
    }
    check_fields(&fields)?;
    Ok(NewEv {
        id,
        key,
        kind,
        time,
        fields,
    })
}

/// An object's entries in the order written, values as raw JSON text.
struct Entries(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entries, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    out.push((k, v));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn is_number_token(t: &str) -> bool {
    t.starts_with('-') || t.starts_with(|c: char| c.is_ascii_digit())
}

fn integer_token(t: &str) -> Result<i64, String> {
    if t.contains(['.', 'e', 'E']) {
        return Err(format!("{t} is not an integer"));
    }
    t.parse::<i64>()
        .map_err(|_| format!("integer {t} is outside the i64 range"))
}

fn scalar_from_text(t: &str) -> Result<Val, String> {
    let t = t.trim();
    if is_number_token(t) {
        if t.contains(['.', 'e', 'E']) {
            let f: f64 = t.parse().map_err(|_| format!("bad number {t}"))?;
            if !f.is_finite() {
                return Err(format!("{t} is not finite"));
            }
            return Ok(Val::Dbl(f));
        }
        return Ok(Val::Int(integer_token(t)?));
    }
    match t.as_bytes()[0] {
        b'"' => Ok(Val::Str(
            serde_json::from_str(t).map_err(|e| e.to_string())?,
        )),
        b't' => Ok(Val::Bool(true)),
        b'f' => Ok(Val::Bool(false)),
        b'{' => {
            let e: Entries = serde_json::from_str(t).map_err(|e| e.to_string())?;
            if e.0.len() != 1 || e.0[0].0 != "decimal" {
                return Err("an object value must be {\"decimal\": \"...\"}".into());
            }
            let s: String = serde_json::from_str(e.0[0].1.get())
                .map_err(|_| "decimal: not a string".to_string())?;
            if !decimal_ok(&s) {
                return Err(format!("bad decimal {s:?}"));
            }
            Ok(Val::Dec(s))
        }
        _ => Err(format!("{t} is not a field value")),
    }
}

/// Parses one event from its exact JSON text, reading number tokens the way
/// the contract says: no fraction and no exponent is an Integer (and must fit
/// i64), anything else a correctly rounded finite Double.
pub fn parse_event_text(text: &[u8]) -> Result<NewEv, String> {
    let e: Entries = serde_json::from_slice(text).map_err(|e| e.to_string())?;
    let (mut id, mut key, mut kind, mut time, mut fields) = (None, None, None, None, None);
    for (k, v) in &e.0 {
        let slot_taken = match k.as_str() {
            "id" => id.replace(v.get()).is_some(),
            "key" => key.replace(v.get()).is_some(),
            "kind" => kind.replace(v.get()).is_some(),
            "time" => time.replace(v.get()).is_some(),
            "fields" => fields.replace(v.get()).is_some(),
            other => return Err(format!("unknown field {other}")),
        };
        if slot_taken {
            return Err(format!("{k}: repeated"));
        }
    }
    let s = |name: &str, t: Option<&str>| -> Result<String, String> {
        serde_json::from_str::<String>(t.ok_or(format!("{name}: missing"))?)
            .map_err(|_| format!("{name}: not a string"))
    };
    let (id, key, kind) = (s("id", id)?, s("key", key)?, s("kind", kind)?);
    check_strings(&id, &key, &kind)?;
    let t = time.ok_or("time: missing")?.trim();
    if !is_number_token(t) {
        return Err("time: not an integer".into());
    }
    let time = integer_token(t)?;
    if !(0..=MAX_EVENT_TIME).contains(&time) {
        return Err("time: out of range".into());
    }
    let mut fs = Vec::new();
    if let Some(f) = fields {
        let entries: Entries =
            serde_json::from_str(f).map_err(|_| "fields: not an object".to_string())?;
        for (n, v) in entries.0 {
            let val = scalar_from_text(v.get()).map_err(|m| format!("fields.{n}: {m}"))?;
            fs.push((n, val));
        }
    }
    check_fields(&fs)?;
    Ok(NewEv {
        id,
        key,
        kind,
        time,
        fields: fs,
    })
}

// ----------------------------------------------------------------------
// Comparison

/// `(negative, integer digits without leading zeros, fraction digits without
/// trailing zeros)`; zero is never negative.
fn decimal_parts(s: &str) -> (bool, String, String) {
    let neg = s.starts_with('-');
    let body = s.trim_start_matches('-');
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let int = int.trim_start_matches('0').to_string();
    let frac = frac.trim_end_matches('0').to_string();
    let zero = int.is_empty() && frac.is_empty();
    (neg && !zero, int, frac)
}

fn decimal_cmp(a: &str, b: &str) -> Ordering {
    let (an, ai, af) = decimal_parts(a);
    let (bn, bi, bf) = decimal_parts(b);
    if an != bn {
        return if an {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    let magnitude = ai
        .len()
        .cmp(&bi.len())
        .then_with(|| ai.cmp(&bi))
        .then_with(|| af.cmp(&bf));
    if an {
        magnitude.reverse()
    } else {
        magnitude
    }
}

/// The contract's comparison: anything missing, or two different types,
/// is false for every op (`ne` included).
pub fn compare(a: Option<&Val>, op: &str, b: Option<&Val>) -> bool {
    let (Some(a), Some(b)) = (a, b) else {
        return false;
    };
    let ord = match (a, b) {
        (Val::Int(x), Val::Int(y)) => x.cmp(y),
        (Val::Dbl(x), Val::Dbl(y)) => x.partial_cmp(y).expect("finite doubles"),
        (Val::Dec(x), Val::Dec(y)) => decimal_cmp(x, y),
        (Val::Str(x), Val::Str(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Val::Bool(x), Val::Bool(y)) => {
            return match op {
                "eq" => x == y,
                "ne" => x != y,
                _ => false,
            }
        }
        _ => return false,
    };
    match op {
        "eq" => ord == Ordering::Equal,
        "ne" => ord != Ordering::Equal,
        "lt" => ord == Ordering::Less,
        "le" => ord != Ordering::Greater,
        "gt" => ord == Ordering::Greater,
        "ge" => ord != Ordering::Less,
        other => panic!("unknown op {other}"),
    }
}

// ----------------------------------------------------------------------
// The model

/// Captures: for each stage, the ordinals it captured, in order.
pub type Caps = Vec<Vec<u64>>;

/// Whether a skip policy's selection removes the captures given.
type Removes = dyn Fn(&Model, &Caps) -> bool;

#[derive(Debug, Clone, PartialEq)]
struct Branch {
    pattern: usize,
    /// The stage it waits for (to enter it or to repeat it).
    stage: usize,
    caps: Caps,
}

#[derive(Debug, Clone, PartialEq)]
struct Wait {
    pattern: usize,
    caps: Caps,
}

/// Answer to a successful push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushOk {
    pub first: u64,
    pub last: u64,
    pub buffered: u64,
}

/// Answer to a successful advance or finish.
#[derive(Debug, Clone, PartialEq)]
pub struct AdvanceOk {
    /// Each record as its exact JSON text.
    pub output: Vec<String>,
    pub watermark: i64,
    pub processed: u64,
}

impl AdvanceOk {
    /// The records as JSON values. Lossy: a value sorts object keys and
    /// compares `-0.0` equal to `0.0`, so exact comparisons use `output`.
    pub fn output_values(&self) -> Vec<Value> {
        self.output
            .iter()
            .map(|o| serde_json::from_str(o).expect("valid JSON"))
            .collect()
    }
}

/// `(keys, branches, waits)` of one pattern.
pub type PatternCounts = (u64, u64, u64);

/// The status of the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub watermark: i64,
    pub buffered: u64,
    pub next_ordinal: u64,
    pub sequence: u64,
    /// By pattern name.
    pub patterns: Vec<(String, PatternCounts)>,
}

/// The naive model. See the module documentation.
#[derive(Debug, Clone)]
pub struct Model {
    /// The pattern objects, sorted by name, exactly as given.
    patterns: Vec<Value>,
    max_results: u64,
    active_states: u64,
    watermark: i64,
    next_ordinal: u64,
    /// Every event ever pushed; `events[o - 1]` has ordinal `o`.
    events: Vec<Ev>,
    /// Ordinals of the buffered events.
    buffer: Vec<u64>,
    branches: Vec<Branch>,
    waits: Vec<Wait>,
    sequence: u64,
    /// Matches emitted by the advance in progress (the clone's count).
    matches_this_advance: u64,
    /// Output of the advance in progress.
    out: Vec<String>,
}

impl Model {
    /// A model of a valid document `{"patterns": [...], "limits": {...}}`.
    pub fn new(doc: &Value) -> Model {
        let mut patterns = doc["patterns"].as_array().expect("patterns").clone();
        patterns.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        let limit = |name: &str| doc["limits"][name].as_u64().unwrap_or(10_000);
        Model {
            patterns,
            max_results: limit("max_results_per_advance"),
            active_states: limit("active_states"),
            watermark: -1,
            next_ordinal: 1,
            events: Vec::new(),
            buffer: Vec::new(),
            branches: Vec::new(),
            waits: Vec::new(),
            sequence: 0,
            matches_this_advance: 0,
            out: Vec::new(),
        }
    }

    // ---- document accessors (defaults applied here, every time) ----

    fn name(&self, p: usize) -> &str {
        self.patterns[p]["name"].as_str().unwrap()
    }
    fn within(&self, p: usize) -> i64 {
        self.patterns[p]["within"].as_i64().unwrap()
    }
    fn skip(&self, p: usize) -> &str {
        self.patterns[p]["skip"].as_str().unwrap_or("no_skip")
    }
    fn stages(&self, p: usize) -> &Vec<Value> {
        self.patterns[p]["stages"].as_array().unwrap()
    }
    fn min(&self, p: usize, s: usize) -> usize {
        self.stages(p)[s]["min"].as_u64().unwrap_or(1) as usize
    }
    fn max(&self, p: usize, s: usize) -> usize {
        self.stages(p)[s]["max"].as_u64().unwrap_or(1) as usize
    }
    fn contiguity(&self, p: usize, s: usize) -> &str {
        self.stages(p)[s]["contiguity"]
            .as_str()
            .unwrap_or("skip_next")
    }
    fn where_(&self, p: usize, s: usize) -> &Value {
        &self.stages(p)[s]["where"]
    }
    fn forbidden(&self, p: usize, s: usize) -> Option<&Value> {
        self.stages(p)[s].get("forbidden")
    }
    fn absence(&self, p: usize) -> Option<&Value> {
        self.patterns[p].get("absence")
    }
    fn stage_index(&self, p: usize, name: &str) -> usize {
        self.stages(p)
            .iter()
            .position(|s| s["name"].as_str() == Some(name))
            .expect("a validated document names existing stages")
    }

    // ---- values derived from captures, recomputed on every use ----

    fn ev(&self, ordinal: u64) -> &Ev {
        &self.events[(ordinal - 1) as usize]
    }
    /// Ordinal of the first capture (stage order, then capture order).
    fn first_ordinal(caps: &Caps) -> u64 {
        *caps.iter().flatten().next().expect("non-empty captures")
    }
    /// Ordinal of the last capture (stage order, then capture order): the
    /// latest one in processing order, since successors only see later events.
    fn last_ordinal(caps: &Caps) -> u64 {
        *caps.iter().flatten().last().expect("non-empty captures")
    }
    fn key_of(&self, caps: &Caps) -> &str {
        &self.ev(Self::first_ordinal(caps)).key
    }
    fn start_time(&self, caps: &Caps) -> i64 {
        self.ev(Self::first_ordinal(caps)).time
    }
    fn deadline(&self, p: usize, caps: &Caps) -> i64 {
        self.start_time(caps) + self.within(p)
    }
    /// `(time, ordinal)`: the position of an event in processing order.
    fn position(&self, ordinal: u64) -> (i64, u64) {
        (self.ev(ordinal).time, ordinal)
    }
    fn complete(&self, p: usize, caps: &Caps) -> bool {
        (0..caps.len()).all(|j| caps[j].len() >= self.min(p, j))
    }
    /// The selection order: start time, first ordinal, the counts in stage
    /// order, all ordinals in stage order.
    fn order_key(&self, caps: &Caps) -> (i64, u64, Vec<usize>, Vec<u64>) {
        (
            self.start_time(caps),
            Self::first_ordinal(caps),
            caps.iter().map(Vec::len).collect(),
            caps.iter().flatten().copied().collect(),
        )
    }

    // ---- conditions, evaluated straight from the JSON ----

    fn eval(&self, p: usize, cond: &Value, e: &Ev, caps: &Caps) -> bool {
        let c = cond.as_object().expect("a condition is an object");
        if let Some(list) = c.get("all") {
            return list
                .as_array()
                .unwrap()
                .iter()
                .all(|x| self.eval(p, x, e, caps));
        }
        if let Some(list) = c.get("any") {
            return list
                .as_array()
                .unwrap()
                .iter()
                .any(|x| self.eval(p, x, e, caps));
        }
        if let Some(x) = c.get("not") {
            return !self.eval(p, x, e, caps);
        }
        if let Some(k) = c.get("kind") {
            return e.kind == k.as_str().unwrap();
        }
        let field = c["field"].as_str().unwrap();
        let op = c["op"].as_str().unwrap();
        let mine = e.field(field);
        if let Some(v) = c.get("value") {
            let v = scalar_from_value(v).expect("a validated scalar");
            return compare(mine, op, Some(&v));
        }
        let stage = self.stage_index(p, c["capture"].as_str().unwrap());
        let other_field = c["capture_field"].as_str().unwrap();
        let theirs = caps[stage]
            .last()
            .and_then(|&o| self.ev(o).field(other_field));
        compare(mine, op, theirs)
    }

    // ---- successors ----

    /// The successors of capturing `e` into stage `i` of `caps`: branches,
    /// and complete positive sequences (candidates).
    fn successors(&self, p: usize, caps: &Caps, i: usize, e: u64) -> (Vec<Branch>, Vec<Caps>) {
        let n = self.stages(p).len();
        let mut caps = caps.clone();
        caps[i].push(e);
        let c = caps[i].len();
        let mut branches = Vec::new();
        let mut candidates = Vec::new();
        if c < self.max(p, i) {
            branches.push(Branch {
                pattern: p,
                stage: i,
                caps: caps.clone(),
            });
        }
        if c >= self.min(p, i) {
            for j in i + 1..n {
                if (i + 1..j).all(|m| self.min(p, m) == 0) {
                    branches.push(Branch {
                        pattern: p,
                        stage: j,
                        caps: caps.clone(),
                    });
                }
            }
            if (i + 1..n).all(|m| self.min(p, m) == 0) {
                candidates.push(caps);
            }
        }
        (branches, candidates)
    }

    // ---- output ----

    fn render_val(v: &Val, out: &mut String) {
        match v {
            Val::Int(i) => write!(out, "{i}").unwrap(),
            Val::Dbl(f) => out.push_str(&serde_json::to_string(f).unwrap()),
            Val::Dec(s) => write!(out, "{{\"decimal\":{}}}", json_str(s)).unwrap(),
            Val::Str(s) => out.push_str(&json_str(s)),
            Val::Bool(b) => write!(out, "{b}").unwrap(),
        }
    }

    fn render_event(&self, o: u64, out: &mut String) {
        let e = self.ev(o);
        write!(
            out,
            "{{\"ordinal\":{},\"id\":{},\"key\":{},\"kind\":{},\"time\":{},\"fields\":{{",
            e.ordinal,
            json_str(&e.id),
            json_str(&e.key),
            json_str(&e.kind),
            e.time
        )
        .unwrap();
        for (i, (n, v)) in e.fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&json_str(n));
            out.push(':');
            Self::render_val(v, out);
        }
        out.push_str("}}");
    }

    /// Appends one output record with the next sequence number.
    fn emit(&mut self, p: usize, kind: &str, caps: &Caps, end_time: i64) {
        self.sequence += 1;
        let id = format!(
            "{}:{}",
            self.name(p),
            caps.iter()
                .map(|s| s.iter().map(u64::to_string).collect::<Vec<_>>().join("."))
                .collect::<Vec<_>>()
                .join("/")
        );
        let mut out = String::new();
        write!(
            out,
            "{{\"seq\":{},\"type\":\"{kind}\",\"id\":{},\"pattern\":{},\"key\":{},\
             \"start_time\":{},\"end_time\":{end_time},\"last_event_time\":{},\
             \"deadline\":{},\"captures\":{{",
            self.sequence,
            json_str(&id),
            json_str(self.name(p)),
            json_str(self.key_of(caps)),
            self.start_time(caps),
            self.ev(Self::last_ordinal(caps)).time,
            self.deadline(p, caps),
        )
        .unwrap();
        for (s, stage) in self.stages(p).iter().enumerate() {
            if s > 0 {
                out.push(',');
            }
            out.push_str(&json_str(stage["name"].as_str().unwrap()));
            out.push_str(":[");
            for (i, &o) in caps[s].iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                self.render_event(o, &mut out);
            }
            out.push(']');
        }
        out.push_str("}}");
        self.out.push(out);
    }

    // ---- selection ----

    /// Selection over one group of candidates of (p, key). `end_time` is the
    /// completing event's time, or `None` for the deadline (absence).
    fn select(
        &mut self,
        p: usize,
        key: &str,
        mut cands: Vec<Caps>,
        end_time: Option<i64>,
    ) -> Result<(), String> {
        let mut unique: Vec<Caps> = Vec::new();
        for c in cands.drain(..) {
            if !unique.contains(&c) {
                unique.push(c);
            }
        }
        unique.sort_by_key(|c| self.order_key(c));
        let mut removed = vec![false; unique.len()];
        for i in 0..unique.len() {
            if removed[i] {
                continue;
            }
            let c = unique[i].clone();
            let end = end_time.unwrap_or_else(|| self.deadline(p, &c));
            self.emit(p, "match", &c, end);
            self.matches_this_advance += 1;
            if self.matches_this_advance > self.max_results {
                return Err(format!(
                    "max_results_per_advance exceeded by pattern {} key {key:?}",
                    self.name(p)
                ));
            }
            // Which captures does this selection remove?
            let gone: Box<Removes> = match self.skip(p) {
                "no_skip" => continue,
                "skip_to_next_start" => {
                    let f = Self::first_ordinal(&c);
                    Box::new(move |_: &Model, x: &Caps| Self::first_ordinal(x) == f)
                }
                "skip_past_last" => {
                    let last = self.position(Self::last_ordinal(&c));
                    Box::new(move |m: &Model, x: &Caps| m.position(Self::first_ordinal(x)) <= last)
                }
                other => panic!("unknown skip {other}"),
            };
            for j in i + 1..unique.len() {
                if gone(self, &unique[j]) {
                    removed[j] = true;
                }
            }
            let keep_b: Vec<bool> = self
                .branches
                .iter()
                .map(|b| !(b.pattern == p && self.key_of(&b.caps) == key && gone(self, &b.caps)))
                .collect();
            let mut it = keep_b.into_iter();
            self.branches.retain(|_| it.next().unwrap());
            let keep_w: Vec<bool> = self
                .waits
                .iter()
                .map(|w| !(w.pattern == p && self.key_of(&w.caps) == key && gone(self, &w.caps)))
                .collect();
            let mut it = keep_w.into_iter();
            self.waits.retain(|_| it.next().unwrap());
        }
        Ok(())
    }

    // ---- observe ----

    fn observe(&mut self, p: usize, e: &Ev) -> Result<(), String> {
        let key = e.key.clone();
        let empty: Caps = vec![Vec::new(); self.stages(p).len()];

        // 1. Absence waits of (p, key) that existed before e.
        if let Some(absence) = self.absence(p).cloned() {
            let keep: Vec<bool> = self
                .waits
                .iter()
                .map(|w| {
                    !(w.pattern == p
                        && self.key_of(&w.caps) == key
                        && self.eval(p, &absence, e, &w.caps))
                })
                .collect();
            let mut it = keep.into_iter();
            self.waits.retain(|_| it.next().unwrap());
        }

        // 2. Every live branch of (p, key) that existed before e.
        let (mine, others): (Vec<Branch>, Vec<Branch>) = self.branches.drain(..).partition(|b| {
            b.pattern == p && self.events[(Self::first_ordinal(&b.caps) - 1) as usize].key == key
        });
        self.branches = others;
        let mut next: Vec<Branch> = Vec::new();
        let mut candidates: Vec<Caps> = Vec::new();
        for b in mine {
            let s = b.stage;
            let forbidden = self
                .forbidden(p, s)
                .is_some_and(|f| self.eval(p, f, e, &b.caps));
            if forbidden {
                continue; // cancelled
            }
            if self.eval(p, self.where_(p, s), e, &b.caps) {
                let (succ, cands) = self.successors(p, &b.caps, s, e.ordinal);
                next.extend(succ);
                candidates.extend(cands);
                if self.contiguity(p, s) == "skip_any" {
                    next.push(b);
                }
            } else if self.contiguity(p, s) != "strict" {
                next.push(b);
            }
        }

        // 3. A new start (the first stage's forbidden never blocks it).
        if self.eval(p, self.where_(p, 0), e, &empty) {
            let (succ, cands) = self.successors(p, &empty, 0, e.ordinal);
            next.extend(succ);
            candidates.extend(cands);
        }

        // 4. Join the live set, deduplicated.
        for b in next {
            if !self.branches.contains(&b) {
                self.branches.push(b);
            }
        }

        // 5. Candidates: selection, or absence waits.
        let mut unique: Vec<Caps> = Vec::new();
        for c in candidates {
            if !unique.contains(&c) {
                unique.push(c);
            }
        }
        if self.absence(p).is_some() {
            for caps in unique {
                let w = Wait { pattern: p, caps };
                if !self.waits.contains(&w) {
                    self.waits.push(w);
                }
            }
        } else if !unique.is_empty() {
            self.select(p, &key, unique, Some(e.time))?;
        }

        // Limit: distinct branches plus waits of (p, key).
        let states = self
            .branches
            .iter()
            .filter(|b| b.pattern == p && self.key_of(&b.caps) == key)
            .count()
            + self
                .waits
                .iter()
                .filter(|w| w.pattern == p && self.key_of(&w.caps) == key)
                .count();
        if states as u64 > self.active_states {
            return Err(format!(
                "active_states exceeded by pattern {} key {key:?}",
                self.name(p)
            ));
        }
        Ok(())
    }

    // ---- expiry ----

    fn earliest_deadline(&self) -> Option<i64> {
        let b = self
            .branches
            .iter()
            .map(|b| self.deadline(b.pattern, &b.caps));
        let w = self.waits.iter().map(|w| self.deadline(w.pattern, &w.caps));
        b.chain(w).min()
    }

    fn expire(&mut self, d: i64) -> Result<(), String> {
        // (pattern, key) pairs holding a branch or wait with deadline d.
        let mut pairs: Vec<(usize, String)> = Vec::new();
        for (p, caps) in self
            .branches
            .iter()
            .map(|b| (b.pattern, &b.caps))
            .chain(self.waits.iter().map(|w| (w.pattern, &w.caps)))
        {
            if self.deadline(p, caps) == d {
                let pair = (p, self.key_of(caps).to_string());
                if !pairs.contains(&pair) {
                    pairs.push(pair);
                }
            }
        }
        pairs.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| a.1.as_bytes().cmp(b.1.as_bytes()))
        });
        for (p, key) in pairs {
            // 1. Absence waits with deadline d: selection.
            let cands: Vec<Caps> = self
                .waits
                .iter()
                .filter(|w| {
                    w.pattern == p && self.key_of(&w.caps) == key && self.deadline(p, &w.caps) == d
                })
                .map(|w| w.caps.clone())
                .collect();
            if !cands.is_empty() {
                self.select(p, &key, cands, None)?;
            }
            // 2. Timeouts: remaining incomplete branches, once per assignment.
            let mut timeouts: Vec<Caps> = Vec::new();
            for b in &self.branches {
                if b.pattern == p
                    && self.key_of(&b.caps) == key
                    && self.deadline(p, &b.caps) == d
                    && !self.complete(p, &b.caps)
                    && !timeouts.contains(&b.caps)
                {
                    timeouts.push(b.caps.clone());
                }
            }
            timeouts.sort_by_key(|c| self.order_key(c));
            for caps in &timeouts {
                self.emit(p, "timeout", caps, d);
            }
            // 3. Remove every branch and wait of (p, key) with deadline d.
            let keep: Vec<bool> = self
                .branches
                .iter()
                .map(|b| {
                    !(b.pattern == p
                        && self.key_of(&b.caps) == key
                        && self.deadline(p, &b.caps) == d)
                })
                .collect();
            let mut it = keep.into_iter();
            self.branches.retain(|_| it.next().unwrap());
            let keep: Vec<bool> = self
                .waits
                .iter()
                .map(|w| {
                    !(w.pattern == p
                        && self.key_of(&w.caps) == key
                        && self.deadline(p, &w.caps) == d)
                })
                .collect();
            let mut it = keep.into_iter();
            self.waits.retain(|_| it.next().unwrap());
        }
        Ok(())
    }

    /// Expires, in ascending order, every deadline `d` with `d < bound`
    /// (`inclusive == false`) or `d <= bound`.
    fn expire_until(&mut self, bound: i64, inclusive: bool) -> Result<(), String> {
        while let Some(d) = self.earliest_deadline() {
            if d < bound || (inclusive && d == bound) {
                self.expire(d)?;
            } else {
                break;
            }
        }
        Ok(())
    }

    // ---- the verbs ----

    /// Pushes a batch of events given as values. Errors are `(code, index)`.
    pub fn push(&mut self, events: &[Value]) -> Result<PushOk, (&'static str, usize)> {
        let mut parsed = Vec::new();
        for (i, v) in events.iter().enumerate() {
            let e = event_from_value(v).map_err(|_| ("bad_request", i))?;
            if e.time <= self.watermark {
                return Err(("late_event", i));
            }
            parsed.push(e);
        }
        self.push_parsed(parsed)
    }

    /// Pushes a batch given as the exact JSON text of each item: checked
    /// item by item, the first failing item decides (a malformed item is
    /// `bad_request` whatever its time, a late one `late_event`).
    pub fn push_texts(&mut self, items: &[&[u8]]) -> Result<PushOk, (&'static str, usize)> {
        let mut parsed = Vec::new();
        for (i, t) in items.iter().enumerate() {
            let e = parse_event_text(t).map_err(|_| ("bad_request", i))?;
            if e.time <= self.watermark {
                return Err(("late_event", i));
            }
            parsed.push(e);
        }
        self.push_parsed(parsed)
    }

    fn push_parsed(&mut self, events: Vec<NewEv>) -> Result<PushOk, (&'static str, usize)> {
        if events.is_empty() {
            return Err(("invalid_request", 0));
        }
        let first = self.next_ordinal;
        for e in events {
            let o = self.next_ordinal;
            self.next_ordinal += 1;
            self.events.push(Ev {
                ordinal: o,
                id: e.id,
                key: e.key,
                kind: e.kind,
                time: e.time,
                fields: e.fields,
            });
            self.buffer.push(o);
        }
        Ok(PushOk {
            first,
            last: self.next_ordinal - 1,
            buffered: self.buffer.len() as u64,
        })
    }

    /// Advances to `w`: everything or nothing.
    pub fn advance(&mut self, w: i64) -> Result<AdvanceOk, &'static str> {
        if w < self.watermark {
            return Err("watermark_regression");
        }
        if w > FINAL_WATERMARK {
            return Err("invalid_request");
        }
        if w == self.watermark {
            return Ok(AdvanceOk {
                output: Vec::new(),
                watermark: w,
                processed: 0,
            });
        }
        let mut m = self.clone();
        m.out.clear();
        m.matches_this_advance = 0;
        match m.run(w) {
            Ok(processed) => {
                let output = std::mem::take(&mut m.out);
                *self = m;
                Ok(AdvanceOk {
                    output,
                    watermark: w,
                    processed,
                })
            }
            Err(_) => Err("limit_exceeded"),
        }
    }

    fn run(&mut self, w: i64) -> Result<u64, String> {
        let mut taken: Vec<u64> = self
            .buffer
            .iter()
            .copied()
            .filter(|&o| self.ev(o).time <= w)
            .collect();
        self.buffer.retain(|o| !taken.contains(o));
        taken.sort_by_key(|&o| self.position(o));
        let mut times: Vec<i64> = taken.iter().map(|&o| self.ev(o).time).collect();
        times.dedup();
        for t in times {
            self.expire_until(t, false)?;
            let at_t: Vec<u64> = taken
                .iter()
                .copied()
                .filter(|&o| self.ev(o).time == t)
                .collect();
            for o in at_t {
                let e = self.ev(o).clone();
                for p in 0..self.patterns.len() {
                    self.observe(p, &e)?;
                }
            }
        }
        self.expire_until(w, true)?;
        self.watermark = w;
        Ok(taken.len() as u64)
    }

    /// `advance(FINAL_WATERMARK)`.
    pub fn finish(&mut self) -> Result<AdvanceOk, &'static str> {
        self.advance(FINAL_WATERMARK)
    }

    /// Changes the limits (they are policy, not state: a restore or restart
    /// may change them).
    pub fn set_limits(&mut self, max_results_per_advance: u64, active_states: u64) {
        self.max_results = max_results_per_advance;
        self.active_states = active_states;
    }

    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    pub fn status(&self) -> Status {
        let patterns = (0..self.patterns.len())
            .map(|p| {
                let mut keys: Vec<&str> = Vec::new();
                let mut branches = 0;
                let mut waits = 0;
                for b in self.branches.iter().filter(|b| b.pattern == p) {
                    branches += 1;
                    let k = self.key_of(&b.caps);
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
                for w in self.waits.iter().filter(|w| w.pattern == p) {
                    waits += 1;
                    let k = self.key_of(&w.caps);
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
                (
                    self.name(p).to_string(),
                    (keys.len() as u64, branches, waits),
                )
            })
            .collect();
        Status {
            watermark: self.watermark,
            buffered: self.buffer.len() as u64,
            next_ordinal: self.next_ordinal,
            sequence: self.sequence,
            patterns,
        }
    }
}

/// A JSON string literal, as serde_json writes it.
fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}
