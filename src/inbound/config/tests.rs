use super::*;

fn parts() -> Vec<String> {
    vec!["p0".into(), "stripe".into()]
}

#[test]
fn every_mistake_is_named_by_its_path() {
    let sources = serde_json::json!({
        "stripe": {
            "partition": "Stripe",
            "id": {"constant": "x"},
            "key": {"pointer": "data/object/customer"},
            "value": {"pointer": "/a~2"},
            "timestamp": {"pointer": "/created", "unit": "sec"},
            "signature": {"scheme": "stripe", "secret": "whsec_x"},
            "extra": 1
        },
        "bad name": {}
    });
    let watermarks = serde_json::json!({"nope": {"idle_after": 1}, "p0": {"idle_after": 0}});
    let errs = validate(Some(sources), Some(watermarks), &parts(), Secrets::Skip).unwrap_err();
    let all = errs.join("\n");
    for want in [
        "sources.stripe.partition: \"Stripe\" is not a partition of the pipeline (its partitions: \"p0\", \"stripe\")",
        "sources.stripe.id.constant: an id is never a constant",
        "sources.stripe.key.pointer: \"data/object/customer\" is not a JSON Pointer",
        "sources.stripe.value.pointer: \"/a~2\" has \"~2\"",
        "sources.stripe.timestamp.unit: expected one of s, ms, us, ns, rfc3339, got \"sec\"",
        "sources.stripe.signature.secret: secrets never go in the pipeline file",
        "sources.stripe.extra: unknown field",
        "sources.bad name: a source name",
        "watermarks.nope: \"nope\" is not a partition",
        "watermarks.p0.idle_after: expected an integer > 0",
    ] {
        assert!(all.contains(want), "missing {want:?} in:\n{all}");
    }
}

#[test]
fn a_valid_declaration_and_the_pipeline_json() {
    let sources = serde_json::json!({
        "gh": {
            "partition": "p0",
            "signature": {"scheme": "github", "secret_env": "GH_SECRET"},
            "id": {"header": "X-GitHub-Delivery"},
            "key": {"pointer": "/repository/full_name"},
            "value": {"constant": 1},
            "timestamp": {"pointer": "/repository/pushed_at", "unit": "s"},
            "filter": {"header": "X-GitHub-Event", "equals": "push"}
        }
    });
    let wm = serde_json::json!({"p0": {"max_out_of_orderness": 5000, "idle_after": 60000}});
    let ib = validate(Some(sources), Some(wm), &parts(), Secrets::Skip).unwrap();
    let s = &ib.sources["gh"];
    assert_eq!(s.id, Field::Header("x-github-delivery".into()));
    assert_eq!(s.unit, Unit::S);
    assert_eq!(s.filters.len(), 1);
    assert_eq!(
        ib.watermarks["p0"],
        Strategy {
            max_out_of_orderness: Some(5000),
            idle_after_ms: Some(60000)
        }
    );
    let j = ib.pipeline_json("{\"partitions\":[\"p0\"]}".into());
    assert!(
        j.starts_with("{\"partitions\":[\"p0\"],\"sources\":{\"gh\":"),
        "{j}"
    );
    assert!(
        j.ends_with(
            ",\"watermarks\":{\"p0\":{\"idle_after\":60000,\"max_out_of_orderness\":5000}}}"
        ),
        "{j}"
    );
    // without them the engine's JSON is untouched
    let none = Inbound::default();
    assert_eq!(none.pipeline_json("{\"a\":1}".into()), "{\"a\":1}");
}

#[test]
fn split_leaves_a_plain_pipeline_byte_for_byte() {
    let plain =
        br#"{ "partitions": ["p0"], "windows": {"w": {"kind":"fixed","size":10}}, "lateness": 0 }"#;
    let (rest, s, w) = split_pipeline(plain).unwrap();
    assert_eq!((rest.as_slice(), s, w), (&plain[..], None, None));
    let with =
        br#"{"partitions":["p0"],"windows":{},"lateness":0,"watermarks":{"p0":{"idle_after":5}}}"#;
    let (rest, s, w) = split_pipeline(with).unwrap();
    assert!(s.is_none() && w.is_some());
    assert!(!String::from_utf8(rest).unwrap().contains("watermarks"));
}
