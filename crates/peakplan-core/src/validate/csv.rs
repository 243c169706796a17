//! Reading the validation CSV: records from RFC 4180 text, and a record's fields by column name.

/// Splits CSV text (RFC 4180: quoted fields, doubled quotes, newlines inside quotes) into records.
pub fn parse_csv(text: &str) -> Result<Vec<Vec<String>>, String> {
    // Spreadsheets (Excel's "CSV UTF-8") open the file with a byte-order mark; left in, it would be part of the
    // first column's name and the `id` column would not be found.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut line = 1usize;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                '\n' => {
                    line += 1;
                    field.push(c);
                }
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' if field.is_empty() => quoted = true,
            ',' => record.push(std::mem::take(&mut field)),
            '\r' => {}
            '\n' => {
                line += 1;
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            _ => field.push(c),
        }
    }
    if quoted {
        return Err(format!(
            "unterminated quoted field (opened before line {line})"
        ));
    }
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    Ok(records)
}

/// One record with its header, so a column is read by name.
pub(super) struct Rec<'a> {
    pub(super) header: &'a [String],
    pub(super) values: &'a [String],
}

impl Rec<'_> {
    pub(super) fn get(&self, key: &str) -> &str {
        self.header
            .iter()
            .position(|h| h == key)
            .and_then(|i| self.values.get(i))
            .map(String::as_str)
            .unwrap_or("")
    }
    pub(super) fn lower(&self, key: &str) -> String {
        self.get(key).to_lowercase()
    }
    pub(super) fn uint(&self, key: &str) -> Option<u64> {
        self.get(key).trim().parse().ok()
    }
}
