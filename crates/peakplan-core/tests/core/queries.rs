//! The URL query: exact round trips, and bad or hostile values named without losing the rest.

use peakplan_core::plan::{percent_encode, ColorScheme, Plan, KEYS};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use crate::invariants::any_plan;
use crate::util::{data, plan};

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
fn links_write_their_keys_in_a_fixed_order() {
    // A plan at its defaults writes the keys of the first links; every later key is written only once it matters.
    assert_eq!(
        Plan::default().to_query(),
        "model=llama-3.1-8b&method=qlora&r=16&targets=all-linear&dropout=0&adtype=fp32&b=1&s=2048&gc=1\
         &attn=sdpa&loss=standard&chunk=256&opt=adamw_torch&prec=amp_bf16&quant=nf4&dq=1&upcast=0&qsave=0\
         &gpus=1&zero=0&gpu=rtx-4090&fw=hf&peft=lora&tt=0&compile=0&liger=0"
    );
    // Every one of those later keys away from its default (prompt tuning writes `vt`): all of them, in this order.
    let every = plan(
        "theme=dark&embed=1&alloc=emptied&split=1&hold=16&qload=1&cpuoff=1&aoff=1&oib=1&peft=prompt&gsync=1&wrap=block\
         &shard=fsdp2&moe=linear&ga=2",
    );
    let written: Vec<String> = every
        .to_query()
        .split('&')
        .map(|kv| kv.split('=').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        written,
        [
            "model", "method", "r", "targets", "dropout", "adtype", "b", "s", "ga", "gc", "attn",
            "loss", "chunk", "opt", "prec", "quant", "dq", "upcast", "qsave", "moe", "gpus",
            "zero", "shard", "wrap", "gsync", "gpu", "fw", "peft", "vt", "tt", "compile", "liger",
            "oib", "aoff", "cpuoff", "qload", "hold", "split", "alloc", "embed", "theme",
        ]
    );
}

#[test]
fn the_theme_is_a_key_like_any_other() {
    // Written only when chosen, so every earlier link stays as it was; a chosen one travels in the link.
    for (q, written) in [
        ("theme=auto", None),
        ("theme=light", Some("theme=light")),
        ("theme=dark&embed=1", Some("embed=1&theme=dark")),
    ] {
        let link = plan(q).to_query();
        match written {
            None => assert!(!link.contains("theme"), "{q}: {link}"),
            Some(w) => assert!(link.ends_with(w), "{q}: {link}"),
        }
        assert_eq!(plan(&link), plan(q), "{q}: the link does not parse back");
    }
    // A bad value is named with the accepted ones, and the rest of the link is kept.
    let p = Plan::parse_query("theme=sepia&s=4096");
    assert_eq!(p.diagnostics.len(), 1);
    assert_eq!(p.diagnostics[0].key, "theme");
    assert!(
        p.diagnostics[0]
            .message
            .contains("accepted: auto, light, dark"),
        "{}",
        p.diagnostics[0].message
    );
    assert_eq!((p.plan.seq_len, p.plan.theme), (4096, ColorScheme::Auto));
}

/// `tests/data/links.txt`: sampled plans, each given by a random half of its keys, and the link each writes.
const LINKS: &str = "links.txt";

/// The links a few hundred sampled plans write, as they were when the file was made: the query and the link,
/// one pair a line. A key added later is written only once it matters, so these never change;
/// `UPDATE_LINKS=1 cargo test -p peakplan-core --test core links_` writes the file anew (a deliberate change only).
#[test]
fn links_stay_what_they_were() {
    if std::env::var_os("UPDATE_LINKS").is_some() {
        let path = format!("{}/tests/data/{LINKS}", env!("CARGO_MANIFEST_DIR"));
        std::fs::write(path, sampled_links(300)).unwrap();
    }
    let text = data(LINKS);
    let pairs: Vec<(&str, &str)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_once('\t').unwrap())
        .collect();
    assert!(pairs.len() >= 300, "{} links", pairs.len());
    for (query, link) in pairs {
        assert_eq!(plan(query).to_query(), link, "{query}");
    }
}

/// `n` sampled plans, each as a query of a random half of its keys, with the link it writes, one pair a line.
fn sampled_links(n: usize) -> String {
    let mut runner = TestRunner::deterministic();
    let sample = (any_plan(), prop::collection::vec(any::<bool>(), KEYS.len()));
    let mut out = String::from("# query<TAB>the link it writes (see `links_stay_what_they_were` in tests/core/queries.rs)\n");
    for _ in 0..n {
        let (p, kept) = sample.new_tree(&mut runner).unwrap().current();
        let query: Vec<String> = KEYS
            .iter()
            .zip(kept)
            .filter(|(_, kept)| *kept)
            .map(|(k, _)| format!("{k}={}", percent_encode(&p.get(k).unwrap())))
            .collect();
        let query = query.join("&");
        let link = plan(&query).to_query();
        out.push_str(&format!("{query}\t{link}\n"));
    }
    out
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
