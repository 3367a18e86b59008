use super::*;

#[test]
fn seconds_default_bounds_and_errors() {
    assert_eq!(seconds(None).unwrap(), 30);
    assert_eq!(seconds(Some("debug=1")).unwrap(), 30);
    assert_eq!(seconds(Some("seconds=5")).unwrap(), 5);
    assert_eq!(seconds(Some("x=1&seconds=300")).unwrap(), 300);
    for bad in [
        "seconds=0",
        "seconds=301",
        "seconds=abc",
        "seconds=",
        "seconds=-1",
    ] {
        let e = seconds(Some(bad)).unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    assert_eq!(
        seconds(Some("seconds=0")).unwrap_err().to_string(),
        "seconds must be an integer from 1 to 300, got \"0\""
    );
}

#[test]
fn one_profile_at_a_time() {
    let first = Slot::take().unwrap();
    assert_eq!(Slot::take().err().unwrap().status(), StatusCode::CONFLICT);
    drop(first);
    drop(Slot::take().unwrap());
}
