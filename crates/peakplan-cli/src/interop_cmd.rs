//! `peakplan export` (a plan as a runnable script or a training config) and `peakplan import` (training configs
//! back into a plan query).

use anyhow::{anyhow, bail, Context, Result};
use peakplan_core::interop::{self, ExportFormat, MAX_IMPORT_BYTES};

/// `peakplan export --query Q [--hf-config FILE] [--format python|axolotl|torchtune|deepspeed]`.
pub fn export(args: &[String]) -> Result<String> {
    let mut query = String::new();
    let mut hf_config = None;
    let mut format = ExportFormat::Python;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| anyhow!("{name} needs a value"))
        };
        match flag.as_str() {
            "--query" | "-q" => query = value("--query")?,
            "--hf-config" => hf_config = Some(value("--hf-config")?),
            "--format" | "-f" => {
                let v = value("--format")?;
                format = ExportFormat::from_key(&v).ok_or_else(|| {
                    anyhow!(
                        "--format {v:?} is not accepted; accepted: {}",
                        ExportFormat::accepted()
                    )
                })?;
            }
            other => bail!(
                "unknown argument {other:?}; usage: peakplan export --query 'QUERY' [--hf-config FILE] [--format {}]",
                ExportFormat::accepted().replace(", ", "|")
            ),
        }
    }
    let (plan, arch) = super::plan_and_arch(&query, hf_config.as_deref())?;
    Ok(interop::export(&plan, &arch, format))
}

/// `peakplan import FILE...`: the plan on stdout as one query line, notes on stderr.
pub fn import(args: &[String]) -> Result<String> {
    if args.is_empty() {
        bail!("no file given; usage: peakplan import FILE...");
    }
    let mut texts = Vec::with_capacity(args.len());
    for path in args {
        if path.starts_with('-') && path.len() > 1 {
            bail!("unknown argument {path:?}; usage: peakplan import FILE...");
        }
        let meta = std::fs::metadata(path).with_context(|| format!("cannot read {path}"))?;
        if meta.len() > MAX_IMPORT_BYTES as u64 {
            bail!(
                "{path} is {} bytes; training configs are a few KB (at most {MAX_IMPORT_BYTES} accepted)",
                meta.len()
            );
        }
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {path}"))?;
        let text = String::from_utf8(bytes).map_err(|_| anyhow!("{path} is not UTF-8 text"))?;
        texts.push((path.as_str(), text));
    }
    let files: Vec<(&str, &str)> = texts.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let imported = interop::import(&files).map_err(|e| anyhow!("{e}"))?;
    if !imported.unsupported.is_empty() {
        eprintln!(
            "note: not modelled, so not in the plan: {}",
            imported.unsupported.join(", ")
        );
    }
    for n in &imported.notes {
        eprintln!("note: {n}");
    }
    Ok(format!("{}\n", imported.plan.to_query()))
}
