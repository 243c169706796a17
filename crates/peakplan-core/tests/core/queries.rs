//! The URL query: exact round trips, and bad or hostile values named without losing the rest.

use peakplan_core::plan::Plan;

use crate::util::plan;

#[test]
fn query_round_trip_is_exact() {
    for q in [
        "",
        "model=mistral-7b&method=lora&r=16&targets=q,k,v,o&b=2&s=4096&gc=1&attn=flash",
        "model=llama-2-70b&method=full&b=1&s=2048&gc=1&gpus=8&zero=3&prec=bf16&opt=adafactor",
        "method=qlora&dropout=0.05&adtype=bf16&quant=fp4&dq=0&upcast=1&loss=chunked&chunk=128&embed=1",
        // The fuzzer's find: a virtual-token count set under LoRA is kept, not dropped from the link.
        "s=1889&vt=1",
        "method=qlora&quant=int8&hold=32&ga=4",
    ] {
        let p = plan(q);
        let again = plan(&p.to_query());
        assert_eq!(p, again, "{q}");
        assert_eq!(p.to_query(), again.to_query());
    }
}

#[test]
fn bad_values_name_the_key_and_keep_the_rest() {
    let check = |q: &str, key: &str, want: &str| {
        let p = Plan::parse_query(q);
        let d = p
            .diagnostics
            .iter()
            .find(|d| d.key == key)
            .unwrap_or_else(|| panic!("{q}: {:?}", p.diagnostics));
        assert!(d.message.contains(want), "{q}: {}", d.message);
        assert_eq!(
            p.plan.seq_len,
            2048 * 2,
            "{q}: the good key s=4096 was lost"
        );
    };
    for (q, key, want) in [
        ("r=banana&s=4096", "r", "accepted: integers 1 to"),
        (
            "method=banana&s=4096",
            "method",
            "accepted: full, lora, qlora",
        ),
        // A negative number is an integer outside the range, not "not an integer".
        (
            "r=-3&s=4096",
            "r",
            "r=-3 is out of range; accepted: integers 1 to",
        ),
        ("r=1.5&s=4096", "r", "not an integer"),
        ("b=99999999999999999999999&s=4096", "b", "out of range"),
        ("model=nope&s=4096", "model", "is not a known preset"),
        // The ids it may have meant, not all 46 (which filled a phone's first screen).
        ("model=llama-9b&s=4096", "model", "did you mean llama-2-13b"),
        ("model=qwen3-8&s=4096", "model", "did you mean qwen3-8b,"),
        ("gpu=rtx4090&s=4096", "gpu", "did you mean rtx-4090?"),
        ("targets=q,x&s=4096", "targets", "unknown target"),
        ("dropout=1&s=4096", "dropout", "below 1"),
        ("dropout=NaN&s=4096", "dropout", "out of range"),
        ("color=red&s=4096", "color", "unknown key"),
        ("gc&s=4096", "gc", "no value"),
        ("zero=4&s=4096", "zero", "0 to 3"),
    ] {
        check(q, key, want);
    }
    let long = Plan::parse_query("model=llama-9b").diagnostics[0]
        .message
        .len();
    assert!(long < 300, "{long} characters");
}

#[test]
fn hostile_values_are_quoted_short_and_inert() {
    let p = Plan::parse_query(&format!("model=%3Cscript%3E{}", "a".repeat(5000)));
    let m = &p.diagnostics[0].message;
    assert!(m.len() < 1000, "{}", m.len());
    assert_eq!(p.plan.model, Plan::default().model);
}

