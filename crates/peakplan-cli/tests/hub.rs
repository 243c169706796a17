//! The CLI and the Hugging Face Hub (`--hf-model`, a query's `model=`): a stand-in Hub on a loopback port answers
//! as the Hub does, and as a moved, hostile or broken one would (redirects to other hosts or to no host, bodies
//! over the cap); the cache, the token and ids are checked before anything is read, sent or requested.

mod util;

use serde_json::Value;
use util::{data, peakplan_env, Run};

/// A stand-in Hub on a loopback port: `config.json` of a few repositories, each answering as the Hub does, and
/// redirects (`Location`), relative and to another host (`localhost` is not `127.0.0.1`), with a CDN there.
fn fake_hub() -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(&stream);
            let mut request = Vec::new();
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                request.push(std::mem::take(&mut line));
            }
            let path = request
                .first()
                .and_then(|l| l.split_whitespace().nth(1))
                .unwrap_or("")
                .to_string();
            let token = request.iter().find_map(|h| {
                let (name, value) = h.split_once(':')?;
                name.eq_ignore_ascii_case("authorization")
                    .then(|| value.trim().to_string())
            });
            let (status, location, body) = answer(&path, token.as_deref(), addr.port());
            let location = location
                .map(|l| format!("location: {l}\r\n"))
                .unwrap_or_default();
            let mut s = &stream;
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\n{location}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}")
}

