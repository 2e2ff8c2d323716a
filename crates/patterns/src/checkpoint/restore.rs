//! Strict restore: parse, verify the checksum, validate every rule, build.
//!
//! Rules, each with its own message:
//! - envelope: JSON with exactly `format`, `sha256`, `state`, `version`; no
//!   duplicate keys and no floats anywhere; the format name; `version` the
//!   integer 1; the checksum over the canonical bytes of the parsed state;
//! - shapes: every object with exactly its keys, every value of its type;
//! - patterns: a valid patterns list equal to the service's;
//! - ranges: `watermark` in `-1..=FINAL_WATERMARK`, `next_ordinal` in
//!   `1..=2^53`, `sequence` in `0..=2^53-1`, ordinals in `1..next_ordinal`;
//! - events: valid events (the rules of a push); `buffer` and `captured` in
//!   strictly increasing ordinal order, no ordinal in both; buffered events
//!   after the watermark, captured ones at or before it;
//! - states: in strictly increasing (pattern, key) order, of known patterns,
//!   none empty; waits only for a pattern with `absence`;
//! - captures: ordinals of captured events of the state's key, in strictly
//!   increasing `(time, ordinal)` order, one list per stage; a branch waiting
//!   for stage `s` has `min <= count <= max` before `s`, `count < max` at `s`
//!   and nothing after; a wait is complete (`min <= count <= max` everywhere);
//!   every capture but the first satisfies its stage's `where` and not its
//!   `forbidden`, the first satisfies stage 0's `where`;
//! - deadlines: `start + within` and after the watermark;
//! - order: branches strictly increasing by (selection key, stage), waits by
//!   selection key (so no duplicates);
//! - every captured event is held by some branch or wait.

use std::collections::BTreeMap;

use super::tree::{array, at, canonical, integer, no_floats, object, text};
use super::FORMAT;
use crate::branch::{Branch, Caps, Shape, SortKey};
use crate::buffer::Pending;
use crate::deadlines::Deadlines;
use crate::document::{parse_patterns, Document, Pattern};
use crate::engine::{Engine, MAX_ORDINAL};
use crate::event::Event;
use crate::selection::MAX_SEQUENCE;
use crate::value::{self, Syntax};
use crate::FINAL_WATERMARK;
use streamforge_canonical::sha256_hex;
use streamforge_canonical::strict::{self as json, Json, Path};

/// Which patterns a restored state must hold.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expect<'a> {
    /// The patterns of this document (its limits are used).
    Same(&'a Document),
    /// Its own patterns, with these limits (a service's recovery base:
    /// the patterns may have changed since the service started).
    Own(crate::Limits),
}

/// Restores an envelope for a service running `doc`.
pub(crate) fn restore(envelope: &[u8], expect: Expect<'_>) -> Result<Engine, String> {
    let root = json::parse(envelope).map_err(|m| format!("malformed checkpoint envelope: {m}"))?;
    let p = Path::root();
    no_floats(&root, &p)?;
    let [format, sha, state, version] =
        object(&root, &p, ["format", "sha256", "state", "version"])?;
    let format = text(format, &p.key("format"))?;
    if format != FORMAT {
        return Err(format!(
            "format: unknown checkpoint format {format:?} (expected {FORMAT:?})"
        ));
    }
    if !matches!(version, Json::Number("1")) {
        return Err(format!(
            "version: unsupported checkpoint version {} (only the integer 1 is known)",
            String::from_utf8_lossy(&{
                let mut b = Vec::new();
                canonical(version, &mut b);
                b
            })
        ));
    }
    let sha = text(sha, &p.key("sha256"))?;
    if let Some(at) = streamforge_canonical::escape::uppercase_escape(envelope) {
        return Err(streamforge_canonical::escape::uppercase_escape_error(at));
    }
    let mut bytes = Vec::with_capacity(envelope.len());
    canonical(state, &mut bytes);
    let actual = sha256_hex(&bytes);
    if actual != sha {
        return Err(format!(
            "sha256: checksum mismatch: the envelope says {sha:?}, the state hashes to {actual}"
        ));
    }
    build(state, &p.key("state"), expect)
}

