//! Hugging Face Hub models by id: `ORG/NAME[@REVISION]` parsed once into a [`HubId`] before anything is requested
//! (the CLI's `--hf-model` and the page's `model=` both read it here), and the Hub's answers read as untrusted
//! text: a `config.json` (size and nesting checked before parsing, then the importer's reader) and the parameter
//! count a model's info states. No I/O: the front ends fetch, this module decides what the answers mean.

use crate::hf::{import_map, MAX_CONFIG_BYTES, SUPPORTED_MODEL_TYPES};
use crate::model_type::ModelType;
use crate::text::{clip, quote};
use crate::Architecture;
use serde_json::Value;

/// The revision a Hub id without `@REVISION` names.
pub const DEFAULT_REVISION: &str = "main";
/// Deepest nesting of arrays and objects accepted in a Hub answer (a real config nests three or four levels).
pub const MAX_JSON_DEPTH: usize = 32;
/// Largest model info read for its parameter count (the info lists the repository's files).
pub const MAX_INFO_BYTES: usize = 4 << 20;

/// A Hub repository id, checked: only the characters the Hub allows, so it can be put in a URL path as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubId {
    org: String,
    name: String,
    /// A branch, tag or commit ([`DEFAULT_REVISION`] unless given).
    revision: String,
}

/// Why a text is not a Hub id; the message quotes it (cleaned and cut) and says what an id looks like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubIdError(String);

impl std::fmt::Display for HubIdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for HubIdError {}

/// Whether `text` is shaped like a Hub id rather than a preset: it has an `ORG/` part.
pub fn looks_like_id(text: &str) -> bool {
    text.contains('/')
}

impl HubId {
    /// Parses `ORG/NAME[@REVISION]`, refusing anything that is not a Hub repository name: letters, digits, `-`,
    /// `_` and `.` (not leading, and no `..`), at most 96 characters each, one `/` between them; a revision of the
    /// same characters and `/`, at most 128, shaped as git shapes a branch, tag or commit name (`revision_ok`).
    pub fn parse(id: &str) -> Result<HubId, HubIdError> {
        let (repo, revision) = id.split_once('@').unwrap_or((id, DEFAULT_REVISION));
        let shown = quote(id);
        let Some((org, name)) = repo.split_once('/') else {
            return Err(HubIdError(format!(
                "{shown} is not a Hub id: write ORG/NAME, optionally @REVISION"
            )));
        };
        for (what, part) in [("organization", org), ("model name", name)] {
            if !repo_part(part) {
                return Err(HubIdError(format!("{shown}: the {what} may hold letters, digits, '-', '_' and '.' (not first, no '..'), 1 to 96 of them")));
            }
        }
        if !revision_ok(revision) {
            return Err(HubIdError(format!(
                "{shown}: the revision may hold letters, digits, '-', '_', '.' and '/', as a branch, tag or commit \
                 name does (no '..', no leading, trailing or doubled '/', no part that starts with '.' or ends \
                 with '.' or '.lock'), 1 to 128 of them"
            )));
        }
        Ok(HubId {
            org: org.into(),
            name: name.into(),
            revision: revision.into(),
        })
    }

    pub fn org(&self) -> &str {
        &self.org
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// `ORG/NAME`, without the revision.
    pub fn repo(&self) -> String {
        format!("{}/{}", self.org, self.name)
    }

    /// The model's page on the Hub at `endpoint` (`https://huggingface.co`).
    pub fn page_url(&self, endpoint: &str) -> String {
        format!("{endpoint}/{}", self.repo())
    }

    /// Where the Hub serves the revision's `config.json`; a revision's `/` (`refs/pr/1`) is one path segment.
    pub fn config_url(&self, endpoint: &str) -> String {
        format!(
            "{endpoint}/{}/resolve/{}/config.json",
            self.repo(),
            self.revision.replace('/', "%2F")
        )
    }

    /// The Hub's model info, which states the parameter count of the model's safetensors files.
    pub fn info_url(&self, endpoint: &str) -> String {
        format!("{endpoint}/api/models/{}", self.repo())
    }
}

/// `ORG/NAME`, with `@REVISION` unless it is [`DEFAULT_REVISION`]: what a link's `model=` holds.
impl std::fmt::Display for HubId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.org, self.name)?;
        if self.revision != DEFAULT_REVISION {
            write!(f, "@{}", self.revision)?;
        }
        Ok(())
    }
}

impl serde::Serialize for HubId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for HubId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        HubId::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Whether `rev` names a branch, tag or commit as git's `check-ref-format` allows (the Hub's branches and tags are
/// git refs), within the characters a URL path takes as they are: the revision becomes a path in the local cache
/// (`refs/REVISION`) and a segment of the Hub's URL, so an absolute path, `..` or an empty part would leave the
/// repository's folder or name another file. `/` only between names (`refs/pr/1`).
fn revision_ok(rev: &str) -> bool {
    (1..=128).contains(&rev.len())
        && rev
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        && !rev.contains("..")
        && !rev.ends_with('.')
        && rev
            .split('/')
            .all(|part| !part.is_empty() && !part.starts_with('.') && !part.ends_with(".lock"))
}

