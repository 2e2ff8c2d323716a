//! A Nexmark workload generator: people, auctions and bids of an online
//! auction site, written as the operations of a Streamforge operation file
//! (deliveries and per-partition watermark advances).
//!
//! Pure like the engines: std only, no clock, no randomness source, no I/O
//! (its `Cargo.toml` has no dependencies; `crates/clippy.toml` forbids
//! clocks, files, sockets, threads and the environment). Everything is a function of the seed and
//! of the event's position in the stream:
//!
//! - [`event`]`(seed, n)` is the `n`-th source event (0-based). Of every 50
//!   consecutive events, the first is a person, the next three are auctions
//!   and the other 46 are bids (the proportions of the Nexmark benchmark).
//!   Person `p` is event `50 p`; auction `a` is event `50 (a / 3) + 1 + a % 3`.
//!   A bid names a recent auction (half of the time the current "hot" one)
//!   and a recent person as its bidder; an auction's seller is a recent person.
//! - Event time: `T0 + n * interval - jitter`, with `jitter` in
//!   `0 ..= disorder` drawn from `(seed, n)`: times are out of order by at
//!   most `disorder`.
//! - [`Workload`] maps each source event to the deliveries of one query
//!   ([`Query`]: which events it keeps, with which key and value) and spreads
//!   them over the partitions `p0 .. p{N-1}` by a hash of the entity id (a
//!   person's id, an auction's id; a bid goes with its auction), with
//!   consecutive offsets per partition.
//! - Watermarks: every `watermark_every` source events, every partition that
//!   delivered something since its last report advances to the largest event
//!   time it has delivered minus `disorder`. No later event of that partition
//!   is earlier than that (its time is at least `T0 + m * interval -
//!   disorder` for a later position `m`), so no event is ever late, whatever
//!   the lateness and however the partitions interleave. A partition that
//!   delivers little (a skewed hash) reports little and holds the global
//!   watermark back. After the last event every partition advances to
//!   [`Workload::end`], `T0 + events * interval (+ lead)`, above every event
//!   time and every earlier report.
//! - `lead = d > 0` lets each partition report `d` more than that: events
//!   then arrive up to `d` behind the watermark (they correct windows that
//!   were already published, and merge sessions that were), and none is
//!   late for a pipeline whose lateness is at least `d`.
//! - `late_every = k > 0` asks for late data: every `k`-th kept event is
//!   moved `late_by` earlier, behind what its partition already reported.

use std::collections::VecDeque;

/// The event time of the first event (2023-11-14T22:13:20Z in milliseconds).
pub const T0: i64 = 1_700_000_000_000;

/// Of every [`PROPORTION_TOTAL`] events, this many are people ...
pub const PERSON_PROPORTION: u64 = 1;
/// ... this many are auctions ...
pub const AUCTION_PROPORTION: u64 = 3;
/// ... and the rest are bids.
pub const PROPORTION_TOTAL: u64 = 50;

/// The cities people live in (q8 counts new people per city).
pub const CITIES: [&str; 10] = [
    "Bend",
    "Boise",
    "Cheyenne",
    "Kent",
    "Los Angeles",
    "Phoenix",
    "Portland",
    "Redmond",
    "San Francisco",
    "Seattle",
];

/// A bid names one of the last this many auctions (or the hot one).
const AUCTIONS_IN_FLIGHT: u64 = 100;
/// A bidder or seller is one of the last this many people (or a hot one).
const ACTIVE_PEOPLE: u64 = 50;
/// The hot auction (and hot bidder) is the last multiple of this.
const HOT_RATIO: u64 = 4;

/// One source event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NexmarkEvent {
    /// Its position in the stream.
    pub n: u64,
    /// Event time.
    pub time: i64,
    /// What it is.
    pub kind: Kind,
}

/// The three kinds of Nexmark events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A new person.
    Person {
        /// Person id (0, 1, 2, ... in stream order).
        id: u64,
        /// Where they live, one of [`CITIES`].
        city: &'static str,
    },
    /// A new auction.
    Auction {
        /// Auction id (0, 1, 2, ... in stream order).
        id: u64,
        /// The person selling.
        seller: u64,
        /// Item category, 0..10.
        category: u64,
        /// Reserve price.
        reserve: i64,
    },
    /// A bid.
    Bid {
        /// The auction bid on.
        auction: u64,
        /// The person bidding.
        bidder: u64,
        /// Price bid.
        price: i64,
    },
}

