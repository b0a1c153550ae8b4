//! The payment provider as the IETF Idempotency-Key draft describes it, at its worst: a key is
//! remembered for a window (a replay within it returns the first answer, a request while the
//! first is processed gets 409, another payload under the key 422), charges can be slow or
//! pending for minutes, answers get lost after the charge was made, the status look-up forgets
//! after its own retention and sometimes fails, the whole provider goes down for a while, and a
//! key rotation refuses the cached key for a while. Its ledger is the truth the invariants are
//! checked against.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lambda_kit::Clock;
use process_orders::money::Money;
use process_orders::payment::answers::{Reading, RetryableFailures};
use process_orders::payment::{ChargeRequest, ChargeStatus, PaymentError, PaymentGateway};

use crate::dialect::{self, Amounts, ChargeAnswer, Dialect, LookupAnswer};

use crate::world::{EPOCH_MS, Shared, SimClock};
use crate::worldmoney::Price;

/// What became of a charge request that the provider accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Money moved.
    Charged,
    /// Refused by the card's bank: no money moved, and never will under this key.
    Declined,
}

/// One use of an idempotency key.
#[derive(Debug, Clone, Copy)]
struct KeyUse {
    /// What the first request under the key charges (amount and currency).
    amount: Money,
    first_seen_ms: u64,
    /// Until when the first request is being processed (409 for others meanwhile).
    done_at_ms: u64,
    fate: Fate,
}

/// The provider's books.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Keys inside their window (forgotten after it).
    keys: HashMap<String, KeyUse>,
    /// What the status look-up knows (forgotten after its retention).
    status: HashMap<String, KeyUse>,
    /// Every charge that moved money, by key: (what the function sent, minor units and a
    /// code, as the world reads them; provider ms).
    pub charges: HashMap<String, Vec<(Price, u64)>>,
    /// Keys whose every accepted request was declined.
    pub declined: HashMap<String, u64>,
    /// When each key was first declined, provider ms.
    pub first_declined_ms: HashMap<String, u64>,
    /// New charge requests (not replays) under a key after its first decline, provider ms: the
    /// card sent again, which card networks penalise and the design forbids.
    pub sent_after_decline: HashMap<String, Vec<u64>>,
    /// Look-ups that answered and left the question open (no charge found, or an answer the
    /// function's reader does not understand), by key. What a person must settle, unless the
    /// key was still inside its window (`crate::check`).
    pub unsettled_lookups: HashMap<String, Vec<OpenLookUp>>,
    /// Charge answers that say when the record may come back, by key: a refusal of our
    /// configuration (401: 15 minutes, as docs/design.md has it) and a `Retry-After` (a 409 in
    /// flight, a 202 still processing).
    pub come_back: HashMap<String, Vec<ComeBack>>,
    /// The invocations whose charges it refused for our configuration (a 401): any record of
    /// theirs may stay away the design's 15 minutes, since the function stops calling for the
    /// rest of an invocation so refused.
    pub refused_callers: HashSet<crate::world::HolderId>,
    /// Keys whose first charge request was lost on the way, before it arrived.
    lost_on_the_way: HashSet<String>,
}

/// Whether `key`'s first charge request is one lost on the way: a hash of the key (FNV-1a),
/// so that the random stream, and every other draw of a seed, is the same as without it.
fn lost_on_the_way(key: &str, every: u64) -> bool {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    every > 0 && hash % every == 0
}

/// A look-up that answered and left the question open.
#[derive(Debug, Clone, Copy)]
pub struct OpenLookUp {
    /// When it answered, provider ms.
    pub at_ms: u64,
    /// The function's reader did not understand the answer (`true`), or it said that the
    /// provider knows no charge under the key (`false`): the latter settles nothing only once
    /// the provider may have forgotten the key.
    pub unclear: bool,
}

/// How long docs/design.md keeps away a record refused for our configuration (a 401, a key
/// rotated): 15 minutes, the world's reading of the design, not the function's constant.
pub const CONFIGURATION_RETRY_MS: u64 = 15 * 60 * 1_000;

