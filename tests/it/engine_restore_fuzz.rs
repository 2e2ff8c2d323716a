//! No checkpoint, however damaged or crafted, makes restore or the restored
//! processor panic: every byte flipped, every truncation, and every integer
//! of the state replaced by extreme values under a correct checksum. A
//! crafted state that restore accepts must keep working (ingest, advance,
//! idle, reads, checkpoint round trip).

use crate::support::engine;

use engine::*;
use streamforge::engine::Processor;

/// Exercises a restored processor; nothing may panic.
fn exercise(mut p: Processor) {
    let _ = p.ingest(vec![d("p0", 50, "x", "k", 3, 1)]);
    let off = p.partitions()[0].offset;
    let _ = p.ingest(vec![
        d("p0", off + 1, "n1", "k", 15, i64::MAX),
        d("p0", off + 2, "n2", "k", i64::MIN, i64::MIN),
        d("p0", off + 3, "n3", "j", 18, 0),
    ]);
    let _ = p.advance("p1", 25);
    let _ = p.mark_idle("p1");
    let _ = p.advance("p0", i64::MAX);
    let _ = p.results(None, None);
    let _ = p.late(0, 100);
    let cp = p.checkpoint().unwrap();
    let back =
        Processor::restore(&cp, p.pipeline()).expect("a processor's own checkpoint restores");
    assert_eq!(back.checkpoint().unwrap(), cp);
}

#[test]
fn damaged_envelopes_never_panic() {
    let cp = checkpoint_scenario().checkpoint().unwrap();
    let target = pipeline(CHECKPOINT_PIPELINE);
    for i in 0..cp.len() {
        let mut b = cp.clone();
        b[i] ^= 0x20;
        assert!(
            Processor::restore(&b, &target).is_err(),
            "flip at {i} accepted"
        );
        assert!(
            Processor::restore(&cp[..i], &target).is_err(),
            "truncation at {i} accepted"
        );
    }
}

#[test]
fn crafted_integers_never_panic() {
    let cp = String::from_utf8(checkpoint_scenario().checkpoint().unwrap()).unwrap();
    let start = cp.find(r#""state":"#).unwrap() + r#""state":"#.len();
    let end = cp.rfind(r#","version":2}"#).unwrap();
    let state = &cp[start..end];
    // every integer token of the state
    let bytes = state.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let prev = if i == 0 { b' ' } else { bytes[i - 1] };
        if (c.is_ascii_digit() || c == b'-') && matches!(prev, b':' | b',' | b'[') {
            let s = i;
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            spans.push((s, i));
        } else {
            i += 1;
        }
    }
    assert!(spans.len() > 100, "{} integers", spans.len());
    let extremes = [
        "0",
        "-1",
        "1",
        "9223372036854775807",
        "-9223372036854775808",
        "18446744073709551615",
        "170141183460469231731687303715884105727",
        "-170141183460469231731687303715884105728",
        "99999999999999999999999999999999999999999",
    ];
    let target = pipeline(CHECKPOINT_PIPELINE);
    let mut accepted = 0;
    for &(s, e) in &spans {
        for x in extremes {
            let crafted = format!("{}{}{}", &state[..s], x, &state[e..]);
            let envelope = format!(
                r#"{{"format":"streamforge-checkpoint","sha256":"{}","state":{crafted},"version":1}}"#,
                sha_hex(crafted.as_bytes())
            );
            if let Ok(p) = Processor::restore(envelope.as_bytes(), &target) {
                accepted += 1;
                exercise(p);
            }
        }
    }
    // some crafted states are valid (e.g. a larger sequence or a value that
    // keeps the bounds): those were exercised above
    assert!(accepted > 0);
}
