//! Bits: varints, a bit writer and reader, Rice codes.

/// A Rice quotient from which the delta is stored in full (64 bits).
pub(crate) const ESCAPE: u64 = 32;

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn get_varint(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *data.get(*at)?;
        *at += 1;
        let bits = u64::from(b & 0x7F);
        if shift == 63 && bits > 1 {
            return None;
        }
        v |= bits << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Writes bits least significant first.
pub(crate) struct BitWriter<'a> {
    pub(crate) out: &'a mut Vec<u8>,
    pub(crate) acc: u64,
    pub(crate) n: u32,
}

impl BitWriter<'_> {
    /// The low `bits` (0..=64) bits of `v`.
    pub(crate) fn put(&mut self, v: u64, bits: u32) {
        if bits == 0 {
            return;
        }
        let v = if bits >= 64 {
            v
        } else {
            v & ((1u64 << bits) - 1)
        };
        self.acc |= v << self.n;
        let total = self.n + bits;
        if total >= 64 {
            self.out.extend_from_slice(&self.acc.to_le_bytes());
            let used = 64 - self.n;
            self.acc = if used >= 64 { 0 } else { v >> used };
            self.n = total - 64;
        } else {
            self.n = total;
        }
    }

    /// Bits written so far.
    pub(crate) fn bits(&self) -> u64 {
        self.out.len() as u64 * 8 + u64::from(self.n)
    }

    pub(crate) fn finish(self) {
        let bytes = self.n.div_ceil(8) as usize;
        self.out
            .extend_from_slice(&self.acc.to_le_bytes()[..bytes.min(8)]);
    }
}

/// Reads what [`BitWriter`] wrote; reading past the end is an error.
pub(crate) struct BitReader<'a> {
    pub(crate) data: &'a [u8],
    /// Bit position.
    pub(crate) at: u64,
}

impl BitReader<'_> {
    pub(crate) fn end(&self) -> u64 {
        self.data.len() as u64 * 8
    }

    /// 64 bits from bit `at`, zeros past the end.
    pub(crate) fn peek_at(&self, at: u64) -> u64 {
        let byte = (at >> 3) as usize;
        let shift = (at & 7) as u32;
        let raw = match self.data.get(byte..byte.saturating_add(16)) {
            Some(s) => {
                let mut b = [0u8; 16];
                b.copy_from_slice(s);
                u128::from_le_bytes(b)
            }
            None => {
                let mut b = [0u8; 16];
                for (d, s) in b.iter_mut().zip(self.data.get(byte..).unwrap_or(&[])) {
                    *d = *s;
                }
                u128::from_le_bytes(b)
            }
        };
        (raw >> shift) as u64
    }

    pub(crate) fn get_at(&self, at: u64, bits: u32) -> Option<u64> {
        if bits == 0 {
            return Some(0);
        }
        if at.checked_add(u64::from(bits))? > self.end() {
            return None;
        }
        let v = self.peek_at(at);
        Some(if bits >= 64 {
            v
        } else {
            v & ((1u64 << bits) - 1)
        })
    }

    pub(crate) fn get(&mut self, bits: u32) -> Option<u64> {
        let v = self.get_at(self.at, bits)?;
        self.at += u64::from(bits);
        Some(v)
    }

    /// A Rice-coded delta with parameter `k`.
    pub(crate) fn rice(&mut self, k: u32) -> Option<u64> {
        let ones = u64::from((!self.peek_at(self.at)).trailing_zeros());
        if ones >= ESCAPE {
            self.at = self.at.checked_add(ESCAPE)?;
            return self.get(64);
        }
        self.at = self.at.checked_add(ones + 1)?;
        if self.at > self.end() {
            return None;
        }
        let r = self.get(k)?;
        Some((ones << k) | r)
    }
}

/// Bits of `v` (0 for 0).
pub(crate) fn width(v: u64) -> u32 {
    64 - v.leading_zeros()
}

/// Rice bits of a delta with parameter `k`.
pub(crate) fn rice_bits(d: u64, k: u32) -> u64 {
    let q = d >> k;
    if q >= ESCAPE {
        ESCAPE + 64
    } else {
        q + 1 + u64::from(k)
    }
}
