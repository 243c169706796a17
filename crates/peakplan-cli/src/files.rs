//! Reading the files a user names, with the size cap enforced while reading: a device or a pipe that never ends
//! (`/dev/zero`, an endless `/dev/stdin`) is refused after `cap` bytes, not read until memory runs out.

use anyhow::{anyhow, bail, Context, Result};
use std::io::Read;

/// The text of `path`, at most `cap` bytes of UTF-8. `what` names the file in messages ("--hf-config x.json").
pub fn read_capped(path: &str, cap: u64, what: &str, expect: &str) -> Result<String> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {what}"))?;
    // Metadata gives a regular file's size at once; devices and pipes report 0 and are capped while read.
    if let Ok(meta) = file.metadata() {
        if meta.is_file() && meta.len() > cap {
            bail!(
                "{what} is {} bytes; {expect} (at most {cap} accepted)",
                meta.len()
            );
        }
    }
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {what}"))?;
    if bytes.len() as u64 > cap {
        bail!("{what} is more than {cap} bytes; {expect} (at most {cap} accepted)");
    }
    String::from_utf8(bytes).map_err(|_| anyhow!("{what} is not UTF-8 text"))
}
