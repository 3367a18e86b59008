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
mod tests {
    use super::*;

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn columns_are_widest_cell_plus_three() {
        let text = render_table(
            &["NAME", "READY", "STATUS", "AGE"],
            &[
                row(&["llama", "1/2", "Progressing", "1h2m3s"]),
                row(&["qwen3-8b-serving", "0/0", "Unknown", "0s"]),
            ],
        );
        assert_eq!(
            text,
            "NAME               READY   STATUS        AGE\n\
             llama              1/2     Progressing   1h2m3s\n\
             qwen3-8b-serving   0/0     Unknown       0s\n"
        );
    }

    #[test]
    fn header_only_and_single_column() {
        assert_eq!(render_table(&["NAME", "AGE"], &[]), "NAME   AGE\n");
        assert_eq!(render_table(&["NAME"], &[row(&["x"])]), "NAME\nx\n");
    }

    #[test]
    fn long_cells_are_never_wrapped() {
        let long = "d".repeat(300);
        let text = render_table(&["NAME", "DESCRIPTION"], &[row(&["a", &long])]);
        assert_eq!(text, format!("NAME   DESCRIPTION\na      {long}\n"));
    }
}
