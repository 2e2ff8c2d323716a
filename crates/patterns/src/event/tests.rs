use super::*;

fn ok(s: &str) -> Event {
    parse_event(s.as_bytes()).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn err(s: &str, names: &str) {
    let e = parse_event(s.as_bytes()).expect_err(s);
    assert!(e.contains(names), "{s}: {e:?} should name {names:?}");
}

#[test]
fn parses_every_type_exactly() {
    let e = ok(
        r#"{"id":"e1","key":"","kind":"k","time":0,"fields":{"i":-0,"d":1E2,"x":15e-1,"z":-0.0,"m":{"decimal":"-12.50"},"s":"t","b":false}}"#,
    );
    assert_eq!(e.key(), "");
    let f = |n: &str| e.field(n).unwrap();
    assert_eq!(f("i"), Value::Integer(0));
    assert_eq!(f("d"), Value::Double(100.0));
    assert_eq!(f("x"), Value::Double(1.5));
    assert_eq!(f("z"), Value::Double(-0.0));
    assert!(matches!(f("m"), Value::Decimal(d) if d.as_str() == "-12.50"));
    assert_eq!(f("s"), Value::String("t".into()));
    assert_eq!(f("b"), Value::Bool(false));
    let names: Vec<String> = e.fields().map(|(k, _)| k).collect();
    assert_eq!(names, ["i", "d", "x", "z", "m", "s", "b"]);
    assert_eq!(
        ok(r#"{"id":"e","key":"k","kind":"k","time":9007199254740991}"#).field_count(),
        0
    );
}

/// The one-pass reader takes only what the general reader takes, and
/// reads it the same.
#[test]
fn the_one_pass_reader_agrees_with_the_general_reader() {
    let texts = [
        r#"{"id":"e1","key":"","kind":"k","time":0,"fields":{"i":-0,"d":1E2,"x":15e-1,"z":-0.0,"m":{"decimal":"-12.50"},"s":"t","b":false,"t":true}}"#,
        r#" { "id" : "e" , "key" : "k" , "kind" : "k" , "time" : 1 , "fields" : { } } "#,
        "{\"id\":\"e\",\"key\":\"k\",\"kind\":\"k\",\"time\":1}\r",
        r#"{"fields":{"a":1},"time":5,"kind":"x","key":"é","id":"ü"}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":{ "decimal" : "1" }}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":"\u0041"}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":1,"a":2}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"id":"f"}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":01}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":1.}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":-}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":1e}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":1e+5}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":{"decimal":"1."}}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":{"decimal":"1","x":1}}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"":1}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":null}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1.0}"#,
        r#"{"id":"e","key":"k","kind":"k","time":-1}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1} x"#,
        r#"{"id":"","key":"k","kind":"k","time":1}"#,
        r#"{"id":"e","key":"k","kind":"k"}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":tru}}"#,
        r#"{"id":"e","key":"k","kind":"k","time":1,"fields":{"a":1 "b":2}}"#,
        "{\"id\":\"e\u{1}\",\"key\":\"k\",\"kind\":\"k\",\"time\":1}",
        "{}",
        "",
        "[]",
    ];
    for t in texts {
        let general = parse_general(t.as_bytes());
        let fast = EventParser::default().fast(t.as_bytes());
        if let Some(f) = &fast {
            assert_eq!(general.as_ref(), Ok(f), "{t}");
        }
        assert_eq!(EventParser::default().parse(t.as_bytes()), general, "{t}");
    }
    assert!(EventParser::default().fast(texts[0].as_bytes()).is_some());
    assert!(EventParser::default().fast(texts[1].as_bytes()).is_some());
    assert!(EventParser::default().fast(texts[3].as_bytes()).is_some());
    let long = "x".repeat(300);
    let t = format!(r#"{{"id":"{long}","key":"k","kind":"k","time":1}}"#);
    assert!(EventParser::default().fast(t.as_bytes()).is_none());
    assert!(parse_event(t.as_bytes()).is_err());
    let mut many: Vec<String> = (0..64).map(|i| format!("\"f{i}\":1")).collect();
    let t = format!(
        r#"{{"id":"e","key":"k","kind":"k","time":1,"fields":{{{}}}}}"#,
        many.join(",")
    );
    assert!(EventParser::default().fast(t.as_bytes()).is_some());
    many.push("\"g\":1".into());
    let t = format!(
        r#"{{"id":"e","key":"k","kind":"k","time":1,"fields":{{{}}}}}"#,
        many.join(",")
    );
    assert!(EventParser::default().fast(t.as_bytes()).is_none());
    assert!(parse_event(t.as_bytes()).is_err());
}

#[test]
fn code_built_events_read_back() {
    let e = Event::new(
        "i",
        "k",
        "kind",
        7,
        &[
            ("a", Value::Integer(-3)),
            ("b", Value::Double(-0.0)),
            ("c", Value::Decimal(Decimal::parse("1.50").unwrap())),
            ("d", Value::String("s".into())),
            ("e", Value::Bool(true)),
        ],
    );
    assert_eq!((e.id(), e.key(), e.kind(), e.time), ("i", "k", "kind", 7));
    assert_eq!(
        e.field("c"),
        Some(Value::Decimal(Decimal::parse("1.50").unwrap()))
    );
    assert_eq!(e.field("b"), Some(Value::Double(-0.0)));
    assert_eq!(e.field("x"), None);
    assert_eq!(e.fields().count(), 5);
    assert!(e.validate().is_ok());
    let dup = Event::new(
        "i",
        "k",
        "k",
        1,
        &[("a", Value::Bool(true)), ("a", Value::Bool(false))],
    );
    assert_eq!(dup.validate(), Err("fields.a: duplicate field name".into()));
    assert!(Event::default().validate().is_err());
}

#[test]
fn every_error_names_its_field() {
    let base = |extra: &str| format!(r#"{{"id":"e","key":"k","kind":"k","time":1{extra}}}"#);
    err(&base(r#","fields":{"a":9223372036854775808}"#), "fields.a");
    err(&base(r#","fields":{"a":1e999}"#), "fields.a");
    err(&base(r#","fields":{"a":null}"#), "fields.a");
    err(&base(r#","fields":{"a":[1]}"#), "fields.a");
    err(&base(r#","fields":{"a":{"b":1}}"#), "fields.a");
    err(
        &base(r#","fields":{"a":{"decimal":"1","x":1}}"#),
        "fields.a",
    );
    err(
        &base(r#","fields":{"a":{"decimal":"1."}}"#),
        "fields.a.decimal",
    );
    err(
        &base(r#","fields":{"a":{"decimal":1}}"#),
        "fields.a.decimal",
    );
    err(&base(r#","fields":{"a":1,"a":2}"#), "fields");
    err(&base(r#","fields":{"":1}"#), "fields");
    err(&base(r#","fields":null"#), "fields");
    err(&base(r#","extra":1"#), "extra");
    err(r#"{"id":"","key":"k","kind":"k","time":1}"#, "id");
    err(r#"{"id":"e","key":"k","kind":"","time":1}"#, "kind");
    err(r#"{"id":"e","key":"k","kind":"k","time":-1}"#, "time");
    err(
        r#"{"id":"e","key":"k","kind":"k","time":9007199254740992}"#,
        "time",
    );
    err(r#"{"id":"e","key":"k","kind":"k","time":1.0}"#, "time");
    err(r#"{"id":"e","key":"k","kind":"k","time":"1"}"#, "time");
    err(r#"{"id":"e","key":"k","kind":"k"}"#, "time");
    err(r#"{"id":"e","kind":"k","time":1}"#, "key");
    err(r#"{"id":"e","key":1,"kind":"k","time":1}"#, "key");
    let long = "x".repeat(257);
    err(
        &format!(r#"{{"id":"{long}","key":"k","kind":"k","time":1}}"#),
        "id",
    );
    err(
        &format!(r#"{{"id":"e","key":"{long}","kind":"k","time":1}}"#),
        "key",
    );
    let many: Vec<String> = (0..65).map(|i| format!("\"f{i}\":1")).collect();
    err(
        &base(&format!(r#","fields":{{{}}}"#, many.join(","))),
        "fields",
    );
    let ok64: Vec<String> = (0..64).map(|i| format!("\"f{i}\":1")).collect();
    ok(&base(&format!(r#","fields":{{{}}}"#, ok64.join(","))));
    ok(&format!(
        r#"{{"id":"e","key":"{}","kind":"k","time":1}}"#,
        "é".repeat(128)
    ));
    err(
        &format!(
            r#"{{"id":"e","key":"{}x","kind":"k","time":1}}"#,
            "é".repeat(128)
        ),
        "key",
    );
    assert!(parse_event(b"[1]").is_err());
    assert!(parse_event(b"{").is_err());
    assert!(parse_event(br#"{"id":"e","id":"f","key":"k","kind":"k","time":1}"#).is_err());
}
