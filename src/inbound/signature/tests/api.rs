//! The rest of the API.

use super::*;

#[test]
fn reasons_and_details() {
    let stale = Failure::Stale {
        skew_s: -412,
        tolerance_s: 300,
    };
    let all = [
        Failure::Missing,
        Failure::Malformed,
        stale.clone(),
        Failure::Mismatch,
    ];
    let reasons: Vec<_> = all.iter().map(Failure::reason).collect();
    assert_eq!(reasons, ["missing", "malformed", "stale", "mismatch"]);
    assert_eq!(
        Failure::Missing.detail(&Scheme::Stripe),
        "the Stripe-Signature header is missing"
    );
    assert_eq!(
        Failure::Mismatch.detail(&Scheme::Stripe),
        "no v1 signature in Stripe-Signature matches the source's secret(s)"
    );
    assert_eq!(
        stale.detail(&Scheme::StandardWebhooks),
        "the signature's timestamp is 412 s away from the server's clock (tolerance 300 s)"
    );
    assert_eq!(
        Failure::Missing.detail(&hmac_scheme(Encoding::Hex, "")),
        "the X-Signature header is missing"
    );
    assert!(Failure::Missing
        .detail(&Scheme::GitHub)
        .contains("X-Hub-Signature-256"));
    assert!(Failure::Malformed
        .detail(&Scheme::StandardWebhooks)
        .contains("webhook-signature"));
}

#[test]
fn signature_header_names() {
    let names = |scheme: Scheme| verifier(scheme, &[]).signature_headers();
    assert_eq!(
        names(Scheme::StandardWebhooks),
        [
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
            "svix-id",
            "svix-timestamp",
            "svix-signature"
        ]
    );
    assert_eq!(names(Scheme::Stripe), ["stripe-signature"]);
    assert_eq!(names(Scheme::GitHub), ["x-hub-signature-256"]);
    assert_eq!(names(hmac_scheme(Encoding::Hex, "")), ["x-signature"]);
}

#[test]
fn schemes_round_trip_through_serde() {
    for scheme in [
        Scheme::StandardWebhooks,
        Scheme::Stripe,
        Scheme::GitHub,
        hmac_scheme(Encoding::Base64, "sha256="),
    ] {
        let json = serde_json::to_string(&scheme).unwrap();
        assert_eq!(serde_json::from_str::<Scheme>(&json).unwrap(), scheme);
    }
    let hmac: Scheme =
        serde_json::from_str(r#"{"Hmac":{"header":"X-Sig","encoding":"Hex"}}"#).unwrap();
    assert_eq!(
        hmac,
        Scheme::Hmac(HmacScheme {
            header: "X-Sig".into(),
            encoding: Encoding::Hex,
            prefix: String::new()
        })
    );
}

#[test]
fn rfc_4231_case_2_for_the_reference_hmac() {
    assert_eq!(
        hex(&reference_hmac(b"Jefe", b"what do ya want for nothing?")),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    // RFC 4231 case 6: a key longer than the block is hashed first.
    assert_eq!(
        hex(&reference_hmac(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First"
        )),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
    // And the crate's HMAC agrees with it.
    let mut mac = HmacSha256::new_from_slice(b"Jefe").unwrap();
    mac.update(b"what do ya want for nothing?");
    assert_eq!(
        mac.finalize().into_bytes().as_slice(),
        reference_hmac(b"Jefe", b"what do ya want for nothing?")
    );
}
