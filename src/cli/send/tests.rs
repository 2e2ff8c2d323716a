use super::*;

fn body(op: &Operation) -> String {
    match op {
        Operation::Deliver { json, .. } => String::from_utf8(json.clone()).unwrap(),
        Operation::Advance {
            partition,
            watermark,
        } => format!("advance {partition} {watermark}"),
        Operation::Idle(p) => format!("idle {p}"),
        Operation::Run(run) => String::from_utf8(run.body().to_vec()).unwrap(),
    }
}

#[test]
fn lines_of_the_generator_format() {
    let ok = [
        (
            r#"{"op":"deliver","partition":"p0","offset":0,"event":{"id":"e0","key":"k17","timestamp":-5,"value":-31}}"#,
            r#"{"partition":"p0","offset":0,"event":{"id":"e0","key":"k17","timestamp":-5,"value":-31}}"#,
        ),
        (
            r#"{"partition":"p0","event":{"id":"e0","key":"k","timestamp":1,"value":2}}"#,
            r#"{"partition":"p0","event":{"id":"e0","key":"k","timestamp":1,"value":2}}"#,
        ),
        // forwarded as written (the server reads the same delivery)
        (
            r#"{"op":"deliver", "event":{"id":"e0","key":"k","timestamp":1,"value":2} ,"partition":"p0"}"#,
            r#"{ "event":{"id":"e0","key":"k","timestamp":1,"value":2} ,"partition":"p0"}"#,
        ),
        // written again when the fast path is not sure (an escape, -0)
        (
            r#"{"op":"deliver","partition":"p\u0030","event":{"id":"e0","key":"k","timestamp":-0,"value":2}}"#,
            r#"{"partition":"p0","event":{"id":"e0","key":"k","timestamp":0,"value":2}}"#,
        ),
        (
            r#"{"op":"advance","partition":"p0","watermark":1700000000499}"#,
            "advance p0 1700000000499",
        ),
        (r#"{"op":"idle","partition":"p1"}"#, "idle p1"),
    ];
    for (line, want) in ok {
        assert_eq!(body(&parse_line(line).expect(line)), want);
    }
    let bad = [
        r#"{"op":"deliver","partition":"p0","offset":0}"#,
        r#"{"op":"advance","partition":"p0"}"#,
        r#"{"op":"advance","partition":"p0","watermark":1,"offset":2}"#,
        r#"{"op":"idle","partition":"p0","watermark":1}"#,
        r#"{"op":"stop","partition":"p0"}"#,
        r#"{"partition":"p0","offset":null,"event":{"id":"e","key":"k","timestamp":1,"value":2}}"#,
        r#"{"partition":"p0","event":{"id":"","key":"k","timestamp":1,"value":2}}"#,
        r#"{"partition":"p0","extra":1,"event":{"id":"e","key":"k","timestamp":1,"value":2}}"#,
        r#"{"partition":"p0","event":{"id":"e","key":"k","timestamp":1.5,"value":2}}"#,
        "not json",
    ];
    for line in bad {
        assert!(parse_line(line).is_err(), "{line}");
    }
}
