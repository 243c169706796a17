//! The `peakplan` command line: the planner's numbers for scripts, CI and docs.
//!
//! Errors are handled once, here at the edge: any bad input prints one line on stderr and exits with status 2.
//! Text from outside (file names, CSV cells, environment variables, configs) reaches the terminal only through
//! the core's one escaping function, `text::clean`: every stderr line here, and each such cell of a table.

mod files;
mod hub;
mod interop_cmd;

use anyhow::{anyhow, bail, Result};
use peakplan_chart::{chart_svg, ChartData, SvgMeta, Theme};
use peakplan_core::plan::{DatasetLengths, Overlong};
use peakplan_core::text::{clean, quote};
use peakplan_core::units::{self, format_bytes, format_count};
use peakplan_core::{
    estimate, estimate_each_method, import_config, preset_arch, presets, solve, Architecture,
    Category, GpuId, Kind, ModelId, Plan,
};
use serde_json::{json, Value};
use std::io::Write;

const USAGE: &str = "usage: peakplan estimate [--query 'QUERY'] [--hf-config FILE | --hf-model ORG/NAME[@REV]] [--lengths FILE] [--format table|json|svg]
       peakplan advise [--query 'QUERY'] [--hf-config FILE | --hf-model ORG/NAME[@REV]] [--lengths FILE] [--gpu GPU] [--format table|json]
       peakplan gpus [--query 'QUERY'] [--hf-config FILE | --hf-model ORG/NAME[@REV]] [--lengths FILE] [--format table|json]
       peakplan validate FILE.csv [--row ID | --format table|json]
       peakplan export --query 'QUERY' [--hf-config FILE | --hf-model ORG/NAME[@REV]] [--lengths FILE] [--format python|axolotl|torchtune|deepspeed]
       peakplan import FILE...
       peakplan presets";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&args) {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(out.as_bytes())
                .and_then(|()| stdout.flush())
            {
                Ok(()) => 0,
                // The reader stopped reading (`peakplan … | head`): there is no one left to tell.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
                Err(e) => {
                    complain(&format!("cannot write the output: {e}"));
                    2
                }
            }
        }
        Err(e) => {
            complain(&format!("{e:#}"));
            2
        }
    };
    std::process::exit(code);
}

/// One line on stderr. A closed stderr is not an error worth dying for: the exit status still tells.
pub(crate) fn complain(message: &str) {
    say(&format!("peakplan: {}", message.replace('\n', " ")));
}

/// A line on stderr, escaped: an error or a note can quote a file's name, `HF_ENDPOINT` or a config's text, and
/// an `ESC]0;` there would retitle the terminal. Text the core already escaped passes unchanged.
pub(crate) fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{}", clean(line));
}

/// The refusal of a flag given twice: every flag takes one value, and a silent last-wins would drop the first.
pub(crate) fn once<T>(slot: &Option<T>, flag: &str) -> Result<()> {
    if slot.is_some() {
        bail!("{flag} is given twice; give it once (no flag repeats)");
    }
    Ok(())
}

/// The refusal of arguments a command does not take (`peakplan presets extra`): ignored, they would hide a typo.
fn no_more(rest: &[String], command: &str, usage: &str) -> Result<()> {
    match rest.first() {
        Some(a) => bail!(
            "unexpected argument {}: {command} takes no more arguments; usage: {usage}",
            quote(a)
        ),
        None => Ok(()),
    }
}

/// The flags of the commands that take a plan.
pub(crate) struct PlanArgs {
    pub query: String,
    pub hf_config: Option<String>,
    /// A Hugging Face Hub id, `ORG/NAME[@REVISION]`.
    pub hf_model: Option<String>,
    /// A file of a dataset's token lengths, one count per sequence: its mean, deviation and longest become the
    /// plan's batch lengths.
    pub lengths: Option<String>,
    /// One of the command's formats (the first unless given).
    pub format: String,
}

