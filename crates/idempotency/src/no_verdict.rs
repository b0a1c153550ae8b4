//! `into_verdict` in a build without the `sqs-batch` feature: there to make the compiler's error
//! name the feature (an unknown method would only suggest `into_raw`). The bound below is
//! implemented for nothing, so no call compiles.

use crate::guard::Guarded;
use crate::once::Outcome;

/// Implemented for nothing: a call of `into_verdict` without the feature fails with this
/// trait's message.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`into_verdict` needs the `sqs-batch` feature of `idempotency`",
    label = "`into_verdict` is compiled only with the `sqs-batch` feature",
    note = "add it to the dependency: idempotency = {{ version = \"...\", features = [\"sqs-batch\"] }}"
)]
pub trait NeedsSqsBatchFeature {
    /// Never called: nothing implements the trait.
    fn never(self) -> std::convert::Infallible;
}

impl<T, E> Outcome<T, E> {
    /// The verdict for the record: with the `sqs-batch` feature only.
    #[doc(hidden)]
    pub fn into_verdict(self) -> std::convert::Infallible
    where
        Self: NeedsSqsBatchFeature,
    {
        self.never()
    }
}

impl<T, E> Guarded<T, E> {
    /// The verdict for the record: with the `sqs-batch` feature only.
    #[doc(hidden)]
    pub fn into_verdict(self) -> std::convert::Infallible
    where
        Self: NeedsSqsBatchFeature,
    {
        self.never()
    }
}
