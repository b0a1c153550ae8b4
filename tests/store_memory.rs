//! The in-memory store passes the store contract.

mod support;

use process_orders::idempotency::MemoryStore;

store_contract_tests!(async { MemoryStore::new(support::store_contract::RETENTION) });
