use super::*;

#[test]
fn embeddings_and_relevance_are_exact() {
    assert_eq!(embedding_of(11, 2, 0), [11.0, 2.0, 0.0, 1.0]);
    assert!((relevance("red fox", "a red fox") - 1.0).abs() < f64::EPSILON);
    assert!((relevance("red fox", "a red car") - 0.5).abs() < f64::EPSILON);
    assert!(relevance("", "x").abs() < f64::EPSILON);
}