#[test]
fn a_hub_id_is_a_model_source_beside_the_presets() {
    let p = Plan::parse_query("model=Qwen/Qwen2.5-7B%40v1.0&r=32");
    assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
    let id = p.plan.hub.as_ref().map(ToString::to_string);
    assert_eq!(id.as_deref(), Some("Qwen/Qwen2.5-7B@v1.0"));
    assert_eq!(p.plan.model, Plan::default().model);
    // The link writes the id as typed, `/` and `@` unescaped, and reads it back the same.
    let q = p.plan.to_query();
    assert!(q.starts_with("model=Qwen/Qwen2.5-7B@v1.0&"), "{q}");
    assert_eq!(plan(&q), p.plan);
    // A preset replaces the Hub model; a bad id is refused with the Hub's rules and keeps the rest.
    let mut again = p.plan.clone();
    again.set("model", "mistral-7b").unwrap();
    assert_eq!(
        (&again.hub, again.get("model").unwrap()),
        (&None, "mistral-7b".into())
    );
    let bad = Plan::parse_query("model=org/..&r=32");
    assert_eq!(bad.plan.rank, 32);
    assert_eq!(bad.plan.hub, None);
    assert!(bad.diagnostics[0]
        .message
        .starts_with("model=`org/..`: the model name may hold"));
    // Not `org/name` shaped: the preset message as before.
    let preset = Plan::parse_query("model=nope").diagnostics;
    assert!(preset[0]
        .message
        .starts_with("model=`nope` is not a known preset"));
}

#[test]
fn hub_ids_are_an_org_a_name_and_a_ref_as_git_writes_one() {
    use peakplan_core::hub::HubId;
    // (id, expect): "repo @ revision" when accepted, else the start of the refusal after the quoted id.
    let check = |id: &str, expect: &str| {
        let got = match HubId::parse(id) {
            Ok(h) => format!("{} @ {}", h.repo(), h.revision()),
            Err(e) => e.to_string(),
        };
        assert!(
            got.starts_with(expect) || got.contains(&format!(": {expect}")),
            "{id:?}: {got}"
        );
    };
    let revision = "the revision may hold letters, digits, '-', '_', '.' and '/', as a branch";
    let repo = "the model name may hold";
    for (id, expect) in [
        ("a/b", "a/b @ main"),
        ("Qwen/Qwen2.5-7B@v1.0", "Qwen/Qwen2.5-7B @ v1.0"),
        ("a/b@refs/pr/1", "a/b @ refs/pr/1"),
        ("a/b@feature/x.y_z-1", "a/b @ feature/x.y_z-1"),
        (
            "a/b@0123456789abcdef0123456789abcdef01234567",
            "a/b @ 0123456789abcdef0123456789abcdef01234567",
        ),
        ("a/b@v1.lockx", "a/b @ v1.lockx"),
        // A revision is a ref, never a path: `a/b@/tmp/x` opened `/tmp/x` in the cache.
        ("a/b@/tmp/x", revision),
        ("a/b@/", revision),
        ("a/b@refs/", revision),
        ("a/b@refs//pr", revision),
        ("a/b@../x", revision),
        ("a/b@x/../../y", revision),
        ("a/b@.hidden", revision),
        ("a/b@refs/.x", revision),
        ("a/b@main.lock", revision),
        ("a/b@refs/x.lock/y", revision),
        ("a/b@v1.", revision),
        ("a/b@", revision),
        ("a/b@a b", revision),
        ("a/b@a\nb", revision),
        ("a/b@a~1", revision),
        ("a/b@a^", revision),
        ("a/b@a:b", revision),
        ("a/b@a?", revision),
        ("a/b@a*", revision),
        ("a/b@a[1", revision),
        ("a/b@a\\b", revision),
        ("a/b@a@{1}", revision),
        ("a/b@@", revision),
        ("a/b@C:\\x", revision),
        (&format!("a/b@{}", "r".repeat(129)), revision),
        // The repository: one `/` between two names, none leading, trailing or doubled.
        ("/a/b", "the organization may hold"),
        ("a/b/", repo),
        ("a//b", repo),
        ("a/b//", repo),
        ("//a/b", "the organization may hold"),
        ("a/b/c@main", repo),
        ("/", "the organization may hold"),
        ("ab", "`ab` is not a Hub id"),
    ] {
        check(id, expect);
    }
}