/// A charge answer that says when its record may come back.
#[derive(Debug, Clone, Copy)]
pub struct ComeBack {
    /// The container's invocation that sent the charge (`crate::world::CALLER`).
    pub caller: Option<crate::world::HolderId>,
    /// The answer's HTTP status.
    pub status: u16,
    /// Not before this, simulated ms.
    pub not_before_ms: u64,
}

/// Faults and limits of the simulated provider.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// How it words its answers (the function reads them with its own readers).
    pub dialect: Dialect,
    /// How its look-ups word the amounts they name.
    pub lookup_amounts: Amounts,
    /// The failures the deployment lets be charged again (`PAYMENT_RETRYABLE_FAILURES`).
    pub retryable: RetryableFailures,
    /// How long a key is remembered, ms.
    pub key_window_ms: u64,
    /// The clocks' disagreement the deployment allows for (`PAYMENT_CLOCK_SKEW_MS`), ms.
    pub skew_allowance_ms: u64,
    /// How long the look-up remembers a charge, ms.
    pub lookup_retention_ms: u64,
    /// The function's payment timeout, ms: a slower answer is a timeout after sending.
    pub client_timeout_ms: u64,
    /// Refuses connections between these simulated ms.
    pub outage: (u64, u64),
    /// Refuses the cached key (401) between these simulated ms.
    pub rotation: (u64, u64),
    /// Every charge is slower than the client's timeout between these simulated ms.
    pub brownout: (u64, u64),
    /// Share of answers lost after the charge was made.
    pub lost_rate: f64,
    /// One key in this many (by an FNV-1a hash of the key) has its first charge request lost
    /// before it arrives; 0: none.
    pub first_lost_on_the_way_every: u64,
    /// Share of charges answered pending.
    pub pending_rate: f64,
    /// Share of charges slower than the client's timeout.
    pub slow_rate: f64,
    /// Share of look-ups that fail.
    pub lookup_error_rate: f64,
    /// The payment key the function sends. A quarter of the orders' declines echo it deep in
    /// their text, as a gateway's debug output may (`Provider::echo_secret`).
    pub secret: String,
}

/// The provider, shared by every container.
pub struct Provider {
    ledger: Mutex<Ledger>,
    clock: SimClock,
    world: Shared,
    settings: ProviderSettings,
}

/// Amounts whose cents are 13 are declined by the card's bank: the generator knows which
/// orders to expect in the DLQ for a decline.
pub fn declines(minor: u64) -> bool {
    minor % 100 == 13
}

impl Provider {
    /// A provider with an empty ledger.
    pub fn new(clock: SimClock, world: Shared, settings: ProviderSettings) -> Self {
        Self {
            ledger: Mutex::default(),
            clock,
            world,
            settings,
        }
    }

    /// The books, locked.
    pub fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A charge's answer, worded in the run's dialect and read by the function's reader.
    fn say(&self, answer: ChargeAnswer, key: &str, money: Money) -> Result<(), PaymentError> {
        let mut wire = self.settings.dialect.charge(answer, key, money);
        let at_ms = self.sim_ms();
        let not_before_ms = match (wire.status, wire.retry_after) {
            // The refusals of our configuration docs/design.md names (the dialects send 401).
            (401 | 403 | 404, _) => Some(at_ms + CONFIGURATION_RETRY_MS),
            // A 409 in flight, or an accepted charge still processing, with `Retry-After`.
            (_, Some(after)) => Some(at_ms + u64::try_from(after.as_millis()).unwrap_or(u64::MAX)),
            _ => None,
        };
        if let Some(not_before_ms) = not_before_ms {
            let caller = crate::world::CALLER.try_with(|caller| *caller).ok();
            let mut ledger = self.ledger();
            if matches!(wire.status, 401 | 403 | 404)
                && let Some(caller) = caller
            {
                ledger.refused_callers.insert(caller);
            }
            ledger
                .come_back
                .entry(key.to_owned())
                .or_default()
                .push(ComeBack {
                    caller,
                    status: wire.status,
                    not_before_ms,
                });
        }
        if matches!(answer, ChargeAnswer::Declined) {
            self.echo_secret(&mut wire, key);
        }
        dialect::read_charge(&wire, self.reading())
    }