/// Parses `--query`, `--hf-config`, `--format` (one of `formats`) and, for `advise`, `--gpu` (the query's `gpu`
/// key as a flag) of `peakplan COMMAND`.
pub(crate) fn parse_plan_args(
    args: &[String],
    command: &str,
    formats: &[&str],
) -> Result<PlanArgs> {
    let mut a = PlanArgs {
        query: String::new(),
        hf_config: None,
        hf_model: None,
        lengths: None,
        format: formats.first().copied().unwrap_or_default().into(),
    };
    let (mut query, mut format, mut gpu) = (None, None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let (name, slot) = match flag.as_str() {
            "--query" | "-q" => ("--query", &mut query),
            "--hf-config" => ("--hf-config", &mut a.hf_config),
            "--hf-model" => ("--hf-model", &mut a.hf_model),
            "--lengths" => ("--lengths", &mut a.lengths),
            "--format" | "-f" => ("--format", &mut format),
            "--gpu" if command == "advise" => ("--gpu", &mut gpu),
            other => bail!("unknown argument {other:?}; usage: {}", usage_line(command)),
        };
        once(slot, name)?;
        *slot = Some(
            it.next()
                .cloned()
                .ok_or_else(|| anyhow!("{name} needs a value"))?,
        );
    }
    a.query = query.unwrap_or_default();
    if let Some(f) = format {
        a.format = f;
    }
    if !formats.contains(&a.format.as_str()) {
        bail!(
            "--format {:?} is not accepted by {command}; accepted: {}",
            a.format,
            formats.join(", ")
        );
    }
    if let Some(g) = gpu {
        // Only a bundled id is spliced into the query: `rtx-4090&b=8` would set a second key.
        let id = GpuId::parse(&g).ok_or_else(|| {
            let ids: Vec<&str> = GpuId::all().map(GpuId::id).collect();
            anyhow!(
                "--gpu {} is not a bundled GPU; give one id of `peakplan presets`: {}",
                quote(&g),
                ids.join(", ")
            )
        })?;
        a.query = format!("{}&gpu={}", a.query, id.id());
    }
    if a.hf_config.is_some() && a.hf_model.is_some() {
        bail!("--hf-config and --hf-model both name the model; give one");
    }
    Ok(a)
}

/// The usage line of one command.
fn usage_line(command: &str) -> &'static str {
    let name = format!("peakplan {command}");
    USAGE
        .lines()
        .map(|l| l.trim_start_matches("usage:").trim())
        .find(|l| {
            l.strip_prefix(&name)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        })
        .unwrap_or_default()
}

/// `peakplan validate`'s arguments: the CSV's path, the row asked for, and whether JSON was.
fn validate_args(args: &[String]) -> Result<(String, Option<String>, bool)> {
    let usage = usage_line("validate");
    let (mut path, mut row, mut format) = (None, None, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (name, slot) = match arg.as_str() {
            "--row" => ("--row", &mut row),
            "--format" | "-f" => ("--format", &mut format),
            a if a.starts_with('-') && a.len() > 1 => {
                bail!("unknown argument {}; usage: {usage}", quote(a))
            }
            a if path.is_none() => {
                path = Some(a.to_string());
                continue;
            }
            a => bail!(
                "unexpected argument {}: validate reads one CSV file; usage: {usage}",
                quote(a)
            ),
        };
        once(slot, name)?;
        *slot = Some(
            it.next()
                .cloned()
                .ok_or_else(|| anyhow!("{name} needs a value; usage: {usage}"))?,
        );
    }
    let path = path.ok_or_else(|| anyhow!("validate needs a CSV file; usage: {usage}"))?;
    let json = match format.as_deref() {
        None | Some("table") => false,
        Some("json") if row.is_none() => true,
        Some("json") => bail!("--row prints a table; give --row or --format json, not both"),
        Some(f) => bail!(
            "--format {} is not accepted by validate; accepted: table, json",
            quote(f)
        ),
    };
    Ok((path, row, json))
}

/// The usage text: every command, or the one named, and the plan keys.
fn help(command: Option<&str>) -> String {
    let all: Vec<&str> = USAGE
        .lines()
        .map(|l| l.trim_start_matches("usage:").trim())
        .collect();
    let named: Vec<&str> = all
        .iter()
        .copied()
        .filter(|l| command.is_some_and(|c| l.starts_with(&format!("peakplan {c}"))))
        .collect();
    let lines = if named.is_empty() { all } else { named };
    format!(
        "usage: {}\nPlan keys (the page's URL vocabulary; README has each one's values): {}\n",
        lines.join("\n       "),
        peakplan_core::plan::KEYS.join(" ")
    )
}

