//! The fuzz targets' regression corpus (`fuzz/regressions/`), replayed through the same property
//! checks the targets run (`process_orders::testkit::fuzz`) on every `make test`. A crash that
//! `make fuzz` finds is saved there and stays fixed.

use std::path::Path;

use process_orders::testkit::fuzz::answer_properties;

#[test]
fn every_provider_answer_in_the_regression_corpus_keeps_its_properties() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/answer");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).expect("the answer corpus") {
        let path = entry.expect("an entry").path();
        let data = std::fs::read(&path).expect("readable");
        let result = std::panic::catch_unwind(|| answer_properties(&data));
        assert!(result.is_ok(), "{} breaks a property", path.display());
        replayed += 1;
    }
    assert!(replayed >= 10, "only {replayed} answers in the corpus");
}
