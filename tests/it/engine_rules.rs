//! Readable examples of each processing rule and tricky case, in the text form of
//! `engine::line`.

use crate::support::engine;

use engine::*;
use streamforge::engine::{Processor, TickOutcome};

fn one(windows: &str, lateness: i64) -> Processor {
    Processor::new(pipeline(&format!(
        r#"{{"partitions":["p0","p1"],"windows":{windows},"lateness":{lateness}}}"#
    )))
}

#[test]
fn fixed_window_becomes_visible_then_is_corrected_then_final() {
    let mut p = one(r#"{"w":{"kind":"fixed","size":10}}"#, 5);
    assert!(ingest(&mut p, d("p0", 0, "a", "k", 3, 5)).is_empty());
    assert!(ingest(&mut p, d("p1", 0, "b", "k", 12, 1)).is_empty());
    assert!(advance(&mut p, "p0", 10).is_empty(), "p1 has not reported");
    assert_eq!(
        advance(&mut p, "p1", 11),
        vec!["1 + w k [0,10) c=1 s=5 min=5 max=5"]
    );
    // a correction within lateness: retract then upsert
    assert_eq!(
        ingest(&mut p, d("p0", 1, "c", "k", 9, -2)),
        vec![
            "2 - w k [0,10) c=1 s=5 min=5 max=5",
            "3 + w k [0,10) c=2 s=3 min=-2 max=5"
        ]
    );
    let t = tick(&mut p, "p0", 16);
    assert!(t.changes.is_empty());
    assert!(t.finalized.is_empty(), "W=11: 11 > 10+5 is false");
    // W = 16 > 10 + 5: final, silently (no retraction)
    let t = tick(&mut p, "p1", 16);
    assert_eq!(addrs(&t.finalized), vec!["w k [0,10)"]);
    assert!(t.changes.is_empty(), "finalization never retracts");
    assert!(p.results(None, None).is_empty());
    assert_eq!(p.live_buckets(), 1);
}

#[test]
fn session_bridge_merges_two_visible_sessions() {
    let mut p = one(r#"{"s":{"kind":"session","gap":5}}"#, 100);
    ingest(&mut p, d("p0", 0, "a", "k", 0, 1));
    ingest(&mut p, d("p0", 1, "b", "k", 10, 2));
    p.mark_idle("p1").unwrap();
    assert_eq!(
        advance(&mut p, "p0", 15),
        vec![
            "1 + s k [0,5) c=1 s=1 min=1 max=1",
            "2 + s k [10,15) c=1 s=2 min=2 max=2"
        ]
    );
    // 5 touches [0,5) and [5,10) touches [10,15): one session [0,15), ready
    assert_eq!(
        ingest(&mut p, d("p0", 2, "c", "k", 5, 3)),
        vec![
            "3 - s k [0,5) c=1 s=1 min=1 max=1",
            "4 - s k [10,15) c=1 s=2 min=2 max=2",
            "5 + s k [0,15) c=3 s=6 min=1 max=3",
        ]
    );
}

#[test]
fn session_merge_retracts_even_when_merged_session_is_not_ready() {
    let mut p = one(r#"{"s":{"kind":"session","gap":5}}"#, 100);
    ingest(&mut p, d("p0", 0, "a", "k", 0, 1));
    p.mark_idle("p1").unwrap();
    assert_eq!(
        advance(&mut p, "p0", 5),
        vec!["1 + s k [0,5) c=1 s=1 min=1 max=1"]
    );
    // 4 overlaps [0,5): merged [0,9) is not ready at W=5
    assert_eq!(
        ingest(&mut p, d("p0", 1, "b", "k", 4, 7)),
        vec!["2 - s k [0,5) c=1 s=1 min=1 max=1"]
    );
    assert_eq!(
        advance(&mut p, "p0", 9),
        vec!["3 + s k [0,9) c=2 s=8 min=1 max=7"]
    );
}

#[test]
fn touching_sessions_merge_but_separated_ones_do_not() {
    let mut p = one(r#"{"s":{"kind":"session","gap":5}}"#, 100);
    ingest(&mut p, d("p0", 0, "a", "k", 0, 1));
    ingest(&mut p, d("p0", 1, "b", "k", 5, 1)); // touches: [0,10)
    ingest(&mut p, d("p0", 2, "c", "k", 11, 1)); // separate: [11,16)
    ingest(&mut p, d("p0", 3, "d", "other", 10, 1)); // other key never merges
    p.mark_idle("p1").unwrap();
    assert_eq!(
        advance(&mut p, "p0", 100),
        vec![
            "1 + s k [0,10) c=2 s=2 min=1 max=1",
            "2 + s k [11,16) c=1 s=1 min=1 max=1",
            "3 + s other [10,15) c=1 s=1 min=1 max=1",
        ]
    );
}

#[test]
fn sliding_size_10_step_3_with_negative_times() {
    let mut p = one(r#"{"h":{"kind":"sliding","size":10,"step":3}}"#, 0);
    ingest(&mut p, d("p0", 0, "a", "k", -1, 4));
    p.mark_idle("p1").unwrap();
    assert_eq!(
        advance(&mut p, "p0", 9),
        vec![
            "1 + h k [-9,1) c=1 s=4 min=4 max=4",
            "2 + h k [-6,4) c=1 s=4 min=4 max=4",
            "3 + h k [-3,7) c=1 s=4 min=4 max=4",
        ]
    );
}

#[test]
fn offsets_are_checked_before_identities() {
    let mut p = one(r#"{"w":{"kind":"fixed","size":10}}"#, 0);
    ingest(&mut p, d("p0", 0, "a", "k", 1, 1));
    // gap AND identity conflict: the offset rule answers
    let e = p.ingest(vec![d("p0", 5, "a", "k", 2, 2)]).unwrap_err();
    assert_eq!(e.rejection.code(), "offset_conflict");
    // right offset, identity conflict
    let e = p.ingest(vec![d("p0", 1, "a", "k", 2, 2)]).unwrap_err();
    assert_eq!(e.rejection.code(), "identity_conflict");
    // old offset with another event: offset conflict even though the id is new
    let e = p.ingest(vec![d("p0", 0, "zz", "k", 1, 1)]).unwrap_err();
    assert_eq!(e.rejection.code(), "offset_conflict");
    // identical redelivery: success, nothing
    let out = p.ingest(vec![d("p0", 0, "a", "k", 1, 1)]).unwrap();
    assert!(out.changes.is_empty() && out.late.is_empty());
    assert_eq!(out.offsets, vec![("p0".to_string(), 0)]);
    let e = p.ingest(vec![d("nope", 0, "a", "k", 1, 1)]).unwrap_err();
    assert_eq!(e.rejection.code(), "unknown_partition");
}

#[test]
fn duplicate_id_on_another_partition_is_consumed_once() {
    let mut p = one(r#"{"w":{"kind":"fixed","size":10}}"#, 0);
    ingest(&mut p, d("p0", 0, "a", "k", 1, 5));
    let out = p.ingest(vec![d("p1", 0, "a", "k", 1, 5)]).unwrap();
    assert_eq!(out.offsets, vec![("p1".to_string(), 0)]);
    p.advance("p0", 10).unwrap();
    assert_eq!(
        advance(&mut p, "p1", 10),
        vec!["1 + w k [0,10) c=1 s=5 min=5 max=5"]
    );
}

#[test]
fn batches_are_atomic_and_name_the_first_bad_delivery() {
    let mut p = one(r#"{"w":{"kind":"fixed","size":10}}"#, 0);
    let before = p.checkpoint().unwrap();
    let e = p
        .ingest(vec![
            d("p0", 0, "a", "k", 1, 1),
            d("p1", 0, "b", "k", 1, 1),
            d("p0", 1, "a", "k", 9, 9),
            d("p0", 7, "c", "k", 1, 1),
        ])
        .unwrap_err();
    assert_eq!((e.index, e.rejection.code()), (2, "identity_conflict"));
    assert_eq!(
        p.checkpoint().unwrap(),
        before,
        "nothing of the batch applied"
    );
    // the same offsets and ids can be used again
    let out = p
        .ingest(vec![
            d("p0", 0, "a", "k", 1, 1),
            d("p0", 0, "a", "k", 1, 1),
            append("p0", "b", "k", 1, 1),
        ])
        .unwrap();
    assert_eq!(out.offsets, vec![("p0".to_string(), 1)]);
}

#[test]
fn append_mode_takes_the_next_offset_and_retries_are_duplicates() {
    let mut p = one(r#"{"w":{"kind":"fixed","size":10}}"#, 0);
    p.ingest(vec![append("p0", "a", "k", 1, 1)]).unwrap();
    let out = p.ingest(vec![append("p0", "a", "k", 1, 1)]).unwrap();
    assert_eq!(out.offsets, vec![("p0".to_string(), 1)]);
    p.mark_idle("p1").unwrap();
    assert_eq!(
        advance(&mut p, "p0", 10),
        vec!["1 + w k [0,10) c=1 s=1 min=1 max=1"]
    );
}

#[test]
fn equality_on_the_lateness_boundary_is_accepted() {
    let mut p = one(r#"{"w":{"kind":"fixed","size":10}}"#, 3);
    p.mark_idle("p1").unwrap();
    p.advance("p0", 20).unwrap();
    let out = p.ingest(vec![d("p0", 0, "a", "k", 17, 1)]).unwrap();
    assert!(out.late.is_empty(), "17 + 3 == 20 is not late");
    // [10,20) is already ready (20 <= 20): the accepted event shows at once
    assert_eq!(
        lines(&out.changes),
        vec!["1 + w k [10,20) c=1 s=1 min=1 max=1"]
    );
    let out = p.ingest(vec![d("p0", 1, "b", "k", 16, 1)]).unwrap();
    assert_eq!(out.late.len(), 1);
    assert_eq!((out.late[0].seq, out.late[0].watermark), (1, 20));
    // redelivery of a late id on a new offset is a duplicate, not late again
    let out = p.ingest(vec![d("p0", 2, "b", "k", 16, 1)]).unwrap();
    assert!(out.late.is_empty());
}

#[test]
fn idle_and_reactivation_never_rewind() {
    let mut p = one(r#"{"w":{"kind":"fixed","size":10}}"#, 0);
    p.advance("p0", 30).unwrap();
    assert_eq!(p.mark_idle("p1").unwrap().watermark, Some(30));
    assert_eq!(p.advance("p1", 5).unwrap().watermark, Some(30));
    assert_eq!(p.advance("p1", 40).unwrap().watermark, Some(30));
    assert_eq!(p.advance("p0", 50).unwrap().watermark, Some(40));
}

#[test]
fn all_partitions_idle_holds_the_watermark() {
    let mut p = one(r#"{"w":{"kind":"fixed","size":10}}"#, 0);
    assert_eq!(p.mark_idle("p0").unwrap().watermark, None);
    assert_eq!(p.mark_idle("p1").unwrap().watermark, None);
    p.advance("p0", 12).unwrap();
    p.mark_idle("p0").unwrap();
    assert_eq!(p.watermark(), Some(12));
}

#[test]
fn stream_time_windows_take_late_events() {
    let mut p = one(
        r#"{"st":{"kind":"stream_time","size":10},"w":{"kind":"fixed","size":10}}"#,
        0,
    );
    p.mark_idle("p1").unwrap();
    ingest(&mut p, d("p0", 0, "a", "k", 25, 1));
    p.advance("p0", 30).unwrap();
    // late for `w`; stream time is max(W=30, 25) = 30 -> [30,40)
    let out = p.ingest(vec![d("p0", 1, "b", "k", 3, 7)]).unwrap();
    assert_eq!(out.late.len(), 1);
    assert!(out.changes.is_empty());
    let out = p.advance("p0", 40).unwrap();
    assert_eq!(
        lines(&out.changes),
        vec!["3 + st k [30,40) c=1 s=7 min=7 max=7"]
    );
}

#[test]
fn extreme_timestamps_and_values_are_exact() {
    let mut p = Processor::new(pipeline(
        r#"{"partitions":["p"],"windows":{"f":{"kind":"fixed","size":9223372036854775807},"s":{"kind":"session","gap":9223372036854775807}},"lateness":9223372036854775807}"#,
    ));
    ingest(&mut p, d("p", 0, "a", "k", i64::MAX, i64::MAX));
    ingest(&mut p, d("p", 1, "b", "k", i64::MAX, i64::MAX));
    ingest(&mut p, d("p", 2, "c", "k", i64::MIN, i64::MIN));
    let t = tick(&mut p, "p", i64::MAX);
    assert_eq!(
        lines(&t.changes),
        vec![
            "1 + f k [-18446744073709551614,-9223372036854775807) c=1 s=-9223372036854775808 min=-9223372036854775808 max=-9223372036854775808",
            "2 + s k [-9223372036854775808,-1) c=1 s=-9223372036854775808 min=-9223372036854775808 max=-9223372036854775808",
        ]
    );
    // W > end + lateness is exact in i128: both are final at once
    assert_eq!(t.finalized.len(), 2);
    assert_eq!(p.live_buckets(), 2);
    let cp = String::from_utf8(p.checkpoint().unwrap()).unwrap();
    assert!(
        cp.contains(r#""start":9223372036854775807,"sum":18446744073709551614"#),
        "{cp}"
    );
    let back = Processor::restore(&p.checkpoint().unwrap(), p.pipeline()).unwrap();
    assert_eq!(back.checkpoint().unwrap(), p.checkpoint().unwrap());
}

#[test]
fn advance_all_is_the_advances_one_by_one_or_nothing() {
    // Three partitions, every window kind, lateness: a seeded mix of
    // deliveries and groups of advances, applied to one processor one by
    // one and to another with `advance_all`.
    let pipe = r#"{"partitions":["p0","p1","p2"],"windows":{"f":{"kind":"fixed","size":10},"h":{"kind":"sliding","size":10,"step":5},"s":{"kind":"session","gap":5},"st":{"kind":"stream_time","size":10}},"lateness":5}"#;
    let mut one = Processor::new(pipeline(pipe));
    let mut all = Processor::new(pipeline(pipe));
    let mut seed = 0x5eed_u64;
    let mut rand = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut offsets = [0i64; 3];
    let mut moved = 0;
    for step in 0..300 {
        if step % 3 == 0 {
            let group: Vec<(String, i64)> = (0..1 + rand(6))
                .map(|_| (format!("p{}", rand(3)), step as i64 / 2 + rand(12) as i64))
                .collect();
            let mut want = TickOutcome::default();
            for (p, w) in &group {
                let t = one.advance(p, *w).expect("known partition");
                want.changes.extend(t.changes);
                want.finalized.extend(t.finalized);
                want.watermark = t.watermark;
            }
            let got = all.advance_all(&group).expect("known partitions");
            moved += got.changes.len();
            assert_eq!(
                lines(&got.changes),
                lines(&want.changes),
                "step {step}: {group:?}"
            );
            assert_eq!(addrs(&got.finalized), addrs(&want.finalized), "step {step}");
            assert_eq!(got.watermark, want.watermark, "step {step}");
            // An unknown partition anywhere: refused with its index, nothing applied.
            let before = all.checkpoint().unwrap();
            let mut bad = group.clone();
            let at = rand(bad.len() as u64 + 1) as usize;
            bad.insert(at, ("nope".into(), 1_000_000));
            let err = all.advance_all(&bad).expect_err("unknown partition");
            assert_eq!(err.index, at);
            assert_eq!(
                all.checkpoint().unwrap(),
                before,
                "a refused batch changed the state"
            );
        } else {
            let p = rand(3) as usize;
            let ts = step as i64 / 2 + rand(20) as i64 - 8;
            let dl = d(
                &format!("p{p}"),
                offsets[p],
                &format!("e{step}"),
                &format!("k{}", rand(4)),
                ts,
                rand(9) as i64,
            );
            offsets[p] += 1;
            let a = one.ingest(vec![dl.clone()]).expect("accepted");
            let b = all.ingest(vec![dl]).expect("accepted");
            assert_eq!(lines(&a.changes), lines(&b.changes), "step {step}");
        }
    }
    assert!(moved > 50, "the advances moved little: {moved}");
    assert_eq!(all.checkpoint().unwrap(), one.checkpoint().unwrap());
}