fn run(args: &[String]) -> Result<String> {
    // `--help` anywhere asks for help, before any other argument is judged.
    if args.iter().any(|a| a == "--help" || a == "-h") {
        return Ok(help(
            args.first()
                .map(String::as_str)
                .filter(|c| !c.starts_with('-')),
        ));
    }
    match args.first().map(String::as_str) {
        Some("estimate") => {
            let a = parse_plan_args(&args[1..], "estimate", &["table", "json", "svg"])?;
            let (plan, arch) = plan_and_arch(&a)?;
            Ok(match a.format.as_str() {
                "json" => format!("{}\n", serde_json::to_string_pretty(&report(&arch, &plan))?),
                "svg" => svg(&arch, &plan),
                _ => table(&arch, &plan),
            })
        }
        Some("advise") => advise_cmd(&args[1..]),
        Some("gpus") => gpus_cmd(&args[1..]),
        Some("validate") => {
            let (path, row, json) = validate_args(&args[1..])?;
            match row {
                Some(id) => validate_row(&path, &id),
                None if json => {
                    let text = read_csv(&path)?;
                    let report = peakplan_core::validate::validate(&text)
                        .map_err(|e| anyhow!("{path}: {e}"))?;
                    Ok(format!("{}\n", serde_json::to_string(&report.summary())?))
                }
                None => validate_cmd(&path),
            }
        }
        Some("export") => interop_cmd::export(&args[1..]),
        Some("import") => interop_cmd::import(&args[1..]),
        Some("presets") => {
            no_more(&args[1..], "presets", usage_line("presets"))?;
            Ok(presets_table())
        }
        Some("help") => {
            no_more(
                args.get(2..).unwrap_or_default(),
                "help",
                "peakplan help [COMMAND]",
            )?;
            Ok(help(args.get(1).map(String::as_str)))
        }
        Some("--version" | "-V") => {
            no_more(&args[1..], "--version", "peakplan --version")?;
            Ok(format!("peakplan {}\n", env!("CARGO_PKG_VERSION")))
        }
        Some(other) => bail!(
            "unknown command {other:?}; {}",
            USAGE.lines().next().unwrap_or_default()
        ),
        None => bail!("no command; {}", USAGE.lines().next().unwrap_or_default()),
    }
}

/// `peakplan presets`: the bundled models and GPUs, each column as wide as its longest entry.
fn presets_table() -> String {
    let width = |cells: &mut dyn Iterator<Item = usize>| cells.max().unwrap_or(0);
    let models: Vec<(&str, &str, String, &str)> = ModelId::all()
        .map(|m| {
            let p = m.preset();
            (p.id, p.name, format_count(m.arch().total_params()), p.hf_id)
        })
        .collect();
    let id_w = width(&mut models.iter().map(|m| m.0.chars().count()));
    let name_w = width(&mut models.iter().map(|m| m.1.chars().count()));
    let count_w = width(&mut models.iter().map(|m| m.2.chars().count()));
    let mut out = String::from("models:\n");
    for (id, name, count, hf_id) in &models {
        out.push_str(&format!(
            "  {id:<id_w$}  {name:<name_w$}  {count:>count_w$} params  {hf_id}\n"
        ));
    }
    let gpus: Vec<(&str, String, &str)> = presets::GPUS
        .iter()
        .map(|g| (g.id, format_bytes(g.capacity_bytes), g.name))
        .collect();
    let id_w = width(&mut gpus.iter().map(|g| g.0.chars().count()));
    let mem_w = width(&mut gpus.iter().map(|g| g.1.chars().count()));
    out.push_str("gpus:\n");
    for (id, mem, name) in &gpus {
        out.push_str(&format!("  {id:<id_w$}  {mem:>mem_w$}  {name}\n"));
    }
    out
}

