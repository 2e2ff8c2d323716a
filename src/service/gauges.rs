//! The gauges of `/metrics`: the current state, read under the engines
//! lock.

use super::*;

impl Service {
    /// Gauges for `/metrics` (current state).
    pub fn metrics_text(&self) -> String {
        let heads = *self.output.heads.borrow();
        let at = &mut Held::entry();
        let logged = self.queue(at).logged;
        let g = self.lock(at);
        let mismatches = g.engines.patterns.type_mismatches();
        let p = &g.engines.window;
        let parts = p.partitions();
        let per = |f: &dyn Fn(&PartitionStatus) -> Option<f64>| -> Vec<_> {
            parts
                .iter()
                .filter_map(|s| f(s).map(|v| (Some(("partition", s.name.clone())), v)))
                .collect()
        };
        let gauges = [
            Gauge::one(
                "streamforge_sequence",
                "Latest change sequence.",
                heads.changes as f64,
            ),
            Gauge::one(
                "streamforge_late_records",
                "Late records in the late output.",
                heads.late as f64,
            ),
            Gauge::one(
                "streamforge_epoch",
                "Restores so far (the output streams' epoch).",
                g.epochs.window as f64,
            ),
            Gauge {
                name: "streamforge_watermark",
                help: "The global watermark (no sample until there is one).",
                samples: p
                    .watermark()
                    .map(|w| (None, w as f64))
                    .into_iter()
                    .collect(),
            },
            Gauge {
                name: "streamforge_partition_offset",
                help: "Consumed offset of each partition (-1: nothing consumed yet).",
                samples: per(&|s| Some(s.offset as f64)),
            },
            Gauge {
                name: "streamforge_partition_progress",
                help: "Reported watermark progress of each partition (no sample until it reports).",
                samples: per(&|s| s.progress.map(|v| v as f64)),
            },
            Gauge {
                name: "streamforge_partition_idle",
                help: "1 when the partition is marked idle (it then holds no watermark back).",
                samples: per(&|s| Some(f64::from(u8::from(s.idle)))),
            },
            Gauge::one(
                "streamforge_live_buckets",
                "Live buckets.",
                p.live_buckets() as f64,
            ),
            Gauge::one(
                "streamforge_history_tail",
                "Deliveries and late records of the window engine's history held in memory (not yet flushed into segments).",
                self.engines_lock.tail.load(Ordering::Relaxed) as f64,
            ),
            Gauge::one(
                "streamforge_id_index_memory_bytes",
                "Memory of the id index: its Bloom filters, fences and the ids not yet stored.",
                self.setup.history.ids_memory() as f64,
            ),
            Gauge::one(
                "streamforge_id_index_runs",
                "Runs of the id index (each a filter probe per new event id).",
                self.setup.history.id_runs() as f64,
            ),
            Gauge::one(
                "streamforge_id_index_merging",
                "Entries of the id index's runs being merged (0: no merge; merges run on a thread of their own, checkpoints and flushes go on).",
                self.setup.history.ids_merging() as f64,
            ),
            Gauge::one(
                "streamforge_shards",
                "Key-hash shards of the window engine (--shards).",
                p.shards() as f64,
            ),
            Gauge::one(
                "streamforge_logged_commands",
                "Commands logged since the last checkpoint or restore.",
                (logged.window + logged.patterns) as f64,
            ),
            Gauge::one(
                "streamforge_checkpoint_due_after_commands",
                "Logged commands of the window engine after which its automatic checkpoint is due (--checkpoint-every, or as many as a large live state has buckets; 0: never).",
                if self.checkpoints.checkpoint_every == 0 {
                    0.0
                } else {
                    self.auto_threshold(EngineId::Window) as f64
                },
            ),
            Gauge::one(
                "streamforge_waiters",
                "Open long polls and change streams waiting for new output.",
                self.output.heads.receiver_count() as f64,
            ),
            Gauge::one(
                "streamforge_ready",
                "1 when the engines match the store.",
                f64::from(u8::from(self.is_ready())),
            ),
        ];
        let patterns = g.engines.patterns.status();
        drop(g);
        let mut text = self.env.metrics.render(&gauges);
        text.push_str(&self.env.metrics.render_patterns(&patterns));
        pattern_diagnostics::render_type_mismatches(&mut text, &mismatches);
        text
    }
}
