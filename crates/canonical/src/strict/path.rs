//! Where in a document a value sits, for error messages.

/// A JSON path, built as validation descends and rendered only for errors:
/// `patterns[0].stages[2].where.all[1]`.
#[derive(Clone, Copy)]
pub struct Path<'p> {
    parent: Option<&'p Path<'p>>,
    seg: Seg<'p>,
}

#[derive(Clone, Copy)]
enum Seg<'p> {
    Root,
    Key(&'p str),
    Index(usize),
}

impl<'p> Path<'p> {
    /// The empty path (the document itself).
    pub fn root() -> Path<'static> {
        Path {
            parent: None,
            seg: Seg::Root,
        }
    }

    /// `self.key`
    pub fn key(&'p self, key: &'p str) -> Path<'p> {
        Path {
            parent: Some(self),
            seg: Seg::Key(key),
        }
    }

    /// `self[index]`
    pub fn index(&'p self, index: usize) -> Path<'p> {
        Path {
            parent: Some(self),
            seg: Seg::Index(index),
        }
    }

    /// The rendered path.
    pub fn render(&self) -> String {
        let mut segs = Vec::new();
        let mut at = Some(self);
        while let Some(p) = at {
            segs.push(p.seg);
            at = p.parent;
        }
        let mut out = String::new();
        for seg in segs.into_iter().rev() {
            match seg {
                Seg::Root => {}
                Seg::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Seg::Index(i) => {
                    out.push('[');
                    out.push_str(&i.to_string());
                    out.push(']');
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render() {
        let root = Path::root();
        let p = root.key("patterns");
        let p0 = p.index(0);
        let s = p0.key("stages");
        let s2 = s.index(2);
        let w = s2.key("where");
        assert_eq!(w.render(), "patterns[0].stages[2].where");
        assert_eq!(root.render(), "");
    }
}
