use super::*;

fn bad(doc: &str) -> String {
    match Document::from_json(doc.as_bytes()) {
        Ok(_) => panic!("accepted: {doc}"),
        Err(e) => e.to_string(),
    }
}

fn ok(doc: &str) -> Document {
    Document::from_json(doc.as_bytes()).unwrap_or_else(|e| panic!("{e}: {doc}"))
}

/// A one-pattern document with these stages.
fn stages(s: &str) -> String {
    format!(r#"{{"patterns":[{{"name":"p","within":10,"stages":[{s}]}}]}}"#)
}

#[test]
fn errors_name_the_path_and_the_rule() {
    let doc = r#"{"patterns":[{"name":"fraud","within":10,"stages":[
        {"name":"login","where":{"kind":"login"}},
        {"name":"spend","where":{"kind":"pay"}},
        {"name":"check","where":{"all":[{"kind":"x"},
            {"field":"a","op":"eq","capture":"pay","capture_field":"a"}]}}]}]}"#;
    assert_eq!(
        bad(doc),
        r#"patterns[0].stages[2].where.all[1]: capture "pay" is not a stage of this pattern"#
    );
    let doc = doc.replace(r#""name":"spend""#, r#""name":"pay""#);
    assert_eq!(
        bad(&doc.replace(r#""capture":"pay""#, r#""capture":"check""#)),
        r#"patterns[0].stages[2].where.all[1]: capture "check" is not an earlier stage"#
    );
    ok(&doc);
    // the first stage cannot reference a capture, not even itself
    assert!(bad(&stages(
        r#"{"name":"a","where":{"field":"x","op":"eq","capture":"a","capture_field":"x"}}"#
    ))
    .contains("patterns[0].stages[0].where: capture \"a\" is not an earlier stage"));
    // absence may reference any stage
    ok(
        r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}],
          "absence":{"field":"x","op":"eq","capture":"a","capture_field":"x"}}]}"#,
    );
}

