use crate::document::Document;

fn doc(patterns: &str) -> Document {
    let text = format!(r#"{{"patterns":[{patterns}]}}"#);
    Document::from_json(text.as_bytes()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A pattern `p` with one stage whose `where` is `cond`.
fn one(cond: &str) -> Document {
    doc(&format!(
        r#"{{"name":"p","within":10,"stages":[{{"name":"a","where":{cond}}}]}}"#
    ))
}

fn warned(cond: &str) -> Vec<String> {
    one(cond)
        .warnings()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn an_order_operator_against_a_bool_is_warned() {
    for op in ["lt", "le", "gt", "ge"] {
        let w = warned(&format!(
            r#"{{"all":[{{"kind":"x"}},{{"field":"ok","op":"{op}","value":true}}]}}"#
        ));
        assert_eq!(
            w,
            [format!(
                r#"patterns[0].stages[0].where.all[1]: "{op}" against the Bool true is never true: a Bool supports only eq and ne (every other operator compares false); write {{"field":"ok","op":"eq","value":true}} (or "ne")"#
            )]
        );
    }
    // the document stays valid; eq and ne are fine
    for op in ["eq", "ne"] {
        assert!(warned(&format!(r#"{{"field":"ok","op":"{op}","value":false}}"#)).is_empty());
    }
}

#[test]
fn satisfiable_conditions_are_not_warned() {
    for cond in [
        r#"{"kind":"x"}"#,
        r#"{"all":[]}"#,
        r#"{"any":[]}"#,
        r#"{"field":"amount","op":"gt","value":101.5}"#,
        r#"{"field":"amount","op":"ge","value":{"decimal":"101.5"}}"#,
        r#"{"field":"s","op":"le","value":""}"#,
        r#"{"field":"s","op":"gt","value":""}"#,
        r#"{"field":"n","op":"ge","value":9223372036854775807}"#,
        r#"{"field":"n","op":"lt","value":9223372036854775807}"#,
        r#"{"field":"n","op":"gt","value":-9223372036854775808}"#,
        r#"{"field":"d","op":"lt","value":{"decimal":"99999999999999999999999999999999999999"}}"#,
        r#"{"field":"d","op":"gt","value":{"decimal":"9999999999999999999999999999999999999.9"}}"#,
        r#"{"field":"d","op":"ge","value":1.7976931348623157e308}"#,
        // two types for one field, but not in one "all"
        r#"{"any":[{"field":"amount","op":"gt","value":100},{"field":"amount","op":"gt","value":100.0}]}"#,
        r#"{"all":[{"field":"amount","op":"gt","value":100},{"not":{"field":"amount","op":"eq","value":"x"}}]}"#,
        // one type, several comparisons; different fields
        r#"{"all":[{"field":"a","op":"gt","value":1},{"field":"a","op":"lt","value":9},{"field":"b","op":"eq","value":"x"}]}"#,
        // the same kind twice
        r#"{"all":[{"kind":"x"},{"all":[{"kind":"x"}]}]}"#,
    ] {
        assert_eq!(warned(cond), Vec::<String>::new(), "{cond}");
    }
    // captures: their types are not known from the document
    let d = doc(
        r#"{"name":"p","within":10,"stages":[{"name":"a","where":{"kind":"a"}},
            {"name":"b","where":{"all":[{"field":"v","op":"gt","value":1},
              {"field":"v","op":"gt","capture":"a","capture_field":"w"}]}}]}"#,
    );
    assert!(d.warnings().is_empty());
}

#[test]
fn one_field_of_two_types_in_one_all_is_warned_at_the_all() {
    let w = warned(
        r#"{"any":[{"kind":"y"},{"all":[{"field":"amount","op":"gt","value":100},
            {"all":[{"kind":"pay"},{"field":"amount","op":"lt","value":200.5}]},
            {"field":"amount","op":"ne","value":150}]}]}"#,
    );
    assert_eq!(
        w,
        [
            r#"patterns[0].stages[0].where.any[1]: this "all" is never true: it compares field "amount" with an Integer (all[0]) and a Double (all[1].all[1]), but a field has one type in an event and a comparison with a value of another type is false (Integer, Double and Decimal are three types, never converted); write every value compared with this field in the type the events send it as (Integer 100, Double 100.0, Decimal {"decimal":"100"})"#
        ]
    );
}

#[test]
fn a_conflict_in_a_nested_all_is_warned_once_at_the_outer_all() {
    let w = warned(
        r#"{"all":[{"kind":"x"},{"all":[{"field":"n","op":"eq","value":1},{"field":"n","op":"eq","value":"1"}]}]}"#,
    );
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with(
            r#"patterns[0].stages[0].where: this "all" is never true: it compares field "n" with an Integer (all[1].all[0]) and a String (all[1].all[1])"#
        ),
        "{w:?}"
    );
}

