//! `peakplan export` (a plan as a runnable script or a training config) and `peakplan import` (training configs
//! back into a plan query).

use anyhow::{anyhow, bail, Result};
use peakplan_core::interop::{self, ExportFormat, MAX_IMPORT_BYTES};

/// `peakplan export --query Q [--hf-config FILE] [--format python|axolotl|torchtune|deepspeed]`.
pub fn export(args: &[String]) -> Result<String> {
    let formats: Vec<&str> = ExportFormat::ALL.iter().map(|f| f.key()).collect();
    let a = super::parse_plan_args(args, "export", &formats)?;
    let format = ExportFormat::from_key(&a.format).unwrap_or(ExportFormat::Python);
    let (plan, arch) = super::plan_and_arch(&a)?;
    if let Some(why) = interop::export_refused(&plan, format) {
        bail!("{why}");
    }
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
        let text = crate::files::read_capped(
            path,
            MAX_IMPORT_BYTES as u64,
            path,
            "training configs are a few KB",
        )?;
        texts.push((path.as_str(), text));
    }
    let files: Vec<(&str, &str)> = texts.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let imported = interop::import(&files).map_err(|e| anyhow!("{e}"))?;
    // Notes go to stderr beside the plan on stdout (escaped, as every stderr line); a closed stderr loses them,
    // not the plan.
    if !imported.unsupported.is_empty() {
        crate::say(&format!(
            "note: not modelled, so not in the plan: {}",
            imported.unsupported.join(", ")
        ));
    }
    for n in &imported.notes {
        crate::say(&format!("note: {n}"));
    }
    Ok(format!("{}\n", imported.plan.to_query()))
}
