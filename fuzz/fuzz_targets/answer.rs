//! Any bytes as a payment provider's answer (status and body) to a charge and to a look-up:
//! classified without a panic, by what the status proves, and never echoing a key.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    process_orders::testkit::fuzz::answer_properties(data);
});
