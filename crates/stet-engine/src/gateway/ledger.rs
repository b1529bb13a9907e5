//! The cost ledger of one dispatch, the only running total of model spend: what was settled, what
//! requests in flight have reserved, and the ceiling both are held against. This file is a pure core
//! (no I/O, no clock, no runtime) so that its arithmetic is tested on its own.
//!
//! Every request under a ceiling reserves its worst case before it is forwarded and is refused when
//! that would cross the ceiling; its response settles the reservation with what it cost. A response
//! whose cost is never learnt (cut, dropped, timed out, without usage) settles at its whole
//! reservation. So, as long as the upstream honours the output cap it is sent, settled spend never
//! passes the ceiling; see docs/security.md for the bound and what it assumes.
//!
//! The ceiling lives here whole: this file is its arithmetic, `hold` the ledger as the gateway's
//! requests share it (admission, the hold each request keeps until it settles, the announcement
//! that the ceiling is reached) and `words` what the agent and the events are told about it.

mod hold;
pub(crate) mod words;

pub(crate) use hold::{Hold, Reporter, SharedLedger, admit};

/// What a request may cost at most, as far as the gateway can tell before forwarding it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WorstCase {
    /// The model is priced: its input costs `input_usd` at most, and each output token
    /// `per_output_token_usd` times the number of choices asked for.
    Priced {
        input_usd: f64,
        per_output_token_usd: f64,
        /// The output tokens the request asks for at most, `None` when it sets no cap.
        asked_output_tokens: Option<u64>,
        /// What the provider-executed tools it enables may cost, reserved whole.
        tools_usd: f64,
    },
    /// Nobody can price the model before its response: the price table does not list it.
    Unpriced { model: String },
}

/// An admitted request's hold on the budget. It is settled exactly once, by [`CostLedger::settle`].
#[derive(Debug, PartialEq)]
pub struct Reservation {
    /// Dollars held for the request until it settles.
    pub usd: f64,
    /// The output tokens reserved for each choice, which the request must be sent capped to; `None`
    /// when nothing caps it (no ceiling, or output that costs nothing).
    pub output_cap: Option<u64>,
}

impl Reservation {
    /// What settling with `cost_usd` counts: the cost when it is known (never below zero), the whole
    /// reservation when it is not.
    pub fn counted(&self, cost_usd: Option<f64>) -> f64 {
        cost_usd
            .filter(|cost| cost.is_finite())
            .map_or(self.usd, |cost| cost.max(0.0))
    }
}

/// Why a request is not forwarded.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Settled spend, with nothing in flight, leaves less than this request needs: no request of its
    /// size will ever fit again. The dispatch ends at its ceiling.
    Reached {
        /// Dollars the settled requests cost.
        spent_usd: f64,
        /// The dispatch's ceiling, in dollars.
        ceiling_usd: f64,
        /// The least this request can cost, in dollars.
        needed_usd: f64,
    },
    /// What is left is held by requests in flight; it may free when they settle.
    Held {
        /// Dollars held for requests in flight.
        reserved_usd: f64,
        /// Dollars neither settled nor held.
        available_usd: f64,
        /// The least this request can cost, in dollars.
        needed_usd: f64,
    },
    /// The request would fit without the calls its provider-executed tools are reserved for, and
    /// does not with them; a request without them may still fit, so the dispatch goes on.
    ToolsUnaffordable {
        /// Dollars neither settled nor held.
        available_usd: f64,
        /// What its tools reserve, in dollars.
        tools_usd: f64,
        /// The least this request can cost, its tools included, in dollars.
        needed_usd: f64,
    },
    /// A model the price table does not list, on an endpoint that has not reported a cost itself.
    UnknownPrice {
        /// The model the request names.
        model: String,
    },
}

/// A ledger's figures at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Totals {
    /// What responses cost (or, where that is unknown, what they had reserved).
    pub settled_usd: f64,
    /// What requests in flight hold.
    pub reserved_usd: f64,
    /// The most ever held at once: with `settled_usd`, the spend the ceiling was defended against.
    pub peak_reserved_usd: f64,
    /// Requests in flight.
    pub open: u32,
}

/// One dispatch's spend and the ceiling it is held against.
#[derive(Debug, Clone)]
pub struct CostLedger {
    ceiling_usd: Option<f64>,
    totals: Totals,
    /// The endpoint put its own cost on a response (LiteLLM's `x-litellm-response-cost`).
    endpoint_reports_cost: bool,
}