/// The largest token accepted (a Hub token is 37 characters; an OAuth one a few hundred).
pub const MAX_TOKEN_LEN: usize = 512;

/// A Hub access token as an `Authorization: Bearer` header may carry it: `text` trimmed, 1 to [`MAX_TOKEN_LEN`]
/// printable ASCII characters without spaces; `None` otherwise. The one rule of the page's token field and the
/// CLI's `HF_TOKEN`: a value a header cannot carry is refused here, before an HTTP library refuses it with the
/// whole header, token included, in its message.
pub fn token(text: &str) -> Option<&str> {
    let t = text.trim();
    (!t.is_empty() && t.len() <= MAX_TOKEN_LEN && t.bytes().all(|b| b.is_ascii_graphic()))
        .then_some(t)
}

fn repo_part(s: &str) -> bool {
    (1..=96).contains(&s.len())
        && !s.starts_with(['.', '-'])
        && !s.contains("..")
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Why a Hub model's `config.json` cannot be planned; each says what is wrong in words a user can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    // === refused before parsing ===
    TooLarge {
        bytes: usize,
        limit: usize,
    },
    TooDeep {
        limit: usize,
    },
    // === read, and not a model peakplan plans ===
    Malformed(String),
    /// Its `architectures`, none of them a causal language model.
    NotCausal(Vec<String>),
    /// A `model_type` the importer does not read.
    UnsupportedType(String),
    /// The importer's own message (a missing or impossible size).
    Invalid(String),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::TooLarge { bytes, limit } => write!(
                f,
                "its config.json is {bytes} bytes, over the {limit} accepted; a real one is a few KB"
            ),
            ConfigError::TooDeep { limit } => write!(
                f,
                "its config.json nests more than {limit} levels deep; a real one nests three or four"
            ),
            ConfigError::Malformed(e) => write!(f, "its config.json is not valid JSON ({e})"),
            ConfigError::NotCausal(archs) => write!(
                f,
                "it is not a causal language model (architectures: {}); peakplan plans models that generate text",
                archs.join(", ")
            ),
            ConfigError::UnsupportedType(t) => write!(
                f,
                "its model_type {} is not one peakplan reads (it reads {})",
                quote(t),
                SUPPORTED_MODEL_TYPES.join(", ")
            ),
            ConfigError::Invalid(e) => write!(f, "its config.json cannot be planned: {e}"),
        }
    }
}
impl std::error::Error for ConfigError {}

/// Whether `text` nests arrays and objects at most `max` deep (brackets inside strings do not count): checked
/// before parsing, so a hostile answer costs one pass over its bytes.
pub fn depth_within(text: &str, max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

/// A class name of a model that generates text: what `AutoModelForCausalLM` loads.
fn is_causal(architecture: &str) -> bool {
    ["ForCausalLM", "LMHeadModel", "ForConditionalGeneration"]
        .iter()
        .any(|end| architecture.ends_with(end))
}

/// Reads a Hub model's `config.json` (untrusted text): size and depth first, then JSON, then whether it is a
/// causal language model of a type the importer reads, then the importer's reader.
pub fn import_hub_config(text: &str) -> Result<Architecture, ConfigError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            bytes: text.len(),
            limit: MAX_CONFIG_BYTES,
        });
    }
    if !depth_within(text, MAX_JSON_DEPTH) {
        return Err(ConfigError::TooDeep {
            limit: MAX_JSON_DEPTH,
        });
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| ConfigError::Malformed(e.to_string()))?;
    let Value::Object(map) = &value else {
        return Err(ConfigError::Malformed("not a JSON object".into()));
    };
    if let Some(Value::Array(archs)) = map.get("architectures") {
        let names: Vec<String> = archs
            .iter()
            .filter_map(Value::as_str)
            .map(|a| clip(a, 60))
            .take(4)
            .collect();
        if !names.is_empty() && !names.iter().any(|a| is_causal(a)) {
            return Err(ConfigError::NotCausal(names));
        }
    }
    if let Some(Value::String(t)) = map.get("model_type") {
        if ModelType::parse(t).is_none() {
            return Err(ConfigError::UnsupportedType(t.clone()));
        }
    }
    import_map(map).map_err(|e| ConfigError::Invalid(e.0))
}

