//! Batches of varying length (`lens`, `lmean`, `lsd`, `lmax`; issue #45 step 1): what is allocated is the longest
//! batch's, exactly a fixed-length plan of `lmax` tokens; reserved memory comes from replaying sixteen steps at
//! drawn lengths on one allocator. Fixed and packed plans are what they always were.

use peakplan_core::plan::{Lens, Plan};
use peakplan_core::{estimate, preset_arch, replayed_batches, Kind};

/// The padded length of each replayed step (the Trainer's batches: `b` sequences each).
fn replayed_lengths(p: &Plan) -> Option<Vec<u64>> {
    replayed_batches(preset_arch(p), p).map(|b| b.iter().map(|s| s.len).collect())
}

fn plan(q: &str) -> Plan {
    let p = Plan::parse_query(q);
    assert!(p.diagnostics.is_empty(), "{q}: {:?}", p.diagnostics);
    p.plan
}

const BASE: &str = "model=llama-3.1-8b&method=lora&b=8&s=4096&gpu=a100-80gb";

#[test]
fn fixed_and_packed_batches_are_the_plan_as_it_was() {
    let fixed = plan(BASE);
    let packed = plan(&format!("{BASE}&lens=packed&lmean=300"));
    let arch = preset_arch(&fixed);
    assert_eq!(estimate(arch, &fixed), estimate(arch, &packed));
    assert_eq!(replayed_lengths(&packed), None);
    // A link that leaves the keys out writes none of them.
    assert!(!fixed.to_query().contains("lens"));
}

#[test]
fn varying_batches_allocate_what_the_longest_does_and_replay_sixteen_drawn_steps() {
    for lens in ["padded", "grouped"] {
        let p = plan(&format!("{BASE}&lens={lens}&lmean=300&lsd=200&lmax=2048"));
        let longest = plan("model=llama-3.1-8b&method=lora&b=8&s=2048&gpu=a100-80gb");
        let arch = preset_arch(&p);
        let (e, l) = (estimate(arch, &p), estimate(arch, &longest));
        // One accounting engine: every component but the allocator's cache is the longest batch's.
        for k in Kind::ALL.iter().filter(|k| **k != Kind::AllocatorSlack) {
            assert_eq!(e.component(*k), l.component(*k), "{lens}: {k:?}");
        }
        assert_eq!(e.peak_allocated_bytes, l.peak_allocated_bytes);
        assert!(e.peak_reserved_bytes >= e.peak_allocated_bytes);
        // The same plan draws the same steps.
        assert_eq!(estimate(arch, &p), e);
        let lengths = replayed_lengths(&p).unwrap();
        assert_eq!(lengths.len(), 16);
        assert!(
            lengths.iter().all(|l| (1..=2048).contains(l)),
            "{lengths:?}"
        );
        assert!(
            lengths.contains(&2048),
            "{lens}: the longest sequence is never replayed: {lengths:?}"
        );
        if p.lengths == Lens::Grouped {
            // The Trainer's length-grouped sampler: the longest batch first, then shorter ones.
            assert_eq!(lengths[0], 2048);
            assert!(lengths.windows(2).all(|w| w[0] >= w[1]), "{lengths:?}");
        } else {
            // Padded to each batch's longest of 8 draws: mostly far below lmax with a mean of 300.
            assert!(
                lengths.iter().filter(|l| **l < 1024).count() >= 12,
                "{lengths:?}"
            );
        }
    }
}

#[test]
fn allocated_memory_grows_with_the_longest_sequence_the_batch_and_s() {
    let at = |q: &str| {
        let p = plan(&format!(
            "model=llama-3.1-8b&method=lora&lens=padded&lmean=200&{q}"
        ));
        estimate(preset_arch(&p), &p).peak_allocated_bytes
    };
    assert!(at("b=4&s=4096&lmax=1024") < at("b=4&s=4096&lmax=2048"));
    assert!(at("b=4&s=4096&lmax=2048") < at("b=8&s=4096&lmax=2048"));
    // lmax auto is s.
    assert!(at("b=4&s=2048") < at("b=4&s=4096"));
    assert_eq!(at("b=4&s=2048"), at("b=4&s=4096&lmax=2048"));
}