fn load_config(path: &str) -> Result<Architecture> {
    let what = format!("--hf-config {path}");
    let cap = peakplan_core::hf::MAX_CONFIG_BYTES as u64;
    let text = files::read_capped(path, cap, &what, "a config.json is a few KB")?;
    import_config(&text).map_err(|e| anyhow!("--hf-config {path}: {e}"))
}

fn report(arch: &Architecture, plan: &Plan) -> Value {
    let e = estimate(arch, plan);
    let gpu = plan.gpu.preset();
    let cap = gpu.capacity_bytes;
    let comps: Vec<Value> = Kind::ALL
        .iter()
        .map(|k| json!({"key": k.key(), "label": k.label(), "category": k.category().key(), "bytes": e.component(*k), "formula": k.formula()}))
        .collect();
    let phases: serde_json::Map<String, Value> = e
        .phases_run()
        .map(|p| {
            let m = e.phase(p);
            (format!("{p:?}").to_lowercase(), json!({"total_bytes": m.total(), "weights_bytes": m.weights, "gradients_bytes": m.gradients, "optimizer_bytes": m.optimizer, "activations_bytes": m.activations, "other_bytes": m.other}))
        })
        .collect();
    json!({
        "total_params": e.total_params,
        "trainable_params": e.trainable_params,
        "weights_bytes": e.category(Category::Weights),
        "gradients_bytes": e.category(Category::Gradients),
        "optimizer_bytes": e.category(Category::Optimizer),
        "activations_bytes": e.category(Category::Activations),
        "other_bytes": e.category(Category::Other),
        "peak_allocated_bytes": e.peak_allocated_bytes,
        "peak_reserved_bytes": e.peak_reserved_bytes,
        "device_bytes": e.device_bytes,
        "host_bytes": e.host_bytes,
        "needs_bytes": peakplan_core::needs_bytes(arch, plan),
        "peak_phase": format!("{:?}", e.peak_phase).to_lowercase(),
        "saturated": e.saturated,
        "components": comps,
        "phases": phases,
        "gpu": json!({"id": gpu.id, "name": gpu.name, "capacity_bytes": cap, "fits": e.device_bytes <= cap}),
        "max_micro_batch": solve::max_batch(arch, plan, cap),
        "max_seq_len": solve::max_seq(arch, plan, cap),
        // Batches of varying length (lens=padded or grouped): each step's batch of the first replayed run, in order,
        // and every run's (reserved is the mean of their peaks); null otherwise.
        "replayed_batches": peakplan_core::replayed_batches(arch, plan),
        "replayed_runs": peakplan_core::replayed_runs(arch, plan),
        "model": {"name": arch.name, "model_type": arch.model_type, "layers": arch.layers, "hidden_size": arch.hidden, "vocab_size": arch.vocab},
        "plan": serde_json::to_value(plan).unwrap_or(Value::Null),
        "query": plan.to_query(),
    })
}

/// The three methods' chart, the model named as the CLI names it everywhere (its id, or its config's name), in the
/// plan's `theme` (light unless it says dark: a file has no reader's scheme to follow). Its description says the
/// answer and the query; it links nowhere, since the CLI knows no address of the planner.
fn svg(arch: &Architecture, plan: &Plan) -> String {
    let by_method = estimate_each_method(arch, plan);
    let data = ChartData::by_method(&arch.name, plan, &by_method);
    let selected = peakplan_core::plan::Method::ALL
        .iter()
        .zip(&by_method)
        .find(|(m, _)| **m == plan.method)
        .map_or(0, |(_, e)| e.device_bytes);
    let meta = SvgMeta {
        description: units::chart_description(&arch.name, plan, selected),
        link: None,
    };
    chart_svg(&data, &Theme::of(plan.theme, false), (720, 420), &meta)
}