/// The parameter count a model's info (`/api/models/ORG/NAME`) states for its safetensors files, when it is
/// there and the answer is within the size and depth limits; anything else is `None` (the check is a courtesy).
pub fn stated_params(info: &str) -> Option<u64> {
    if info.len() > MAX_INFO_BYTES || !depth_within(info, MAX_JSON_DEPTH) {
        return None;
    }
    let value: Value = serde_json::from_str(info).ok()?;
    value.get("safetensors")?.get("total")?.as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_before_any_request() {
        let id = HubId::parse("Qwen/Qwen2.5-7B-Instruct@v1.0").unwrap();
        assert_eq!(
            (id.org(), id.name(), id.revision()),
            ("Qwen", "Qwen2.5-7B-Instruct", "v1.0")
        );
        assert_eq!(id.to_string(), "Qwen/Qwen2.5-7B-Instruct@v1.0");
        let id = HubId::parse("meta-llama/Llama-3.1-8B@main").unwrap();
        assert_eq!(id.to_string(), "meta-llama/Llama-3.1-8B");
        assert_eq!(
            id.config_url("https://huggingface.co"),
            "https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json"
        );
        assert_eq!(
            id.info_url("https://huggingface.co"),
            "https://huggingface.co/api/models/meta-llama/Llama-3.1-8B"
        );
        let pr = HubId::parse("a/b@refs/pr/1").unwrap();
        assert_eq!(
            pr.config_url("E"),
            "E/a/b/resolve/refs%2Fpr%2F1/config.json"
        );
        for bad in [
            "llama",
            "a/b/c",
            "../etc/passwd",
            "org/..",
            "org/.hidden",
            "-org/name",
            "org/na me",
            "org/name@",
            "org/name@..%2F",
            "org/name@a?b",
            "org/<script>",
            "org/name#x",
            "",
        ] {
            assert!(HubId::parse(bad).is_err(), "{bad} was accepted");
        }
        let long = format!("org/{}", "a".repeat(97));
        assert!(HubId::parse(&long).is_err());
        assert_eq!(
            HubId::parse("llama").unwrap_err().to_string(),
            "`llama` is not a Hub id: write ORG/NAME, optionally @REVISION"
        );
        assert_eq!(
            HubId::parse("org/a\u{202e}b").unwrap_err().to_string(),
            "`org/a\\u{202e}b`: the model name may hold letters, digits, '-', '_' and '.' (not first, no '..'), 1 to 96 of them"
        );
    }

    #[test]
    fn a_token_is_what_a_header_can_carry() {
        assert_eq!(token("  hf_abc \n"), Some("hf_abc"));
        for bad in [
            "",
            " ",
            "hf abc",
            "hf_a\nb",
            "hf_\u{e9}",
            "hf_\u{7f}",
            &"x".repeat(MAX_TOKEN_LEN + 1),
        ] {
            assert_eq!(token(bad), None, "{bad:?}");
        }
        assert!(token(&"x".repeat(MAX_TOKEN_LEN)).is_some());
    }

    #[test]
    fn depth_is_counted_outside_strings() {
        assert!(depth_within(r#"{"a": [1, {"b": "[[[[["}]}"#, 3));
        assert!(!depth_within(r#"{"a": [1, {"b": [2]}]}"#, 3));
        assert!(depth_within(r#"{"a": "\"[[[[\\"}"#, 1));
        let deep = "[".repeat(100_000);
        assert!(!depth_within(&deep, MAX_JSON_DEPTH));
    }

    #[test]
    fn configs_are_refused_by_size_depth_json_kind_and_type() {
        let check = |text: &str| import_hub_config(text).map(|a| a.model_type);
        let big = format!("{{\"x\": \"{}\"}}", "a".repeat(MAX_CONFIG_BYTES));
        assert!(matches!(check(&big), Err(ConfigError::TooLarge { .. })));
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        assert_eq!(check(&deep), Err(ConfigError::TooDeep { limit: 32 }));
        assert!(matches!(
            check("{\"model_type\": "),
            Err(ConfigError::Malformed(_))
        ));
        assert!(matches!(check("[1]"), Err(ConfigError::Malformed(_))));
        let bert = r#"{"model_type": "bert", "architectures": ["BertForMaskedLM"]}"#;
        assert_eq!(
            check(bert),
            Err(ConfigError::NotCausal(vec!["BertForMaskedLM".into()]))
        );
        let mamba = r#"{"model_type": "mamba", "architectures": ["MambaForCausalLM"]}"#;
        let e = check(mamba).unwrap_err();
        assert_eq!(e, ConfigError::UnsupportedType("mamba".into()));
        assert!(e
            .to_string()
            .starts_with("its model_type `mamba` is not one peakplan reads (it reads llama, "));
        assert!(matches!(
            check(r#"{"model_type": "llama", "hidden_size": "x"}"#),
            Err(ConfigError::Invalid(_))
        ));
        let llama = r#"{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1024,
            "intermediate_size": 4096, "num_hidden_layers": 8, "num_attention_heads": 16, "vocab_size": 32000}"#;
        let a = import_hub_config(llama).unwrap();
        assert_eq!(a, crate::import_config(llama).unwrap());
    }

    #[test]
    fn the_stated_count_is_read_from_safetensors_total_only() {
        assert_eq!(
            stated_params(
                r#"{"id": "a/b", "safetensors": {"parameters": {"BF16": 7}, "total": 7615616512}}"#
            ),
            Some(7_615_616_512)
        );
        assert_eq!(stated_params(r#"{"id": "a/b"}"#), None);
        assert_eq!(stated_params(r#"{"safetensors": {"total": "7B"}}"#), None);
        assert_eq!(stated_params("not json"), None);
    }
}