#[test]
fn lengths_beyond_the_sequence_are_refused_saying_why() {
    let p = Plan::parse_query("s=1024&lens=padded&lmax=2048&lmean=1500");
    let said: Vec<(&str, &str)> = p
        .diagnostics
        .iter()
        .map(|d| (d.key.as_str(), d.message.as_str()))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0].0, "lmax");
    assert!(said[0].1.contains("longer than s=1024"), "{said:?}");
    assert_eq!(p.plan.len_max, None);
    // A dataset's mean before truncation may exceed the longest: its sequences are cut to it.
    assert_eq!(p.plan.len_mean, Some(1500));
    let cut = replayed_lengths(&p.plan).unwrap();
    // Three in four sequences of 1,500 ± 750 tokens are past 1,024: most steps are cut.
    assert!(cut.iter().filter(|l| **l == 1024).count() >= 8, "{cut:?}");
    let bad = Plan::parse_query("lens=sorted");
    assert!(bad.diagnostics[0]
        .message
        .ends_with("accepted: fixed, padded, packed, grouped"));
}

#[test]
fn the_advisor_weighs_grouping_padded_batches_by_length() {
    use peakplan_core::advise::candidates;
    let has = |q: &str| {
        candidates(&plan(q))
            .iter()
            .any(|c| c.query() == "lens=grouped")
    };
    assert!(has(&format!("{BASE}&lens=padded&lmean=300")));
    // Nothing to group where batches do not vary, or are grouped already.
    assert!(
        !has(BASE) && !has(&format!("{BASE}&lens=grouped")) && !has(&format!("{BASE}&lens=packed"))
    );
    // Packing is offered for batches that vary, and shown only where the replay says it saves: a 1B full
    // fine-tune's padded batches strand more than rows of `s` tokens reserve.
    let packs = |q: &str| {
        candidates(&plan(q))
            .iter()
            .any(|c| c.query() == "lens=packed")
    };
    assert!(packs(&format!("{BASE}&lens=grouped")) && packs(&format!("{BASE}&lens=padded")));
    assert!(!packs(BASE) && !packs(&format!("{BASE}&lens=packed")));
    let varying = plan(
        "model=llama-3.2-1b&method=full&b=4&s=2048&lens=padded&lmean=600&lsd=400&gpu=rtx-4090",
    );
    let a = peakplan_core::advise::advise_without_limits(
        preset_arch(&varying),
        &varying,
        Some(24 << 30),
    );
    let card = a
        .levers
        .iter()
        .find(|s| s.plan.lengths == Lens::Packed)
        .expect("a packing card");
    let packed = estimate(preset_arch(&card.plan), &card.plan);
    assert_eq!(card.saved_bytes, a.device_bytes - packed.device_bytes);
    assert!(card.saved_bytes > 0);
}

#[test]
fn max_split_size_reaches_the_allocator_replay_and_is_offered_where_it_saves() {
    // `msplit` (PYTORCH_CUDA_ALLOC_CONF's max_split_size_mb): blocks this large are not split for smaller
    // requests, which usually costs segments (Llama 3.1 8B QLoRA b=4 s=2048 on a 4090: about 1 GB more) and
    // sometimes saves (Qwen2.5-7B QLoRA b=2 s=4096: 16 MiB less).
    use peakplan_core::advise::advise_without_limits;
    let device = |q: &str| {
        let p = plan(q);
        estimate(preset_arch(&p), &p).device_bytes
    };
    let costs = "model=llama-3.1-8b&method=qlora&b=4&s=2048&gpu=rtx-4090";
    assert!(device(&format!("{costs}&msplit=128")) > device(costs));
    let saves = "model=qwen2.5-7b&method=qlora&b=2&s=4096&gpu=rtx-4090";
    assert!(device(&format!("{saves}&msplit=128")) < device(saves));
    let card = |q: &str| {
        let p = plan(q);
        advise_without_limits(preset_arch(&p), &p, Some(24 << 30))
            .levers
            .into_iter()
            .find(|s| s.plan.max_split_mb == Some(128))
    };
    assert_eq!(
        card(saves).map(|c| c.saved_bytes),
        Some(device(saves) - device(&format!("{saves}&msplit=128")))
    );
    assert!(card(costs).is_none());
    // PyTorch refuses 20 MiB and less.
    let bad = Plan::parse_query("msplit=20");
    assert!(
        bad.diagnostics[0]
            .message
            .starts_with("msplit=20 is out of range"),
        "{:?}",
        bad.diagnostics
    );
}