fn table(arch: &Architecture, plan: &Plan) -> String {
    let e = estimate(arch, plan);
    let per_gpu = units::per_gpu(plan);
    let mut out = format!(
        "{} ({} params, {} trainable), {} on {}{per_gpu}\n\n",
        clean(&arch.name),
        format_count(e.total_params),
        format_count(e.trainable_params),
        units::method_label(plan.method),
        plan.gpu.id()
    );
    out.push_str(&format!(
        "{:<40} {:>12}  {}\n",
        "component", "bytes", "formula"
    ));
    for k in Kind::ALL.iter().filter(|k| e.component(**k) > 0) {
        out.push_str(&format!(
            "{:<40} {:>12}  {}\n",
            k.label(),
            format_bytes(e.component(*k)),
            k.formula()
        ));
    }
    out.push('\n');
    for p in e.phases_run() {
        let mark = if p == e.peak_phase { "  <- peak" } else { "" };
        out.push_str(&format!(
            "{:<40} {:>12}{mark}\n",
            format!("live at {}", p.label()),
            format_bytes(e.phase(p).total())
        ));
    }
    out.push_str(&format!(
        "\n{:<40} {:>12}\n",
        "peak allocated (max_memory_allocated)",
        format_bytes(e.peak_allocated_bytes)
    ));
    out.push_str(&format!(
        "{:<40} {:>12}\n",
        "peak reserved (max_memory_reserved)",
        format_bytes(e.peak_reserved_bytes)
    ));
    out.push_str(&format!(
        "{:<40} {:>12}\n",
        "device (nvidia-smi)",
        format_bytes(e.device_bytes)
    ));
    if let Some(runs) = peakplan_core::replayed_runs(arch, plan) {
        let batches: Vec<peakplan_core::Shape> = runs.iter().flatten().copied().collect();
        let tokens = |b: &peakplan_core::Shape| b.sequences * b.len;
        let (few, most) = (
            batches.iter().min_by_key(|b| tokens(b)),
            batches.iter().max_by_key(|b| tokens(b)),
        );
        if let (Some(few), Some(most)) = (few, most) {
            out.push_str(&format!(
                "{:<40} {:>12}  {} runs of {} steps replayed (reserved: their mean), batches from {} x {} to {} x {} tokens; allocated is the largest's\n",
                "batch lengths vary",
                format!("lens={}", plan.lengths.key()),
                runs.len(),
                runs.first().map_or(0, Vec::len),
                few.sequences,
                few.len,
                most.sequences,
                most.len
            ));
        }
    }
    if e.host_bytes > 0 {
        out.push_str(&format!(
            "{:<40} {:>12}  offloaded checkpoints and their staging buffers, in pinned CPU memory\n",
            "host (pinned CPU memory)",
            format_bytes(e.host_bytes)
        ));
    }
    let g = plan.gpu.preset();
    let verdict = if e.device_bytes <= g.capacity_bytes {
        "fits"
    } else {
        "does not fit"
    };
    out.push_str(&format!(
        "\n{verdict}{per_gpu} {} ({})\n",
        g.name,
        format_bytes(g.capacity_bytes)
    ));
    if let Some(b) = solve::max_batch(arch, plan, g.capacity_bytes) {
        out.push_str(&format!("largest micro-batch that fits: {b}\n"));
    }
    if let Some(s) = solve::max_seq(arch, plan, g.capacity_bytes) {
        out.push_str(&format!("longest sequence that fits: {s}\n"));
    }
    out
}

fn validate_cmd(path: &str) -> Result<String> {
    use peakplan_core::validate::{validate, Outcome};
    let text = read_csv(path)?;
    let report = validate(&text).map_err(|e| anyhow!("{path}: {e}"))?;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let mut out = format!(
        "{:<48} {:>9} {:>10} {:>10} {:>8}\n",
        "row", "metric", "measured", "predicted", "error"
    );
    for r in &report.rows {
        match r.outcome {
            Outcome::Peak { bytes, metric } => out.push_str(&format!(
                "{:<48} {:>9} {:>8.2} G {:>8.2} G {:>+7.1}%\n",
                cell(&r.id, 48),
                metric.label(),
                gib(bytes),
                gib(r.predicted),
                r.error_pct().unwrap_or(0.0)
            )),
            Outcome::Fits {
                capacity_bytes: bytes,
                ..
            }
            | Outcome::AtMost { bytes, .. } => out.push_str(&format!(
                "{:<48} {:>9} {:>8.2} G {:>8.2} G {:>8}\n",
                cell(&r.id, 48),
                match r.outcome {
                    Outcome::Fits { fits: true, .. } => "fits",
                    Outcome::Fits { fits: false, .. } => "oom",
                    _ => "at most",
                },
                gib(bytes),
                gib(r.predicted),
                if r.outcome_right() == Some(true) {
                    "right"
                } else {
                    "WRONG"
                }
            )),
        }
    }
    out.push_str(&format!(
        "\n{}skipped: {}\n",
        validate_summary_lines(&report),
        report.skipped.len()
    ));
    for (id, why) in &report.skipped {
        out.push_str(&format!("  skipped {}: {}\n", clean(id), clean(why)));
    }
    out.push_str(&validate_by_source(&report));
    Ok(out)
}

