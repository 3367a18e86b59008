use super::*;

fn set(value: &str) -> Result<(bool, bool, bool)> {
    let s = ControllerSet::parse(value)?;
    Ok((s.modelserving, s.modelbooster, s.autoscaler))
}

#[test]
fn controllers_flag_follows_go() -> Result<()> {
    assert_eq!(set("*")?, (true, true, true));
    assert_eq!(set("*,-autoscaler")?, (true, true, false));
    assert_eq!(set("modelserving")?, (true, false, false));
    assert_eq!(set("-modelserving,+modelserving")?, (true, false, false));
    assert_eq!(set("*,-modelserving,modelserving")?, (true, true, true));
    assert_eq!(set("")?, (false, false, false));
    assert!(
        matches!(ControllerSet::parse("*,-lws"), Err(Error::UnknownController(n)) if n == "-lws")
    );
    Ok(())
}
