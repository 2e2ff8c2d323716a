//! Standard Webhooks (and the `svix-*` aliases).

use super::*;

fn sw_headers(sig: &str, ts: i64) -> HeaderMap {
    headers(&[
        ("webhook-id", SW_ID),
        ("webhook-timestamp", &ts.to_string()),
        ("webhook-signature", sig),
    ])
}

/// A valid `v1,<base64>` for the vector's id under `key` at `ts`.
fn sw_sign(key: &[u8], ts: i64, body: &[u8]) -> String {
    let mut content = format!("{SW_ID}.{ts}.").into_bytes();
    content.extend_from_slice(body);
    format!("v1,{}", b64(&reference_hmac(key, &content)))
}

#[test]
fn standard_webhooks_published_vector() {
    let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
    assert_eq!(
        v.verify(&sw_headers(SW_SIG, SW_TS), SW_BODY, SW_TS),
        Ok(Some(SW_TS))
    );
    // The independent HMAC agrees with the published value.
    let key = Secret::parse(&Scheme::StandardWebhooks, SW_SECRET)
        .unwrap()
        .0;
    assert_eq!(sw_sign(&key, SW_TS, SW_BODY), SW_SIG);
    // The secret without its whsec_ prefix is the same key.
    let bare = verifier(
        Scheme::StandardWebhooks,
        &["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    );
    assert_eq!(
        bare.verify(&sw_headers(SW_SIG, SW_TS), SW_BODY, SW_TS),
        Ok(Some(SW_TS))
    );
}

#[test]
fn standard_webhooks_rust_library_vector() {
    // libraries/rust/src/lib.rs `test_sign` of the spec repository.
    let v = verifier(
        Scheme::StandardWebhooks,
        &["whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"],
    );
    let h = headers(&[
        ("webhook-id", "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk"),
        ("webhook-timestamp", "1649367553"),
        (
            "webhook-signature",
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
        ),
    ]);
    let body = br#"{"email":"test@example.com","username":"test_user"}"#;
    assert_eq!(v.verify(&h, body, 1649367553), Ok(Some(1649367553)));
}

#[test]
fn svix_aliases() {
    let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
    let h = headers(&[
        ("svix-id", SW_ID),
        ("svix-timestamp", "1614265330"),
        ("svix-signature", SW_SIG),
    ]);
    assert_eq!(v.verify(&h, SW_BODY, SW_TS), Ok(Some(SW_TS)));
    // A mix of the two families is not a complete set of either.
    let h = headers(&[
        ("webhook-id", SW_ID),
        ("svix-timestamp", "1614265330"),
        ("webhook-signature", SW_SIG),
    ]);
    assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Missing));
}

#[test]
fn standard_webhooks_missing_each_header() {
    let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
    for name in WEBHOOK_HEADERS {
        let mut h = sw_headers(SW_SIG, SW_TS);
        h.remove(name);
        assert_eq!(
            v.verify(&h, SW_BODY, SW_TS),
            Err(Failure::Missing),
            "{name}"
        );
    }
    assert_eq!(
        v.verify(&HeaderMap::new(), SW_BODY, SW_TS),
        Err(Failure::Missing)
    );
}

#[test]
fn standard_webhooks_malformed() {
    let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
    let at = |ts: &str, sig: &str| {
        headers(&[
            ("webhook-id", SW_ID),
            ("webhook-timestamp", ts),
            ("webhook-signature", sig),
        ])
    };
    for (ts, sig) in [
        ("16142653x0", SW_SIG),
        ("", SW_SIG),
        ("-1614265330", SW_SIG),
        ("+1614265330", SW_SIG),
        ("1614265330.5", SW_SIG),
        ("99999999999999999999999", SW_SIG),
        ("1614265330", ""),
        ("1614265330", "v1,not*base64!"),
        ("1614265330", "v1,bm9wZQ=="), // base64, but 4 bytes, not 32
        ("1614265330", "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
        // only other versions: v1a is ed25519, v2 unknown; never HMAC
        (
            "1614265330",
            "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ),
    ] {
        assert_eq!(
            v.verify(&at(ts, sig), SW_BODY, SW_TS),
            Err(Failure::Malformed),
            "{ts:?} {sig:?}"
        );
    }
    let mut h = sw_headers(SW_SIG, SW_TS);
    h.insert("webhook-id", HeaderValue::from_static(""));
    assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Malformed));
    let mut h = sw_headers(SW_SIG, SW_TS);
    h.insert("webhook-id", HeaderValue::from_bytes(b"msg_\xe9").unwrap());
    assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Malformed));
}

