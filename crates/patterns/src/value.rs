//! The five field types and their comparison.
//!
//! Integer, Double and Decimal are three different types and are never
//! coerced into one another. Two Integers and two Decimals compare exactly by
//! value (`1.50` equals `1.5`), two Doubles by IEEE order (`-0.0` equals
//! `0.0`), two Strings by Unicode code point, two Bools by `eq`/`ne` only.
//! Any other pair compares false for every operator, `ne` included.

use std::cmp::Ordering;

use streamforge_canonical::strict::{number, Json, Num};

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `eq`
    Eq,
    /// `ne`
    Ne,
    /// `lt`
    Lt,
    /// `le`
    Le,
    /// `gt`
    Gt,
    /// `ge`
    Ge,
}

impl Op {
    /// The operator's name in documents.
    pub fn name(self) -> &'static str {
        match self {
            Op::Eq => "eq",
            Op::Ne => "ne",
            Op::Lt => "lt",
            Op::Le => "le",
            Op::Gt => "gt",
            Op::Ge => "ge",
        }
    }

    /// The operator of a name.
    pub fn from_name(name: &str) -> Option<Op> {
        Some(match name {
            "eq" => Op::Eq,
            "ne" => Op::Ne,
            "lt" => Op::Lt,
            "le" => Op::Le,
            "gt" => Op::Gt,
            "ge" => Op::Ge,
            _ => return None,
        })
    }
}

/// Most digits of a Decimal, leading and trailing zeros included.
pub const MAX_DECIMAL_DIGITS: usize = 38;

/// A field value.
#[derive(Debug, Clone)]
pub enum Value {
    /// A JSON integer (no fraction, no exponent) in the i64 range.
    Integer(i64),
    /// A finite JSON number written with a fraction or an exponent.
    Double(f64),
    /// `{"decimal": "-12.50"}`: exact.
    Decimal(Decimal),
    /// A JSON string.
    String(String),
    /// `true` or `false`.
    Bool(bool),
}

/// Two values are equal when they have the same type and the same
/// representation: Doubles by their bits, Decimals by their text (this is
/// identity, for tests and documents; conditions compare with [`compare`]).
impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Integer(a), Value::Integer(b)) => a == b,
            (Value::Double(a), Value::Double(b)) => a.to_bits() == b.to_bits(),
            (Value::Decimal(a), Value::Decimal(b)) => a.as_str() == b.as_str(),
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Value {}

/// An exact decimal number of at most 38 digits, kept with the text it was
/// written as (which is what output echoes).
#[derive(Debug, Clone)]
pub struct Decimal {
    text: Box<str>,
    negative: bool,
    /// The digits without the point, as an integer (< 10^38).
    mantissa: u128,
    /// Digits after the point.
    scale: u8,
}

impl Decimal {
    /// Parses `-?[0-9]+(\.[0-9]+)?` with at most 38 digits in all.
    pub fn parse(text: &str) -> Result<Decimal, String> {
        let n = DecNum::parse(text)?;
        Ok(Decimal {
            text: text.into(),
            negative: n.negative,
            mantissa: n.mantissa,
            scale: n.scale,
        })
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Exact numeric order (`-0` equals `0`, `1.50` equals `1.5`).
    pub fn cmp_value(&self, other: &Decimal) -> Ordering {
        self.num().cmp_value(&other.num())
    }

    /// Its numeric value.
    pub(crate) fn num(&self) -> DecNum {
        DecNum {
            negative: self.negative,
            mantissa: self.mantissa,
            scale: self.scale,
        }
    }
}

/// A Decimal's numeric value (without its text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecNum {
    pub negative: bool,
    /// The digits without the point, as an integer (< 10^38).
    pub mantissa: u128,
    /// Digits after the point.
    pub scale: u8,
}

