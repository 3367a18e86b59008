//! Tables in Go Kthena's layout: `text/tabwriter` with padding 3, no borders.

use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement, Table, presets};

/// Renders `header` and `rows` as Go's `tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)` does:
/// every column but the last is as wide as its widest cell plus 3 spaces, the last column
/// is not padded, each line ends with `\n`.
///
/// ```
/// let text = kthena_cli::render_table(&["NAME", "AGE"], &[vec!["a-long-name".into(), "5s".into()]]);
/// assert_eq!(text, "NAME          AGE\na-long-name   5s\n");
/// ```
pub fn render_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .force_no_tty()
        .set_header(header.iter().copied());
    for row in rows {
        table.add_row(row.iter().map(String::as_str));
    }
    let last = header.len().saturating_sub(1);
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_cell_alignment(CellAlignment::Left);
        column.set_padding(if i == last { (0, 0) } else { (0, 3) });
        column.set_constraint(ColumnConstraint::ContentWidth);
    }
    let mut out = String::new();
    for line in table.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
