//! A model's `config.json` by its Hugging Face Hub id (`--hf-model ORG/NAME[@REVISION]`), as `huggingface_hub`
//! finds it: the local cache first (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`), then
//! the Hub at `HF_ENDPOINT` (default `https://huggingface.co`) with `HF_TOKEN` for gated models, unless
//! `HF_HUB_OFFLINE` says not to go online. The id is checked before anything is read or requested.

use anyhow::{anyhow, bail, Context, Result};
use peakplan_core::hub::HubId;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

/// Parses `ORG/NAME[@REVISION]` with the core's rules (the page's `model=` reads ids the same way).
pub fn parse_id(id: &str) -> Result<HubId> {
    HubId::parse(id).map_err(|e| anyhow!("--hf-model {e}"))
}

/// Where `huggingface_hub` keeps its cache, from the environment.
fn cache_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(c) = env("HF_HUB_CACHE").filter(|s| !s.is_empty()) {
        return Some(c.into());
    }
    if let Some(h) = env("HF_HOME").filter(|s| !s.is_empty()) {
        return Some(PathBuf::from(h).join("hub"));
    }
    env("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub"))
}

/// The cached `config.json` of `id`, when the cache holds its revision: `refs/REVISION` names the snapshot, or the
/// revision is a commit itself.
fn cached(cache: &std::path::Path, id: &HubId) -> Option<PathBuf> {
    let repo = cache.join(format!("models--{}--{}", id.org(), id.name()));
    let commit = std::fs::read_to_string(repo.join("refs").join(id.revision()))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| id.revision().to_string());
    // A ref's content is a commit hash: nothing that could leave the repository's folder.
    if commit.is_empty() || !commit.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let path = repo.join("snapshots").join(commit).join("config.json");
    path.is_file().then_some(path)
}

/// `HF_HUB_OFFLINE` as `huggingface_hub` reads it.
fn offline(env: &dyn Fn(&str) -> Option<String>) -> bool {
    env("HF_HUB_OFFLINE").is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// The text of the model's `config.json`, at most `cap` bytes, from the cache or the Hub.
pub fn config_text(id: &str, cap: u64) -> Result<String> {
    let env = |k: &str| std::env::var(k).ok();
    let hub = parse_id(id)?;
    let repo = hub.repo();
    if let Some(path) = cache_dir(&env).and_then(|c| cached(&c, &hub)) {
        let shown = path.display().to_string();
        return crate::files::read_capped(&shown, cap, &shown, "a config.json is a few KB");
    }
    if offline(&env) {
        bail!(
            "--hf-model {repo}@{} is not in the local Hugging Face cache, and HF_HUB_OFFLINE forbids the Hub",
            hub.revision()
        );
    }
    let endpoint = env("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into());
    let endpoint = endpoint.trim_end_matches('/');
    let url = hub.config_url(endpoint);
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .build();
    let mut request = agent.get(&url);
    if let Some(token) = env("HF_TOKEN").filter(|t| !t.trim().is_empty()) {
        request = request.set("Authorization", &format!("Bearer {}", token.trim()));
    }
    let response = match request.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(code, _)) => return Err(status_error(code, &repo, hub.revision(), endpoint)),
        Err(e) => bail!(
            "cannot reach the Hub at {endpoint} for {repo} ({}); offline? a cached model works with HF_HUB_OFFLINE=1, or give the file to --hf-config",
            peakplan_core::text::clip(&e.to_string(), 120)
        ),
    };
    let mut bytes = Vec::new();
    response
        .into_reader()
        .take(cap + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {repo}'s config.json from {endpoint}"))?;
    if bytes.len() as u64 > cap {
        bail!("{repo}'s config.json is more than {cap} bytes; a config.json is a few KB");
    }
    String::from_utf8(bytes).map_err(|_| anyhow!("{repo}'s config.json is not UTF-8 text"))
}

/// What a refused request means for the user.
fn status_error(code: u16, repo: &str, revision: &str, endpoint: &str) -> anyhow::Error {
    match code {
        401 | 403 => anyhow!(
            "{repo} is gated or private (HTTP {code}): accept its terms at {endpoint}/{repo} and set HF_TOKEN to a token with access, or give its config.json to --hf-config"
        ),
        404 => anyhow!("the Hub has no model {repo} with a config.json at revision {revision} (HTTP 404)"),
        _ => anyhow!("the Hub answered HTTP {code} for {repo}'s config.json"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_before_any_request() {
        let id = parse_id("Qwen/Qwen2.5-7B-Instruct@v1.0").unwrap();
        assert_eq!(
            (id.org(), id.name(), id.revision()),
            ("Qwen", "Qwen2.5-7B-Instruct", "v1.0")
        );
        assert_eq!(
            parse_id("meta-llama/Llama-3.1-8B").unwrap().revision(),
            "main"
        );
        // The messages name the flag, as before the rules moved to the core.
        assert_eq!(
            parse_id("llama").unwrap_err().to_string(),
            "--hf-model `llama` is not a Hub id: write ORG/NAME, optionally @REVISION"
        );
        for bad in [
            "llama",
            "a/b/c",
            "../etc/passwd",
            "org/..",
            "org/.hidden",
            "org/na me",
            "org/name@",
            "org/name@..%2F",
            "org/<script>",
            "",
        ] {
            assert!(parse_id(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn the_cache_follows_huggingface_hub() {
        let env = |k: &str| match k {
            "HF_HOME" => Some("/h".to_string()),
            "HOME" => Some("/home/u".to_string()),
            _ => None,
        };
        assert_eq!(cache_dir(&env), Some(PathBuf::from("/h/hub")));
        let env = |k: &str| (k == "HF_HUB_CACHE").then(|| "/c".to_string());
        assert_eq!(cache_dir(&env), Some(PathBuf::from("/c")));
        let env = |k: &str| (k == "HF_HUB_OFFLINE").then(|| "True".to_string());
        assert!(offline(&env));
        let env = |k: &str| (k == "HF_HUB_OFFLINE").then(|| "0".to_string());
        assert!(!offline(&env));
    }
}
