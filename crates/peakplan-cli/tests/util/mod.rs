//! What the CLI's integration tests share: running the built binary and reading what it gave.
// Every test binary compiles this module whole and uses only a part of it.
#![allow(dead_code)]

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// What one run of the binary gave.
pub struct Run {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn peakplan(args: &[&str]) -> Run {
    peakplan_env(args, &[])
}

/// The core's test data, shared with this crate's tests.
pub fn data(path: &str) -> String {
    let p: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "../peakplan-core/tests/data",
        path,
    ]
    .iter()
    .collect();
    p.to_string_lossy().into_owned()
}

/// Bad input: status 2, nothing on stdout, one line on stderr that contains `expect`.
pub fn check_refused(args: &[&str], expect: &str) {
    let r = peakplan(args);
    assert_eq!(
        r.status, 2,
        "{args:?}: status {}, stderr {:?}",
        r.status, r.stderr
    );
    assert!(r.stdout.is_empty(), "{args:?} printed {:?}", r.stdout);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?}: stderr is not one line: {:?}",
        r.stderr
    );
    assert!(
        lines[0].starts_with("peakplan: ") && lines[0].contains(expect),
        "{args:?}: {:?} does not say {expect:?}",
        lines[0]
    );
}

pub fn json(args: &[&str]) -> Value {
    let r = peakplan(args);
    assert_eq!(r.status, 0, "{args:?}: {}", r.stderr);
    serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", r.stdout))
}

/// `peakplan ARGS` with extra environment variables (and no Hugging Face variables of the caller's).
pub fn peakplan_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_peakplan"));
    for k in [
        "HF_ENDPOINT",
        "HF_TOKEN",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_HUB_OFFLINE",
    ] {
        cmd.env_remove(k);
    }
    let out = cmd
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the peakplan binary runs");
    Run {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
