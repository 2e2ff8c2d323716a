//! Checksums: every stored blob (part, fence list, filter piece) carries
//! one, so that damage is an error, never a missed entry.

use crate::error::{corrupt, Result};
use crate::hash::mix;

pub(crate) const P1: u64 = 0x9E37_79B9_7F4A_7C15;

/// A 32-bit checksum: [`checksum64`]'s low half.
pub(crate) fn checksum(data: &[u8]) -> u32 {
    checksum64(data) as u32
}

/// A 64-bit checksum (four multiply-rotate lanes over the 64-bit words, the
/// tail and the length): a changed word always changes its lane, and the
/// result (each step is a bijection of the lane, then of the state);
/// truncation changes the length.
pub fn checksum64(data: &[u8]) -> u64 {
    let mut lanes = [
        0x243F_6A88_85A3_08D3u64,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
        0x082E_FA98_EC4E_6C89,
    ];
    let step = |lane: u64, w: &[u8; 8]| {
        (lane ^ u64::from_le_bytes(*w))
            .wrapping_mul(P1)
            .rotate_left(29)
    };
    let (blocks, rest) = data.as_chunks::<32>();
    for block in blocks {
        if let [w0, w1, w2, w3] = block.as_chunks::<8>().0 {
            lanes[0] = step(lanes[0], w0);
            lanes[1] = step(lanes[1], w1);
            lanes[2] = step(lanes[2], w2);
            lanes[3] = step(lanes[3], w3);
        }
    }
    let (words, rest) = rest.as_chunks::<8>();
    for (lane, w) in lanes.iter_mut().zip(words) {
        *lane = step(*lane, w);
    }
    let mut h = (data.len() as u64).wrapping_mul(P1);
    for lane in lanes {
        h = (h ^ lane).wrapping_mul(P1).rotate_left(31);
    }
    let mut tail = [0u8; 8];
    for (d, s) in tail.iter_mut().zip(rest) {
        *d = *s;
    }
    h = (h ^ u64::from_le_bytes(tail))
        .wrapping_mul(P1)
        .rotate_left(31);
    mix(h)
}

pub(crate) fn with_checksum(mut data: Vec<u8>) -> Vec<u8> {
    let sum = checksum(&data);
    data.extend_from_slice(&sum.to_le_bytes());
    data
}

/// The blob without its checksum, once the checksum matches.
pub(crate) fn checked(blob: &[u8], what: impl Fn() -> String) -> Result<&[u8]> {
    let (body, sum) = blob
        .split_last_chunk::<4>()
        .ok_or_else(|| corrupt(format!("{} is shorter than its checksum", what())))?;
    if checksum(body) != u32::from_le_bytes(*sum) {
        return Err(corrupt(format!("{}: checksum mismatch", what())));
    }
    Ok(body)
}