impl DecNum {
    /// Parses `-?[0-9]+(\.[0-9]+)?` with at most 38 digits in all.
    pub fn parse(text: &str) -> Result<DecNum, String> {
        let bad = || {
            format!("decimal {text:?} must match -?[0-9]+(.[0-9]+)? with at most {MAX_DECIMAL_DIGITS} digits")
        };
        let (negative, body) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (int, frac) = match body.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (body, None),
        };
        let digits_ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits_ok(int) || !frac.is_none_or(digits_ok) {
            return Err(bad());
        }
        let frac = frac.unwrap_or("");
        if int.len() + frac.len() > MAX_DECIMAL_DIGITS {
            return Err(bad());
        }
        let mut mantissa: u128 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            // at most 38 digits: < 10^38 < u128::MAX, no overflow
            mantissa = mantissa * 10 + u128::from(b - b'0');
        }
        Ok(DecNum {
            negative,
            mantissa,
            scale: frac.len() as u8,
        })
    }

    /// Exact numeric order.
    pub fn cmp_value(&self, other: &DecNum) -> Ordering {
        let sign = |d: &DecNum| {
            if d.mantissa == 0 {
                0
            } else if d.negative {
                -1
            } else {
                1
            }
        };
        let (sa, sb) = (sign(self), sign(other));
        if sa != sb || sa == 0 {
            return sa.cmp(&sb);
        }
        let magnitude = cmp_magnitude(self, other);
        if sa < 0 {
            magnitude.reverse()
        } else {
            magnitude
        }
    }
}

fn pow10(n: u8) -> u128 {
    10u128.checked_pow(u32::from(n)).unwrap_or(u128::MAX)
}

/// Compares |a| and |b|: integer parts, then fractions brought to one scale
/// (each fraction is < 10^scale <= 10^38, so the scaled values fit a u128).
fn cmp_magnitude(a: &DecNum, b: &DecNum) -> Ordering {
    let (ia, fa) = (a.mantissa / pow10(a.scale), a.mantissa % pow10(a.scale));
    let (ib, fb) = (b.mantissa / pow10(b.scale), b.mantissa % pow10(b.scale));
    let scale = a.scale.max(b.scale);
    ia.cmp(&ib).then_with(|| {
        fa.saturating_mul(pow10(scale - a.scale))
            .cmp(&fb.saturating_mul(pow10(scale - b.scale)))
    })
}

/// A field value as an event holds it: borrowed from the event's bytes
/// (strings as UTF-8 bytes: their byte order is code point order).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ValueRef<'a> {
    Integer(i64),
    Double(f64),
    /// The numeric value and the text as written.
    Decimal(DecNum, &'a [u8]),
    String(&'a [u8]),
    Bool(bool),
}

impl Value {
    /// The borrowed view.
    #[inline]
    pub(crate) fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Integer(i) => ValueRef::Integer(*i),
            Value::Double(d) => ValueRef::Double(*d),
            Value::Decimal(d) => ValueRef::Decimal(d.num(), d.as_str().as_bytes()),
            Value::String(s) => ValueRef::String(s.as_bytes()),
            Value::Bool(b) => ValueRef::Bool(*b),
        }
    }
}

impl ValueRef<'_> {
    /// An owned value (the text of a Decimal or String read back as UTF-8;
    /// an event only holds valid UTF-8).
    pub(crate) fn to_value(self) -> Value {
        match self {
            ValueRef::Integer(i) => Value::Integer(i),
            ValueRef::Double(d) => Value::Double(d),
            ValueRef::Decimal(n, text) => Value::Decimal(Decimal {
                text: String::from_utf8_lossy(text).into(),
                negative: n.negative,
                mantissa: n.mantissa,
                scale: n.scale,
            }),
            ValueRef::String(s) => Value::String(String::from_utf8_lossy(s).into_owned()),
            ValueRef::Bool(b) => Value::Bool(b),
        }
    }
}

/// `left OP right` under the rules of the module docs.
pub fn compare(left: &Value, op: Op, right: &Value) -> bool {
    compare_ref(left.as_ref(), op, right.as_ref())
}

/// [`compare`] on borrowed values.
#[inline]
pub(crate) fn compare_ref(left: ValueRef<'_>, op: Op, right: ValueRef<'_>) -> bool {
    compare_typed(left, op, right).unwrap_or(false)
}