#[test]
fn every_branch_is_validated() {
    // short-circuited branches are still validated
    let e = bad(&stages(
        r#"{"name":"a","where":{"any":[{"all":[]},{"not":{"kind":""}}]}}"#,
    ));
    assert_eq!(
        e,
        "patterns[0].stages[0].where.any[1].not.kind: must be a non-empty string"
    );
    let e = bad(&stages(
        r#"{"name":"a","where":{"kind":"x"},"forbidden":{"field":"f","op":"like","value":1}}"#,
    ));
    assert!(
        e.starts_with("patterns[0].stages[0].forbidden.op: unknown operator"),
        "{e}"
    );
    for (cond, path) in [
        (r#"{"field":"","op":"eq","value":1}"#, "where.field"),
        (r#"{"field":"f","op":"eq","value":null}"#, "where.value"),
        (r#"{"field":"f","op":"eq","value":[1]}"#, "where.value"),
        (
            r#"{"field":"f","op":"eq","value":{"decimal":"1.5","x":1}}"#,
            "where.value",
        ),
        (
            r#"{"field":"f","op":"eq","value":{"decimal":"1e5"}}"#,
            "where.value",
        ),
        (
            r#"{"field":"f","op":"eq","value":99999999999999999999}"#,
            "where.value",
        ),
        (r#"{"field":"f","op":"eq"}"#, "where"),
        (
            r#"{"field":"f","op":"eq","value":1,"capture":"a","capture_field":"f"}"#,
            "where",
        ),
        (r#"{"kind":"x","field":"f"}"#, "where"),
        (r#"{"all":{}}"#, "where.all"),
        (r#"{}"#, "where"),
        (r#"[]"#, "where"),
        (r#"{"nope":1}"#, "where"),
    ] {
        let e = bad(&stages(&format!(r#"{{"name":"a","where":{cond}}}"#)));
        assert!(
            e.starts_with(&format!("patterns[0].stages[0].{path}: ")),
            "{cond}: {e}"
        );
    }
}

fn nested_not(depth: usize) -> String {
    let mut c = r#"{"kind":"x"}"#.to_string();
    for _ in 1..depth {
        c = format!(r#"{{"not":{c}}}"#);
    }
    c
}

fn nested_all(depth: usize) -> String {
    let mut c = r#"{"kind":"x"}"#.to_string();
    for _ in 1..depth {
        c = format!(r#"{{"all":[{c}]}}"#);
    }
    c
}

#[test]
fn depth_32_and_1024_nodes_are_the_limits() {
    for nest in [nested_not, nested_all] {
        ok(&stages(&format!(r#"{{"name":"a","where":{}}}"#, nest(32))));
        let e = bad(&stages(&format!(r#"{{"name":"a","where":{}}}"#, nest(33))));
        assert!(e.contains("condition nested deeper than 32 levels"), "{e}");
        // far deeper than the JSON reader goes: the same rule, no overflow
        let e = bad(&stages(&format!(
            r#"{{"name":"a","where":{}}}"#,
            nest(5000)
        )));
        assert!(e.contains("condition nested deeper than 32 levels"), "{e}");
    }
    // nodes are counted over every condition of the pattern
    let leaves = |n: usize| vec![r#"{"kind":"x"}"#; n].join(",");
    ok(&stages(&format!(
        r#"{{"name":"a","where":{{"any":[{}]}},"forbidden":{{"all":[{}]}}}}"#,
        leaves(511),
        leaves(511)
    )));
    let e = bad(&stages(&format!(
        r#"{{"name":"a","where":{{"any":[{}]}},"forbidden":{{"all":[{}]}}}}"#,
        leaves(511),
        leaves(512)
    )));
    assert!(
        e.starts_with("patterns[0].stages[0].forbidden.all[511]: more than 1024 condition nodes"),
        "{e}"
    );
}

#[test]
fn stage_and_pattern_rules() {
    let w = r#""where":{"kind":"x"}"#;
    let cases = [
        (stages(&format!(r#"{{"name":"a","min":2,{w}}}"#)), "patterns[0].stages[0]: min 2 is greater than max 1"),
        (stages(&format!(r#"{{"name":"a","min":0,{w}}}"#)), "patterns[0].stages[0].min: the first stage needs min >= 1"),
        (stages(&format!(r#"{{"name":"a","max":0,{w}}}"#)), "patterns[0].stages[0].max: 0 is outside 1..=32"),
        (stages(&format!(r#"{{"name":"a","max":33,{w}}}"#)), "patterns[0].stages[0].max: 33 is outside 1..=32"),
        (stages(&format!(r#"{{"name":"a","max":1.0,{w}}}"#)), "patterns[0].stages[0].max: 1.0 is not an integer"),
        (stages(&format!(r#"{{"name":"a","contiguity":"loose",{w}}}"#)), "patterns[0].stages[0].contiguity: unknown contiguity"),
        (stages(&format!(r#"{{"name":"a b",{w}}}"#)), "patterns[0].stages[0].name: name \"a b\" must match"),
        (stages(&format!(r#"{{"name":"a",{w}}},{{"name":"a",{w}}}"#)), "patterns[0].stages[1].name: duplicate stage name"),
        (stages(r#"{"name":"a"}"#), "patterns[0].stages[0]: missing key \"where\""),
        (stages(&format!(r#"{{"name":"a","forbidden":null,{w}}}"#)), "patterns[0].stages[0].forbidden: a condition must be an object"),
        (stages(&format!(r#"{{"name":"a","extra":1,{w}}}"#)), "patterns[0].stages[0]: unknown key \"extra\""),
        (stages(""), "patterns[0].stages: 0 stages, 1..=32 are allowed"),
        (r#"{"patterns":[]}"#.to_string(), "patterns: at least one pattern is required"),
        (r#"{"patterns":[{"name":"p","within":0,"stages":[{"name":"a","where":{"kind":"x"}}]}]}"#.to_string(), "patterns[0].within: 0 is outside 1..=31536000000"),
        (r#"{"patterns":[{"name":"p","within":10,"skip":"all","stages":[{"name":"a","where":{"kind":"x"}}]}]}"#.to_string(), "patterns[0].skip: unknown skip policy"),
        (r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]},{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}]}"#.to_string(), "patterns[1].name: duplicate pattern name"),
        (r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}],"limits":{"active_states":0}}"#.to_string(), "limits.active_states: 0 is outside 1..=1000000"),
        (r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}],"limits":{"max_results_per_advance":1000001}}"#.to_string(), "limits.max_results_per_advance: 1000001 is outside 1..=1000000"),
        (r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}],"x":1}"#.to_string(), "unknown key \"x\""),
        (r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}],"patterns":[]}"#.to_string(), "duplicate key"),
    ];
    for (doc, want) in cases {
        let e = bad(&doc);
        assert!(
            e.starts_with(want) || e.contains(want),
            "{doc}\n  got {e}\n  want {want}"
        );
    }
    // 32 stages of max 4 = 128 captures: allowed; one more is not
    let many = |n: usize, last_max: u32| {
        (0..n)
            .map(|i| {
                let max = if i + 1 == n { last_max } else { 4 };
                format!(r#"{{"name":"s{i}","max":{max},{w}}}"#)
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    ok(&stages(&many(32, 4)));
    assert!(bad(&stages(&many(32, 5))).contains("the sum of max over the stages is 129"));
    assert!(bad(&stages(&many(33, 1))).contains("33 stages"));
}

#[test]
fn the_document_is_written_with_defaults_sorted_by_name() {
    let d = ok(r#"{"patterns":[
        {"name":"zeta","within":5,"stages":[{"name":"a","where":{"field":"v","op":"ge","value":1E2}}],
         "absence":{"any":[]}},
        {"name":"alpha","within":7,"skip":"skip_past_last","stages":[
          {"name":"a","min":1,"where":{"kind":"k"},"forbidden":{"not":{"kind":"j"}}},
          {"name":"b","max":3,"where":{"field":"v","op":"lt","capture":"a","capture_field":"w"}},
          {"name":"c","min":0,"where":{"field":"d","op":"ne","value":{"decimal":"1.50"}}}]}],
        "limits":{"active_states":5}}"#);
    assert_eq!(d.pattern_names(), ["alpha", "zeta"]);
    assert_eq!(
        String::from_utf8(d.to_json()).unwrap(),
        concat!(
            r#"{"patterns":[{"name":"alpha","within":7,"skip":"skip_past_last","stages":["#,
            r#"{"name":"a","min":1,"max":1,"contiguity":"skip_next","where":{"kind":"k"},"forbidden":{"not":{"kind":"j"}}},"#,
            r#"{"name":"b","min":1,"max":3,"contiguity":"skip_next","where":{"field":"v","op":"lt","capture":"a","capture_field":"w"}},"#,
            r#"{"name":"c","min":0,"max":1,"contiguity":"skip_next","where":{"field":"d","op":"ne","value":{"decimal":"1.50"}}}]},"#,
            r#"{"name":"zeta","within":5,"skip":"no_skip","stages":[{"name":"a","min":1,"max":1,"contiguity":"skip_next","where":{"field":"v","op":"ge","value":100.0}}],"absence":{"any":[]}}],"#,
            r#""limits":{"max_results_per_advance":10000,"active_states":5}}"#
        )
    );
    // the written document reads back as the same document
    let back = ok(std::str::from_utf8(&d.to_json()).unwrap());
    assert_eq!(back, d);
}

#[test]
fn same_patterns_ignores_order_defaults_and_limits_only() {
    let a = ok(
        r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]},
                                {"name":"q","within":10,"stages":[{"name":"a","where":{"kind":"y"}}]}]}"#,
    );
    let b = ok(r#"{"limits":{"active_states":3},"patterns":[
        {"stages":[{"where":{"kind":"y"},"name":"a","min":1,"max":1,"contiguity":"skip_next"}],"name":"q","within":10,"skip":"no_skip"},
        {"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}]}"#);
    assert!(a.same_patterns(&b));
    assert!(b.same_patterns(&a));
    let c = ok(
        r#"{"patterns":[{"name":"p","within":11,"stages":[{"name":"a","where":{"kind":"x"}}]},
                                {"name":"q","within":10,"stages":[{"name":"a","where":{"kind":"y"}}]}]}"#,
    );
    assert!(!a.same_patterns(&c));
    let d = ok(
        r#"{"patterns":[{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"x"}}]}]}"#,
    );
    assert!(!a.same_patterns(&d));
    assert_eq!(a.with_limits(b.limits()).limits().active_states, 3);
}
