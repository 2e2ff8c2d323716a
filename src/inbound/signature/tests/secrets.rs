//! Secrets: their forms per scheme, and loading them from the
//! environment or a file.

use super::*;

#[test]
fn secret_parse_per_scheme() {
    let sw = Secret::parse(
        &Scheme::StandardWebhooks,
        "  whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
    )
    .unwrap();
    let bare = Secret::parse(
        &Scheme::StandardWebhooks,
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    )
    .unwrap();
    assert_eq!(sw.0, bare.0);
    assert_eq!(sw.0.len(), 24);
    let err = Secret::parse(&Scheme::StandardWebhooks, "whsec_not*base64").unwrap_err();
    assert!(!err.contains("not*base64"), "{err}");
    assert!(Secret::parse(&Scheme::StandardWebhooks, "whsec_").is_err());
    for scheme in [
        Scheme::StandardWebhooks,
        Scheme::Stripe,
        Scheme::GitHub,
        hmac_scheme(Encoding::Hex, ""),
    ] {
        assert!(Secret::parse(&scheme, "").is_err());
        assert!(Secret::parse(&scheme, " \t\n").is_err());
    }
    assert_eq!(
        Secret::parse(&Scheme::Stripe, " whsec_abc ").unwrap().0,
        b"whsec_abc"
    );
    assert_eq!(
        Secret::parse(&Scheme::GitHub, GH_SECRET).unwrap().0,
        GH_SECRET.as_bytes()
    );
    assert_eq!(
        Secret::parse(&hmac_scheme(Encoding::Base64, ""), "whsec_abc")
            .unwrap()
            .0,
        b"whsec_abc"
    );
}

#[test]
fn secrets_never_show_in_debug() {
    let s = Secret::parse(&Scheme::GitHub, "hunter2").unwrap();
    assert_eq!(format!("{s:?}"), "Secret(..)");
    let v = verifier(Scheme::GitHub, &["hunter2"]);
    let shown = format!("{v:?}");
    assert!(
        !shown.contains("hunter2") && !shown.contains("104, 117"),
        "{shown}"
    );
}

#[test]
fn secrets_from_environment_text() {
    let origin = Origin::Env("STREAMFORGE_TEST_SECRETS");
    let got = from_text(
        &Scheme::StandardWebhooks,
        &format!(
            " {SW_SECRET},whsec_dGhlIG90aGVyIHNlY3JldCBlbnRpcmVseQ==\n\tMfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,"
        ),
        &origin,
    )
    .unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].0, got[2].0);
    let text = format!("{SW_SECRET} whsec_s3cr3t!");
    let err = from_text(&Scheme::StandardWebhooks, &text, &origin).unwrap_err();
    assert!(err.contains("STREAMFORGE_TEST_SECRETS"), "{err}");
    assert!(err.contains("secret 2"), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
    let err = from_text(&Scheme::Stripe, " , \n", &origin).unwrap_err();
    assert!(err.contains("STREAMFORGE_TEST_SECRETS"), "{err}");
}

#[test]
fn secrets_from_a_file() {
    let path = std::env::temp_dir().join(format!(
        "streamforge-signature-test-{}.secrets",
        std::process::id()
    ));
    std::fs::write(
        &path,
        "# current\nIt's a Secret to Everybody\r\n\n   \n  # previous, until Friday\n  old secret  \n",
    )
    .unwrap();
    let got = load_secrets(&Scheme::GitHub, None, Some(&path)).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].0, GH_SECRET.as_bytes());
    assert_eq!(got[1].0, b"old secret");
    // A whole line is one secret: the GitHub example (with spaces) verifies.
    let v = Verifier {
        scheme: Scheme::GitHub,
        secrets: got,
        tolerance_s: DEFAULT_TOLERANCE_S,
    };
    assert_eq!(
        v.verify(&headers(&[("X-Hub-Signature-256", GH_SIG)]), GH_BODY, 0),
        Ok(None)
    );

    std::fs::write(&path, "# nothing here\n\n").unwrap();
    let err = load_secrets(&Scheme::GitHub, None, Some(&path)).unwrap_err();
    assert!(err.contains(&path.display().to_string()), "{err}");

    std::fs::write(
        &path,
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\nwhsec_t0p*secret\n",
    )
    .unwrap();
    let err = load_secrets(&Scheme::StandardWebhooks, None, Some(&path)).unwrap_err();
    assert!(
        err.contains("line 2") && err.contains(&path.display().to_string()),
        "{err}"
    );
    assert!(!err.contains("t0p"), "{err}");

    std::fs::remove_file(&path).unwrap();
    let err = load_secrets(&Scheme::GitHub, None, Some(&path)).unwrap_err();
    assert!(err.contains(&path.display().to_string()), "{err}");
}

#[test]
fn load_secrets_wants_exactly_one_source() {
    let var = "STREAMFORGE_SIGNATURE_TEST_NEVER_SET_7f3a";
    let err = load_secrets(&Scheme::Stripe, Some(var), None).unwrap_err();
    assert!(err.contains(var), "{err}");
    assert!(load_secrets(&Scheme::Stripe, None, None).is_err());
    let path = std::env::temp_dir().join("x");
    assert!(load_secrets(&Scheme::Stripe, Some(var), Some(&path)).is_err());
}
