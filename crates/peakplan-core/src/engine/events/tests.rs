//! The step's events against the step as built before runs.

use super::*;

/// The step as it was built before runs: every micro-batch written out in turn.
fn every_micro_batch(st: &Stages) -> Vec<Event> {
    let mut b = Builder::with_layers(st, st.setup.arch.layers, false);
    b.setup();
    b.seq.events.clear();
    b.steady_state();
    let ga = st.setup.plan.grad_accumulation;
    let mut all = Vec::new();
    for k in 0..ga {
        b.micro_batch(k == 0, k + 1 == ga);
        all.append(&mut b.seq.events);
    }
    b.optimizer_step();
    all.append(&mut b.seq.events);
    all
}

#[test]
fn middle_micro_batches_are_one_run() {
    for q in [
        "model=llama-2-7b&method=lora&r=8&b=2&s=512&gc=0",
        "model=llama-2-7b&method=full&prec=amp_bf16&gc=1&oib=1",
        "model=llama-2-13b&method=full&prec=amp_bf16&gpus=4&zero=3&gc=1",
        "model=llama-2-7b&method=lora&r=16&targets=all-linear&aoff=1&fw=torchtune",
    ] {
        for ga in [1, 2, 3, 6] {
            let parsed = Plan::parse_query(&format!("{q}&ga={ga}"));
            let plan = parsed.plan;
            let arch = crate::preset_arch(&plan);
            let st = stages(arch, &plan);
            let ev = step_events(&st, usize::MAX).unwrap_or_default();
            assert_eq!(ev.flat_step(), every_micro_batch(&st), "{q}&ga={ga}");
        }
    }
}
