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