#[test]
fn the_segment_picture_is_the_replay_at_the_step_s_peak() {
    // The allocator's segments at the moment the measured step's requested bytes peak: what is in use there is
    // the estimate's peak allocated to the byte, and the segments are what the allocator has reserved by then.
    for q in [
        BASE.to_string(),
        format!("{BASE}&lens=padded&lmean=300&lsd=200"),
        format!("{BASE}&lens=grouped&lmean=300&lsd=200&alloc=expandable"),
        "model=llama-3.2-1b&method=full&b=4&s=2048&lens=padded&lmean=600&lsd=400&gpu=rtx-4090"
            .into(),
        "model=qwen2.5-7b&method=qlora&b=2&s=4096&gpu=rtx-4090&ga=4&alloc=emptied".into(),
    ] {
        let p = plan(&q);
        let arch = preset_arch(&p);
        let e = estimate(arch, &p);
        let segments = peakplan_core::segments_at_peak(arch, &p).expect("a replay");
        let in_use: u64 = segments
            .iter()
            .flat_map(|s| s.blocks.iter())
            .filter(|b| b.allocated)
            .map(|b| b.requested_bytes)
            .sum();
        let reserved: u64 = segments.iter().map(|s| s.total_bytes).sum();
        assert_eq!(in_use, e.peak_allocated_bytes, "{q}");
        assert!(
            reserved >= in_use && reserved <= e.peak_reserved_bytes,
            "{q}: {reserved} reserved"
        );
        // Each segment's blocks tile it.
        for s in &segments {
            assert_eq!(
                s.blocks.iter().map(|b| b.size_bytes).sum::<u64>(),
                s.total_bytes,
                "{q}"
            );
        }
    }
}

#[test]
fn a_dataset_s_token_lengths_become_the_plan_s_statistics() {
    use peakplan_core::plan::DatasetLengths;
    // Any separators, a JSON array's brackets too; mean and population deviation rounded, the longest kept.
    let d = DatasetLengths::parse("[100, 200,300\n400;500\t600 ]").unwrap();
    assert_eq!((d.count, d.mean, d.sd, d.max), (6, 350, 171, 600));
    let mut p = plan(BASE);
    assert!(!d.apply(&mut p));
    assert_eq!(p.lengths, Lens::Padded);
    assert_eq!(
        (p.len_mean, p.len_sd, p.len_max),
        (Some(350), Some(171), Some(600))
    );
    // Grouped stays grouped; a longest beyond `s` is cut to it (and said).
    let mut p = plan(&BASE.replace("s=4096", "s=512&lens=grouped"));
    assert!(d.apply(&mut p));
    assert_eq!((p.lengths, p.len_max), (Lens::Grouped, Some(512)));
    // The plan written from it parses back with no diagnostic.
    assert!(Plan::parse_query(&p.to_query()).diagnostics.is_empty());
    // Bad input says which entry and why.
    for (text, says) in [
        ("", "no lengths found"),
        (
            "12, 3x, 4",
            "entry 2 (`3x`) is not a whole number of tokens",
        ),
        ("5 0 7", "entry 2 is 0 tokens; a sequence has 1 to 16777216"),
        ("-4", "entry 1 (`-4`) is not a whole number of tokens"),
        ("99999999999", "entry 1 is 99999999999 tokens"),
    ] {
        let err = DatasetLengths::parse(text).unwrap_err();
        assert!(err.starts_with(says), "{text:?}: {err}");
    }
}

#[test]
fn the_longest_sequence_of_varying_batches_is_the_data_s_longest() {
    // With the data's longest stated (as a dataset's lengths set it), a longer `s` alone would change nothing:
    // the search moves the longest with it, as it moves under `auto`.
    use peakplan_core::solve::max_seq;
    let cap = 80 * (1 << 30);
    let stated = plan(&format!("{BASE}&lens=padded&lmean=729&lsd=941&lmax=4096"));
    let auto = plan(&format!("{BASE}&lens=padded&lmean=729&lsd=941"));
    let arch = preset_arch(&stated);
    let (a, b) = (max_seq(arch, &stated, cap), max_seq(arch, &auto, cap));
    assert_eq!(a, b);
    assert!(a.is_some_and(|s| s < 65_536), "{a:?}");
}

