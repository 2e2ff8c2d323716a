//! JSON re-indented for reading (`patterns show`): keys keep their order
//! and scalars their spelling.

/// The JSON text re-indented for reading: a value that fits in 80 columns
/// stays on one line, larger ones get one member per line. Keys keep their
/// order and scalars their spelling (no reparse into numbers).
pub(super) fn indented(json: &str) -> anyhow::Result<String> {
    // Valid JSON only: the walk below relies on it.
    serde_json::from_str::<serde::de::IgnoredAny>(json)
        .map_err(|e| anyhow::anyhow!("unexpected answer ({e})"))?;
    let bytes = json.as_bytes();
    let mut at = 0;
    let node = Node::read(bytes, &mut at);
    let mut out = String::new();
    node.write(&mut out, 0, 0);
    Ok(out)
}

/// A JSON value with its scalars (and keys) as written.
enum Node<'a> {
    Scalar(&'a str),
    Array(Vec<Node<'a>>),
    Object(Vec<(&'a str, Node<'a>)>),
}

impl<'a> Node<'a> {
    fn read(b: &'a [u8], at: &mut usize) -> Node<'a> {
        skip_ws(b, at);
        match b.get(*at) {
            Some(b'{') => {
                *at += 1;
                let mut members = Vec::new();
                loop {
                    skip_ws(b, at);
                    match b.get(*at) {
                        Some(b'}') | None => {
                            *at += 1;
                            return Node::Object(members);
                        }
                        Some(b',') => *at += 1,
                        _ => {
                            let key = string_token(b, at);
                            skip_ws(b, at);
                            *at += 1; // ':'
                            members.push((key, Node::read(b, at)));
                        }
                    }
                }
            }
            Some(b'[') => {
                *at += 1;
                let mut items = Vec::new();
                loop {
                    skip_ws(b, at);
                    match b.get(*at) {
                        Some(b']') | None => {
                            *at += 1;
                            return Node::Array(items);
                        }
                        Some(b',') => *at += 1,
                        _ => items.push(Node::read(b, at)),
                    }
                }
            }
            Some(b'"') => Node::Scalar(string_token(b, at)),
            _ => {
                let start = *at;
                while *at < b.len() && !b",]} \t\r\n".contains(&b[*at]) {
                    *at += 1;
                }
                // Cut at ASCII delimiters of a `str`: still UTF-8.
                Node::Scalar(std::str::from_utf8(&b[start..*at]).unwrap_or(""))
            }
        }
    }

    /// The value on one line (`{"a": 1, "b": [2, 3]}`).
    fn flat(&self) -> String {
        match self {
            Node::Scalar(s) => (*s).to_string(),
            Node::Array(items) => {
                let inner: Vec<String> = items.iter().map(Node::flat).collect();
                format!("[{}]", inner.join(", "))
            }
            Node::Object(members) => {
                let inner: Vec<String> = members
                    .iter()
                    .map(|(k, v)| format!("{k}: {}", v.flat()))
                    .collect();
                format!("{{{}}}", inner.join(", "))
            }
        }
    }

    /// Writes the value at column `col` (where the current line already is)
    /// with members indented by `indent + 2`.
    fn write(&self, out: &mut String, indent: usize, col: usize) {
        let flat = self.flat();
        if col + flat.len() <= 80 || matches!(self, Node::Scalar(_)) {
            out.push_str(&flat);
            return;
        }
        let pad = " ".repeat(indent + 2);
        let (open, close, n) = match self {
            Node::Array(items) => ('[', ']', items.len()),
            Node::Object(members) => ('{', '}', members.len()),
            Node::Scalar(_) => unreachable!("written flat above"),
        };
        out.push(open);
        for i in 0..n {
            out.push('\n');
            out.push_str(&pad);
            match self {
                Node::Array(items) => items[i].write(out, indent + 2, indent + 2),
                Node::Object(members) => {
                    let (k, v) = &members[i];
                    out.push_str(k);
                    out.push_str(": ");
                    v.write(out, indent + 2, indent + 2 + k.len() + 2);
                }
                Node::Scalar(_) => {}
            }
            if i + 1 < n {
                out.push(',');
            }
        }
        out.push('\n');
        out.push_str(&" ".repeat(indent));
        out.push(close);
    }
}

fn skip_ws(b: &[u8], at: &mut usize) {
    while *at < b.len() && b[*at].is_ascii_whitespace() {
        *at += 1;
    }
}

/// A string token with its quotes, as written.
fn string_token<'a>(b: &'a [u8], at: &mut usize) -> &'a str {
    let start = *at;
    *at += 1;
    while *at < b.len() {
        match b[*at] {
            b'\\' => *at += 2,
            b'"' => {
                *at += 1;
                break;
            }
            _ => *at += 1,
        }
    }
    // Cut at ASCII quotes of a `str`: still UTF-8.
    std::str::from_utf8(&b[start..(*at).min(b.len())]).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indented_keeps_order_and_spelling() {
        let json = r#"{"z":1E2,"a":[{"kind":"x"},"s\"]"],"long":["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","c"]}"#;
        assert_eq!(
            indented(json).expect("valid"),
            "{\n  \"z\": 1E2,\n  \"a\": [{\"kind\": \"x\"}, \"s\\\"]\"],\n  \"long\": [\n    \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\n    \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\",\n    \"c\"\n  ]\n}"
        );
    }
}
