//! Reading a parsed checkpoint: the canonical bytes of any parsed state (for
//! the checksum) and strict typed accessors whose errors carry the JSON
//! path (`state.states[2].branches[0].deadline: ...`).

use streamforge_canonical::strict::{kind_name, number, Json, Num, Path};
use streamforge_canonical::writer::string;

/// Rejects every number with a fraction or an exponent: a checkpoint holds
/// integers only.
pub(crate) fn no_floats(j: &Json<'_>, path: &Path<'_>) -> Result<(), String> {
    match j {
        Json::Number(t) if t.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) => Err(format!(
            "{}: {t} is a float; a checkpoint holds integers only",
            at(path)
        )),
        Json::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                no_floats(item, &path.index(i))?;
            }
            Ok(())
        }
        Json::Object(entries) => {
            for (k, v) in entries {
                no_floats(v, &path.key(k))?;
            }
            Ok(())
        }
        Json::TooDeep => Err(format!(
            "{}: nested deeper than {} levels",
            at(path),
            streamforge_canonical::strict::MAX_NESTING
        )),
        _ => Ok(()),
    }
}

/// The canonical bytes of a parsed value: keys sorted by code point, no
/// whitespace, integers as written (`-0` as `0`).
pub(crate) fn canonical(j: &Json<'_>, buf: &mut Vec<u8>) {
    match j {
        // rejected by `no_floats` before any checksum is computed
        Json::Null | Json::TooDeep => buf.extend_from_slice(b"null"),
        Json::Bool(true) => buf.extend_from_slice(b"true"),
        Json::Bool(false) => buf.extend_from_slice(b"false"),
        Json::Number(t) => buf.extend_from_slice(if *t == "-0" { b"0" } else { t.as_bytes() }),
        Json::String(s) => string(buf, s),
        Json::Array(items) => {
            buf.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                canonical(item, buf);
            }
            buf.push(b']');
        }
        Json::Object(entries) => {
            let mut sorted: Vec<&(String, Json<'_>)> = entries.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            buf.push(b'{');
            for (i, (k, v)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                string(buf, k);
                buf.push(b':');
                canonical(v, buf);
            }
            buf.push(b'}');
        }
    }
}

/// A path for messages (`the envelope` for the root).
pub(crate) fn at(path: &Path<'_>) -> String {
    let p = path.render();
    if p.is_empty() {
        "the envelope".into()
    } else {
        p
    }
}

/// The members of an object with exactly the keys `keys` (any order).
pub(crate) fn object<'j, 'a, const N: usize>(
    j: &'j Json<'a>,
    path: &Path<'_>,
    keys: [&str; N],
) -> Result<[&'j Json<'a>; N], String> {
    let Json::Object(entries) = j else {
        return Err(format!(
            "{}: must be an object, not {}",
            at(path),
            kind_name(j)
        ));
    };
    if let Some((k, _)) = entries.iter().find(|(k, _)| !keys.contains(&k.as_str())) {
        return Err(format!("{}: unknown key {k:?}", at(path)));
    }
    let mut out = [&Json::Null; N];
    for (slot, key) in out.iter_mut().zip(keys) {
        match entries.iter().find(|(k, _)| k == key) {
            Some((_, v)) => *slot = v,
            None => return Err(format!("{}: missing key {key:?}", at(path))),
        }
    }
    Ok(out)
}

/// An integer within `lo..=hi`.
pub(crate) fn integer(j: &Json<'_>, path: &Path<'_>, lo: i64, hi: i64) -> Result<i64, String> {
    let v = match j {
        Json::Number(t) => match number(t) {
            Ok(Num::Integer(i)) => i,
            Ok(Num::Double(_)) => return Err(format!("{}: {t} is not an integer", at(path))),
            Err(m) => return Err(format!("{}: {m}", at(path))),
        },
        other => {
            return Err(format!(
                "{}: must be an integer, not {}",
                at(path),
                kind_name(other)
            ))
        }
    };
    if !(lo..=hi).contains(&v) {
        return Err(format!("{}: {v} is out of range {lo}..={hi}", at(path)));
    }
    Ok(v)
}

/// A string.
pub(crate) fn text<'j>(j: &'j Json<'_>, path: &Path<'_>) -> Result<&'j str, String> {
    match j {
        Json::String(s) => Ok(s),
        other => Err(format!(
            "{}: must be a string, not {}",
            at(path),
            kind_name(other)
        )),
    }
}

/// An array.
pub(crate) fn array<'j, 'a>(j: &'j Json<'a>, path: &Path<'_>) -> Result<&'j [Json<'a>], String> {
    match j {
        Json::Array(items) => Ok(items),
        other => Err(format!(
            "{}: must be an array, not {}",
            at(path),
            kind_name(other)
        )),
    }
}