    /// The payment key the function sends.
    pub fn secret(&self) -> &str {
        &self.settings.secret
    }

    /// A quarter of the orders (by their key's hash) have the provider's decline text echo the
    /// payment key (64 letters), starting at its 151st to 193rd character: a reader that cut
    /// the text to its 200 characters before scrubbing the key (the seams finding 7) keeps 8 to
    /// 50 of them, never the whole key. Only the dialects whose declines carry a message (the
    /// draft's, Stripe's).
    fn echo_secret(&self, wire: &mut dialect::Wire, key: &str) {
        let mut hash = lambda_kit::Fnv1a::new();
        hash.write(key.as_bytes());
        let hash = hash.finish();
        if !hash.is_multiple_of(4) {
            return;
        }
        let Ok(mut body) = serde_json::from_str::<serde_json::Value>(&wire.body) else {
            return;
        };
        let Some(message) = body.pointer_mut("/error/message") else {
            return;
        };
        let lead = 150 + usize::try_from(hash / 4 % 43).unwrap_or(0);
        let mut text = format!("card declined (simulated) for {key}; sent with ");
        while text.chars().count() < lead {
            text.push('.');
        }
        text.push_str(&self.settings.secret);
        text.push_str(" (debug)");
        *message = serde_json::Value::String(text);
        wire.body = body.to_string();
    }

    fn reading(&self) -> Reading<'_> {
        Reading {
            retryable: &self.settings.retryable,
            secret: Some(&self.settings.secret),
        }
    }

    /// Its faults and limits.
    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    fn sim_ms(&self) -> u64 {
        self.clock.now_ms().saturating_sub(EPOCH_MS)
    }

    /// Connection refused during the outage.
    fn refuse(&self, key: &str, call: &str) -> Result<(), PaymentError> {
        let at = self.sim_ms();
        if (self.settings.outage.0..self.settings.outage.1).contains(&at) {
            self.world.count(|f| f.outage_refusals += 1);
            self.world
                .tell(key, || format!("provider {call}: refused (outage)"));
            return Err(PaymentError::NotSent {
                reason: "simulated outage: connection refused".into(),
                source: None,
            });
        }
        Ok(())
    }

    /// A charge arrives: the provider's answer per the draft, and the money it moves.
    fn arrive(&self, key: &str, amount: Money, now_ms: u64) -> Arrival {
        let mut ledger = self.ledger();
        if let Some(used) = ledger.keys.get(key)
            && now_ms >= used.done_at_ms
            && now_ms.saturating_sub(used.first_seen_ms) >= self.settings.key_window_ms
        {
            ledger.keys.remove(key);
        }
        if let Some(used) = ledger.keys.get(key) {
            return if used.amount != amount {
                Arrival::KeyReused
            } else if now_ms < used.done_at_ms {
                Arrival::InFlight(used.done_at_ms - now_ms)
            } else {
                Arrival::Replay(used.fate)
            };
        }
        if ledger.first_declined_ms.contains_key(key) {
            ledger
                .sent_after_decline
                .entry(key.to_owned())
                .or_default()
                .push(now_ms);
        }
        let pending = self.world.chance(self.settings.pending_rate);
        let sim_ms = now_ms.saturating_sub(EPOCH_MS);
        let browned_out = (self.settings.brownout.0..self.settings.brownout.1).contains(&sim_ms);
        let slow = !pending && (browned_out || self.world.chance(self.settings.slow_rate));
        let (processing_ms, fate) = if pending {
            self.world.count(|f| f.pending_charges += 1);
            // A bank's review: minutes; a third end declined.
            let fate = if self.world.chance(1.0 / 3.0) {
                Fate::Declined
            } else {
                Fate::Charged
            };
            (self.world.between(30_000..=600_000), fate)
        } else if slow {
            self.world.count(|f| f.slow_charges += 1);
            // Past the client's timeout; one in ten stays in the provider's queue for minutes.
            let ms = if self.world.chance(0.1) {
                self.world.between(40_000..=120_000)
            } else {
                self.world
                    .between(self.settings.client_timeout_ms..=self.settings.client_timeout_ms * 4)
            };
            (ms, Fate::Charged)
        } else {
            (self.world.between(20..=300), Fate::Charged)
        };
        let fate = if declines(amount.minor) {
            Fate::Declined
        } else {
            fate
        };
        let used = KeyUse {
            amount,
            first_seen_ms: now_ms,
            done_at_ms: now_ms + processing_ms,
            fate,
        };
        ledger.keys.insert(key.to_owned(), used);
        ledger.status.insert(key.to_owned(), used);
        match fate {
            Fate::Charged => {
                ledger.declined.remove(key);
                let sent = Price::sent(amount.minor, amount.currency.as_str())
                    .expect("a charge request's currency is three letters");
                ledger
                    .charges
                    .entry(key.to_owned())
                    .or_default()
                    .push((sent, now_ms));
            }
            Fate::Declined => {
                *ledger.declined.entry(key.to_owned()).or_default() += 1;
                ledger
                    .first_declined_ms
                    .entry(key.to_owned())
                    .or_insert(now_ms);
            }
        }
        Arrival::New {
            processing_ms,
            pending,
            fate,
        }
    }
}