/// The headline figures over every run (as before the split), then over single- and multi-GPU runs apart:
/// sharding is where the planner is least sure, so its error is not left hidden in the whole set's median.
fn validate_summary_lines(report: &peakplan_core::validate::Report) -> String {
    use peakplan_core::validate::{Figures, Gpus};
    // The median and the share exist only over measured peaks: without any, the line says so rather than 0.0%,
    // which would read as a perfect prediction.
    let errors = |f: &Figures| match (f.median_abs_pct, f.within_10_share) {
        (Some(m), Some(w)) if f.peaks > 0 => format!(
            "{} peaks; median absolute error {m:.1}%; within 10%: {:.0}%",
            f.peaks,
            w * 100.0
        ),
        _ => "no peaks, so no error figures".to_string(),
    };
    let all = report.figures(None);
    let headline = match (all.median_abs_pct, all.within_10_share) {
        (Some(m), Some(w)) if all.peaks > 0 => format!(
            "{}; median absolute error {m:.1}%; within 10%: {:.0}%",
            all.peaks,
            w * 100.0
        ),
        _ => "none, so no error figures".to_string(),
    };
    let mut out = format!(
        "measured peaks: {headline}\noutcomes right: {} of {}\n",
        all.outcomes_right, all.outcomes_total
    );
    for (name, gpus) in [("single GPU:", Gpus::Single), ("multi-GPU: ", Gpus::Multi)] {
        let f = report.figures(Some(gpus));
        out.push_str(&format!(
            "  {name} {}; outcomes right: {} of {}\n",
            errors(&f),
            f.outcomes_right,
            f.outcomes_total
        ));
    }
    out
}

/// Each publisher's figures over all its runs, then (where it published both) its single- and multi-GPU runs
/// apart; the GPUs column says which runs a line covers.
fn validate_by_source(report: &peakplan_core::validate::Report) -> String {
    use peakplan_core::validate::{Gpus, SourceSummary};
    let sources = report.by_source();
    if sources.is_empty() {
        return String::new();
    }
    let single = report.by_source_on(Some(Gpus::Single));
    let multi = report.by_source_on(Some(Gpus::Multi));
    let row = |name: &str, gpus: &str, s: &SourceSummary| {
        format!(
            "{:<40} {:>4} {:>7} {:>15.1}% {:>11.0}%\n",
            cell(name, 40),
            gpus,
            s.peaks,
            s.median_abs_pct,
            s.within_10_share * 100.0
        )
    };
    let mut out = String::from(
        "\nby source                                GPUs   peaks   median |error|   within 10%\n",
    );
    for s in &sources {
        let find = |list: &[SourceSummary]| list.iter().find(|x| x.source == s.source).cloned();
        match (find(&single), find(&multi)) {
            (Some(one), Some(several)) => {
                out.push_str(&row(&s.source, "all", s));
                out.push_str(&row("", Gpus::Single.label(), &one));
                out.push_str(&row("", Gpus::Multi.label(), &several));
            }
            (None, Some(_)) => out.push_str(&row(&s.source, Gpus::Multi.label(), s)),
            _ => out.push_str(&row(&s.source, Gpus::Single.label(), s)),
        }
    }
    out
}

/// A table cell of text from the CSV: escaped, then cut to the column's `width` characters.
fn cell(text: &str, width: usize) -> String {
    clean(text).chars().take(width).collect()
}

