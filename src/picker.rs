//! The model picker's filter: which presets a typed filter keeps, what Enter picks, and a Hub id typed instead.
//! Plain Rust, tested natively.

use peakplan_core::hub::{looks_like_id, HubId};

/// Whether a preset matches a filter (lowercase): by id or by name, anywhere in either. Preset names are ASCII,
/// and ASCII folding keeps Unicode's case tables out of the page's wasm.
pub fn matches(filter: &str, id: &str, name: &str) -> bool {
    filter.is_empty() || id.contains(filter) || name.to_ascii_lowercase().contains(filter)
}

/// The presets a filter keeps, in list order, and the line that says so: how many, and what Enter picks.
pub fn filtered<'a>(
    models: &'a [(&'static str, &'static str)],
    filter: &str,
) -> (Vec<&'a (&'static str, &'static str)>, Option<String>) {
    let kept: Vec<_> = models
        .iter()
        .filter(|(id, name)| matches(filter, id, name))
        .collect();
    let line = (!filter.is_empty()).then(|| match kept.first() {
        None => format!(
            "No preset matches “{}”: try part of a name (\"llama\", \"7b\"), type a Hub id (org/name), or \
             paste a config.json under Training settings",
            filter.chars().take(40).collect::<String>()
        ),
        Some((_, name)) if kept.len() == 1 => format!("1 preset matches; Enter picks {name}"),
        Some((_, name)) => format!("{} presets match; Enter picks {name}", kept.len()),
    });
    (kept, line)
}

/// The line for a filter that is a Hub id (`org/name`, as typed: ids are case-sensitive): what Enter loads, or
/// why it is not an id.
pub fn hub_line(text: &str) -> Option<String> {
    let t = text.trim();
    looks_like_id(t).then(|| match HubId::parse(t) {
        Ok(id) => format!("Enter loads {id} from the Hugging Face Hub"),
        Err(e) => format!("Not a Hub id: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODELS: &[(&str, &str)] = &[
        ("llama-3.1-8b", "Llama 3.1 8B"),
        ("llama-3.1-70b", "Llama 3.1 70B"),
        ("qwen3-8b", "Qwen3 8B"),
    ];

    #[test]
    fn enter_picks_the_first_match_and_no_match_is_said() {
        let (kept, line) = filtered(MODELS, "70");
        assert_eq!(
            kept.iter().map(|m| m.0).collect::<Vec<_>>(),
            ["llama-3.1-70b"]
        );
        assert_eq!(
            line.as_deref(),
            Some("1 preset matches; Enter picks Llama 3.1 70B")
        );
        let (kept, line) = filtered(MODELS, "8b");
        assert_eq!(kept.len(), 2);
        assert_eq!(
            line.as_deref(),
            Some("2 presets match; Enter picks Llama 3.1 8B")
        );
        let (kept, line) = filtered(MODELS, "mistral");
        assert!(
            kept.is_empty() && line.is_some_and(|l| l.starts_with("No preset matches “mistral”"))
        );
        let (kept, line) = filtered(MODELS, "");
        assert_eq!((kept.len(), line), (3, None));
    }

    #[test]
    fn a_hub_id_says_what_enter_loads() {
        assert_eq!(
            hub_line(" Qwen/Qwen2.5-7B ").as_deref(),
            Some("Enter loads Qwen/Qwen2.5-7B from the Hugging Face Hub")
        );
        assert!(hub_line("org/..").is_some_and(|l| l.starts_with("Not a Hub id: `org/..`")));
        assert_eq!(hub_line("llama"), None);
    }
}
