//! How a plan key reads its value from a query and writes it back: the codecs the key table (`keys.rs`) names,
//! each with the accepted values its messages list, and the rules for when a link writes a key.

use super::{near, Checkpointing, Plan, Targets, TokenTraining, MAX_TOKEN_ROWS};
use crate::hub::{self, HubId};
use crate::presets::{GpuId, ModelId};
use crate::text::quote;

/// One key's parser and writer. The parser's message names the key and its accepted values; `set` and `get` go
/// through the key's field, and a codec that also touches another field (`model` and `hub`) says so in its own.
pub(super) trait Codec<T> {
    /// The value `v` spells, or the message that refuses it.
    fn parse(&self, key: &str, v: &str) -> Result<T, String>;
    /// The value in query spelling.
    fn write(&self, value: &T) -> String;
    /// Every spelling, for a keyword key; `None` for the others.
    fn spellings(&self) -> Option<&'static [&'static str]> {
        None
    }
    /// Sets the key's field from `v`; on error the plan is unchanged.
    fn set(
        &self,
        plan: &mut Plan,
        field: fn(&mut Plan) -> &mut T,
        key: &str,
        v: &str,
    ) -> Result<(), String> {
        *field(plan) = self.parse(key, v)?;
        Ok(())
    }
    /// The key's value in query spelling.
    fn get(&self, plan: &Plan, field: fn(&Plan) -> &T) -> String {
        self.write(field(plan))
    }
}

/// When [`Plan::to_query`] writes a key.
pub(super) enum Written {
    /// In every link.
    Always,
    /// Only away from its default: keys added after the first links, so that those links stay what they were.
    NonDefault,
    /// Away from its default, or wherever the plan uses the key.
    NonDefaultOr(fn(&Plan) -> bool),
}

impl Written {
    /// Whether the link writes the key; `non_default` tells whether its field differs from the default.
    pub(super) fn writes(&self, plan: &Plan, non_default: fn(&Plan) -> bool) -> bool {
        match self {
            Written::Always => true,
            Written::NonDefault => non_default(plan),
            Written::NonDefaultOr(used) => non_default(plan) || used(plan),
        }
    }
}

/// A keyword enum of the vocabulary (`keyword_enum!`): its spellings in queries.
pub(super) trait Keyword: Copy + 'static {
    /// Every spelling, in the order the page lists them.
    const SPELLINGS: &'static [&'static str];
    fn from_key(s: &str) -> Option<Self>;
    fn key(self) -> &'static str;
}

/// A keyword key: one of its enum's spellings.
pub(super) struct Word;

impl<T: Keyword> Codec<T> for Word {
    fn parse(&self, key: &str, v: &str) -> Result<T, String> {
        T::from_key(v).ok_or_else(|| {
            format!(
                "{key}={} is not accepted; accepted: {}",
                quote(v),
                T::SPELLINGS.join(", ")
            )
        })
    }
    fn write(&self, value: &T) -> String {
        value.key().into()
    }
    fn spellings(&self) -> Option<&'static [&'static str]> {
        Some(T::SPELLINGS)
    }
}

/// A switch: `0` or `1` (`false` and `true` are read too).
pub(super) struct Flag;

impl Codec<bool> for Flag {
    fn parse(&self, key: &str, v: &str) -> Result<bool, String> {
        match v {
            "0" | "false" => Ok(false),
            "1" | "true" => Ok(true),
            _ => Err(format!(
                "{key}={} is not accepted; accepted: 0, 1",
                quote(v)
            )),
        }
    }
    fn write(&self, value: &bool) -> String {
        if *value { "1" } else { "0" }.into()
    }
}

/// Gradient checkpointing: `0`, `1` (`false` and `true` are read too) or `offload`.
pub(super) struct CheckpointMode;

impl Codec<Checkpointing> for CheckpointMode {
    fn parse(&self, key: &str, v: &str) -> Result<Checkpointing, String> {
        match v {
            "offload" => Ok(Checkpointing::Offload),
            _ => Flag
                .parse(key, v)
                .map(Checkpointing::from)
                .map_err(|message| format!("{message}, offload")),
        }
    }
    fn write(&self, value: &Checkpointing) -> String {
        value.key().into()
    }
    fn spellings(&self) -> Option<&'static [&'static str]> {
        Some(&["1", "0", "offload"])
    }
}

/// A switch that may be left to its tool: `0`, `1` (`false` and `true` are read too) or `auto` (`None`).
pub(super) struct FlagOrAuto;

