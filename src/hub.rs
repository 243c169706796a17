//! Hub models on the page (`model=org/name`): the models fetched this session (the recent list, in memory only),
//! the one being fetched, the last failure, and what each answer or failure means in words. Plain Rust, tested
//! natively; the requests are `browser::fetch_text`, started by `state`.

use peakplan_core::hub::{import_hub_config, ConfigError, HubId};
use peakplan_core::units::format_count;
use peakplan_core::Architecture;

/// The Hugging Face Hub (the only host besides the site's own that the page's CSP lets it reach).
pub const ENDPOINT: &str = "https://huggingface.co";
/// Models kept in memory for the recent list (and for switching back without a request).
pub const RECENT: usize = 6;

/// A Hub model whose `config.json` loaded and imported.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    pub id: HubId,
    pub arch: Architecture,
    /// The parameter count the Hub's model info states (`safetensors.total`), once it has answered.
    pub stated: Option<u64>,
}

/// Why a Hub model could not be loaded.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// HTTP 404: no such model, or no `config.json` at that revision.
    NotFound,
    /// HTTP 401 or 403: gated or private.
    Denied(u16),
    /// The request failed: offline, or blocked.
    Offline,
    /// Another HTTP status.
    Status(u16),
    /// An answer that is not a config peakplan can plan.
    Config(ConfigError),
}

/// The page's Hub models.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HubModels {
    /// Newest first, at most [`RECENT`].
    recent: Vec<Loaded>,
    pub fetching: Option<HubId>,
    pub failed: Option<(HubId, Failure)>,
}

impl HubModels {
    /// The loaded model of `id`.
    pub fn get(&self, id: &HubId) -> Option<&Loaded> {
        self.recent.iter().find(|l| l.id == *id)
    }

    /// The models loaded this session, newest first.
    pub fn recent(&self) -> &[Loaded] {
        &self.recent
    }

    /// Whether `id` is to be requested: not loaded, not on its way, and not failed (a failure waits for "Try again").
    pub fn needs_fetch(&self, id: &HubId) -> bool {
        self.get(id).is_none()
            && self.fetching.as_ref() != Some(id)
            && self.failed.as_ref().is_none_or(|(f, _)| f != id)
    }

    /// A request for `id` starts.
    pub fn start(&mut self, id: HubId) {
        self.failed = None;
        self.fetching = Some(id);
    }

    /// The request for `id` ended: the model joins the recent list, or the failure is kept.
    pub fn finished(&mut self, id: HubId, outcome: Result<Architecture, Failure>) {
        if self.fetching.as_ref() == Some(&id) {
            self.fetching = None;
        }
        match outcome {
            Ok(arch) => {
                self.recent.retain(|l| l.id != id);
                self.recent.insert(
                    0,
                    Loaded {
                        id,
                        arch,
                        stated: None,
                    },
                );
                self.recent.truncate(RECENT);
            }
            Err(f) => self.failed = Some((id, f)),
        }
    }

    /// The Hub's stated parameter count of `id` arrived.
    pub fn stated(&mut self, id: &HubId, count: u64) {
        if let Some(l) = self.recent.iter_mut().find(|l| l.id == *id) {
            l.stated = Some(count);
        }
    }

    /// The failure of `id`, if its last request failed.
    pub fn failure(&self, id: &HubId) -> Option<&Failure> {
        self.failed
            .as_ref()
            .filter(|(f, _)| f == id)
            .map(|(_, f)| f)
    }
}

/// What a `config.json` answer means: the imported architecture, named by its id, or why not.
pub fn config_answer(id: &HubId, status: u16, text: &str) -> Result<Architecture, Failure> {
    match status {
        200..=299 => {
            let mut arch = import_hub_config(text).map_err(Failure::Config)?;
            arch.name = id.to_string();
            Ok(arch)
        }
        404 => Err(Failure::NotFound),
        401 | 403 => Err(Failure::Denied(status)),
        other => Err(Failure::Status(other)),
    }
}

/// The failure of `id` in words (text only: nothing from an answer is ever markup).
pub fn message(id: &HubId, failure: &Failure) -> String {
    let repo = id.repo();
    match failure {
        Failure::NotFound => format!(
            "The Hugging Face Hub has no model {repo} with a config.json at revision {} (HTTP 404). Check the \
             id as its page writes it (ORG/NAME, letter case included), or pick a preset.",
            id.revision()
        ),
        Failure::Denied(code) => format!(
            "{repo} is gated or private (HTTP {code}): accept its terms on its page, then enter an access token \
             with access below, or paste its config.json."
        ),
        Failure::Offline => format!(
            "Could not reach the Hugging Face Hub for {repo}: offline, or blocked by the network or an extension. \
             Try again, or paste its config.json."
        ),
        Failure::Status(code) => format!(
            "The Hugging Face Hub answered HTTP {code} for {repo}'s config.json; try again later, or paste it."
        ),
        Failure::Config(e) => format!("{repo} cannot be planned: {e}."),
    }
}

