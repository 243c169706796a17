//! A model's `config.json` by its Hugging Face Hub id (`--hf-model ORG/NAME[@REVISION]`), as `huggingface_hub`
//! finds it: the local cache first (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`), then
//! the Hub at `HF_ENDPOINT` (default `https://huggingface.co`) with `HF_TOKEN` for gated models, unless
//! `HF_HUB_OFFLINE` says not to go online. The id is checked before anything is read or requested, and the token
//! before it is sent; redirects are followed here (a few, to http(s) only, the token only to the endpoint's host).

use anyhow::{anyhow, bail, Context, Result};
use peakplan_core::hub::HubId;
use peakplan_core::text::{clip, quote};
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use url::Url;

/// Redirects followed at most: the Hub redirects a renamed repository once, and a file on a CDN once more.
const MAX_REDIRECTS: usize = 5;
/// The whole request's time, redirects and the body included.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Where a Hub id was given, so that a message names what the user wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Given {
    /// `--hf-model ORG/NAME`.
    Flag,
    /// A query's `model=ORG/NAME`.
    Query,
}

impl Given {
    /// `text` after the flag or the key: `--hf-model acme/x`, `model=acme/x`.
    pub fn name(self, text: &str) -> String {
        match self {
            Given::Flag => format!("--hf-model {text}"),
            Given::Query => format!("model={text}"),
        }
    }
}

