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
/// Seconds a Hub request may take, its body included, before it is aborted (the CLI's limit too).
pub const TIMEOUT_SECS: u32 = 30;

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
    /// No whole answer within [`TIMEOUT_SECS`].
    TimedOut,
    /// Another HTTP status.
    Status(u16),
    /// More than this many bytes arrived, with no `content-length` saying so first: reading stopped there.
    OverCap(usize),
    /// The answer's bytes are not UTF-8 text.
    NotText,
    /// An answer that is not a config peakplan can plan.
    Config(ConfigError),
    /// The reader stopped the request (Cancel) before it answered.
    Cancelled,
}

/// A request on its way: its model, its number (a later request or a cancel makes an answer to an older one moot),
/// and, for a model asked for while the plan shows another, the plan's `model` value then: the plan moves to the
/// new model only once it has loaded, and only if the reader has not picked another model meanwhile. Until then
/// the previous answer stays on screen, and a failure leaves the plan (and its link) as it was.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub id: HubId,
    number: u64,
    pub from: Option<String>,
}

/// The page's Hub models.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HubModels {
    /// Newest first, at most [`RECENT`].
    recent: Vec<Loaded>,
    pub fetching: Option<Request>,
    pub failed: Option<(HubId, Failure)>,
    /// Requests started so far: the next one's number.
    started: u64,
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
            && self.loading() != Some(id)
            && self.failed.as_ref().is_none_or(|(f, _)| f != id)
    }

    /// The model on its way, if any.
    pub fn loading(&self) -> Option<&HubId> {
        self.fetching.as_ref().map(|r| &r.id)
    }

    /// The model on its way while the plan still shows another (its previous answer stays meanwhile).
    pub fn switching(&self) -> Option<&HubId> {
        self.fetching
            .as_ref()
            .filter(|r| r.from.is_some())
            .map(|r| &r.id)
    }

    /// A request for `id` starts (`from`: see [`Request`]); an earlier one still on its way becomes moot. Returns
    /// its number, which [`HubModels::finished`] takes back.
    pub fn start(&mut self, id: HubId, from: Option<String>) -> u64 {
        self.started += 1;
        self.failed = None;
        self.fetching = Some(Request {
            id,
            number: self.started,
            from,
        });
        self.started
    }

    /// Whether the request numbered `number` is the one on its way (not cancelled, not overtaken).
    pub fn is_current(&self, number: u64) -> bool {
        self.fetching.as_ref().is_some_and(|r| r.number == number)
    }

    /// The reader stopped the request on its way: its answer will be moot. Where the plan already names the model
    /// (nothing else on screen) that is said as its failure; a model asked for over another plan just goes.
    pub fn cancel(&mut self) -> Option<HubId> {
        let r = self.fetching.take()?;
        if r.from.is_none() {
            self.failed = Some((r.id.clone(), Failure::Cancelled));
        }
        Some(r.id)
    }

    /// The plan's model is now `model` (its `model` value) and its Hub id `hub`: a request made over another plan
    /// is dropped once the reader picked a third model (or adopted when the plan now names it), and a failure of a
    /// model the plan no longer names stops being shown.
    pub fn model_changed(&mut self, model: &str, hub: Option<&HubId>) {
        if let Some(r) = self.fetching.as_mut() {
            if Some(&r.id) == hub {
                r.from = None;
            } else if r.from.as_deref().is_some_and(|f| f != model) {
                self.fetching = None;
            }
        }
        if self.failed.as_ref().is_some_and(|(f, _)| Some(f) != hub) {
            self.failed = None;
        }
    }

    /// The request numbered `number` for `id` ended: the model joins the recent list, or the failure is kept. An
    /// answer to a request cancelled or overtaken since is dropped (`None`); else the request it answered.
    pub fn finished(
        &mut self,
        number: u64,
        id: HubId,
        outcome: Result<Architecture, Failure>,
    ) -> Option<Request> {
        if !self.is_current(number) {
            return None;
        }
        let request = self.fetching.take();
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
        request
    }

    /// Adds a model that loaded, as an answer to no request (tests).
    #[cfg(test)]
    fn add(&mut self, id: HubId, outcome: Result<Architecture, Failure>) {
        let n = self.start(id.clone(), None);
        self.finished(n, id, outcome);
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
        Failure::TimedOut => format!(
            "The Hugging Face Hub did not answer within {TIMEOUT_SECS} seconds for {repo}'s config.json; the \
             request was stopped. Try again, or paste its config.json."
        ),
        Failure::OverCap(limit) => format!(
            "{repo} cannot be planned: its config.json runs over the {limit} bytes accepted (reading stopped \
             there); a real one is a few KB."
        ),
        Failure::NotText => format!("{repo} cannot be planned: its config.json is not UTF-8 text."),
        Failure::Status(code) => format!(
            "The Hugging Face Hub answered HTTP {code} for {repo}'s config.json; try again later, or paste it."
        ),
        Failure::Config(e) => format!("{repo} cannot be planned: {e}."),
        Failure::Cancelled => format!(
            "Stopped loading {repo}'s config.json from the Hugging Face Hub. Try again, pick a preset, or paste \
             its config.json."
        ),
    }
}

