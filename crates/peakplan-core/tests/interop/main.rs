//! Interop tests: every export for every method and a ZeRO-3 plan (the Python compiles and names the plan's
//! settings; YAML and JSON exports parse and import back to the same plan), hand-written samples of each input
//! format in `tests/data/interop/`, merging, and clear errors for malformed input.
#![allow(clippy::unwrap_used)]

mod deepspeed;
mod export;
mod import;
mod models;
mod notes;
mod python;
mod sharding;

use peakplan_core::interop::{export, import, ExportFormat, Imported};
use peakplan_core::plan::Plan;
use peakplan_core::preset_arch;
use std::path::PathBuf;

/// Plans covering every method, sharding, precisions, PEFT kinds, losses and model families.
const PLANS: &[&str] = &[
    "model=llama-2-7b&method=qlora&r=64&targets=all-linear&b=4&s=2048&gc=1&opt=paged_adamw_8bit&quant=nf4&dq=1",
    "model=mistral-7b&method=lora&r=16&targets=q,k,v,o&b=2&s=4096&gc=1&attn=flash",
    "model=llama-2-70b&method=full&b=1&s=2048&gc=1&gpus=8&zero=3",
    "model=llama-3.1-8b&method=full&prec=bf16&b=2&s=1024&gc=0&attn=eager&opt=adamw_torch_fused",
    "model=qwen2.5-0.5b&method=qlora&r=8&targets=q,v,lm_head&dropout=0.05&quant=fp4&dq=0&upcast=1&adtype=bf16&loss=chunked&chunk=128&prec=amp_fp16",
    "model=phi-3-mini&method=lora&r=32&targets=q,o,down&peft=dora&tt=all&compile=1&liger=1&loss=fused",
    "model=pythia-1.4b&method=lora&targets=q,k,v,up,down&peft=rslora&prec=fp32&opt=sgd",
    "model=falcon-7b&method=qlora&peft=ia3&targets=q,k,v,down&gpus=4&zero=2&tt=64",
    "model=gpt3-175b&method=full&gpus=64&zero=3&opt=adafactor&s=2048",
    "model=mixtral-8x7b&method=qlora&r=8&targets=all-linear&peft=lorafa&gpus=2&zero=0",
    "model=gemma-2-9b&method=lora&targets=q,k,v,o,gate,up,down,lm_head&prec=bf16&opt=paged_adamw_32bit",
    "model=starcoderbase-1b&method=lora&targets=q,o,up&b=8&s=512&qsave=1&fw=litgpt",
    "model=tinyllama-1.1b&method=qlora&gpus=4&zero=3&dq=0&opt=adamw_8bit",
    "model=llama-3.2-3b&method=lora&peft=vera&r=256&targets=q,v&prec=bf16",
    "model=llama-3.2-1b&method=qlora&peft=loha&r=32&targets=q,v",
    "model=qwen2.5-0.5b&method=lora&peft=oft&r=32&targets=q,k,v,o",
    "model=llama-3.2-3b&method=lora&peft=ln&b=4&s=768&prec=bf16",
    "model=llama-3.2-1b&method=qlora&peft=prompt&vt=200",
    "model=mistral-7b&method=lora&peft=prefix&vt=30&gpus=2&zero=3",
    "model=llama-3.2-3b&method=full&fw=torchtune&oib=1&aoff=1&compile=1&loss=chunked&prec=bf16&opt=adamw_8bit&b=2&s=4096",
    "model=llama-2-7b&method=lora&fw=torchtune&aoff=1&loss=standard&prec=bf16",
    "model=llama-2-70b&method=qlora&r=64&targets=all-linear&gpus=2&zero=3&cpuoff=1&b=2",
    "model=llama-2-13b&method=full&gpus=4&zero=2&cpuoff=1&ga=8",
    // DeepSpeed's sizes and switches set (ZeRO-3 with zero.Init off; ZeRO-2).
    "model=llama-2-13b&method=lora&gpus=4&zero=3&shard=deepspeed&ds_sub=0&ds_rbucket=200000000&ds_prefetch=0&ds_live=0&ds_reuse=5000000&ds_persist=1000&ds_overlap=0&ds_contig=1&zinit=0",
    "model=mistral-7b&method=full&gpus=8&zero=2&shard=deepspeed&ds_rbucket=500000000&ds_agbucket=500000000&ds_overlap=1&ds_contig=0",
    "model=mistral-7b&method=lora&ga=16&b=2&gpus=2&zero=3",
    "model=llama-2-7b&method=qlora&quant=int8&r=32&targets=all-linear&b=2&s=4096&prec=amp_fp16&opt=adamw_8bit",
    "model=llama-2-7b&method=qlora&r=8&targets=q,v&b=4&s=1024&gc=1&loss=kernel&attn=flash",
    "model=llama-2-13b&method=qlora&quant=int8&r=8&targets=q,v&gpus=2&split=1&b=1&s=512&gc=1",
    "model=mistral-7b&method=lora&r=16&gpus=4&split=1&prec=bf16",
    "model=llama-2-13b&method=qlora&quant=gptq4&r=8&targets=q,v&b=2&s=2048&prec=amp_fp16",
    "model=mistral-7b&method=qlora&quant=gptq8&r=16&targets=all-linear&gc=0&b=1&s=512",
    "model=llama-3.2-3b&method=lora&peft=ia3&targets=k,v,down&b=4&s=768&prec=bf16&gc=0&alloc=emptied",
    "model=llama-3.1-8b&method=qlora&b=2&s=4096&alloc=expandable",
    "model=llama-2-13b&method=lora&gpus=4&zero=3&shard=deepspeed&ga=4",
    "model=llama-2-7b&method=qlora&gpus=2&zero=2&shard=fsdp2&gsync=1&ga=4",
    "model=mistral-7b&method=lora&gpus=2&zero=3&wrap=block&ga=2",
    "model=llama-3.1-8b&method=full&gpus=8&zero=1&prec=bf16",
    "model=llama-2-7b&method=lora&fw=litgpt&gpus=4&zero=3&cpuoff=1",
    "model=llama-2-7b&method=lora&fw=torchtune&gpus=2&zero=2&shard=fsdp1&gsync=0&prec=bf16",
];