/// The stand-in Hub's answer to `path` asked with `token` (the `Authorization` header): status, `Location`, body.
fn answer(path: &str, token: Option<&str>, port: u16) -> (&'static str, Option<String>, String) {
    let config = r#"{"model_type":"llama","hidden_size":1024,"intermediate_size":4096,"num_hidden_layers":8,"num_attention_heads":16,"num_key_value_heads":4,"vocab_size":32000}"#;
    let ok = |body: &str| ("200 OK", None, body.to_string());
    let to =
        |status: &'static str, location: &str| (status, Some(location.to_string()), String::new());
    let Some(repo) = path
        .strip_prefix("/acme/")
        .and_then(|p| p.strip_suffix("/resolve/main/config.json"))
    else {
        // The CDN, another host: it is never sent the token.
        return match (path, token) {
            ("/cdn/config.json", None) => ok(config),
            ("/cdn/config.json", Some(_)) => ("400 Bad Request", None, "token leaked".into()),
            _ => ("404 Not Found", None, "{}".into()),
        };
    };
    match repo {
        "small-llama" => ok(config),
        "gated" if token == Some("Bearer good") => ok(config),
        "gated" => ("401 Unauthorized", None, "{}".into()),
        "broken" => ok("{\"model_type\": "),
        "huge" => ok(&" ".repeat(2 << 20)),
        "encoder" => ok(r#"{"model_type":"bert","architectures":["BertModel"]}"#),
        "deep" => ok(&format!("{}{}", "[".repeat(100), "]".repeat(100))),
        // A renamed repository: the Hub redirects relatively, on its own host.
        "renamed-gated" => to(
            "307 Temporary Redirect",
            "../../../gated/resolve/main/config.json",
        ),
        "renamed-twice" => to(
            "301 Moved Permanently",
            "/acme/renamed-gated/resolve/main/config.json",
        ),
        "on-cdn" => to(
            "302 Found",
            &format!("http://localhost:{port}/cdn/config.json"),
        ),
        "loop" => to("302 Found", "/acme/loop/resolve/main/config.json"),
        "nowhere" => ("302 Found", None, String::new()),
        "to-file" => to("302 Found", "file:///etc/passwd"),
        "to-data" => to("302 Found", "data:application/json,{}"),
        "to-mailto" => to("303 See Other", "mailto:root@localhost"),
        "to-unix" => to("308 Permanent Redirect", "unix:/var/run/docker.sock"),
        _ => (
            "404 Not Found",
            None,
            r#"{"error":"Repository not found"}"#.into(),
        ),
    }
}

/// A run refused as every bad input is: status 2, one line on stderr, saying `want`.
fn refused(r: &Run, want: &str) {
    assert_eq!(r.status, 2, "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains(want), "{} does not say {want}", r.stderr);
}

/// `peakplan estimate --hf-model ID` against `hub`, with an empty cache and more of the environment.
fn estimate(hub: &str, id: &str, env: &[(&str, &str)]) -> Run {
    let cache = std::env::temp_dir().join(format!("peakplan-empty-cache-{}", std::process::id()));
    let cache = cache.to_string_lossy().into_owned();
    let base = [("HF_ENDPOINT", hub), ("HF_HUB_CACHE", cache.as_str())];
    let env: Vec<(&str, &str)> = base.iter().chain(env).copied().collect();
    peakplan_env(&["estimate", "--hf-model", id, "--format", "json"], &env)
}

#[test]
fn hf_model_reads_the_hub_and_the_cache_and_says_what_went_wrong() {
    let hub = fake_hub();
    let home = std::env::temp_dir().join(format!("peakplan-hub-{}", std::process::id()));
    let cache = home.join("hub");
    let home_s = home.to_string_lossy().into_owned();
    let base = [("HF_ENDPOINT", hub.as_str()), ("HF_HOME", home_s.as_str())];
    let est = |id: &str, extra: &[(&str, &str)]| {
        let env: Vec<(&str, &str)> = base.iter().chain(extra).copied().collect();
        peakplan_env(
            &[
                "estimate",
                "--hf-model",
                id,
                "--query",
                "method=lora",
                "--format",
                "json",
            ],
            &env,
        )
    };
    // From the endpoint: the same model as the same config given as a file.
    let ok = est("acme/small-llama", &[]);
    assert_eq!(ok.status, 0, "{}", ok.stderr);
    let v: Value = serde_json::from_str(&ok.stdout).unwrap();
    assert_eq!(v["model"]["name"], "acme/small-llama");
    assert_eq!(v["model"]["layers"], 8);
    // From the cache, offline: refs/main names the snapshot.
    let repo = cache.join("models--acme--cached-llama");
    std::fs::create_dir_all(repo.join("snapshots/0123abcd")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "0123abcd").unwrap();
    std::fs::copy(
        data("models/llama-2-7b.json"),
        repo.join("snapshots/0123abcd/config.json"),
    )
    .unwrap();
    let offline = [
        ("HF_HUB_OFFLINE", "1"),
        ("HF_ENDPOINT", "http://127.0.0.1:9"),
    ];
    let cached = est("acme/cached-llama", &offline);
    assert_eq!(cached.status, 0, "{}", cached.stderr);
    // Every failure: status 2, one line that names it.
    let gated = est("acme/gated", &[]);
    refused(&gated, "gated or private (HTTP 401)");
    assert_eq!(est("acme/gated", &[("HF_TOKEN", "good")]).status, 0);
    refused(
        &est("acme/no-such-model", &[]),
        "has no model acme/no-such-model",
    );
    refused(
        &est("acme/not-cached", &offline),
        "not in the local Hugging Face cache",
    );
    refused(
        &est("acme/small-llama", &[("HF_ENDPOINT", "http://127.0.0.1:9")]),
        "cannot reach the Hub",
    );
    refused(&est("acme/broken", &[]), "--hf-model acme/broken:");
    refused(&est("acme/huge", &[]), "more than 1048576 bytes");
    // A Hub answer is read as the page reads it: untrusted, and only a causal language model.
    refused(&est("acme/encoder", &[]), "is not a causal language model");
    refused(&est("acme/deep", &[]), "nests more than");
    refused(&est("../etc/passwd", &[]), "the organization may hold");
    refused(&est("llama-2-7b", &[]), "is not a Hub id");
    refused(&est("acme/x@..", &[]), "the revision may hold");
    let both = peakplan_env(
        &[
            "estimate",
            "--hf-model",
            "acme/small-llama",
            "--hf-config",
            "x.json",
        ],
        &base,
    );
    refused(&both, "give one");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn redirects_are_followed_a_few_times_to_web_urls_only_with_the_token_kept_on_the_hubs_host() {
    let hub = fake_hub();
    let token = [("HF_TOKEN", "good")];
    // (id, with the token, what the run says: "ok", or the one line's words)
    let cases: &[(&str, bool, &str)] = &[
        // A renamed gated repository: relative, same host, so the token goes along (it was dropped: 401).
        ("acme/renamed-gated", true, "ok"),
        ("acme/renamed-twice", true, "ok"),
        (
            "acme/renamed-gated",
            false,
            "acme/renamed-gated is gated or private (HTTP 401)",
        ),
        // Another host is never given the token.
        ("acme/on-cdn", true, "ok"),
        ("acme/on-cdn", false, "ok"),
        (
            "acme/loop",
            false,
            "redirected acme/loop's config.json more than 5 times",
        ),
        ("acme/nowhere", false, "without saying where (no Location)"),
        // No host: ureq panicked (exit 134, 14 lines).
        (
            "acme/to-file",
            true,
            "to `file:///etc/passwd`, not an http or https URL with a host; not followed",
        ),
        (
            "acme/to-data",
            false,
            "to `data:application/json,{}`, not an http or https URL",
        ),
        (
            "acme/to-mailto",
            false,
            "to `mailto:root@localhost`, not an http or https URL",
        ),
        (
            "acme/to-unix",
            false,
            "to `unix:/var/run/docker.sock`, not an http or https URL",
        ),
    ];
    for &(id, with_token, expect) in cases {
        let r = estimate(&hub, id, if with_token { &token } else { &[] });
        if expect == "ok" {
            assert_eq!(r.status, 0, "{id}: {}", r.stderr);
            let v: Value = serde_json::from_str(&r.stdout).unwrap();
            assert_eq!(v["model"]["layers"], 8, "{id}");
        } else {
            refused(&r, expect);
        }
    }
    let endpoint = estimate("file:///tmp", "acme/x", &[]);
    refused(
        &endpoint,
        "HF_ENDPOINT `file:///tmp` is not an http or https URL with a host",
    );
}

#[test]
fn a_token_a_header_cannot_carry_is_refused_unsent_and_never_shown() {
    let hub = fake_hub();
    for bad in [
        "hf_SECRETabc\nInjected: 1",
        "hf_SECRET\rabc",
        "hf_SECRET abc",
        "hf_SECRETé",
        "hf_SECRET\u{7f}",
        &format!("hf_SECRET{}", "x".repeat(600)),
    ] {
        let r = estimate(&hub, "acme/gated", &[("HF_TOKEN", bad)]);
        refused(&r, "HF_TOKEN holds what a token cannot");
        assert!(r.stderr.contains("it was not sent"), "{}", r.stderr);
        assert!(
            !r.stderr.contains("SECRET"),
            "the token was shown: {}",
            r.stderr
        );
    }
    // Blank is no token, and spaces around one are trimmed, as `huggingface_hub` does.
    refused(
        &estimate(&hub, "acme/gated", &[("HF_TOKEN", "  ")]),
        "gated or private (HTTP 401)",
    );
    assert_eq!(
        estimate(&hub, "acme/gated", &[("HF_TOKEN", " good\n")]).status,
        0
    );
}

#[test]
fn a_revision_names_a_ref_never_a_path() {
    // `a/b@/abs/dir` read `/abs/dir/config.json`: an absolute path replaces the cache in `Path::join`.
    let dir = std::env::temp_dir().join(format!("peakplan-revision-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(data("models/llama-2-7b.json"), dir.join("config.json")).unwrap();
    let offline = [("HF_HUB_OFFLINE", "1")];
    let abs = format!("acme/x@{}", dir.display());
    for id in [
        abs.as_str(),
        "acme/x@refs/",
        "acme/x@/refs",
        "acme/x@a//b",
        "acme/x@a/.b",
        "acme/x@main.lock",
    ] {
        refused(
            &estimate("http://127.0.0.1:9", id, &offline),
            "the revision may hold",
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_querys_hub_model_is_named_as_the_query_names_it() {
    let hub = fake_hub();
    let query = |model: &str, env: &[(&str, &str)]| {
        let env: Vec<(&str, &str)> = [("HF_ENDPOINT", hub.as_str())]
            .iter()
            .chain(env)
            .copied()
            .collect();
        peakplan_env(
            &["estimate", "--query", &format!("model={model}&method=lora")],
            &env,
        )
    };
    let broken = query("acme/broken", &[]);
    refused(
        &broken,
        "peakplan: model=acme/broken: its config.json is not valid JSON",
    );
    assert!(!broken.stderr.contains("--hf-model"), "{}", broken.stderr);
    let offline = query(
        "acme/not-cached@v2",
        &[("HF_HUB_OFFLINE", "1"), ("HF_HUB_CACHE", "/nonexistent")],
    );
    refused(
        &offline,
        "model=acme/not-cached@v2 is not in the local Hugging Face cache",
    );
    assert_eq!(query("acme/small-llama", &[]).status, 0);
}
