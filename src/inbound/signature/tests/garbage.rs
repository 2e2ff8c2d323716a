//! No panics on garbage.

use super::*;

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, alphabet: Option<&[u8]>) -> Vec<u8> {
        let len = (self.next() % 90) as usize;
        (0..len)
            .map(|_| match alphabet {
                Some(a) => a[(self.next() % a.len() as u64) as usize],
                None => self.next() as u8,
            })
            .collect()
    }
}

#[test]
fn garbage_never_panics() {
    let schemes = [
        verifier(Scheme::StandardWebhooks, &[SW_SECRET]),
        verifier(Scheme::Stripe, &[STRIPE_SECRET]),
        verifier(Scheme::GitHub, &[GH_SECRET]),
        verifier(hmac_scheme(Encoding::Hex, "sha256="), &["k"]),
        verifier(hmac_scheme(Encoding::Base64, ""), &["k"]),
    ];
    let names = [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "svix-id",
        "svix-timestamp",
        "svix-signature",
        "stripe-signature",
        "x-hub-signature-256",
        "x-signature",
    ];
    let structured: &[u8] = b"tv1a0=,. \t+/whsec_sha256=ABCdef0123456789-9\xc3\xa9";
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..3000u32 {
        let mut h = HeaderMap::new();
        for name in names {
            if rng.next().is_multiple_of(4) {
                continue;
            }
            let mut bytes = if round.is_multiple_of(2) {
                rng.bytes(Some(structured))
            } else {
                rng.bytes(None)
            };
            // Keep what a header value may hold (obs-text included).
            bytes.retain(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f));
            h.append(name, HeaderValue::from_bytes(&bytes).unwrap());
        }
        let body = rng.bytes(None);
        let now = rng.next() as i64;
        for v in &schemes {
            if let Err(f) = v.verify(&h, &body, now) {
                assert!(!f.detail(&v.scheme).is_empty());
                seen.insert(f.reason());
            }
        }
    }
    assert!(
        seen.contains("missing") && seen.contains("malformed"),
        "{seen:?}"
    );
}
