//! Plain-text tables with aligned columns.

/// A table: a header row and data rows, printed with columns padded to fit.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// A line printed under the table.
    pub fn note(&mut self, line: String) {
        self.notes.push(line);
    }

    /// Renders as a Markdown table, which reads well in a terminal too.
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.len());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> = (0..columns)
                .map(|i| {
                    let cell = cells.get(i).map_or("", String::as_str);
                    // Numbers right-aligned, text left-aligned.
                    if i > 0 && cell.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
                        format!("{cell:>w$}", w = widths[i])
                    } else {
                        format!("{cell:<w$}", w = widths[i])
                    }
                })
                .collect();
            format!("| {} |\n", padded.join(" | "))
        };
        let mut out = line(&self.header);
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
        out.push_str(&format!("|-{}-|\n", rule.join("-|-")));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for note in &self.notes {
                out.push_str(note);
                out.push('\n');
            }
        }
        out
    }
}