impl Codec<Option<bool>> for FlagOrAuto {
    fn parse(&self, key: &str, v: &str) -> Result<Option<bool>, String> {
        match v {
            "auto" => Ok(None),
            _ => Flag
                .parse(key, v)
                .map(Some)
                .map_err(|message| format!("{message}, auto")),
        }
    }
    fn write(&self, value: &Option<bool>) -> String {
        value.map_or_else(|| "auto".into(), |b| Flag.write(&b))
    }
}

/// A whole number from the first bound to the second, both included, or `auto` (`None`: the engine's default).
pub(super) struct UintOrAuto(pub u64, pub u64);

impl Codec<Option<u64>> for UintOrAuto {
    fn parse(&self, key: &str, v: &str) -> Result<Option<u64>, String> {
        if v == "auto" {
            return Ok(None);
        }
        parse_uint(key, v, self.0, self.1)
            .map(Some)
            .map_err(|message| format!("{message}, or auto"))
    }
    fn write(&self, value: &Option<u64>) -> String {
        value.map_or_else(|| "auto".into(), |n| n.to_string())
    }
}

/// A whole number from the first bound to the second, both included.
pub(super) struct Uint(pub u64, pub u64);

impl Codec<u64> for Uint {
    fn parse(&self, key: &str, v: &str) -> Result<u64, String> {
        parse_uint(key, v, self.0, self.1)
    }
    fn write(&self, value: &u64) -> String {
        value.to_string()
    }
}

impl Codec<u8> for Uint {
    fn parse(&self, key: &str, v: &str) -> Result<u8, String> {
        debug_assert!(self.1 <= u64::from(u8::MAX));
        parse_uint(key, v, self.0, self.1).map(|n| n as u8)
    }
    fn write(&self, value: &u8) -> String {
        value.to_string()
    }
}

fn parse_uint(key: &str, v: &str, min: u64, max: u64) -> Result<u64, String> {
    match v.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        Ok(n) => Err(format!(
            "{key}={n} is out of range; accepted: integers {min} to {max}"
        )),
        // A whole number too large for u64, or a signed one ("-5"), is an integer outside the range.
        Err(_) if is_integer_text(v) => Err(format!(
            "{key}={} is out of range; accepted: integers {min} to {max}",
            // Signs and digits are safe to show as they are; only a long run needs quoting's clip.
            if v.len() <= 24 {
                v.to_string()
            } else {
                quote(v)
            }
        )),
        Err(_) => Err(format!(
            "{key}={} is not an integer; accepted: integers {min} to {max}",
            quote(v)
        )),
    }
}

/// Digits, optionally signed: text that reads as an integer even when `u64` cannot hold it.
fn is_integer_text(v: &str) -> bool {
    let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
    !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit())
}

/// A probability: 0 to below 1.
pub(super) struct Fraction;

impl Codec<f64> for Fraction {
    fn parse(&self, key: &str, v: &str) -> Result<f64, String> {
        let p = crate::decimal::parse_f64(v)
            .ok_or_else(|| format!("{key}={} is not a number; accepted: 0 to below 1", quote(v)))?;
        if !(p.is_finite() && (0.0..1.0).contains(&p)) {
            return Err(format!(
                "{key}={} is out of range; accepted: 0 to below 1",
                quote(v)
            ));
        }
        Ok(p)
    }
    fn write(&self, value: &f64) -> String {
        value.to_string()
    }
}

/// A decimal in `lo..=hi`, or above `lo` where `lo_open` (a share of a GPU cannot be none of it).
pub(super) struct Decimal {
    pub lo: f64,
    pub hi: f64,
    pub lo_open: bool,
}

impl Decimal {
    fn accepted(&self) -> String {
        let above = if self.lo_open { "above " } else { "" };
        format!("accepted: {above}{} to {}", self.lo, self.hi)
    }
}

impl Codec<f64> for Decimal {
    fn parse(&self, key: &str, v: &str) -> Result<f64, String> {
        let p = crate::decimal::parse_f64(v)
            .ok_or_else(|| format!("{key}={} is not a number; {}", quote(v), self.accepted()))?;
        let above_lo = if self.lo_open {
            p > self.lo
        } else {
            p >= self.lo
        };
        if !(p.is_finite() && above_lo && p <= self.hi) {
            return Err(format!(
                "{key}={} is out of range; {}",
                quote(v),
                self.accepted()
            ));
        }
        Ok(p)
    }
    fn write(&self, value: &f64) -> String {
        value.to_string()
    }
}

/// LoRA targets: `all-linear` or a comma list.
pub(super) struct TargetList;

