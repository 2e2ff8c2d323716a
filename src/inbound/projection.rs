//! Reads only what a source maps out of a payload: the JSON Pointers of a
//! source make a trie, and one pass over an item's text descends into the
//! members on those paths and skips every other value without building it
//! (a GitHub push payload is kilobytes, of which a source reads a few
//! strings). What it finds at each pointer is the value
//! `serde_json::Value::pointer` would give on the whole item.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

/// The pointers of a source, as a trie of their reference tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Projection {
    root: Node,
    /// The pointer of each slot.
    pointers: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Node {
    /// Reference tokens (decoded: `~1` is `/`, `~0` is `~`) to children.
    children: Vec<(String, Node)>,
    /// The slot of the pointer that ends here.
    slot: Option<usize>,
}

impl Node {
    fn child(&self, token: &str) -> Option<&Node> {
        self.children
            .iter()
            .find_map(|(t, n)| (t == token).then_some(n))
    }
}

/// The values found in one item, by slot (None: the pointer does not
/// resolve).
pub type Found = Vec<Option<Value>>;

impl Projection {
    /// The projection of `pointers` (each `""` or starting with `/`).
    pub fn new<'a>(pointers: impl IntoIterator<Item = &'a str>) -> Projection {
        let mut p = Projection::default();
        for pointer in pointers {
            if p.slot(pointer).is_some() {
                continue;
            }
            let slot = p.pointers.len();
            p.pointers.push(pointer.to_string());
            let mut node = &mut p.root;
            for token in pointer.split('/').skip(1) {
                let token = token.replace("~1", "/").replace("~0", "~");
                let at = match node.children.iter().position(|(t, _)| *t == token) {
                    Some(i) => i,
                    None => {
                        node.children.push((token, Node::default()));
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[at].1;
            }
            node.slot = Some(slot);
        }
        p
    }

    /// The slot of `pointer`, if it is one of the projection's.
    pub fn slot(&self, pointer: &str) -> Option<usize> {
        self.pointers.iter().position(|p| p == pointer)
    }

    /// One item's values, read from its JSON text.
    pub fn read(&self, text: &[u8]) -> Result<Found, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_slice(text);
        let found = self.read_from(&mut de)?;
        de.end()?;
        Ok(found)
    }

    /// One item's values, from a deserializer positioned on it.
    pub fn read_from<'de, D: Deserializer<'de>>(&self, d: D) -> Result<Found, D::Error> {
        let mut found = vec![None; self.pointers.len()];
        Walk {
            node: &self.root,
            found: &mut found,
        }
        .deserialize(d)?;
        Ok(found)
    }

    /// The items of a JSON array, each read as [`Projection::read`] does.
    pub fn read_array(&self, text: &[u8]) -> Result<Vec<Found>, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_slice(text);
        let items = de.deserialize_seq(Items(self))?;
        de.end()?;
        Ok(items)
    }
}

/// Reads the value at `node` into the slots below it.
struct Walk<'a> {
    node: &'a Node,
    found: &'a mut Found,
}

/// Fills the slots of `node` and its descendants from an already built value.
fn fill(node: &Node, v: &Value, found: &mut Found) {
    if let Some(s) = node.slot {
        found[s] = Some(v.clone());
    }
    for (token, child) in &node.children {
        let next = match v {
            Value::Object(m) => m.get(token),
            Value::Array(a) => token
                .parse::<usize>()
                .ok()
                .filter(|i| i.to_string() == *token)
                .and_then(|i| a.get(i)),
            _ => None,
        };
        if let Some(next) = next {
            fill(child, next, found);
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.node.slot.is_some() {
            // A pointer ends here: the value itself is wanted.
            let v = Value::deserialize(d)?;
            fill(self.node, &v, self.found);
            return Ok(());
        }
        if self.node.children.is_empty() {
            return IgnoredAny::deserialize(d).map(drop);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (node, found) = (self.node, self.found);
        while let Some(key) = map.next_key_seed(Key)? {
            match node.child(&key) {
                Some(child) => map.next_value_seed(Walk {
                    node: child,
                    found: &mut *found,
                })?,
                None => map.next_value::<IgnoredAny>().map(drop)?,
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (node, found) = (self.node, self.found);
        let mut i = 0usize;
        loop {
            let more = match node.child(&i.to_string()) {
                Some(child) => seq
                    .next_element_seed(Walk {
                        node: child,
                        found: &mut *found,
                    })?
                    .is_some(),
                None => seq.next_element::<IgnoredAny>()?.is_some(),
            };
            if !more {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// An object key, borrowed from the text when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(Key)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(s))
    }
    fn visit_str<E>(self, s: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(s))
    }
}

/// The items of a JSON array.
struct Items<'a>(&'a Projection);

impl<'de> Visitor<'de> for Items<'_> {
    type Value = Vec<Found>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of payloads")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Found>, A::Error> {
        let mut out = Vec::new();
        loop {
            let mut found = vec![None; self.0.pointers.len()];
            let seed = Walk {
                node: &self.0.root,
                found: &mut found,
            };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(out);
            }
            out.push(found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The projection finds exactly what `Value::pointer` finds, for any
    /// pointer, on nested objects and arrays, escapes and duplicates.
    #[test]
    fn finds_what_value_pointer_finds() {
        let text = r#"{"id":"evt_1","a/b":{"~x":[10,{"k":"v"},null]},"data":{"object":{"amount":12,"customer":"cus_\u0031","n":{"deep":[1,2]}}},"list":[{"id":1},{"id":2}],"e":"","dup":1,"dup":2,"s":"\"q\""}"#;
        let pointers = [
            "/id",
            "/a~1b/~0x/0",
            "/a~1b/~0x/1/k",
            "/a~1b/~0x/2",
            "/a~1b/~0x/01",
            "/a~1b/~0x/3",
            "/data/object/amount",
            "/data/object/customer",
            "/data/object/n",
            "/data/object/n/deep/1",
            "/list/1/id",
            "/list/-",
            "/e",
            "/dup",
            "/s",
            "/missing/x",
            "/id/x",
            "",
        ];
        let whole: Value = serde_json::from_str(text).unwrap();
        let p = Projection::new(pointers);
        let found = p.read(text.as_bytes()).unwrap();
        for ptr in pointers {
            assert_eq!(
                found[p.slot(ptr).unwrap()].as_ref(),
                whole.pointer(ptr),
                "pointer {ptr:?}"
            );
        }
        let arr = format!("[{text},{{\"id\":\"b\"}},7]");
        let items = p.read_array(arr.as_bytes()).unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[1][0], Some(Value::String("b".into())));
        let whole_slot = p.slot("").unwrap();
        for (i, v) in items[2].iter().enumerate() {
            let want = (i == whole_slot).then(|| Value::from(7));
            assert_eq!(v, &want, "slot {i} of a bare 7");
        }
        assert!(p.read(b"{\"id\":1} x").is_err());
        assert!(p.read(b"{'id':1}").is_err());
    }
}
