//! No pattern checkpoint, however damaged or crafted, makes restore or the
//! restored engine panic: every byte flipped, every truncation, and every
//! integer of the state replaced by extreme values under a correct checksum.
//! Damaged envelopes are rejected with a message; a crafted state that
//! restore accepts keeps working (push, advance, finish, status, checkpoint
//! round trip).

use crate::support::patterns;

use patterns::*;
use streamforge::patterns::{Engine, FINAL_WATERMARK};

/// Exercises a restored engine; nothing may panic, and its own checkpoint
/// must restore to the same bytes.
fn exercise(mut e: Engine) {
    let cp = e.checkpoint();
    let back = Engine::restore(&cp, e.document()).expect("an engine's own checkpoint restores");
    assert_eq!(back.checkpoint(), cp);
    let w = e.watermark();
    let t = (w + 1).clamp(0, streamforge::patterns::MAX_EVENT_TIME);
    let _ = e.push(vec![
        event("f1", "k1", "pay", t, r#""amount":1000"#),
        event("f2", "k2", "logout", t, ""),
        event("f3", "k1", "login", t, r#""limit":-1"#),
    ]);
    let _ = e.push(vec![event("f4", "k9", "confirm", t, "")]);
    let _ = e.advance(w.saturating_add(1).min(FINAL_WATERMARK));
    let _ = e.advance(w.saturating_add(2_000).min(FINAL_WATERMARK));
    let _ = e.status();
    let _ = e.finish();
    let _ = e.finish();
    let cp = e.checkpoint();
    let back = Engine::restore(&cp, e.document()).expect("an engine's own checkpoint restores");
    assert_eq!(back.checkpoint(), cp);
}

#[test]
fn every_flipped_byte_and_every_truncation_is_rejected() {
    let cp = engine_after(5).checkpoint();
    let d = doc();
    for i in 0..cp.len() {
        for mask in [0x01u8, 0x20, 0x80] {
            let mut b = cp.clone();
            b[i] ^= mask;
            match Engine::restore(&b, &d) {
                Ok(_) => panic!("flip {mask:#x} at {i} accepted"),
                Err(m) => assert!(!m.is_empty()),
            }
        }
        match Engine::restore(&cp[..i], &d) {
            Ok(_) => panic!("truncation at {i} accepted"),
            Err(m) => assert!(!m.is_empty()),
        }
    }
    assert!(Engine::restore(&cp, &d).is_ok());
}

/// Byte ranges of every integer token of the state (after `:`, `,` or `[`).
fn integer_spans(state: &str) -> Vec<(usize, usize)> {
    let bytes = state.as_bytes();
    let mut spans = Vec::new();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            if c == b'\\' {
                i += 2;
                continue;
            }
            if c == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
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
    spans
}

#[test]
fn extreme_integers_under_a_valid_checksum_never_panic() {
    let d = doc();
    let mut accepted = 0;
    let mut rejected = 0;
    for step in [2, 5, 7] {
        let state = state_text(&engine_after(step).checkpoint());
        let spans = integer_spans(&state);
        assert!(spans.len() > 20, "{} integers", spans.len());
        let extremes = [
            "0",
            "-1",
            "1",
            "-0",
            "9007199254740991",
            "9007199254740992",
            "9007230790740991",
            "9223372036854775807",
            "-9223372036854775808",
            "18446744073709551615",
            "170141183460469231731687303715884105727",
            "99999999999999999999999999999999999999999",
        ];
        for &(s, e) in &spans {
            for x in extremes {
                let crafted = format!("{}{}{}", &state[..s], x, &state[e..]);
                match Engine::restore(&envelope(&crafted), &d) {
                    Ok(engine) => {
                        accepted += 1;
                        exercise(engine);
                    }
                    Err(m) => {
                        rejected += 1;
                        assert!(!m.is_empty());
                    }
                }
            }
        }
    }
    // some crafted states are valid (a larger sequence, next ordinal or
    // event field): those were exercised; most are not
    assert!(accepted > 10, "{accepted} accepted");
    assert!(
        rejected > accepted,
        "{rejected} rejected, {accepted} accepted"
    );
}

#[test]
fn the_largest_valid_counters_fail_cleanly_instead_of_overflowing() {
    // sequence and next ordinal at their largest: the engine refuses the
    // next output or push with a rejection, and changes nothing
    let state = state_text(&engine_after(5).checkpoint());
    let crafted = state
        .replacen(r#""sequence":8"#, r#""sequence":9007199254740991"#, 1)
        .replacen(
            r#""next_ordinal":9"#,
            r#""next_ordinal":9007199254740992"#,
            1,
        );
    let mut e = Engine::restore(&envelope(&crafted), &doc()).unwrap_or_else(|m| panic!("{m}"));
    let before = e.checkpoint();
    assert!(e.push(vec![event("x", "k1", "pay", 100, "")]).is_err());
    let r = e.advance(600);
    assert!(r.is_err(), "{r:?}");
    assert_eq!(e.checkpoint(), before);
    // with room in the sequence, the same advance succeeds
    let crafted = state.replacen(r#""sequence":8"#, r#""sequence":9007199254740000"#, 1);
    let mut e = Engine::restore(&envelope(&crafted), &doc()).unwrap();
    let out = e.advance(600).unwrap();
    assert_eq!(out.output.first().map(|o| o.seq), Some(9007199254740001));
}