/// The validation CSV at `path`.
fn read_csv(path: &str) -> Result<String> {
    files::read_capped(
        path,
        64 << 20,
        path,
        "the validation CSV is well under 64 MiB",
    )
}

fn validate_row(path: &str, id: &str) -> Result<String> {
    let text = read_csv(path)?;
    let (cases, skipped) =
        peakplan_core::validate::cases(&text).map_err(|e| anyhow!("{path}: {e}"))?;
    if let Some((_, why)) = skipped.iter().find(|(s, _)| s == id) {
        bail!("row {id} is skipped: {why}");
    }
    let case = cases
        .iter()
        .find(|c| c.id == id)
        .ok_or_else(|| anyhow!("no row {id:?} in {path}"))?;
    Ok(format!(
        "{:?}\nquery: {}\n\n{}",
        case.outcome,
        case.plan.to_query(),
        table(&case.arch, &case.plan)
    ))
}

fn advise_cmd(args: &[String]) -> Result<String> {
    use peakplan_core::advise::advise;
    let a = parse_plan_args(args, "advise", &["table", "json"])?;
    let (plan, arch) = plan_and_arch(&a)?;
    let cap = plan.gpu.preset().capacity_bytes;
    let advice = advise(&arch, &plan, Some(cap));
    if a.format == "json" {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&advice)?));
    }
    let mut out = format!(
        "{}: needs {}{} on {} ({}): {}\n",
        clean(&arch.name),
        format_bytes(advice.device_bytes),
        units::per_gpu(&plan),
        plan.gpu.id(),
        format_bytes(cap),
        match advice.fits {
            Some(true) => "fits",
            Some(false) => "does not fit",
            None => "no GPU",
        }
    );
    let limits = |s: &peakplan_core::advise::Suggestion| {
        format!(
            "largest batch {}, longest sequence {}{}",
            s.max_batch.map_or("none".into(), |b| b.to_string()),
            s.max_seq.map_or("none".into(), |v| v.to_string()),
            if s.fits == Some(false) {
                "; STILL DOES NOT FIT"
            } else {
                ""
            }
        )
    };
    if let Some(fix) = &advice.to_fit {
        out.push_str(&format!(
            "\nto fit, change ({}): needs {}, {}\n",
            fix.cost.label(),
            format_bytes(fix.device_bytes),
            limits(fix)
        ));
        for c in &fix.changes {
            out.push_str(&format!("  {}  {} ({})\n", c.query(), c.label, c.cost_text));
        }
        out.push_str(&format!("  query: {}\n", fix.query));
    }
    out.push_str("\nevery lever, largest saving first:\n");
    for l in &advice.levers {
        let c = &l.changes[0];
        out.push_str(&format!(
            "  {:>10} saved -> {:>10}  {:<8} {:<20} {} ({}); {}\n",
            format_bytes(l.saved_bytes),
            format_bytes(l.device_bytes),
            c.cost.label(),
            c.query(),
            c.label,
            c.cost_text,
            limits(l)
        ));
    }
    Ok(out)
}