/// A token as the `Authorization` header may carry it: trimmed, printable ASCII without spaces; `None` when empty
/// or not a token.
pub fn token(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty() && t.len() <= 512 && t.bytes().all(|b| b.is_ascii_graphic()))
        .then(|| t.to_string())
}

/// The loaded model in one line, with the Hub's stated count beside peakplan's as a cross-check.
pub fn summary(l: &Loaded) -> String {
    let ours = l.arch.total_params();
    let mut line = format!(
        "{} from the Hub: {}, {} parameters by peakplan's count",
        l.id,
        l.arch.model_type,
        format_count(ours)
    );
    if let Some(stated) = l.stated {
        let off = (ours as f64 - stated as f64) / stated.max(1) as f64 * 100.0;
        line.push_str(&format!(
            "; the Hub states {} ({off:+.1}%)",
            format_count(stated)
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA: &str = r#"{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1024,
        "intermediate_size": 4096, "num_hidden_layers": 8, "num_attention_heads": 16, "vocab_size": 32000}"#;

    fn id(s: &str) -> HubId {
        HubId::parse(s).unwrap()
    }

    #[test]
    fn answers_become_a_model_or_a_named_failure() {
        let a = id("acme/small");
        let arch = config_answer(&a, 200, LLAMA).unwrap();
        assert_eq!(arch.name, "acme/small");
        assert_eq!(config_answer(&a, 404, ""), Err(Failure::NotFound));
        assert_eq!(config_answer(&a, 401, ""), Err(Failure::Denied(401)));
        assert_eq!(config_answer(&a, 503, ""), Err(Failure::Status(503)));
        let bad = config_answer(&a, 200, "{oops").unwrap_err();
        assert!(message(&a, &bad)
            .starts_with("acme/small cannot be planned: its config.json is not valid JSON"));
        assert!(message(&a, &Failure::Denied(403))
            .starts_with("acme/small is gated or private (HTTP 403)"));
        assert!(message(&a, &Failure::Offline).starts_with("Could not reach the Hugging Face Hub"));
        assert!(message(&a, &Failure::NotFound)
            .contains("no model acme/small with a config.json at revision main"));
    }

    #[test]
    fn loaded_models_are_kept_newest_first_and_failures_wait_for_a_retry() {
        let mut h = HubModels::default();
        let (a, b) = (id("acme/a"), id("acme/b@v2"));
        assert!(h.needs_fetch(&a));
        h.start(a.clone());
        assert!(!h.needs_fetch(&a));
        h.finished(a.clone(), config_answer(&a, 200, LLAMA));
        assert!(h.get(&a).is_some() && !h.needs_fetch(&a) && h.fetching.is_none());
        h.start(b.clone());
        h.finished(b.clone(), Err(Failure::Offline));
        assert_eq!(h.failure(&b), Some(&Failure::Offline));
        assert!(!h.needs_fetch(&b));
        h.start(b.clone());
        assert_eq!(h.failure(&b), None);
        for i in 0..RECENT + 2 {
            let x = id(&format!("acme/m{i}"));
            h.finished(x.clone(), config_answer(&x, 200, LLAMA));
        }
        assert_eq!(h.recent().len(), RECENT);
        assert_eq!(h.recent()[0].id, id(&format!("acme/m{}", RECENT + 1)));
        assert!(h.get(&a).is_none());
    }

    #[test]
    fn the_summary_sets_the_stated_count_beside_ours() {
        let a = id("acme/a");
        let mut h = HubModels::default();
        h.finished(a.clone(), config_answer(&a, 200, LLAMA));
        let ours = h.get(&a).unwrap().arch.total_params();
        h.stated(&a, ours);
        let line = summary(&h.get(&a).unwrap().clone());
        assert!(line.starts_with("acme/a from the Hub: llama, "), "{line}");
        assert!(line.ends_with("(+0.0%)"), "{line}");
        assert_eq!(token("  hf_abc \n"), Some("hf_abc".into()));
        assert_eq!(token("hf abc"), None);
        assert_eq!(token(""), None);
    }
}
