use super::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Expected bytes printed by CPython 3.11 `pickle.dumps(..., protocol=5).hex()`.
#[test]
fn matches_cpython_for_the_key_shapes() {
    assert_eq!(
        hex(&dumps(&Py::Str("0"))),
        "80059505000000000000008c0130942e"
    );
    let parent = [b'a'; 32];
    let key = Py::Tuple(vec![
        Py::Bytes(&parent),
        Py::Tuple(vec![
            Py::Int(1),
            Py::Int(300),
            Py::Int(70000),
            Py::Int(-1),
            Py::Int(1 << 31),
        ]),
        Py::None,
    ]);
    assert_eq!(
        hex(&dumps(&key)),
        "80059540000000000000004320616161616161616161616161616161616161616161616161616161\
             616161616194284b014d2c014a701101004affffffff8a05000000800074944e87942e"
    );
    // The same tuple of ints without a `Py` per item.
    let ids = [1u32, 300, 70000];
    assert_eq!(
        dumps(&Py::IntTuple(&ids)),
        dumps(&Py::Tuple(vec![Py::Int(1), Py::Int(300), Py::Int(70000)]))
    );
    // Short pickles get no FRAME; () and 1-tuples use their own opcodes.
    assert_eq!(hex(&dumps(&Py::None)), "80054e2e");
    assert_eq!(
        hex(&dumps(&Py::Int(-(1 << 40)))),
        "80059509000000000000008a060000000000ff2e"
    );
    assert_eq!(
        hex(&dumps(&Py::Int(-129))),
        "80059506000000000000004a7fffffff2e"
    );
    assert_eq!(hex(&dumps(&Py::Tuple(vec![]))), "8005292e");
    assert_eq!(
        hex(&dumps(&Py::Tuple(vec![Py::Str("a"), Py::Int(-5)]))),
        "8005950c000000000000008c0161944afbffffff86942e"
    );
}