/// The plan on every bundled GPU: whether it fits, the largest batch and longest sequence, and how many GPUs of
/// that kind hold it.
fn gpus_cmd(args: &[String]) -> Result<String> {
    use peakplan_core::gpu_choice::gpu_fits;
    let a = parse_plan_args(args, "gpus", &["table", "json"])?;
    let (plan, arch) = plan_and_arch(&a)?;
    let rows = gpu_fits(&arch, &plan);
    if a.format == "json" {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&rows)?));
    }
    let need = rows.first().map_or(0, |r| r.device_bytes);
    let per_gpu = units::per_gpu(&plan);
    let mut out = format!(
        "{}, {}: needs {}{per_gpu}\n\n{:<22} {:>10} {:>23}  {:>10} {:>13} {:>15}\n",
        clean(&arch.name),
        units::method_label(plan.method),
        format_bytes(need),
        "gpu",
        "memory",
        "verdict",
        "max batch",
        "max sequence",
        "gpus needed"
    );
    let opt = |v: Option<u64>| v.map_or("none".to_string(), |v| v.to_string());
    for r in &rows {
        let needed = match r.gpus_needed_with_free_changes {
            Some(n) => format!("{}, or {n}*", opt(r.gpus_needed)),
            None => opt(r.gpus_needed),
        };
        out.push_str(&format!(
            "{:<22} {:>10} {:>23}  {:>10} {:>13} {:>15}\n",
            r.id,
            format_bytes(r.capacity_bytes),
            r.verdict(),
            opt(r.max_batch),
            opt(r.max_seq),
            needed
        ));
    }
    out.push_str(&format!(
        "\nmax batch at s={}, max sequence at b={}; gpus needed: the fewest that hold the plan, up to 64 (no more than it has where it fits), sharded with ZeRO-3 / FSDP full shard beyond one{}\n",
        plan.seq_len,
        plan.micro_batch,
        if plan.split_layers { " (the plan's layer split kept)" } else { "" }
    ));
    if let Some(r) = rows.iter().find(|r| !r.free_changes.is_empty()) {
        let changes: Vec<String> = r
            .free_changes
            .iter()
            .map(|c| format!("{} ({})", c.query(), c.label))
            .collect();
        out.push_str(&format!(
            "*: with the free changes (same result, no slower): {}\n",
            changes.join(", ")
        ));
    }
    if rows.iter().any(|r| r.gpus_needed.is_none()) {
        out.push_str("none: not even 64 of that GPU hold the plan; sharding splits parameters, gradients and optimizer states, not a GPU's own activations and logits\n");
    }
    Ok(out)
}

/// Parses a query once (any diagnostic is the error, all of them on one line) and picks the architecture: an
/// imported `config.json` when given (a file, or a Hub model by `--hf-model` or the query's `model=org/name`), else
/// the plan's preset. Shared by every command that takes `--query`.
pub(crate) fn plan_and_arch(a: &PlanArgs) -> Result<(Plan, Architecture)> {
    let parsed = Plan::parse_query(&a.query);
    if !parsed.diagnostics.is_empty() {
        let msgs: Vec<&str> = parsed
            .diagnostics
            .iter()
            .map(|d| d.message.as_str())
            .collect();
        bail!("{}", msgs.join("; "));
    }
    // `model=org/name` in the query names a Hub model, read as `--hf-model` reads it; messages name which.
    let hub_id = (a.hf_model.clone().map(|id| (id, hub::Given::Flag))).or_else(|| {
        parsed
            .plan
            .hub
            .as_ref()
            .map(|id| (id.to_string(), hub::Given::Query))
    });
    let arch = match (&a.hf_config, hub_id) {
        (Some(path), _) => load_config(path)?,
        (None, Some((id, given))) => {
            let text = hub::config_text(&id, given, peakplan_core::hf::MAX_CONFIG_BYTES as u64)?;
            // A Hub answer is untrusted text, read by the one reader the page uses too (size, nesting depth,
            // causal LM, model_type, then the importer).
            let mut arch = peakplan_core::hub::import_hub_config(&text)
                .map_err(|e| anyhow!("{}: {e}", given.name(&id)))?;
            arch.name = id;
            arch
        }
        (None, None) => preset_arch(&parsed.plan).clone(),
    };
    let mut plan = parsed.plan;
    if let Some(path) = &a.lengths {
        let what = format!("--lengths {}", quote(path));
        let text = files::read_capped(
            path,
            MAX_LENGTHS_BYTES,
            &what,
            "give a sample of the lengths",
        )?;
        let d = DatasetLengths::parse(&text).map_err(|e| anyhow!("{what}: {e}"))?;
        if d.apply(&mut plan) {
            say(&format!(
                "note: the longest of {what}, {} tokens, is over s={} (longer sequences are {})",
                d.max,
                plan.seq_len,
                match plan.len_overlong {
                    Overlong::Cut => "truncated",
                    Overlong::Drop => "dropped: ltrunc=drop",
                }
            ));
        }
    }
    Ok((plan, arch))
}

/// Most bytes `--lengths` reads: ten million counts of up to eight digits.
const MAX_LENGTHS_BYTES: u64 = 100 << 20;
