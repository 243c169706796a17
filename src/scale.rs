//! Slider scales: powers of two on the track (or a list of steps, for small batches), any integer typed beside it.

/// A slider's track: positions `min..=max`, each a power of two (the position is the exponent), or an index into
/// a list of steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    pub min: u32,
    pub max: u32,
    /// The value at each position, ascending; None for powers of two.
    steps: Option<&'static [u64]>,
}

/// LoRA rank: 1 to 1024, powers of two.
pub const RANK: Scale = Scale {
    min: 0,
    max: 10,
    steps: None,
};

/// Micro-batches a user picks: every one up to 8 (a "largest batch 3" is on the track), then four steps per
/// doubling up to 256.
const BATCH_STEPS: &[u64] = &[
    1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160,
    192, 224, 256,
];

/// Micro-batch: 1 to 256.
pub const BATCH: Scale = Scale {
    min: 0,
    max: BATCH_STEPS.len() as u32 - 1,
    steps: Some(BATCH_STEPS),
};

/// Sequence length: 128 to 131,072 tokens, powers of two.
pub const SEQ: Scale = Scale {
    min: 7,
    max: 17,
    steps: None,
};

/// One of the planner's three sliders: the plan key it edits, its track, and how its value is read from and
/// written into a plan. The slider and the neighbours made ahead of its moves (`state.rs`) both go by it.
#[derive(Clone, Copy)]
pub struct Slider {
    pub key: &'static str,
    pub scale: Scale,
    pub get: fn(&peakplan_core::Plan) -> u64,
    pub set: fn(&mut peakplan_core::Plan, u64),
}

/// The LoRA rank slider (`r`).
pub const RANK_SLIDER: Slider = Slider {
    key: "r",
    scale: RANK,
    get: |p| p.rank,
    set: |p, v| p.rank = v,
};

/// The micro-batch slider (`b`).
pub const BATCH_SLIDER: Slider = Slider {
    key: "b",
    scale: BATCH,
    get: |p| p.micro_batch,
    set: |p, v| p.micro_batch = v,
};

/// The sequence-length slider (`s`).
pub const SEQ_SLIDER: Slider = Slider {
    key: "s",
    scale: SEQ,
    get: |p| p.seq_len,
    set: |p, v| p.seq_len = v,
};

impl Scale {
    /// The plan value at a slider position.
    pub fn value(self, position: u32) -> u64 {
        let p = position.clamp(self.min, self.max);
        match self.steps {
            Some(steps) => steps[p as usize],
            None => 1u64 << p,
        }
    }

    /// The slider position nearest to a plan value, by ratio (typed values between steps snap on the track only).
    pub fn position(self, value: u64) -> u32 {
        let v = (value.max(1) as f64).log2();
        match self.steps {
            Some(steps) => {
                let distance = |i: usize| (v - (steps[i] as f64).log2()).abs();
                (0..steps.len())
                    .min_by(|&a, &b| distance(a).total_cmp(&distance(b)))
                    .map_or(self.min, |i| i as u32)
            }
            None => (v.round() as u32).clamp(self.min, self.max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(scale: Scale, value: u64, expect_position: u32) {
        assert_eq!(scale.position(value), expect_position, "{value}");
    }

    #[test]
    fn positions_round_trip_every_step() {
        for s in [RANK, BATCH, SEQ] {
            for p in s.min..=s.max {
                check(s, s.value(p), p);
            }
        }
    }

    #[test]
    fn every_small_batch_is_on_the_track_and_the_ends_are_the_cores_range() {
        for b in 1..=8 {
            assert_eq!(BATCH.value(BATCH.position(b)), b);
        }
        assert_eq!((BATCH.value(BATCH.min), BATCH.value(BATCH.max)), (1, 256));
        assert!(BATCH_STEPS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn typed_values_snap_to_the_nearest_step_and_clamp() {
        check(SEQ, 3000, 12);
        check(SEQ, 1, 7);
        check(SEQ, 10_000_000, 17);
        check(RANK, 0, 0);
        check(BATCH, 9, 8);
        check(BATCH, 100_000, BATCH.max);
    }

    #[test]
    fn each_slider_reads_and_writes_the_key_it_names() {
        for slider in [RANK_SLIDER, BATCH_SLIDER, SEQ_SLIDER] {
            let mut plan = peakplan_core::Plan::parse_query("model=llama-2-7b&method=lora").plan;
            let v = slider.scale.value(slider.scale.min + 1);
            (slider.set)(&mut plan, v);
            assert_eq!((slider.get)(&plan), v, "{}", slider.key);
            assert_eq!(plan.get(slider.key), Some(v.to_string()), "{}", slider.key);
        }
    }
}
