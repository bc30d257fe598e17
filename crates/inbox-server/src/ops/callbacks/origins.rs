//! Deliveries in flight per origin on this node, so that receivers behind one origin that
//! stop answering hold a bounded share of the node's delivery permits: many registrations may
//! point at one host, and each would otherwise take a permit for a whole timeout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The count of deliveries in flight per origin, each at most `per_origin_max`.
#[derive(Debug)]
pub(super) struct OriginSlots {
    per_origin_max: usize,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

/// One delivery's place in its origin's count, given back when dropped.
#[derive(Debug)]
pub(super) struct OriginSlot {
    origin: String,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl OriginSlots {
    pub(super) fn new(per_origin_max: usize) -> Self {
        OriginSlots { per_origin_max: per_origin_max.max(1), in_flight: Arc::default() }
    }

    /// A slot for one more delivery to `origin`, unless it has its share in flight.
    pub(super) fn try_take(&self, origin: &str) -> Option<OriginSlot> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        let n = in_flight.entry(origin.to_owned()).or_default();
        if *n >= self.per_origin_max {
            return None;
        }
        *n += 1;
        Some(OriginSlot { origin: origin.to_owned(), in_flight: self.in_flight.clone() })
    }
}

impl Drop for OriginSlot {
    fn drop(&mut self) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = in_flight.get_mut(&self.origin) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                in_flight.remove(&self.origin);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_holds_at_most_its_share_and_gets_it_back_on_drop() {
        let slots = OriginSlots::new(2);
        let a1 = slots.try_take("https://a.example").unwrap();
        let _a2 = slots.try_take("https://a.example").unwrap();
        assert!(slots.try_take("https://a.example").is_none(), "at its share");
        assert!(slots.try_take("https://b.example").is_some(), "another origin is not held up");
        drop(a1);
        assert!(slots.try_take("https://a.example").is_some());
    }

    #[test]
    fn an_idle_origin_leaves_no_entry() {
        let slots = OriginSlots::new(1);
        drop(slots.try_take("https://a.example"));
        assert!(slots.in_flight.lock().unwrap().is_empty());
    }
}
