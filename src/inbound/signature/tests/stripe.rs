//! Stripe.

use super::*;

/// The hex `v1` Stripe sends, from the independent HMAC: the key is the
/// whole secret text, whsec_ included.
fn stripe_sign(secret: &str, ts: i64, body: &[u8]) -> String {
    let mut payload = format!("{ts}.").into_bytes();
    payload.extend_from_slice(body);
    hex(&reference_hmac(secret.as_bytes(), &payload))
}

fn stripe_headers(value: &str) -> HeaderMap {
    headers(&[("Stripe-Signature", value)])
}

#[test]
fn stripe_independent_vector() {
    let v = verifier(Scheme::Stripe, &[STRIPE_SECRET]);
    let sig = stripe_sign(STRIPE_SECRET, STRIPE_TS, STRIPE_BODY);
    // Test mode also sends a (fake) v0, ignored.
    let header = format!(
        "t={STRIPE_TS},v1={sig},v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"
    );
    assert_eq!(
        v.verify(&stripe_headers(&header), STRIPE_BODY, STRIPE_TS),
        Ok(Some(STRIPE_TS))
    );
    // Upper-case hex decodes the same.
    let upper = format!("t={STRIPE_TS},v1={}", sig.to_uppercase());
    assert_eq!(
        v.verify(&stripe_headers(&upper), STRIPE_BODY, STRIPE_TS),
        Ok(Some(STRIPE_TS))
    );
    // Keying with the base64-decoded part (the Standard Webhooks way) is wrong for Stripe.
    let decoded = BASE64
        .decode("test5eCretForStripeSigning")
        .unwrap_or_default();
    let mut payload = format!("{STRIPE_TS}.").into_bytes();
    payload.extend_from_slice(STRIPE_BODY);
    let wrong = format!(
        "t={STRIPE_TS},v1={}",
        hex(&reference_hmac(&decoded, &payload))
    );
    assert_eq!(
        v.verify(&stripe_headers(&wrong), STRIPE_BODY, STRIPE_TS),
        Err(Failure::Mismatch)
    );
}

#[test]
fn stripe_missing_and_malformed() {
    let v = verifier(Scheme::Stripe, &[STRIPE_SECRET]);
    assert_eq!(
        v.verify(&HeaderMap::new(), STRIPE_BODY, STRIPE_TS),
        Err(Failure::Missing)
    );
    let sig = stripe_sign(STRIPE_SECRET, STRIPE_TS, STRIPE_BODY);
    for value in [
        String::new(),
        format!("v1={sig}"),                         // no t=
        format!("t=14927745x7,v1={sig}"),            // non-numeric t
        format!("t=,v1={sig}"),                      // empty t
        format!("t=-1492774577,v1={sig}"),           // signed t
        format!("t={STRIPE_TS}"),                    // no v1
        format!("t={STRIPE_TS},v0={sig}"),           // v0 only: ignored
        format!("t={STRIPE_TS},v2={sig}"),           // unknown scheme only
        format!("t={STRIPE_TS},v1=zz{}", &sig[2..]), // bad hex
        format!("t={STRIPE_TS},v1={}", &sig[1..]),   // odd length
        format!("t={STRIPE_TS},v1={}", &sig[2..]),   // 31 bytes
        format!("t={STRIPE_TS};v1={sig}"),           // wrong separator
    ] {
        assert_eq!(
            v.verify(&stripe_headers(&value), STRIPE_BODY, STRIPE_TS),
            Err(Failure::Malformed),
            "{value:?}"
        );
    }
    let h = {
        let mut h = HeaderMap::new();
        h.insert(
            "stripe-signature",
            HeaderValue::from_bytes(b"t=1492774577,v1=\xff\xfe").unwrap(),
        );
        h
    };
    assert_eq!(
        v.verify(&h, STRIPE_BODY, STRIPE_TS),
        Err(Failure::Malformed)
    );
}

#[test]
fn stripe_mismatch_stale_rotation_several() {
    let v = verifier(Scheme::Stripe, &[STRIPE_SECRET]);
    let sig = stripe_sign(STRIPE_SECRET, STRIPE_TS, STRIPE_BODY);
    let good = format!("t={STRIPE_TS},v1={sig}");
    // Wrong secret.
    let other = stripe_sign("whsec_another", STRIPE_TS, STRIPE_BODY);
    assert_eq!(
        v.verify(
            &stripe_headers(&format!("t={STRIPE_TS},v1={other}")),
            STRIPE_BODY,
            STRIPE_TS
        ),
        Err(Failure::Mismatch)
    );
    // Body changed by one byte.
    let mut body = STRIPE_BODY.to_vec();
    *body.last_mut().unwrap() = b' ';
    assert_eq!(
        v.verify(&stripe_headers(&good), &body, STRIPE_TS),
        Err(Failure::Mismatch)
    );
    // The timestamp is signed.
    let shifted = format!("t={},v1={sig}", STRIPE_TS + 1);
    assert_eq!(
        v.verify(&stripe_headers(&shifted), STRIPE_BODY, STRIPE_TS),
        Err(Failure::Mismatch)
    );
    // Stale both ways, with the skew.
    assert_eq!(
        v.verify(&stripe_headers(&good), STRIPE_BODY, STRIPE_TS + 412),
        Err(Failure::Stale {
            skew_s: 412,
            tolerance_s: 300
        })
    );
    assert_eq!(
        v.verify(&stripe_headers(&good), STRIPE_BODY, STRIPE_TS - 1000),
        Err(Failure::Stale {
            skew_s: -1000,
            tolerance_s: 300
        })
    );
    // Rotation: the second secret signed.
    let rotated = verifier(Scheme::Stripe, &["whsec_old", STRIPE_SECRET]);
    assert_eq!(
        rotated.verify(&stripe_headers(&good), STRIPE_BODY, STRIPE_TS),
        Ok(Some(STRIPE_TS))
    );
    // Several v1 (Stripe signs with each active secret), one matches;
    // spaces around items and unknown keys are tolerated.
    let several = format!("t={STRIPE_TS}, v1={other}, v1=nothex, v1={sig}, foo=bar, v0={sig}");
    assert_eq!(
        v.verify(&stripe_headers(&several), STRIPE_BODY, STRIPE_TS),
        Ok(Some(STRIPE_TS))
    );
    // The first t counts.
    let two_t = format!("t={STRIPE_TS},t=1,v1={sig}");
    assert_eq!(
        v.verify(&stripe_headers(&two_t), STRIPE_BODY, STRIPE_TS),
        Ok(Some(STRIPE_TS))
    );
}