/// What the provider makes of an arriving charge.
enum Arrival {
    /// 422: another payload under the key.
    KeyReused,
    /// 409: the first request is still being processed for this long.
    InFlight(u64),
    /// The first request's answer again.
    Replay(Fate),
    /// A new charge.
    New {
        processing_ms: u64,
        pending: bool,
        fate: Fate,
    },
}

fn fate_answer(fate: Fate, replay: bool) -> ChargeAnswer {
    match fate {
        Fate::Charged => ChargeAnswer::Charged { replay },
        Fate::Declined => ChargeAnswer::Declined,
    }
}

impl PaymentGateway for Provider {
    async fn charge(&self, request: &ChargeRequest<'_>) -> Result<(), PaymentError> {
        let key = request.idempotency_key;
        if let Ok(caller) = crate::world::CALLER.try_with(|caller| *caller) {
            self.world.lock().fence.charging(key, caller);
        }
        self.world.latency(50).await;
        self.refuse(key, "charge")?;
        let at = self.sim_ms();
        if (self.settings.rotation.0..self.settings.rotation.1).contains(&at) {
            self.world.count(|f| f.rotation_refusals += 1);
            self.world.tell(key, || {
                "provider charge: 401, the cached key was rotated".into()
            });
            return self.say(ChargeAnswer::KeyRotated, key, request.amount);
        }
        if lost_on_the_way(key, self.settings.first_lost_on_the_way_every)
            && self.ledger().lost_on_the_way.insert(key.to_owned())
        {
            self.world.count(|f| f.charges_lost_on_the_way += 1);
            self.world.tell(key, || {
                "provider charge: the request was lost on the way, never arrived".into()
            });
            tokio::time::sleep(Duration::from_millis(self.settings.client_timeout_ms)).await;
            return Err(PaymentError::Ambiguous {
                reason: "simulated: timed out after sending, the request never arrived".into(),
                source: None,
            });
        }
        let amount = request.amount;
        let arrival = self.arrive(key, amount, self.clock.now_ms());
        let amount = format!("{} {}", amount.minor, amount.currency);
        let (processing_ms, fate) = match arrival {
            Arrival::KeyReused => {
                self.world
                    .tell(key, || format!("provider charge {amount}: 422 key reused"));
                return self.say(ChargeAnswer::KeyReused, key, request.amount);
            }
            Arrival::InFlight(ms) => {
                self.world
                    .tell(key, || format!("provider charge {amount}: 409 in flight"));
                let after = Duration::from_millis(ms.min(60_000));
                return self.say(ChargeAnswer::InFlight(after), key, request.amount);
            }
            Arrival::Replay(fate) => {
                self.world.tell(key, || {
                    format!("provider charge {amount}: replay of {fate:?}")
                });
                return self.say(fate_answer(fate, true), key, request.amount);
            }
            Arrival::New {
                processing_ms,
                pending: true,
                fate,
            } => {
                self.world.tell(key, || {
                    format!("provider charge {amount}: pending {processing_ms} ms, then {fate:?}")
                });
                let after = Duration::from_millis(processing_ms.min(60_000));
                return self.say(ChargeAnswer::Pending(after), key, request.amount);
            }
            Arrival::New {
                processing_ms,
                fate,
                ..
            } => (processing_ms, fate),
        };
        self.world.tell(key, || {
            format!("provider charge {amount}: accepted, {fate:?} in {processing_ms} ms")
        });
        // The money has moved (or not) whatever happens to the caller from here on.
        let timeout_ms = self.settings.client_timeout_ms;
        tokio::time::sleep(Duration::from_millis(processing_ms.min(timeout_ms))).await;
        if processing_ms > timeout_ms {
            self.world
                .tell(key, || "provider charge: the client timed out".into());
            return Err(PaymentError::Ambiguous {
                reason: "simulated: timed out after sending".into(),
                source: None,
            });
        }
        if self.world.chance(self.settings.lost_rate) {
            self.world.count(|f| f.charge_answers_lost += 1);
            self.world
                .tell(key, || "provider charge: answer lost".into());
            return Err(PaymentError::Ambiguous {
                reason: "simulated: charged, answer lost".into(),
                source: None,
            });
        }
        self.say(fate_answer(fate, false), key, request.amount)
    }

