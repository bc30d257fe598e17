//! The conformance suite (to come).
