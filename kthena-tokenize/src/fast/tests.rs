use super::*;

/// The words `split_ascii` cuts `s` into.
fn words(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    split_ascii(s.as_bytes(), |a, b| out.push(&s[a..b]));
    out
}

#[test]
fn words_follow_the_pattern_alternatives_in_order() {
    assert_eq!(words("Hello, world!"), ["Hello", ",", " world", "!"]);
    assert_eq!(
        words("they're 'Sam' I'LL"),
        ["they", "'re", " '", "Sam", "'", " I", "'LL"]
    );
    assert_eq!(
        words("x  y   \n\n  z  "),
        ["x", " ", " y", "   \n\n", " ", " z", "  "]
    );
    assert_eq!(
        words("a 2024 (ok)"),
        ["a", " ", "2", "0", "2", "4", " (", "ok", ")"]
    );
    assert_eq!(
        words("fn f() {\n    x\n}\n"),
        ["fn", " f", "()", " {\n", "   ", " x", "\n", "}\n"]
    );
    assert_eq!(words("\tx\t\t.\r\n"), ["\tx", "\t", "\t", ".\r\n"]);
    assert_eq!(words("'"), ["'"]);
}

#[test]
fn byte_chars_are_gpt2s() {
    let t = byte_chars();
    assert_eq!(t[usize::from(b'a')], 'a');
    assert_eq!(t[usize::from(b' ')], 'Ġ');
    assert_eq!(t[usize::from(b'\n')], 'Ċ');
    assert_eq!(t[0], 'Ā');
    assert_eq!(t[127], 'ġ');
    assert_eq!(t[173], 'Ń');
}
