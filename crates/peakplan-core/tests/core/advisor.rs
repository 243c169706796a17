//! The advisor: the set of changes that makes a plan fit, and the levers ranked by what they save.

use peakplan_core::{estimate, preset_arch, presets};

use crate::util::plan;

#[test]
fn advisor_makes_the_13b_lora_plan_fit_a_4090() {
    let p = plan("model=llama-2-13b&method=lora&b=8&s=4096&gc=0&gpu=rtx-4090");
    let a = preset_arch(&p);
    let cap = presets::gpu("rtx-4090").unwrap().capacity_bytes;
    let advice = peakplan_core::advise::advise(a, &p, Some(cap));
    assert_eq!(advice.fits, Some(false));
    let fix = advice.to_fit.expect("a fitting set");
    assert_eq!(fix.fits, Some(true));
    // The suggested query reproduces the fitting plan.
    let again = plan(&fix.query);
    assert!(estimate(a, &again).device_bytes <= cap);
    assert_eq!(again, fix.plan);
    // Every lever saves memory, largest saving first.
    assert!(!advice.levers.is_empty());
    assert!(advice
        .levers
        .windows(2)
        .all(|w| w[0].saved_bytes >= w[1].saved_bytes));
    assert!(advice
        .levers
        .iter()
        .all(|l| l.saved_bytes > 0 && l.device_bytes < advice.device_bytes));
}

#[test]
fn advisor_prefers_free_changes_and_stays_quiet_when_nothing_helps() {
    // Eager attention at long context: switching to SDPA alone fits, and costs nothing.
    let p = plan("model=llama-3.2-1b&method=qlora&b=1&s=8192&attn=eager&gc=1&gpu=rtx-4090");
    let cap = presets::gpu("rtx-4090").unwrap().capacity_bytes;
    let advice = peakplan_core::advise::advise(preset_arch(&p), &p, Some(cap));
    let fix = advice.to_fit.expect("fits with a free change");
    assert_eq!(fix.cost, peakplan_core::advise::Cost::Free);
    // A plan that already fits gets no fitting set, but still its levers.
    let small = plan("model=llama-3.2-1b&method=qlora&b=1&s=512");
    let advice = peakplan_core::advise::advise(preset_arch(&small), &small, Some(cap));
    assert!(advice.to_fit.is_none() && advice.fits == Some(true));
}