/// [`compare_ref`], telling a type mismatch apart: `Some(result)` for two
/// values of one type, `None` for two types (false for every operator).
#[inline]
pub(crate) fn compare_typed(left: ValueRef<'_>, op: Op, right: ValueRef<'_>) -> Option<bool> {
    let ord = match (left, right) {
        (ValueRef::Integer(a), ValueRef::Integer(b)) => a.cmp(&b),
        (ValueRef::Double(a), ValueRef::Double(b)) => match a.partial_cmp(&b) {
            Some(o) => o,
            None => return Some(false),
        },
        (ValueRef::Decimal(a, _), ValueRef::Decimal(b, _)) => a.cmp_value(&b),
        (ValueRef::String(a), ValueRef::String(b)) => a.cmp(b),
        (ValueRef::Bool(a), ValueRef::Bool(b)) => {
            return Some(match op {
                Op::Eq => a == b,
                Op::Ne => a != b,
                _ => false,
            })
        }
        _ => return None,
    };
    Some(match op {
        Op::Eq => ord == Ordering::Equal,
        Op::Ne => ord != Ordering::Equal,
        Op::Lt => ord == Ordering::Less,
        Op::Le => ord != Ordering::Greater,
        Op::Gt => ord == Ordering::Greater,
        Op::Ge => ord != Ordering::Less,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_doubles_are_written_as_serde_json_writes_them() {
        for d in [
            2.0,
            -0.0,
            0.1,
            1e300,
            -1.5e-300,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            123456789.125,
        ] {
            let mut buf = Vec::new();
            write(&mut buf, &Value::Double(d), Syntax::Document);
            assert_eq!(buf, serde_json::to_vec(&d).unwrap(), "{d}");
        }
    }

    fn dec(s: &str) -> Value {
        Value::Decimal(Decimal::parse(s).unwrap())
    }

    #[test]
    fn decimals_compare_exactly() {
        assert!(compare(&dec("1.50"), Op::Eq, &dec("1.5")));
        assert!(compare(&dec("-0.0"), Op::Eq, &dec("0")));
        assert!(compare(&dec("-1.5"), Op::Lt, &dec("-1.49")));
        assert!(compare(
            &dec("10"),
            Op::Gt,
            &dec("9.999999999999999999999999999999999999")
        ));
        assert!(compare(
            &dec("99999999999999999999999999999999999999"),
            Op::Gt,
            &dec("0.0000000000000000000000000000000000001")
        ));
        assert!(compare(&dec("0.5"), Op::Gt, &dec("0.49")));
        assert!(compare(&dec("-0.5"), Op::Lt, &dec("0.0")));
    }

    #[test]
    fn decimal_syntax() {
        for bad in [
            "", "-", "1.", ".5", "+1", "1e2", "1.2.3", " 1", "0x1", "--1",
        ] {
            assert!(Decimal::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Decimal::parse(&"9".repeat(38)).is_ok());
        assert!(Decimal::parse(&"9".repeat(39)).is_err());
        assert!(Decimal::parse(&format!("0.{}", "0".repeat(38))).is_err());
        assert!(Decimal::parse(&format!("0.{}", "0".repeat(37))).is_ok());
    }

    #[test]
    fn types_never_mix_and_mismatch_is_false_for_ne() {
        let i = Value::Integer(1);
        let d = Value::Double(1.0);
        for op in [Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge] {
            assert!(!compare(&i, op, &d));
            assert!(!compare(&i, op, &dec("1")));
            assert!(!compare(&Value::Bool(true), op, &i));
        }
    }

    #[test]
    fn doubles_bools_strings() {
        assert!(compare(&Value::Double(-0.0), Op::Eq, &Value::Double(0.0)));
        assert!(!compare(&Value::Double(-0.0), Op::Lt, &Value::Double(0.0)));
        assert!(compare(&Value::Bool(true), Op::Ne, &Value::Bool(false)));
        assert!(!compare(&Value::Bool(true), Op::Gt, &Value::Bool(false)));
        assert!(!compare(&Value::Bool(true), Op::Ge, &Value::Bool(true)));
        let s = |x: &str| Value::String(x.into());
        // code point order: U+FF61 < U+1F600 (UTF-16 order would differ)
        assert!(compare(&s("\u{ff61}"), Op::Lt, &s("\u{1f600}")));
        assert!(compare(&s("B"), Op::Lt, &s("a")));
    }
}

/// How scalars are spelled: in documents and events a Double is a JSON
/// number with a fraction or an exponent; in checkpoint states (which hold
/// no floats) it is `{"double": "<16 lower-case hex digits of its bits>"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Syntax {
    /// Documents and events.
    Document,
    /// Checkpoint states.
    State,
}

/// Reads a scalar from a parsed JSON value. The error is the rule broken
/// (the caller adds the path).
pub(crate) fn from_json(j: &Json<'_>, syntax: Syntax) -> Result<Value, String> {
    match j {
        Json::Bool(b) => Ok(Value::Bool(*b)),
        Json::String(s) => Ok(Value::String(s.clone())),
        Json::Number(token) => match number(token)? {
            Num::Integer(i) => Ok(Value::Integer(i)),
            Num::Double(_) if syntax == Syntax::State => Err(format!(
                "number {token}: a checkpoint state holds no floats (a Double is {{\"double\": \"<hex bits>\"}})"
            )),
            Num::Double(d) => Ok(Value::Double(d)),
        },
        Json::Object(entries) => match (entries.as_slice(), syntax) {
            ([(k, Json::String(s))], _) if k == "decimal" => Decimal::parse(s).map(Value::Decimal),
            ([(k, Json::String(s))], Syntax::State) if k == "double" => double_from_hex(s).map(Value::Double),
            (_, Syntax::Document) => {
                Err("an object value must be exactly {\"decimal\": \"<digits>\"}".into())
            }
            (_, Syntax::State) => Err(
                "an object value must be exactly {\"decimal\": \"<digits>\"} or {\"double\": \"<hex bits>\"}"
                    .into(),
            ),
        },
        Json::Null => Err("null is not a value".into()),
        Json::Array(_) => Err("an array is not a value".into()),
        Json::TooDeep => Err("a value nested deeper than 128 levels".into()),
    }
}

/// The 16 lower-case hex digits of a Double's bits.
pub(crate) fn double_hex(d: f64) -> String {
    format!("{:016x}", d.to_bits())
}

/// Reads 16 lower-case hex digits of a finite Double's bits.
pub(crate) fn double_from_hex(s: &str) -> Result<f64, String> {
    if s.len() != 16 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!(
            "double {s:?} must be the 16 lower-case hex digits of its bits"
        ));
    }
    let bits = u64::from_str_radix(s, 16).map_err(|e| format!("double {s:?}: {e}"))?;
    let d = f64::from_bits(bits);
    if !d.is_finite() {
        return Err(format!("double {s:?} is not finite"));
    }
    Ok(d)
}