/// An answer's body as it arrives in chunks, kept while within its cap: a body that states no length (or a false
/// one) is stopped once more than `cap` bytes have come, instead of being read whole before the size check.
pub struct CappedBody {
    bytes: Vec<u8>,
    cap: usize,
}

impl CappedBody {
    pub fn new(cap: usize) -> CappedBody {
        CappedBody {
            bytes: Vec::new(),
            cap,
        }
    }

    /// Adds the next chunk; `false` once more than the cap has arrived (read no more: cancel the stream).
    pub fn push(&mut self, chunk: &[u8]) -> bool {
        if chunk.len() > self.cap.saturating_sub(self.bytes.len()) {
            return false;
        }
        self.bytes.extend_from_slice(chunk);
        true
    }

    /// The body as text, or `None` when it is not UTF-8: decoded strictly, as the CLI decodes it (the browser's
    /// `text()` would put replacement characters in place of bad bytes and go on).
    pub fn text(self) -> Option<String> {
        String::from_utf8(self.bytes).ok()
    }
}

/// A token as the `Authorization` header may carry it (the core's rule, which the CLI's `HF_TOKEN` follows too):
/// trimmed, printable ASCII without spaces; `None` when empty or not a token.
pub fn token(text: &str) -> Option<String> {
    peakplan_core::hub::token(text).map(str::to_string)
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
    fn a_body_is_read_up_to_its_cap_and_decoded_strictly() {
        // (chunks, cap, expect): the text, or where reading stopped.
        let check = |chunks: &[&[u8]], cap: usize, expect: Result<&str, &str>| {
            let mut body = CappedBody::new(cap);
            let mut stopped = None;
            for (i, c) in chunks.iter().enumerate() {
                if !body.push(c) {
                    stopped = Some(i);
                    break;
                }
            }
            let got = match stopped {
                Some(i) => Err(format!("stopped at chunk {i}")),
                None => body.text().ok_or_else(|| "not UTF-8".to_string()),
            };
            assert_eq!(
                got.as_deref().map_err(String::as_str),
                expect,
                "{chunks:?} cap {cap}"
            );
        };
        check(&[b"{\"a\"", b": 1}"], 8, Ok("{\"a\": 1}"));
        check(&[b"{\"a\"", b": 1}"], 7, Err("stopped at chunk 1"));
        check(&[b"12345678", b"", b"9"], 8, Err("stopped at chunk 2"));
        check(
            &[&[b' '; 2048], &[b' '; 2048]],
            1024,
            Err("stopped at chunk 0"),
        );
        check(&[], 8, Ok(""));
        // A character cut between chunks is whole once both arrived; bytes that are no UTF-8 are refused.
        check(
            &["é".as_bytes()[..1].as_ref(), &"é".as_bytes()[1..]],
            8,
            Ok("é"),
        );
        check(&[b"{\"model_type\": \"\xff\xfe\"}"], 64, Err("not UTF-8"));
        check(&[b"\xc3"], 8, Err("not UTF-8"));
        let a = id("acme/x");
        assert!(message(&a, &Failure::TimedOut).contains("did not answer within 30 seconds"));
        assert!(message(&a, &Failure::OverCap(1 << 20)).contains("over the 1048576 bytes accepted"));
        assert_eq!(
            message(&a, &Failure::NotText),
            "acme/x cannot be planned: its config.json is not UTF-8 text."
        );
    }

    #[test]
    fn loaded_models_are_kept_newest_first_and_failures_wait_for_a_retry() {
        let mut h = HubModels::default();
        let (a, b) = (id("acme/a"), id("acme/b@v2"));
        assert!(h.needs_fetch(&a));
        let n = h.start(a.clone(), None);
        assert!(!h.needs_fetch(&a));
        assert!(h
            .finished(n, a.clone(), config_answer(&a, 200, LLAMA))
            .is_some());
        assert!(h.get(&a).is_some() && !h.needs_fetch(&a) && h.fetching.is_none());
        let n = h.start(b.clone(), None);
        h.finished(n, b.clone(), Err(Failure::Offline));
        assert_eq!(h.failure(&b), Some(&Failure::Offline));
        assert!(!h.needs_fetch(&b));
        h.start(b.clone(), None);
        assert_eq!(h.failure(&b), None);
        for i in 0..RECENT + 2 {
            let x = id(&format!("acme/m{i}"));
            h.add(x.clone(), config_answer(&x, 200, LLAMA));
        }
        assert_eq!(h.recent().len(), RECENT);
        assert_eq!(h.recent()[0].id, id(&format!("acme/m{}", RECENT + 1)));
        assert!(h.get(&a).is_none());
    }

    #[test]
    fn a_cancelled_or_overtaken_request_is_moot_and_a_switch_waits_for_its_model() {
        let mut h = HubModels::default();
        let (a, b) = (id("acme/a"), id("acme/b"));
        // Asked for over a preset plan: the plan stays until it loads; Cancel just drops it.
        let n = h.start(a.clone(), Some("llama-3.1-8b".into()));
        assert_eq!(h.switching(), Some(&a));
        assert_eq!(h.cancel(), Some(a.clone()));
        assert!(h.fetching.is_none() && h.failed.is_none());
        assert!(h
            .finished(n, a.clone(), config_answer(&a, 200, LLAMA))
            .is_none());
        assert!(h.get(&a).is_none(), "a cancelled answer was kept");
        // The plan names the model (a link): a cancel is said, and waits for "Try again".
        let n = h.start(a.clone(), None);
        assert_eq!(h.switching(), None);
        assert_eq!(h.loading(), Some(&a));
        h.cancel();
        assert_eq!(h.failure(&a), Some(&Failure::Cancelled));
        assert!(!h.needs_fetch(&a));
        assert!(h.finished(n, a.clone(), Err(Failure::Offline)).is_none());
        assert!(
            message(&a, &Failure::Cancelled).starts_with("Stopped loading acme/a's config.json")
        );
        // A newer request overtakes an older one.
        let old = h.start(a.clone(), Some("x".into()));
        let new = h.start(b.clone(), Some("x".into()));
        assert!(!h.is_current(old) && h.is_current(new));
        assert!(h.finished(old, a.clone(), Err(Failure::NotFound)).is_none());
        assert!(h.failed.is_none());
        let done = h.finished(new, b.clone(), Err(Failure::NotFound)).unwrap();
        assert_eq!(done.from.as_deref(), Some("x"));
        assert_eq!(h.failure(&b), Some(&Failure::NotFound));
        // Picking another model drops a pending switch and a failure the plan does not name.
        h.model_changed("mistral-7b", None);
        assert!(h.failed.is_none());
        h.start(a.clone(), Some("mistral-7b".into()));
        h.model_changed("mistral-7b", None);
        assert_eq!(h.switching(), Some(&a));
        h.model_changed("qwen3-8b", None);
        assert!(h.fetching.is_none());
        // Back to a link that names it while it loads: adopted, no longer a switch.
        h.start(a.clone(), Some("qwen3-8b".into()));
        h.model_changed("acme/a", Some(&a));
        assert_eq!((h.loading(), h.switching()), (Some(&a), None));
    }

    #[test]
    fn the_summary_sets_the_stated_count_beside_ours() {
        let a = id("acme/a");
        let mut h = HubModels::default();
        h.add(a.clone(), config_answer(&a, 200, LLAMA));
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
