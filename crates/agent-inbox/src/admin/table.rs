//! Plain-text output for a person at a terminal: tables with aligned columns, a list of
//! `name: value` lines for one record, and ages such as `3m 12s`. Times stay RFC 3339 as the
//! service sends them, so they can be pasted back into any tool.

use std::fmt::Write as _;

/// What an empty or absent cell shows.
pub const NONE: &str = "-";

/// Rows of text under a header, each column as wide as its widest cell.
#[derive(Debug)]
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&'static str]) -> Table {
        Table { header: header.to_vec(), rows: Vec::new() }
    }

    /// Adds a row; it must have one cell per column.
    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.header.len(), "a row has one cell per column");
        self.rows.push(cells.into_iter().map(|cell| one_line(&cell)).collect());
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table, header first; the last column is not padded, so no line ends in spaces.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.header.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let last = row.len() - 1;
            for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
                if i == last {
                    out.push_str(cell);
                } else {
                    let _ = write!(out, "{cell:<width$}  ");
                }
            }
            out.push('\n');
        }
        out
    }
}

/// `name: value` lines for one record, the names aligned.
#[derive(Debug, Default)]
pub struct Fields {
    lines: Vec<(&'static str, String)>,
}

impl Fields {
    pub fn field(&mut self, name: &'static str, value: impl Into<String>) {
        self.lines.push((name, one_line(&value.into())));
    }

    pub fn render(&self) -> String {
        let width = self.lines.iter().map(|(name, _)| name.len() + 1).max().unwrap_or(0);
        let mut out = String::new();
        for (name, value) in &self.lines {
            let _ = writeln!(out, "{:<width$} {value}", format!("{name}:"));
        }
        out
    }
}

/// A whole number of seconds as a short age: `45s`, `3m 12s`, `2h 5m`, `4d 3h`.
pub fn age(seconds: u64) -> String {
    let (days, hours, minutes, secs) =
        (seconds / 86_400, seconds / 3_600 % 24, seconds / 60 % 60, seconds % 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{secs}s"),
        (0, 0, _) => format!("{minutes}m {secs}s"),
        (0, _, _) => format!("{hours}h {minutes}m"),
        _ => format!("{days}d {hours}h"),
    }
}

/// A cell for an optional value.
pub fn or_none(value: Option<impl ToString>) -> String {
    value.map_or_else(|| NONE.to_owned(), |v| v.to_string())
}

/// A cell never breaks the table: line breaks and other control characters become spaces,
/// and an empty cell shows `-`.
fn one_line(text: &str) -> String {
    let cleaned: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if cleaned.trim().is_empty() { NONE.to_owned() } else { cleaned }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_lines_do_not_end_in_spaces() {
        let mut table = Table::new(&["AGENT", "DEPTH", "NOTE"]);
        table.row(vec!["agent_alpha".into(), "3".into(), "two\nlines".into()]);
        table.row(vec!["b".into(), "12".into(), String::new()]);
        assert_eq!(
            table.render(),
            "AGENT        DEPTH  NOTE\nagent_alpha  3      two lines\nb            12     -\n"
        );
    }

    #[test]
    fn fields_align_their_names() {
        let mut fields = Fields::default();
        fields.field("event_id", "e1");
        fields.field("state", "acked");
        assert_eq!(fields.render(), "event_id: e1\nstate:    acked\n");
    }

    #[test]
    fn ages_read_like_a_person_says_them() {
        assert_eq!(age(0), "0s");
        assert_eq!(age(45), "45s");
        assert_eq!(age(192), "3m 12s");
        assert_eq!(age(7_500), "2h 5m");
        assert_eq!(age(356_400), "4d 3h");
        assert_eq!(or_none(None::<u64>), "-");
        assert_eq!(or_none(Some(3)), "3");
    }
}
