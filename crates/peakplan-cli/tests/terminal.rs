//! What the CLI shows people rather than scripts: text from outside (file names, CSV cells, `HF_ENDPOINT`)
//! escaped on the terminal, figures the engine could not hold said in words, and no error figures without peaks.

mod util;

use serde_json::Value;
use util::{check_refused, data, json, peakplan, peakplan_env};

/// A CSV of the bundled header and one measured run, with `id` and `source` set, behind a byte-order mark as
/// Excel's "CSV UTF-8" writes it.
fn one_run_csv(dir: &std::path::Path, id: &str, source: &str) -> String {
    let text = std::fs::read_to_string(data("measured.csv")).expect("test data");
    let header = text.lines().next().expect("a header");
    let row = text
        .lines()
        .find(|l| l.starts_with("aai-7b-lora-bs1-c512,"))
        .expect("the row");
    let rest = row.splitn(3, ',').nth(2).expect("more columns");
    let skipped = rest.replacen(",lora,", ",no-such-method,", 1);
    let path = dir.join("runs.csv");
    std::fs::write(
        &path,
        format!("\u{feff}{header}\n{id},{source},{rest}\n{id}-2,{source},{skipped}\n"),
    )
    .expect("a temporary file");
    path.to_string_lossy().into_owned()
}

#[test]
fn text_from_outside_reaches_the_terminal_escaped() {
    let evil = "\x1b]0;pwned\x07";
    let dir = std::env::temp_dir().join(format!("peakplan-esc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    // The validate table's `id` and `source` cells, and the skipped row's: escaped (before, `ESC]0;` retitled
    // the terminal). The byte-order mark is skipped (before, "no `id` column").
    let csv = one_run_csv(&dir, &format!("run{evil}"), &format!("{evil}lab"));
    let r = peakplan(&["validate", &csv]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(!r.stdout.contains(['\x1b', '\x07']), "{:?}", r.stdout);
    assert!(
        r.stdout.contains("run\\u{1b}]0;pwned\\u{7}")
            && r.stdout.contains("skipped run\\u{1b}]0;pwned\\u{7}-2:")
            && r.stdout.contains("\n\\u{1b}]0;pwned\\u{7}lab "),
        "{}",
        r.stdout
    );
    // JSON keeps the text (serde escapes control characters itself).
    let v = json(&["validate", &csv, "--format", "json"]);
    assert_eq!(v["sources"][0]["source"], format!("{evil}lab"));
    // A file name in an error: `import`, `--hf-config`, `validate`, read or not.
    let named = dir.join(format!("x{evil}.json"));
    std::fs::write(&named, "{").expect("a temporary file");
    let missing = dir
        .join(format!("gone{evil}"))
        .to_string_lossy()
        .into_owned();
    let named = named.to_string_lossy().into_owned();
    for path in [&named, &missing] {
        for args in [
            &["import", path.as_str()][..],
            &["estimate", "--hf-config", path],
            &["validate", path],
            &["validate", &csv, "--row", path],
        ] {
            check_refused(args, "\\u{1b}]0;pwned\\u{7}");
            let r = peakplan(args);
            assert!(
                !r.stderr.contains(['\x1b', '\x07']),
                "{args:?}: {:?}",
                r.stderr
            );
        }
    }
    // HF_ENDPOINT, quoted when the Hub cannot be reached.
    let r = peakplan_env(
        &["estimate", "--hf-model", "acme/x"],
        &[("HF_ENDPOINT", &format!("http://127.0.0.1:9/{evil}"))],
    );
    assert_eq!(r.status, 2);
    assert!(!r.stderr.contains(['\x1b', '\x07']), "{:?}", r.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validate_without_measured_peaks_gives_no_error_figures() {
    let dir = std::env::temp_dir().join(format!("peakplan-nopeaks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let csv = one_run_csv(&dir, "one", "lab");
    // The header alone: no peaks, so no median (before, 0.0%, a perfect prediction never made).
    let header = std::fs::read_to_string(&csv).expect("the CSV");
    let header = header.lines().next().expect("a header");
    let header = header.trim_start_matches('\u{feff}');
    std::fs::write(&csv, format!("{header}\n")).expect("a temporary file");
    let v = json(&["validate", &csv, "--format", "json"]);
    for group in [&v, &v["single_gpu"], &v["multi_gpu"]] {
        for key in ["median_abs_pct", "within_10_share"] {
            assert!(group[key].is_null(), "{key}: {group}");
        }
    }
    let r = peakplan(&["validate", &csv]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(!r.stdout.contains('%'), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("measured peaks: none, so no error figures")
            && r.stdout
                .contains("single GPU: no peaks, so no error figures"),
        "{}",
        r.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_saturated_plan_says_more_than_any_gpu_not_16_eib() {
    let q = "b=65536&s=16777216&model=llama-3.1-70b&method=full&gc=0&attn=eager";
    let v = json(&["estimate", "--query", q, "--format", "json"]);
    assert_eq!(v["saturated"], Value::Bool(true));
    // JSON keeps the number; the words are for people.
    assert_eq!(v["device_bytes"].as_u64(), Some(u64::MAX));
    for command in ["estimate", "advise", "gpus"] {
        let r = peakplan(&[command, "--query", q]);
        assert_eq!(r.status, 0, "{command}: {}", r.stderr);
        assert!(
            !r.stdout.contains("16.0 EiB") && r.stdout.contains("more than any GPU"),
            "{command}: {}",
            r.stdout
        );
    }
}