/// SplitMix64's finalizer: a well-mixed 64-bit hash of `x`.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `salt`-th random number of event `n` under `seed`.
fn draw(seed: u64, n: u64, salt: u64) -> u64 {
    mix(mix(seed ^ mix(n)) ^ salt.wrapping_mul(0xD6E8_FEB8_6659_FD93))
}

/// People created before position `n` (person `p` is at `50 p`).
fn people_before(n: u64) -> u64 {
    n.div_ceil(PROPORTION_TOTAL)
}

/// Auctions created before position `n`.
fn auctions_before(n: u64) -> u64 {
    let epoch = n / PROPORTION_TOTAL;
    let within = n % PROPORTION_TOTAL;
    epoch * AUCTION_PROPORTION
        + within
            .saturating_sub(PERSON_PROPORTION)
            .min(AUCTION_PROPORTION)
}

/// A recent one of `count` entities (the last `window`, or the hot one half
/// of the time); `count >= 1`.
fn recent(seed: u64, n: u64, salt: u64, count: u64, window: u64) -> u64 {
    let last = count - 1;
    if draw(seed, n, salt).is_multiple_of(2) {
        last / HOT_RATIO * HOT_RATIO
    } else {
        last - draw(seed, n, salt + 1) % window.min(count)
    }
}

/// The jitter of event `n`: how far its time lies before `T0 + n * interval`.
fn jitter(seed: u64, n: u64, disorder: i64) -> i64 {
    if disorder <= 0 {
        return 0;
    }
    (draw(seed, n, 1) % (disorder as u64 + 1)) as i64
}

/// The `n`-th source event under `seed`, with events `interval` apart and
/// out of order by at most `disorder`.
pub fn event(seed: u64, n: u64, interval: i64, disorder: i64) -> NexmarkEvent {
    let time = T0 + (n as i64) * interval - jitter(seed, n, disorder);
    let within = n % PROPORTION_TOTAL;
    let kind = if within < PERSON_PROPORTION {
        Kind::Person {
            id: people_before(n),
            city: CITIES[(draw(seed, n, 2) % CITIES.len() as u64) as usize],
        }
    } else if within < PERSON_PROPORTION + AUCTION_PROPORTION {
        Kind::Auction {
            id: auctions_before(n),
            seller: recent(seed, n, 3, people_before(n), ACTIVE_PEOPLE),
            category: draw(seed, n, 5) % 10,
            reserve: 100 + (draw(seed, n, 6) % 10_000) as i64,
        }
    } else {
        // a skewed price: most bids are small, a few are large
        let base = 1 + draw(seed, n, 7) % 1000;
        let scale = 1 + draw(seed, n, 8) % 100;
        Kind::Bid {
            auction: recent(seed, n, 9, auctions_before(n), AUCTIONS_IN_FLIGHT),
            bidder: recent(seed, n, 11, people_before(n), ACTIVE_PEOPLE),
            price: (base * scale) as i64,
        }
    };
    NexmarkEvent { n, time, kind }
}

/// The queries a workload can be written for: which source events become
/// deliveries, with which key and value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    /// Hot items: every bid, key the auction (`a<id>`), value the price.
    Q5,
    /// Highest bid: every bid twice, once under its auction (`a<id>`, event
    /// id `b<n>`) and once under the key `*` (event id `b<n>*`), value the
    /// price; so a window's max per auction and over all bids come from one
    /// pipeline.
    Q7,
    /// New people per city: every person, key the city, value the person id.
    Q8,
    /// User sessions: every bid, key the bidder (`p<id>`), value the price.
    Q11,
    /// Stream-time windows: every bid, key the bidder, value the price.
    Q12,
}

impl Query {
    /// Every query, in order.
    pub const ALL: [Query; 5] = [Query::Q5, Query::Q7, Query::Q8, Query::Q11, Query::Q12];

