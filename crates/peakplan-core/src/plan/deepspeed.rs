//! DeepSpeed's sizes with `auto` resolved: the Trainer's fill from the model's hidden size where the Trainer fills
//! one (transformers `integrations/deepspeed.py`, `HfTrainerDeepSpeedConfig.trainer_config_finalize`), else
//! DeepSpeed's own default (`deepspeed/runtime/zero/config.py`, `DeepSpeedZeroConfig`).

use super::Plan;
use crate::arch::Architecture;
use serde::Serialize;

/// DeepSpeed's default `sub_group_size` (`Field(pp_int(1e9))`).
pub const DS_SUB_GROUP: u64 = 1_000_000_000;
/// DeepSpeed's default `allgather_bucket_size` (`Field(pp_int(5e8))`).
pub const DS_ALLGATHER_BUCKET: u64 = 500_000_000;
/// DeepSpeed's default `stage3_max_live_parameters` (`Field(pp_int(1e9))`).
pub const DS_MAX_LIVE: u64 = 1_000_000_000;
/// DeepSpeed's default `stage3_max_reuse_distance` (`Field(pp_int(1e9))`).
pub const DS_MAX_REUSE: u64 = 1_000_000_000;

/// The DeepSpeed settings a plan runs with, every `auto` filled (elements, not bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DeepSpeedSizes {
    /// `sub_group_size`: the optimizer steps the fp32 partition a sub-group at a time.
    pub sub_group: u64,
    /// `reduce_bucket_size`: `auto` is hidden_size² (the Trainer fills it under every stage).
    pub reduce_bucket: u64,
    /// `allgather_bucket_size` (ZeRO-1 and 2): `auto` is DeepSpeed's 5 x 10^8.
    pub allgather_bucket: u64,
    /// `stage3_prefetch_bucket_size` (ZeRO-3): `auto` is `int(0.9 * hidden_size * hidden_size)`.
    pub prefetch_bucket: u64,
    /// `stage3_max_live_parameters` (ZeRO-3): `auto` is DeepSpeed's 10^9.
    pub max_live: u64,
    /// `stage3_max_reuse_distance` (ZeRO-3): `auto` is DeepSpeed's 10^9.
    pub max_reuse: u64,
    /// `stage3_param_persistence_threshold` (ZeRO-3): `auto` is 10 x hidden_size.
    pub persistence: u64,
    /// `overlap_comm`: `auto` is DeepSpeed's default, on under ZeRO-3 only (`overlap_comm_valid`).
    pub overlap_comm: bool,
    /// `contiguous_gradients`: `auto` is DeepSpeed's default, on.
    pub contiguous_gradients: bool,
    /// The model is partitioned as it loads: `zinit=1` under ZeRO-3.
    pub zero_init: bool,
}

impl Plan {
    /// The plan's DeepSpeed settings over `arch`, `auto` filled as the Trainer and DeepSpeed fill it: the
    /// Trainer's `hidden_size`-based values for `reduce_bucket_size`, `stage3_prefetch_bucket_size` and
    /// `stage3_param_persistence_threshold` (it fills the last two under ZeRO-3, the only stage that reads
    /// them), DeepSpeed's defaults for the others.
    pub fn deepspeed_sizes(&self, arch: &Architecture) -> DeepSpeedSizes {
        let h = arch.hidden;
        DeepSpeedSizes {
            sub_group: self.ds_sub_group.unwrap_or(DS_SUB_GROUP),
            reduce_bucket: self.ds_reduce_bucket.unwrap_or(h.saturating_mul(h)),
            allgather_bucket: self.ds_allgather_bucket.unwrap_or(DS_ALLGATHER_BUCKET),
            prefetch_bucket: self.ds_prefetch_bucket.unwrap_or_else(|| prefetch_auto(h)),
            max_live: self.ds_max_live.unwrap_or(DS_MAX_LIVE),
            max_reuse: self.ds_max_reuse.unwrap_or(DS_MAX_REUSE),
            persistence: self.ds_persistence.unwrap_or(h.saturating_mul(10)),
            overlap_comm: self.ds_overlap_comm.unwrap_or(self.zero == 3),
            contiguous_gradients: self.ds_contiguous_grads.unwrap_or(true),
            zero_init: self.zero_init && self.zero == 3,
        }
    }
}

