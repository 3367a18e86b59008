use super::*;
use crate::testutil::sample;

#[test]
fn fnv1_matches_go_hash_fnv_new32() {
    // Go: fnv.New32() of "" is the offset basis; of "a" is 0x050c5d7e (FNV-1, not 1a).
    assert_eq!(fnv1_32(b""), 0x811c_9dc5);
    assert_eq!(fnv1_32(b"a"), 0x050c_5d7e);
    assert_eq!(fnv1_32(b"foobar"), 0x31f0_b262);
}

#[test]
fn safe_encode_matches_go() {
    // '0' is byte 48, 48 % 27 = 21 -> '4'; '9' is 57 % 27 = 3 -> 'f'.
    assert_eq!(safe_encode("09"), "4f");
    assert_eq!(safe_encode("123"), "567");
}

#[test]
fn scaling_is_not_a_new_revision() -> crate::testutil::TestResult {
    let ms = sample()?;
    let rev = model_serving_revision(&ms)?;
    assert!(rev.bytes().all(|b| SAFE_ALPHABET.contains(&b)), "{rev}");
    let mut scaled = ms.clone();
    scaled.spec.replicas = Some(5);
    scaled.spec.template.roles[0].replicas = Some(3);
    assert_eq!(model_serving_revision(&scaled)?, rev);
    let mut changed = ms.clone();
    changed.spec.template.roles[0].worker_replicas = 1;
    assert_ne!(model_serving_revision(&changed)?, rev);
    let r0 = role_template_hash(&ms.spec.template.roles[0])?;
    assert_eq!(role_template_hash(&scaled.spec.template.roles[0])?, r0);
    Ok(())
}

#[test]
fn controller_revision_shape() -> crate::testutil::TestResult {
    let ms = sample()?;
    let cr = controller_revision(&ms, "abc")?;
    assert_eq!(recorded_roles(&cr).as_ref(), Some(&ms.spec.template.roles));
    assert_eq!(cr.metadata.name.as_deref(), Some("sample-abc"));
    let labels = cr.metadata.labels.unwrap_or_default();
    assert_eq!(labels[NAME_LABEL], "sample");
    assert_eq!(labels[REVISION_LABEL], "abc");
    assert_eq!(cr.revision, Some(1));
    let data = cr.data.0;
    assert_eq!(data["data"][0]["name"], "prefill");
    assert_eq!(data["data"][1]["name"], "decode");
    let owner = &cr.metadata.owner_references.unwrap_or_default()[0];
    assert_eq!(owner.uid, "uid-1");
    Ok(())
}