    /// `q5`, `q7`, ...
    pub fn name(self) -> &'static str {
        match self {
            Query::Q5 => "q5",
            Query::Q7 => "q7",
            Query::Q8 => "q8",
            Query::Q11 => "q11",
            Query::Q12 => "q12",
        }
    }

    /// The query named `name` (`q5`, `q7`, `q8`, `q11`, `q12`).
    pub fn from_name(name: &str) -> Option<Query> {
        Query::ALL.into_iter().find(|q| q.name() == name)
    }

    /// The deliveries (without partition and offset) of one source event:
    /// `(id, key, value)`.
    pub fn deliveries(self, e: &NexmarkEvent) -> Vec<(String, String, i64)> {
        match (self, &e.kind) {
            (Query::Q5, Kind::Bid { auction, price, .. }) => {
                vec![(format!("b{}", e.n), format!("a{auction}"), *price)]
            }
            (Query::Q7, Kind::Bid { auction, price, .. }) => vec![
                (format!("b{}", e.n), format!("a{auction}"), *price),
                (format!("b{}*", e.n), "*".to_string(), *price),
            ],
            (Query::Q8, Kind::Person { id, city }) => {
                vec![(format!("p{id}"), (*city).to_string(), *id as i64)]
            }
            (Query::Q11 | Query::Q12, Kind::Bid { bidder, price, .. }) => {
                vec![(format!("b{}", e.n), format!("p{bidder}"), *price)]
            }
            _ => Vec::new(),
        }
    }
}

/// The entity a source event belongs to, for partitioning: a person's id,
/// an auction's id, a bid's auction. Persons and auctions are numbered
/// apart (a person and an auction with the same number may land apart).
fn entity(e: &NexmarkEvent) -> u64 {
    match e.kind {
        Kind::Person { id, .. } => mix(id ^ 0x5045_5253_4f4e),
        Kind::Auction { id, .. } | Kind::Bid { auction: id, .. } => mix(id ^ 0x4155_4354),
    }
}

/// How a workload is generated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The seed: the same configuration always gives the same workload.
    pub seed: u64,
    /// Source events (people, auctions and bids; a query keeps some of them).
    pub events: u64,
    /// Partitions `p0 .. p{N-1}`, at least 1.
    pub partitions: u32,
    /// The query whose deliveries are written.
    pub query: Query,
    /// Event-time distance between consecutive source events.
    pub interval: i64,
    /// Largest distance an event's time lies before its position's time.
    pub disorder: i64,
    /// Source events between two rounds of watermark advances (at least 1).
    pub watermark_every: u64,
    /// How far each partition's watermark runs ahead of the bound that
    /// keeps every later event at or after it.
    pub lead: i64,
    /// Every this-many-th kept event is late (0: none).
    pub late_every: u64,
    /// How far a late event is moved back.
    pub late_by: i64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 0,
            events: 1000,
            partitions: 4,
            query: Query::Q5,
            interval: 10,
            disorder: 500,
            watermark_every: 100,
            lead: 0,
            late_every: 0,
            late_by: 60_000,
        }
    }
}

/// One operation of an operation file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A delivery.
    Deliver {
        /// Partition index (`p<partition>`).
        partition: u32,
        /// Its offset (consecutive per partition, from 0).
        offset: u64,
        /// Event id.
        id: String,
        /// Key.
        key: String,
        /// Event time.
        timestamp: i64,
        /// Value.
        value: i64,
        /// The source event it comes from.
        source: u64,
    },
    /// A watermark advance of partition `p<partition>`.
    Advance {
        /// Partition index.
        partition: u32,
        /// Its new progress.
        watermark: i64,
    },
}

impl Op {
    /// The partition index the operation is for.
    pub fn partition(&self) -> u32 {
        match self {
            Op::Deliver { partition, .. } | Op::Advance { partition, .. } => *partition,
        }
    }

    /// The operation as one line of an operation file (no newline);
    /// `with_offset` false leaves the offset out (append mode).
    pub fn to_line(&self, with_offset: bool) -> String {
        let mut s = String::with_capacity(128);
        match self {
            Op::Deliver {
                partition,
                offset,
                id,
                key,
                timestamp,
                value,
                ..
            } => {
                s.push_str(&format!(
                    "{{\"op\":\"deliver\",\"partition\":\"p{partition}\","
                ));
                if with_offset {
                    s.push_str(&format!("\"offset\":{offset},"));
                }
                s.push_str(&format!("\"event\":{{\"id\":{},\"key\":{},\"timestamp\":{timestamp},\"value\":{value}}}}}",
                    json_string(id),
                    json_string(key)));
            }
            Op::Advance {
                partition,
                watermark,
            } => {
                s.push_str(&format!("{{\"op\":\"advance\",\"partition\":\"p{partition}\",\"watermark\":{watermark}}}"));
            }
        }
        s
    }
}