#[test]
fn two_kinds_in_one_all_are_warned() {
    assert_eq!(
        warned(r#"{"all":[{"kind":"login"},{"not":{"kind":"x"}},{"kind":"pay"}]}"#),
        [
            r#"patterns[0].stages[0].where: this "all" is never true: an event has one kind, and it requires the kinds "login" (all[0]) and "pay" (all[2]); to accept any of them write {"any":[{"kind":"login"},{"kind":"pay"}]}"#
        ]
    );
}

#[test]
fn order_operators_past_the_end_of_a_type_are_warned() {
    for (cond, head) in [
        (
            r#"{"field":"n","op":"gt","value":9223372036854775807}"#,
            r#""gt" 9223372036854775807 is never true: no Integer is greater than 9223372036854775807, the largest Integer"#,
        ),
        (
            r#"{"field":"n","op":"lt","value":-9223372036854775808}"#,
            r#""lt" -9223372036854775808 is never true: no Integer is less than"#,
        ),
        (
            r#"{"field":"s","op":"lt","value":""}"#,
            r#""lt" "" is never true: no String is less than "", the smallest String; to match that value write {"field":"s","op":"eq","value":""}"#,
        ),
        (
            r#"{"field":"d","op":"gt","value":1.7976931348623157e308}"#,
            "no Double is greater than",
        ),
        (
            r#"{"field":"d","op":"lt","value":-1.7976931348623157e308}"#,
            "no Double is less than",
        ),
        (
            r#"{"field":"d","op":"gt","value":{"decimal":"99999999999999999999999999999999999999"}}"#,
            "no Decimal is greater than",
        ),
        (
            r#"{"field":"d","op":"lt","value":{"decimal":"-99999999999999999999999999999999999999"}}"#,
            "no Decimal is less than",
        ),
    ] {
        let w = warned(cond);
        assert_eq!(w.len(), 1, "{cond}: {w:?}");
        assert!(
            w[0].contains(head) && w[0].starts_with("patterns[0].stages[0].where: "),
            "{cond}: {w:?}"
        );
    }
}

#[test]
fn paths_use_the_index_in_the_text_and_cover_forbidden_and_absence() {
    let d = doc(
        r#"{"name":"zeta","within":10,"stages":[{"name":"a","where":{"kind":"a"}}]},
           {"name":"alpha","within":10,
            "stages":[{"name":"a","where":{"kind":"a"}},
                      {"name":"b","where":{"kind":"b"},
                       "forbidden":{"not":{"field":"f","op":"ge","value":false}}}],
            "absence":{"field":"v","op":"gt","capture":"a","capture_field":"v"}},
           {"name":"mid","within":10,"stages":[{"name":"a","where":{"kind":"a"}}],
            "absence":{"any":[{"field":"g","op":"lt","value":true}]}}"#,
    );
    let w = d.warnings();
    let at: Vec<(&str, &str)> = w
        .iter()
        .map(|w| (w.pattern.as_str(), w.path.as_str()))
        .collect();
    assert_eq!(
        at,
        [
            ("alpha", "patterns[1].stages[1].forbidden.not"),
            ("mid", "patterns[2].absence.any[0]")
        ]
    );
    // the document as GET /patterns writes it (sorted by name) has its
    // own indexes; equality ignores where patterns stood
    let back = Document::from_json(&d.to_json()).unwrap();
    assert_eq!(back, d);
    assert_eq!(back.warnings()[1].path, "patterns[1].absence.any[0]");
}
