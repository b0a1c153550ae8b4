//! The in-memory store passes the store contract.

use idempotency::MemoryStore;
use idempotency::store_contract_tests;

store_contract_tests!(async { MemoryStore::new(idempotency::testkit::RETENTION) });