/// A JSON string literal (ids, keys and cities are plain ASCII, but quote
/// properly anyway).
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A workload: the operations of a configuration, in order (an iterator:
/// a workload of a million events is never held whole).
#[derive(Debug, Clone)]
pub struct Workload {
    config: Config,
    /// The next source event.
    next: u64,
    /// Next offset per partition.
    offsets: Vec<u64>,
    /// Largest time delivered per partition.
    max_time: Vec<Option<i64>>,
    /// Last reported progress per partition.
    reported: Vec<Option<i64>>,
    /// Kept events so far (for `late_every`).
    kept: u64,
    /// Operations generated and not yet returned.
    pending: VecDeque<Op>,
    /// The final advances were generated.
    ended: bool,
}

impl Workload {
    /// The workload of `config` (`partitions` and `watermark_every` are taken
    /// as at least 1).
    pub fn new(mut config: Config) -> Workload {
        config.partitions = config.partitions.max(1);
        config.watermark_every = config.watermark_every.max(1);
        let n = config.partitions as usize;
        Workload {
            config,
            next: 0,
            offsets: vec![0; n],
            max_time: vec![None; n],
            reported: vec![None; n],
            kept: 0,
            pending: VecDeque::new(),
            ended: false,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The watermark every partition reports after the last event: above
    /// every event time of the workload.
    pub fn end(&self) -> i64 {
        T0 + self.config.events as i64 * self.config.interval + self.config.lead.max(0)
    }

    /// The partition of a source event.
    pub fn partition_of(&self, e: &NexmarkEvent) -> u32 {
        (entity(e) % u64::from(self.config.partitions)) as u32
    }

    fn generate(&mut self) {
        let c = &self.config;
        let n = self.next;
        self.next += 1;
        let e = event(c.seed, n, c.interval, c.disorder);
        let p = self.partition_of(&e);
        let (late_every, late_by, query) = (c.late_every, c.late_by, c.query);
        for (id, key, value) in query.deliveries(&e) {
            self.kept += 1;
            let late = late_every > 0 && self.kept.is_multiple_of(late_every);
            let timestamp = if late { e.time - late_by } else { e.time };
            let pi = p as usize;
            if !late {
                self.max_time[pi] = Some(self.max_time[pi].map_or(timestamp, |m| m.max(timestamp)));
            }
            self.pending.push_back(Op::Deliver {
                partition: p,
                offset: self.offsets[pi],
                id,
                key,
                timestamp,
                value,
                source: n,
            });
            self.offsets[pi] += 1;
        }
        if (n + 1).is_multiple_of(self.config.watermark_every) {
            for p in 0..self.config.partitions as usize {
                let Some(max) = self.max_time[p] else {
                    continue;
                };
                let w = max - self.config.disorder + self.config.lead;
                if self.reported[p].is_none_or(|r| w > r) {
                    self.reported[p] = Some(w);
                    self.pending.push_back(Op::Advance {
                        partition: p as u32,
                        watermark: w,
                    });
                }
            }
        }
    }
}

impl Iterator for Workload {
    type Item = Op;

    fn next(&mut self) -> Option<Op> {
        loop {
            if let Some(op) = self.pending.pop_front() {
                return Some(op);
            }
            if self.next < self.config.events {
                self.generate();
                continue;
            }
            if self.ended {
                return None;
            }
            self.ended = true;
            let end = self.end();
            for p in 0..self.config.partitions {
                self.pending.push_back(Op::Advance {
                    partition: p,
                    watermark: end,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportions_and_ids() {
        let kinds: Vec<Kind> = (0..100).map(|n| event(1, n, 10, 0).kind).collect();
        assert!(matches!(kinds[0], Kind::Person { id: 0, .. }));
        assert!(matches!(kinds[1], Kind::Auction { id: 0, .. }));
        assert!(matches!(kinds[3], Kind::Auction { id: 2, .. }));
        assert!(matches!(kinds[4], Kind::Bid { .. }));
        assert!(matches!(kinds[50], Kind::Person { id: 1, .. }));
        assert!(matches!(kinds[51], Kind::Auction { id: 3, .. }));
        let bids = kinds
            .iter()
            .filter(|k| matches!(k, Kind::Bid { .. }))
            .count();
        assert_eq!(bids, 92);
        // bids name existing auctions and people
        for n in 0..5000 {
            if let Kind::Bid {
                auction, bidder, ..
            } = event(3, n, 10, 0).kind
            {
                assert!(auction < auctions_before(n), "{n}");
                assert!(bidder < people_before(n), "{n}");
            }
        }
    }

    #[test]
    fn a_pure_function_of_seed_and_position() {
        assert_eq!(event(7, 123, 10, 500), event(7, 123, 10, 500));
        assert_ne!(event(7, 123, 10, 500), event(8, 123, 10, 500));
        let a: Vec<Op> = Workload::new(Config::default()).collect();
        assert!(a.len() > 900);
        let b: Vec<Op> = Workload::new(Config::default()).collect();
        assert_eq!(a, b);
    }

    #[test]
    fn no_event_is_behind_its_partitions_watermark() {
        for query in Query::ALL {
            let s = Workload::new(Config {
                seed: 5,
                events: 20_000,
                query,
                ..Config::default()
            });
            let end = s.end();
            let mut progress = [i64::MIN; 4];
            let mut offsets = [0u64; 4];
            let mut delivered = 0;
            for op in s {
                match op {
                    Op::Deliver {
                        partition,
                        offset,
                        timestamp,
                        ..
                    } => {
                        let p = partition as usize;
                        assert!(timestamp >= progress[p], "{query:?}");
                        assert!(timestamp < end);
                        assert_eq!(offset, offsets[p]);
                        offsets[p] += 1;
                        delivered += 1;
                    }
                    Op::Advance {
                        partition,
                        watermark,
                    } => {
                        let p = partition as usize;
                        assert!(watermark > progress[p]);
                        progress[p] = watermark;
                    }
                }
            }
            assert!(delivered > 300, "{query:?}: {delivered}");
            assert_eq!(progress, [end; 4]);
            assert!(offsets.iter().all(|&o| o > 0), "{query:?}: {offsets:?}");
        }
    }

    #[test]
    fn a_lead_puts_events_behind_the_watermark_by_at_most_the_lead() {
        let s = Workload::new(Config {
            seed: 5,
            events: 5000,
            lead: 300,
            ..Config::default()
        });
        let mut progress = [i64::MIN; 4];
        let mut behind = 0;
        for op in s {
            match op {
                Op::Deliver {
                    partition,
                    timestamp,
                    ..
                } => {
                    let p = progress[partition as usize];
                    assert!(timestamp + 300 >= p);
                    if timestamp < p {
                        behind += 1;
                    }
                }
                Op::Advance {
                    partition,
                    watermark,
                } => progress[partition as usize] = watermark,
            }
        }
        assert!(behind > 20, "{behind}");
    }

    #[test]
    fn late_every_moves_events_behind() {
        let s = Workload::new(Config {
            seed: 5,
            events: 5000,
            late_every: 10,
            ..Config::default()
        });
        let mut progress = [i64::MIN; 4];
        let mut behind = 0;
        for op in s {
            match op {
                Op::Deliver {
                    partition,
                    timestamp,
                    ..
                } if timestamp < progress[partition as usize] => behind += 1,
                Op::Advance {
                    partition,
                    watermark,
                } => progress[partition as usize] = watermark,
                _ => {}
            }
        }
        assert!(behind > 300, "{behind}");
    }

    #[test]
    fn lines() {
        let d = Op::Deliver {
            partition: 2,
            offset: 5,
            id: "b9".into(),
            key: "San \"F\"".into(),
            timestamp: -3,
            value: 12,
            source: 9,
        };
        assert_eq!(
            d.to_line(true),
            r#"{"op":"deliver","partition":"p2","offset":5,"event":{"id":"b9","key":"San \"F\"","timestamp":-3,"value":12}}"#
        );
        assert_eq!(
            d.to_line(false),
            r#"{"op":"deliver","partition":"p2","event":{"id":"b9","key":"San \"F\"","timestamp":-3,"value":12}}"#
        );
        let a = Op::Advance {
            partition: 0,
            watermark: 7,
        };
        assert_eq!(
            a.to_line(true),
            r#"{"op":"advance","partition":"p0","watermark":7}"#
        );
    }
}