/// Reads `{"fields", "id", "key", "kind", "ordinal", "time"}`.
fn read_event(j: &Json<'_>, path: &Path<'_>) -> Result<(u64, Event), String> {
    let [fields, id, key, kind, ordinal, time] =
        object(j, path, ["fields", "id", "key", "kind", "ordinal", "time"])?;
    let ordinal = integer(ordinal, &path.key("ordinal"), 1, MAX_ORDINAL as i64)? as u64;
    let fp = path.key("fields");
    let items = array(fields, &fp)?;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let ip = fp.index(i);
        match array(item, &ip)? {
            [name, v] => {
                let name = text(name, &ip.index(0))?;
                let v = value::from_json(v, Syntax::State)
                    .map_err(|m| format!("{}: {m}", at(&ip.index(1))))?;
                out.push((name.to_string(), v));
            }
            _ => return Err(format!("{}: a field is [name, value]", at(&ip))),
        }
    }
    let id = text(id, &path.key("id"))?;
    let key = text(key, &path.key("key"))?;
    let kind = text(kind, &path.key("kind"))?;
    let time = integer(time, &path.key("time"), i64::MIN, i64::MAX)?;
    let event = Event::new(id, key, kind, time, &out);
    event
        .validate()
        .map_err(|m| format!("{}: invalid event: {m}", at(path)))?;
    Ok((ordinal, event))
}

/// A captured event of the state, and whether something holds it.
struct Captured {
    pending: Pending,
    held: bool,
}

/// The context of one (pattern, key) while its branches and waits are read.
struct Ctx<'a> {
    pattern: &'a Pattern,
    shape: &'a Shape,
    key: &'a str,
    watermark: i64,
}