    async fn lookup(&self, request: &ChargeRequest<'_>) -> Result<ChargeStatus, PaymentError> {
        let key = request.idempotency_key;
        if let Ok(caller) = crate::world::CALLER.try_with(|caller| *caller) {
            self.world.lock().fence.looked_up(key, caller);
        }
        self.world.latency(50).await;
        self.refuse(key, "look-up")?;
        let sim_ms = self.sim_ms();
        if (self.settings.brownout.0..self.settings.brownout.1).contains(&sim_ms) {
            tokio::time::sleep(Duration::from_millis(self.settings.client_timeout_ms)).await;
            self.world.count(|f| f.lookup_errors += 1);
            self.world.tell(key, || {
                "provider look-up: the client timed out (brownout)".into()
            });
            return Err(PaymentError::Ambiguous {
                reason: "simulated: the look-up timed out".into(),
                source: None,
            });
        }
        if self.world.chance(self.settings.lookup_error_rate) {
            self.world.count(|f| f.lookup_errors += 1);
            self.world.tell(key, || "provider look-up: 503".into());
            let wire = self.settings.dialect.lookup(
                LookupAnswer::Failing,
                key,
                request.amount,
                self.settings.lookup_amounts,
            );
            return dialect::read_lookup(&wire, request.amount, self.reading());
        }
        let now_ms = self.clock.now_ms();
        let mut ledger = self.ledger();
        if let Some(known) = ledger.status.get(key)
            && now_ms.saturating_sub(known.first_seen_ms) >= self.settings.lookup_retention_ms
        {
            ledger.status.remove(key);
        }
        // What the provider knows, for the amount it was charged (another payload's charge under
        // the key is for another amount: the reader tells it is not this order's).
        let said = match ledger.status.get(key) {
            None => LookupAnswer::Missing,
            Some(known) if now_ms < known.done_at_ms => LookupAnswer::Pending(known.amount),
            Some(known) if known.fate == Fate::Charged => LookupAnswer::Charged(known.amount),
            Some(known) => LookupAnswer::Declined(known.amount),
        };
        drop(ledger);
        let wire =
            self.settings
                .dialect
                .lookup(said, key, request.amount, self.settings.lookup_amounts);
        let answer = dialect::read_lookup(&wire, request.amount, self.reading());
        if let Ok(status @ (ChargeStatus::Unknown | ChargeStatus::Unclear)) = answer {
            self.ledger()
                .unsettled_lookups
                .entry(key.to_owned())
                .or_default()
                .push(OpenLookUp {
                    at_ms: now_ms,
                    unclear: status == ChargeStatus::Unclear,
                });
        }
        self.world.tell(key, || {
            format!("provider look-up: {said:?}, read as {answer:?}")
        });
        answer
    }
}
