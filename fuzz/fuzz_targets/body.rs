//! Any bytes as a record body. Decoding never panics, and whatever it accepts is a valid order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use process_orders::money::{Currency, MAX_MINOR};
use process_orders::order::{MAX_ORDER_ID_LEN, decode_order};

fuzz_target!(|data: &[u8]| {
    let body = String::from_utf8_lossy(data);
    if let Ok(order) = decode_order(&body, Currency::EUR) {
        assert!(!order.order_id.is_empty());
        assert!(order.order_id.len() <= MAX_ORDER_ID_LEN);
        assert!(!order.order_id.chars().any(char::is_control));
        assert!(order.amount.minor > 0 && order.amount.minor <= MAX_MINOR);
        assert!(order.order_id.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
    }
});