/// The Trainer's `int(0.9 * hidden_size * hidden_size)`, in Python's float arithmetic (left to right).
fn prefetch_auto(hidden: u64) -> u64 {
    (0.9 * hidden as f64 * hidden as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::ModelId;

    fn arch(hidden: u64) -> Architecture {
        let mut a = ModelId::DEFAULT.arch().clone();
        a.hidden = hidden;
        a
    }

    #[test]
    fn auto_is_the_trainers_fill_from_the_hidden_size() {
        let plan = Plan {
            zero: 3,
            ..Plan::default()
        };
        // Qwen2.5-7B: hidden_size 3584.
        let s = plan.deepspeed_sizes(&arch(3584));
        assert_eq!(s.reduce_bucket, 3584 * 3584);
        assert_eq!(s.prefetch_bucket, 11_560_550); // int(0.9 * 3584 * 3584) = int(11560550.4)
        assert_eq!(s.persistence, 35_840);
        assert_eq!(
            (s.sub_group, s.allgather_bucket, s.max_live),
            (1_000_000_000, 500_000_000, 1_000_000_000)
        );
        assert!(s.overlap_comm && s.contiguous_gradients && s.zero_init);
        // Llama-2-7B: hidden_size 4096; 0.9 x 4096² = 15099494.4.
        assert_eq!(
            plan.deepspeed_sizes(&arch(4096)).prefetch_bucket,
            15_099_494
        );
        // Python: int(0.9 * 10 * 10) == 90.
        assert_eq!(prefetch_auto(10), 90);
        assert_eq!(prefetch_auto(0), 0);
    }

    #[test]
    fn set_values_win_and_switches_follow_the_stage() {
        let mut plan = Plan {
            zero: 2,
            ..Plan::default()
        };
        let s = plan.deepspeed_sizes(&arch(4096));
        // overlap_comm defaults on under ZeRO-3 only; zero.Init partitions only under ZeRO-3.
        assert!(!s.overlap_comm && s.contiguous_gradients && !s.zero_init);
        for (k, v) in [
            ("ds_sub", "0"),
            ("ds_rbucket", "200000000"),
            ("ds_agbucket", "200000000"),
            ("ds_prefetch", "0"),
            ("ds_live", "0"),
            ("ds_reuse", "0"),
            ("ds_persist", "1000"),
            ("ds_overlap", "1"),
            ("ds_contig", "0"),
            ("zinit", "0"),
            ("zero", "3"),
        ] {
            plan.set(k, v).unwrap();
        }
        let s = plan.deepspeed_sizes(&arch(4096));
        assert_eq!(
            s,
            DeepSpeedSizes {
                sub_group: 0,
                reduce_bucket: 200_000_000,
                allgather_bucket: 200_000_000,
                prefetch_bucket: 0,
                max_live: 0,
                max_reuse: 0,
                persistence: 1000,
                overlap_comm: true,
                contiguous_gradients: false,
                zero_init: false,
            }
        );
        plan.set("ds_overlap", "auto").unwrap();
        assert!(plan.deepspeed_sizes(&arch(4096)).overlap_comm);
    }

    #[test]
    fn keys_read_and_write_auto_and_refuse_bad_values() {
        let mut plan = Plan::default();
        assert_eq!(plan.get("ds_rbucket").as_deref(), Some("auto"));
        assert_eq!(plan.get("ds_overlap").as_deref(), Some("auto"));
        assert_eq!(plan.get("zinit").as_deref(), Some("1"));
        // Written only when set: a default plan's link has none of them.
        assert!(!plan.to_query().contains("ds_") && !plan.to_query().contains("zinit"));
        plan.set("ds_rbucket", "500000000").unwrap();
        plan.set("ds_contig", "false").unwrap();
        plan.set("zinit", "0").unwrap();
        let q = plan.to_query();
        assert!(q.contains("ds_rbucket=500000000&") || q.ends_with("ds_rbucket=500000000"));
        assert!(q.contains("ds_contig=0") && q.contains("zinit=0"), "{q}");
        assert_eq!(Plan::parse_query(&q).plan, plan);
        let e = plan.set("ds_overlap", "yes").unwrap_err();
        assert!(e.contains("accepted: 0, 1, auto"), "{e}");
        let e = plan.set("ds_sub", "5e8").unwrap_err();
        assert!(e.contains("or auto"), "{e}");
        let e = plan.set("ds_live", "2000000000000000").unwrap_err();
        assert!(e.contains("out of range"), "{e}");
    }
}