/// Writes a scalar: documents as events spell it, states with Doubles as
/// hex bits.
pub(crate) fn write(buf: &mut Vec<u8>, v: &Value, syntax: Syntax) {
    write_ref(buf, v.as_ref(), syntax)
}

/// [`write`] for a borrowed value.
pub(crate) fn write_ref(buf: &mut Vec<u8>, v: ValueRef<'_>, syntax: Syntax) {
    use streamforge_canonical::writer::{int, string};
    match v {
        ValueRef::Integer(i) => int(buf, i),
        ValueRef::Double(d) => match syntax {
            Syntax::Document => {
                // What serde_json writes for a finite f64 (it calls zmij):
                // shortest round trip, with a fraction or an exponent (2.0,
                // -0.0, 1e+300). Documents hold finite doubles only; a
                // non-finite one would be written as serde_json does: null.
                if d.is_finite() {
                    buf.extend_from_slice(zmij::Buffer::new().format_finite(d).as_bytes());
                } else {
                    buf.extend_from_slice(b"null");
                }
            }
            Syntax::State => {
                buf.extend_from_slice(b"{\"double\":");
                string(buf, &double_hex(d));
                buf.push(b'}');
            }
        },
        ValueRef::Decimal(_, text) => {
            buf.extend_from_slice(b"{\"decimal\":");
            string(buf, &String::from_utf8_lossy(text));
            buf.push(b'}');
        }
        ValueRef::String(s) => string(buf, &String::from_utf8_lossy(s)),
        ValueRef::Bool(true) => buf.extend_from_slice(b"true"),
        ValueRef::Bool(false) => buf.extend_from_slice(b"false"),
    }
}