/// Parses `ORG/NAME[@REVISION]` with the core's rules (the page's `model=` reads ids the same way).
pub fn parse_id(id: &str, given: Given) -> Result<HubId> {
    HubId::parse(id).map_err(|e| anyhow!("{}", given.name(&e.to_string())))
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
pub fn config_text(id: &str, given: Given, cap: u64) -> Result<String> {
    let env = |k: &str| std::env::var(k).ok();
    let hub = parse_id(id, given)?;
    if let Some(path) = cache_dir(&env).and_then(|c| cached(&c, &hub)) {
        let shown = path.display().to_string();
        return crate::files::read_capped(&shown, cap, &shown, "a config.json is a few KB");
    }
    if offline(&env) {
        bail!(
            "{} is not in the local Hugging Face cache, and HF_HUB_OFFLINE forbids the Hub",
            given.name(&format!("{}@{}", hub.repo(), hub.revision()))
        );
    }
    let token = match env("HF_TOKEN").filter(|t| !t.trim().is_empty()) {
        // Never quoted back: the value is a secret, and CI logs keep stderr.
        Some(t) => Some(peakplan_core::hub::token(&t).map(str::to_string).ok_or_else(|| {
            anyhow!(
                "HF_TOKEN holds what a token cannot (a space, a control or non-ASCII character, or over {} characters); it was not sent",
                peakplan_core::hub::MAX_TOKEN_LEN
            )
        })?),
        None => None,
    };
    let endpoint = env("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into());
    let endpoint = endpoint.trim_end_matches('/');
    let start = Url::parse(&hub.config_url(endpoint))
        .ok()
        .filter(web_url)
        .ok_or_else(|| {
            anyhow!(
                "HF_ENDPOINT {} is not an http or https URL with a host",
                quote(endpoint)
            )
        })?;
    fetch(&hub, endpoint, &start, token.as_deref(), cap)
}

/// Whether `url` is one to request: http or https, with a host (`file:`, `data:`, `mailto:` and `unix:` have none).
fn web_url(url: &Url) -> bool {
    matches!(url.scheme(), "http" | "https") && url.host_str().is_some_and(|h| !h.is_empty())
}

/// GETs `start`, following redirects here rather than in ureq (whose redirects panic on a `Location` without a host,
/// and drop the token on a renamed repository's same-host redirect): at most [`MAX_REDIRECTS`], each resolved
/// against the URL that answered, only to http(s) with a host. The token goes only to the endpoint's own scheme,
/// host and port, as `huggingface_hub` sends it: kept on the Hub's own redirects, never given to another host (a
/// CDN, or wherever a hostile answer points).
fn fetch(
    hub: &HubId,
    endpoint: &str,
    start: &Url,
    token: Option<&str>,
    cap: u64,
) -> Result<String> {
    let repo = hub.repo();
    let agent = ureq::AgentBuilder::new()
        .redirects(0)
        .timeout_connect(Duration::from_secs(10))
        .build();
    let deadline = Instant::now() + TIMEOUT;
    let mut url = start.clone();
    for _ in 0..=MAX_REDIRECTS {
        let mut request = agent
            .request_url("GET", &url)
            .timeout(deadline.saturating_duration_since(Instant::now()));
        if let Some(t) = token.filter(|_| url.origin() == start.origin()) {
            request = request.set("Authorization", &format!("Bearer {t}"));
        }
        let response = match request.call() {
            Ok(r) => r,
            Err(ureq::Error::Status(code, _)) => return Err(status_error(code, &repo, hub.revision(), endpoint)),
            Err(e) => bail!(
                "cannot reach the Hub at {endpoint} for {repo} ({}); offline? a cached model works with HF_HUB_OFFLINE=1, or give the file to --hf-config",
                clip(&e.to_string(), 120)
            ),
        };
        match response.status() {
            301 | 302 | 303 | 307 | 308 => {
                url = redirect_target(&url, response.header("location"), &repo, endpoint)?;
            }
            200..=299 => return read_body(response, cap, &repo, endpoint),
            code => return Err(status_error(code, &repo, hub.revision(), endpoint)),
        }
    }
    bail!("the Hub at {endpoint} redirected {repo}'s config.json more than {MAX_REDIRECTS} times; not followed further")
}

/// Where a redirect leads: its `Location` resolved against the URL that answered (a relative one stays on that
/// host), refused unless it is http or https with a host.
fn redirect_target(from: &Url, location: Option<&str>, repo: &str, endpoint: &str) -> Result<Url> {
    let Some(location) = location else {
        bail!("the Hub at {endpoint} redirected {repo}'s config.json without saying where (no Location)");
    };
    from.join(location).ok().filter(web_url).ok_or_else(|| {
        anyhow!(
            "the Hub at {endpoint} redirected {repo}'s config.json to {}, not an http or https URL with a host; not followed",
            quote(location)
        )
    })
}

/// The answer's body: at most `cap` bytes read (a body without a length is cut there), and UTF-8.
fn read_body(response: ureq::Response, cap: u64, repo: &str, endpoint: &str) -> Result<String> {
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
        let parse_id = |id: &str| parse_id(id, Given::Flag);
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
    fn redirects_are_followed_only_to_web_urls_resolved_against_the_answering_one() {
        let from = Url::parse("http://127.0.0.1:8080/acme/x/resolve/main/config.json").unwrap();
        let check = |location: &str, expect: &str| {
            let got = match redirect_target(&from, Some(location), "acme/x", "E") {
                Ok(url) => url.to_string(),
                Err(e) => e.to_string(),
            };
            assert!(got.contains(expect), "{location}: {got}");
        };
        check(
            "/acme/y/resolve/main/config.json",
            "http://127.0.0.1:8080/acme/y/resolve/main/config.json",
        );
        check(
            "../../../y/resolve/main/config.json",
            "http://127.0.0.1:8080/acme/y/resolve/main/config.json",
        );
        check("https://cdn.example/a?sig=1", "https://cdn.example/a?sig=1");
        check("//cdn.example/b", "http://cdn.example/b");
        for hostless in [
            "file:///etc/passwd",
            "data:text/plain,hi",
            "mailto:a@b.c",
            "unix:/run/x.sock",
            "ftp://h/x",
        ] {
            check(
                hostless,
                "not an http or https URL with a host; not followed",
            );
        }
        check("http://x/\u{1b}[2J", "http://x/%1B[2J");
        let none = redirect_target(&from, None, "acme/x", "E").unwrap_err();
        assert!(none.to_string().contains("without saying where"), "{none}");
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
