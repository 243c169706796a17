//! User text made safe to show: values and field names quoted back in notes and diagnostics lose their power over
//! a terminal or a page, long ones are cut, and a list of such messages says each thing once, up to a cap.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt::Write;
use std::hash::{BuildHasherDefault, Hasher};

/// Characters of user text that [`quote`] keeps before cutting.
pub const QUOTE_CHARS: usize = 40;
/// Most entries a list of notes or diagnostics shows; the rest are counted in one closing entry.
pub const MAX_LISTED: usize = 20;
/// Most characters of one note or diagnostic (the longest real one, naming every bundled model, is about 640).
pub const MAX_MESSAGE_CHARS: usize = 1200;

/// Whether `c` shown raw could change what a reader sees around it: control characters (C0, DEL, C1) move the
/// cursor, retitle or clear a terminal and start lines; bidi controls reorder the text that follows them; and
/// invisible characters (zero-width, line and paragraph separators, tags) hide text or break lines.
fn is_hazard(c: char) -> bool {
    c.is_control()
        || matches!(
            c as u32,
            0x00ad
                | 0x061c
                | 0x180e
                | 0x200b..=0x200f
                | 0x2028..=0x202e
                | 0x2060..=0x206f
                | 0xfeff
                | 0xfff9..=0xfffb
                | 0xe0000..=0xe007f
        )
}

/// Writes `c` as it may be shown: itself, or a visible escape (`\n`, `\t`, `\r`, else `\u{1b}`).
fn push_shown(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        c if is_hazard(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// `s` with every control, bidi and invisible formatting character written as a visible escape.
pub fn clean(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_hazard) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        push_shown(&mut out, c);
    }
    Cow::Owned(out)
}

/// `s` cleaned and cut to at most `max` characters shown; `Some(characters of s)` when it was cut.
fn cut(s: &str, max: usize) -> (String, Option<usize>) {
    // Most text needs neither (every byte is at least a character): copied whole.
    if s.len() <= max && !s.chars().any(is_hazard) {
        return (s.to_string(), None);
    }
    let mut out = String::with_capacity(s.len().min(max.saturating_mul(4)));
    let mut shown = 0;
    // Bytes of `out` that still fit beside the ellipsis; an escape is never split.
    let mut fit = 0;
    for c in s.chars() {
        let before = out.len();
        push_shown(&mut out, c);
        shown += out[before..].chars().count();
        if shown < max {
            fit = out.len();
        }
        if shown > max {
            out.truncate(fit);
            out.push('…');
            return (out, Some(s.chars().count()));
        }
    }
    (out, None)
}

/// `s` cleaned and cut to about `max` characters, saying how long it was: `abc… (5,000 characters)`.
pub fn clip(s: &str, max: usize) -> String {
    match cut(s, max) {
        (shown, None) => shown,
        (mut shown, Some(n)) => {
            let _ = write!(shown, " ({} characters)", count(n as u64));
            shown
        }
    }
}

/// User text quoted back in a message: cleaned, in backquotes, cut after [`QUOTE_CHARS`] characters with its
/// length stated, so a huge or hostile value can neither flood the message nor act on the terminal.
pub fn quote(s: &str) -> String {
    match cut(s, QUOTE_CHARS) {
        (shown, None) => format!("`{shown}`"),
        (shown, Some(n)) => format!("`{shown}` ({} characters)", count(n as u64)),
    }
}

/// A count with thousands separators: `109,980`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// FNV-1a, the hash of [`Said`]'s set: std's default (SipHash with `RandomState`) is about 0.6 KB of the page's
/// WebAssembly, and the set only has to find repeats among messages. Equal hashes are still compared as text, so
/// a collision never merges two messages; in the browser `RandomState` has no randomness to seed SipHash with
/// either, so neither hash is harder to collide on purpose there.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Messages for a person, each said once: the first `cap` distinct ones are kept in order, and the others are
/// only counted, for a closing "… and N more". Repeats are found in constant time, so a file or link with a
/// hundred thousand entries is read in linear time.
#[derive(Clone, Debug)]
pub struct Said<T = String> {
    shown: Vec<T>,
    /// Every distinct text said, shown or not (as cleaned and clipped).
    seen: HashSet<String, BuildHasherDefault<Fnv>>,
    cap: usize,
    max_chars: usize,
}

impl<T> Said<T> {
    /// An empty list that shows at most `cap` entries of at most `max_chars` characters each.
    pub fn new(cap: usize, max_chars: usize) -> Self {
        Said {
            shown: Vec::new(),
            seen: HashSet::default(),
            cap,
            max_chars,
        }
    }

    /// Says `text` (cleaned and clipped) unless it was said before; `entry` makes the kept entry from the text.
    /// Returns whether it was new.
    pub fn say(&mut self, text: &str, entry: impl FnOnce(String) -> T) -> bool {
        self.keep(clip(text, self.max_chars), entry)
    }

    /// Says `text`, already cleaned and clipped.
    fn keep(&mut self, text: String, entry: impl FnOnce(String) -> T) -> bool {
        if self.shown.len() >= self.cap {
            // Past the cap only the count matters: one hash per message.
            return self.seen.insert(text);
        }
        if self.seen.contains(&text) {
            return false;
        }
        self.shown.push(entry(text.clone()));
        self.seen.insert(text);
        true
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// How many distinct messages were said but not kept.
    pub fn more(&self) -> usize {
        self.seen.len() - self.shown.len()
    }

    /// The kept entries, and how many more distinct ones were said.
    pub fn into_parts(self) -> (Vec<T>, usize) {
        let more = self.more();
        (self.shown, more)
    }
}

impl Default for Said {
    /// A list of notes: [`MAX_LISTED`] entries of at most [`MAX_MESSAGE_CHARS`] characters.
    fn default() -> Self {
        Said::new(MAX_LISTED, MAX_MESSAGE_CHARS)
    }
}

impl Said {
    /// Says `text` unless it was said before; returns whether it was new.
    pub fn push(&mut self, text: &str) -> bool {
        self.say(text, |t| t)
    }

    /// Adds what `other` said: its kept entries in order, then its uncounted rest, each unless said here before.
    pub fn extend(&mut self, other: Said) {
        // The first list merged is taken whole, not hashed again (one file's import).
        if self.seen.is_empty()
            && other.shown.len() <= self.cap
            && other.max_chars <= self.max_chars
        {
            self.shown = other.shown;
            self.seen = other.seen;
            return;
        }
        for s in other.shown {
            self.keep(s, |t| t);
        }
        self.seen.extend(other.seen);
    }

    /// The kept entries, closed by `… and N more` when some were not kept.
    pub fn finish(self) -> Vec<String> {
        let (mut shown, more) = self.into_parts();
        if more > 0 {
            shown.push(more_line(more));
        }
        shown
    }
}

/// The closing entry of a capped list.
pub fn more_line(more: usize) -> String {
    format!("… and {} more", count(more as u64))
}