impl Codec<Targets> for TargetList {
    fn parse(&self, key: &str, v: &str) -> Result<Targets, String> {
        Targets::parse(v).map_err(|e| format!("{key}: {e}"))
    }
    fn write(&self, value: &Targets) -> String {
        value.key()
    }
}

/// Trainable token rows: `0` (frozen), `all` (the whole embedding and head) or a count of rows.
pub(super) struct Tokens;

impl Codec<TokenTraining> for Tokens {
    fn parse(&self, key: &str, v: &str) -> Result<TokenTraining, String> {
        Ok(match v {
            "0" => TokenTraining::Frozen,
            "all" => TokenTraining::All,
            _ => TokenTraining::Rows(parse_uint(key, v, 1, MAX_TOKEN_ROWS).map_err(|e| {
                format!("{e}, or 0 (frozen) or all (the whole embedding and head)")
            })?),
        })
    }
    fn write(&self, value: &TokenTraining) -> String {
        match value {
            TokenTraining::Frozen => "0".into(),
            TokenTraining::All => "all".into(),
            TokenTraining::Rows(n) => n.to_string(),
        }
    }
}

/// Bits per logit a loop holds: 0, 16 or 32.
pub(super) struct LogitBits;

impl Codec<u64> for LogitBits {
    fn parse(&self, key: &str, v: &str) -> Result<u64, String> {
        match v {
            "0" => Ok(0),
            "16" => Ok(16),
            "32" => Ok(32),
            _ => Err(format!(
                "{key} must be 0, 16 or 32 (bits per logit the loop keeps through backward), got {}",
                quote(v)
            )),
        }
    }
    fn write(&self, value: &u64) -> String {
        value.to_string()
    }
}

/// The model: a bundled preset, else an `org/name` shaped value as a Hub id (kept in `hub`, which a preset
/// clears); anything else is refused as a preset.
pub(super) struct Model;

impl Codec<ModelId> for Model {
    fn parse(&self, key: &str, v: &str) -> Result<ModelId, String> {
        let ids = ModelId::all().map(ModelId::id);
        bundled(key, v, ModelId::parse, ids, "preset", "peakplan presets")
    }
    fn write(&self, value: &ModelId) -> String {
        value.id().into()
    }
    fn set(
        &self,
        plan: &mut Plan,
        field: fn(&mut Plan) -> &mut ModelId,
        key: &str,
        v: &str,
    ) -> Result<(), String> {
        if ModelId::parse(v).is_none() && hub::looks_like_id(v) {
            plan.hub = Some(HubId::parse(v).map_err(|e| format!("{key}={e}"))?);
        } else {
            *field(plan) = self.parse(key, v)?;
            plan.hub = None;
        }
        Ok(())
    }
    fn get(&self, plan: &Plan, field: fn(&Plan) -> &ModelId) -> String {
        match &plan.hub {
            Some(id) => id.to_string(),
            None => self.write(field(plan)),
        }
    }
}

/// A bundled GPU.
pub(super) struct Gpu;

impl Codec<GpuId> for Gpu {
    fn parse(&self, key: &str, v: &str) -> Result<GpuId, String> {
        let ids = GpuId::all().map(GpuId::id);
        bundled(key, v, GpuId::parse, ids, "GPU", "peakplan presets")
    }
    fn write(&self, value: &GpuId) -> String {
        value.id().into()
    }
}

/// The bundled preset `v` names, or a message that says so with the ids it may have meant (a slip, or the same
/// family) and where every id is listed, instead of all of them: 46 model ids fill a phone's first screen.
fn bundled<T>(
    key: &str,
    v: &str,
    parse: fn(&str) -> Option<T>,
    ids: impl Iterator<Item = &'static str>,
    noun: &str,
    listed_by: &str,
) -> Result<T, String> {
    if let Some(id) = parse(v) {
        return Ok(id);
    }
    let ids: Vec<&str> = ids.collect();
    let family = v
        .split(['-', '_', '.'])
        .next()
        .unwrap_or(v)
        .to_ascii_lowercase();
    // Slips first, then the same family.
    let slips = ids.iter().filter(|id| near(v, id));
    let kin = ids
        .iter()
        .filter(|id| family.len() >= 3 && id.starts_with(family.as_str()) && !near(v, id));
    let close: Vec<&str> = slips.chain(kin).copied().take(6).collect();
    let hint = if close.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", close.join(", "))
    };
    Err(format!(
        "{key}={} is not a known {noun}{hint} ({} bundled, listed by `{listed_by}` and the page's list)",
        quote(v),
        ids.len()
    ))
}