impl CostLedger {
    /// A ledger with nothing spent; `ceiling_usd` of `None` holds nothing back.
    pub fn new(ceiling_usd: Option<f64>) -> CostLedger {
        CostLedger {
            ceiling_usd,
            totals: Totals::default(),
            endpoint_reports_cost: false,
        }
    }

    pub(crate) fn ceiling_usd(&self) -> Option<f64> {
        self.ceiling_usd
    }

    pub(crate) fn totals(&self) -> Totals {
        self.totals
    }

    /// Whether settled spend has reached the ceiling (a ceiling of zero is reached from the start).
    pub fn reached(&self) -> bool {
        self.ceiling_usd
            .is_some_and(|ceiling| self.totals.settled_usd >= ceiling)
    }

    /// Notes that the endpoint reports each response's cost itself; a model the table does not
    /// price is admitted from then on (one at a time, holding everything left).
    pub fn endpoint_reports_cost(&mut self) {
        self.endpoint_reports_cost = true;
    }

    /// Admits a request or says why not. Without a ceiling every request is admitted and reserves
    /// nothing. Under one, a priced request reserves its input, the calls of its provider tools, and
    /// as much output as it asks for and the budget left pays for (at least one token; the cap it must then be sent with is returned);
    /// an unpriced one is refused unless the endpoint reports cost, and then reserves all that is left.
    pub(crate) fn admit(&mut self, worst: &WorstCase) -> Result<Reservation, Refusal> {
        let Some(ceiling) = self.ceiling_usd else {
            return Ok(self.hold(0.0, None));
        };
        let Totals {
            settled_usd,
            reserved_usd,
            open,
            ..
        } = self.totals;
        let available = (ceiling - settled_usd - reserved_usd).max(0.0);
        let refuse = |needed_usd: f64| {
            if open == 0 {
                Refusal::Reached {
                    spent_usd: settled_usd,
                    ceiling_usd: ceiling,
                    needed_usd,
                }
            } else {
                Refusal::Held {
                    reserved_usd,
                    available_usd: available,
                    needed_usd,
                }
            }
        };
        if self.reached() {
            return Err(refuse(0.0));
        }
        match worst {
            WorstCase::Unpriced { model } => {
                if !self.endpoint_reports_cost {
                    return Err(Refusal::UnknownPrice {
                        model: model.clone(),
                    });
                }
                if open > 0 {
                    return Err(refuse(available));
                }
                Ok(self.hold(available, None))
            }
            WorstCase::Priced {
                input_usd,
                per_output_token_usd,
                asked_output_tokens,
                tools_usd,
            } => {
                // The tools' calls are held like input: whole, before the output is sized.
                let tools_usd = tools_usd.max(0.0);
                let input_usd = input_usd.max(0.0) + tools_usd;
                let per_token = per_output_token_usd.max(0.0);
                let least = input_usd + per_token;
                if least > available {
                    if tools_usd > 0.0 && open == 0 && least - tools_usd <= available {
                        return Err(Refusal::ToolsUnaffordable {
                            available_usd: available,
                            tools_usd,
                            needed_usd: least,
                        });
                    }
                    return Err(refuse(least));
                }
                if per_token == 0.0 {
                    return Ok(self.hold(input_usd, None));
                }
                // At least one token fits (`least` does); `as` saturates, and the floor keeps the
                // reservation within what is available.
                let affordable = (((available - input_usd) / per_token).floor() as u64).max(1);
                let tokens =
                    asked_output_tokens.map_or(affordable, |asked| asked.clamp(1, affordable));
                Ok(self.hold(input_usd + tokens as f64 * per_token, Some(tokens)))
            }
        }
    }

    fn hold(&mut self, usd: f64, output_cap: Option<u64>) -> Reservation {
        self.totals.reserved_usd += usd;
        self.totals.open += 1;
        self.totals.peak_reserved_usd = self.totals.peak_reserved_usd.max(self.totals.reserved_usd);
        Reservation { usd, output_cap }
    }

    /// Settles `reservation` with what the request cost, `None` when that is unknown (the whole
    /// reservation then counts). Returns the totals after it.
    pub fn settle(&mut self, reservation: Reservation, cost_usd: Option<f64>) -> Totals {
        let cost = reservation.counted(cost_usd);
        self.totals.reserved_usd = (self.totals.reserved_usd - reservation.usd).max(0.0);
        self.totals.open = self.totals.open.saturating_sub(1);
        if self.totals.open == 0 {
            // Sums of floats drift; nothing is held when nothing is open.
            self.totals.reserved_usd = 0.0;
        }
        self.totals.settled_usd += cost;
        self.totals
    }
}

#[cfg(test)]
mod tests;
