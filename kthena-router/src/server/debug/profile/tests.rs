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

fn symbol(name: &str) -> ::pprof::Symbol {
    ::pprof::Symbol {
        name: Some(name.as_bytes().to_vec()),
        addr: None,
        lineno: None,
        filename: None,
    }
}

fn names(f: &::pprof::Frames) -> Vec<String> {
    f.frames.iter().map(|s| s[0].name()).collect()
}

#[test]
fn the_sampler_frames_are_dropped() {
    let stack = |names: &[&str]| ::pprof::Frames {
        frames: names.iter().map(|n| vec![symbol(n)]).collect(),
        thread_name: String::new(),
        thread_id: 0,
        sample_timestamp: std::time::SystemTime::UNIX_EPOCH,
    };
    let mut f = stack(&[
        "backtrace::backtrace::trace_unsynchronized",
        "<pprof::backtrace::backtrace_rs::Trace as pprof::backtrace::Trace>::trace",
        "pprof::profiler::perf_signal_handler",
        "__restore_rt",
        "kthena_router::pipeline::schedule::schedule",
        "start_thread",
    ]);
    drop_sampler_frames(&mut f);
    assert_eq!(
        names(&f),
        [
            "kthena_router::pipeline::schedule::schedule",
            "start_thread"
        ]
    );
    let mut f = stack(&["kthena_router::a", "start_thread"]);
    drop_sampler_frames(&mut f);
    assert_eq!(names(&f), ["kthena_router::a", "start_thread"]);
}
