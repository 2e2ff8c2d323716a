//! GitHub, and a plain HMAC of the body in a header of one's choosing.

use super::*;

#[test]
fn github_documented_example() {
    let v = verifier(Scheme::GitHub, &[GH_SECRET]);
    let h = headers(&[("X-Hub-Signature-256", GH_SIG)]);
    assert_eq!(v.verify(&h, GH_BODY, 0), Ok(None));
    assert_eq!(
        format!(
            "sha256={}",
            hex(&reference_hmac(GH_SECRET.as_bytes(), GH_BODY))
        ),
        GH_SIG
    );
    let upper = format!("sha256={}", GH_SIG[7..].to_uppercase());
    assert_eq!(
        v.verify(&headers(&[("x-hub-signature-256", &upper)]), GH_BODY, 0),
        Ok(None)
    );
}

#[test]
fn github_failures() {
    let v = verifier(Scheme::GitHub, &[GH_SECRET]);
    // The SHA-1 header is not accepted.
    let sha1 = headers(&[(
        "X-Hub-Signature",
        "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59",
    )]);
    assert_eq!(v.verify(&sha1, GH_BODY, 0), Err(Failure::Missing));
    for value in [
        "",
        &GH_SIG[7..], // no prefix
        "sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1",
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1g",
        "sha256=",
    ] {
        assert_eq!(
            v.verify(&headers(&[("X-Hub-Signature-256", value)]), GH_BODY, 0),
            Err(Failure::Malformed),
            "{value:?}"
        );
    }
    let wrong = verifier(Scheme::GitHub, &["It's a Secret to Nobody"]);
    let h = headers(&[("X-Hub-Signature-256", GH_SIG)]);
    assert_eq!(wrong.verify(&h, GH_BODY, 0), Err(Failure::Mismatch));
    assert_eq!(v.verify(&h, b"Hello, World?", 0), Err(Failure::Mismatch));
    let rotated = verifier(Scheme::GitHub, &["old one", GH_SECRET]);
    assert_eq!(rotated.verify(&h, GH_BODY, 0), Ok(None));
}

#[test]
fn hmac_hex_and_base64() {
    let body = b"{\"n\":1}";
    let tag = reference_hmac(b"k3y", body);
    let hex_v = verifier(hmac_scheme(Encoding::Hex, ""), &["k3y"]);
    assert_eq!(
        hex_v.verify(&headers(&[("x-signature", &hex(&tag))]), body, 0),
        Ok(None)
    );
    let prefixed = verifier(hmac_scheme(Encoding::Hex, "sha256="), &["k3y"]);
    let value = format!("sha256={}", hex(&tag));
    assert_eq!(
        prefixed.verify(&headers(&[("X-SIGNATURE", &value)]), body, 0),
        Ok(None)
    );
    assert_eq!(
        prefixed.verify(&headers(&[("X-Signature", &hex(&tag))]), body, 0),
        Err(Failure::Malformed)
    );
    let b64_v = verifier(hmac_scheme(Encoding::Base64, ""), &["k3y"]);
    let padded = b64(&tag);
    let unpadded = padded.trim_end_matches('=').to_string();
    for value in [&padded, &unpadded] {
        assert_eq!(
            b64_v.verify(&headers(&[("X-Signature", value)]), body, 0),
            Ok(None)
        );
    }
    // Hex where base64 is expected is malformed (64 hex digits decode to 48 bytes).
    assert_eq!(
        b64_v.verify(&headers(&[("X-Signature", &hex(&tag))]), body, 0),
        Err(Failure::Malformed)
    );
    assert_eq!(
        b64_v.verify(&headers(&[("X-Signature", &padded)]), b"{\"n\":2}", 0),
        Err(Failure::Mismatch)
    );
    assert_eq!(
        b64_v.verify(&headers(&[("X-Other", &padded)]), body, 0),
        Err(Failure::Missing)
    );
    // A header name that cannot exist is simply missing.
    let odd = verifier(
        Scheme::Hmac(HmacScheme {
            header: "bad header\n".to_string(),
            encoding: Encoding::Hex,
            prefix: String::new(),
        }),
        &["k3y"],
    );
    assert_eq!(
        odd.verify(&HeaderMap::new(), body, 0),
        Err(Failure::Missing)
    );
}
