//! A small aligned-column table for terminals. Colour (bold headers) only when the
//! caller says the output is a terminal and `NO_COLOR` is unset.

use std::fmt::Write;

/// Column alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// Whether to emit ANSI styling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// Emit bold headers and dim rules.
    pub color: bool,
}

impl Style {
    /// Colour when `is_terminal` and the `NO_COLOR` convention (no-color.org) allows it.
    pub fn detect(is_terminal: bool) -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            color: is_terminal && !no_color,
        }
    }

    /// Plain output.
    pub fn plain() -> Style {
        Style { color: false }
    }

    /// `s` in bold, when colour is on.
    pub fn bold(&self, s: &str) -> String {
        if self.color {
            format!("\x1b[1m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

/// A table with a header row.
#[derive(Clone, Debug)]
pub struct Table {
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(columns: &[(&str, Align)]) -> Table {
        Table {
            header: columns.iter().map(|c| c.0.to_string()).collect(),
            align: columns.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are blank). Cells are shown as [`super::terminal_text`]
    /// makes them: a cell may hold a name from the file, and a control character would
    /// also break the columns.
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(
            cells
                .into_iter()
                .map(|c| {
                    let c: String = c.into();
                    match super::terminal_text(&c) {
                        std::borrow::Cow::Borrowed(_) => c,
                        std::borrow::Cow::Owned(e) => e,
                    }
                })
                .collect(),
        );
    }

    /// Renders with two spaces between columns.
    pub fn render(&self, style: Style) -> String {
        let n = self.header.len();
        let mut width = vec![0usize; n];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, w) in width.iter().enumerate() {
                let c = cells.get(i).map(String::as_str).unwrap_or("");
                let pad = w - c.chars().count();
                if i > 0 {
                    s.push_str("  ");
                }
                match self.align[i] {
                    Align::Left if i + 1 == n => s.push_str(c),
                    Align::Left => {
                        s.push_str(c);
                        s.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        s.extend(std::iter::repeat_n(' ', pad));
                        s.push_str(c);
                    }
                }
            }
            s.trim_end().to_string()
        };
        let mut out = String::new();
        let _ = writeln!(out, "{}", style.bold(&line(&self.header)));
        for r in &self.rows {
            let _ = writeln!(out, "{}", line(r));
        }
        out
    }
}