/// Reads one `captures` list and checks order, key, stage counts and the
/// stage conditions; returns the captures (as a list ending with the last)
/// and the stage counts. `waiting` is the stage a branch waits for, `None`
/// for a wait.
// Over 120 lines: the checks of one captures list, in the order the format states them.
fn read_captures(
    j: &Json<'_>,
    path: &Path<'_>,
    ctx: &Ctx<'_>,
    waiting: Option<usize>,
    captured: &mut BTreeMap<u64, Captured>,
) -> Result<Caps, String> {
    let stages = ctx.pattern.stages.len();
    let lists = array(j, path)?;
    if lists.len() != stages {
        return Err(format!(
            "{}: {} capture lists for a pattern of {stages} stages",
            at(path),
            lists.len()
        ));
    }
    let mut caps: Option<Caps> = None;
    let mut counts = vec![0u32; stages];
    // One list per stage (checked above), each with its stage and count.
    let per_stage = lists.iter().zip(&ctx.pattern.stages).zip(counts.iter_mut());
    for (s, ((list, stage), count)) in per_stage.enumerate() {
        let lp = path.index(s);
        for (i, o) in array(list, &lp)?.iter().enumerate() {
            let op = lp.index(i);
            let ordinal = integer(o, &op, 1, MAX_ORDINAL as i64)? as u64;
            let Some(c) = captured.get_mut(&ordinal) else {
                return Err(format!(
                    "{}: ordinal {ordinal} is not a captured event of the state",
                    at(&op)
                ));
            };
            c.held = true;
            let e = &c.pending;
            if e.event.key() != ctx.key {
                return Err(format!(
                    "{}: captured event {ordinal} is of key {:?}, not the state's key {:?}",
                    at(&op),
                    e.event.key(),
                    ctx.key
                ));
            }
            caps = Some(match caps {
                None => {
                    if s != 0 {
                        return Err(format!(
                            "{}: the first capture must be of the first stage",
                            at(&op)
                        ));
                    }
                    if !stage.where_.eval(&e.event, &|_| None) {
                        return Err(format!(
                            "{}: captured event {ordinal} does not satisfy the where of stage {:?}",
                            at(&op),
                            stage.name
                        ));
                    }
                    Caps::start(e)
                }
                Some(prev) => {
                    if (e.time, e.ordinal) <= prev.last_position() {
                        return Err(format!(
                            "{}: captures out of processing order: event {ordinal} at time {} does not come after event {} at time {}",
                            at(&op),
                            e.time,
                            prev.last.ordinal,
                            prev.last.time
                        ));
                    }
                    let last = |r: usize| prev.last_of(r);
                    if stage
                        .forbidden
                        .as_ref()
                        .is_some_and(|f| f.eval(&e.event, &last))
                    {
                        return Err(format!(
                            "{}: captured event {ordinal} satisfies the forbidden of stage {:?}",
                            at(&op),
                            stage.name
                        ));
                    }
                    if !stage.where_.eval(&e.event, &last) {
                        return Err(format!(
                            "{}: captured event {ordinal} does not satisfy the where of stage {:?}",
                            at(&op),
                            stage.name
                        ));
                    }
                    prev.with(e, s as u8)
                }
            });
            *count += 1;
        }
    }
    let Some(caps) = caps else {
        return Err(format!("{}: no captures", at(path)));
    };
    let shape = ctx.shape;
    let bounds = shape.min.iter().zip(&shape.max).zip(&ctx.pattern.stages);
    for (s, (&c, ((&min, &max), stage))) in counts.iter().zip(bounds).enumerate() {
        let ok = match waiting {
            Some(w) if s < w => min <= c && c <= max,
            Some(w) if s == w => c < max,
            Some(_) => c == 0,
            None => min <= c && c <= max,
        };
        if !ok {
            let what = match waiting {
                Some(w) if s < w => format!(
                    "a stage before the awaited one needs min <= count <= max ({min}..={max})"
                ),
                Some(w) if s == w => format!("the awaited stage needs count < max ({max})"),
                Some(_) => "a stage after the awaited one must be empty".into(),
                None => format!("a wait is complete: min <= count <= max ({min}..={max})"),
            };
            return Err(format!(
                "{}: {c} captures break stage {:?}'s min/max: {what}",
                at(&path.index(s)),
                stage.name
            ));
        }
    }
    Ok(caps)
}

fn check_deadline(
    j: &Json<'_>,
    path: &Path<'_>,
    caps: &Caps,
    ctx: &Ctx<'_>,
) -> Result<i64, String> {
    let d = integer(j, path, i64::MIN, i64::MAX)?;
    let want = caps.start + ctx.pattern.within;
    if d != want {
        return Err(format!(
            "{}: deadline {d} is not start + within ({} + {} = {want})",
            at(path),
            caps.start,
            ctx.pattern.within
        ));
    }
    if d <= ctx.watermark {
        return Err(format!(
            "{}: deadline {d} is at or before the watermark {} (it would have expired)",
            at(path),
            ctx.watermark
        ));
    }
    Ok(d)
}