#[test]
fn standard_webhooks_mismatch() {
    let v = verifier(
        Scheme::StandardWebhooks,
        &["whsec_dGhlIG90aGVyIHNlY3JldCBlbnRpcmVseQ=="],
    );
    assert_eq!(
        v.verify(&sw_headers(SW_SIG, SW_TS), SW_BODY, SW_TS),
        Err(Failure::Mismatch)
    );
    let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
    let mut body = SW_BODY.to_vec();
    body[9] ^= 1;
    assert_eq!(
        v.verify(&sw_headers(SW_SIG, SW_TS), &body, SW_TS),
        Err(Failure::Mismatch)
    );
    // The id and the timestamp are signed too.
    let mut h = sw_headers(SW_SIG, SW_TS + 1);
    assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Mismatch));
    h = sw_headers(SW_SIG, SW_TS);
    h.insert("webhook-id", HeaderValue::from_static("msg_other"));
    assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Mismatch));
    // No secret at all matches nothing.
    let none = Verifier {
        scheme: Scheme::StandardWebhooks,
        secrets: vec![],
        tolerance_s: DEFAULT_TOLERANCE_S,
    };
    assert_eq!(
        none.verify(&sw_headers(SW_SIG, SW_TS), SW_BODY, SW_TS),
        Err(Failure::Mismatch)
    );
}

#[test]
fn standard_webhooks_stale_both_ways_after_the_mac() {
    let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
    let h = sw_headers(SW_SIG, SW_TS);
    assert_eq!(
        v.verify(&h, SW_BODY, SW_TS + 412),
        Err(Failure::Stale {
            skew_s: 412,
            tolerance_s: 300
        })
    );
    assert_eq!(
        v.verify(&h, SW_BODY, SW_TS - 301),
        Err(Failure::Stale {
            skew_s: -301,
            tolerance_s: 300
        })
    );
    // The bounds are inclusive.
    assert_eq!(v.verify(&h, SW_BODY, SW_TS + 300), Ok(Some(SW_TS)));
    assert_eq!(v.verify(&h, SW_BODY, SW_TS - 300), Ok(Some(SW_TS)));
    // A forged request hears "mismatch" whatever its timestamp.
    let forged = sw_headers("v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", SW_TS);
    assert_eq!(
        v.verify(&forged, SW_BODY, SW_TS + 100_000),
        Err(Failure::Mismatch)
    );
    // Extreme clocks do not overflow.
    let far = Verifier {
        tolerance_s: 0,
        ..v.clone()
    };
    assert!(matches!(
        far.verify(&h, SW_BODY, i64::MIN),
        Err(Failure::Stale {
            skew_s: i64::MIN,
            ..
        })
    ));
}

#[test]
fn standard_webhooks_rotation_and_several_signatures() {
    // Rotation: the second secret is the one that signed.
    let v = verifier(
        Scheme::StandardWebhooks,
        &["whsec_dGhlIG90aGVyIHNlY3JldCBlbnRpcmVseQ==", SW_SECRET],
    );
    assert_eq!(
        v.verify(&sw_headers(SW_SIG, SW_TS), SW_BODY, SW_TS),
        Ok(Some(SW_TS))
    );
    // Several signatures, one good among junk, bad base64, other versions.
    let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
    let multi = format!(
        "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1,bm9wZQ== v1,%%% \
         v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg== \
         {SW_SIG}  v2,xyz"
    );
    assert_eq!(
        v.verify(&sw_headers(&multi, SW_TS), SW_BODY, SW_TS),
        Ok(Some(SW_TS))
    );
    // A correct MAC under an unknown version is not accepted.
    let v2 = SW_SIG.replacen("v1,", "v2,", 1);
    let both = format!("{v2} v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=");
    assert_eq!(
        v.verify(&sw_headers(&both, SW_TS), SW_BODY, SW_TS),
        Err(Failure::Mismatch)
    );
    // Base64 without padding is accepted.
    let unpadded = SW_SIG.trim_end_matches('=');
    assert_eq!(
        v.verify(&sw_headers(unpadded, SW_TS), SW_BODY, SW_TS),
        Ok(Some(SW_TS))
    );
}

#[test]
fn the_first_of_several_header_values_counts() {
    let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
    let mut h = sw_headers(SW_SIG, SW_TS);
    h.append("webhook-signature", HeaderValue::from_static("garbage"));
    assert_eq!(v.verify(&h, SW_BODY, SW_TS), Ok(Some(SW_TS)));
    let mut h = sw_headers("v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", SW_TS);
    h.append("webhook-signature", HeaderValue::from_static(SW_SIG));
    assert_eq!(v.verify(&h, SW_BODY, SW_TS), Err(Failure::Mismatch));
}