fn plan(q: &str) -> Plan {
    let p = Plan::parse_query(q);
    assert!(p.diagnostics.is_empty(), "{q}: {:?}", p.diagnostics);
    p.plan
}

fn exported(q: &str, f: ExportFormat) -> (Plan, String) {
    let p = plan(q);
    let text = export(&p, preset_arch(&p), f);
    (p, text)
}

fn data(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/interop")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn import_one(name: &str, text: &str) -> Imported {
    import(&[(name, text)]).unwrap_or_else(|e| panic!("{e}"))
}

/// An import case: (file name, text, the plan's query, unsupported fields, a note that must be said).
type Case = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static str,
);

/// Imports each case's file alone: the plan is the query's, the unsupported fields are the listed ones (in any
/// order) and the note is said.
fn check_imports(cases: &[Case]) {
    for (file, text, want, unsupported, note) in cases {
        let got = import_one(file, text);
        let w = Plan::parse_query(want);
        assert!(w.diagnostics.is_empty(), "{want}: {:?}", w.diagnostics);
        assert_eq!(
            got.plan.to_query(),
            w.plan.to_query(),
            "{text}\nnotes: {:?}",
            got.notes
        );
        let mut u = got.unsupported.clone();
        u.sort();
        let mut e: Vec<String> = unsupported.iter().map(|s| s.to_string()).collect();
        e.sort();
        assert_eq!(u, e, "{text}");
        assert!(
            got.notes.iter().any(|n| n.contains(note)),
            "{text}: no note {note:?} in {:?}",
            got.notes
        );
    }
}

fn without_plan_line(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("# peakplan:"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn py(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// Compiles Python scripts with `python3 -m py_compile`, all at once; false (with a note) when python3 is absent.
fn py_compile(scripts: &[String]) -> bool {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        println!(
            "note: python3 is absent; the exported scripts are checked for their settings only"
        );
        return false;
    }
    let dir = std::env::temp_dir().join(format!(
        "peakplan-interop-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<PathBuf> = scripts
        .iter()
        .enumerate()
        .map(|(i, src)| {
            let f = dir.join(format!("s{i}.py"));
            std::fs::write(&f, src).unwrap();
            f
        })
        .collect();
    let out = std::process::Command::new("python3")
        .args(["-m", "py_compile"])
        .args(&files)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "a script does not compile: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// The integer constant `NAME = 123` of a script.
fn constant(src: &str, name: &str) -> Option<String> {
    src.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = ")))
        .map(|v| v.split("  #").next().unwrap_or(v).trim().to_string())
}