// Over 120 lines: one check per field of the state object, in the envelope's order.
fn build(state: &Json<'_>, sp: &Path<'_>, expect: Expect<'_>) -> Result<Engine, String> {
    let [buffer, captured, next_ordinal, patterns, sequence, states, watermark] = object(
        state,
        sp,
        [
            "buffer",
            "captured",
            "next_ordinal",
            "patterns",
            "sequence",
            "states",
            "watermark",
        ],
    )?;
    let patterns =
        parse_patterns(patterns, &sp.key("patterns"), Syntax::State).map_err(|e| e.to_string())?;
    let own;
    let doc = match expect {
        Expect::Same(doc) => doc,
        Expect::Own(limits) => {
            own = Document {
                source: (0..patterns.len()).collect(),
                patterns: patterns.clone(),
                limits,
            };
            &own
        }
    };
    if patterns != doc.patterns {
        let names = |ps: &[Pattern]| {
            ps.iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(format!(
            "state.patterns: different patterns: the checkpoint has [{}], this service runs [{}] (compared in full)",
            names(&patterns),
            names(&doc.patterns)
        ));
    }
    let watermark = integer(watermark, &sp.key("watermark"), -1, FINAL_WATERMARK)?;
    let next_ordinal = integer(
        next_ordinal,
        &sp.key("next_ordinal"),
        1,
        MAX_ORDINAL as i64 + 1,
    )? as u64;
    let sequence = integer(sequence, &sp.key("sequence"), 0, MAX_SEQUENCE as i64)? as u64;
    let mut engine = Engine::new(doc.clone());
    engine.watermark = watermark;
    engine.next_ordinal = next_ordinal;
    engine.sequence = sequence;
    let ordinal_in_range = |o: u64, p: &Path<'_>| {
        if o >= next_ordinal {
            Err(format!(
                "{}: ordinal {o} is at or beyond the next ordinal {next_ordinal}",
                at(p)
            ))
        } else {
            Ok(())
        }
    };

    // buffered events
    let bp = sp.key("buffer");
    let mut previous = 0u64;
    let mut buffered = Vec::new();
    for (i, item) in array(buffer, &bp)?.iter().enumerate() {
        let ip = bp.index(i);
        let (ordinal, event) = read_event(item, &ip)?;
        ordinal_in_range(ordinal, &ip)?;
        if ordinal <= previous {
            return Err(format!(
                "{}: buffered events must be in strictly increasing ordinal order ({ordinal} after {previous})",
                at(&ip)
            ));
        }
        previous = ordinal;
        if event.time <= watermark {
            return Err(format!(
                "{}: buffered event {ordinal} at time {} is at or before the watermark {watermark}",
                at(&ip),
                event.time
            ));
        }
        buffered.push((ordinal, event));
    }
    let buffered_ordinals: Vec<u64> = buffered.iter().map(|(o, _)| *o).collect();
    for (ordinal, event) in buffered {
        let key = engine
            .intern(event.key())
            .ok_or_else(|| "too many keys".to_string())?;
        engine.buffer.push(Pending {
            time: event.time,
            ordinal,
            key,
            event,
        });
    }

    // captured events
    let cp = sp.key("captured");
    let mut pool: BTreeMap<u64, Captured> = BTreeMap::new();
    let mut previous = 0u64;
    for (i, item) in array(captured, &cp)?.iter().enumerate() {
        let ip = cp.index(i);
        let (ordinal, event) = read_event(item, &ip)?;
        ordinal_in_range(ordinal, &ip)?;
        if ordinal <= previous {
            return Err(format!(
                "{}: captured events must be in strictly increasing ordinal order ({ordinal} after {previous})",
                at(&ip)
            ));
        }
        previous = ordinal;
        if buffered_ordinals.binary_search(&ordinal).is_ok() {
            return Err(format!(
                "{}: ordinal {ordinal} is both buffered and captured",
                at(&ip)
            ));
        }
        if event.time > watermark {
            return Err(format!(
                "{}: captured event {ordinal} at time {} is after the watermark {watermark}",
                at(&ip),
                event.time
            ));
        }
        pool.insert(
            ordinal,
            Captured {
                pending: Pending {
                    time: event.time,
                    ordinal,
                    key: 0,
                    event,
                },
                held: false,
            },
        );
    }

    // states
    let stp = sp.key("states");
    let mut deadlines = Vec::new();
    let mut previous: Option<(usize, String)> = None;
    for (i, item) in array(states, &stp)?.iter().enumerate() {
        let ip = stp.index(i);
        let [branches, key, pattern, waits] =
            object(item, &ip, ["branches", "key", "pattern", "waits"])?;
        let pname = text(pattern, &ip.key("pattern"))?;
        let Some((p, pattern)) = doc
            .patterns
            .iter()
            .enumerate()
            .find(|(_, q)| q.name == pname)
        else {
            return Err(format!(
                "{}: unknown pattern {pname:?}",
                at(&ip.key("pattern"))
            ));
        };
        let key = text(key, &ip.key("key"))?;
        let this = (p, key.to_string());
        if previous.as_ref().is_some_and(|prev| *prev >= this) {
            return Err(format!(
                "{}: states must be in strictly increasing (pattern, key) order, without duplicates",
                at(&ip)
            ));
        }
        previous = Some(this);
        // What the engine compiled for this pattern (`Shape::of` it).
        let shape = Shape::of(pattern);
        let ctx = Ctx {
            pattern,
            shape: &shape,
            key,
            watermark,
        };
        let kid = engine
            .intern(key)
            .ok_or_else(|| "too many keys".to_string())?;
        let stages = pattern.stages.len();

        let brp = ip.key("branches");
        let mut list = Vec::new();
        let mut last_key: Option<(SortKey, u8)> = None;
        for (j, b) in array(branches, &brp)?.iter().enumerate() {
            let bp = brp.index(j);
            let [captures, deadline, stage] = object(b, &bp, ["captures", "deadline", "stage"])?;
            let wait = integer(stage, &bp.key("stage"), 0, stages as i64 - 1)? as usize;
            let caps = read_captures(captures, &bp.key("captures"), &ctx, Some(wait), &mut pool)?;
            let d = check_deadline(deadline, &bp.key("deadline"), &caps, &ctx)?;
            let k = (caps.sort_key(stages), wait as u8);
            if last_key.as_ref().is_some_and(|prev| *prev >= k) {
                return Err(format!(
                    "{}: branches must be in strictly increasing (selection key, stage) order, without duplicates",
                    at(&bp)
                ));
            }
            last_key = Some(k);
            deadlines.push((d, p as u32, kid));
            list.push(Branch {
                wait: wait as u8,
                caps,
            });
        }

        let wp = ip.key("waits");
        let wait_items = array(waits, &wp)?;
        if !wait_items.is_empty() && pattern.absence.is_none() {
            return Err(format!(
                "{}: waits for pattern {:?}, which has no absence",
                at(&wp),
                pattern.name
            ));
        }
        let mut wlist = Vec::new();
        let mut last_key: Option<SortKey> = None;
        for (j, w) in wait_items.iter().enumerate() {
            let wpj = wp.index(j);
            let [captures, deadline] = object(w, &wpj, ["captures", "deadline"])?;
            let caps = read_captures(captures, &wpj.key("captures"), &ctx, None, &mut pool)?;
            let d = check_deadline(deadline, &wpj.key("deadline"), &caps, &ctx)?;
            let k = caps.sort_key(stages);
            if last_key.as_ref().is_some_and(|prev| *prev >= k) {
                return Err(format!(
                    "{}: waits must be in strictly increasing selection key order, without duplicates",
                    at(&wpj)
                ));
            }
            last_key = Some(k);
            deadlines.push((d, p as u32, kid));
            wlist.push(caps);
        }
        if list.is_empty() && wlist.is_empty() {
            return Err(format!(
                "{}: a state with neither branches nor waits",
                at(&ip)
            ));
        }
        let st = &mut engine.states[p][kid as usize];
        st.branches = list.into();
        st.waits = wlist.into();
    }
    engine.deadlines = Deadlines::from_entries(doc.patterns.len(), deadlines);
    if let Some((o, _)) = pool.iter().find(|(_, c)| !c.held) {
        return Err(format!(
            "{}: captured event {o} is held by no branch or wait",
            at(&cp)
        ));
    }
    Ok(engine)
}