#[test]
fn sequences_longer_than_the_limit_are_cut_or_dropped() {
    // ms-swift's benchmark dataset (3,234 +- 2,548 tokens) at batch size 1 and L = 2,048: swift drops the longer
    // samples (`ltrunc=drop`), where a tokenizer's truncation cuts them to L (`cut`, the default).
    let q = "model=qwen2.5-7b&method=lora&b=1&s=2048&lens=padded&lmean=3234&lsd=2548&gpu=a100-80gb";
    let (cut, dropped) = (plan(q), plan(&format!("{q}&ltrunc=drop")));
    assert_eq!(cut, plan(&format!("{q}&ltrunc=cut")));
    assert!(
        !cut.to_query().contains("ltrunc"),
        "the default is left out"
    );
    assert!(dropped.to_query().contains("ltrunc=drop"));
    let (c, d) = (
        replayed_lengths(&cut).unwrap(),
        replayed_lengths(&dropped).unwrap(),
    );
    // Cut, most of the normal is beyond 2,048, so most batches are exactly L; dropped, the lengths are the
    // distribution's below L, and only the dataset's longest (one batch) is L.
    assert!(c.iter().filter(|l| **l == 2048).count() >= 8, "{c:?}");
    assert_eq!(d.iter().filter(|l| **l == 2048).count(), 1, "{d:?}");
    assert!(d.iter().all(|l| (1..=2048).contains(l)), "{d:?}");
    // What is allocated is the longest batch's either way; what the replay reserves differs.
    let arch = preset_arch(&cut);
    let (ec, ed) = (estimate(arch, &cut), estimate(arch, &dropped));
    assert_eq!(ec.peak_allocated_bytes, ed.peak_allocated_bytes);
    assert_ne!(ec.peak_reserved_bytes, ed.peak_reserved_bytes);
    // The advisor's shorter limit says what happens to the longer documents.
    let halve = |p: &Plan| {
        peakplan_core::advise::candidates(p)
            .into_iter()
            .find(|c| c.key == "s")
            .map(|c| c.cost_text)
    };
    assert_eq!(halve(&dropped), Some("longer documents are dropped"));
    assert_eq!(halve(&cut), Some("longer documents get cut"));
    // A fixed plan draws nothing, so the key changes nothing there.
    let fixed = "model=qwen2.5-7b&method=lora&b=1&s=2048&gpu=a100-80gb";
    assert_eq!(
        estimate(arch, &plan(fixed)),
        estimate(arch, &plan(&format!("{fixed}&ltrunc=drop")))
    );
    let bad = Plan::parse_query(&format!("{q}&ltrunc=delete"));
    assert_eq!(bad.diagnostics.len(), 1);
    assert!(
        bad.diagnostics[0].message.contains("cut") && bad.diagnostics[0].message.contains("drop"),
        "{:?}",
        bad.diagnostics
    );
}

#[test]
fn reserved_memory_is_the_mean_of_the_replayed_runs() {
    use peakplan_core::allocator::{AllocatorConfig, Replay};
    use peakplan_core::{replayed_runs, varying_allocation_runs};
    // One run's figure hangs on its records (batches longer than all before them); the estimate replays four
    // runs, each its own seeded draw, and reserves their mean. On a card the plan fits with room to spare, every
    // run replays as on a device without limit.
    for q in [
        format!("{BASE}&lens=padded&lmean=300&lsd=200&lmax=2048"),
        format!("{BASE}&lens=grouped&lmean=600&lsd=300"),
        "model=qwen2.5-7b&method=lora&b=1&s=1024&lens=padded&lmean=3234&lsd=2548&ltrunc=drop&gpu=h200-141gb"
            .into(),
    ] {
        let p = plan(&q);
        let arch = preset_arch(&p);
        let runs = varying_allocation_runs(arch, &p).unwrap();
        // Grouped batches come longest first: their one record is the first batch, and one run stands for all.
        let n = if p.lengths == Lens::Padded { 4 } else { 1 };
        assert_eq!(runs.len(), n, "{q}");
        assert_eq!(replayed_runs(arch, &p).unwrap().len(), n);
        let peaks: Vec<u64> = runs
            .iter()
            .map(|events| {
                let mut r = Replay::new(AllocatorConfig::with_capacity(1 << 59));
                r.run(&events.setup).unwrap();
                for _ in 0..2 {
                    for run in &events.step {
                        r.run_repeated(run).unwrap();
                    }
                }
                r.allocator.stats().reserved_bytes.peak
            })
            .collect();
        let mean = peaks.iter().sum::<u64>() / peaks.len() as u64;
        let e = estimate(arch, &p);
        assert_eq!(e.peak_reserved_bytes, mean, "{q}: runs {peaks:?}");
        // Padded, the runs differ (each its own order). The first run is the batches `replayed_batches` lists.
        if p.lengths == Lens::Padded {
            assert!(peaks.iter().any(|&p| p != peaks[0]), "{q}: {peaks:?}");
        }
        let first: Vec<u64> = replayed_runs(arch, &p).unwrap()[0].iter().map(|s| s.len).collect();
        assert_eq!(Some(first), replayed_lengths(&p));
    }
}
